"""test_chart.py: the Helm chart renders, for its defaults and for
values-all.yaml (every option set), into well-formed objects of the kinds
tierfs needs, each value reaching the place it is meant for; and values
tierfs-csi would refuse are refused at install time.
"""

import re

import pytest
import yaml

from conftest import (CHART, DRIVER_NAME, VALUES_ALL, container, flag,
                      run_render)

WANT_KINDS = {
    "CSIDriver": 1, "Deployment": 1, "DaemonSet": 1, "ServiceAccount": 2,
    "ClusterRole": 4, "ClusterRoleBinding": 4, "Role": 1, "RoleBinding": 1,
    "VolumeSnapshotClass": 1,
}
API = {
    "CSIDriver": "storage.k8s.io/v1", "StorageClass": "storage.k8s.io/v1",
    "Deployment": "apps/v1", "DaemonSet": "apps/v1",
    "ServiceAccount": "v1", "Secret": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "VolumeSnapshotClass": "snapshot.storage.k8s.io/v1",
}
CLUSTER_SCOPED = {"CSIDriver", "StorageClass", "ClusterRole",
                  "ClusterRoleBinding", "VolumeSnapshotClass"}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def test_chart_yaml_is_helm3_with_a_kube_version_floor():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "tierfs"
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["version"])
    assert meta["kubeVersion"].startswith(">=1.26")


def test_default_values_render_every_kind(chart_default):
    kinds = {}
    for o in chart_default.objs:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    for k, n in WANT_KINDS.items():
        assert kinds.get(k) == n, f"{k}: {kinds.get(k)} rendered, want {n}"
    assert kinds.get("StorageClass") == 1
    assert "Secret" not in kinds, "the default is a Secret the admin makes"


def test_values_all_render_every_kind(chart_all):
    kinds = {o["kind"] for o in chart_all.objs}
    assert set(WANT_KINDS) | {"StorageClass", "Secret"} <= kinds
    assert len(chart_all.of("StorageClass")) == 2


