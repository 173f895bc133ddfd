"""Fixtures: hipobj-server processes on the soft RoCE NIC, and clients.

The server binary is $HIPOBJ_SERVER_BIN, else target/debug/hipobj-server
or target/release/hipobj-server of this checkout (build it with
`cargo build -p hipobj-server`).
"""

import os
import pathlib
import signal
import subprocess

import pytest

import hipobj

AK, SK = "hipobj-py", "hipobj-py-secret"
# The servers' soft NICs have loopback addresses of their own, not the
# endpoints' 127.0.0.1, and the client accepts a server QP only at the
# endpoint's address unless told (docs/protocol.md section 8).
os.environ.setdefault("HIPOBJ_ALLOW_PEER_GID", "any")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def server_binary() -> str:
    env = os.environ.get("HIPOBJ_SERVER_BIN")
    if env:
        return env
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "hipobj-server"
        if p.exists():
            return str(p)
    raise RuntimeError("no hipobj-server binary: run `cargo build -p hipobj-server` or set HIPOBJ_SERVER_BIN")


class Server:
    def __init__(self, data_dir: pathlib.Path, rdma: bool, max_transfer: int = 1 << 30, extra_args=()):
        args = [
            server_binary(),
            "--address", "127.0.0.1:0",
            "--data-dir", str(data_dir),
            "--access-key", AK,
            "--secret-key", SK,
            "--max-object-size", str(1 << 30),
        ]
        if rdma:
            args += ["--rdma-device", "softroce0", "--max-transfer", str(max_transfer)]
        args += list(extra_args)
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, env={**os.environ, "HIPOBJ_LOG": "warn"}, text=True
        )
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"hipobj-server said {line!r}")
        self.endpoint = "http://" + line[len("listening on "):]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"hipobj-server exited with {rc}"


@pytest.fixture(scope="session")
def rdma_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("rdma-data"), rdma=True)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def plain_server(tmp_path_factory):
    """A server with RDMA off: it answers token requests with 501."""
    s = Server(tmp_path_factory.mktemp("plain-data"), rdma=False)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client():
    c = hipobj.Client(nic_hint="softroce0")
    yield c
    c.close()


def boto3_client(endpoint: str, retries=None):
    """A boto3 S3 client of the test keys; ``retries`` as botocore's
    ``Config`` takes them (default: one retry, ``max_attempts: 1``)."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=AK,
        aws_secret_access_key=SK,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries=retries or {"max_attempts": 1, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


@pytest.fixture(scope="session")
def bucket(rdma_server):
    b = boto3_client(rdma_server.endpoint)
    b.create_bucket(Bucket="pybucket")
    return "pybucket"


@pytest.fixture(scope="session")
def plain_bucket(plain_server):
    b = boto3_client(plain_server.endpoint)
    b.create_bucket(Bucket="plain")
    return "plain"


def metrics(server) -> dict:
    """The server's counters (GET /.hipobj/metrics, Prometheus text)."""
    import urllib.request

    with urllib.request.urlopen(server.endpoint + "/.hipobj/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = int(float(value))
    return out


class Counted:
    """The change in the server's counters over a block:
    ``plain`` is requests without a token (metadata, listings, small bodies)."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        self.before = metrics(self.server)
        return self

    def __exit__(self, *exc):
        after = metrics(self.server)
        self.d = {k: after.get(k, 0) - self.before.get(k, 0) for k in after}
        return False

    def __getitem__(self, k):
        return self.d["hipobj_" + k]

    @property
    def plain(self) -> int:
        # Less the GET of /.hipobj/metrics that read the counters at the end
        # (the server counts it before it answers).
        return self["http_requests_total"] - self["rdma_requests_total"] - 1


@pytest.fixture
def counted(rdma_server):
    return lambda: Counted(rdma_server)


def torch_conn_kw(server) -> dict:
    """The endpoint arguments hipobj.torch and the fsspec filesystem take."""
    return dict(endpoint_url=server.endpoint, aws_access_key_id=AK, aws_secret_access_key=SK, nic_hint="softroce0", fallback=False)
