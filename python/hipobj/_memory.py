"""What memory a Python object holds, and the registration cache.

Host memory comes from the buffer protocol (NumPy arrays, bytearray,
memoryview, mmap, ...) or a DLPack producer whose device is the CPU; GPU
memory from ``__cuda_array_interface__`` or a DLPack producer on a GPU. The
cache registers the whole allocation behind an object (a NumPy array's
base, a memoryview's exporter) once, so slices and repeated transfers reuse
the registration.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

from . import _native
from ._errors import error

# DLPack device types (dlpack.h).
_KDL_CPU = 1
_KDL_CUDA = 2
_KDL_CUDA_HOST = 3
_KDL_ROCM = 10
_KDL_ROCM_HOST = 11


@dataclass
class Target:
    """Memory a transfer reads or writes."""

    addr: int
    nbytes: int
    readonly: bool
    device: bool
    owner: Any  # the object whose lifetime bounds the memory (the allocation's root)
    root_addr: int
    root_nbytes: int
    keepalive: Any = None  # e.g. a DLPack capsule that must outlive the registration
    storage: Any = None  # a torch tensor's UntypedStorage (the registration is keyed by it)
    watch: Any = None  # a torch tensor whose death may end the registration (the root of its views)
    storage_addr: int = 0  # where the torch storage's bytes start


def _buffer_root(obj: Any) -> Any:
    """The object that owns the allocation behind ``obj``'s buffer."""
    o = obj
    for _ in range(64):
        base = o.obj if isinstance(o, memoryview) else getattr(o, "base", None)
        if base is None or base is o:
            return o
        try:
            memoryview(base).release()
        except TypeError:
            return o  # the base exports no buffer (e.g. a DLPack holder)
        o = base
    return o