def test_every_object_has_api_version_kind_and_a_valid_name(chart):
    seen = set()
    for src, o in chart.docs:
        kind = o.get("kind")
        assert kind in API, f"{src}: unexpected kind {kind}"
        assert o.get("apiVersion") == API[kind], f"{src}: {kind}"
        md = o.get("metadata") or {}
        name = md.get("name", "")
        assert DNS1123.match(name) and len(name) <= 253, f"{src}: {name!r}"
        if kind in CLUSTER_SCOPED:
            assert "namespace" not in md, f"{kind} {name} is cluster-scoped"
        else:
            assert md.get("namespace") == "tierfs", f"{kind} {name}"
        assert (kind, name) not in seen, f"{kind} {name} rendered twice"
        seen.add((kind, name))
        labels = md.get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == "tierfs"
        assert all(isinstance(v, str) for v in labels.values()), labels


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_workloads_are_well_formed_pods(chart, kind):
    w = chart.one(kind)
    sel = w["spec"]["selector"]["matchLabels"]
    tmpl_labels = w["spec"]["template"]["metadata"]["labels"]
    assert sel and all(tmpl_labels.get(k) == v for k, v in sel.items()), \
        "the selector must match the pod template's labels"
    pod = w["spec"]["template"]["spec"]
    sa = pod["serviceAccountName"]
    assert sa in {o["metadata"]["name"]
                  for o in chart.of("ServiceAccount")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert len(volumes) == len(pod["volumes"]), "volume names repeat"
    ports = []
    names = []
    for c in pod["containers"]:
        names.append(c["name"])
        assert c["image"] and ":" in c["image"].rsplit("/", 1)[-1], \
            f"{c['name']}: image {c['image']!r} has no tag"
        assert not c["image"].endswith(":latest")
        assert c["imagePullPolicy"] in {"Always", "IfNotPresent", "Never"}
        assert "args" in c and "command" not in c, \
            f"{c['name']}: args only, so the image's ENTRYPOINT runs"
        assert all(isinstance(a, str) for a in c["args"]), c["args"]
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']}: no volume {m['name']}"
            assert m["mountPath"].startswith("/")
        for p in c.get("ports", []):
            ports.append(p["containerPort"])
            assert isinstance(p["containerPort"], int)
            assert len(p["name"]) <= 15, f"port name {p['name']} too long"
        probe = c.get("livenessProbe")
        if probe:
            port = probe["httpGet"]["port"]
            assert port in [p["name"] for p in c.get("ports", [])], \
                f"{c['name']}: probe port {port} is not a port of it"
        for e in c.get("env", []):
            assert "value" in e or "valueFrom" in e, e
    assert len(names) == len(set(names)), names
    assert len(ports) == len(set(ports)), f"ports repeat in a pod: {ports}"
    mounted = {m["name"] for c in pod["containers"]
               for m in c.get("volumeMounts", [])}
    assert mounted == set(volumes), "a volume nobody mounts, or the reverse"


def test_controller_has_each_sidecar_once(chart_default):
    pod = chart_default.pod("Deployment")
    assert [c["name"] for c in pod["containers"]] == [
        "tierfs-csi", "csi-provisioner", "csi-attacher", "csi-resizer",
        "csi-snapshotter", "liveness-probe"]
    assert flag(container(pod, "tierfs-csi")["args"], "--mode") == \
        "controller"
    assert "--extra-create-metadata" in \
        container(pod, "csi-provisioner")["args"]


def test_node_plugin_is_privileged_with_bidirectional_kubelet_dir(chart):
    pod = chart.pod("DaemonSet")
    assert [c["name"] for c in pod["containers"]] == [
        "tierfs-csi", "node-driver-registrar", "liveness-probe"]
    c = container(pod, "tierfs-csi")
    assert flag(c["args"], "--mode") == "node"
    assert c["securityContext"]["privileged"] is True
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    kubelet = vols["kubelet-dir"]["hostPath"]["path"]
    assert mounts["kubelet-dir"]["mountPath"] == kubelet, \
        "staging and target paths must be the same inside and outside"
    assert mounts["kubelet-dir"]["mountPropagation"] == "Bidirectional"
    assert vols["fuse-device"]["hostPath"] == {"path": "/dev/fuse",
                                               "type": "CharDevice"}
    assert mounts["fuse-device"]["mountPath"] == "/dev/fuse"
    cache = vols["cache-root"]["hostPath"]
    assert cache["type"] == "DirectoryOrCreate"
    assert mounts["cache-root"]["mountPath"] == cache["path"] == \
        flag(c["args"], "--cache-root")
    # only tierfs-csi needs the host's mounts; the sidecars get none
    for side in pod["containers"][1:]:
        assert not side.get("securityContext", {}).get("privileged")
        assert all("mountPropagation" not in m for m in side["volumeMounts"])
    assert pod["automountServiceAccountToken"] is False


def test_kubelet_dir_trailing_slash_is_normalised(chart_all):
    pod = chart_all.pod("DaemonSet")
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]
            if "hostPath" in v}
    assert vols["kubelet-dir"] == "/var/lib/k0s/kubelet"
    assert vols["socket-dir"] == "/var/lib/k0s/kubelet/plugins/" + DRIVER_NAME
    assert vols["registration-dir"] == "/var/lib/k0s/kubelet/plugins_registry"


