"""Both clients over https: hipobj-server serving TLS with a certificate
from a CA that openssl makes here, RDMA on the soft RoCE NIC. Trusting the
CA (``hipobj.S3(ca_bundle=...)``, boto3's ``verify=``) the bytes move by
RDMA as over http; trusting another CA, or the system's roots, the
handshake is refused and nothing moves."""

import os
import pathlib
import shutil
import signal
import subprocess

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, server_binary

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d: pathlib.Path, name: str) -> pathlib.Path:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"))
    return d / f"{name}.pem"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca = _ca(d, "py-test-ca")
    other = _ca(d, "someone-else")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(ca), "-CAkey", str(d / "py-test-ca.key"),
             "-CAcreateserial", "-days", "2", "-extfile", str(d / "ext"), "-out", str(d / "server.crt"))
    proc = subprocess.Popen(
        [server_binary(), "--address", "127.0.0.1:0", "--data-dir", str(d / "data"),
         "--access-key", AK, "--secret-key", SK, "--rdma-device", "softroce0",
         "--tls-cert", str(d / "server.crt"), "--tls-key", str(d / "server.key")],
        stdout=subprocess.PIPE, env={**os.environ, "HIPOBJ_LOG": "warn"}, text=True,
    )
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    yield "https://" + line[len("listening on "):], str(ca), str(other)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def _boto3(endpoint, verify):
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=AK, aws_secret_access_key=SK,
        region_name="us-east-1", verify=verify,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def test_rdma_get_and_put_over_https_from_both_clients(client, tls):
    endpoint, ca, _ = tls
    b3 = _boto3(endpoint, ca)
    b3.create_bucket(Bucket="tls")
    src = np.random.default_rng(5).integers(0, 256, (2 << 20) + 9, dtype=np.uint8)

    s3 = hipobj.S3(client, endpoint, AK, SK, fallback=False, ca_bundle=ca)
    assert s3.put_from(src, "tls", "builtin") == src.nbytes and s3.last["rdma"] is True
    dst = np.zeros_like(src)
    assert s3.get_into(dst, "tls", "builtin") == src.nbytes and s3.last["rdma"] is True
    assert np.array_equal(src, dst)

    boto = hipobj.Boto3(client, b3, fallback=False)
    assert boto.put_from(src, "tls", "boto3") == src.nbytes
    dst = np.zeros_like(src)
    assert boto.get_into(dst, "tls", "boto3") == src.nbytes
    assert np.array_equal(src, dst)
    assert b3.get_object(Bucket="tls", Key="builtin")["Body"].read() == src.tobytes()


def test_a_certificate_from_another_ca_is_refused(client, tls, monkeypatch):
    endpoint, _, other = tls
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    for bundle in (other, None):
        s3 = hipobj.S3(client, endpoint, AK, SK, fallback=False, ca_bundle=bundle)
        with pytest.raises(hipobj.HipObjError, match="TLS certificate is not trusted"):
            s3.get_into(buf, "tls", "builtin")
    # AWS_CA_BUNDLE is read when no ca_bundle is given.
    monkeypatch.setenv("AWS_CA_BUNDLE", other)
    with pytest.raises(hipobj.HipObjError, match="TLS certificate is not trusted"):
        hipobj.S3(client, endpoint, AK, SK, fallback=False).get_into(buf, "tls", "builtin")
    import botocore.exceptions

    # botocore refuses the handshake (how hipobj.Boto3 surfaces botocore's
    # errors is the package's own business).
    with pytest.raises((botocore.exceptions.SSLError, hipobj.HipObjError)):
        hipobj.Boto3(client, _boto3(endpoint, other), fallback=False).get_into(buf, "tls", "builtin")
    assert not buf.any(), "bytes landed from a server that was not trusted"
    with pytest.raises(hipobj.HipObjError, match="no CERTIFICATE"):
        hipobj.S3(client, endpoint, AK, SK, ca_bundle=os.devnull)


def test_encrypted_objects_move_by_rdma_through_boto3(client, tls):
    """SSE-C and SSE-S3 objects, and versions of a versioned SSE-C object,
    PUT and GET by RDMA through boto3 with ``extra_args``: byte-exact, and an
    SSE-C object refuses a GET without its key (nothing lands)."""
    endpoint, ca, _ = tls
    b3 = _boto3(endpoint, ca)
    b3.create_bucket(Bucket="sse")
    src = np.random.default_rng(9).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)
    key = bytes(range(32))
    sse_c = hipobj.Boto3(client, b3, fallback=False, extra_args={"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key})
    assert sse_c.put_from(src, "sse", "c") == src.nbytes and sse_c._tls.rdma is True
    dst = np.zeros_like(src)
    assert sse_c.get_into(dst, "sse", "c") == src.nbytes and sse_c._tls.rdma is True
    assert np.array_equal(src, dst)
    head = b3.head_object(Bucket="sse", Key="c", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    assert head["SSECustomerAlgorithm"] == "AES256"
    plain = hipobj.Boto3(client, b3, fallback=False)
    dst = np.zeros_like(src)
    with pytest.raises(hipobj.HipObjError) as e:
        plain.get_into(dst, "sse", "c")
    assert getattr(e.value, "status", None) == 400, e.value
    assert not dst.any(), "bytes landed without the key"

    sse_s3 = hipobj.Boto3(client, b3, fallback=False, extra_args={"ServerSideEncryption": "AES256"})
    assert sse_s3.put_from(src, "sse", "s3") == src.nbytes and sse_s3._tls.rdma is True
    dst = np.zeros_like(src)
    assert plain.get_into(dst, "sse", "s3") == src.nbytes and plain._tls.rdma is True
    assert np.array_equal(src, dst)
    assert b3.head_object(Bucket="sse", Key="s3")["ServerSideEncryption"] == "AES256"
    with pytest.raises(ValueError):
        hipobj.Boto3(client, b3, extra_args={"Tagging": "a=b"})

    # A versioned bucket: two SSE-C versions PUT by RDMA, each read back by
    # RDMA by its VersionId.
    b3.put_bucket_versioning(Bucket="sse", VersioningConfiguration={"Status": "Enabled"})
    versions = []
    for seed in (1, 2):
        data = np.random.default_rng(seed).integers(0, 256, (1 << 20) + seed, dtype=np.uint8)
        assert sse_c.put_from(data, "sse", "v") == data.nbytes and sse_c._tls.rdma is True
        head = b3.head_object(Bucket="sse", Key="v", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
        versions.append((head["VersionId"], data))
    assert versions[0][0] != versions[1][0]
    for vid, data in versions:
        by_version = hipobj.Boto3(client, b3, fallback=False, extra_args={"VersionId": vid, "SSECustomerAlgorithm": "AES256", "SSECustomerKey": key})
        dst = np.zeros_like(data)
        assert by_version.get_into(dst, "sse", "v") == data.nbytes and by_version._tls.rdma is True
        assert np.array_equal(dst, data), vid
