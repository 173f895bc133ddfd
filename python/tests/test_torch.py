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
    # Earlier tests' garbage (a DCP save's cycles) goes now, not under
    # this test's count.
    gc.collect()
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


RESIZE_ATTACK = r"""
import asyncio, sys, threading, time
import torch, hipobj
endpoint, ak, sk, bucket = sys.argv[1:5]
client = hipobj.Client(nic_hint="softroce0")
s3 = hipobj.S3(client, endpoint, ak, sk, fallback=False)
n = 64 << 20
src = torch.arange(n // 4, dtype=torch.int32)
s3.put_from(src, bucket, "resize-victim")
dst = torch.zeros(n // 4, dtype=torch.int32)
st = dst.untyped_storage()

async def main():
    task = asyncio.ensure_future(s3.get_into_async(dst, bucket, "resize-victim", nbytes=n))
    # Wait until the transfer holds the storage, then free its memory.
    for _ in range(20000):
        if hipobj._memory.STORAGE_LOCKS.address(st._cdata) is not None:
            break
        await asyncio.sleep(0.0005)
    else:
        print("NEVER-IN-FLIGHT")
    try:
        st.resize_(0)
        print("RESIZED")
    except RuntimeError as e:
        print("REFUSED", e)
    got = await task
    print("GOT", got, bool(torch.equal(dst, src)))
    st.resize_(0)  # after the transfer: the program's own business again
    print("FREED-AFTER", st.nbytes())

asyncio.run(main())
"""


def test_resizing_a_storage_during_an_async_get_is_refused_not_a_crash(rdma_server, bucket, tmp_path):
    """Before: the interpreter died (SIGSEGV) when the NIC wrote into the
    freed storage. Now the resize raises while the transfer runs."""
    import subprocess
    import sys

    script = tmp_path / "attack.py"
    script.write_text(RESIZE_ATTACK)
    p = subprocess.run([sys.executable, str(script), rdma_server.endpoint, AK, SK, bucket], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"rc {p.returncode}: {p.stdout} {p.stderr[-2000:]}"
    assert "REFUSED" in p.stdout and "in an RDMA transfer" in p.stdout, p.stdout
    assert f"GOT {64 << 20} True" in p.stdout, p.stdout
    assert "FREED-AFTER 0" in p.stdout, p.stdout


def test_fresh_state_dict_views_hit_the_cache(client, fronts, bucket):
    """state_dict() detaches afresh on every call; the registration is
    the storage's, so the second load registers nothing."""
    f = fronts[0]
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 64))
    for name, t in model.state_dict().items():
        f.put_from(t, bucket, f"sd/{name}")
    loaded = []
    for _ in range(3):
        before = client.cache.registrations
        sd = model.state_dict()
        for name, t in sd.items():
            f.get_into(t, bucket, f"sd/{name}", nbytes=t.numel() * t.element_size())
        loaded.append(client.cache.registrations - before)
        del sd
        gc.collect()
    assert loaded[0] <= 4 and loaded[1] == 0 and loaded[2] == 0, loaded


def test_register_module_registers_each_storage_once(client, fronts, bucket):
    f = fronts[0]
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    n = client.register_module(model)
    assert n == 4
    before = client.cache.registrations
    for name, t in model.state_dict().items():
        f.put_from(t, bucket, f"rm/{name}")
        f.get_into(t, bucket, f"rm/{name}", nbytes=t.numel() * t.element_size())
    assert client.cache.registrations == before


def test_a_registration_holds_its_storage(client, fronts, bucket):
    """issue 24: the registration keeps the memory's owner alive."""
    t = torch.ones(1 << 16)
    client.register(t)
    st = t.untyped_storage()
    key = (st.data_ptr(), st.nbytes(), False)
    e = client.cache._entries[key]
    assert e.reg.owner is st
    assert torch._C._storage_Use_Count(st._cdata) >= 2
    client.release(t)
    assert e.reg.owner is None
