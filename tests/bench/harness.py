#!/usr/bin/python3
"""harness.py: `make bench`: the same workloads on tierfs, its peers, the local disk and raw S3.

Targets (tests/bench/peers.py): the local disk (the physical limit), tierfs
with --durability s3 and with local, rclone --vfs-cache-mode full, s3fs
use_cache, and S3 itself where a workload has a raw form; the empty FUSE
server (build/fuse-floor) only for what one request costs. Each workload runs
BENCH_RUNS times (3); in each run every target takes its turn, the order
rotating from run to run, so that the noise of a shared 2-core machine falls
on all of them. Timed operations run as children (tests/bench/ops.py, fio,
tar, git) with a timeout: a peer that fails to mount, hangs or errs gets
"failed" for that figure and the run goes on.

Output (tests/bench/report.py): a table with each figure's median, spread,
ratio to the local disk and to the best peer, its DESIGN §8 bar and a
met/MISSED verdict; the same in bench/results/bench.json; a chart in
bench/results/bench.png (gnuplot).

Data sets that every run reads (the 100,000-file volume, the 25,000-entry
directory, the large files of the cold reads) are made once in the bench
bucket and kept; scratch prefixes of a run are deleted at its end.

Env: BENCH_QUICK=1 (a ~3 minute smoke run), BENCH_RUNS, BENCH_BUCKET,
BENCH_ONLY=w1,w2 (workloads), BENCH_TARGETS=t1,t2, BENCH_WORKDIR, and one
variable per size (see Config).
"""

import concurrent.futures
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import peers  # noqa: E402
import report  # noqa: E402
from report import Figure  # noqa: E402

ROOT = peers.ROOT
TIERFS = peers.TIERFS
TIERFSCTL = os.path.join(ROOT, "build", "tierfsctl")
OPS = os.path.join(HERE, "ops.py")
PY = "/usr/bin/python3"
MIB = 1 << 20
FUSE_TARGETS = ("tierfs-s3", "tierfs-local", "rclone", "s3fs")
ALL_TARGETS = ("local",) + FUSE_TARGETS
# what a read-only workload runs on: --durability changes nothing there
READ_TARGETS = ("local", "tierfs-s3", "rclone", "s3fs")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Config:
    """Every size and count, full or BENCH_QUICK, each overridable by env."""

    def __init__(self):
        q = os.environ.get("BENCH_QUICK", "") not in ("", "0")

        def e(name, full, quick, conv=int):
            v = os.environ.get(name)
            return conv(v) if v else (quick if q else full)

        def lst(name, full, quick):
            v = os.environ.get(name)
            return [int(x) for x in v.split(",")] if v else (quick if q else full)
        self.quick = q
        self.runs = e("BENCH_RUNS", 3, 1)
        self.bucket = os.environ.get("BENCH_BUCKET", "tierfs-bench")
        self.workdir = os.environ.get("BENCH_WORKDIR", "/var/tmp/tierfs-bench")
        # fio, JupyterHub's NFS/EFS comparison, sized down
        self.fio_size_mib = e("BENCH_FIO_SIZE_MIB", 16, 8)   # per job
        self.fio_runtime = e("BENCH_FIO_RUNTIME", 3, 2)       # seconds
        self.fio_seq_mib = e("BENCH_FIO_SEQ_MIB", 256, 64)    # seq-1m.fio's FIO_SIZE
        # Keep-style streams: 1 and N threads of STREAM_MIB files
        self.stream_mib = e("BENCH_STREAM_MIB", 64, 16)
        self.stream_threads = e("BENCH_STREAM_THREADS", 20, 8)
        # one long stream + fsync, cold read (seq-1m.fio writes one too)
        self.seq_mib = e("BENCH_SEQ_MIB", 0, 0)
        # LeoFS-style large objects: by default the N streams above serve
        # (N writers, then N readers warm and cold); BENCH_LEO_MIB=256 adds
        # a set of its own of that size
        self.leo_files = e("BENCH_LEO_FILES", 20, 4)
        self.leo_mib = e("BENCH_LEO_MIB", 0, 0)
        # grail filebench-style cold reads
        self.grail_mib = e("BENCH_GRAIL_MIB", 256, 64)
        self.grail_chunks_kib = lst("BENCH_GRAIL_CHUNKS_KIB", [1, 8, 64, 512, 4096],
                                    [1, 64, 4096])
        self.grail_readers = lst("BENCH_GRAIL_READERS", [1, 8, 64], [1, 8])
        # a cap: a run reads its whole file unless this many seconds pass
        # first; a cold file's first GETs take a few tenths of a second, so
        # a cap near that measures the start and not the throughput
        self.grail_timebox = e("BENCH_GRAIL_TIMEBOX", 2.5, 1.0, float)
        # metadata
        self.meta_files = e("BENCH_META_FILES", 10000, 1000)
        self.meta_timebox = e("BENCH_META_TIMEBOX", 5.0, 2.0, float)  # per phase
        # one FUSE request: stats of absent names, each its own LOOKUP
        self.lookups = e("BENCH_LOOKUPS", 20000, 5000)
        self.lookup_timebox = e("BENCH_LOOKUP_TIMEBOX", 2.0, 1.0, float)
        self.ls_entries = e("BENCH_LS_ENTRIES", 25000, 2000)
        # rclone and s3fs have never listed it within 60 s here: past 20 s
        # they are 10 times slower than tierfs, and a run waits 40 s less
        self.ls_timeout = e("BENCH_LS_TIMEOUT", 20, 20)
        self.tar_files = e("BENCH_TAR_FILES", 10000, 1000)
        # the peers' tar caps: rclone took 36 s for 10,000 files, and as
        # long again to remove them; s3fs 8 s for 100
        self.peer_tar_files = {"s3fs": e("BENCH_S3FS_FILES", 100, 50),
                               "rclone": e("BENCH_RCLONE_FILES", 1000, 500)}
        self.sqlite_timebox = e("BENCH_SQLITE_TIMEBOX", 2.0, 1.0, float)
        self.sqlite_max = e("BENCH_SQLITE_MAX", 5000, 1000)
        # cold start
        self.cold_dirs = e("COLD_DIRS", 100, 10)
        self.cold_per_dir = e("COLD_FILES_PER_DIR", 1000, 100)
        self.cold_walk_timeout = e("BENCH_COLD_WALK_TIMEOUT", 60, 20)
        # raw S3 and crash cost
        self.raw_size = os.environ.get("BENCH_SIZE", "256M" if q else "512M")
        self.raw_threads = e("BENCH_THREADS", 8, 8)
        self.restart = e("BENCH_RESTART", 1, 0)

    def as_dict(self):
        return dict(vars(self))


class OpFailed(Exception):
    pass


