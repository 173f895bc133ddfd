"""Issue 41: a buffer larger than the server's transfer cap moves in parts.

hipobj-server with ``--max-transfer`` 8 MiB; ``get_into`` and ``put_from``
of a 40 MiB buffer (one call each, under ``multipart_threshold``) must move
every byte by RDMA (the server's counters) in parts of at most the cap,
which the client learns from the server's refusal. Before, both failed
with ``InvalidRDMAToken: the token's length ... is over this server's
limit``.
"""

import threading

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, Server, boto3_client, metrics

CAP = 8 << 20


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("capped-data"), rdma=True, max_transfer=CAP)
    boto3_client(s.endpoint).create_bucket(Bucket="big")
    yield s
    s.stop()


def test_a_buffer_five_times_the_cap_goes_and_comes_back_by_rdma(client, capped):
    s3 = hipobj.S3(client, capped.endpoint, AK, SK, fallback=False)
    n = 5 * CAP + 4321
    data = np.random.default_rng(41).integers(0, 256, n, dtype=np.uint8)
    before = metrics(capped)
    assert s3.put_from(data, "big", "obj") == n
    assert s3.last["rdma"], s3.last
    out = np.zeros(n, dtype=np.uint8)
    assert s3.get_into(out, "big", "obj") == n
    assert s3.last["rdma"], s3.last
    assert np.array_equal(out, data)
    after = metrics(capped)
    assert after["hipobj_rdma_bytes_read_total"] - before["hipobj_rdma_bytes_read_total"] == n
    written = after["hipobj_rdma_bytes_written_total"] - before["hipobj_rdma_bytes_written_total"]
    assert n <= written <= n + 1
    assert after["hipobj_rdma_declines_total"] == before["hipobj_rdma_declines_total"]


def test_put_from_above_the_threshold_with_parts_over_the_cap_goes_by_rdma(client, capped):
    # Parts of 16 MiB to a server that takes 8 MiB at most: the built-in
    # client's upload is hipobj-s3's, which learns the cap from the refusal
    # and sends smaller parts (before, the first UploadPart failed with
    # InvalidRDMAToken).
    s3 = hipobj.S3(client, capped.endpoint, AK, SK, fallback=False, multipart_threshold=16 << 20)
    n = 3 * (16 << 20) + 999
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    before = metrics(capped)
    assert s3.put_from(data, "big", "parts", part_size=16 << 20) == n
    assert s3.last["rdma"], s3.last
    after = metrics(capped)
    assert after["hipobj_rdma_bytes_read_total"] - before["hipobj_rdma_bytes_read_total"] == n
    assert after["hipobj_rdma_declines_total"] == before["hipobj_rdma_declines_total"]
    got = boto3_client(capped.endpoint).get_object(Bucket="big", Key="parts")["Body"].read()
    assert got == data.tobytes()


def test_boto3_put_from_sends_parts_in_flight(client, capped):
    # hipobj.Boto3's parts go on worker threads: the first alone, then up to
    # in_flight at once. Each part waits (at most 5 s) until another is in
    # flight beside it; sent one after another, none ever is.
    f = hipobj.Boto3(client, boto3_client(capped.endpoint), fallback=False, multipart_threshold=5 << 20, part_size=5 << 20)
    part = f._part
    lock = threading.Condition()
    state = {"now": 0, "most": 0, "calls": 0}

    def counted(*a, **kw):
        with lock:
            state["calls"] += 1
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            lock.notify_all()
            if state["calls"] > 1:
                lock.wait_for(lambda: state["now"] >= 2, timeout=5)
        try:
            return part(*a, **kw)
        finally:
            with lock:
                state["now"] -= 1

    f._part = counted
    n = 4 * (5 << 20) + 77
    data = np.random.default_rng(8).integers(0, 256, n, dtype=np.uint8)
    assert f.put_from(data, "big", "boto3-parts", in_flight=4) == n
    assert state["calls"] == 5
    assert state["most"] >= 2, state
    got = boto3_client(capped.endpoint).get_object(Bucket="big", Key="boto3-parts")["Body"].read()
    assert got == data.tobytes()
