#!/usr/bin/python3
"""ops.py: the timed operations of `make bench`, one per subcommand, each run as a child.

The harness runs every operation on a mount in its own process, with a
timeout: a hung FUSE daemon then costs one "failed" figure, not the run.
Each subcommand prints one JSON object on stdout (counts and seconds; the
harness turns them into rates). Operations that cap themselves by time
(`--timebox`) say how many files they reached, so a slow peer is measured
on fewer files and reported per second.

  meta DIR N TIMEBOX            create, stat and unlink N 4 KiB files
  lookups DIR N TIMEBOX         stat of N names DIR does not hold, each
                                another (on FUSE, one LOOKUP request each)
  sqlite DB MODE TIMEBOX MAXN   commits/s, journal_mode MODE (delete|wal)
  write DIR THREADS MIB         one file per thread, written, fsynced, closed
  read DIR THREADS MIB          read back and check what write wrote
  mixed DIR SECONDS              4 KiB direct random reads of a cached file
                                while another process creates files
  ranged-get BUCKET KEY SIZE CHUNK READERS TIMEBOX
                                raw S3: ranged GETs of CHUNK bytes, READERS
                                in parallel at disjoint offsets (boto3)
  ranged-gets BUCKET JSON TIMEBOX
                                the same for each [KEY, SIZE, CHUNK, READERS]
"""

import json
import os
import random
import sqlite3
import struct
import sys
import threading
import time

CHUNK = 1 << 20


def pattern_block(seed):
    """1 MiB of seeded random bytes: the content unit of a bench file."""
    return random.Random(seed).randbytes(CHUNK)


def chunk_at(block, i):
    """The i-th MiB of a file whose block is block: the block with its first
    8 bytes replaced by i, so a read from a wrong offset shows."""
    return struct.pack("<Q", i) + block[8:]


