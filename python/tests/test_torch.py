"""The DLPack path with real torch tensors (CPU). Skipped only where torch
is not installed; scripts/python-test.sh installs it (docs/python.md)."""

import gc
import warnings

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, boto3_client

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def fronts(client, rdma_server):
    return [
        hipobj.S3(client, rdma_server.endpoint, AK, SK, fallback=False),
        hipobj.Boto3(client, boto3_client(rdma_server.endpoint), fallback=False),
    ]


def test_torch_tensors_put_and_get_exact_bytes(fronts, bucket):
    g = torch.Generator().manual_seed(1)
    src = torch.randn(512, 1024, generator=g)  # 2 MiB of float32
    for i, f in enumerate(fronts):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert f.put_from(src, bucket, f"torch-{i}") == src.numel() * 4
            dst = torch.empty_like(src)
            assert f.get_into(dst, bucket, f"torch-{i}") == src.numel() * 4
        assert torch.equal(src, dst)
        # The object holds the tensor's bytes exactly as NumPy sees them.
        raw = np.zeros(src.numel() * 4, dtype=np.uint8)
        f.get_into(raw, bucket, f"torch-{i}")
        assert raw.tobytes() == src.numpy().tobytes()


def test_views_of_one_storage_share_one_registration(client, fronts, bucket):
    f = fronts[1]
    src = torch.arange(1 << 20, dtype=torch.int32)
    f.put_from(src, bucket, "torch-rows")
    dst = torch.zeros(4, 1 << 20, dtype=torch.int32)
    f.get_into(dst[0], bucket, "torch-rows")
    regs, native = client.cache.registrations, client.registered_count()
    for i in range(1, 4):
        f.get_into(dst[i], bucket, "torch-rows")
    f.get_into(dst[2][: 1 << 19], bucket, "torch-rows", range="bytes=0-2097151")
    assert client.cache.registrations == regs, "a view of a registered storage registered again"
    assert client.registered_count() == native
    assert all(torch.equal(dst[i], src) for i in range(4))
    # A tensor the size of one row, read into a row and then written
    # from a slice of the 2-D tensor: still the same registration.
    assert f.put_from(dst[3][100:], bucket, "torch-tail") == ((1 << 20) - 100) * 4
    assert client.cache.registrations == regs


def test_a_registration_is_released_when_its_tensors_die(client, fronts, bucket):
    f = fronts[0]
    t = torch.ones(1 << 18, dtype=torch.float64)
    f.put_from(t, bucket, "torch-dies")
    before = len(client.cache)
    native = client.registered_count()
    v = t[10:]
    del t
    gc.collect()
    assert client.registered_count() == native, "a view still holds the storage"
    del v
    gc.collect()
    assert len(client.cache) == before - 1
    assert client.registered_count() == native - 1


def test_torch_inputs_refused_before_any_io(client, fronts, bucket):
    f = fronts[1]
    regs = client.cache.registrations
    bad = [
        torch.zeros(64, 64).t(),  # not contiguous
        torch.zeros(16, requires_grad=True),  # torch will not export it
        torch.zeros(0),  # empty
    ]
    for t in bad:
        for call in (f.put_from, f.get_into):
            with pytest.raises(hipobj.HipObjError) as e:
                call(t, bucket, "never")
            assert e.value.name == "hipObjInvalidValue", t
    assert client.cache.registrations == regs