def test_values_all_reach_their_places(chart_all):
    v = yaml.safe_load(VALUES_ALL.read_text())
    ctl = chart_all.pod("Deployment")
    node = chart_all.pod("DaemonSet")
    csi_c, csi_n = container(ctl, "tierfs-csi"), container(node, "tierfs-csi")
    img = f"{v['image']['repository']}:{v['image']['tag']}"
    assert csi_c["image"] == csi_n["image"] == img
    assert csi_c["imagePullPolicy"] == "Always"
    for pod, part in ((ctl, "controller"), (node, "node")):
        assert pod["imagePullSecrets"] == v["imagePullSecrets"]
        assert pod["priorityClassName"] == v[part]["priorityClassName"]
        assert pod["nodeSelector"] == v[part]["nodeSelector"]
        assert pod["tolerations"] == v[part]["tolerations"]
        assert pod["affinity"] == v[part]["affinity"]
    assert chart_all.one("Deployment")["spec"]["replicas"] == 3
    assert csi_c["resources"] == v["controller"]["resources"]
    assert csi_n["resources"] == v["node"]["resources"]
    assert node["terminationGracePeriodSeconds"] == 120
    assert chart_all.one("DaemonSet")["spec"]["updateStrategy"] == \
        v["node"]["updateStrategy"]
    side = {"provisioner": "csi-provisioner", "attacher": "csi-attacher",
            "resizer": "csi-resizer", "snapshotter": "csi-snapshotter"}
    for key, name in side.items():
        c = container(ctl, name)
        s = v["sidecars"][key]
        assert c["image"] == f"{s['repository']}:{s['tag']}"
        assert c["imagePullPolicy"] == "Always"
        assert c["resources"] == s["resources"]
        assert flag(c["args"], "--timeout") == s["timeout"]
        assert flag(c["args"], "--v") == "5"
        le = v["controller"]["leaderElection"]
        assert "--leader-election" in c["args"]
        assert flag(c["args"], "--leader-election-namespace") == "tierfs"
        assert flag(c["args"], "--leader-election-lease-duration") == \
            le["leaseDuration"]
        assert flag(c["args"], "--leader-election-renew-deadline") == \
            le["renewDeadline"]
        assert flag(c["args"], "--leader-election-retry-period") == \
            le["retryPeriod"]
        # metrics.enabled false: no sidecar serves them
        assert flag(c["args"], "--http-endpoint") is None
        assert "ports" not in c
    args = csi_c["args"]
    assert flag(args, "--s3-endpoint") == v["s3"]["endpoint"]
    assert flag(args, "--s3-region") == v["s3"]["region"]
    assert [a.split("=", 1)[1] for a in args
            if a.startswith("--list-bucket=")] == \
        v["controller"]["listBuckets"]
    assert flag(args, "--capacity-available") == "10Ti"
    assert flag(args, "--credentials-file") == \
        "/etc/tierfs/credentials/aws-credentials"
    assert flag(csi_n["args"], "--cache-root") == "/mnt/nvme/tierfs"
    assert flag(csi_n["args"], "--s3-region") == v["s3"]["region"]
    for c in (csi_c, csi_n):
        env = {e["name"]: e for e in c["env"]}
        assert env["AWS_CA_BUNDLE"]["value"] == "/etc/tierfs/ca/ca.pem"
        ca = [m for m in c["volumeMounts"] if m["name"] == "ca-bundle"]
        assert ca == [{"name": "ca-bundle", "mountPath": "/etc/tierfs/ca",
                       "readOnly": True}]
    for pod in (ctl, node):
        ca = [x for x in pod["volumes"] if x["name"] == "ca-bundle"][0]
        assert ca["configMap"]["name"] == "minio-ca"
    for name, key in (("node-driver-registrar", "nodeDriverRegistrar"),
                      ("liveness-probe", "livenessProbe")):
        s = v["sidecars"][key]
        assert container(node, name)["image"] == \
            f"{s['repository']}:{s['tag']}"
        assert container(node, name)["resources"] == s["resources"]
    assert flag(container(node, "liveness-probe")["args"],
                "--http-endpoint") == ":19809"
    assert flag(container(ctl, "liveness-probe")["args"],
                "--http-endpoint") == ":19808"
    assert flag(container(node, "node-driver-registrar")["args"],
                "--http-endpoint") == ":19810"


