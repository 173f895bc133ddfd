"""The stream contract: a transfer given ``stream=`` synchronizes that
stream through the library's GPU runtime before any request carries a
token; a stream that cannot be synchronized fails before any I/O."""

import numpy as np
import pytest

import hipobj
from hipobj._client import stream_handle
from conftest import boto3_client


class TorchLikeStream:
    cuda_stream = 0x5000


class CupyLikeStream:
    ptr = 0x6000


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x7000)


def test_stream_arguments_name_a_handle():
    assert stream_handle(None) is None
    assert stream_handle(0) == 0
    assert stream_handle(0x1234) == 0x1234
    assert stream_handle(TorchLikeStream()) == 0x5000
    assert stream_handle(CupyLikeStream()) == 0x6000
    assert stream_handle(ProtocolStream()) == 0x7000
    for bad in (True, -1, 1 << 64, "0", object(), 1.5):
        with pytest.raises(hipobj.HipObjError) as e:
            stream_handle(bad)
        assert e.value.name == "hipObjInvalidValue"


def _signed(s3):
    """The operations signed through ``s3``, each with whether it carried a token."""
    log = []

    def note(request, operation_name, **_):
        log.append((operation_name, "x-amz-rdma-token" in request.headers))

    s3.meta.events.register_last("before-sign.s3", note)
    return log


@pytest.mark.parametrize("op", ["put", "get"])
def test_the_stream_is_synchronized_before_the_token(op, client, rdma_server, bucket, monkeypatch):
    b3 = boto3_client(rdma_server.endpoint)
    f = hipobj.Boto3(client, b3, fallback=False)
    src = np.arange(4096, dtype=np.uint8)
    f.put_from(src, bucket, "streamed")
    log = _signed(b3)
    native = []

    class Recorder:
        # Stands in for the native client's synchronize (no GPU here), and
        # notes where in the request sequence it ran.
        def synchronize_stream(self, handle):
            native.append(handle)
            log.append(("synchronize_stream", handle))

    def sync(self, stream):
        h = stream_handle(stream)
        if h is not None:
            Recorder().synchronize_stream(h)

    monkeypatch.setattr(hipobj.Client, "_sync_stream", sync)
    buf = np.zeros(4096, dtype=np.uint8)
    if op == "put":
        f.put_from(src, bucket, "streamed", stream=TorchLikeStream())
    else:
        f.get_into(buf, bucket, "streamed", stream=TorchLikeStream())
        assert np.array_equal(buf, src)
    assert native == [0x5000]
    assert log[0] == ("synchronize_stream", 0x5000), log
    # Nothing that carries a token comes before it (a GET into a buffer of
    # unknown fit asks HeadObject for the size after the synchronize).
    tokens = [i for i, (_, signed) in enumerate(log) if signed is True]
    assert tokens and tokens[0] > 0, log


def test_a_stream_that_cannot_be_synchronized_fails_before_any_io(client, rdma_server, bucket):
    b3 = boto3_client(rdma_server.endpoint)
    f = hipobj.Boto3(client, b3)
    log = _signed(b3)
    try:
        client._native.synchronize_stream(0)
    except hipobj.HipObjError as e:
        no_runtime = e
    else:
        # A GPU runtime that knows the default stream: the transfer runs.
        src = np.arange(100, dtype=np.uint8)
        assert f.put_from(src, bucket, "stream-0", stream=0) == 100
        return
    # This machine (and CI's) has no usable GPU runtime: every stream is
    # refused, with the library's code, before anything is sent.
    assert no_runtime.name == "hipObjInvalidValue"
    for call in (
        lambda: f.put_from(np.zeros(100, dtype=np.uint8), bucket, "no-stream", stream=0),
        lambda: f.get_into(np.zeros(100, dtype=np.uint8), bucket, "no-stream", stream=TorchLikeStream()),
    ):
        with pytest.raises(hipobj.HipObjError) as e:
            call()
        assert e.value.name == "hipObjInvalidValue"
        assert "stream" in str(e.value)
    assert log == [], "nothing was sent"
