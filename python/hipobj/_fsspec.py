"""An fsspec filesystem, protocol ``hipobj``: S3 objects whose bytes move by
RDMA (needs fsspec; docs/python.md).

    import fsspec
    with fsspec.open("hipobj://bucket/key", "rb", endpoint_url=..., key=..., secret=...) as f:
        data = f.read()

Reads (``cat_file``, ranged ``cat_file``, file objects) are RDMA GETs into
registered staging buffers; writes (``pipe_file``, file objects on close)
are RDMA PUTs from the written bytes (an empty object goes over plain HTTP,
which RDMA cannot carry). Listing, info, delete and copy are plain S3
calls. Directories are key prefixes, as in s3fs: they exist while an
object lies below them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from ._errors import NoSuchKey
from ._shared import connect as _connect

__all__ = ["HipObjFileSystem", "register"]


def _info_file(bucket: str, o: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "name": f"{bucket}/{o['key']}",
        "size": int(o["size"]),
        "type": "file",
        "ETag": o.get("etag"),
        "mtime": o.get("mtime"),
    }


def _info_dir(name: str) -> Dict[str, Any]:
    return {"name": name.rstrip("/"), "size": 0, "type": "directory"}


class HipObjFileSystem(AbstractFileSystem):
    """``hipobj://bucket/key`` paths on one S3 endpoint.

    ``endpoint_url``, ``key`` / ``secret`` / ``token`` (or
    ``aws_access_key_id`` / ``aws_secret_access_key`` /
    ``aws_session_token``), else ``profile`` or the AWS SDK's default chain
    (as ``hipobj.S3``), ``region_name``, ``nic_hint``, ``fallback`` (plain
    HTTP with the package's warning when the server declines RDMA).
    """

    protocol = ("hipobj",)
    root_marker = ""
    cachable = True

    def __init__(
        self,
        endpoint_url: Optional[str] = None,
        key: Optional[str] = None,
        secret: Optional[str] = None,
        *,
        region_name: Optional[str] = None,
        nic_hint: Optional[str] = None,
        fallback: bool = True,
        client: Any = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        token: Optional[str] = None,
        aws_session_token: Optional[str] = None,
        profile: Optional[str] = None,
        **kw: Any,
    ):
        super().__init__(**kw)
        self.conn = _connect(
            client=client,
            endpoint_url=endpoint_url,
            aws_access_key_id=key or aws_access_key_id,
            aws_secret_access_key=secret or aws_secret_access_key,
            aws_session_token=token or aws_session_token,
            profile=profile,
            region_name=region_name,
            nic_hint=nic_hint,
            fallback=fallback,
        )
        self._s3 = self.conn.s3._s3

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for p in ("hipobj://", "hipobj::", "s3://"):
            if path.startswith(p):
                path = path[len(p):]
        return path.rstrip("/")

    @staticmethod
    def _split(path: str):
        path = HipObjFileSystem._strip_protocol(path)
        bucket, _, key = path.partition("/")
        return bucket, key

    # Listing and metadata: plain S3 calls.

    def ls(self, path, detail=True, **kwargs):
        bucket, key = self._split(path)
        if not bucket:
            raise NotImplementedError("listing the buckets of an endpoint")
        prefix = key + "/" if key else ""
        objects, prefixes = self._s3.list_objects(bucket, prefix, "/")
        out = [_info_file(bucket, o) for o in objects if o["key"] != prefix]
        out += [_info_dir(f"{bucket}/{p}") for p in prefixes]
        if not out and key:
            try:
                out = [self._head(bucket, key)]
            except FileNotFoundError:
                raise FileNotFoundError(path) from None
        out.sort(key=lambda i: i["name"])
        return out if detail else [i["name"] for i in out]

    def _head(self, bucket: str, key: str) -> Dict[str, Any]:
        h = self._s3.head_object(bucket, key)
        return _info_file(bucket, {"key": key, "size": h["size"], "etag": h["etag"], "mtime": h["mtime"]})

    def info(self, path, **kwargs):
        bucket, key = self._split(path)
        if not key:
            self._s3.list_objects(bucket, ".hipobj-no-such-prefix/", None)  # NoSuchBucket if it is not there
            return _info_dir(bucket)
        try:
            return self._head(bucket, key)
        except NoSuchKey:
            pass
        objects, prefixes = self._s3.list_objects(bucket, key + "/", "/")
        if objects or prefixes:
            return _info_dir(f"{bucket}/{key}")
        raise FileNotFoundError(path)

    def modified(self, path):
        import datetime

        mtime = self.info(path).get("mtime")
        if mtime is None:
            raise IsADirectoryError(path)
        return datetime.datetime.fromtimestamp(mtime, tz=datetime.timezone.utc)

    def mkdir(self, path, create_parents=True, **kwargs):
        bucket, key = self._split(path)
        if not key:
            try:
                self.info(bucket)
            except FileNotFoundError:
                self._s3.create_bucket(bucket)
        # A directory below a bucket exists once an object lies in it.

    def makedirs(self, path, exist_ok=False):
        self.mkdir(path)

    def rmdir(self, path):
        pass  # prefixes vanish with their last object

    def rm_file(self, path):
        bucket, key = self._split(path)
        if key:
            self._s3.delete_object(bucket, key)

    def _rm(self, path):
        self.rm_file(path)

    def cp_file(self, path1, path2, **kwargs):
        b1, k1 = self._split(path1)
        b2, k2 = self._split(path2)
        if self.isdir(path1):
            return  # prefixes are not objects
        self._s3.copy_object(b2, k2, b1, k1)

    # Bytes: RDMA.

    def cat_file(self, path, start=None, end=None, **kwargs):
        bucket, key = self._split(path)
        size = None
        if start is None or start < 0 or end is None or end < 0:
            size = self._head(bucket, key)["size"]
        a = 0 if start is None else (start if start >= 0 else max(size + start, 0))
        b = size if end is None else (end if end >= 0 else size + end)
        return self._read_range(bucket, key, a, b, size)

    def _read_range(self, bucket: str, key: str, a: int, b: int, size: Optional[int]) -> bytes:
        """The bytes ``[a, b)`` of an object by RDMA (fewer where it ends first)."""
        if size is None:
            size = self._head(bucket, key)["size"]
        b = min(b, size)
        if b <= a:
            return b""
        n = b - a
        pool = self.conn.staging
        buf = pool.take(n)
        try:
            self.conn.s3.get_into(buf, bucket, key, nbytes=n, range=f"bytes={a}-{b - 1}")
            return buf[:n].tobytes()
        finally:
            pool.give(buf)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        bucket, key = self._split(path)
        if mode == "create" and self.exists(path):
            raise FileExistsError(path)  # checked, then written, as for open(..., "xb")
        data = memoryview(value).cast("B")
        n = data.nbytes
        if n == 0:
            self._s3.put_bytes(bucket, key, b"")
            return
        if n > self.conn.s3.multipart_threshold:
            # Large: the server reads the caller's memory itself.
            self.conn.s3.put_from(data, bucket, key)
            return
        # Small: copied into a registered staging buffer, so that no
        # registration is made per write.
        pool = self.conn.staging
        buf = pool.take(n)
        try:
            buf[:n] = data
            self.conn.s3.put_from(buf, bucket, key, nbytes=n)
        finally:
            pool.give(buf)

    def touch(self, path, truncate=True, **kwargs):
        if truncate or not self.exists(path):
            self.pipe_file(path, b"")

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if "x" in mode and self.exists(path):
            # Checked, then written: two writers racing may both pass.
            raise FileExistsError(path)
        return HipObjFile(self, path, mode, block_size=block_size or self.blocksize, autocommit=autocommit, cache_options=cache_options, **kwargs)


class HipObjFile(AbstractBufferedFile):
    """A file over one object: reads fetch ranges by RDMA into registered
    staging memory; a written file is one PUT (multipart above the
    client's threshold) when it is closed."""

    def _fetch_range(self, start, end):
        bucket, key = self.fs._split(self.path)
        return self.fs._read_range(bucket, key, start, end, self.size)

    def _initiate_upload(self):
        pass

    def _upload_chunk(self, final=False):
        if not final:
            return False  # keep buffering: the object is sent whole
        self.fs.pipe_file(self.path, self.buffer.getbuffer())
        return True


def register() -> None:
    """Registers the ``hipobj`` protocol with fsspec (the package's entry
    point does this for an installed wheel)."""
    import fsspec

    fsspec.register_implementation("hipobj", HipObjFileSystem, clobber=True)