def host_target(obj: Any, *, for_get: bool) -> Target:
    """Checks ``obj``'s buffer and finds the allocation it lives in."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise error(
            "hipObjInvalidValue",
            f"{type(obj).__name__} exports no buffer, __dlpack__ or __cuda_array_interface__",
        ) from None
    with mv:
        if not mv.c_contiguous:
            raise error("hipObjInvalidValue", "the buffer is not C-contiguous: pass a contiguous copy")
        if for_get and mv.readonly:
            raise error("hipObjInvalidValue", "a GET needs writable memory; this buffer is read-only")
        nbytes = mv.nbytes
    if nbytes == 0:
        raise error("hipObjInvalidValue", "the buffer is empty")
    if nbytes > _native.MAX_BUFFER_SIZE:
        raise error("hipObjSizeTooLarge", f"{nbytes} bytes is over the 4 GiB limit of one registration")
    addr, n, readonly = _native.buffer_info(obj)
    root = _buffer_root(obj)
    raddr, rn = addr, n
    if root is not obj:
        try:
            raddr, rn, _ = _native.buffer_info(root)
        except (TypeError, BufferError, ValueError):
            root = obj
        if not (raddr <= addr and addr + n <= raddr + rn) or rn > _native.MAX_BUFFER_SIZE:
            root, raddr, rn = obj, addr, n  # register the view alone
    return Target(addr, n, readonly, False, root, raddr, rn)


def _torch_module():
    """torch, if the program imported it (never imported here)."""
    return sys.modules.get("torch")


def is_torch_tensor(obj: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


class _StorageLocks:
    """Storages with a transfer in flight, locked against resizing and freeing.

    While a transfer runs on a torch storage whose memory torch may
    reallocate (``storage.resizable()``), torch is told to refuse any access
    to its data pointer (``torch._C._set_storage_data_ptr_access_error_msg``):
    ``storage.resize_()``, ``tensor.set_()`` and reads of the bytes then raise
    ``RuntimeError`` instead of freeing memory the NIC is writing. The
    registration holds the storage itself, so it cannot be freed either.
    The lock is counted: concurrent transfers on one storage lift it when
    the last one ends. Where torch lacks the call, the contract is the
    documented one (docs/python.md): do not resize memory in a transfer.
    """

    MESSAGE = "hipobj: this tensor's storage is in an RDMA transfer; it cannot be resized, freed or read until the transfer ends"

    def __init__(self):
        self._lock = threading.Lock()
        self._held = {}  # storage._cdata -> [count, address]

    def supported(self) -> bool:
        torch = _torch_module()
        return torch is not None and hasattr(torch._C, "_set_storage_data_ptr_access_error_msg")

    def address(self, cdata: int) -> Optional[int]:
        """The data address of a storage locked here (its own accessor raises)."""
        with self._lock:
            h = self._held.get(cdata)
            return None if h is None else h[1]

    def enter(self, st: Any, addr: int) -> Optional[int]:
        if not st.resizable() or not self.supported():
            return None
        torch = _torch_module()
        cd = st._cdata
        with self._lock:
            h = self._held.get(cd)
            if h is None:
                torch._C._set_storage_data_ptr_access_error_msg(cd, self.MESSAGE)
                self._held[cd] = [1, addr]
            else:
                h[0] += 1
        return cd

    def exit(self, cd: int) -> None:
        torch = _torch_module()
        with self._lock:
            h = self._held[cd]
            h[0] -= 1
            if h[0] == 0:
                del self._held[cd]
                torch._C._clear_storage_data_ptr_access_error_msg(cd)


STORAGE_LOCKS = _StorageLocks()


def _is_storage(obj: Any) -> bool:
    # While torch is being imported (the cache's gc hook can run then) the
    # module is there without UntypedStorage: nothing is a storage yet.
    storage = getattr(_torch_module(), "UntypedStorage", None)
    return storage is not None and isinstance(obj, storage)


def storage_use_count(st: Any) -> int:
    """How many C++ owners a torch storage has (tensors, and the storage object itself)."""
    return int(_torch_module()._C._storage_Use_Count(st._cdata))


def torch_target(obj: Any, *, for_get: bool) -> Target:
    """A torch tensor's memory, from its metadata (no DLPack export needed).

    The registration covers the tensor's whole storage, so every view of it
    (``state_dict()`` detaches, slices, ``narrow``) shares one registration,
    and holds the storage (not the tensor).
    """
    torch = _torch_module()
    if obj.layout != torch.strided:
        raise error("hipObjInvalidValue", f"a {obj.layout} tensor has no contiguous bytes: pass a dense tensor")
    if obj.requires_grad:
        raise error("hipObjInvalidValue", "the tensor requires grad: pass tensor.detach()")
    if obj.is_conj() or obj.is_neg():
        raise error("hipObjInvalidValue", "the tensor is a lazy conjugate or negation view: pass tensor.resolve_conj()")
    if not obj.is_contiguous():
        raise error("hipObjInvalidValue", "the tensor is not C-contiguous: pass a contiguous copy")
    nbytes = obj.numel() * obj.element_size()
    if nbytes == 0:
        raise error("hipObjInvalidValue", "the tensor is empty")
    if nbytes > _native.MAX_BUFFER_SIZE:
        raise error("hipObjSizeTooLarge", f"{nbytes} bytes is over the 4 GiB limit of one registration")
    kind = obj.device.type
    if kind == "cpu":
        device = False
    elif kind == "cuda":  # CUDA, and ROCm builds of torch
        device = True
    else:
        raise error("hipObjInvalidValue", f"a tensor on {obj.device} is neither host memory nor a CUDA/ROCm GPU")
    st = obj.untyped_storage()
    try:
        sa = int(st.data_ptr())
    except RuntimeError:
        locked = STORAGE_LOCKS.address(st._cdata)
        if locked is None:
            raise
        sa = locked  # another transfer on this storage holds the lock
    sn = int(st.nbytes())
    addr = sa + obj.storage_offset() * obj.element_size()
    root = obj
    for _ in range(64):
        base = root._base
        if base is None or base is root:
            break
        root = base
    ra, rn = sa, sn
    if not (sa <= addr and addr + nbytes <= sa + sn) or sn > _native.MAX_BUFFER_SIZE:
        # A storage over the limit: register the tensor's own bytes.
        ra, rn = addr, nbytes
    return Target(addr, nbytes, False, device, st, ra, rn, keepalive=st, storage=st, watch=root, storage_addr=sa)



class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    """DLPack 1.x's managed tensor: the version and flags before the tensor."""

    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_DLPACK_FLAG_READ_ONLY = 1 << 0
_DLPACK_FLAG_IS_COPIED = 1 << 1

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def _export(obj: Any):
    """``obj.__dlpack__()``, as a DLPack 1.x capsule where the producer can
    (it carries the read-only and copied flags), else the legacy one."""
    try:
        return obj.__dlpack__(max_version=(1, 0))
    except TypeError:
        # A producer from before DLPack 1.0 takes no max_version.
        return obj.__dlpack__()


