"""A token never harms a server that ignores it (issue 38, finding 1).

A PutObject that carries a token has no body: a plain S3 server that took it
would replace the object with an empty one, or add an empty version. Against
a minimal plain S3 server (http.server, in this process) with an existing
object, both front ends keep the object unchanged without fallback and
replace it in full with fallback, and no write with a token reaches it."""

import base64
import http.server
import threading
import warnings
import zlib

import pytest

import hipobj
from conftest import boto3_client


class _PlainS3(http.server.BaseHTTPRequestHandler):
    """PUT stores the body whatever the headers say; GET reads the newest
    version, with a one-range Range. ``server.versions``: path -> bodies."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        path = self.path.split("?")[0]
        with self.server.lock:
            if self.headers.get("x-amz-rdma-token"):
                self.server.token_methods.append("PUT")
            if path.count("/") < 2:
                return self._send(200)  # CreateBucket and the like
            versions = self.server.versions.setdefault(path, [])
            if not self.server.versioned:
                versions.clear()
            versions.append(body)
        self._send(200, headers=[("ETag", f'"v{len(versions)}"')])

    def do_GET(self):
        path = self.path.split("?")[0]
        with self.server.lock:
            if self.headers.get("x-amz-rdma-token"):
                self.server.token_methods.append("GET " + (self.headers.get("Range") or ""))
            obj = (self.server.versions.get(path) or [None])[-1]
        if obj is None:
            body = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>none</Message></Error>"
            return self._send(404, body, [("Content-Type", "application/xml")])
        rng = self.headers.get("Range")
        if rng is None:
            return self._send(200, obj)
        a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
        if a >= len(obj):
            body = b"<?xml version='1.0'?><Error><Code>InvalidRange</Code><Message>r</Message></Error>"
            return self._send(416, body, [("Content-Type", "application/xml")])
        b = min(b, len(obj) - 1)
        if self.server.rclone_ranges:
            # As `rclone serve s3` 1.75 answers: 200, and the whole object's
            # checksum beside the range's bytes.
            crc = base64.b64encode(zlib.crc32(obj).to_bytes(4, "big")).decode()
            headers = [("Content-Range", f"bytes {a}-{b}/{len(obj)}"), ("x-amz-checksum-crc32", crc)]
            return self._send(200, obj[a : b + 1], headers)
        self._send(206, obj[a : b + 1], [("Content-Range", f"bytes {a}-{b}/{len(obj)}")])

    do_HEAD = do_GET


@pytest.fixture(params=[False, True], ids=["unversioned", "versioned"])
def plain_s3(request):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PlainS3)
    srv.lock = threading.Lock()
    srv.versions = {}
    srv.versioned = request.param
    srv.token_methods = []
    srv.rclone_ranges = False
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


def _fronts(client, endpoint, fallback):
    yield hipobj.Boto3(client, boto3_client(endpoint), fallback=fallback)
    yield hipobj.S3(client, endpoint, "k", "s", fallback=fallback)


def test_a_put_to_a_plain_server_keeps_or_replaces_the_object_in_full(client, plain_s3):
    endpoint = f"http://127.0.0.1:{plain_s3.server_address[1]}"
    old = bytes(range(256)) * 400
    new = bytearray(b"\x5a" * 65536)
    for i, front in enumerate(_fronts(client, endpoint, fallback=False)):
        key = f"/b/obj{i}"
        plain_s3.versions[key] = [old]
        with pytest.raises(hipobj.HipObjError) as e:
            front.put_from(new, "b", key[3:])
        assert getattr(e.value, "declined", False), e.value
        assert plain_s3.versions[key] == [old], "the object changed"
        with pytest.raises(hipobj.HipObjError):
            front.put_from(new, "b", "fresh")
        assert "/b/fresh" not in plain_s3.versions, "an object was created"
    for i, front in enumerate(_fronts(client, endpoint, fallback=True)):
        key = f"/b/obj{i}"
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert front.put_from(new, "b", key[3:]) == len(new)
        assert any(issubclass(x.category, hipobj.RdmaFallbackWarning) for x in w)
        want = [old, bytes(new)] if plain_s3.versioned else [bytes(new)]
        assert plain_s3.versions[key] == want, "not one full replacement"
    assert plain_s3.token_methods, "no probe was sent"
    assert all(m == "GET bytes=0-0" for m in plain_s3.token_methods), plain_s3.token_methods
    assert all(v for vs in plain_s3.versions.values() for v in vs), "an empty object or version exists"


def test_the_boto3_probe_reads_past_a_whole_object_checksum_on_a_range(client, plain_s3):
    """`rclone serve s3` answers a ranged GET with the whole object's
    x-amz-checksum-crc32, which botocore checks against the range's bytes
    and refuses (FlexibleChecksumError). The probe's one byte is thrown
    away: that check must not stop the write (no-harm matrix, docs/testing.md).
    Before, every write through hipobj.Boto3 to rclone failed, fallback or
    not, with "the server answered the probe with HTTP None"."""
    plain_s3.rclone_ranges = True
    endpoint = f"http://127.0.0.1:{plain_s3.server_address[1]}"
    # boto3's defaults (since 1.36): a response's checksum is checked when
    # the server sends one.
    from botocore.config import Config

    s3 = pytest.importorskip("boto3").client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    old = bytes(range(256)) * 400
    new = bytearray(b"\x5a" * 65536)
    plain_s3.versions["/b/obj"] = [old]
    with pytest.raises(hipobj.HipObjError) as e:
        hipobj.Boto3(client, s3, fallback=False).put_from(new, "b", "obj")
    assert getattr(e.value, "declined", False), e.value
    assert plain_s3.versions["/b/obj"] == [old], "the object changed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hipobj.RdmaFallbackWarning)
        assert hipobj.Boto3(client, s3).put_from(new, "b", "obj") == len(new)
    want = [old, bytes(new)] if plain_s3.versioned else [bytes(new)]
    assert plain_s3.versions["/b/obj"] == want, "not one full replacement"
    assert all(m == "GET bytes=0-0" for m in plain_s3.token_methods), plain_s3.token_methods
