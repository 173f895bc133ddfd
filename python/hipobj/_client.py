"""hipobj.Client and the transfer front ends (built-in S3 client, boto3)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import warnings
from typing import Any, Optional

from . import _native
from ._errors import HipObjError, RdmaFallbackWarning, error
from ._memory import RegistrationCache, Target, target_of


class Client:
    """hipObject on this process's RDMA NIC.

    ``nic_hint`` names the RDMA devices that may be chosen (comma-separated,
    for example ``"mlx5_0"`` or ``"softroce0"``); ``gpu_device`` the GPU whose
    nearest NIC to use. ``cache_limit`` bounds the registration cache (the
    library registers at most 256 buffers).
    """

    def __init__(self, nic_hint: Optional[str] = None, gpu_device: Optional[int] = None, *, cache_limit: int = 128):
        self._native = _native.Client(nic_hint, gpu_device)
        self.cache = RegistrationCache(self._native, cache_limit)

    @property
    def device(self) -> str:
        """The RDMA device in use."""
        return self._native.device

    @property
    def connections(self) -> int:
        """RDMA connections: transfers that can run at once."""
        return self._native.connections()

    def registered_count(self) -> int:
        """Buffers registered with the NIC right now (cached or not)."""
        return self._native.registered_count()

    def register(self, obj: Any) -> None:
        """Registers the allocation behind ``obj`` now (transfers do it on first use)."""
        t = target_of(obj, for_get=False)
        e = self.cache.acquire(t)
        self.cache.done(e)

    def release(self, obj: Any) -> bool:
        """Deregisters the allocation behind ``obj``; False if it was not registered."""
        return self.cache.release_for(target_of(obj, for_get=False))

    def close(self) -> None:
        """Deregisters everything cached."""
        self.cache.clear()

    def _span(self, obj: Any, offset: int, nbytes: Optional[int], for_get: bool):
        t = target_of(obj, for_get=for_get)
        if offset < 0 or offset > t.nbytes:
            raise error("hipObjInvalidValue", f"offset {offset} is outside the {t.nbytes}-byte buffer")
        n = t.nbytes - offset if nbytes is None else nbytes
        if n <= 0:
            raise error("hipObjInvalidValue", "the transfer size is 0")
        if n > _native.MAX_BUFFER_SIZE:
            raise error("hipObjSizeTooLarge", f"{n} bytes is over the 4 GiB limit of one transfer")
        if offset + n > t.nbytes:
            raise error("hipObjInvalidValue", f"{offset}+{n} bytes runs past the {t.nbytes}-byte buffer")
        return t, (t.addr - t.root_addr) + offset, n

    def _run(self, obj, offset, nbytes, for_get, fn):
        t, at, n = self._span(obj, offset, nbytes, for_get)
        e = self.cache.acquire(t)
        try:
            # `obj` stays referenced by this frame for the whole transfer,
            # so its memory cannot go away under the NIC.
            return fn(e.reg, at, n)
        finally:
            self.cache.done(e)


class _Front:
    """get_into / put_from, blocking and asyncio, over one S3 client."""

    def __init__(self, client: Client):
        self.client = client
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(32, self.client.connections), thread_name_prefix="hipobj"
                )
            return self._pool

    async def get_into_async(self, buf: Any, bucket: str, key: str, **kw: Any) -> int:
        """``get_into`` as an awaitable (runs on a worker thread, GIL released)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), functools.partial(self.get_into, buf, bucket, key, **kw))

    async def put_from_async(self, buf: Any, bucket: str, key: str, **kw: Any) -> int:
        """``put_from`` as an awaitable."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), functools.partial(self.put_from, buf, bucket, key, **kw))

    def get_into(self, buf, bucket, key, *, offset=0, nbytes=None, range=None) -> int:  # pragma: no cover
        raise NotImplementedError

    def put_from(self, buf, bucket, key, *, offset=0, nbytes=None) -> int:  # pragma: no cover
        raise NotImplementedError


def _warn_declined(op: str, why: Optional[str]) -> None:
    warnings.warn(
        f"{op}: the server declined RDMA ({why}); the bytes moved over plain HTTP",
        RdmaFallbackWarning,
        stacklevel=4,
    )


class S3(_Front):
    """The built-in S3 client (Rust aws-sdk-s3 through hipobj-s3).

    For programs that do not use boto3. A server that declines RDMA gets
    plain HTTP through the same memory, with an ``RdmaFallbackWarning``
    (``fallback=False`` makes it a ``HipObjError``).
    """

    def __init__(
        self,
        client: Client,
        endpoint: str,
        access_key: str,
        secret_key: str,
        *,
        region: str = "us-east-1",
        fallback: bool = True,
    ):
        super().__init__(client)
        self._s3 = _native.S3Client(client._native, endpoint, access_key, secret_key, region, fallback)
        self.last: Optional[dict] = None

    def get_into(self, buf: Any, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None, range: Optional[str] = None) -> int:
        """GetObject (or the HTTP ``range``) into ``buf`` at ``offset``; returns the bytes written."""

        def go(reg, at, n):
            return self._s3.get_object(reg, at, n, bucket, key, range)

        r = self.client._run(buf, offset, nbytes, True, go)
        return self._done("GetObject", r)

    def put_from(self, buf: Any, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None) -> int:
        """PutObject of ``nbytes`` of ``buf`` from ``offset``; returns the bytes sent."""

        def go(reg, at, n):
            return self._s3.put_object(reg, at, n, bucket, key)

        r = self.client._run(buf, offset, nbytes, False, go)
        return self._done("PutObject", r)

    def upload_part_from(self, buf: Any, bucket: str, key: str, upload_id: str, number: int, *, offset: int = 0, nbytes: Optional[int] = None) -> dict:
        """UploadPart ``number``; returns what happened, with the part's ``etag``."""

        def go(reg, at, n):
            return self._s3.upload_part(reg, at, n, bucket, key, upload_id, number)

        r = self.client._run(buf, offset, nbytes, False, go)
        self._done("UploadPart", r)
        return r

    def _done(self, op: str, r: dict) -> int:
        self.last = r
        if not r["rdma"]:
            _warn_declined(op, r.get("declined"))
        return int(r["bytes"])
