"""hipobj: GPU-direct S3 over RDMA for Python.

The S3 server moves an object's bytes with one-sided RDMA straight into
(GET) or out of (PUT) memory the program registered: NumPy arrays and any
buffer-protocol object, DLPack producers, ``__cuda_array_interface__``
objects. The S3 request itself goes through boto3 (:class:`Boto3`) or the
built-in client (:class:`S3`), carrying hipObject's token.

    import hipobj, numpy as np
    client = hipobj.Client(nic_hint="softroce0")
    s3 = hipobj.S3(client, "http://127.0.0.1:9000", "key", "secret")
    buf = np.empty(1 << 20, dtype=np.uint8)
    n = s3.get_into(buf, "bucket", "object")

See docs/python.md.
"""

from ._native import MAX_BUFFER_SIZE, MAX_BUFFERS
from ._errors import CODES, AccessDenied, HipObjError, NoSuchBucket, NoSuchKey, RdmaFallbackWarning
from ._client import S3, Client
from ._boto3 import Boto3

__all__ = [
    "AccessDenied",
    "Boto3",
    "CODES",
    "Client",
    "HipObjError",
    "MAX_BUFFERS",
    "MAX_BUFFER_SIZE",
    "NoSuchBucket",
    "NoSuchKey",
    "RdmaFallbackWarning",
    "S3",
]
__version__ = "0.1.0"

# The fsspec protocol `hipobj://`: the installed package declares it as an
# fsspec entry point; a program that imported fsspec already (or runs
# hipobj from a source tree) gets it registered here, by name, so that
# neither fsspec nor the filesystem is imported by `import hipobj`.
import sys as _sys

if "fsspec" in _sys.modules:
    try:
        _sys.modules["fsspec"].register_implementation("hipobj", "hipobj._fsspec.HipObjFileSystem", clobber=False)
    except (ValueError, AttributeError):
        pass  # already registered (the entry point), or an fsspec without the call
del _sys
