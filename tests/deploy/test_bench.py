"""test_bench.py: the fio Job of deploy/bench runs exactly the benchmark
harness's job files, bench/fio/*.fio: its ConfigMap holds them byte for
byte, it runs every one with every variable they use set, the files define
the jobs issue 7 names, and the Job's own script, run here with
/usr/bin/fio on a local directory, prints one JSON line per file that
summarize.py reads.
"""

import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT

FIO = ROOT / "bench" / "fio"
BASE = ROOT / "deploy" / "bench" / "base"


def fio_files():
    return {p.name: p.read_text() for p in sorted(FIO.glob("*.fio"))}


@pytest.fixture(scope="module")
def job():
    return yaml.safe_load((BASE / "job.yaml").read_text())


@pytest.fixture(scope="module")
def fio_container(job):
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c


def test_configmap_holds_the_fio_files_byte_for_byte():
    cm = yaml.safe_load((BASE / "fio-jobs.yaml").read_text())
    assert cm["kind"] == "ConfigMap"
    assert cm["data"] == fio_files()
    assert set(fio_files()) == {"jupyterhub-randrw.fio", "seq-1m.fio"}


def ini(text):
    """fio job file -> {section: {key: value or True}}."""
    out, sec = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith((";", "#")):
            continue
        if line.startswith("["):
            sec = out.setdefault(line.strip("[]"), {})
            continue
        k, _, v = line.partition("=")
        sec[k.strip()] = v.strip() if _ else True
    return out


def test_jupyterhub_job_is_4k_randrw_iodepth_256_4_jobs():
    j = ini(fio_files()["jupyterhub-randrw.fio"])
    opts = {**j["global"], **j["jupyterhub-randrw"]}
    for k, v in {"rw": "randrw", "bs": "4k", "iodepth": "256",
                 "numjobs": "4", "direct": "1", "ioengine": "libaio",
                 "time_based": True, "group_reporting": True}.items():
        assert opts.get(k) == v, k


def test_sequential_jobs_write_then_read_1m():
    j = ini(fio_files()["seq-1m.fio"])
    assert j["global"]["bs"] == "1m"
    assert j["seq-write-1m"]["rw"] == "write"
    assert j["seq-write-1m"]["end_fsync"] == "1"
    assert j["seq-read-1m"]["rw"] == "read"
    assert j["seq-read-1m"]["stonewall"] is True


def test_job_runs_every_file_with_every_variable_set(job, fio_container):
    env = {e["name"]: e["value"] for e in fio_container["env"]}
    assert env["FIO_JOBS"].split() == sorted(fio_files())
    used = set()
    for text in fio_files().values():
        used |= set(re.findall(r"\$\{(\w+)\}", text))
    assert used == {"FIO_DIR", "FIO_SIZE", "FIO_RUNTIME"}
    assert used <= set(env)
    pod = job["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in fio_container["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["jobs"]["configMap"]["name"] == "tierfs-fio-jobs"
    assert env["FIO_JOBS_DIR"] == mounts["jobs"]
    pvc = yaml.safe_load((BASE / "pvc.yaml").read_text())
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == \
        pvc["metadata"]["name"]
    assert env["FIO_DIR"] == mounts["data"]
    assert pvc["spec"]["storageClassName"] == "tierfs"
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0


def test_job_image_is_the_dockerfile_fio_stage(fio_container):
    df = (ROOT / "deploy" / "Dockerfile").read_text()
    stage = df.split("AS fio", 1)[1]
    assert re.search(r"\bfio\b", stage) and re.search(r"\bjq\b", stage)
    make = subprocess.run(["make", "-s", "-n", "image"], cwd=ROOT,
                          capture_output=True, text=True).stdout
    tag = re.search(r"--target fio\s*\\?\s*-t (\S+)", make)[1]
    assert fio_container["image"] == tag


@pytest.fixture(scope="module")
def job_output(fio_container, tmp_path_factory):
    d = tmp_path_factory.mktemp("fio")
    env = {k: v for k, v in os.environ.items()}
    env.update({e["name"]: e["value"] for e in fio_container["env"]})
    # the volume becomes a local directory, the ConfigMap bench/fio; a
    # small file and 1 s instead of 1G and 60 s
    env.update(FIO_DIR=str(d), FIO_JOBS_DIR=str(FIO), FIO_SIZE="8M",
               FIO_RUNTIME="1")
    p = subprocess.run(fio_container["command"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert list(d.iterdir()) == [], "the script leaves the volume empty"
    return p.stdout


def test_job_script_prints_one_json_line_per_file(job_output):
    lines = job_output.splitlines()
    recs = [json.loads(x) for x in lines]
    assert [r["job"] for r in recs] == ["jupyterhub-randrw", "seq-1m"]
    rand = recs[0]["fio"]
    (j,) = rand["jobs"]
    assert j["job options"]["iodepth"] == "256"
    assert j["job options"]["numjobs"] == "4"
    assert rand["global options"]["direct"] == "1"
    assert j["read"]["iops"] > 0 and j["write"]["iops"] > 0
    seq = recs[1]["fio"]["jobs"]
    assert [x["jobname"] for x in seq] == ["seq-write-1m", "seq-read-1m"]
    assert seq[0]["write"]["bw_bytes"] > 0 and seq[1]["read"]["bw_bytes"] > 0


def test_summarize_reads_the_logs(job_output, tmp_path):
    a = tmp_path / "tierfs.log"
    a.write_text("fio: a note on stderr\n" + job_output)
    b = tmp_path / "empty.log"
    b.write_text("no results here\n")
    p = subprocess.run(["/usr/bin/python3",
                        str(ROOT / "deploy/bench/summarize.py"), str(a)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()[1:]
    assert len(rows) == 4
    assert rows[0].split()[:3] == ["jupyterhub-randrw/jupyterhub-randrw",
                                   str(a), "read"]
    p = subprocess.run(["/usr/bin/python3",
                        str(ROOT / "deploy/bench/summarize.py"), str(a),
                        str(b)], capture_output=True, text=True)
    assert p.returncode == 1 and "no fio result" in p.stderr
