"""hipobj.Client and the transfer front ends (built-in S3 client, boto3)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import warnings
from typing import Any, List, Optional, Tuple

from . import _native
from ._errors import HipObjError, RdmaFallbackWarning, error
from ._memory import STORAGE_LOCKS, RegistrationCache, Target, is_torch_tensor, target_of


# S3's smallest part (all but the last); the defaults for put_from's
# automatic multipart upload.
MIN_PART_SIZE = 5 << 20
MULTIPART_THRESHOLD = 64 << 20
PART_SIZE = 64 << 20
# Parts of one upload in flight at once (docs/performance.md, "Parts in flight").
IN_FLIGHT = 4


def stream_handle(stream: Any) -> Optional[int]:
    """The raw handle (``hipStream_t`` / ``CUstream``) of ``stream``.

    Accepts ``None`` (no stream), an ``int`` handle (0 is the default
    stream), an object with the CUDA stream protocol (``__cuda_stream__``
    returning ``(version, handle)``), a ``torch.cuda.Stream`` (its
    ``cuda_stream``) or a CuPy stream (its ``ptr``).
    """
    if stream is None:
        return None
    h: Any
    if isinstance(stream, int) and not isinstance(stream, bool):
        h = stream
    elif hasattr(stream, "__cuda_stream__"):
        v = stream.__cuda_stream__()
        h = v[1] if isinstance(v, tuple) and len(v) == 2 else None
    elif hasattr(stream, "cuda_stream"):
        h = stream.cuda_stream
    elif hasattr(stream, "ptr"):
        h = stream.ptr
    else:
        h = None
    if not isinstance(h, int) or isinstance(h, bool) or h < 0 or h >= 1 << 64:
        raise error(
            "hipObjInvalidValue",
            f"stream must be an int handle, a torch.cuda.Stream, a CuPy stream or have __cuda_stream__; got {type(stream).__name__}",
        )
    return h


# The process that opened the NIC first. A child forked from it inherits the
# library's process-wide state (the platform, the soft NIC's sockets) but
# not the threads behind it, so neither the parent's clients nor new ones
# can work there.
_NIC_PID: Optional[int] = None
_FORKED = (
    "this process was forked from one that had opened the RDMA NIC (a hipobj.Client); "
    "the NIC's state does not survive fork: start workers with the 'spawn' or 'forkserver' "
    "method (DataLoader(multiprocessing_context='spawn'), torch.multiprocessing.spawn)"
)


def _check_not_forked() -> None:
    global _NIC_PID
    if _NIC_PID is None:
        _NIC_PID = os.getpid()
    elif _NIC_PID != os.getpid():
        raise error("hipObjNotInitialized", _FORKED)


class Client:
    """hipObject on this process's RDMA NIC.

    ``nic_hint`` names the RDMA devices that may be chosen (comma-separated,
    for example ``"mlx5_0"`` or ``"softroce0"``); ``gpu_device`` the GPU whose
    nearest NIC to use. ``cache_limit`` bounds the registration cache (the
    library registers at most 256 buffers).
    """

    def __init__(self, nic_hint: Optional[str] = None, gpu_device: Optional[int] = None, *, cache_limit: int = 128):
        _check_not_forked()
        self._pid = os.getpid()
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

    def _sync_stream(self, stream: Any) -> None:
        """Waits for the work queued on ``stream`` (GIL released); nothing for None."""
        h = stream_handle(stream)
        if h is not None:
            self._native.synchronize_stream(h)

    def register_module(self, module: Any) -> int:
        """Registers the storage of every parameter and buffer of a
        ``torch.nn.Module`` (or any iterable of tensors) now, so that
        loading into it (``load_state_dict``, DCP, ``get_into`` of its
        ``state_dict()`` views) registers nothing more. Returns how many
        storages were registered or found registered."""
        if hasattr(module, "parameters") and hasattr(module, "buffers"):
            tensors = list(module.parameters()) + list(module.buffers())
        else:
            tensors = list(module)
        seen = set()
        for p in tensors:
            if not is_torch_tensor(p) or p.numel() == 0:
                continue
            t = p.detach()
            st = t.untyped_storage()
            if st._cdata in seen:
                continue
            seen.add(st._cdata)
            self.register(t)
        return len(seen)

    def _run(self, obj, offset, nbytes, for_get, fn):
        if os.getpid() != self._pid:
            raise error("hipObjNotInitialized", _FORKED)
        t, at, n = self._span(obj, offset, nbytes, for_get)
        e = self.cache.acquire(t)
        locked = None
        try:
            if t.storage is not None:
                # A resizable torch storage: locked against resize_() and
                # set_() until the transfer ends (docs/python.md, Memory).
                locked = STORAGE_LOCKS.enter(t.storage, t.storage_addr)
            # `obj` stays referenced by this frame for the whole transfer,
            # so its memory cannot go away under the NIC.
            return fn(e.reg, at, n)
        finally:
            if locked is not None:
                STORAGE_LOCKS.exit(locked)
            self.cache.done(e)


class _Front:
    """get_into / put_from, blocking and asyncio, over one S3 client.

    ``put_from`` of more than ``multipart_threshold`` bytes is a multipart
    upload of ``part_size`` parts, each sent by RDMA.
    """

    def __init__(self, client: Client, multipart_threshold: int = MULTIPART_THRESHOLD, part_size: int = PART_SIZE):
        self.client = client
        self.part_size = _check_part_size(part_size)
        if multipart_threshold < 1:
            raise error("hipObjInvalidValue", "multipart_threshold must be at least 1 byte")
        self.multipart_threshold = multipart_threshold
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

    def get_into(
        self,
        buf: Any,
        bucket: str,
        key: str,
        *,
        offset: int = 0,
        nbytes: Optional[int] = None,
        range: Optional[str] = None,
        stream: Any = None,
    ) -> int:
        """GetObject (or the HTTP ``range``) into ``buf`` at ``offset``; returns the bytes written.

        Without ``nbytes`` the object (or the range) may be smaller than
        the span of ``buf``: its size comes from the range itself
        (``bytes=a-b``) or from a HeadObject first, and only that many
        bytes are moved. An object larger than the span is refused before
        any byte moves (``hipObjSizeTooLarge``).

        ``stream``: the GPU stream whose work uses ``buf``; it is
        synchronized before the transfer starts (docs/python.md, streams).
        """
        _, _, span = self.client._span(buf, offset, nbytes, True)  # bad input: refused before any I/O
        self.client._sync_stream(stream)
        if nbytes is None:
            want = _range_len(range)
            if want is None:
                size = int(self.head(bucket, key)["size"])
                want = max(size - _range_start(range), 0)
            if want > span:
                raise error(
                    "hipObjSizeTooLarge",
                    f"GetObject: the object or range ({want} bytes) is larger than the {span}-byte buffer",
                )
            if want == 0:
                return 0  # an empty object: no byte to move
            nbytes = want
        return self._get(buf, bucket, key, offset, nbytes, range)

    def head(self, bucket: str, key: str) -> dict:
        """HeadObject: ``{"size": int, "etag": str | None, "mtime": float | None}``
        (``mtime`` in seconds since the epoch). A missing key raises
        :class:`hipobj.NoSuchKey` (a ``FileNotFoundError``)."""
        return self._head(bucket, key)

    def put_from(
        self,
        buf: Any,
        bucket: str,
        key: str,
        *,
        offset: int = 0,
        nbytes: Optional[int] = None,
        part_size: Optional[int] = None,
        in_flight: int = IN_FLIGHT,
        stream: Any = None,
    ) -> int:
        """PutObject of ``nbytes`` of ``buf`` from ``offset``; returns the bytes sent.

        Above ``multipart_threshold`` bytes it is a multipart upload of
        ``part_size`` parts (default: the client's), ``in_flight`` at a
        time, each with its own token and connection, aborted if a part
        fails. ``stream``: the GPU stream that produced ``buf``,
        synchronized first.
        """
        _, _, n = self.client._span(buf, offset, nbytes, False)
        part = self.part_size if part_size is None else _check_part_size(part_size)
        if not isinstance(in_flight, int) or not 1 <= in_flight <= 64:
            raise error("hipObjInvalidValue", f"in_flight must be 1 to 64; got {in_flight!r}")
        self.client._sync_stream(stream)
        if n <= self.multipart_threshold:
            return self._put(buf, bucket, key, offset, n)
        return self._put_parts(buf, bucket, key, offset, n, part, in_flight)

    def _put_parts(self, buf, bucket, key, offset, n, part, in_flight) -> int:
        """A multipart upload of ``n`` bytes in ``part``-byte parts: the
        first alone (it finds what the server speaks), then ``in_flight``
        at a time; on the first failure no new part starts, and the upload
        is aborted."""
        upload = self._create(bucket, key)
        spans = [(i + 1, off, min(part, n - off)) for i, off in enumerate(range(0, n, part))]
        done: List[Tuple[int, Optional[str], bool]] = []
        try:
            number, off, m = spans[0]
            done.append((number, *self._part(buf, bucket, key, upload, number, offset + off, m)))
            if len(spans) > 1:
                with concurrent.futures.ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="hipobj-part") as pool:
                    futures = [
                        pool.submit(self._part, buf, bucket, key, upload, number, offset + off, m)
                        for number, off, m in spans[1:]
                    ]
                    try:
                        for (number, _, _), f in zip(spans[1:], futures):
                            done.append((number, *f.result()))
                    except BaseException:
                        for f in futures:
                            f.cancel()
                        raise
            parts = [(number, etag) for number, etag, _ in done]
            self._complete(bucket, key, upload, parts, n, all(by_rdma for _, _, by_rdma in done))
        except BaseException:
            try:
                self._abort(bucket, key, upload)
            except Exception:  # the part's failure is what the caller needs
                pass
            raise
        return n

    # What each S3 client provides.
    def _head(self, bucket, key) -> dict:  # pragma: no cover
        raise NotImplementedError

    def _get(self, buf, bucket, key, offset, nbytes, range) -> int:  # pragma: no cover
        raise NotImplementedError

    def _put(self, buf, bucket, key, offset, n) -> int:  # pragma: no cover
        raise NotImplementedError

    def _create(self, bucket, key) -> str:  # pragma: no cover
        raise NotImplementedError

    def _part(self, buf, bucket, key, upload, number, offset, n) -> Tuple[Optional[str], bool]:  # pragma: no cover
        """Sends one part; returns its ETag and whether it went by RDMA."""
        raise NotImplementedError

    def _complete(self, bucket, key, upload, parts, n, rdma) -> None:  # pragma: no cover
        raise NotImplementedError

    def _abort(self, bucket, key, upload) -> None:  # pragma: no cover
        raise NotImplementedError

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:  # pragma: no cover
        """PutObject of ``data`` in the HTTP body (small objects, metadata)."""
        raise NotImplementedError

    def get_bytes(self, bucket: str, key: str, range: Optional[str] = None) -> bytes:  # pragma: no cover
        """GetObject of the object (or ``range``) in the HTTP body."""
        raise NotImplementedError


def _range_len(range: Optional[str]) -> Optional[int]:
    """The length of an HTTP range ``bytes=a-b``; None for anything else."""
    if range is None or not range.startswith("bytes="):
        return None
    a, sep, b = range[6:].partition("-")
    if not sep or not a.isdigit() or not b.isdigit() or int(b) < int(a):
        return None
    return int(b) - int(a) + 1


def _range_start(range: Optional[str]) -> int:
    """Where a range ``bytes=a-`` starts (0 without a range). A suffix range
    (``bytes=-n``) or another unit is left for the server to judge: 0."""
    if range is None or not range.startswith("bytes="):
        return 0
    a = range[6:].partition("-")[0]
    return int(a) if a.isdigit() else 0


def _check_part_size(part_size: int) -> int:
    if not isinstance(part_size, int) or part_size < MIN_PART_SIZE or part_size > _native.MAX_BUFFER_SIZE:
        raise error(
            "hipObjInvalidValue",
            f"part_size must be {MIN_PART_SIZE} bytes (S3's smallest part) to 4 GiB; got {part_size!r}",
        )
    return part_size


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
    (``fallback=False`` makes it a ``HipObjError``). ``put_from`` of more
    than ``multipart_threshold`` bytes is a multipart upload of
    ``part_size`` parts. An ``https://`` endpoint's certificate must chain
    to ``ca_bundle`` (a PEM file) when given, else to ``AWS_CA_BUNDLE``'s,
    else to the system's roots.

    Credentials: ``access_key`` and ``secret_key`` (with ``session_token``
    for temporary keys) when given, used as they are; else ``profile``, one
    profile of the shared config and credentials files used alone (as
    boto3's ``Session(profile_name=)``: keys in the environment do not win
    over it); else the AWS SDK's default chain, as boto3 and the AWS CLI
    look: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN``, the shared files' ``AWS_PROFILE`` or ``default``
    profile (SSO, ``credential_process`` and assumed roles included), web
    identity (``AWS_WEB_IDENTITY_TOKEN_FILE``), the container credentials
    endpoint and the instance metadata service. Temporary credentials from
    a profile or the chain are renewed before they expire. ``region``: the
    argument, else ``AWS_REGION``, else the profile's, else ``us-east-1``.
    """

    def __init__(
        self,
        client: Client,
        endpoint: str,
        access_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        *,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
        region: Optional[str] = None,
        fallback: bool = True,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        ca_bundle: Optional[str] = None,
    ):
        super().__init__(client, multipart_threshold, part_size)
        self._s3 = _native.S3Client(
            client._native, endpoint, access_key, secret_key, region, fallback, ca_bundle, session_token, profile
        )
        self.last: Optional[dict] = None

    def _head(self, bucket, key) -> dict:
        return self._s3.head_object(bucket, key)

    def _put_parts(self, buf, bucket, key, offset, n, part, in_flight) -> int:
        # hipobj-s3 splits it (one registration, parts in flight, the
        # server's limit learned, hipobj-rc-v2 sent the object whole).
        def go(reg, at, m):
            return self._s3.put_object_in_parts(reg, at, m, bucket, key, part, in_flight)

        r = self.client._run(buf, offset, n, False, go)
        return self._done("PutObject", r)

    def _get(self, buf, bucket, key, offset, nbytes, range) -> int:
        want = _range_len(range)
        if want is not None and want <= nbytes:
            # A bounded range goes through hipobj-s3's ranged GETs as a
            # whole object does: in parts of the client's part size (or the
            # server's limit, learned from its refusal), several in flight,
            # all landing in this registration (docs/python.md, "Large
            # transfers"). One no larger than a part is one GET as before.
            first = _range_start(range)

            def go(reg, at, n):
                return self._s3.get_object_ranges(reg, at, n, bucket, key, first)

            r = self.client._run(buf, offset, want, True, go)
            return self._done("GetObject", r)

        def go(reg, at, n):
            return self._s3.get_object(reg, at, n, bucket, key, range)

        r = self.client._run(buf, offset, nbytes, True, go)
        return self._done("GetObject", r)

    def _put(self, buf, bucket, key, offset, n) -> int:
        def go(reg, at, n):
            return self._s3.put_object(reg, at, n, bucket, key)

        r = self.client._run(buf, offset, n, False, go)
        return self._done("PutObject", r)

    def _create(self, bucket, key) -> str:
        return self._s3.create_multipart_upload(bucket, key)

    def _part(self, buf, bucket, key, upload, number, offset, n) -> Tuple[Optional[str], bool]:
        r = self.upload_part_from(buf, bucket, key, upload, number, offset=offset, nbytes=n)
        return r.get("etag"), bool(r["rdma"])

    def _complete(self, bucket, key, upload, parts, n, rdma) -> None:
        etag = self._s3.complete_multipart_upload(bucket, key, upload, parts)
        self.last = {
            "bytes": n,
            "rdma": rdma,
            "declined": None if rdma else "a part fell back to plain HTTP",
            "etag": etag,
            "object_size": None,
            "status": 200,
            "parts": len(parts),
        }

    def _abort(self, bucket, key, upload) -> None:
        self._s3.abort_multipart_upload(bucket, key, upload)

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self._s3.put_bytes(bucket, key, bytes(data))

    def get_bytes(self, bucket: str, key: str, range: Optional[str] = None) -> bytes:
        return self._s3.get_bytes(bucket, key, range)

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
