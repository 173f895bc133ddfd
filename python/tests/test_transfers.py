"""Transfers against hipobj-server on the soft RoCE NIC: exact bytes."""

import asyncio
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, boto3_client


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture(scope="module")
def s3(client, rdma_server):
    return hipobj.S3(client, rdma_server.endpoint, AK, SK, fallback=False)


@pytest.fixture(scope="module")
def boto(client, rdma_server):
    return hipobj.Boto3(client, boto3_client(rdma_server.endpoint), fallback=False)


def test_builtin_put_and_get_exact_bytes(s3, bucket):
    src = pattern(3 << 20, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # RDMA, no fallback warning
        assert s3.put_from(src, bucket, "builtin") == src.nbytes
        assert s3.last["rdma"] is True
        dst = np.zeros_like(src)
        assert s3.get_into(dst, bucket, "builtin") == src.nbytes
        assert s3.last["rdma"] is True
    assert np.array_equal(src, dst)


def test_builtin_ranged_get_into_a_slice(s3, bucket):
    src = pattern(1 << 20, 2)
    s3.put_from(src, bucket, "ranged")
    dst = np.zeros(2 << 20, dtype=np.uint8)
    n = s3.get_into(dst[4096:], bucket, "ranged", range="bytes=1000-70999", nbytes=70000)
    assert n == 70000
    assert np.array_equal(dst[4096 : 4096 + n], src[1000:71000])
    assert not dst[:4096].any() and not dst[4096 + n :].any()


def test_put_from_a_byte_range_of_a_float_array(s3, bucket):
    a = np.arange(1 << 16, dtype=np.float32)
    assert s3.put_from(a, bucket, "f32-part", offset=400, nbytes=4000) == 4000
    back = np.zeros(1000, dtype=np.float32)
    assert s3.get_into(back, bucket, "f32-part") == 4000
    assert np.array_equal(back, a[100:1100])


def test_repeated_and_sliced_transfers_never_re_register(client, s3, bucket):
    src = pattern(1 << 20, 3)
    s3.put_from(src, bucket, "cache")
    dst = np.zeros((4, 1 << 20), dtype=np.uint8)
    s3.get_into(dst[0], bucket, "cache")
    regs, native = client.cache.registrations, client.registered_count()
    hits = client.cache.hits
    for i in range(4):
        for _ in range(3):
            s3.get_into(dst[i], bucket, "cache")
    s3.put_from(dst[2][10:], bucket, "cache2")
    assert client.cache.registrations == regs  # counted: no new registration
    assert client.registered_count() == native
    assert client.cache.hits == hits + 13
    assert all(np.array_equal(dst[i], src) for i in range(4))


def test_boto3_put_get_exact_bytes(boto, bucket):
    src = pattern((5 << 20) + 123, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert boto.put_from(src, bucket, "boto3") == src.nbytes
        dst = np.zeros_like(src)
        assert boto.get_into(dst, bucket, "boto3") == src.nbytes
    assert np.array_equal(src, dst)
    # The object is a real S3 object: plain boto3 reads the same bytes.
    body = boto.s3.get_object(Bucket=bucket, Key="boto3")["Body"].read()
    assert body == src.tobytes()


def test_boto3_ranged_get_and_bytearray(boto, bucket):
    src = pattern(300000, 5)
    boto.put_from(src, bucket, "boto3-range")
    dst = bytearray(50000)
    assert boto.get_into(dst, bucket, "boto3-range", range="bytes=100-50099") == 50000
    assert bytes(dst) == src[100:50100].tobytes()
    boto.client.release(dst)


def test_boto3_multipart_upload_parts_by_rdma(boto, bucket):
    part = 5 << 20
    src = pattern(2 * part + 777, 6)
    s3 = boto.s3
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts = []
    for i, off in enumerate(range(0, src.nbytes, part)):
        n = min(part, src.nbytes - off)
        assert boto.upload_part_from(src, bucket, "mp", up, i + 1, offset=off, nbytes=n) == n
        parts.append({"PartNumber": i + 1, "ETag": boto.last_etag})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    dst = np.zeros_like(src)
    assert boto.get_into(dst, bucket, "mp") == src.nbytes
    assert np.array_equal(src, dst)


def test_501_falls_back_to_plain_http_with_a_warning(client, plain_server, plain_bucket):
    src = pattern(200000, 7)
    for front in (
        hipobj.S3(client, plain_server.endpoint, AK, SK),
        hipobj.Boto3(client, boto3_client(plain_server.endpoint)),
    ):
        with pytest.warns(hipobj.RdmaFallbackWarning):
            assert front.put_from(src, plain_bucket, "fb") == src.nbytes
        dst = np.zeros(300000, dtype=np.uint8)
        with pytest.warns(hipobj.RdmaFallbackWarning):
            assert front.get_into(dst, plain_bucket, "fb", offset=1000) == src.nbytes
        assert np.array_equal(dst[1000:201000], src)
        assert not dst[:1000].any() and not dst[201000:].any()


def test_501_without_fallback_is_an_error(client, plain_server, plain_bucket):
    for front in (
        hipobj.S3(client, plain_server.endpoint, AK, SK, fallback=False),
        hipobj.Boto3(client, boto3_client(plain_server.endpoint), fallback=False),
    ):
        with pytest.raises(hipobj.HipObjError) as e:
            front.put_from(np.zeros(100, dtype=np.uint8), plain_bucket, "nofb")
        assert e.value.name == "hipObjS3Error"


def test_s3_errors_raise_with_the_code(s3, boto, bucket):
    with pytest.raises(hipobj.HipObjError) as e:
        s3.get_into(np.zeros(100, dtype=np.uint8), bucket, "no-such-key")
    assert e.value.name == "hipObjS3Error" and e.value.status == 404
    with pytest.raises(hipobj.HipObjError) as e:
        boto.get_into(np.zeros(100, dtype=np.uint8), bucket, "no-such-key")
    assert e.value.name == "hipObjS3Error"


@pytest.mark.parametrize("front", ["s3", "boto"])
def test_32_concurrent_asyncio_gets(front, request, bucket):
    f = request.getfixturevalue(front)
    size = 256 << 10
    objs = [pattern(size, 100 + i) for i in range(32)]
    for i, o in enumerate(objs):
        f.put_from(o, bucket, f"async-{front}-{i}")
    dst = np.zeros((32, size), dtype=np.uint8)

    async def main():
        return await asyncio.gather(*(f.get_into_async(dst[i], bucket, f"async-{front}-{i}") for i in range(32)))

    assert asyncio.run(main()) == [size] * 32
    for i in range(32):
        assert np.array_equal(dst[i], objs[i]), i


def test_the_gil_is_released_during_a_transfer(s3, bucket):
    src = pattern(64 << 20, 8)
    s3.put_from(src, bucket, "big")
    dst = np.zeros_like(src)
    s3.get_into(dst, bucket, "big")  # registered now, so the call below is only the transfer
    entry = s3.client.cache.acquire(hipobj._memory.target_of(dst, for_get=True))
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)  # hands the GIL back each turn

    # A switch interval this long means the interpreter never takes the GIL
    # from this thread by force: the spinner runs only while this thread
    # gives the GIL up, which a native call holding it never does.
    old = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    t = threading.Thread(target=spin)
    try:
        t.start()
        before = counter[0]
        s3._s3.get_object(entry.reg, 0, dst.nbytes, bucket, "big", None)
        during = counter[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join()
        s3.client.cache.done(entry)
    assert during > 0, "no Python thread ran during the 64 MiB transfer: the GIL was held"
    assert np.array_equal(src, dst)


def _calls(s3, ops):
    """Counts the boto3 API calls named in ``ops`` made through ``s3``."""
    seen = {op: 0 for op in ops}

    def count(model, **_):
        if model.name in seen:
            seen[model.name] += 1

    s3.meta.events.register("before-call.s3", count)
    return seen


@pytest.mark.parametrize("front", ["builtin", "boto3"])
def test_put_from_above_the_threshold_is_a_multipart_upload(front, client, rdma_server, bucket):
    part = 5 << 20
    src = pattern(2 * part + 777, 9)
    b3 = boto3_client(rdma_server.endpoint)
    if front == "builtin":
        f = hipobj.S3(client, rdma_server.endpoint, AK, SK, fallback=False, multipart_threshold=6 << 20, part_size=part)
    else:
        f = hipobj.Boto3(client, b3, fallback=False, multipart_threshold=6 << 20, part_size=part)
    seen = _calls(b3, ["CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "PutObject"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every part by RDMA
        assert f.put_from(src, bucket, f"auto-mp-{front}") == src.nbytes
    if front == "builtin":
        assert f.last["rdma"] is True and f.last["bytes"] == src.nbytes
    else:
        # Three parts; one sent on a connection of its own (parts go in
        # flight) is sent twice: a 409 to bind its QP, then the transfer.
        parts_sent = seen["UploadPart"]
        assert 3 <= parts_sent <= 4, seen
        assert {k: v for k, v in seen.items() if k != "UploadPart"} == {"CreateMultipartUpload": 1, "CompleteMultipartUpload": 1, "PutObject": 0}
    # The server stored three parts: 5 MiB, 5 MiB and the rest.
    sizes = [b3.get_object(Bucket=bucket, Key=f"auto-mp-{front}", PartNumber=i)["ContentLength"] for i in (1, 2, 3)]
    assert sizes == [part, part, 777]
    assert b3.head_object(Bucket=bucket, Key=f"auto-mp-{front}")["ETag"].strip('"').endswith("-3")
    dst = np.zeros_like(src)
    assert f.get_into(dst, bucket, f"auto-mp-{front}") == src.nbytes
    assert np.array_equal(src, dst)
    # At or below the threshold it is one PutObject; part_size per call.
    small = src[: 6 << 20]
    assert f.put_from(small, bucket, f"auto-one-{front}") == small.nbytes
    if front == "boto3":
        assert seen["PutObject"] == 1 and seen["UploadPart"] == parts_sent
    assert f.put_from(src, bucket, f"auto-mp6-{front}", part_size=6 << 20) == src.nbytes
    assert b3.get_object(Bucket=bucket, Key=f"auto-mp6-{front}", PartNumber=2)["ContentLength"] == src.nbytes - (6 << 20)
    back = np.zeros_like(src)
    f.get_into(back, bucket, f"auto-mp6-{front}")
    assert np.array_equal(src, back)


def test_a_part_smaller_than_s3_allows_is_refused_before_any_io(client, rdma_server, bucket):
    b3 = boto3_client(rdma_server.endpoint)
    with pytest.raises(hipobj.HipObjError) as e:
        hipobj.Boto3(client, b3, part_size=1 << 20)
    assert e.value.name == "hipObjInvalidValue"
    f = hipobj.Boto3(client, b3, multipart_threshold=1 << 20)
    seen = _calls(b3, ["CreateMultipartUpload", "UploadPart", "PutObject"])
    with pytest.raises(hipobj.HipObjError) as e:
        f.put_from(pattern(3 << 20, 10), bucket, "tiny-parts", part_size=(5 << 20) - 1)
    assert e.value.name == "hipObjInvalidValue"
    assert seen == {"CreateMultipartUpload": 0, "UploadPart": 0, "PutObject": 0}


def test_a_failed_part_aborts_the_upload(client, rdma_server, bucket):
    b3 = boto3_client(rdma_server.endpoint)
    f = hipobj.Boto3(client, b3, fallback=False, multipart_threshold=5 << 20, part_size=5 << 20)
    seen = _calls(b3, ["UploadPart", "AbortMultipartUpload", "CompleteMultipartUpload"])

    def fail_second_part(params, **_):
        if params.get("PartNumber") == 2:
            raise RuntimeError("the network went away")

    b3.meta.events.register("provide-client-params.s3.UploadPart", fail_second_part)
    with pytest.raises(hipobj.HipObjError) as e:
        f.put_from(pattern(12 << 20, 11), bucket, "aborted")
    assert isinstance(e.value.__cause__, RuntimeError)
    # Part 1 went alone; parts 2 and 3 went in flight together, so part 3
    # may have been sent before part 2 failed (and, on a connection of its
    # own, twice: a 409 to bind, then the transfer). Nothing completed.
    assert 1 <= seen["UploadPart"] <= 3, seen
    assert {k: v for k, v in seen.items() if k != "UploadPart"} == {"AbortMultipartUpload": 1, "CompleteMultipartUpload": 0}
    assert b3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == [] or all(
        u["Key"] != "aborted" for u in b3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    )
    with pytest.raises(Exception):
        b3.head_object(Bucket=bucket, Key="aborted")


def test_multipart_falls_back_per_part_with_a_warning(client, plain_server, plain_bucket):
    src = pattern((10 << 20) + 5, 12)
    for front in (
        hipobj.S3(client, plain_server.endpoint, AK, SK, multipart_threshold=5 << 20, part_size=5 << 20),
        hipobj.Boto3(client, boto3_client(plain_server.endpoint), multipart_threshold=5 << 20, part_size=5 << 20),
    ):
        with pytest.warns(hipobj.RdmaFallbackWarning):
            assert front.put_from(src, plain_bucket, "fb-mp") == src.nbytes
        body = boto3_client(plain_server.endpoint).get_object(Bucket=plain_bucket, Key="fb-mp")["Body"].read()
        assert body == src.tobytes()


def test_a_read_only_dlpack_producer_is_put_but_never_written(client, boto, bucket):
    from test_memory import VersionedProducer

    a = pattern(1 << 20, 13)
    a.setflags(write=False)
    p = VersionedProducer(a)
    assert boto.put_from(p, bucket, "ro-dlpack") == a.nbytes
    assert boto.s3.get_object(Bucket=bucket, Key="ro-dlpack")["Body"].read() == a.tobytes()
    log = []
    boto.s3.meta.events.register("before-call.s3", lambda model, **_: log.append(model.name))
    with pytest.raises(hipobj.HipObjError) as e:
        boto.get_into(p, bucket, "ro-dlpack")
    assert e.value.name == "hipObjInvalidValue" and log == []
