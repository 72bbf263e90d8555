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
