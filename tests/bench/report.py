"""report.py: turns the runs of `make bench` into its table, its JSON and its chart.

A Figure is one row: what is measured, its unit, whether more is better, the
DESIGN §8 bar it is held to and which tierfs it judges. Results holds every
run's value per (figure, target), or why a target failed. The table prints
each figure's median per target with its spread, tierfs's ratio to the
local disk and to the best peer (rclone, s3fs), the bar and met/MISSED.
Ratios are "how many times better tierfs is": value ratios for rates,
inverted for times and sizes, so > 1 always favours tierfs.
"""

import json
import os
import statistics
import subprocess

# the table's columns, in order; "raw" is S3 itself (tierfsctl or boto3)
COLUMNS = [("local", "local disk"), ("floor", "empty FUSE"), ("tierfs-s3", "tierfs s3"),
           ("tierfs-local", "tierfs local"), ("rclone", "rclone"),
           ("s3fs", "s3fs"), ("raw", "raw S3")]
PEERS = ("rclone", "s3fs")
# the figure whose "floor" value is what one request to an empty FUSE
# server costs here, in microseconds (harness.Request)
FLOOR_FIGURE = "lookup"


class Figure:
    """One row of the table.

    bar: None (only "ahead of the peers"), ("local", k): at least k times the
    local disk; ("raw", fig_id, k): at least k times raw S3's figure fig_id;
    ("max", x): at most x units. judged: the tierfs the verdict is about.
    raw_ref: a raw-S3 figure whose median the raw S3 column shows (when the
    row has no raw value of its own). requests: the fewest FUSE requests the
    kernel sends for one operation of a rate figure, whatever the
    filesystem; with the empty server's cost of one (FLOOR_FIGURE), a
    missed local bar says how far any FUSE filesystem could get here."""

    def __init__(self, fid, label, unit, better="high", bar=None,
                 judged="tierfs-s3", peers=True, raw_ref=None, group="",
                 requests=None):
        self.id, self.label, self.unit, self.better = fid, label, unit, better
        self.bar, self.judged, self.peers = bar, judged, peers
        self.raw_ref, self.group, self.requests = raw_ref, group, requests

    def bar_text(self):
        parts = []
        if self.bar and self.bar[0] == "local":
            parts.append(f">={self.bar[1]:g}x local")
        elif self.bar and self.bar[0] == "raw":
            parts.append(f">={self.bar[2]:g}x raw S3")
        elif self.bar and self.bar[0] == "max":
            parts.append(f"<={self.bar[1]:g} {self.unit}")
        if self.peers:
            parts.append("> peers")
        return ", ".join(parts) if parts else "-"


class Results:
    def __init__(self):
        self.values = {}    # fid -> target -> [values]
        self.failed = {}    # fid -> target -> reason
        self.notes = {}     # fid -> text -> [targets it names, if any]
        self.counts = {}    # fid -> target -> [how many files a capped run reached]

    def add(self, fid, target, value):
        self.values.setdefault(fid, {}).setdefault(target, []).append(value)

    def fail(self, fid, target, reason):
        self.failed.setdefault(fid, {}).setdefault(target, reason)

    def note(self, fid, text, target=None):
        """A note on fid; one given with a target is one line for every
        target it is given with ("text: a, b")."""
        who = self.notes.setdefault(fid, {}).setdefault(text, [])
        if target and target not in who:
            who.append(target)

    def note_lines(self, fid):
        return [f"{text}: {', '.join(who)}" if who else text
                for text, who in self.notes.get(fid, {}).items()]

    def count(self, fid, target, n):
        self.counts.setdefault(fid, {}).setdefault(target, []).append(n)

    def median(self, fid, target):
        v = self.values.get(fid, {}).get(target)
        return statistics.median(v) if v else None

    def spread(self, fid, target):
        """(max - min) / median of the runs, or None."""
        v = self.values.get(fid, {}).get(target)
        if not v or len(v) < 2:
            return None
        m = statistics.median(v)
        return (max(v) - min(v)) / m if m else None


def better_ratio(fig, a, b):
    """How many times better a is than b (> 1: a is better)."""
    if a is None or b is None:
        return None
    if fig.better == "high":
        return a / b if b else None
    return b / a if a else None


def best_peer(fig, res):
    best = None
    for p in PEERS:
        v = res.median(fig.id, p)
        if v is not None and (best is None or better_ratio(fig, v, best[1]) > 1):
            best = (p, v)
    return best


def raw_value(fig, res):
    v = res.median(fig.id, "raw")
    if v is None and fig.raw_ref:
        v = res.median(fig.raw_ref, "raw")
    return v