class Ctx:
    def __init__(self, cfg, env, targets):
        import boto3
        from botocore.config import Config as BotoConfig
        self.cfg, self.env, self.targets = cfg, env, targets
        self.res = report.Results()
        self.s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                               config=BotoConfig(max_pool_connections=32))
        self.scratch = f"run-{time.strftime('%Y%m%d-%H%M%S')}"
        self.rss = {}        # target -> workload -> peak KiB
        self.timing = {}     # workload -> seconds
        self.timed_out = set()  # (figure, target) that hit their timeout

    # -- S3 ----------------------------------------------------------------
    def wait_s3(self, limit=300):
        """Waits until the local S3 answers (another test may restart it)."""
        deadline = time.monotonic() + limit
        while True:
            try:
                self.s3.head_bucket(Bucket=self.cfg.bucket)
                return
            except Exception as e:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise OpFailed(f"S3 unreachable for {limit} s: {e}")
                log(f"S3 not answering ({e.__class__.__name__}); waiting")
                time.sleep(5)

    def size_of(self, key):
        try:
            return self.s3.head_object(Bucket=self.cfg.bucket, Key=key)["ContentLength"]
        except Exception:  # noqa: BLE001
            return None

    def durable_s(self, out, want, returned):
        """Seconds from an ops.py write's first byte until every key in
        want has its size in S3: the op's own time (out["s"]), then the
        wait from when it returned (time.monotonic()). The helper
        process's start and exit count for no target."""
        return out["s"] + self.wait_durable(want, returned)

    def wait_durable(self, want, t0, limit=600):
        """Polls HEAD until every key in want ({key: size}) has its size in
        S3; returns the seconds since t0 (time.monotonic) when they all did."""
        left = dict(want)
        deadline = time.monotonic() + limit
        while left:
            for k in list(left):
                if self.size_of(k) == left[k]:
                    del left[k]
            if not left:
                break
            if time.monotonic() > deadline:
                raise OpFailed(f"{len(left)} objects not in S3 after {limit} s, "
                               f"e.g. {next(iter(left))}")
            time.sleep(0.05)
        return time.monotonic() - t0

    def delete_prefix(self, prefix):
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.cfg.bucket, Prefix=prefix):
            keys += [{"Key": o["Key"]} for o in page.get("Contents", [])]
        batches = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda b: self.s3.delete_objects(
                Bucket=self.cfg.bucket, Delete={"Objects": b}), batches))

    # -- running things ----------------------------------------------------
    def run(self, argv, timeout, target=None, cwd=None, env=None):
        """Runs argv; on timeout aborts target's mount (a hung daemon),
        kills argv and raises OpFailed. Returns the CompletedProcess. A
        FUSE target whose mount was aborted is never run on (its bare
        directory is not the filesystem under test)."""
        if target is not None and target.fuse and not target.mountpoint:
            raise OpFailed(f"{target.name} is not mounted (aborted after a timeout)")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=cwd, env=env or self.env,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if target is not None and target.mountpoint and target.fuse:
                peers.abort_fuse(target.mountpoint)
                target.mountpoint = None
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.communicate()
            raise OpFailed(f"{os.path.basename(argv[0])} {argv[1] if len(argv) > 1 else ''}"
                           f" timed out after {timeout:.0f} s")
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def op(self, target, args, timeout):
        """Runs one tests/bench/ops.py operation; returns its JSON."""
        r = self.run([PY, OPS] + [str(a) for a in args], timeout, target)
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise OpFailed(f"ops.py {args[0]} exited {r.returncode}: "
                           f"{r.stderr.strip()[-400:]}")
        if r.returncode != 0 or out.get("errors"):
            raise OpFailed(f"ops.py {args[0]}: {'; '.join(out.get('errors', []))[:400]}")
        return out

    def measure(self, figs, target, fn):
        """Runs fn(); on failure marks figs failed for target. True if it ran.
        Figures that timed out on a target in an earlier run are not tried
        again (a peer too slow for the timeout stays so)."""
        if all((f, target.name) in self.timed_out for f in figs):
            log(f"  {target.name}: {', '.join(figs)}: skipped, timed out before")
            return False
        try:
            fn()
            return True
        except Exception as e:  # noqa: BLE001 - a failed figure, never a failed run
            if isinstance(e, OpFailed) and "timed out" in str(e):
                self.timed_out.update((f, target.name) for f in figs)
            for f in figs:
                self.res.fail(f, target.name, str(e)[:300])
            log(f"  {target.name}: {', '.join(figs)} failed: {str(e)[:300]}")
            return False

    def prefix(self, target, workload, r):
        return f"{self.scratch}/{target.name}/{workload}-r{r}"


class RawS3:
    """The pseudo-target S3 itself, for workloads with a raw form."""
    name, label, fuse, mountpoint = "raw", "raw S3", False, None

    def unmount(self):
        pass


# -- workloads -----------------------------------------------------------------
# Each: figures(cfg) -> [Figure], optional prepare(ctx), run(ctx, target, r)
# for every target (RawS3 included when raw is True), and targets it serves.


class Workload:
    name = "?"
    title = "?"
    raw = False
    serves = ALL_TARGETS

    def figures(self, cfg):
        return []

    def prepare(self, ctx):
        pass

    def run(self, ctx, t, r):
        raise NotImplementedError

    def prefixes(self, ctx, t, r):
        """The prefixes run(ctx, t, r) mounted (their caches are dropped)."""
        ds = getattr(self, "dataset", None)
        return [ds(ctx.cfg)] if ds else [ctx.prefix(t, self.name, r)]


def fio_json(text):
    i = text.find("{")
    if i < 0:
        raise OpFailed(f"fio printed no JSON: {text[-300:]}")
    return json.loads(text[i:])


FIO_JOBS = os.path.join(ROOT, "bench", "fio")  # shared with deploy/bench/


