"""Type stubs for the hipobj package (see docs/python.md)."""

from typing import Any, Dict, Optional, Union
import collections.abc

MAX_BUFFERS: int
MAX_BUFFER_SIZE: int
CODES: Dict[str, int]
__version__: str

class HipObjError(Exception):
    """A hipObject failure."""

    code: int
    """The hipObjOpError_t value (1 = hipObjInvalidValue ... 12 = hipObjBusy)."""
    name: str
    """Its C name, e.g. ``"hipObjS3Error"``."""
    status: Optional[int]
    """The S3 response's HTTP status, when the built-in client saw one."""
    s3_code: Optional[str]
    """The S3 error code (``NoSuchKey``, ``AccessDenied`` ...), when the server sent one."""
    declined: bool
    """The server declined RDMA and falling back to plain HTTP was off."""

class NoSuchKey(HipObjError, FileNotFoundError): ...
class NoSuchBucket(HipObjError, FileNotFoundError): ...
class AccessDenied(HipObjError, PermissionError): ...

class RdmaFallbackWarning(UserWarning): ...

# Memory a transfer can use: any buffer-protocol object (NumPy arrays,
# bytearray, memoryview, mmap), a DLPack producer, or an object with
# __cuda_array_interface__.
Memory = Any
# A GPU stream: an int handle (hipStream_t / CUstream, 0 the default
# stream), a torch.cuda.Stream, a CuPy stream, or an object with
# __cuda_stream__.
Stream = Any

class RegistrationCache:
    registrations: int
    hits: int
    releases: int
    def __len__(self) -> int: ...
    def clear(self) -> None: ...
    def collect(self) -> int:
        """Releases registrations whose owner nothing but the registration holds."""

class Client:
    cache: RegistrationCache
    def __init__(self, nic_hint: Optional[str] = None, gpu_device: Optional[int] = None, *, cache_limit: int = 128) -> None: ...
    @property
    def device(self) -> str: ...
    @property
    def connections(self) -> int: ...
    def registered_count(self) -> int: ...
    def register(self, obj: Memory) -> None: ...
    def release(self, obj: Memory) -> bool: ...
    def register_module(self, module: Any) -> int:
        """Registers every parameter's and buffer's storage of a torch.nn.Module."""
    def close(self) -> None: ...

class _Front:
    client: Client
    multipart_threshold: int
    """put_from of more bytes than this is a multipart upload."""
    part_size: int
    """The multipart upload's part size (at least 5 MiB)."""
    def get_into(self, buf: Memory, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None, range: Optional[str] = None, stream: Stream = None) -> int: ...
    def put_from(self, buf: Memory, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None, part_size: Optional[int] = None, in_flight: int = 4, stream: Stream = None) -> int: ...
    def head(self, bucket: str, key: str) -> Dict[str, Any]:
        """``{"size", "etag", "mtime"}``; a missing key raises NoSuchKey."""
    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        """PutObject of ``data`` in the HTTP body (small objects, metadata)."""
    def get_bytes(self, bucket: str, key: str, range: Optional[str] = None) -> bytes:
        """GetObject of the object (or ``range``) in the HTTP body."""
    async def get_into_async(self, buf: Memory, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None, range: Optional[str] = None, stream: Stream = None) -> int: ...
    async def put_from_async(self, buf: Memory, bucket: str, key: str, *, offset: int = 0, nbytes: Optional[int] = None, part_size: Optional[int] = None, in_flight: int = 4, stream: Stream = None) -> int: ...

class S3(_Front):
    last: Optional[Dict[str, Any]]
    def __init__(self, client: Client, endpoint: str, access_key: Optional[str] = None, secret_key: Optional[str] = None, *, session_token: Optional[str] = None, profile: Optional[str] = None, region: Optional[str] = None, fallback: bool = True, multipart_threshold: int = 64 << 20, part_size: int = 64 << 20, ca_bundle: Optional[str] = None) -> None: ...
    def upload_part_from(self, buf: Memory, bucket: str, key: str, upload_id: str, number: int, *, offset: int = 0, nbytes: Optional[int] = None) -> Dict[str, Any]: ...

class Boto3(_Front):
    s3: Any
    fallback: bool
    last_etag: Optional[str]
    def __init__(self, client: Client, s3: Any, *, fallback: bool = True, multipart_threshold: int = 64 << 20, part_size: int = 64 << 20, extra_args: Optional[dict] = None) -> None: ...
    def upload_part_from(self, buf: Memory, bucket: str, key: str, upload_id: str, number: int, *, offset: int = 0, nbytes: Optional[int] = None) -> int: ...
