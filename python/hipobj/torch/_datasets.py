"""Map-style and iterable datasets over the objects under an S3 prefix, as
s3torchconnector has them; each object's bytes come by RDMA into a
registered buffer. ``from_prefix`` takes the endpoint and credential
arguments of the DCP storage (``endpoint_url``, ``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``profile``,
``region_name``, ``nic_hint``, ``fallback``)."""

from __future__ import annotations

import io
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch.utils.data

from .._client import Client
from .._errors import error
from .._shared import connect, parse_s3

__all__ = ["S3Reader", "S3MapDataset", "S3IterableDataset"]


class S3Reader(io.RawIOBase):
    """One object, readable like a file; the first read fetches it whole by RDMA."""

    def __init__(self, conn, bucket: str, key: str, size: int):
        super().__init__()
        self._conn = conn
        self.bucket = bucket
        self.key = key
        self.size = size
        self._data: Optional[memoryview] = None
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _load(self) -> memoryview:
        if self._data is None:
            if self.size == 0:
                self._data = memoryview(b"")
            else:
                # Into a registered staging buffer (no registration per
                # object), then out into the reader's own bytes.
                pool = self._conn.staging
                buf = pool.take(self.size)
                try:
                    n = self._conn.s3.get_into(buf, self.bucket, self.key, nbytes=self.size)
                    self._data = memoryview(buf[:n].tobytes())
                finally:
                    pool.give(buf)
        return self._data

    def readinto(self, b) -> int:
        data = self._load()
        n = min(len(b), len(data) - self._pos)
        memoryview(b).cast("B")[:n] = data[self._pos : self._pos + n]
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._load()
        end = len(data) if size is None or size < 0 else min(len(data), self._pos + size)
        out = bytes(data[self._pos : end])
        self._pos = end
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


def _identity(r: S3Reader) -> S3Reader:
    return r


class _Listing:
    def __init__(self, url: str, transform: Callable[[S3Reader], Any], client: Optional[Client], kw: Dict[str, Any]):
        if "s3" in kw:
            # A front end cannot follow a DataLoader's workers into their
            # processes, and hipobj.Boto3 has no listing: each worker
            # connects from the endpoint arguments.
            raise error("hipObjInvalidValue", "the datasets take the endpoint arguments, not s3=")
        self.url = url
        self.bucket, self.prefix = parse_s3(url)
        self.transform = transform
        self._client = client
        self._kw = kw
        self._objects: Optional[List[Dict[str, Any]]] = None

    def _conn(self):
        # Looked up per process: a DataLoader worker opens its own NIC.
        return connect(client=self._client, **self._kw)

    def objects(self) -> List[Dict[str, Any]]:
        if self._objects is None:
            found, _ = self._conn().s3._s3.list_objects(self.bucket, self.prefix, None)
            self._objects = sorted((o for o in found if not o["key"].endswith("/")), key=lambda o: o["key"])
        return self._objects

    def reader(self, o: Dict[str, Any]) -> S3Reader:
        return S3Reader(self._conn(), self.bucket, o["key"], int(o["size"]))

    def __getstate__(self):
        # Workers re-open the connection; the listing travels.
        d = dict(self.__dict__)
        if self._client is not None:
            d["_client"] = None
        return d


class S3MapDataset(_Listing, torch.utils.data.Dataset):
    """``dataset[i]`` is ``transform(S3Reader)`` of the i-th object (by key) under ``url``."""

    @classmethod
    def from_prefix(cls, url: str, *, transform: Callable[[S3Reader], Any] = _identity, client: Optional[Client] = None, **kw: Any) -> "S3MapDataset":
        return cls(url, transform, client, kw)

    def __len__(self) -> int:
        return len(self.objects())

    def __getitem__(self, i: int) -> Any:
        return self.transform(self.reader(self.objects()[i]))


class S3IterableDataset(_Listing, torch.utils.data.IterableDataset):
    """Iterates ``transform(S3Reader)`` over the objects under ``url``; under a
    ``DataLoader`` with workers each worker takes every n-th object."""

    @classmethod
    def from_prefix(cls, url: str, *, transform: Callable[[S3Reader], Any] = _identity, client: Optional[Client] = None, **kw: Any) -> "S3IterableDataset":
        return cls(url, transform, client, kw)

    def __iter__(self) -> Iterator[Any]:
        objs = self.objects()
        info = torch.utils.data.get_worker_info()
        if info is not None:
            objs = objs[info.id :: info.num_workers]
        for o in objs:
            yield self.transform(self.reader(o))
