"""Credentials beyond static keys (issue 38 finding 4): the AWS SDK's
default chain in hipobj.S3 and the integrations. A session token from the
environment or an argument is sent and signed; a profile of a shared
credentials file is used (hipobj-server refuses the wrong keys); temporary
credentials from a credential_process are renewed once they expire.

The signatures the test doubles receive are checked with botocore's SigV4
signer, not ours."""

import datetime
import http.server
import json
import re
import sys
import threading
import time

import numpy as np
import pytest

import hipobj
from conftest import AK, SK

AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/s3/aws4_request,\s*"
    r"SignedHeaders=(?P<signed>[^,]+),\s*Signature=(?P<sig>[0-9a-f]{64})"
)

# Every key of the shared files and the environment that could lend the
# tests credentials other than the ones they set.
_AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """No credentials anywhere but where a test puts them: empty shared
    files, no instance metadata service."""
    for k in _AWS_VARS:
        monkeypatch.delenv(k, raising=False)
    config = tmp_path / "aws-config"
    creds = tmp_path / "aws-credentials"
    config.write_text("")
    creds.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return config, creds


class SignedRequests:
    """An S3 double on 127.0.0.1 that answers HEAD with a 5-byte object and
    keeps each request's method, path and headers."""

    def __init__(self):
        self.seen = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):
                outer.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(200)
                self.send_header("Content-Length", "5")
                self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
                self.send_header("Last-Modified", "Mon, 07 Dec 2026 12:00:00 GMT")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def double():
    d = SignedRequests()
    yield d
    d.close()


