"""test_rbac.py: the rendered RBAC lets each sidecar do what it does, and
no more than that.

An evaluator answers "may this ServiceAccount do VERB on RESOURCE in
NAMESPACE?" from the rendered ClusterRoles, Roles and their bindings,
the way the API server's RBAC authorizer does. NEEDS is, per sidecar, the
rules of its upstream deploy/kubernetes/rbac.yaml (kubernetes-csi
external-provisioner v5/v6, external-attacher v4, external-resizer v1/v2,
external-snapshotter v8 csi-snapshotter), with the optional secrets rule
that drivers with CSI secrets enable; plus a Lease for leader election.
"""

import re

import pytest

from conftest import container, flag

CORE, STORAGE, SNAP = "", "storage.k8s.io", "snapshot.storage.k8s.io"
NEEDS = {
    "csi-provisioner": [
        (CORE, "persistentvolumes", "get list watch create patch delete"),
        (CORE, "persistentvolumeclaims", "get list watch update"),
        (STORAGE, "storageclasses", "get list watch"),
        (CORE, "events", "list watch create update patch"),
        (SNAP, "volumesnapshots", "get list"),
        (SNAP, "volumesnapshotcontents", "get list"),
        (STORAGE, "csinodes", "get list watch"),
        (CORE, "nodes", "get list watch"),
        # the driver has PUBLISH_UNPUBLISH_VOLUME
        (STORAGE, "volumeattachments", "get list watch"),
    ],
    "csi-attacher": [
        (CORE, "persistentvolumes", "get list watch patch"),
        (STORAGE, "csinodes", "get list watch"),
        (STORAGE, "volumeattachments", "get list watch patch"),
        (STORAGE, "volumeattachments/status", "patch"),
    ],
    "csi-resizer": [
        (CORE, "persistentvolumes", "get list watch patch"),
        (CORE, "persistentvolumeclaims", "get list watch"),
        (CORE, "pods", "get list watch"),
        (CORE, "persistentvolumeclaims/status", "patch"),
        (CORE, "events", "list watch create update patch"),
    ],
    "csi-snapshotter": [
        (CORE, "events", "list watch create update patch"),
        (SNAP, "volumesnapshotclasses", "get list watch"),
        (SNAP, "volumesnapshotcontents", "get list watch update patch"),
        (SNAP, "volumesnapshotcontents/status", "update patch"),
    ],
}
LEASE = ("coordination.k8s.io", "leases", "get watch list delete update create")
SECRET_PARAM = re.compile(r"^csi\.storage\.k8s\.io/(.*)-secret-namespace$")


class Rbac:
    def __init__(self, chart):
        self.roles = {("ClusterRole", r["metadata"]["name"], None): r
                      for r in chart.of("ClusterRole")}
        self.roles.update({("Role", r["metadata"]["name"],
                            r["metadata"]["namespace"]): r
                           for r in chart.of("Role")})
        self.bindings = chart.of("ClusterRoleBinding") + \
            chart.of("RoleBinding")

    def rules_of(self, sa, ns):
        """(rules, namespace or None for cluster-wide) bound to sa."""
        out = []
        for b in self.bindings:
            if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and
                       s["namespace"] == ns for s in b["subjects"]):
                continue
            ref = b["roleRef"]
            assert ref["apiGroup"] == "rbac.authorization.k8s.io"
            where = b["metadata"].get("namespace")
            key = (ref["kind"], ref["name"],
                   where if ref["kind"] == "Role" else None)
            assert key in self.roles, f"{b['metadata']['name']}: no {key}"
            out.append((self.roles[key]["rules"],
                        where if b["kind"] == "RoleBinding" else None))
        return out

    def allowed(self, sa, ns, group, resource, verb, where=None):
        for rules, scope in self.rules_of(sa, ns):
            if scope is not None and scope != where:
                continue
            for r in rules:
                if group in r["apiGroups"] and resource in r["resources"] \
                        and verb in r["verbs"]:
                    return True
        return False


