"""Registration of host memory, the cache, and bad input refused before any I/O."""

import gc
import mmap

import numpy as np
import pytest

import hipobj


def code_of(excinfo):
    return excinfo.value.code, excinfo.value.name


def test_errors_carry_code_and_name(client):
    with pytest.raises(hipobj.HipObjError) as e:
        client.register(np.zeros((8, 8))[:, 1])
    assert code_of(e) == (1, "hipObjInvalidValue")
    assert hipobj.CODES["hipObjBusy"] == 12


def test_bad_input_is_refused_before_any_io(client, rdma_server, bucket):
    s3 = hipobj.S3(client, rdma_server.endpoint, "wrong-key", "wrong-secret")
    gc.collect()  # what earlier tests left in reference cycles goes first
    before = client.registered_count()
    # Non-contiguous.
    with pytest.raises(hipobj.HipObjError) as e:
        s3.get_into(np.zeros((64, 64), dtype=np.uint8)[:, ::2], bucket, "k")
    assert code_of(e) == (1, "hipObjInvalidValue")
    # Read-only exports, for a GET.
    with pytest.raises(hipobj.HipObjError) as e:
        s3.get_into(b"immutable bytes", bucket, "k")
    assert "read-only" in str(e.value)
    ro = np.zeros(64, dtype=np.uint8)
    ro.setflags(write=False)
    with pytest.raises(hipobj.HipObjError) as e:
        s3.get_into(ro, bucket, "k")
    assert code_of(e) == (1, "hipObjInvalidValue")
    # Not memory at all.
    with pytest.raises(hipobj.HipObjError):
        s3.get_into(object(), bucket, "k")
    # Spans outside the buffer.
    buf = np.zeros(64, dtype=np.uint8)
    with pytest.raises(hipobj.HipObjError) as e:
        s3.get_into(buf, bucket, "k", offset=60, nbytes=8)
    assert code_of(e) == (1, "hipObjInvalidValue")
    with pytest.raises(hipobj.HipObjError):
        s3.get_into(np.zeros(0, dtype=np.uint8), bucket, "k")
    # Over the 4 GiB limit (an untouched anonymous mapping: no memory used).
    big = mmap.mmap(-1, hipobj.MAX_BUFFER_SIZE + 4096)
    with pytest.raises(hipobj.HipObjError) as e:
        s3.put_from(big, bucket, "k")
    assert code_of(e) == (10, "hipObjSizeTooLarge")
    big.close()
    # None of it registered anything or reached the server (whose wrong
    # credentials would have made any request fail with S3Error).
    assert client.registered_count() == before


def test_slices_share_one_registration(client):
    c = client.cache
    a = np.zeros((256, 1024), dtype=np.float32)
    gc.collect()  # what earlier tests left in reference cycles goes first
    regs, n = c.registrations, client.registered_count()
    client.register(a)
    client.register(a[3:7])
    client.register(a[100])
    client.register(a.reshape(-1)[5:500])
    client.register(memoryview(a)[1:2])
    assert c.registrations == regs + 1
    assert client.registered_count() == n + 1
    assert client.release(a[10:20]) is True
    assert client.registered_count() == n
    assert client.release(a) is False


def test_registration_is_released_when_the_array_dies(client):
    gc.collect()  # what earlier tests left in reference cycles goes first
    n = client.registered_count()
    a = np.ones(1 << 16, dtype=np.uint8)
    view = a[100:200]
    client.register(view)
    assert client.registered_count() == n + 1
    del a
    assert client.registered_count() == n + 1  # the view keeps the allocation
    del view
    gc.collect()
    assert client.registered_count() == n


def test_objects_without_weakrefs_are_held_until_released(client):
    gc.collect()  # what earlier tests left in reference cycles goes first
    n = client.registered_count()
    b = bytearray(4096)
    client.register(b)
    assert client.registered_count() == n + 1
    # The export keeps the memory where it is: no resizing under the NIC.
    with pytest.raises(BufferError):
        b.extend(b"x" * 100000)
    assert client.release(b)
    b.extend(b"x")
    assert client.registered_count() == n