def check_signed(req, key, secret, token):
    """Asserts that `req` is signed by `key`/`secret` with `token` among the
    signed headers, recomputing the signature with botocore."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    method, path, headers = req
    m = AUTH.fullmatch(headers["authorization"])
    assert m, headers["authorization"]
    signed = m["signed"].split(";")
    assert m["key"] == key
    assert headers.get("x-amz-security-token") == token
    assert "x-amz-security-token" in signed, signed
    host = headers["host"]
    r = AWSRequest(method=method, url=f"http://{host}{path}", headers={h: headers[h] for h in signed})
    r.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(Credentials(key, secret, token), "s3", m["region"])
    canonical = auth.canonical_request(r)
    expected = auth.signature(auth.string_to_sign(r, canonical), r)
    assert m["sig"] == expected, canonical


@pytest.mark.parametrize("given", ["environment", "argument"])
def test_a_session_token_is_sent_and_signed(aws_env, monkeypatch, double, client, given):
    key, secret, token = "ASIAHIPOBJTEST", "temporary-secret", "FwoGZXIvYXdzEJr//session+token/="
    if given == "environment":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
        s3 = hipobj.S3(client, double.endpoint)
    else:
        s3 = hipobj.S3(client, double.endpoint, key, secret, session_token=token)
    assert s3.head("bkt", "obj")["size"] == 5
    assert len(double.seen) == 1
    check_signed(double.seen[0], key, secret, token)


def test_a_session_token_reaches_fsspec_and_torch_connections(aws_env, monkeypatch, double, client):
    from hipobj._shared import connect

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    # From the environment, as hipobj.torch's storage, loaders and datasets
    # connect...
    conn = connect(client=client, endpoint_url=double.endpoint)
    conn.s3.head("bkt", "obj")
    check_signed(double.seen[-1], "ASIAENV", "env-secret", "env-token")
    # ...and given as boto3 and s3fs name them.
    conn = connect(client=client, endpoint_url=double.endpoint, aws_access_key_id="ASIAARG", aws_secret_access_key="arg-secret", aws_session_token="arg-token")
    conn.s3.head("bkt", "obj")
    check_signed(double.seen[-1], "ASIAARG", "arg-secret", "arg-token")
    pytest.importorskip("fsspec")
    from hipobj._fsspec import HipObjFileSystem

    fs = HipObjFileSystem(endpoint_url=double.endpoint, key="ASIAFS", secret="fs-secret", token="fs-token", client=client, skip_instance_cache=True)
    assert fs.info("bkt/obj")["size"] == 5
    check_signed(double.seen[-1], "ASIAFS", "fs-secret", "fs-token")


def write_profiles(creds):
    creds.write_text(
        "[default]\naws_access_key_id = wrong-key\naws_secret_access_key = wrong-secret\n\n"
        f"[hipobj]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n"
    )


def round_trip(s3, bucket, key):
    src = np.frombuffer(np.random.default_rng(7).bytes(1 << 20), dtype=np.uint8).copy()
    s3.put_from(src, bucket, key)
    dst = np.zeros_like(src)
    assert s3.get_into(dst, bucket, key) == src.nbytes
    assert s3.last["rdma"]
    assert np.array_equal(src, dst)


def test_a_profile_of_the_shared_credentials_file(aws_env, monkeypatch, rdma_server, bucket, client):
    _, creds = aws_env
    write_profiles(creds)
    # profile=...
    round_trip(hipobj.S3(client, rdma_server.endpoint, profile="hipobj"), bucket, "creds/profile-arg")
    # AWS_PROFILE
    monkeypatch.setenv("AWS_PROFILE", "hipobj")
    round_trip(hipobj.S3(client, rdma_server.endpoint), bucket, "creds/profile-env")
    # A profile named by the program wins over keys in the environment, as
    # boto3's Session(profile_name=) does.
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong-env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-env-secret")
    round_trip(hipobj.S3(client, rdma_server.endpoint, profile="hipobj"), bucket, "creds/profile-over-env")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    # The default profile's keys are wrong: the server refuses them.
    with pytest.raises(hipobj.HipObjError) as e:
        hipobj.S3(client, rdma_server.endpoint).head(bucket, "creds/profile-arg")
    assert e.value.status == 403, e.value
    # Keys and a profile at once is a mistake, not a silent choice.
    with pytest.raises(hipobj.HipObjError, match="not both"):
        hipobj.S3(client, rdma_server.endpoint, AK, SK, profile="hipobj")


def test_a_profile_in_the_integrations(aws_env, rdma_server, bucket, client):
    _, creds = aws_env
    write_profiles(creds)
    from hipobj._shared import connect

    conn = connect(client=client, endpoint_url=rdma_server.endpoint, profile="hipobj", nic_hint="softroce0")
    round_trip(conn.s3, bucket, "creds/profile-conn")
    pytest.importorskip("fsspec")
    from hipobj._fsspec import HipObjFileSystem

    fs = HipObjFileSystem(endpoint_url=rdma_server.endpoint, profile="hipobj", client=client, skip_instance_cache=True)
    fs.pipe_file(f"{bucket}/creds/fsspec", b"by profile")
    assert fs.cat_file(f"{bucket}/creds/fsspec") == b"by profile"


# A credential_process that hands out numbered temporary credentials, each
# valid for `life` seconds, and counts its runs in `counter`.
PROCESS = r"""
import datetime, json, pathlib, sys
counter, life, key, secret = pathlib.Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
n = int(counter.read_text() or 0) + 1 if counter.exists() else 1
counter.write_text(str(n))
until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=life)
print(json.dumps({
    "Version": 1,
    "AccessKeyId": key.replace("{n}", str(n)),
    "SecretAccessKey": secret.replace("{n}", str(n)),
    "SessionToken": f"token-{n}",
    "Expiration": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
}))
"""


def rotating_profile(tmp_path, config, life, key, secret):
    script = tmp_path / "credential_process.py"
    script.write_text(PROCESS)
    counter = tmp_path / "runs"
    config.write_text(
        "[profile rotating]\n"
        f"credential_process = {sys.executable} {script} {counter} {life} {key} {secret}\n"
    )
    return counter


def test_expired_credentials_are_renewed(aws_env, tmp_path, double, client):
    config, _ = aws_env
    # Valid for 12 s: the SDK's cache renews them 5 to 10 s before they
    # expire, so the first call keeps them, and the wait passes their expiry
    # in full.
    counter = rotating_profile(tmp_path, config, 12, "ASIAROT{n}", "secret-{n}")
    s3 = hipobj.S3(client, double.endpoint, profile="rotating")
    s3.head("bkt", "obj")
    check_signed(double.seen[-1], "ASIAROT1", "secret-1", "token-1")
    first_runs = int(counter.read_text())
    time.sleep(13)
    s3.head("bkt", "obj")
    check_signed(double.seen[-1], f"ASIAROT{first_runs + 1}", f"secret-{first_runs + 1}", f"token-{first_runs + 1}")


def test_a_save_renews_credentials_that_expire_during_it(aws_env, tmp_path, rdma_server, bucket, client):
    """Credentials that are always about to expire (valid 1 s): each part
    of a multipart upload is signed with freshly fetched ones, and the
    server (the same keys, the token changing) takes them all."""
    config, _ = aws_env
    counter = rotating_profile(tmp_path, config, 1, AK, SK)
    s3 = hipobj.S3(client, rdma_server.endpoint, profile="rotating", multipart_threshold=5 << 20, part_size=5 << 20)
    src = np.frombuffer(np.random.default_rng(11).bytes(16 << 20), dtype=np.uint8).copy()
    s3.put_from(src, bucket, "creds/rotating")
    runs = int(counter.read_text())
    # CreateMultipartUpload, four parts, CompleteMultipartUpload.
    assert runs >= 6, runs
    dst = np.zeros_like(src)
    s3.get_into(dst, bucket, "creds/rotating")
    assert np.array_equal(src, dst)


class ContainerCredentials:
    """A container credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI)
    on 127.0.0.1: hands out `key`/`secret` with a new session token each
    time, valid for `life` seconds, and counts the requests."""

    def __init__(self, key, secret, life):
        self.asked = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked += 1
                until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=life)
                body = json.dumps({
                    "AccessKeyId": key,
                    "SecretAccessKey": secret,
                    "Token": f"container-token-{outer.asked}",
                    "Expiration": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v2/credentials"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_dcp_save_and_load_with_container_credentials_renewed_throughout(aws_env, monkeypatch, rdma_server, bucket):
    """hipobj.torch with no credential arguments: the container endpoint's
    credentials, always about to expire, asked again along the save and
    the load."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    import hipobj.torch as ht

    endpoint = ContainerCredentials(AK, SK, life=1)
    try:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url)
        kw = dict(endpoint_url=rdma_server.endpoint, nic_hint="softroce0", fallback=False)
        g = torch.Generator().manual_seed(3)
        src = {"w": torch.randn(1024, 1024, generator=g), "b": torch.randn(333, generator=g), "step": 5}
        path = f"s3://{bucket}/creds/dcp-container"
        dcp.save(src, storage_writer=ht.S3RdmaStorageWriter(path, **kw))
        saved = endpoint.asked
        dst = {"w": torch.zeros(1024, 1024), "b": torch.zeros(333), "step": None}
        dcp.load(dst, storage_reader=ht.S3RdmaStorageReader(path, **kw))
    finally:
        endpoint.close()
    assert torch.equal(src["w"], dst["w"]) and torch.equal(src["b"], dst["b"]) and dst["step"] == 5
    # More than one fetch in the save (each request finds them expired),
    # and more in the load.
    assert saved >= 2, saved
    assert endpoint.asked > saved


