#!/usr/bin/python3
"""summarize.py: the fio Job's logs, side by side.

    kubectl logs job/tierfs-fio     > tierfs.log
    kubectl logs job/tierfs-fio-efs > efs.log
    deploy/bench/summarize.py tierfs.log efs.log

Each log holds one JSON line per fio job file, {"job": NAME, "fio": <fio's
--output-format=json>}, among other lines (fio's notes on stderr), which
are skipped. Prints, per fio job and per log: read and write IOPS, MiB/s,
and the mean and 99th-percentile completion latency in ms. Exit status 1
when a log holds no fio result.
"""

import json
import sys


def results(path):
    """{(file job, fio job): fio's job dict} of one log, in order."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or "fio" not in rec:
                continue
            for job in rec["fio"].get("jobs", []):
                out[(rec.get("job", "?"), job.get("jobname", "?"))] = job
    return out


def lat_ms(io, pct):
    clat = io.get("clat_ns", {})
    if pct is None:
        return clat.get("mean", 0.0) / 1e6
    p = clat.get("percentile", {})
    return p.get(pct, 0.0) / 1e6


def row(job, rw):
    io = job.get(rw, {})
    if not io.get("total_ios"):
        return None
    return (io.get("iops", 0.0), io.get("bw_bytes", 0) / 2**20,
            lat_ms(io, None), lat_ms(io, "99.000000"))


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    logs = [(p, results(p)) for p in paths]
    bad = [p for p, r in logs if not r]
    for p in bad:
        print(f"{p}: no fio result in it", file=sys.stderr)
    keys = []
    for _, r in logs:
        keys += [k for k in r if k not in keys]
    width = max(len(p) for p in paths)
    print(f"{'job':38} {'log':{width}} {'rw':5} {'IOPS':>10} {'MiB/s':>9} "
          f"{'lat ms':>8} {'p99 ms':>8}")
    for key in keys:
        for p, r in logs:
            if key not in r:
                continue
            for rw in ("read", "write"):
                v = row(r[key], rw)
                if v:
                    print(f"{key[0] + '/' + key[1]:38} {p:{width}} {rw:5} "
                          f"{v[0]:10.0f} {v[1]:9.1f} {v[2]:8.2f} {v[3]:8.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
