"""Issue 38, finding 2: a DCP save that meets a 503 storm and reset
connections completes and loads back bytes-exact, with both Python
clients; what may have moved bytes, and any 4xx, is not retried.

A proxy in front of hipobj-server (faults.py) stands between the client
and the server's S3 endpoint. In the storm, every request that carries no
token (CreateMultipartUpload, CompleteMultipartUpload, the metadata's
PutObject and GetObject) has its connection reset on its first try and is
answered ``503 SlowDown`` (with ``Retry-After``) on its second; every
request that carries a token (PutObject, UploadPart and GetObject) is
answered ``503 SlowDown`` on its first two tries; the third try of each
goes through. ``torch.distributed.checkpoint`` saves through hipobj.torch's
writer and loads back through its reader, both through the storm: every
tensor must come back bytes-exact, its bytes moved by RDMA (the server's
counters), and each request must have been tried exactly until it went
through, each try of a token request under a token of its own. Before,
the built-in client sent every request without a token once (its SDK's
retries were off for all of them): the first reset ended the save. And
``hipobj.Boto3`` ran no transfer again, while botocore resent a token
request with the same token as often as the boto3 client allowed (here 4
tries, botocore's standard mode, which retries the other requests).

The other side of the rules (docs/protocol.md, "Retries of requests that
carry a token"): a token request whose connection is reset after it went
out may have moved bytes, and a 4xx is the request's own fault; each is
sent once and the save fails with it, writing no metadata.
"""

import gc
from collections import defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

import hipobj  # noqa: E402
import hipobj.torch as ht  # noqa: E402
from conftest import AK, SK, Counted, boto3_client  # noqa: E402
from faults import RESET, SLOW_DOWN, FaultProxy  # noqa: E402


@pytest.fixture(autouse=True)
def collected():
    """Each test's garbage collected as it ends: a failed save leaves
    tensors in cycles (through its traceback), whose registrations a later
    test's ``gc.collect()`` would otherwise release under that test's count
    of the session client's registrations."""
    yield
    gc.collect()


def state(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {
        # 20 MiB: its own object, a multipart upload (over the built-in
        # client's 16 MiB threshold; hipobj.Boto3 is made with 8 MiB).
        "big": torch.randn(5120, 1024, generator=g),
        "w": torch.randn(700, 1024, generator=g),  # 2.7 MiB: PUT whole
        "bf16": torch.randn(513, 77, generator=g).to(torch.bfloat16),
        "ids": torch.randint(-1000, 1000, (4099,), generator=g, dtype=torch.int64),
        "step": 38,
    }


TENSORS = ("big", "w", "bf16", "ids")


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))


def storm(kind, where, attempt):
    if attempt == 0 and not kind.endswith("+token"):
        return RESET
    return SLOW_DOWN if attempt < 2 else None


def storage(which: str, cls, path: str, client, proxy, server, bucket: str, **kw):
    """A DCP writer or reader through the proxy: the built-in client from the
    endpoint arguments, as a program gives them, or a ``hipobj.Boto3`` given
    as ``s3``."""
    if which == "S3":
        st = cls(path, client=client, endpoint_url=proxy.endpoint, aws_access_key_id=AK, aws_secret_access_key=SK, fallback=False, **kw)
    else:
        # botocore's standard mode, 4 tries: the policy of docs/protocol.md
        # for the requests without a token, which boto3 itself retries.
        s3 = boto3_client(proxy.endpoint, retries={"mode": "standard", "total_max_attempts": 4})
        front = hipobj.Boto3(client, s3, fallback=False, multipart_threshold=8 << 20, part_size=8 << 20)
        st = cls(path, s3=front, **kw)
    # A client learns that an endpoint speaks the protocol from a transfer
    # (or from its probe before the first write, whose answer a server
    # reached over a connection that another endpoint's transfers bound
    # leaves unsure): one small GET through the proxy, before any fault,
    # so that no write is declined for it.
    # The same for the server's own endpoint, which the session's client
    # reaches in later tests over connections these transfers bound.
    # (NumPy buffers: their registrations go as they die, where a
    # bytearray's would stay in the session client's cache.)
    boto3_client(server.endpoint).put_object(Bucket=bucket, Key="storm/warm", Body=b"w" * 4096)
    st._conn.s3.get_into(np.zeros(4096, np.uint8), bucket, "storm/warm")
    hipobj.S3(client, server.endpoint, AK, SK).get_into(np.zeros(4096, np.uint8), bucket, "storm/warm")
    return st


