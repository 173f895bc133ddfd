"""What a failure says: S3's status and code on both clients, the classes
Python programs catch (FileNotFoundError, PermissionError), the attributes
the stubs declare, the module name; and get_into into a buffer larger than
the object, head()."""

import traceback
import warnings

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, boto3_client

pytest.importorskip("boto3")


def fronts(client, endpoint, secret=SK):
    b = boto3_client(endpoint)
    if secret != SK:
        import boto3
        from botocore.config import Config

        b = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=AK, aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1, "mode": "standard"}),
        )
    return {
        "builtin": hipobj.S3(client, endpoint, AK, secret, fallback=False),
        "boto3": hipobj.Boto3(client, b, fallback=False),
    }


@pytest.mark.parametrize("which", ["builtin", "boto3"])
def test_a_missing_key_is_no_such_key_and_file_not_found(client, rdma_server, bucket, which):
    f = fronts(client, rdma_server.endpoint)[which]
    buf = np.zeros(100, dtype=np.uint8)
    for call in (lambda: f.get_into(buf, bucket, "no-such-key", nbytes=100), lambda: f.head(bucket, "no-such-key")):
        with pytest.raises(FileNotFoundError) as e:
            call()
        err = e.value
        assert isinstance(err, hipobj.NoSuchKey) and isinstance(err, hipobj.HipObjError)
        assert err.status == 404 and err.name == "hipObjS3Error" and err.code == hipobj.CODES["hipObjS3Error"]
        assert err.declined is False
        assert "reply is empty" not in str(err), str(err)
    if which == "boto3":
        from botocore.exceptions import ClientError

        assert isinstance(err.__cause__, ClientError)


@pytest.mark.parametrize("which", ["builtin", "boto3"])
def test_a_missing_bucket_is_no_such_bucket(client, rdma_server, which):
    f = fronts(client, rdma_server.endpoint)[which]
    with pytest.raises(hipobj.NoSuchBucket) as e:
        f.get_into(np.zeros(100, dtype=np.uint8), "no-such-bucket", "k", nbytes=100)
    assert isinstance(e.value, FileNotFoundError)
    assert e.value.status == 404 and e.value.s3_code == "NoSuchBucket"


@pytest.mark.parametrize("which", ["builtin", "boto3"])
def test_a_wrong_secret_is_access_denied_and_permission_error(client, rdma_server, bucket, which):
    good = fronts(client, rdma_server.endpoint)["builtin"]
    good.put_from(np.ones(4096, dtype=np.uint8), bucket, "secret-test")
    f = fronts(client, rdma_server.endpoint, secret="not-the-secret")[which]
    for call in (
        lambda: f.get_into(np.zeros(4096, dtype=np.uint8), bucket, "secret-test", nbytes=4096),
        lambda: f.put_from(np.zeros(4096, dtype=np.uint8), bucket, "secret-test"),
    ):
        with pytest.raises(PermissionError) as e:
            call()
        assert isinstance(e.value, hipobj.AccessDenied)
        assert e.value.status == 403 and e.value.s3_code in ("SignatureDoesNotMatch", "AccessDenied"), (e.value.status, e.value.s3_code)
        assert "reply is empty" not in str(e.value)
    if which == "boto3":
        from botocore.exceptions import ClientError

        assert isinstance(e.value.__cause__, ClientError)


def test_every_error_has_the_declared_attributes(client, rdma_server, bucket):
    f = fronts(client, rdma_server.endpoint)["builtin"]
    with pytest.raises(hipobj.HipObjError) as e:
        f.get_into(np.zeros(10, dtype=np.uint8)[::2], bucket, "x")  # not contiguous: refused before I/O
    for attr in ("code", "name", "status", "s3_code", "declined"):
        assert hasattr(e.value, attr), attr
    assert e.value.name == "hipObjInvalidValue" and e.value.status is None and e.value.s3_code is None and e.value.declined is False
    # Even one a program makes itself.
    mine = hipobj.HipObjError("mine")
    assert mine.status is None and mine.s3_code is None and mine.declined is False and isinstance(mine.code, int)


def test_the_module_is_hipobj(client, rdma_server, bucket):
    assert hipobj.HipObjError.__module__ == "hipobj"
    assert hipobj.NoSuchKey.__module__ == "hipobj"
    f = fronts(client, rdma_server.endpoint)["builtin"]
    try:
        f.get_into(np.zeros(100, dtype=np.uint8), bucket, "no-such-key", nbytes=100)
    except hipobj.HipObjError:
        text = traceback.format_exc()
    assert "hipobj.NoSuchKey" in text and "_native" not in text, text


def test_declined_without_fallback_says_so(client, plain_server, plain_bucket):
    for f in fronts(client, plain_server.endpoint).values():
        with pytest.raises(hipobj.HipObjError) as e:
            f.put_from(np.zeros(100, dtype=np.uint8), plain_bucket, "nofb")
        assert e.value.declined is True and e.value.name == "hipObjS3Error"


@pytest.mark.parametrize("which", ["builtin", "boto3"])
def test_get_into_a_larger_buffer_returns_the_byte_count(client, rdma_server, bucket, which):
    f = fronts(client, rdma_server.endpoint)[which]
    src = np.random.default_rng(5).integers(0, 256, 1000003, dtype=np.uint8)
    f.put_from(src, bucket, f"odd-{which}")
    dst = np.full(64 << 20, 7, dtype=np.uint8)  # the README's 64 MiB buffer
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f.get_into(dst, bucket, f"odd-{which}") == src.nbytes
        assert np.array_equal(dst[: src.nbytes], src) and (dst[src.nbytes : src.nbytes + 4096] == 7).all()
        # An open range and a bounded one, into larger spans.
        assert f.get_into(dst, bucket, f"odd-{which}", range="bytes=1000000-") == 3
        assert np.array_equal(dst[:3], src[1000000:])
        assert f.get_into(dst, bucket, f"odd-{which}", range="bytes=10-19") == 10
        assert np.array_equal(dst[:10], src[10:20])
    # An object larger than the buffer: refused before any byte moves.
    small = np.zeros(1000, dtype=np.uint8)
    with pytest.raises(hipobj.HipObjError) as e:
        f.get_into(small, bucket, f"odd-{which}")
    assert e.value.name == "hipObjSizeTooLarge" and not small.any()


@pytest.mark.parametrize("which", ["builtin", "boto3"])
def test_head(client, rdma_server, bucket, which):
    f = fronts(client, rdma_server.endpoint)[which]
    src = np.arange(12345, dtype=np.uint8)
    f.put_from(src, bucket, f"head-{which}")
    h = f.head(bucket, f"head-{which}")
    assert h["size"] == 12345 and h["etag"] and isinstance(h["mtime"], float)
