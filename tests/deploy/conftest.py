"""conftest.py: fixtures for the packaging checks (charts/, deploy/).

No cluster and no S3: the chart is rendered by build/tierfs-render (helm's
template engine, tests/deploy/render/), and what the objects say is
compared with what the built tierfs-csi answers on a unix socket.

- render(*values, name=, namespace=) -> Rendered: the chart's objects.
- chart_default / chart_all: the chart with its defaults, and with
  values-all.yaml (every option set), both release "tierfs".
- driver: tierfs-csi --mode all (build/tierfs-csi, or TIERFS_DEPLOY_CSI_BIN),
  started once with no S3 in its environment; .plugin is a connected
  csi_client.Plugin, .caps what it reports.
- start_csi(args, env): one more tierfs-csi with the given arguments,
  stopped (SIGTERM, exit 0) after the test.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHART = ROOT / "charts" / "tierfs"
VALUES_ALL = HERE / "values-all.yaml"
sys.path.insert(0, str(ROOT / "tests" / "csi"))
sys.path.insert(0, str(HERE))

from csi_client import Plugin  # noqa: E402
from gen_manifests import renderer  # noqa: E402

DRIVER_NAME = "csi.tierfs.dev"


def csi_bin():
    return os.environ.get("TIERFS_DEPLOY_CSI_BIN",
                          str(ROOT / "build" / "tierfs-csi"))


def no_s3_env():
    """The environment without S3 settings or credentials."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("AWS_")}


class Rendered:
    """A rendering of the chart: its documents, parsed."""

    def __init__(self, text):
        self.text = text
        self.docs = []
        for part in text.split("---\n# Source: ")[1:]:
            source, _, body = part.partition("\n")
            obj = yaml.safe_load(body)
            assert isinstance(obj, dict), f"{source}: not a YAML mapping"
            self.docs.append((source, obj))
        self.objs = [o for _, o in self.docs]

    def of(self, kind):
        return [o for o in self.objs if o["kind"] == kind]

    def one(self, kind, name=None):
        found = [o for o in self.of(kind)
                 if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, (f"expected one {kind} {name or ''}, "
                                 f"found {len(found)}")
        return found[0]

    def pod(self, kind):
        """The pod spec of the only Deployment or DaemonSet."""
        return self.one(kind)["spec"]["template"]["spec"]


def run_render(*values, name="tierfs", namespace="tierfs", extra=()):
    args = [renderer(), "--chart", str(CHART), "--name", name,
            "--namespace", namespace, *extra]
    for v in values:
        args += ["-f", str(v)]
    return subprocess.run(args, capture_output=True, text=True)


@pytest.fixture(scope="session")
def render():
    if not Path(renderer()).exists():
        pytest.fail(f"{renderer()} is missing: make build/tierfs-render")

    def go(*values, name="tierfs", namespace="tierfs"):
        p = run_render(*values, name=name, namespace=namespace)
        assert p.returncode == 0, f"rendering failed: {p.stderr}"
        return Rendered(p.stdout)
    return go


@pytest.fixture(scope="session")
def chart_default(render):
    return render()


@pytest.fixture(scope="session")
def chart_all(render):
    return render(VALUES_ALL)


@pytest.fixture(params=["default", "all"])
def chart(request, chart_default, chart_all):
    """Each of the two renderings in turn."""
    return chart_default if request.param == "default" else chart_all


class Csi:
    def __init__(self, proc, sock, log):
        self.proc, self.sock, self.log_path = proc, sock, log
        self.plugin = None

    def log(self):
        return Path(self.log_path).read_text(errors="replace")

    def stop(self):
        if self.plugin:
            self.plugin.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("tierfs-csi did not stop on SIGTERM")


def spawn_csi(args, sock, log_path, env):
    """Starts tierfs-csi with args; waits for its socket."""
    if not Path(csi_bin()).exists():
        pytest.fail(f"{csi_bin()} is missing: make")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([csi_bin(), *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    c = Csi(proc, sock, log_path)
    deadline = time.monotonic() + 20
    while not Path(sock).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"tierfs-csi {' '.join(args)} did not come "
                                 f"up; log:\n{c.log()}")
        time.sleep(0.02)
    c.plugin = Plugin(sock)
    return c


class Driver:
    """What one running tierfs-csi --mode all reports."""

    def __init__(self, csi):
        self.csi = csi
        p = csi.plugin
        pb = p.pb2
        self.pb2 = pb
        self.plugin = p
        self.info = p.GetPluginInfo(pb.GetPluginInfoRequest())
        self.plugin_caps = p.GetPluginCapabilities(
            pb.GetPluginCapabilitiesRequest()).capabilities
        self.controller_caps = {
            pb.ControllerServiceCapability.RPC.Type.Name(c.rpc.type)
            for c in p.ControllerGetCapabilities(
                pb.ControllerGetCapabilitiesRequest()).capabilities}
        self.node_caps = {
            pb.NodeServiceCapability.RPC.Type.Name(c.rpc.type)
            for c in p.NodeGetCapabilities(
                pb.NodeGetCapabilitiesRequest()).capabilities}
        self.node_info = p.NodeGetInfo(pb.NodeGetInfoRequest())

    def plugin_services(self):
        pb = self.pb2
        return {pb.PluginCapability.Service.Type.Name(c.service.type)
                for c in self.plugin_caps if c.HasField("service")}

    def plugin_expansion(self):
        pb = self.pb2
        return {pb.PluginCapability.VolumeExpansion.Type.Name(
            c.volume_expansion.type)
            for c in self.plugin_caps if c.HasField("volume_expansion")}


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("driver")
    sock = tmp / "csi.sock"
    c = spawn_csi(["--mode", "all", "--endpoint", f"unix://{sock}",
                   "--node-id", "n1", "--cache-root", str(tmp / "cache")],
                  sock, tmp / "csi.log", no_s3_env())
    yield Driver(c)
    assert c.stop() == 0, f"tierfs-csi exit status; log:\n{c.log()}"


@pytest.fixture
def start_csi(tmp_path):
    started = []

    def start(args, env=None):
        sock = tmp_path / f"s{len(started)}" / "csi.sock"
        c = spawn_csi([*args, "--endpoint", f"unix://{sock}"], sock,
                      tmp_path / f"csi{len(started)}.log",
                      env if env is not None else no_s3_env())
        started.append(c)
        return c
    yield start
    for c in started:
        running = c.proc.poll() is None
        rc = c.stop()
        if running:
            assert rc == 0, f"exit status {rc} after SIGTERM:\n{c.log()}"


def container(pod, name):
    found = [c for c in pod["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name}: found {len(found)}"
    return found[0]


def flag(args, name):
    """The value of --name=value in args (None when absent)."""
    vals = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(vals) <= 1, f"{name} given {len(vals)} times"
    return vals[0] if vals else None