def test_default_metrics_ports_are_distinct_sidecar_endpoints(chart_default):
    ctl = chart_default.pod("Deployment")
    got = {}
    for name in ("csi-provisioner", "csi-attacher", "csi-resizer",
               "csi-snapshotter"):
        c = container(ctl, name)
        ep = flag(c["args"], "--http-endpoint")
        assert ep and ep.startswith(":"), f"{name}: {ep}"
        assert [p["containerPort"] for p in c["ports"]] == [int(ep[1:])]
        got[name] = int(ep[1:])
    assert sorted(got.values()) == [8080, 8081, 8082, 8083]


def test_storage_classes_carry_each_option(chart_all):
    v = yaml.safe_load(VALUES_ALL.read_text())
    home = chart_all.one("StorageClass", "tierfs-home")
    want = v["storageClasses"][0]
    assert home["metadata"]["annotations"] == {
        "storageclass.kubernetes.io/is-default-class": "true"}
    assert home["provisioner"] == DRIVER_NAME
    assert home["reclaimPolicy"] == "Retain"
    assert home["volumeBindingMode"] == "WaitForFirstConsumer"
    assert home["allowVolumeExpansion"] is False
    p = home["parameters"]
    assert all(isinstance(x, str) for x in p.values()), \
        "StorageClass parameters must be strings"
    for k in ("bucket", "prefix", "durability", "onDelete", "cacheSize",
              "mode", "endpoint", "region"):
        assert p[k] == str(want[k]), k
    assert p["uid"] == "4000000" and p["gid"] == "100", \
        "numbers in values become decimal strings (helm's float64 would " \
        "print 4e+06)"
    for op in ("provisioner", "controller-publish", "node-stage",
               "controller-expand"):
        assert p[f"csi.storage.k8s.io/{op}-secret-name"] == \
            "other-credentials"
        assert p[f"csi.storage.k8s.io/{op}-secret-namespace"] == "tierfs"
    scratch = chart_all.one("StorageClass", "tierfs-scratch")
    q = scratch["parameters"]
    assert q["bucket"] == "homes", "s3.bucket when the class names none"
    assert q["endpoint"] == v["s3"]["endpoint"]
    assert q["region"] == v["s3"]["region"]
    assert "uid" not in q and "mode" not in q, "unset keys are not sent"
    assert q["csi.storage.k8s.io/node-stage-secret-name"] == \
        "tierfs-credentials"
    assert "annotations" not in scratch["metadata"]
    assert scratch["allowVolumeExpansion"] is True


def test_default_storage_class_needs_no_endpoint(chart_default):
    p = chart_default.one("StorageClass", "tierfs")["parameters"]
    assert p["bucket"] == "tierfs"
    assert "endpoint" not in p and "region" not in p


def test_volume_snapshot_class(chart_all):
    vsc = chart_all.one("VolumeSnapshotClass")
    assert vsc["metadata"]["name"] == "tierfs-snapshots"
    assert vsc["driver"] == DRIVER_NAME
    assert vsc["deletionPolicy"] == "Retain"
    assert vsc["metadata"]["annotations"] == {
        "snapshot.storage.kubernetes.io/is-default-class": "true"}
    for op in ("snapshotter", "snapshotter-list"):
        assert vsc["parameters"][f"csi.storage.k8s.io/{op}-secret-name"] \
            == "snapshot-credentials"
        assert vsc["parameters"][
            f"csi.storage.k8s.io/{op}-secret-namespace"] == "tierfs"