def test_boto3_transfers_sign_the_session_token_of_boto3s_own_chain(aws_env, monkeypatch, rdma_server, bucket, client):
    """hipobj.Boto3 leaves credentials to boto3: a session token from the
    environment is signed into the RDMA requests that carry the token."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "boto3-session-token")
    b3 = boto3.session.Session().client(
        "s3",
        endpoint_url=rdma_server.endpoint,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    sent = []
    b3.meta.events.register("before-send.s3", lambda request, **_: sent.append(dict(request.headers)))
    front = hipobj.Boto3(client, b3, fallback=False)
    src = np.frombuffer(np.random.default_rng(5).bytes(1 << 20), dtype=np.uint8).copy()
    front.put_from(src, bucket, "creds/boto3")
    dst = np.zeros_like(src)
    front.get_into(dst, bucket, "creds/boto3")
    assert np.array_equal(src, dst)
    rdma = [h for h in sent if "x-amz-rdma-token" in {k.lower() for k in h}]
    assert rdma
    for h in rdma:
        h = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in h.items()}
        assert h["x-amz-security-token"] == "boto3-session-token"
        assert "x-amz-security-token" in AUTH.fullmatch(h["authorization"])["signed"].split(";")


def test_web_identity_credentials_from_sts(aws_env, monkeypatch, tmp_path, rdma_server, bucket, client):
    """IRSA's variables: the chain trades the token file for credentials at
    STS (a double named by AWS_ENDPOINT_URL_STS) and signs with them."""
    import urllib.parse

    calls = []

    class Sts(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            calls.append({k: v[0] for k, v in form.items()})
            body = (
                '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                "<AssumeRoleWithWebIdentityResult><Credentials>"
                f"<AccessKeyId>{AK}</AccessKeyId><SecretAccessKey>{SK}</SecretAccessKey>"
                "<SessionToken>web-identity-session</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration>"
                "</Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/hipobj/test</Arn>"
                "<AssumedRoleId>AROAHIPOBJ:test</AssumedRoleId></AssumedRoleUser></AssumeRoleWithWebIdentityResult>"
                "<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    sts = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sts)
    threading.Thread(target=sts.serve_forever, daemon=True).start()
    try:
        token = tmp_path / "token"
        token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2ln")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
        monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/hipobj")
        monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "test")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{sts.server_address[1]}")
        round_trip(hipobj.S3(client, rdma_server.endpoint), bucket, "creds/web-identity")
    finally:
        sts.shutdown()
        sts.server_close()
    assert calls and calls[0]["Action"] == "AssumeRoleWithWebIdentity"
    assert calls[0]["WebIdentityToken"] == token.read_text()
    assert calls[0]["RoleArn"] == "arn:aws:iam::123456789012:role/hipobj"
