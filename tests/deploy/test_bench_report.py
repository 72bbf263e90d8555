"""test_bench_report.py: the chart `make bench` draws (tests/bench/report.py)
comes out of a partial run too, such as BENCH_ONLY=grail, where a target
measured nothing that a panel shows.
"""

import shutil
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "bench"))

import report  # noqa: E402


def grail_only():
    """Two figures of a grail-only run: no tierfs-local, no local-disk rate
    for the second."""
    figs = [report.Figure("g1", "cold read 1 KiB chunks, 1 reader", "MiB/s",
                          bar=("raw", "g1", 0.9)),
            report.Figure("g2", "cold read 4 MiB chunks, 64 readers", "MiB/s",
                          bar=("raw", "g2", 0.9))]
    res = report.Results()
    for fid, vals in (("g1", {"local": 700, "tierfs-s3": 124, "rclone": 209,
                              "s3fs": 240, "raw": 0.11}),
                      ("g2", {"tierfs-s3": 113, "rclone": 105, "s3fs": 119,
                              "raw": 376})):
        for target, v in vals.items():
            for k in (0.9, 1.0, 1.1):
                res.add(fid, target, v * k)
    return figs, res


@pytest.mark.skipif(not shutil.which("gnuplot"), reason="no gnuplot")
def test_a_partial_run_still_gets_its_chart(tmp_path):
    figs, res = grail_only()
    png = str(tmp_path / "bench.png")
    assert report.chart(figs, res, png) is None
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    gp = (tmp_path / "bench.gp").read_text()
    assert "tierfs-local" not in gp
    assert '"tierfs-s3"' in gp and '"rclone"' in gp and '"s3fs"' in gp


def test_a_note_given_per_target_is_one_line_naming_them():
    figs, res = grail_only()
    cap = "stopped by the 2.5 s cap before the end of the file on"
    for _ in range(3):  # three runs each
        res.note("g1", cap, "s3fs")
        res.note("g1", cap, "rclone")
    res.note("g2", "grail only reads")
    lines = report.failures_and_notes(figs, res)
    assert lines == [f"note: cold read 1 KiB chunks, 1 reader: {cap}: s3fs, rclone",
                     "note: cold read 4 MiB chunks, 64 readers: grail only reads"]
    doc = report.to_json(figs, res, {})
    assert [f["notes"] for f in doc["figures"]] == [[f"{cap}: s3fs, rclone"],
                                                      ["grail only reads"]]


def meta_run(floor_us=20.0):
    """create (2 requests each), unlink (1) and the one-request figure; the
    local disk at 50k creates/s and 100k unlinks/s, tierfs far below."""
    figs = [report.Figure("create", "create 4 KiB files", "files/s",
                          bar=("local", 1.0), requests=2),
            report.Figure("unlink", "unlink those files", "files/s",
                          bar=("local", 0.5), requests=1),
            report.Figure("stat", "stat those files", "stats/s", bar=("local", 0.8)),
            report.Figure(report.FLOOR_FIGURE, "stat of an absent name", "us",
                          better="low", peers=False)]
    res = report.Results()
    vals = {"create": {"local": 50000, "tierfs-s3": 4000},
            "unlink": {"local": 100000, "tierfs-s3": 60000},
            "stat": {"local": 200000, "tierfs-s3": 100000},
            report.FLOOR_FIGURE: {"local": 2.0, "tierfs-s3": 22.0}}
    if floor_us is not None:
        vals[report.FLOOR_FIGURE]["floor"] = floor_us
    for fid, per in vals.items():
        for target, v in per.items():
            res.add(fid, target, v)
    return figs, res


def test_a_missed_local_bar_says_how_far_an_instant_fuse_server_gets():
    figs, res = meta_run(floor_us=20.0)
    create, unlink, stat, floor = figs
    # a request: the empty server's 20 us less the local disk's 2 us of
    # the same stat; 2 of 18 us: 27,778 creates/s at best
    assert report.request_us(res) == 18.0
    assert report.verdict(create, res) == (
        "MISSED", "0.08x local; an instant FUSE server: <= 0.56x, 2 requests of 18 us")
    # met: no bound to give
    assert report.verdict(unlink, res) == ("met", "")
    # no request count known: the miss alone
    assert report.verdict(stat, res) == ("MISSED", "0.50x local")
    assert report.verdict(floor, res) == ("info", "")
    rows = {r["id"]: r for r in report.to_json(figs, res, {})["figures"]}
    assert rows["create"]["fuse_bound_vs_local"] == pytest.approx(1e6 / 36 / 50000)
    assert rows["create"]["fuse_requests"] == 2
    assert rows["stat"]["fuse_bound_vs_local"] is None
    assert rows[report.FLOOR_FIGURE]["targets"]["floor"]["median"] == 20.0


def test_without_the_empty_server_a_miss_gives_no_bound():
    figs, res = meta_run(floor_us=None)
    assert report.verdict(figs[0], res) == ("MISSED", "0.08x local")
    assert report.fuse_bound(figs[0], res) is None


def test_the_table_has_the_empty_server_column():
    figs, res = meta_run()
    lines = report.table(figs, res, 1)
    head = lines[1]
    assert head.index("local disk") < head.index("empty FUSE") < head.index("tierfs s3")
    row = next(x for x in lines if x.startswith("stat of an absent name"))
    assert row.split()[6:9] == ["2.00", "20.0", "*22.0"]


def test_a_request_is_the_empty_server_alone_without_a_local_figure():
    figs, res = meta_run(floor_us=20.0)
    del res.values[report.FLOOR_FIGURE]["local"]
    assert report.request_us(res) == 20.0
    assert report.fuse_bound(figs[0], res) == pytest.approx(1e6 / 40 / 50000)