def test_secret_holds_keys_and_credentials_file(chart_all):
    v = yaml.safe_load(VALUES_ALL.read_text())["credentials"]
    s = chart_all.one("Secret")
    assert s["metadata"]["name"] == "tierfs-credentials"
    assert s["type"] == "Opaque"
    d = s["stringData"]
    assert d["accessKeyID"] == v["accessKeyID"]
    assert d["secretAccessKey"] == v["secretAccessKey"]
    assert d["sessionToken"] == v["sessionToken"]
    assert d["aws-credentials"] == (
        "[default]\n"
        f"aws_access_key_id = {v['accessKeyID']}\n"
        f"aws_secret_access_key = {v['secretAccessKey']}\n"
        f"aws_session_token = {v['sessionToken']}\n")


def test_credentials_never_reach_args_or_env(chart_all):
    secret = yaml.safe_load(VALUES_ALL.read_text())["credentials"]
    values = [secret["accessKeyID"], secret["secretAccessKey"],
              secret["sessionToken"]]
    for kind in ("Deployment", "DaemonSet"):
        text = yaml.safe_dump(chart_all.one(kind))
        for s in values:
            assert s not in text, f"a credential is in the {kind}"
        pod = chart_all.pod(kind)
        for c in pod["containers"]:
            for e in c.get("env", []):
                assert not e["name"].startswith(("AWS_ACCESS", "AWS_SECRET",
                                                 "AWS_SESSION"))
    # the controller's file is a Secret volume of mode 0400, as a file
    pod = chart_all.pod("Deployment")
    vol = [x for x in pod["volumes"] if x["name"] == "credentials"][0]
    assert vol["secret"]["defaultMode"] == 0o400
    m = [x for x in container(pod, "tierfs-csi")["volumeMounts"]
         if x["name"] == "credentials"][0]
    assert m["subPath"] == "aws-credentials" and m["readOnly"] is True


def test_notes_render_with_next_steps(chart_default):
    for values, want in (((), "create secret generic tierfs-s3"),
                         ((VALUES_ALL,), "The chart created the Secret")):
        p = run_render(*values, extra=("--notes",))
        assert p.returncode == 0, p.stderr
        assert want in p.stdout
        assert "rollout status daemonset/tierfs-node" in p.stdout
        assert "<no value>" not in p.stdout


def bad_values(tmp_path, text):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    return f


@pytest.mark.parametrize("text, words", [
    ("node: {launcher: systemd}", "host systemd units are not implemented"),
    ("controller: {replicas: 2, leaderElection: {enabled: false}}",
     "needs controller.leaderElection.enabled"),
    ("storageClasses: [{name: a, durability: fast}]",
     "durability \"fast\": expected s3 or local"),
    ("storageClasses: [{name: a, onDelete: keep}]",
     "onDelete \"keep\": expected delete or retain"),
    ("storageClasses: [{name: a, mode: '0999'}]", "expected an octal mode"),
    ("storageClasses: [{name: a, mode: 0770}]",
     "mode must be a quoted string"),
    ("storageClasses: [{name: a, uid: '-1'}]", "expected a decimal id"),
    ("storageClasses: [{name: a, cacheSize: 20 GB}]",
     "expected a size such as 20Gi"),
    ("storageClasses: [{name: a}, {name: a}]", "listed twice"),
    ("s3: {bucket: ''}", "bucket (or s3.bucket) is required"),
    ("s3: {endpoint: 'minio:9000'}", "expected an http:// or https:// URL"),
    ("credentials: {create: true, accessKeyID: AKIA}",
     "credentials.secretAccessKey is required"),
    ("node: {cacheRoot: var/cache}", "must be an absolute path"),
    ("volumeSnapshotClass: {deletionPolicy: Keep}",
     "expected Delete or Retain"),
])
def test_values_tierfs_would_refuse_fail_the_install(tmp_path, text, words):
    p = run_render(bad_values(tmp_path, text))
    assert p.returncode == 1, p.stdout
    assert words in p.stderr, p.stderr


def test_kube_version_below_the_floor_is_refused():
    p = run_render(extra=("--kube-version", "v1.25.9"))
    assert p.returncode == 1
    assert "incompatible with Kubernetes" in p.stderr