def dlpack_target(obj: Any, *, for_get: bool) -> Target:
    """The memory of a DLPack producer (torch, CuPy, JAX, NumPy ...)."""
    try:
        capsule = _export(obj)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        # e.g. torch refuses a tensor that requires grad, or a conjugated view
        raise error("hipObjInvalidValue", f"the DLPack export failed: {e}") from e
    # The capsule is not consumed: its destructor gives the tensor back when
    # the capsule dies, which the registration's keepalive delays.
    name = _capsule_name(capsule)
    readonly = False
    if name == b"dltensor_versioned":
        m = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, name))
        if m.version.major != 1:
            raise error("hipObjInvalidValue", f"DLPack {m.version.major}.{m.version.minor} is not 1.x")
        readonly = bool(m.flags & _DLPACK_FLAG_READ_ONLY)
        if m.flags & _DLPACK_FLAG_IS_COPIED:
            # The bytes would move into or out of a copy, not the object.
            raise error("hipObjInvalidValue", "the DLPack producer exported a copy, not its memory")
        t = m.dl_tensor
    elif name == b"dltensor":
        t = _DLTensor.from_address(_capsule_pointer(capsule, name))  # DLManagedTensor starts with its DLTensor
    else:
        raise error("hipObjInvalidValue", f"__dlpack__ returned a capsule named {name!r}, not a DLPack tensor")
    if for_get and readonly:
        raise error("hipObjInvalidValue", "a GET needs writable memory; this DLPack export is read-only")
    if t.dtype.bits % 8:
        raise error("hipObjInvalidValue", f"DLPack dtype of {t.dtype.bits} bits is not byte-addressable")
    item = t.dtype.bits // 8 * max(t.dtype.lanes, 1)
    shape = [t.shape[i] for i in range(t.ndim)]
    count = 1
    for s in shape:
        count *= s
    if t.strides:
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expect:
                raise error("hipObjInvalidValue", "the DLPack tensor is not C-contiguous: pass a contiguous copy")
            expect *= shape[i]
    nbytes = count * item
    if nbytes == 0:
        raise error("hipObjInvalidValue", "the tensor is empty")
    if nbytes > _native.MAX_BUFFER_SIZE:
        raise error("hipObjSizeTooLarge", f"{nbytes} bytes is over the 4 GiB limit of one registration")
    addr = (t.data or 0) + t.byte_offset
    dev = t.device.device_type
    if dev in (_KDL_CPU, _KDL_CUDA_HOST, _KDL_ROCM_HOST):
        device = False
    elif dev in (_KDL_CUDA, _KDL_ROCM):
        device = True
    else:
        raise error("hipObjInvalidValue", f"DLPack device type {dev} is neither host memory nor a CUDA/ROCm GPU")
    storage = _torch_storage(obj, addr, nbytes)
    if storage is not None:
        # A torch tensor: the registration covers its whole storage, so
        # views of one storage share it, and holds the storage (not the
        # capsule, which would keep the tensor object alive for ever): the
        # root tensor's death then releases the registration, and the
        # memory cannot be freed before that.
        st, sa, sn = storage
        root = obj
        for _ in range(64):
            base = getattr(root, "_base", None)
            if base is None or base is root:
                break
            root = base
        del capsule
        return Target(addr, nbytes, readonly, device, root, sa, sn, keepalive=st)
    return Target(addr, nbytes, readonly, device, obj, addr, nbytes, keepalive=capsule)


def _torch_storage(obj: Any, addr: int, nbytes: int):
    """``(storage, address, bytes)`` of a torch tensor's storage holding
    ``[addr, addr + nbytes)``, or None for other producers."""
    get = getattr(obj, "untyped_storage", None)
    if not callable(get):
        return None
    try:
        st = get()
        sa, sn = int(st.data_ptr()), int(st.nbytes())
    except Exception:  # not torch's method after all
        return None
    if sa <= addr and addr + nbytes <= sa + sn and sn <= _native.MAX_BUFFER_SIZE:
        return st, sa, sn
    return None