def request_us(res):
    """What one FUSE request costs here, in microseconds: the empty server's
    figure less the local disk's (the same stat, with no request: the
    caller's and the VFS's share of it). None when unmeasured."""
    floor_us = res.median(FLOOR_FIGURE, "floor")
    if not floor_us:
        return None
    local_us = res.median(FLOOR_FIGURE, "local")
    return floor_us - local_us if local_us and local_us < floor_us else floor_us


def fuse_bound(fig, res):
    """How many times the local disk an instant FUSE server could reach on
    fig here: fig.requests requests of request_us() each, and nothing else.
    None when unknown."""
    us = request_us(res)
    local = res.median(fig.id, "local")
    if not fig.requests or fig.better != "high" or not us or not local:
        return None
    return 1e6 / (fig.requests * us) / local


def verdict(fig, res):
    """(word, detail): "met", "MISSED" or "FAILED", and why."""
    if not fig.bar and not fig.peers:
        return "info", ""
    t = fig.judged
    tv = res.median(fig.id, t)
    if tv is None:
        if res.failed.get(fig.id, {}).get(t):
            return "FAILED", res.failed[fig.id][t]
        return "-", "not measured"
    missed = []
    if fig.bar and fig.bar[0] == "local":
        lv = res.median(fig.id, "local")
        r = better_ratio(fig, tv, lv)
        if r is None:
            missed.append("no local figure")
        elif r < fig.bar[1]:
            missed.append(f"{r:.2f}x local")
            b = fuse_bound(fig, res)
            if b is not None:
                missed.append(f"an instant FUSE server: <= {b:.2f}x, "
                              f"{fig.requests} request{'s' if fig.requests > 1 else ''}"
                              f" of {request_us(res):.0f} us")
    elif fig.bar and fig.bar[0] == "raw":
        rv = res.median(fig.bar[1], "raw")
        r = better_ratio(fig, tv, rv)
        if r is None:
            missed.append("no raw S3 figure")
        elif r < fig.bar[2]:
            missed.append(f"{r:.2f}x raw S3")
    elif fig.bar and fig.bar[0] == "max" and tv > fig.bar[1]:
        missed.append(f"{fmt(tv)} {fig.unit}")
    if fig.peers:
        for p in PEERS:
            pv = res.median(fig.id, p)
            if pv is not None and better_ratio(fig, tv, pv) <= 1:
                missed.append(f"behind {p}")
    return ("MISSED", "; ".join(missed)) if missed else ("met", "")


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100_000:
        return f"{v / 1000:.0f}k"
    if a >= 10_000:
        return f"{v / 1000:.1f}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(fig, res, target):
    v = res.median(fig.id, target)
    if v is None:
        if target == "raw":
            rv = raw_value(fig, res)
            return f"({fmt(rv)})" if rv is not None else "-"
        return "failed" if res.failed.get(fig.id, {}).get(target) else "-"
    s = res.spread(fig.id, target)
    return fmt(v) + (f" ±{s * 100:.0f}%" if s is not None else "")


def table(figs, res, runs):
    """The table as text lines."""
    w = max(len(f.label) for f in figs) + 1
    head = (f"{'figure':<{w}}{'unit':<7}" + "".join(f"{c[1]:>14}" for c in COLUMNS)
            + f"{'xlocal':>8}{'xpeer':>8}  {'bar (DESIGN §8)':<26}verdict")
    lines = [f"median of {runs} runs, ±spread = (max-min)/median; xlocal and "
             "xpeer: times better than the local disk and the best of "
             "rclone/s3fs (> 1 favours tierfs), for the tierfs marked * "
             "(the one the bar judges); (raw S3) in brackets is the "
             "reference the bar uses", head, "-" * len(head)]
    group = None
    for f in figs:
        if f.group != group:
            group = f.group
            lines.append(f"[{group}]")
        cells = []
        for t, _ in COLUMNS:
            c = cell(f, res, t)
            if t == f.judged:
                c = "*" + c
            cells.append(f"{c:>14}")
        tv = res.median(f.id, f.judged)
        xl = better_ratio(f, tv, res.median(f.id, "local"))
        bp = best_peer(f, res)
        xp = better_ratio(f, tv, bp[1]) if bp else None
        word, why = verdict(f, res)
        v = word + (f" ({why})" if why else "")
        lines.append(f"{f.label:<{w}}{f.unit:<7}" + "".join(cells)
                     + f"{fmt(xl) if xl else '-':>8}{fmt(xp) if xp else '-':>8}"
                     + f"  {f.bar_text():<26}{v}")
    return lines


def failures_and_notes(figs, res):
    lines = []
    for f in figs:
        for t, why in res.failed.get(f.id, {}).items():
            lines.append(f"failed: {f.label} on {t}: {why}")
    for f in figs:
        for n in res.note_lines(f.id):
            lines.append(f"note: {f.label}: {n}")
        c = res.counts.get(f.id)
        if c:
            lines.append(f"note: {f.label}: files reached in the time box, per run: "
                         + "; ".join(f"{t} {', '.join(map(str, ns))}" for t, ns in c.items()))
    return lines


