"""test_image.py: deploy/Dockerfile, as far as it can be checked with no
registry to pull debian:12 from: its build stage compiles the binaries from
exactly the files it copies, with packages hack/install-deps.sh also
installs; its runtime stage installs every library the binaries link
(DT_NEEDED, mapped to Debian packages with dpkg -S), fuse3 and
ca-certificates, and puts tierfs beside tierfs-csi; its entrypoint is what
the chart's `args` expect; and the chart's default image is what `make
image` tags.
"""

import re
import shutil
import subprocess

import pytest

from conftest import CHART, ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def stages():
    """{stage name: its text}."""
    out, name = {}, None
    for line in DOCKERFILE.read_text().splitlines():
        m = re.match(r"FROM (\S+) AS (\w+)", line)
        if m:
            name = m[2]
            out[name] = {"from": m[1], "text": ""}
        elif name:
            out[name]["text"] += line + "\n"
    return out


def apt_packages(text):
    """The packages of the stage's apt-get install lines."""
    m = re.search(r"apt-get install -y --no-install-recommends(.*?)(&&|$)",
                  text.replace("\\\n", " "), re.S)
    assert m, "no apt-get install in the stage"
    return set(m[1].split())


def test_stages_are_debian_12():
    s = stages()
    assert set(s) == {"build", "runtime", "fio"}
    assert s["build"]["from"] == "debian:12"
    assert s["runtime"]["from"] == s["fio"]["from"] == "debian:12-slim"


def test_build_packages_are_ones_install_deps_installs():
    deps = (ROOT / "hack" / "install-deps.sh").read_text()
    listed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+",
                            deps.split("PACKAGES=(")[1].split(")")[0]))
    build = apt_packages(stages()["build"]["text"])
    assert build <= listed, f"not in install-deps.sh: {build - listed}"


def test_build_stage_copies_enough_to_build(tmp_path):
    # the COPY lines of the build stage, into an empty directory, then the
    # stage's own make command
    text = stages()["build"]["text"]
    copies = re.findall(r"^COPY (\S+) (\S+)$", text, re.M)
    assert copies
    for src, dst in copies:
        assert not src.startswith("--from")
        s = ROOT / src.rstrip("/")
        d = tmp_path / (dst.rstrip("/") if dst != "./" else s.name)
        if s.is_dir():
            shutil.copytree(s, d)
        else:
            shutil.copy2(s, d)
    p = subprocess.run(["make", "-j2", "all"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for b in ("tierfs-csi", "tierfs", "tierfsctl"):
        assert (tmp_path / "build" / b).exists()
    installed = re.search(r"install -m 0755 (.*?) /out/", text)[1].split()
    assert sorted(installed) == ["build/tierfs", "build/tierfs-csi",
                                 "build/tierfsctl"]


def package_of(lib_path):
    for cand in (lib_path, str(__import__("os").path.realpath(lib_path))):
        p = subprocess.run(["dpkg", "-S", cand], capture_output=True,
                           text=True)
        if p.returncode == 0:
            return p.stdout.split(":")[0]
    pytest.fail(f"no Debian package owns {lib_path}")


def needed_packages():
    pkgs = {}
    for b in ("tierfs-csi", "tierfs", "tierfsctl"):
        path = ROOT / "build" / b
        assert path.exists(), f"{path}: make first"
        dyn = subprocess.run(["readelf", "-d", str(path)], check=True,
                             capture_output=True, text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
        ldd = subprocess.run(["ldd", str(path)], check=True,
                             capture_output=True, text=True).stdout
        where = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
        for lib in needed:
            assert lib in where, f"{b}: ldd does not resolve {lib}"
            pkgs[package_of(where[lib])] = lib
    return pkgs


def test_runtime_installs_every_library_the_binaries_link():
    runtime = apt_packages(stages()["runtime"]["text"])
    need = needed_packages()
    # libc6 is in every Debian image
    missing = {p: lib for p, lib in need.items()
               if p not in runtime and p != "libc6"}
    assert not missing, f"the runtime stage lacks {missing}"
    assert {"fuse3", "ca-certificates"} <= runtime


def test_runtime_puts_tierfs_beside_tierfs_csi_as_entrypoint():
    text = stages()["runtime"]["text"]
    assert "COPY --from=build /out/ /usr/local/bin/" in text
    ep = re.search(r'^ENTRYPOINT \["(.+?)"\]$', text, re.M)[1]
    assert ep == "/usr/local/bin/tierfs-csi", \
        "the chart passes tierfs-csi's flags as args"


def test_chart_default_image_is_what_make_image_tags(chart_default):
    make = subprocess.run(["make", "-s", "-n", "image"], cwd=ROOT,
                          capture_output=True, text=True).stdout
    tag = re.search(r"--target runtime\s*\\?\s*-t (\S+)", make)[1]
    pod = chart_default.pod("DaemonSet")
    assert pod["containers"][0]["image"] == tag
    meta = (CHART / "Chart.yaml").read_text()
    app = re.search(r'^appVersion: "(.+)"$', meta, re.M)[1]
    assert tag.endswith(":" + app)
