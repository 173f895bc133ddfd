"""What the integrations (hipobj.torch, the fsspec filesystem) share: ``s3://`` paths, one connection
(hipobj.Client + the built-in S3 client) per endpoint and process, a pool
of registered staging buffers, and the runs of adjacent byte ranges that
one GET can carry."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._client import S3, Client, _Front
from ._errors import error

# How many transfers the integrations keep in flight (each on its own RDMA
# connection; the library has HIPOBJ_MAX_TRANSFERS of them, default 16).
DEFAULT_IN_FLIGHT = 4
# The most bytes one coalesced GET carries.
DEFAULT_RUN_BYTES = 64 << 20


def parse_s3(path: Any) -> Tuple[str, str]:
    """``s3://bucket/key`` (or ``hipobj://``) as ``(bucket, key)``; the key may be empty."""
    p = os.fspath(path) if not isinstance(path, str) else path
    for scheme in ("s3://", "hipobj://"):
        if p.startswith(scheme):
            rest = p[len(scheme):]
            bucket, _, key = rest.partition("/")
            if not bucket:
                break
            return bucket, key
    raise error("hipObjInvalidValue", f"{p!r} is not an s3://bucket/key path")


def join_key(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}" if prefix else name


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom: the arguments boto3 takes, with environment
    defaults. Credentials not given here come from the AWS SDK's default
    chain in the built-in client (environment, ``profile`` or
    ``AWS_PROFILE``, SSO, web identity, container, instance metadata)."""

    endpoint_url: str
    access_key: Optional[str]
    secret_key: Optional[str]
    session_token: Optional[str]
    profile: Optional[str]
    region: Optional[str]
    nic_hint: Optional[str]
    fallback: bool

    @classmethod
    def of(
        cls,
        endpoint_url: Optional[str] = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        region_name: Optional[str] = None,
        nic_hint: Optional[str] = None,
        fallback: bool = True,
        aws_session_token: Optional[str] = None,
        profile: Optional[str] = None,
    ) -> "Endpoint":
        url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if not url:
            raise error("hipObjInvalidValue", "no endpoint_url (or AWS_ENDPOINT_URL) for the S3 server")
        if bool(aws_access_key_id) != bool(aws_secret_access_key):
            raise error("hipObjInvalidValue", "aws_access_key_id and aws_secret_access_key go together: give both or neither")
        if aws_session_token and not aws_access_key_id:
            raise error("hipObjInvalidValue", "aws_session_token goes with aws_access_key_id and aws_secret_access_key (or set AWS_SESSION_TOKEN with AWS_ACCESS_KEY_ID)")
        if aws_access_key_id and profile:
            raise error("hipObjInvalidValue", "give either aws_access_key_id and aws_secret_access_key or a profile, not both")
        hint = nic_hint if nic_hint is not None else os.environ.get("HIPOBJ_NIC")
        return cls(url, aws_access_key_id or None, aws_secret_access_key or None, aws_session_token or None, profile or None, region_name or None, hint, fallback)


class StagingPool:
    """Registered host buffers reused across calls (and checkpoint steps):
    each registration is made once, when a buffer of its size class is
    first needed. Size classes are powers of two from 1 MiB."""

    def __init__(self, client: Client, keep_bytes: int = 2 << 30):
        self.client = client
        self.keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._free: Dict[int, List[np.ndarray]] = {}
        self._kept = 0
        self.made = 0  # buffers allocated and registered

    @staticmethod
    def _class(n: int) -> int:
        c = 1 << 20
        while c < n:
            c <<= 1
        return c

    def take(self, n: int) -> np.ndarray:
        c = self._class(n)
        with self._lock:
            free = self._free.get(c)
            if free:
                self._kept -= c
                return free.pop()
        buf = np.empty(c, dtype=np.uint8)
        self.client.register(buf)
        self.made += 1
        return buf

    def give(self, buf: np.ndarray) -> None:
        c = buf.nbytes
        with self._lock:
            if self._kept + c <= self.keep_bytes:
                self._free.setdefault(c, []).append(buf)
                self._kept += c
                return
        self.client.release(buf)


class Connection:
    """One endpoint's hipObject client, S3 front end (the built-in client,
    or the ``hipobj.S3`` / ``hipobj.Boto3`` the program gave), staging pool
    and worker threads, shared by the integrations of one process."""

    def __init__(self, ep: Optional[Endpoint], client: Optional[Client] = None, front: Optional[_Front] = None):
        self.endpoint = ep
        if front is not None:
            self.client = front.client
            self.s3: _Front = front
        elif ep is None:
            raise error("hipObjInvalidValue", "no endpoint and no S3 front end")
        else:
            self.client = client or Client(nic_hint=ep.nic_hint)
            self.s3 = S3(
                self.client,
                ep.endpoint_url,
                ep.access_key,
                ep.secret_key,
                session_token=ep.session_token,
                profile=ep.profile,
                region=ep.region,
                fallback=ep.fallback,
            )
        self.staging = StagingPool(self.client)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                n = max(DEFAULT_IN_FLIGHT, min(16, self.client.connections))
                self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="hipobj-torch")
            return self._pool


_connections: Dict[Tuple[int, Endpoint], Connection] = {}
_connections_lock = threading.Lock()


def connect(client: Optional[Client] = None, s3: Optional[_Front] = None, **kw: Any) -> Connection:
    """The process's shared connection to an endpoint (``endpoint_url``,
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``,
    ``profile``, ``region_name``, ``nic_hint``, ``fallback``). Keyed by
    process too: a forked DataLoader worker opens its own NIC. With ``s3``
    (a ``hipobj.S3`` or ``hipobj.Boto3``), a connection of its own over that
    front end, which brings its client, endpoint and credentials."""
    if s3 is not None:
        if not isinstance(s3, _Front):
            raise error("hipObjInvalidValue", f"s3 must be a hipobj.S3 or hipobj.Boto3; got {type(s3).__name__}")
        if client is not None or kw:
            raise error("hipObjInvalidValue", f"s3= brings its own client and endpoint: give it alone, not with {sorted(kw) + (['client'] if client is not None else [])}")
        return Connection(None, front=s3)
    ep = Endpoint.of(**kw)
    if client is not None:
        return Connection(ep, client)
    k = (os.getpid(), ep)
    with _connections_lock:
        c = _connections.get(k)
        if c is None:
            c = _connections[k] = Connection(ep)
        return c


@dataclass
class Piece:
    """A byte range of an object that a caller wants, and what for."""

    offset: int
    length: int
    what: Any


def runs(pieces: Sequence[Piece], max_bytes: int = DEFAULT_RUN_BYTES, max_gap: int = 0) -> List[Tuple[int, int, List[Piece]]]:
    """Groups byte ranges into runs that one ranged GET carries:
    ``(start, end, pieces)``, sorted; pieces that touch or overlap (or lie
    within ``max_gap`` bytes) share a run unless it would pass ``max_bytes``
    (a piece larger than that is a run alone)."""
    out: List[Tuple[int, int, List[Piece]]] = []
    for p in sorted(pieces, key=lambda p: p.offset):
        end = p.offset + p.length
        if out:
            s, e, ps = out[-1]
            if p.offset <= e + max_gap and max(e, end) - s <= max_bytes:
                out[-1] = (s, max(e, end), ps + [p])
                continue
        out.append((p.offset, end, [p]))
    return out