def op_meta(d, n, timebox):
    os.makedirs(d, exist_ok=True)
    data = os.urandom(4096)
    out = {}
    t0 = time.perf_counter()
    created = 0
    for i in range(n):
        fd = os.open(f"{d}/f{i:05}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
        created += 1
        if time.perf_counter() - t0 > timebox:
            break
    out["create"] = {"n": created, "s": time.perf_counter() - t0}
    # stat: passes over every file until 0.5 s have gone (one pass at least)
    t0 = time.perf_counter()
    stats = 0
    for _ in range(20):
        for i in range(created):
            os.stat(f"{d}/f{i:05}")
            stats += 1
            if time.perf_counter() - t0 > timebox:
                break
        if time.perf_counter() - t0 > 0.5:
            break
    out["stat"] = {"n": stats, "s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    unlinked = 0
    for i in range(created):
        os.unlink(f"{d}/f{i:05}")
        unlinked += 1
        if time.perf_counter() - t0 > timebox:
            break
    out["unlink"] = {"n": unlinked, "s": time.perf_counter() - t0}
    return out


def op_lookups(d, n, timebox):
    """stat of n names that are not in d, none twice: a FUSE filesystem
    gets one LOOKUP for each, which nothing can have cached."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    done = 0
    t0 = time.perf_counter()
    for i in range(n):
        try:
            os.stat(f"{d}/absent-{tag}-{i}")
        except FileNotFoundError:
            pass
        else:
            raise RuntimeError(f"{d}/absent-{tag}-{i} exists")
        done += 1
        if time.perf_counter() - t0 > timebox:
            break
    return {"n": done, "s": time.perf_counter() - t0}


def op_sqlite(db, mode, timebox, maxn):
    con = sqlite3.connect(db, isolation_level=None)
    got = con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    if got.lower() != mode.lower():
        raise RuntimeError(f"journal_mode {mode} refused: SQLite answered {got}")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)")
    row = os.urandom(100)
    n = 0
    t0 = time.perf_counter()
    while n < maxn and time.perf_counter() - t0 < timebox:
        con.execute("BEGIN")
        con.execute("INSERT INTO t (v) VALUES (?)", (row,))
        con.execute("COMMIT")
        n += 1
    s = time.perf_counter() - t0
    ok = con.execute("PRAGMA integrity_check").fetchone()[0]
    count = con.execute("SELECT count(*) FROM t").fetchone()[0]
    con.close()
    if ok != "ok" or count < n:
        raise RuntimeError(f"integrity_check {ok!r}, {count} rows for {n} commits")
    return {"n": n, "s": s, "mode": got}


def _creator(d, seconds, count):
    """Creates 4 KiB files in d for seconds; their number into count."""
    data = os.urandom(4096)
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fd = os.open(f"{d}/f{n:07}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
        n += 1
    count.value = n


def op_mixed(d, seconds):
    """A reader that waits on a writer it shares nothing with: 4 KiB
    O_DIRECT reads at random offsets of a 64 MiB file, written and read
    once first (so cached), while another process creates 4 KiB files in
    a directory of their own (pip install beside a data loader). Returns
    the reads' rate and latency percentiles, and the creates' rate."""
    import mmap
    import multiprocessing
    os.makedirs(f"{d}/c", exist_ok=True)
    path, size = f"{d}/cached", 64 << 20
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    with open(path, "rb") as f:
        while f.read(CHUNK):
            pass
    count = multiprocessing.Value("q", 0)
    creator = multiprocessing.Process(target=_creator, args=(f"{d}/c", seconds, count))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    rnd = random.Random(1)
    lat = []
    errors = []
    creator.start()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            off = rnd.randrange(size // 4096) * 4096
            t = time.perf_counter()
            n = os.preadv(fd, [buf], off)
            lat.append(time.perf_counter() - t)
            if n != 4096:
                errors.append(f"read {n} bytes at {off}")
                break
    finally:
        os.close(fd)
        creator.join()
    s = time.monotonic() - t0
    if creator.exitcode != 0:
        errors.append(f"the creator exited {creator.exitcode}")
    lat.sort()
    pct = {f"p{q}": lat[min(len(lat) - 1, int(len(lat) * q / 100))] if lat else 0
           for q in (50, 99, 99.9)}
    return {"reads": len(lat), "s": s, "creates": count.value, **pct,
            "max": lat[-1] if lat else 0, "errors": errors}


def _parallel(fn, threads):
    errors = []

    def run(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported, not swallowed
            errors.append(f"file {i}: {e!r}")

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def op_write(d, threads, mib):
    os.makedirs(d, exist_ok=True)
    blocks = [pattern_block(i) for i in range(threads)]
    done = [0.0] * threads
    t0 = time.perf_counter()

    def write(i):
        with open(f"{d}/s{i:03}", "wb", buffering=0) as f:
            for c in range(mib):
                f.write(chunk_at(blocks[i], c))
            f.flush()
            os.fsync(f.fileno())
        done[i] = time.perf_counter() - t0

    errors = _parallel(write, threads)
    return {"s": time.perf_counter() - t0, "per_file_s": done,
            "bytes": threads * mib * CHUNK, "errors": errors}


def op_read(d, threads, mib):
    blocks = [pattern_block(i) for i in range(threads)]
    bad = []
    t0 = time.perf_counter()

    def read(i):
        buf = bytearray(CHUNK)
        with open(f"{d}/s{i:03}", "rb", buffering=0) as f:
            for c in range(mib):
                n = f.readinto(buf)
                if n != CHUNK or buf != chunk_at(blocks[i], c):
                    bad.append(f"s{i:03}: MiB {c} differs (read {n} bytes)")
                    return
            if f.read(1):
                bad.append(f"s{i:03}: longer than {mib} MiB")

    errors = _parallel(read, threads)
    return {"s": time.perf_counter() - t0, "bytes": threads * mib * CHUNK,
            "errors": errors + bad}


def s3_client(connections):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        config=Config(max_pool_connections=connections,
                                      retries={"max_attempts": 3}))


def op_ranged_gets(bucket, spec, timebox):
    """Every [key, size, chunk, readers] of spec in turn, one client."""
    s3 = s3_client(max(r for _, _, _, r in spec))
    out = [op_ranged_get(bucket, k, size, chunk, readers, timebox, s3)
           for k, size, chunk, readers in spec]
    return {"results": out, "errors": [e for r in out for e in r["errors"]]}


def op_ranged_get(bucket, key, size, chunk, readers, timebox, s3=None):
    s3 = s3 or s3_client(readers)
    s3.head_object(Bucket=bucket, Key=key)  # connect and sign once
    span = size // readers
    got = [0] * readers
    t0 = time.perf_counter()

    def reader(i):
        off, end = i * span, (i + 1) * span
        while off < end and time.perf_counter() - t0 < timebox:
            n = min(chunk, end - off)
            r = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{off + n - 1}")
            got[i] += len(r["Body"].read())
            off += n

    errors = _parallel(reader, readers)
    return {"s": time.perf_counter() - t0, "bytes": sum(got), "errors": errors}


def main(argv):
    op, args = argv[1], argv[2:]
    if op == "meta":
        r = op_meta(args[0], int(args[1]), float(args[2]))
    elif op == "lookups":
        r = op_lookups(args[0], int(args[1]), float(args[2]))
    elif op == "sqlite":
        r = op_sqlite(args[0], args[1], float(args[2]), int(args[3]))
    elif op == "write":
        r = op_write(args[0], int(args[1]), int(args[2]))
    elif op == "read":
        r = op_read(args[0], int(args[1]), int(args[2]))
    elif op == "mixed":
        r = op_mixed(args[0], float(args[1]))
    elif op == "ranged-gets":
        r = op_ranged_gets(args[0], json.loads(args[1]), float(args[2]))
    elif op == "ranged-get":
        r = op_ranged_get(args[0], args[1], int(args[2]), int(args[3]),
                          int(args[4]), float(args[5]))
    else:
        raise SystemExit(f"ops.py: unknown operation {op!r}")
    json.dump(r, sys.stdout)
    print()
    return 1 if r.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