class Fio(Workload):
    """JupyterHub's NFS/EFS comparison, bench/fio/jupyterhub-randrw.fio as it
    is (4k randrw, direct, libaio, iodepth 256, 4 jobs), and the same file
    with iodepth 64 and 2 jobs, on files that the target has laid out and
    put in S3 first (a cache hit); then bench/fio/seq-1m.fio (1 MiB
    sequential write with an fsync at the end, then read back warm)."""
    name, title = "fio", "fio: bench/fio/jupyterhub-randrw.fio, seq-1m.fio"
    CONFIGS = (("256x4", 256, 4), ("64x2", 64, 2))

    def figures(self, cfg):
        out = []
        for c, depth, jobs in self.CONFIGS:
            tag = f"fio randrw qd{depth} j{jobs}"
            out += [Figure(f"fio-{c}-riops", f"{tag} read IOPS", "IOPS",
                           bar=("local", 0.8), group=self.title),
                    Figure(f"fio-{c}-wiops", f"{tag} write IOPS", "IOPS",
                           bar=("local", 0.8), group=self.title),
                    Figure(f"fio-{c}-rp99", f"{tag} read p99", "ms", better="low",
                           group=self.title),
                    Figure(f"fio-{c}-wp99", f"{tag} write p99", "ms", better="low",
                           group=self.title)]
        tag = f"fio seq 1M {cfg.fio_seq_mib} MiB"
        # tierfs s3's fsync returns once the file is in S3: DESIGN's
        # "sequential write + fsync, durable in S3" row
        out += [Figure("fio-seq-w", f"{tag} write + fsync", "MiB/s",
                       bar=("raw", "raw-put", 0.9), raw_ref="raw-put", group=self.title),
                Figure("fio-seq-r", f"{tag} read, warm", "MiB/s", group=self.title)]
        return out

    def jobfile(self, ctx, depth, jobs):
        src = os.path.join(FIO_JOBS, "jupyterhub-randrw.fio")
        if (depth, jobs) == (256, 4):
            return src
        # issue 6's second configuration: the same job, two lines changed
        text = open(src).read()
        for a in ("iodepth=256\n", "numjobs=4\n"):
            if a not in text:
                raise OpFailed(f"{src} has no line {a.strip()!r} to change")
        text = text.replace("iodepth=256\n", f"iodepth={depth}\n")
        text = text.replace("numjobs=4\n", f"numjobs={jobs}\n")
        path = os.path.join(ctx.cfg.workdir, f"jupyterhub-randrw-qd{depth}-j{jobs}.fio")
        with open(path, "w") as f:
            f.write(text)
        return path

    def fio(self, ctx, t, job, d, size_mib, runtime, *extra):
        env = dict(ctx.env, FIO_DIR=d, FIO_SIZE=f"{size_mib}m", FIO_RUNTIME=str(runtime))
        p = ctx.run(["fio", "--output-format=json", *extra, job], runtime + 600, t,
                    env=env)
        if p.returncode != 0:
            raise OpFailed(f"fio {os.path.basename(job)} exited {p.returncode}: "
                           f"{p.stderr[-300:]}")
        return p

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        mnt = t.mount(ctx.prefix(t, self.name, r))
        want = {}
        for c, depth, jobs in self.CONFIGS:
            d = os.path.join(mnt, c)
            os.makedirs(d, exist_ok=True)
            self.fio(ctx, t, self.jobfile(ctx, depth, jobs), d, cfg.fio_size_mib,
                     cfg.fio_runtime, "--create_only=1")
            if t.key("x"):
                for j in range(jobs):
                    want[t.key(f"{c}/jupyterhub-randrw.{j}.0")] = cfg.fio_size_mib * MIB
        if want:  # the files are in S3 before the timed part: a cache hit
            ctx.wait_durable(want, time.monotonic())
        for c, depth, jobs in self.CONFIGS:
            ids = [f"fio-{c}-{k}" for k in ("riops", "wiops", "rp99", "wp99")]

            def one():
                p = self.fio(ctx, t, self.jobfile(ctx, depth, jobs),
                             os.path.join(mnt, c), cfg.fio_size_mib, cfg.fio_runtime)
                j = fio_json(p.stdout)["jobs"][0]
                vals = (j["read"]["iops"], j["write"]["iops"],
                        j["read"]["clat_ns"]["percentile"]["99.000000"] / 1e6,
                        j["write"]["clat_ns"]["percentile"]["99.000000"] / 1e6)
                for fid, v in zip(ids, vals):
                    ctx.res.add(fid, t.name, v)
                log(f"  {t.name} qd{depth}: {vals[0]:.0f}/{vals[1]:.0f} IOPS, "
                    f"p99 {vals[2]:.1f}/{vals[3]:.1f} ms")
            ctx.measure(ids, t, one)

        def seq():
            d = os.path.join(mnt, "seq")
            os.makedirs(d, exist_ok=True)
            p = self.fio(ctx, t, os.path.join(FIO_JOBS, "seq-1m.fio"), d,
                         cfg.fio_seq_mib, 120)
            jobs = {j["jobname"]: j for j in fio_json(p.stdout)["jobs"]}
            w = jobs["seq-write-1m"]["write"]["bw_bytes"] / MIB
            rd = jobs["seq-read-1m"]["read"]["bw_bytes"] / MIB
            ctx.res.add("fio-seq-w", t.name, w)
            ctx.res.add("fio-seq-r", t.name, rd)
            log(f"  {t.name} seq-1m: write {w:.0f} MiB/s, read {rd:.0f} MiB/s")
        ctx.measure(["fio-seq-w", "fio-seq-r"], t, seq)


class Streams(Workload):
    """Keep-style single and many streams, and one long sequential stream
    (DESIGN §8's 1 GiB + fsync): write (each file fsynced and closed), the
    time until it is all in S3, then a cold read (cache emptied)."""
    name, title = "streams", "streams (Keep-style; N writers then readers: LeoFS-style)"

    def sets(self, cfg):
        out = (("s1", 1, cfg.stream_mib, f"1 x {cfg.stream_mib} MiB"),
               ("sN", cfg.stream_threads, cfg.stream_mib,
                f"{cfg.stream_threads} x {cfg.stream_mib} MiB"))
        if cfg.seq_mib:
            out += (("seq", 1, cfg.seq_mib, f"1 x {cfg.seq_mib} MiB"),)
        return out

    def figures(self, cfg):
        out = []
        for s, _, _, tag in self.sets(cfg):
            # rclone's and s3fs's fsync, like tierfs local's, ends on the
            # local disk: that is the tierfs the write + fsync row judges
            out += [Figure(f"{s}-w", f"write {tag} + fsync", "MiB/s",
                           judged="tierfs-local", group=self.title),
                    Figure(f"{s}-durable", f"write {tag}, durable in S3", "MiB/s",
                           bar=("raw", "raw-put", 0.9), raw_ref="raw-put",
                           group=self.title),
                    Figure(f"{s}-rcold", f"cold read {tag}", "MiB/s",
                           bar=("raw", "raw-get", 0.9), raw_ref="raw-get",
                           group=self.title)]
            if s == "sN":
                out.append(Figure("sN-rwarm", f"warm read {tag}", "MiB/s",
                                  group=self.title))
        return out

    def run(self, ctx, t, r):
        prefix = ctx.prefix(t, self.name, r)
        mnt = t.mount(prefix)
        written = []
        for s, threads, mib, _ in self.sets(ctx.cfg):
            def write():
                out = ctx.op(t, ["write", os.path.join(mnt, s), threads, mib],
                             60 + threads * mib / 5)
                returned = time.monotonic()
                ctx.res.add(f"{s}-w", t.name, out["bytes"] / MIB / out["s"])
                if t.key("x"):
                    want = {t.key(f"{s}/s{i:03}"): mib * MIB for i in range(threads)}
                    dur = ctx.durable_s(out, want, returned)
                    ctx.res.add(f"{s}-durable", t.name, out["bytes"] / MIB / dur)
                    log(f"  {t.name} {s}: write {out['bytes'] / MIB / out['s']:.0f} MiB/s, "
                        f"durable {out['bytes'] / MIB / dur:.0f} MiB/s")
                written.append((s, threads, mib))
            ctx.measure([f"{s}-w", f"{s}-durable"], t, write)
        if any(w[0] == "sN" for w in written):
            # LeoFS-style: the N writers' files read back at once, warm
            def warm():
                n, mib = ctx.cfg.stream_threads, ctx.cfg.stream_mib
                out = ctx.op(t, ["read", os.path.join(mnt, "sN"), n, mib], 60 + n * mib / 5)
                ctx.res.add("sN-rwarm", t.name, out["bytes"] / MIB / out["s"])
                log(f"  {t.name} sN: warm read {out['bytes'] / MIB / out['s']:.0f} MiB/s")
            ctx.measure(["sN-rwarm"], t, warm)
        t.unmount()
        mnt = t.mount(prefix, cold=True)
        if not t.fuse:
            peers.drop_page_cache(mnt)
        for s, threads, mib in written:
            def read():
                out = ctx.op(t, ["read", os.path.join(mnt, s), threads, mib],
                             60 + threads * mib / 5)
                ctx.res.add(f"{s}-rcold", t.name, out["bytes"] / MIB / out["s"])
                log(f"  {t.name} {s}: cold read {out['bytes'] / MIB / out['s']:.0f} MiB/s")
            ctx.measure([f"{s}-rcold"], t, read)