def test_cache_is_bounded_and_evicts_the_least_recently_used():
    c = hipobj.Client(nic_hint="softroce0", cache_limit=4)
    arrays = [np.zeros(4096, dtype=np.uint8) for _ in range(10)]
    for a in arrays:
        c.register(a)
    assert len(c.cache) == 4
    assert c.registered_count() == 4
    assert c.cache.registrations == 10
    c.close()
    assert c.registered_count() == 0


def test_the_librarys_256_buffer_limit():
    with pytest.raises(hipobj.HipObjError):
        hipobj.Client(nic_hint="softroce0", cache_limit=hipobj.MAX_BUFFERS + 1)
    c = hipobj.Client(nic_hint="softroce0", cache_limit=hipobj.MAX_BUFFERS)
    arrays = [np.zeros(64, dtype=np.uint8) for _ in range(hipobj.MAX_BUFFERS + 40)]
    for a in arrays:
        c.register(a)
    assert c.registered_count() == hipobj.MAX_BUFFERS
    c.close()


class Producer:
    """A DLPack producer that is not a buffer: only __dlpack__."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_dlpack_producer_registers_host_memory(client):
    a = np.arange(1024, dtype=np.int32)
    p = Producer(a)
    with pytest.raises(TypeError):
        memoryview(p)
    gc.collect()  # what earlier tests left in reference cycles goes first
    n = client.registered_count()
    client.register(p)
    client.register(p)
    assert client.registered_count() == n + 1
    assert client.release(p)
    assert client.registered_count() == n


class FakeCudaArray:
    def __init__(self, ptr, n, strides=None):
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (n,), "typestr": "|u1", "version": 3, "strides": strides,
        }


def test_a_device_pointer_the_runtime_does_not_know_is_a_clear_error(client):
    gc.collect()  # what earlier tests left in reference cycles goes first
    n = client.registered_count()
    with pytest.raises(hipobj.HipObjError) as e:
        client.register(FakeCudaArray(0x7F0000000000, 1 << 20))
    assert e.value.code != 0
    print("device pointer refused:", e.value.name, e.value)
    assert client.registered_count() == n
    with pytest.raises(hipobj.HipObjError) as e:
        client.register(FakeCudaArray(0x7F0000000000, 16, strides=(2,)))
    assert "contiguous" in str(e.value)


class VersionedProducer(Producer):
    """A DLPack 1.x producer: passes max_version through (NumPy 2.1+ marks
    a read-only array's export read-only instead of refusing it)."""

    def __dlpack__(self, stream=None, max_version=None):
        return self._arr.__dlpack__(max_version=max_version)


def test_a_read_only_dlpack_export_is_refused_for_a_get_and_serves_a_put(client):
    a = np.arange(4096, dtype=np.uint8)
    a.setflags(write=False)
    p = VersionedProducer(a)
    t = hipobj._memory.target_of(p, for_get=False)
    assert t.readonly and t.nbytes == 4096 and t.addr == a.ctypes.data
    regs = client.cache.registrations
    with pytest.raises(hipobj.HipObjError) as e:
        hipobj._memory.target_of(p, for_get=True)
    assert e.value.name == "hipObjInvalidValue" and "read-only" in str(e.value)
    assert client.cache.registrations == regs
    # A legacy producer cannot say read-only, so NumPy refuses to export.
    with pytest.raises(hipobj.HipObjError) as e:
        hipobj._memory.target_of(Producer(a), for_get=False)
    assert e.value.name == "hipObjInvalidValue"


def test_importing_torch_after_registering_memory_prints_nothing():
    """The registration cache's gc hook runs during torch's own import,
    when the module has no UntypedStorage yet: it must not raise there
    (each raise printed an 'Exception ignored' traceback)."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    code = (
        "import numpy as np, hipobj\n"
        "c = hipobj.Client(nic_hint='softroce0')\n"
        "b = np.zeros(1 << 20, dtype=np.uint8)\n"
        "c.register(b)\n"
        "import torch\n"
        "print('imported')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "imported" in r.stdout, r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr
