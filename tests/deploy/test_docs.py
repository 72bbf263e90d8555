"""test_docs.py: the README's "Install on Kubernetes" section says what the
chart and the driver do: its `helm install --set` options exist and render,
its Secret has the keys and the name the chart expects, its example PVC
and pod use the StorageClass the chart makes with the owner it gives, the
image it pushes is the one `make image` tags, and every file it points to
exists. The README still opens with `make demo` and `make test`.
"""

import re
import subprocess

import pytest
import yaml

from conftest import CHART, ROOT, run_render, Rendered

README = ROOT / "README.md"


@pytest.fixture(scope="module")
def section():
    text = README.read_text()
    start = text.index("## Install on Kubernetes")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def commands(section, first_word):
    """The shell commands of the section starting with first_word, with
    their continuation lines joined."""
    lines = [ln.strip() for ln in section.splitlines()]
    out, cur = [], None
    for ln in lines:
        if cur is not None:
            cur += " " + ln.rstrip("\\").strip()
            if not ln.endswith("\\"):
                out.append(cur)
                cur = None
            continue
        if ln.startswith(first_word):
            if ln.endswith("\\"):
                cur = ln.rstrip("\\").strip()
            else:
                out.append(ln)
    return out


def test_readme_opens_with_make_demo_and_make_test():
    head = README.read_text().split("\n## ", 1)[0]
    assert "make demo" in head and "make test" in head
    assert head.index("make demo") < head.index("tierfs is a Kubernetes")


def set_values(cmd):
    return dict(re.findall(r"--set ([\w.]+)=(\S+)", cmd))


def nest(flat):
    out = {}
    for k, v in flat.items():
        d = out
        parts = k.split(".")
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = yaml.safe_load(v)
    return out


def has_path(values, dotted):
    d = values
    for p in dotted.split("."):
        if not isinstance(d, dict) or p not in d:
            return False
        d = d[p]
    return True


def test_every_set_option_in_the_section_is_a_chart_value(section):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    keys = re.findall(r"--set ([\w.]+)=", section)
    assert "image.repository" in keys and "s3.bucket" in keys
    for k in keys:
        assert has_path(values, k), f"--set {k}: no such value"


def test_the_helm_install_command_renders(section, tmp_path):
    (cmd,) = commands(section, "helm install")
    assert " charts/tierfs " in cmd + " "
    ns = re.search(r"-n (\S+)", cmd)[1]
    flat = set_values(cmd)
    f = tmp_path / "readme-values.yaml"
    f.write_text(yaml.safe_dump(nest(flat)))
    p = run_render(f, name=cmd.split()[2], namespace=ns)
    assert p.returncode == 0, p.stderr
    r = Rendered(p.stdout)
    image = r.pod("DaemonSet")["containers"][0]["image"]
    assert image.startswith(flat["image.repository"] + ":")
    sc = r.one("StorageClass", "tierfs")
    assert sc["parameters"]["bucket"] == flat["s3.bucket"]
    assert sc["parameters"]["region"] == flat["s3.region"]
    assert sc["parameters"][
        "csi.storage.k8s.io/node-stage-secret-namespace"] == ns
    # the rollout commands name what was rendered
    for kind, cmdkind in (("Deployment", "deployment"),
                          ("DaemonSet", "daemonset")):
        name = r.one(kind)["metadata"]["name"]
        assert f"rollout status {cmdkind}/{name}" in section


def test_the_secret_is_the_one_the_storage_class_names(section,
                                                       chart_default):
    (cmd,) = commands(section, "kubectl -n tierfs create secret")
    name = re.search(r"create secret generic (\S+)", cmd)[1]
    keys = re.findall(r"--from-literal=(\w+)=", cmd)
    p = chart_default.one("StorageClass")["parameters"]
    assert p["csi.storage.k8s.io/node-stage-secret-name"] == name
    assert p["csi.storage.k8s.io/node-stage-secret-namespace"] == "tierfs"
    assert sorted(keys) == ["accessKeyID", "secretAccessKey"]


def test_the_example_pvc_and_pod_fit_the_storage_class(section,
                                                       chart_default):
    body = section.split("<<'YAML'", 1)[1].split("YAML\n", 1)[0]
    docs = [d for d in yaml.safe_load_all(
        "\n".join(ln[7:] for ln in body.splitlines())) if d]
    pvc, pod = docs
    sc = chart_default.one("StorageClass",
                           pvc["spec"]["storageClassName"])
    ctx = pod["spec"]["securityContext"]
    assert str(ctx["runAsUser"]) == sc["parameters"]["uid"]
    assert str(ctx["fsGroup"]) == sc["parameters"]["gid"]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"][
        "claimName"] == pvc["metadata"]["name"]
    assert sc["allowVolumeExpansion"] is True, "the section expands it"


def test_the_pushed_image_is_what_make_image_tags(section):
    make = subprocess.run(["make", "-s", "-n", "image"], cwd=ROOT,
                          capture_output=True, text=True).stdout
    tags = re.findall(r"\s-t (\S+)", make)
    (push,) = commands(section, "buildah push")
    assert push.split()[2] in tags
    for t in tags:
        assert t in section


def test_files_the_section_names_exist(section):
    paths = set(re.findall(r"`((?:charts|deploy)/[\w./-]+)`", section))
    paths |= set(re.findall(r" ((?:charts|deploy)/[\w/-]+)(?:\s|$)",
                            section))
    assert "deploy/kustomize" in paths
    for p in paths:
        assert (ROOT / p).exists() or (CHART / p).exists(), p
    assert (CHART / "templates" / "NOTES.txt").exists()