def cuda_target(obj: Any, *, for_get: bool) -> Target:
    """The memory of an object with ``__cuda_array_interface__``."""
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    shape = cai["shape"]
    typestr = cai["typestr"]
    item = int(typestr[2:])
    count = 1
    for s in shape:
        count *= s
    if cai.get("strides") is not None:
        expect = item
        for i in reversed(range(len(shape))):
            if shape[i] != 1 and cai["strides"][i] != expect:
                raise error("hipObjInvalidValue", "the CUDA array is not C-contiguous: pass a contiguous copy")
            expect *= shape[i]
    nbytes = count * item
    if for_get and readonly:
        raise error("hipObjInvalidValue", "a GET needs writable memory; this CUDA array is read-only")
    if nbytes == 0:
        raise error("hipObjInvalidValue", "the array is empty")
    if nbytes > _native.MAX_BUFFER_SIZE:
        raise error("hipObjSizeTooLarge", f"{nbytes} bytes is over the 4 GiB limit of one registration")
    return Target(ptr, nbytes, bool(readonly), True, obj, ptr, nbytes)


def target_of(obj: Any, *, for_get: bool) -> Target:
    """Where ``obj``'s bytes are, checked before any I/O."""
    if is_torch_tensor(obj):
        return torch_target(obj, for_get=for_get)
    if hasattr(obj, "__cuda_array_interface__"):
        return cuda_target(obj, for_get=for_get)
    try:
        memoryview(obj).release()
        return host_target(obj, for_get=for_get)
    except TypeError:
        pass
    if hasattr(obj, "__dlpack__"):
        return dlpack_target(obj, for_get=for_get)
    return host_target(obj, for_get=for_get)  # raises the clear error


class Entry:
    """One cached registration."""

    __slots__ = ("reg", "key", "users", "finalizer", "strong", "keepalive", "__weakref__")

    def __init__(self, reg, key, strong, keepalive):
        self.reg = reg
        self.key = key
        self.users = 0
        self.finalizer = None
        self.strong = strong  # the owner, when it cannot be watched by a weakref
        self.keepalive = keepalive


