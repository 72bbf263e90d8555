"""test_manifests.py: every YAML file of the packaging parses; `kubectl
kustomize` renders deploy/kustomize and deploy/bench (and its overlays);
deploy/kustomize is the chart's defaults, object for object; and the
generated files are up to date with the chart and bench/fio/.
"""

import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT, HERE

KUBECTL = shutil.which("kubectl")


def yaml_files():
    out = []
    for d in ("charts", "deploy", "tests/deploy"):
        for p in sorted((ROOT / d).rglob("*.y*ml")):
            if "templates" in p.parts:
                continue  # Go templates: rendered and parsed in test_chart
            out.append(p)
    return out


def test_there_are_yaml_files_to_check():
    names = {p.relative_to(ROOT).as_posix() for p in yaml_files()}
    for want in ("charts/tierfs/values.yaml", "charts/tierfs/Chart.yaml",
                 "deploy/kustomize/kustomization.yaml",
                 "deploy/bench/base/job.yaml",
                 "deploy/jupyterhub/z2jh-values.yaml",
                 "tests/deploy/values-all.yaml"):
        assert want in names


@pytest.mark.parametrize("path", yaml_files(),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_yaml_parses(path):
    docs = [d for d in yaml.safe_load_all(path.read_text())
            if d is not None]
    assert docs, f"{path}: empty"
    for d in docs:
        assert isinstance(d, dict), f"{path}: a document is not a mapping"


def kustomize(path):
    if not KUBECTL:
        pytest.fail("kubectl not found: hack/install-deps.sh installs "
                    "kubernetes-client")
    p = subprocess.run([KUBECTL, "kustomize", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"kubectl kustomize {path}: {p.stderr}"
    return [d for d in yaml.safe_load_all(p.stdout) if d]


@pytest.mark.parametrize("path", ["deploy/kustomize", "deploy/bench",
                                  "deploy/bench/base", "deploy/bench/nfs",
                                  "deploy/bench/efs"])
def test_kubectl_kustomize_renders(path):
    docs = kustomize(ROOT / path)
    assert docs and all("kind" in d and "apiVersion" in d for d in docs)


def comparable(obj):
    """An object without what only Helm or only kubectl sets."""
    md = obj["metadata"]
    labels = dict(md.get("labels", {}))
    labels.pop("helm.sh/chart", None)
    labels.pop("app.kubernetes.io/managed-by", None)
    out = dict(obj, metadata=dict(md, labels=labels))
    return out


def key(o):
    return (o["kind"], o["metadata"]["name"],
            o["metadata"].get("namespace"))


def test_kustomize_is_the_charts_defaults(chart_default):
    kz = {key(o): comparable(o) for o in kustomize(ROOT / "deploy/kustomize")}
    ns = kz.pop(("Namespace", "tierfs", None))
    assert ns["metadata"]["name"] == "tierfs"
    helm = {key(o): comparable(o) for o in chart_default.objs}
    assert set(kz) == set(helm), \
        f"only in kustomize: {set(kz) - set(helm)}; " \
        f"only in the chart: {set(helm) - set(kz)}"
    for k in helm:
        assert kz[k] == helm[k], f"{k} differs"


def test_kustomize_labels_say_kubectl_manages_them():
    for o in kustomize(ROOT / "deploy/kustomize"):
        labels = o["metadata"].get("labels", {})
        assert "helm.sh/chart" not in labels
        if "app.kubernetes.io/managed-by" in labels:
            assert labels["app.kubernetes.io/managed-by"] == "kubectl"


def test_generated_files_are_up_to_date():
    p = subprocess.run(["/usr/bin/python3", str(HERE / "gen_manifests.py"),
                        "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_bench_overlays_only_rename_and_change_the_class():
    base = {o["kind"]: o for o in kustomize(ROOT / "deploy/bench")}
    for name, sc in (("nfs", "nfs-csi"), ("efs", "efs-sc")):
        got = {o["kind"]: o for o in kustomize(ROOT / "deploy/bench" / name)}
        assert set(got) == set(base)
        for kind, o in got.items():
            assert o["metadata"]["name"] == \
                base[kind]["metadata"]["name"] + "-" + name
        assert got["PersistentVolumeClaim"]["spec"]["storageClassName"] == sc
        pod = got["Job"]["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["data"]["persistentVolumeClaim"]["claimName"] == \
            "tierfs-fio-" + name
        assert vols["jobs"]["configMap"]["name"] == "tierfs-fio-jobs-" + name
        assert got["ConfigMap"]["data"] == base["ConfigMap"]["data"]
        want = base["Job"]["spec"]["template"]["spec"]["containers"]
        assert pod["containers"] == want, "the same fio run"
