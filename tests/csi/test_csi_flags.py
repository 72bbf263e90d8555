"""tierfs-csi's command line: bad input names the flag and exits non-zero."""

import subprocess

import pytest

from csi_client import csi_bin


def run(*args, timeout=20):
    return subprocess.run([csi_bin(), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_help_exits_zero_and_lists_the_flags():
    r = run("--help")
    assert r.returncode == 0
    for flag in ("--mode", "--endpoint", "--node-id", "--s3-endpoint",
                 "--s3-region", "--cache-root"):
        assert flag in r.stdout


@pytest.mark.parametrize("args,flag", [
    ([], "--mode"),
    (["--mode", "bogus", "--node-id", "n"], "--mode"),
    (["--mode", "node"], "--node-id"),
    (["--mode", "all"], "--node-id"),
    (["--mode", "all", "--node-id", "n", "--endpoint", "tcp://127.0.0.1:9"],
     "--endpoint"),
    (["--mode", "all", "--node-id", "n", "--endpoint", "unix://relative.sock"],
     "--endpoint"),
    (["--mode", "controller", "--cache-root", "relative"], "--cache-root"),
    (["--mode", "controller", "--no-such-flag"], "no-such-flag"),
])
def test_bad_flags_exit_non_zero_naming_the_flag(args, flag, tmp_path):
    r = run(*args, "--endpoint", f"unix://{tmp_path}/csi.sock") \
        if "--endpoint" not in args else run(*args)
    assert r.returncode != 0
    assert flag in r.stderr
    assert not (tmp_path / "csi.sock").exists()


def test_endpoint_on_a_regular_file_is_refused_and_the_file_kept(tmp_path):
    f = tmp_path / "csi.sock"
    f.write_text("not a socket")
    r = run("--mode", "controller", "--endpoint", f"unix://{f}")
    assert r.returncode != 0
    assert "--endpoint" in r.stderr and "not a socket" in r.stderr
    assert f.read_text() == "not a socket"