class Leofs(Workload):
    """LeoFS-style large objects: N parallel writers, then N readers warm
    (as written) and cold (cache emptied)."""
    name, title = "leofs", "large files (LeoFS-style)"

    def figures(self, cfg):
        tag = f"{cfg.leo_files} x {cfg.leo_mib} MiB"
        return [Figure("leo-w", f"write {tag} + fsync", "MiB/s", judged="tierfs-local",
                       group=self.title),
                Figure("leo-durable", f"write {tag}, durable in S3", "MiB/s",
                       bar=("raw", "raw-put", 0.9), raw_ref="raw-put", group=self.title),
                Figure("leo-rwarm", f"warm read {tag}", "MiB/s", group=self.title),
                Figure("leo-rcold", f"cold read {tag}", "MiB/s",
                       bar=("raw", "raw-get", 0.9), raw_ref="raw-get", group=self.title)]

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        prefix = ctx.prefix(t, self.name, r)
        mnt = t.mount(prefix)
        n, mib = cfg.leo_files, cfg.leo_mib
        d = os.path.join(mnt, "leo")
        out = ctx.op(t, ["write", d, n, mib], 60 + n * mib / 5)
        returned = time.monotonic()
        ctx.res.add("leo-w", t.name, out["bytes"] / MIB / out["s"])
        if t.key("x"):
            def durable():
                dur = ctx.durable_s(out, {t.key(f"leo/s{i:03}"): mib * MIB
                                          for i in range(n)}, returned)
                ctx.res.add("leo-durable", t.name, out["bytes"] / MIB / dur)
            ctx.measure(["leo-durable"], t, durable)
        for kind in ("rwarm", "rcold"):
            if kind == "rcold":
                t.unmount()
                mnt = t.mount(prefix, cold=True)
                d = os.path.join(mnt, "leo")

            def read():
                o = ctx.op(t, ["read", d, n, mib], 60 + n * mib / 5)
                ctx.res.add(f"leo-{kind}", t.name, o["bytes"] / MIB / o["s"])
                log(f"  {t.name} {kind}: {o['bytes'] / MIB / o['s']:.0f} MiB/s")
            ctx.measure([f"leo-{kind}"], t, read)