@pytest.mark.parametrize("which", ["S3", "Boto3"])
def test_a_dcp_save_through_a_503_storm_and_resets_completes_and_loads_back(rdma_server, bucket, client, which):
    proxy = FaultProxy(rdma_server.endpoint, lambda *_: None)
    try:
        src = state(38)
        path = f"s3://{bucket}/storm/{which}"
        writer = storage(which, ht.S3RdmaStorageWriter, path, client, proxy, rdma_server, bucket, direct_bytes=2 << 20)
        reader = storage(which, ht.S3RdmaStorageReader, path, client, proxy, rdma_server, bucket)
        proxy.set_rule(storm)
        with Counted(rdma_server) as c:
            dcp.save(src, storage_writer=writer)
            dst = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in src.items()}
            dcp.load(dst, storage_reader=reader)
        log = list(proxy.log)
    finally:
        proxy.stop()
    for k in TENSORS:
        assert same_bytes(src[k], dst[k]), k
    assert dst["step"] == 38
    # The storm met every kind of request the save and the load made.
    kinds = {k for k, _, _, _ in log}
    want = {"PutObject+token", "CreateMultipartUpload", "UploadPart+token", "CompleteMultipartUpload", "PutObject", "GetObject", "GetObject+token"}
    assert want <= kinds, kinds
    # Each request was tried until it went through, and no more: its
    # faults, then an answer from the server (a token request may go on
    # to its binding round, a fourth request at the same place). Each try
    # of a token request carried a token of its own: a new call, never the
    # SDK's resend of the same request.
    tries = defaultdict(list)
    for k, where, status, token in log:
        tries[(k, where)].append((status, token))
    for (k, where), seen in tries.items():
        statuses = [s for s, _ in seen]
        faults = [503, 503] if k.endswith("+token") else [0, 503]
        assert statuses[:2] == faults and len(statuses) >= 3 and statuses[2] not in (0, 503), (k, where, statuses)
        tokens = [t for _, t in seen[:3]]
        if k.endswith("+token"):
            assert None not in tokens and len(set(tokens)) == 3, (k, where, tokens)
    # The tensor bytes went by RDMA both ways, nothing declined.
    n = sum(src[k].numel() * src[k].element_size() for k in TENSORS)
    assert c["rdma_bytes_read_total"] >= n and c["rdma_bytes_written_total"] >= n, c.d
    assert c["rdma_declines_total"] == 0


@pytest.mark.parametrize("fault", ["reset", "400"])
@pytest.mark.parametrize("which", ["S3", "Boto3"])
def test_a_token_request_that_may_have_moved_bytes_or_got_a_4xx_is_sent_once(rdma_server, bucket, client, which, fault):
    def refuse(kind, where, attempt):
        if kind != "PutObject+token":
            return None
        return RESET if fault == "reset" else (400, "InvalidRequest", {})

    proxy = FaultProxy(rdma_server.endpoint, lambda *_: None)
    try:
        writer = storage(which, ht.S3RdmaStorageWriter, f"s3://{bucket}/refused/{which}/{fault}", client, proxy, rdma_server, bucket, direct_bytes=2 << 20)
        proxy.set_rule(refuse)
        with pytest.raises(BaseException) as e:  # torch's CheckpointException is one
            dcp.save(state(4), storage_writer=writer)
        log = list(proxy.log)
    finally:
        proxy.stop()
    if fault == "400":
        assert "PutObject failed with HTTP 400: InvalidRequest" in str(e.value), e.value
    refused = [(k, where) for k, where, s, _ in log if s == (0 if fault == "reset" else 400)]
    assert refused, log
    # Each refused request was sent once: no retry, not with a fresh token
    # either.
    assert len(refused) == len(set(refused)), refused
    # And the save wrote no metadata: the checkpoint does not exist.
    assert not any(".metadata" in where for _, where, _, _ in log), log


@pytest.mark.parametrize("broke", ["never connected", "closed after it went out"])
def test_boto3_runs_a_transfer_again_only_when_it_never_reached_the_server(rdma_server, bucket, client, broke):
    # botocore's own failures, raised where it sends (its before-send
    # event): EndpointConnectionError is what a refused connection gives,
    # ConnectionClosedError one that broke once the request was out.
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    s3 = boto3_client(rdma_server.endpoint, retries={"mode": "standard", "total_max_attempts": 4})
    f = hipobj.Boto3(client, s3, fallback=False)
    s3.put_object(Bucket=bucket, Key="storm/warm", Body=b"w" * 4096)
    f.get_into(np.zeros(4096, np.uint8), bucket, "storm/warm")  # proven: no probe below
    tokens = []

    def fail_twice(request, **_):
        tokens.append(request.headers.get("x-amz-rdma-token"))
        if len(tokens) <= 2:
            if broke == "never connected":
                raise EndpointConnectionError(endpoint_url=request.url)
            raise ConnectionClosedError(endpoint_url=request.url)
        return None

    s3.meta.events.register("before-send.s3.PutObject", fail_twice)
    data = np.arange(1 << 18, dtype=np.uint32)
    if broke == "never connected":
        with Counted(rdma_server) as c:
            assert f.put_from(data, bucket, "storm/unreached") == data.nbytes
        # Three tries, each a new call under a token of its own; the third
        # moved the bytes by RDMA (after a binding round: a 409 and the
        # same call's second request, a fourth send).
        assert len(tokens) >= 3 and None not in tokens and len(set(tokens[:3])) == 3, tokens
        assert c["rdma_bytes_read_total"] >= data.nbytes, c.d
        back = np.zeros_like(data)
        f.get_into(back, bucket, "storm/unreached")
        assert np.array_equal(back, data)
    else:
        with pytest.raises(hipobj.HipObjError, match="Connection was closed before we received"):
            f.put_from(data, bucket, "storm/unreached-closed")
        # The server may have read the buffer: sent once, neither resent by
        # botocore nor run again.
        assert len(tokens) == 1, tokens