def controller_sa(chart):
    pod = chart.pod("Deployment")
    return pod["serviceAccountName"], chart.one("Deployment")["metadata"][
        "namespace"]


def test_no_wildcards(chart):
    for r in chart.of("ClusterRole") + chart.of("Role"):
        for rule in r["rules"]:
            for k in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[k], f"{r['metadata']['name']}: {k} *"


@pytest.mark.parametrize("sidecar", sorted(NEEDS))
def test_each_sidecar_may_do_what_it_does(chart, sidecar):
    rbac = Rbac(chart)
    sa, ns = controller_sa(chart)
    assert sidecar in [c["name"] for c in chart.pod("Deployment")[
        "containers"]]
    for group, resource, verbs in NEEDS[sidecar]:
        for verb in verbs.split():
            assert rbac.allowed(sa, ns, group, resource, verb), \
                f"{sidecar} cannot {verb} {resource}"


def test_each_sidecar_has_a_cluster_role_of_its_own(chart):
    names = {r["metadata"]["name"] for r in chart.of("ClusterRole")}
    for sidecar in NEEDS:
        want = "tierfs-" + sidecar.replace("csi-", "")
        assert want in names
        role = [r for r in chart.of("ClusterRole")
                if r["metadata"]["name"] == want][0]
        granted = {(g, res, v) for rule in role["rules"]
                   for g in rule["apiGroups"] for res in rule["resources"]
                   for v in rule["verbs"]}
        needed = {(g, res, v) for g, res, verbs in NEEDS[sidecar]
                  for v in verbs.split()}
        extra = {x for x in granted - needed
                 if x[1] != "volumeattributesclasses"}
        assert needed <= granted and not extra, \
            f"{want}: missing {needed - granted}, more than needed {extra}"


def test_leader_election_lease_in_its_namespace(chart):
    rbac = Rbac(chart)
    sa, ns = controller_sa(chart)
    pod = chart.pod("Deployment")
    for c in pod["containers"]:
        if "--leader-election" not in c["args"]:
            continue
        where = flag(c["args"], "--leader-election-namespace")
        for verb in LEASE[2].split():
            assert rbac.allowed(sa, ns, LEASE[0], LEASE[1], verb, where), \
                f"{c['name']}: cannot {verb} leases in {where}"


def test_secrets_readable_only_where_they_are(chart):
    rbac = Rbac(chart)
    sa, ns = controller_sa(chart)
    wheres = set()
    for o in chart.of("StorageClass") + chart.of("VolumeSnapshotClass"):
        for k, v in o.get("parameters", {}).items():
            m = SECRET_PARAM.match(k)
            if m and m[1] != "node-stage":   # kubelet reads that one
                wheres.add(v)
    assert wheres == {"tierfs"}
    for where in wheres:
        assert rbac.allowed(sa, ns, CORE, "secrets", "get", where)
    assert not rbac.allowed(sa, ns, CORE, "secrets", "get", "kube-system")
    assert not rbac.allowed(sa, ns, CORE, "secrets", "list", "tierfs")


def test_node_plugin_has_no_api_access(chart):
    rbac = Rbac(chart)
    pod = chart.pod("DaemonSet")
    sa = pod["serviceAccountName"]
    ns = chart.one("DaemonSet")["metadata"]["namespace"]
    assert rbac.rules_of(sa, ns) == []
    assert pod["automountServiceAccountToken"] is False
    account = [s for s in chart.of("ServiceAccount")
               if s["metadata"]["name"] == sa][0]
    assert account["automountServiceAccountToken"] is False


def test_every_binding_names_a_rendered_account(chart):
    accounts = {(s["metadata"]["name"], s["metadata"]["namespace"])
                for s in chart.of("ServiceAccount")}
    for b in Rbac(chart).bindings:
        for s in b["subjects"]:
            assert (s["name"], s["namespace"]) in accounts, b["metadata"]
    assert controller_sa(chart) in accounts
    assert container(chart.pod("Deployment"), "tierfs-csi")