class Grail(Workload):
    """grail filebench-style cold sequential reads of one large file: chunk
    sizes x parallel readers (pread at disjoint offsets, fio psync), each
    combination on its own never-read file of a kept data set; raw S3 does
    ranged GETs of the same sizes (boto3). Each run reads the whole file
    (its readers split it) unless BENCH_GRAIL_TIMEBOX seconds pass first;
    the rate is over the bytes read."""
    name, title, raw = "grail", "cold sequential reads (grail filebench-style)", True
    serves = READ_TARGETS

    def combos(self, cfg):
        out = []
        for c in cfg.grail_chunks_kib:
            for n in cfg.grail_readers:
                if cfg.grail_mib * 1024 // n >= c:
                    out.append((c, n))
        return out

    def dataset(self, cfg):
        return f"datasets/grail-{cfg.grail_mib}m"

    @staticmethod
    def note_cap(ctx, fid, t, got, whole):
        if got < whole:
            ctx.res.note(fid, f"stopped by the {ctx.cfg.grail_timebox:g} s cap before the "
                         "end of the file (rated over the bytes read) on", t.name)

    @staticmethod
    def kib(c):
        return f"{c // 1024} MiB" if c >= 1024 else f"{c} KiB"

    def figures(self, cfg):
        return [Figure(f"grail-{c}k-{n}", f"cold read {self.kib(c)} chunks, "
                       f"{n} reader{'s' if n > 1 else ''}", "MiB/s",
                       bar=("raw", "raw-get", 0.9), group=self.title)
                for c, n in self.combos(cfg)]

    def prepare(self, ctx):
        cfg = ctx.cfg
        n = len(self.combos(cfg))
        size = cfg.grail_mib * MIB
        local = os.path.join(cfg.workdir, "data", f"grail-{cfg.grail_mib}m")
        os.makedirs(local, exist_ok=True)
        block = os.urandom(MIB)
        for k in range(n):
            p = os.path.join(local, f"f{k:02}")
            if not os.path.exists(p) or os.path.getsize(p) != size:
                with open(p + ".tmp", "wb") as f:
                    for i in range(cfg.grail_mib):
                        f.write(bytes([k, i & 255]) + block[2:])
                os.rename(p + ".tmp", p)
            key = f"{self.dataset(cfg)}/f{k:02}"
            if ctx.size_of(key) != size:
                log(f"grail: uploading {key} ({cfg.grail_mib} MiB, once)")
                r = ctx.run([TIERFSCTL, "s3", "put", p, f"s3://{cfg.bucket}/{key}",
                             "--meta", "mode=33188", "--meta", "uid=0", "--meta", "gid=0"],
                            600)
                if r.returncode != 0:
                    raise OpFailed(f"tierfsctl s3 put {key}: {r.stderr[-300:]}")
        self.local = local

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        if isinstance(t, RawS3):
            mnt = None
        elif t.fuse:
            mnt = t.mount(self.dataset(cfg), cold=True)
        else:
            mnt = self.local
            peers.drop_page_cache(mnt)
        combos = self.combos(cfg)
        spans = [cfg.grail_mib * MIB // n // (c * 1024) * (c * 1024) for c, n in combos]
        if mnt is None:
            ids = [f"grail-{c}k-{n}" for c, n in combos]

            def raw():
                spec = [[f"{self.dataset(cfg)}/f{k:02}", spans[k] * n, c * 1024, n]
                        for k, (c, n) in enumerate(combos)]
                o = ctx.op(t, ["ranged-gets", cfg.bucket, json.dumps(spec),
                               cfg.grail_timebox], len(spec) * (cfg.grail_timebox + 60))
                for k, (fid, x) in enumerate(zip(ids, o["results"])):
                    ctx.res.add(fid, t.name, x["bytes"] / MIB / x["s"])
                    self.note_cap(ctx, fid, t, x["bytes"], spans[k] * combos[k][1])
            ctx.measure(ids, t, raw)
            combos = []
        for k, (c, n) in enumerate(combos):
            fid = f"grail-{c}k-{n}"
            span = spans[k]

            def one():
                if t.fuse and not t.mountpoint:  # aborted after a timeout
                    t.mount(self.dataset(cfg), cold=True)
                p = ctx.run(["fio", "--name=grail",
                             f"--filename={t.mountpoint or mnt}/f{k:02}",
                             "--rw=read", f"--bs={c}k", "--ioengine=psync",
                             f"--numjobs={n}", f"--size={span}",
                             f"--offset_increment={span}", "--thread",
                             f"--runtime={int(cfg.grail_timebox * 1000)}ms", "--readonly",
                             "--invalidate=1", "--group_reporting",
                             "--output-format=json"], cfg.grail_timebox + 60, t)
                if p.returncode != 0:
                    raise OpFailed(f"fio exited {p.returncode}: {p.stderr[-300:]}")
                got = fio_json(p.stdout)["jobs"][0]["read"]
                ctx.res.add(fid, t.name, got["bw_bytes"] / MIB)
                self.note_cap(ctx, fid, t, got["io_bytes"], span * n)
            ctx.measure([fid], t, one)
        log(f"  {t.name}: " + " ".join(
            f"{report.fmt(ctx.res.values.get(f'grail-{c}k-{n}', {}).get(t.name, [None])[-1])}"
            for c, n in self.combos(cfg)))


class Request(Workload):
    """What one FUSE request costs: stat of names that are not there, each
    another, so each is one LOOKUP that no cache can answer. The empty FUSE
    server (peers.FuseFloor) answers at once: its figure is the kernel's and
    the machine's share, under every FUSE filesystem's. Create and unlink
    take at least that many requests each (Figure.requests), which bounds
    what any FUSE filesystem can reach against the local disk here."""
    name, title = "request", "one FUSE request"
    serves = READ_TARGETS + ("floor",)

    def figures(self, cfg):
        return [Figure(report.FLOOR_FIGURE, "stat of an absent name (1 FUSE request)",
                       "us", better="low", peers=False, group=self.title)]

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        mnt = t.mount(ctx.prefix(t, self.name, r))

        def lookups():
            o = ctx.op(t, ["lookups", mnt, cfg.lookups, cfg.lookup_timebox],
                       cfg.lookup_timebox + 120)
            us = o["s"] / o["n"] * 1e6
            ctx.res.add(report.FLOOR_FIGURE, t.name, us)
            if o["n"] < cfg.lookups:
                ctx.res.count(report.FLOOR_FIGURE, t.name, o["n"])
            log(f"  {t.name}: {us:.1f} us per stat of an absent name")
        ctx.measure([report.FLOOR_FIGURE], t, lookups)


class Meta(Workload):
    """Metadata: create, stat and unlink of small files (capped by time, so a
    slow peer runs fewer, and rates are per second); SQLite commits in
    rollback-journal and WAL mode; tar x of a small-file tree; git clone of
    a local repository."""
    name, title = "meta", "metadata, SQLite, tar, git"

    def figures(self, cfg):
        g = self.title
        # requests: the fewest a FUSE filesystem gets for one; create: a
        # LOOKUP (fuse_atomic_open() looks a name up before it creates)
        # and the CREATE; unlink of a name just stat'ed: the UNLINK
        return [Figure("create", f"create 4 KiB files (of {cfg.meta_files})", "files/s",
                       bar=("local", 1.0), group=g, requests=2),
                Figure("stat", "stat those files", "stats/s", bar=("local", 0.8), group=g),
                Figure("unlink", "unlink those files", "files/s", bar=("local", 0.5),
                       group=g, requests=1),
                Figure("sqlite-delete", "SQLite commits, rollback journal", "commit/s",
                       bar=("local", 0.8), judged="tierfs-local", group=g),
                Figure("sqlite-wal", "SQLite commits, WAL", "commit/s",
                       bar=("local", 0.8), judged="tierfs-local", group=g),
                Figure("tar", f"tar x of a {cfg.tar_files}-file tree", "files/s", group=g),
                Figure("git", "git clone of a local repository", "s", better="low",
                       group=g)]

    def prepare(self, ctx):
        cfg = ctx.cfg
        data = os.path.join(cfg.workdir, "data")
        os.makedirs(data, exist_ok=True)
        self.tars = {}
        for n in {cfg.tar_files, *(min(cfg.tar_files, k)
                                   for k in cfg.peer_tar_files.values())}:
            path = os.path.join(data, f"tree-{n}.tar")
            if not os.path.exists(path):
                make_tree_tar(path, n)
            self.tars[n] = path
        self.repo = os.path.join(data, "repo.git")
        if not os.path.isdir(self.repo):
            subprocess.run(["git", "clone", "-q", "--bare", "--no-local", ROOT,
                            self.repo], check=True, env=ctx.env)

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        mnt = t.mount(ctx.prefix(t, self.name, r))

        # SQLite first: its rollback journal fsyncs the directory, which in
        # tierfs waits for everything dirty to reach S3, and it is not the
        # backlog of the other steps that it should measure
        for mode in ("delete", "wal"):
            def sql():
                o = ctx.op(t, ["sqlite", os.path.join(mnt, f"db-{mode}.sqlite"), mode,
                               cfg.sqlite_timebox, cfg.sqlite_max],
                           cfg.sqlite_timebox + 120)
                ctx.res.add(f"sqlite-{mode}", t.name, o["n"] / o["s"])
                log(f"  {t.name}: sqlite {mode} {o['n'] / o['s']:.0f} commits/s")
            ctx.measure([f"sqlite-{mode}"], t, sql)

        inputs = [*self.tars.values(), self.repo]  # read back after the drop

        def meta():
            forget_freed_inodes(inputs)
            o = ctx.op(t, ["meta", os.path.join(mnt, "m"), cfg.meta_files,
                           cfg.meta_timebox], cfg.meta_timebox * 3 + 120)
            for k in ("create", "stat", "unlink"):
                ctx.res.add(k, t.name, o[k]["n"] / o[k]["s"])
                if o[k]["n"] < cfg.meta_files and k != "stat":
                    ctx.res.count(k, t.name, o[k]["n"])
                    ctx.res.note(k, f"capped at {cfg.meta_timebox:g} s; the rate is "
                                 "over the files reached")
            log(f"  {t.name}: create {o['create']['n'] / o['create']['s']:.0f}/s, "
                f"stat {o['stat']['n'] / o['stat']['s']:.0f}/s, "
                f"unlink {o['unlink']['n'] / o['unlink']['s']:.0f}/s")
        ctx.measure(["create", "stat", "unlink"], t, meta)

        def tar():
            n = min(cfg.tar_files, cfg.peer_tar_files.get(t.name, cfg.tar_files))
            d = os.path.join(mnt, "tree")
            os.makedirs(d, exist_ok=True)
            forget_freed_inodes(inputs)
            t0 = time.monotonic()
            p = ctx.run(["tar", "xf", self.tars[n], "-C", d], 600, t)
            s = time.monotonic() - t0
            if p.returncode != 0:
                raise OpFailed(f"tar exited {p.returncode}: {p.stderr[-300:]}")
            ctx.res.add("tar", t.name, n / s)
            if n != cfg.tar_files:
                ctx.res.note("tar", f"{t.name} extracts a {n}-file tree (capped)")
            log(f"  {t.name}: tar x {n} files in {s:.1f} s")
            # gone again before the unmount, so little of it is uploaded
            ctx.run(["rm", "-rf", d], 600, t)
        ctx.measure(["tar"], t, tar)

        def git():
            t0 = time.monotonic()
            p = ctx.run(["git", "clone", "-q", "--no-hardlinks", self.repo,
                         os.path.join(mnt, "repo")], 600, t)
            s = time.monotonic() - t0
            if p.returncode != 0:
                raise OpFailed(f"git clone exited {p.returncode}: {p.stderr[-300:]}")
            ctx.res.add("git", t.name, s)
            log(f"  {t.name}: git clone {s:.2f} s")
        ctx.measure(["git"], t, git)


def forget_freed_inodes(inputs):
    """Makes every target's creates start from the same disk state: sync,
    then drop clean cached pages. A journal-less ext4 (this machine's root)
    skips, on each inode it allocates, every inode freed in the last minute
    (five while the inode table block is dirty) whose block is still in
    memory, reading each. An inode allocated 2 s after 10,000 deletions took
    276 us here, against 14 us, and the local disk's creates in one
    `make bench` measured 54k, 8.4k and 4.0k files/s in its three runs,
    by what the targets before each had deleted.
    inputs (files or directories: the tar, the repository to clone) are
    read back into the page cache, so the steps read them warm, as before,
    and not from the disk within their timing."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError:
        return  # not root: the figures are only noisier
    for top in inputs:
        walk = os.walk(top) if os.path.isdir(top) else [("", [], [top])]
        for dirpath, _, files in walk:
            for n in files:
                with open(os.path.join(dirpath, n), "rb") as f:
                    while f.read(1 << 20):
                        pass


def make_tree_tar(path, n):
    """A tar of n small files (100 to 8,000 bytes) in directories of 100,
    like a source tree; made once."""
    import io
    import random
    rnd = random.Random(n)
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w") as tf:
        for i in range(n):
            data = rnd.randbytes(rnd.randint(100, 8000))
            ti = tarfile.TarInfo(f"src/d{i // 100:03}/f{i % 100:02}.c")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1_700_000_000
            tf.addfile(ti, io.BytesIO(data))
    os.rename(tmp, path)


class Ls(Workload):
    """ls -l of one directory of many entries, made once in the bench bucket
    (through tierfs, so it has tierfs's index too): first after a cold mount,
    then again."""
    name, title = "ls", "directory listing"
    serves = READ_TARGETS

    def dataset(self, cfg):
        return f"datasets/ls-{cfg.ls_entries}"

    def figures(self, cfg):
        return [Figure("ls-cold", f"ls -l of {cfg.ls_entries} entries, cold mount", "s",
                       better="low", group=self.title),
                Figure("ls-warm", f"ls -l of {cfg.ls_entries} entries, again", "s",
                       better="low", group=self.title)]

    def prepare(self, ctx):
        cfg = ctx.cfg
        self.local = os.path.join(cfg.workdir, "data", f"ls-{cfg.ls_entries}")
        if not os.path.isdir(os.path.join(self.local, "d")):
            os.makedirs(self.local + ".tmp/d", exist_ok=True)
            fill_flat(self.local + ".tmp/d", cfg.ls_entries)
            os.rename(self.local + ".tmp", self.local)
        make_volume(ctx, self.dataset(cfg), lambda root: fill_flat(
            os.path.join(root, "d"), cfg.ls_entries, mkdir=True))

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        if t.fuse:
            mnt = t.mount(self.dataset(cfg), cold=True)
        else:
            mnt = self.local
            peers.drop_page_cache(mnt)
        for k in ("cold", "warm"):
            def ls():
                t0 = time.monotonic()
                p = ctx.run(["ls", "-l", os.path.join(mnt, "d")], cfg.ls_timeout, t)
                s = time.monotonic() - t0
                n = p.stdout.count("\n") - 1
                if p.returncode != 0 or n != cfg.ls_entries:
                    raise OpFailed(f"ls -l exited {p.returncode} with {n} entries, "
                                   f"want {cfg.ls_entries}: {p.stderr[-200:]}")
                ctx.res.add(f"ls-{k}", t.name, s)
                log(f"  {t.name}: ls -l {k} {s:.2f} s")
            if not ctx.measure([f"ls-{k}"], t, ls):
                break


def fill_flat(d, n, mkdir=False):
    if mkdir:
        os.makedirs(d, exist_ok=True)
    for i in range(n):
        with open(f"{d}/e{i:05}", "w") as f:
            f.write(f"{i}\n")


def fill_cold(root, dirs, per):
    for d in range(dirs):
        os.mkdir(f"{root}/d{d:03}")
        for f in range(per):
            with open(f"{root}/d{d:03}/f{f:04}", "w") as fh:
                fh.write(f"{d}/{f}\n")


def make_volume(ctx, prefix, fill):
    """Makes the tierfs volume s3://bucket/prefix once, through a tierfs
    mount (so it has its index snapshot), unless its index is there."""
    if ctx.size_of(f"{prefix}/.tierfs/index.db") is not None:
        return
    log(f"making the data set s3://{ctx.cfg.bucket}/{prefix} (once; kept for "
        f"later runs; Swift takes about 140 small PUTs a second here)")
    work = os.path.join(ctx.cfg.workdir, "make-" + prefix.replace("/", "_"))
    shutil.rmtree(work, ignore_errors=True)
    mnt, cache = os.path.join(work, "mnt"), os.path.join(work, "cache")
    os.makedirs(mnt)
    t0 = time.monotonic()
    subprocess.run([TIERFS, "mount", f"s3://{ctx.cfg.bucket}/{prefix}", mnt,
                    "--cache-dir", cache, "--upload-delay", "1s"], check=True, env=ctx.env)
    try:
        fill(mnt)
    finally:
        # unmount returns when every object and the index are in S3
        subprocess.run([TIERFS, "unmount", mnt, "--cache-dir", cache, "--timeout", "60m"],
                       check=True, env=ctx.env)
    shutil.rmtree(work, ignore_errors=True)
    log(f"made {prefix} in {time.monotonic() - t0:.0f} s")


class ColdMount(Workload):
    """A new node mounting a 100,000-file volume: from the mount command on
    an empty cache dir until the first ls of the root returns, and until a
    walk of the whole tree does (the volume is made once, through tierfs)."""
    name, title = "coldmount", "cold start"
    serves = ("tierfs-s3", "rclone", "s3fs")

    def dataset(self, cfg):
        return f"cold-{cfg.cold_dirs * cfg.cold_per_dir // 1000}k"

    def figures(self, cfg):
        n = cfg.cold_dirs * cfg.cold_per_dir
        return [Figure("cold-ls", f"mount {n}-file volume, to first ls", "s",
                       better="low", bar=("max", 1.5), group=self.title),
                Figure("cold-walk", f"mount {n}-file volume, to full walk", "s",
                       better="low", group=self.title)]

    def prepare(self, ctx):
        cfg = ctx.cfg
        make_volume(ctx, self.dataset(cfg),
                    lambda root: fill_cold(root, cfg.cold_dirs, cfg.cold_per_dir))

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        n = cfg.cold_dirs * cfg.cold_per_dir
        t0 = time.monotonic()
        mnt = t.mount(self.dataset(cfg), cold=True)

        def ls():
            p = ctx.run(["ls", mnt], 120, t)
            if p.returncode != 0 or len(p.stdout.split()) != cfg.cold_dirs:
                raise OpFailed(f"ls of the root exited {p.returncode}, "
                               f"{len(p.stdout.split())} entries: {p.stderr[-200:]}")
            ctx.res.add("cold-ls", t.name, time.monotonic() - t0)

        def walk():
            # rclone and s3fs also show tierfs's PREFIX/.tierfs/
            p = ctx.run(["find", mnt, "-path", f"{mnt}/.tierfs", "-prune", "-o",
                         "-type", "f", "-print"], cfg.cold_walk_timeout, t)
            got = p.stdout.count("\n")
            if p.returncode != 0 or got != n:
                raise OpFailed(f"find exited {p.returncode} with {got} files, want {n}")
            ctx.res.add("cold-walk", t.name, time.monotonic() - t0)
        if ctx.measure(["cold-ls"], t, ls):
            ctx.measure(["cold-walk"], t, walk)
        log(f"  {t.name}: " + ", ".join(
            f"{k} {ctx.res.values.get(k, {}).get(t.name, [0])[-1]:.2f} s"
            for k in ("cold-ls", "cold-walk") if ctx.res.values.get(k, {}).get(t.name)))


class Raw(Workload):
    """Raw S3: `tierfsctl s3 bench` (parallel PUT and GET of one object,
    small-PUT latency) beside the same through boto3."""
    name, title, raw = "raw", "raw S3 (tierfsctl s3 bench; boto3 beside it)", True
    serves = ()

    def figures(self, cfg):
        g = f"{self.title}, {cfg.raw_size} object, {cfg.raw_threads} threads"
        return [Figure("raw-put", "parallel PUT (tierfsctl)", "MiB/s", peers=False, judged=None, group=g),
                Figure("raw-get", "parallel GET (tierfsctl)", "MiB/s", peers=False, judged=None, group=g),
                Figure("raw-small-put", "small PUT latency (tierfsctl)", "ms", better="low",
                       peers=False, judged=None, group=g),
                Figure("raw-put-boto3", "parallel PUT (boto3)", "MiB/s", peers=False, judged=None, group=g),
                Figure("raw-get-boto3", "parallel GET (boto3)", "MiB/s", peers=False, judged=None, group=g),
                Figure("raw-small-put-boto3", "small PUT latency (boto3)", "ms",
                       better="low", peers=False, judged=None, group=g)]

    def run(self, ctx, t, r):
        cfg = ctx.cfg
        for who, argv, suffix in (
                ("tierfsctl", [TIERFSCTL, "s3", "bench",
                               f"s3://{cfg.bucket}/{ctx.scratch}/raw-tierfsctl"], ""),
                ("boto3", [PY, os.path.join(HERE, "s3_boto3.py"),
                           f"s3://{cfg.bucket}/{ctx.scratch}/raw-boto3"], "-boto3")):
            ids = [f"raw-put{suffix}", f"raw-get{suffix}", f"raw-small-put{suffix}"]

            def one():
                p = ctx.run(argv + ["--size", cfg.raw_size, "--threads",
                                    str(cfg.raw_threads)], 600)
                if p.returncode != 0:
                    raise OpFailed(f"{who} exited {p.returncode}: {p.stderr[-300:]}")
                got = {}
                for line in p.stdout.splitlines():
                    k, _, rest = line.partition(":")
                    if k in ("put", "get", "small-put"):
                        got[k] = float(rest.split()[0])
                for fid, k in zip(ids, ("put", "get", "small-put")):
                    ctx.res.add(fid, "raw", got[k])
                log(f"  {who}: put {got['put']:.0f} MiB/s, get {got['get']:.0f} MiB/s, "
                    f"small put {got['small-put']:.1f} ms")
            ctx.measure(ids, t, one)


class Restart(Workload):
    """What a crash costs (issue 4), tierfs only: the stall per worker restart
    and the recovery with 1 GiB dirty (hack/bench-restart.py)."""
    name, title = "restart", "crash cost (tierfs, issue 4)"
    serves = ()
    raw = True  # runs once per run, not per target

    def figures(self, cfg):
        g = self.title
        return [Figure("restart-stall", "stall per worker restart (median)", "ms",
                       better="low", peers=False, group=g),
                Figure("restart-serve", "kill -9 with 1 GiB dirty: serving again", "s",
                       better="low", peers=False, group=g),
                Figure("restart-flushed", "kill -9 with 1 GiB dirty: all in S3", "s",
                       better="low", peers=False, group=g)]

    def run(self, ctx, t, r):
        spec = importlib.util.spec_from_file_location(
            "bench_restart", os.path.join(ROOT, "hack", "bench-restart.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import tempfile
        from pathlib import Path
        os.environ.update(ctx.env)
        with tempfile.TemporaryDirectory(dir=ctx.cfg.workdir) as d:
            def stall():
                s = mod.stall_per_restart(ctx.cfg.bucket, Path(d))
                ctx.res.add("restart-stall", "tierfs-s3", s["median_ms"])
            ctx.measure(["restart-stall"], _Named("tierfs-s3"), stall)

            def recover():
                s = mod.recovery_with_1gib_dirty(ctx.cfg.bucket, Path(d))
                ctx.res.add("restart-serve", "tierfs-s3", s["serving_s"])
                ctx.res.add("restart-flushed", "tierfs-s3", s["in_s3_s"])
            ctx.measure(["restart-serve", "restart-flushed"], _Named("tierfs-s3"), recover)
        ctx.delete_prefix(f"bench-restart-{os.getpid()}/")


class _Named:
    def __init__(self, name):
        self.name = name


WORKLOADS = [Raw(), Fio(), Streams(), Leofs(), Grail(), Request(), Meta(), Ls(),
             ColdMount(), Restart()]
READ_ONLY = ("grail", "request", "ls", "coldmount")


def memory_figure():
    return Figure("rss", "daemon peak RSS, any workload", "MiB", better="low",
                  bar=("max", 1024), peers=False, group="memory")


def rotate(xs, k):
    k %= max(1, len(xs))
    return xs[k:] + xs[:k]


def main():
    # a background job starts with SIGINT ignored: both end the run cleanly
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    cfg = Config()
    only = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
    names = [t for t in os.environ.get("BENCH_TARGETS", "").split(",") if t]
    env = dict(os.environ)
    for v in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not env.get(v):
            raise SystemExit(f"harness: {v} is not set; run under "
                             '`eval "$(hack/s3-local.sh env)"` (hack/bench.sh does)')
    os.makedirs(cfg.workdir, exist_ok=True)
    targets = peers.all_targets(env, cfg.bucket, cfg.workdir, names or None)
    ctx = Ctx(cfg, env, targets)
    ctx.wait_s3()
    workloads = [w for w in WORKLOADS if not only or w.name in only]
    if not cfg.restart:
        workloads = [w for w in workloads if w.name != "restart"]
    if not cfg.leo_mib:
        workloads = [w for w in workloads if w.name != "leofs"]
    figs = [f for w in workloads for f in w.figures(cfg)] + [memory_figure()]
    started = time.time()
    t_start = time.monotonic()
    log(f"bench: {len(workloads)} workloads x {cfg.runs} runs on "
        f"{', '.join(t.name for t in targets)}; scratch s3://{cfg.bucket}/{ctx.scratch}/")
    for t in targets:
        why = t.available()
        if why:
            log(f"{t.name}: {why}")
    try:
        for w in workloads:
            t0 = time.monotonic()
            log(f"== {w.name}: {w.title}")
            try:
                w.prepare(ctx)
            except (OpFailed, OSError, subprocess.SubprocessError) as e:
                log(f"{w.name}: preparing failed: {e}")
                for f in w.figures(cfg):
                    for t in ALL_TARGETS + ("raw",):
                        ctx.res.fail(f.id, t, f"preparing the data set failed: {e}")
                continue
            ts = [t for t in targets if t.name in w.serves]
            if w.raw:
                ts.append(RawS3())
            for r in range(cfg.runs):
                for t in rotate(ts, r):
                    ctx.wait_s3()
                    log(f"{w.name} run {r + 1}/{cfg.runs}: {t.name}")
                    if hasattr(t, "peak_rss_kib"):
                        t.peak_rss_kib = 0
                    ctx.measure([f.id for f in w.figures(cfg)], t,
                                lambda: w.run(ctx, t, r))
                    try:
                        t.unmount()
                    except (peers.TargetFailed, subprocess.SubprocessError) as e:
                        log(f"  {t.name}: unmount failed: {e}")
                    for p in w.prefixes(ctx, t, r):
                        if hasattr(t, "forget"):
                            t.forget(p)
                        if p.startswith(ctx.scratch + "/") and t.fuse:
                            # S3 would otherwise keep ~20 GiB by the end
                            try:
                                ctx.delete_prefix(p + "/")
                            except Exception as e:  # noqa: BLE001
                                log(f"  deleting {p}/ failed: {e}")
                    if getattr(t, "peak_rss_kib", 0):
                        d = ctx.rss.setdefault(t.name, {})
                        d[w.name] = max(d.get(w.name, 0), t.peak_rss_kib)
            ctx.timing[w.name] = time.monotonic() - t0
            log(f"== {w.name} took {ctx.timing[w.name]:.0f} s")
    finally:
        for t in targets:
            try:
                t.unmount()
            except Exception as e:  # noqa: BLE001
                log(f"{t.name}: unmount at exit failed: {e}")
        try:
            ctx.delete_prefix(ctx.scratch + "/")
        except Exception as e:  # noqa: BLE001
            log(f"deleting s3://{cfg.bucket}/{ctx.scratch}/ failed: {e}")
    peaks = []
    for t, per in ctx.rss.items():
        w, kib = max(per.items(), key=lambda x: x[1])
        ctx.res.add("rss", t, kib / 1024)
        peaks.append(f"{t} in {w}")
    for w in workloads:
        if w.name in READ_ONLY:
            ctx.res.note(w.figures(cfg)[0].id, f"{w.name} only reads: tierfs s3 stands "
                         "for tierfs local too")
    if peaks:
        ctx.res.note("rss", "one value, the peak of all runs (VmHWM): " + ", ".join(peaks))
    wall = time.monotonic() - t_start
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "wall_s": wall, "runs": cfg.runs, "config": cfg.as_dict(),
            "workload_s": ctx.timing, "rss_kib": ctx.rss,
            "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "kernel": os.uname().release, "cpus": os.cpu_count()}
    outdir = os.path.join(ROOT, "bench", "results")
    lines, extra, why = report.write_all(figs, ctx.res, meta, outdir)
    print("\n".join(lines))
    print()
    print("\n".join(extra))
    print(f"\nwall time {wall / 60:.1f} min ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in ctx.timing.items()) + ")")
    print(f"written {outdir}/bench.txt, bench.json"
          + (", bench.png" if not why else f" (no chart: {why})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