class RegistrationCache:
    """Registrations keyed by the allocation (address, size, memory kind).

    Bounded by ``limit`` (at most the library's 256 buffers): when full, the
    least recently used entry that no transfer is using is released. An
    entry whose owner dies is released by a finalizer before the memory goes.
    """

    def __init__(self, client: "_native.Client", limit: int):
        if not 1 <= limit <= _native.MAX_BUFFERS:
            raise error("hipObjInvalidValue", f"the cache limit must be 1 to {_native.MAX_BUFFERS}")
        self._client = client
        self._limit = limit
        # The callbacks that can run at any allocation (a finalizer, the GC
        # hook) only try this lock: when it is held, even by their own
        # thread, they leave the work to the next sweep.
        self._lock = threading.Lock()
        self._miss_lock = threading.Lock()
        self._entries: "OrderedDict[tuple, Entry]" = OrderedDict()
        self.registrations = 0  # native registrations made
        self.hits = 0
        self.releases = 0
        # Sweep after every garbage collection, through a weak reference so
        # that the hook does not keep the cache alive.
        me = weakref.ref(self)

        def hook(phase, info, me=me):
            c = me()
            if c is None:
                gc.callbacks.remove(hook)
            else:
                c._gc_ran(phase, info)

        gc.callbacks.append(hook)

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, t: Target) -> Entry:
        key = (t.root_addr, t.root_nbytes, t.device)
        hit = self._hit(key, t)
        if hit is not None:
            return hit
        # Misses register one at a time, so two threads that miss on the
        # same allocation do not both register it (the second would fail).
        with self._miss_lock:
            hit = self._hit(key, t)
            if hit is not None:
                return hit
            with self._lock:
                victims = self._unused() + self._make_room()
            for v in victims:
                v.reg.release()
            e = self._register(t, key)
            with self._lock:
                e.users += 1
                self._entries[key] = e
                self.registrations += 1
            return e

    def _hit(self, key, t: Target) -> Optional[Entry]:
        stale = None
        with self._lock:
            e = self._entries.get(key)
            if e is not None and t.storage is not None and e.keepalive is not t.storage and e.users == 0:
                # Another torch storage at the same address and size: the
                # cached one was resized away from here. Register anew.
                stale = self._drop(key, e)
                e = None
            if e is not None:
                self._entries.move_to_end(key)
                e.users += 1
                self.hits += 1
                if e.finalizer is None and t.watch is not None and t.storage is not None:
                    e.finalizer = weakref.finalize(t.watch, self._watched_died, key, e.reg)
        if stale is not None:
            stale.reg.release()
        return e

    def _drop(self, key, e: Entry) -> Entry:
        """Removes ``e`` (lock held); the caller releases its registration."""
        self._entries.pop(key, None)
        if e.finalizer is not None:
            e.finalizer.detach()
            e.finalizer = None
        self.releases += 1
        return e

    def _unused(self):
        """Entries whose owner nothing but the registration holds (lock held)."""
        return [self._drop(k, v) for k, v in list(self._entries.items()) if self._unheld(v)]

    def collect(self) -> int:
        """Releases the registrations whose memory's owner (array, buffer
        object, torch storage) only the registration still holds; returns
        how many. Every miss and every run of Python's garbage collector
        does it too."""
        with self._lock:
            gone = self._unused()
        for v in gone:
            v.reg.release()
        return len(gone)

    def _make_room(self):
        victims = []
        while len(self._entries) >= self._limit:
            for k, v in self._entries.items():
                if v.users == 0:
                    del self._entries[k]
                    if v.finalizer is not None:
                        v.finalizer.detach()
                    victims.append(v)
                    self.releases += 1
                    break
            else:
                raise error(
                    "hipObjBusy",
                    f"all {self._limit} cached registrations are in use by transfers; retry later",
                )
        return victims

    def _register(self, t: Target, key) -> Entry:
        # Every registration holds its owner (issue 24: no Python code can
        # free memory that is registered): the native Registration keeps a
        # reference to it until the memory is deregistered. The cache lets
        # go of registrations whose owner nobody else holds any more (see
        # collect()).
        if t.storage is not None:
            # A torch storage: registered by address, held by the
            # registration. It also goes at once when the tensor watched dies
            # and nothing else holds the storage.
            reg = _native.Registration.raw(self._client, t.root_addr, t.root_nbytes, t.device, False, t.storage)
            e = Entry(reg, key, None, t.storage)
            if t.watch is not None:
                e.finalizer = weakref.finalize(t.watch, self._watched_died, key, reg)
            return e
        if t.device or t.keepalive is not None:
            # GPU memory, or a DLPack export of host memory: registered by
            # address, holding the owner and the DLPack capsule.
            # Writable as far as the registration goes: views of one
            # allocation may differ, and each transfer's own object was
            # checked by target_of (a read-only one never reaches a GET).
            reg = _native.Registration.raw(self._client, t.root_addr, t.root_nbytes, t.device, False, (t.owner, t.keepalive))
        else:
            # A buffer export. An owner without weak references (bytearray)
            # is registered with its export held, which also locks it
            # against resizing; it stays until release() or eviction.
            try:
                weakref.ref(t.owner)
                keep = False
            except TypeError:
                keep = True
            reg = _native.Registration.host(self._client, t.owner, keep)
        return Entry(reg, key, None, t.keepalive)

    def _unheld(self, e: Entry) -> bool:
        """Whether only the registration still holds ``e``'s owner."""
        if e.users:
            return False
        o = e.reg.owner
        if o is None:
            return False
        if _is_storage(o):
            return storage_use_count(o) <= 1
        if isinstance(o, tuple):
            o = o[0]
        # The registration's reference (or its tuple's), `o`, and the argument.
        return sys.getrefcount(o) <= 3

    def _gc_ran(self, phase: str, info: dict) -> None:
        if phase == "stop" and self._lock.acquire(blocking=False):
            try:
                gone = self._unused()
            finally:
                self._lock.release()
            for v in gone:
                v.reg.release()

    def _watched_died(self, key, reg) -> None:
        """A watched torch tensor died: release its storage's registration if
        nothing else holds the storage (the dying tensor still counts as one
        owner while this runs), else stop watching. If the cache is busy,
        the next sweep finds the storage unheld instead."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            e = self._entries.get(key)
            if e is None or e.reg is not reg:
                return
            e.finalizer = None
            if e.users or storage_use_count(e.keepalive) > 2:
                return
            del self._entries[key]
            self.releases += 1
        finally:
            self._lock.release()
        reg.release()

    def release_for(self, t: Target) -> bool:
        """Releases the registration covering ``t``'s allocation, if cached."""
        key = (t.root_addr, t.root_nbytes, t.device)
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                return False
            if e.users:
                raise error("hipObjBusy", "a transfer is using this registration")
            del self._entries[key]
            self.releases += 1
        if e.finalizer is not None:
            e.finalizer.detach()
        e.reg.release()
        return True

    def done(self, e: Entry) -> None:
        with self._lock:
            e.users -= 1

    def clear(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self.releases += len(entries)
        for e in entries:
            if e.finalizer is not None:
                e.finalizer.detach()
            e.reg.release()
