"""Host memory for the tensors that a load makes, reused from one load to the next.

``hipobj.torch.load_safetensors`` hands back tensors that are views of the
blocks the server wrote the file's runs into. Memory the process has never
touched costs a page fault per page at its first write, and a NIC pins it
page by page when it is registered; on a VM the host takes a fault as well
(on the development machine, writing a fresh GiB took 1.04 s and writing
it again 0.05 s). glibc serves allocations of a few MiB, such as one
tensor each, from its heap, already faulted after the first load. But it
maps every allocation larger than 32 MiB afresh and unmaps it when it is
freed, so a load's large runs would pay for fresh memory every time.

So a load takes its blocks from this process-wide pool. When every tensor
of a block has died, the block goes back to the pool, not to the system,
and a later load of a similar size takes it. It is already faulted, and it
is still registered with each client that used it, because a client's
registration cache holds the block's mapping. The pool keeps at most
``HIPOBJ_HOST_POOL_BYTES`` of free blocks (default 4 GiB, read at import).
A block past that limit goes back to the system once no registration holds
it. :func:`release` empties the pool.

A block is handed out as a torch tensor, made with ``torch.from_numpy``
from an array that nothing else keeps: torch holds that array for as long
as the tensor's storage lives, and every view of the tensor, ``.numpy()``
of it, or DLPack export shares that storage. The block goes back when the
array dies, so the memory of a live tensor is never handed out again. (A
NumPy slice would not do: NumPy gives a slice of a slice the block itself
as its base, so a slice could outlive the array it was cut from.)
"""

from __future__ import annotations

import bisect
import collections
import mmap
import os
import threading
import warnings
import weakref
from typing import Any, List, Tuple

import numpy as np

from ._errors import error

_MIB = 1 << 20
DEFAULT_KEEP_BYTES = 4 << 30


def _keep_bytes_from_env() -> int:
    """The limit, from the environment. A value that is not a byte count
    is warned about, not raised: it must not stop the import."""
    v = os.environ.get("HIPOBJ_HOST_POOL_BYTES")
    if v is None or v == "":
        return DEFAULT_KEEP_BYTES
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        warnings.warn(f"hipobj: HIPOBJ_HOST_POOL_BYTES={v!r} is not a byte count; keeping {DEFAULT_KEEP_BYTES}", stacklevel=2)
        return DEFAULT_KEEP_BYTES
    return n


def _fresh(size: int) -> np.ndarray:
    """A new block: an anonymous mapping of its own (page-aligned), which
    goes back to the system when the last reference to it does."""
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)


class HostBlocks:
    """Free blocks, sorted by size, and the counters the tests read."""

    def __init__(self, keep_bytes: int):
        self.keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._free: List[np.ndarray] = []
        self._sizes: List[int] = []  # self._free's sizes, ascending
        self._kept = 0
        # Blocks whose view died. The finalizer runs wherever the last
        # reference went, possibly while this thread holds the lock, so it
        # only appends here (atomic) and files the blocks when the lock is
        # free; whoever takes the lock next files what is left.
        self._back: "collections.deque[np.ndarray]" = collections.deque()
        self.made = 0  # blocks mapped
        self.reused = 0  # blocks handed out again

    def take(self, n: int) -> Tuple[Any, np.ndarray]:
        """``n`` bytes of a block, as a uint8 CPU torch tensor and the NumPy
        array under it. The block returns to the pool when the tensor's
        storage has died. The array is for the transfer into the block
        alone (its registration is keyed by the block's mapping, which
        outlives this tensor): keep no reference to it, nor any NumPy
        slice of it, past the transfer."""
        import torch

        if n <= 0:
            raise error("hipObjInvalidValue", f"a host block of {n} bytes")
        size = -(-n // _MIB) * _MIB
        block = None
        with self._lock:
            self._file_returns()
            # The smallest free block that fits, wasting at most an eighth.
            i = bisect.bisect_left(self._sizes, size)
            if i < len(self._sizes) and self._sizes[i] <= size + size // 8:
                block = self._free.pop(i)
                del self._sizes[i]
                self._kept -= block.nbytes
                self.reused += 1
        if block is None:
            block = _fresh(size)
            with self._lock:
                self.made += 1
        into = block[:n]
        f = weakref.finalize(into, self._returned, block)
        f.atexit = False
        return torch.from_numpy(into), into

    def after_fork_in_child(self) -> None:
        """A forked child's pool: a new lock, since another thread of the
        parent may have held the old one at the fork. The free blocks are
        the child's own copies, and stay."""
        self._lock = threading.Lock()

    def _returned(self, block: np.ndarray) -> None:
        self._back.append(block)
        if self._lock.acquire(blocking=False):
            try:
                self._file_returns()
            finally:
                self._lock.release()

    def _file_returns(self) -> None:
        """Files the returned blocks that fit under the limit (lock held);
        the others are dropped."""
        while self._back:
            b = self._back.popleft()
            if self._kept + b.nbytes > self.keep_bytes:
                continue
            i = bisect.bisect_left(self._sizes, b.nbytes)
            self._sizes.insert(i, b.nbytes)
            self._free.insert(i, b)
            self._kept += b.nbytes

    def free_bytes(self) -> int:
        """Bytes of free blocks the pool holds now."""
        with self._lock:
            self._file_returns()
            return self._kept

    def release(self) -> int:
        """Drops every free block; returns how many bytes they held."""
        with self._lock:
            self._file_returns()
            n = self._kept
            self._free.clear()
            self._sizes.clear()
            self._kept = 0
        return n


HOST_BLOCKS = HostBlocks(_keep_bytes_from_env())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HOST_BLOCKS.after_fork_in_child)


def release() -> int:
    """Gives the pool's free blocks back (to the system once no client's
    registration holds them); returns how many bytes the pool held."""
    return HOST_BLOCKS.release()