def to_json(figs, res, meta):
    out = {"meta": meta, "figures": []}
    for f in figs:
        word, why = verdict(f, res)
        tv = res.median(f.id, f.judged)
        bp = best_peer(f, res)
        row = {"id": f.id, "label": f.label, "unit": f.unit, "better": f.better,
               "group": f.group, "bar": f.bar_text(), "judged": f.judged,
               "verdict": word, "why": why,
               "ratio_vs_local": better_ratio(f, tv, res.median(f.id, "local")),
               "ratio_vs_best_peer": better_ratio(f, tv, bp[1]) if bp else None,
               "best_peer": bp[0] if bp else None,
               "raw_reference": raw_value(f, res),
               "fuse_requests": f.requests, "fuse_bound_vs_local": fuse_bound(f, res),
               "notes": res.note_lines(f.id), "capped_counts": res.counts.get(f.id, {}),
               "targets": {}}
        for t, _ in COLUMNS:
            v = res.values.get(f.id, {}).get(t)
            why_t = res.failed.get(f.id, {}).get(t)
            if v or why_t:
                row["targets"][t] = {"runs": v or [], "median": res.median(f.id, t),
                                     "spread": res.spread(f.id, t),
                                     "failed": why_t}
        out["figures"].append(row)
    return out


def chart(figs, res, png):
    """A PNG of how tierfs and the peers compare, per figure: times better or
    worse than the local disk (top) and than raw S3 (bottom), log scale.
    Returns None, or why no chart was drawn."""
    series = [t for t, _ in COLUMNS if t not in ("local", "raw")]
    panels = []
    for title, ref in (("vs local disk (1 = local disk; higher is better)", "local"),
                       ("vs raw S3 (1 = raw S3; higher is better)", "raw")):
        rows = []
        for f in figs:
            local = res.median(f.id, "local")
            if ref == "local":
                base = local
            elif (f.bar and f.bar[0] == "raw") or local is None:
                base = raw_value(f, res)
            else:
                base = None
            if base is None:
                continue
            vals = [better_ratio(f, res.median(f.id, t), base) for t in series]
            if any(v for v in vals):
                rows.append((f.label, vals))
        if rows:
            panels.append((title, rows))
    if not panels:
        return "nothing to draw"
    dat = png[:-4] + ".dat"
    gp = png[:-4] + ".gp"
    with open(dat, "w") as d:
        for i, (_, rows) in enumerate(panels):
            if i:
                d.write("\n\n")
            for label, vals in rows:
                d.write('"%s" %s\n' % (label.replace('"', "'"),
                                       " ".join(f"{v:.4g}" if v else "NaN" for v in vals)))
    heights = [max(300, 120 + 34 * len(r)) for _, r in panels]
    total = sum(heights)
    with open(gp, "w") as g:
        g.write(f'set terminal pngcairo size 1400,{total} font "sans,9"\n')
        g.write(f'set output "{png}"\nset multiplot\n')
        g.write("set style data histograms\nset style histogram clustered gap 1\n"
                "set style fill solid 0.8 border -1\nset logscale y 10\n"
                "set yrange [0.001:1000]\nset grid y\nset key top right\n"
                "set xtics rotate by -35 left font ',8'\nset bmargin 12\n"
                "set rmargin 12\n")
        y = total
        for i, ((title, rows), h) in enumerate(zip(panels, heights)):
            y -= h
            g.write(f"set origin 0,{y / total:.4f}\nset size 1,{h / total:.4f}\n")
            g.write(f'set title "{title}"\n')
            # a series with no figure in this panel (tierfs-local in a
            # grail-only run, say) is left out: gnuplot refuses a
            # histogram column with no valid point
            plots = [f'"{dat}" index {i} using {j + 2}:xtic(1) title "{t}"'
                     for j, t in enumerate(series)
                     if any(vals[j] for _, vals in rows)]
            g.write("plot " + ", ".join(plots) + ", 1 notitle lc rgb 'black' lw 2\n")
        g.write("unset multiplot\n")
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        return f"gnuplot exited {r.returncode}: {r.stderr.strip()[-300:]}"
    return None


def write_all(figs, res, meta, outdir):
    os.makedirs(outdir, exist_ok=True)
    lines = table(figs, res, meta.get("runs"))
    extra = failures_and_notes(figs, res)
    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump(to_json(figs, res, meta), f, indent=1)
    why = chart(figs, res, os.path.join(outdir, "bench.png"))
    with open(os.path.join(outdir, "bench.txt"), "w") as f:
        f.write("\n".join(lines + [""] + extra) + "\n")
    return lines, extra, why
