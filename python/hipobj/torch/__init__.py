"""PyTorch integrations of hipObject (needs torch; docs/python.md):

- ``S3RdmaStorageWriter`` / ``S3RdmaStorageReader``: torch.distributed.checkpoint storage
- ``load_safetensors``: safetensors files (and sharded models) into tensors
- ``release_host_memory``: gives back the host blocks kept for later loads
- ``S3MapDataset`` / ``S3IterableDataset``: datasets over an S3 prefix
- ``connect``: the process's shared connection to an endpoint

Every tensor's bytes move by RDMA between registered memory and the server.
"""

from .._host_blocks import release as release_host_memory
from .._shared import Connection, connect
from ._datasets import S3IterableDataset, S3MapDataset, S3Reader
from ._dcp import S3RdmaStorageReader, S3RdmaStorageWriter
from ._safetensors import load_safetensors

__all__ = [
    "Connection",
    "S3IterableDataset",
    "S3MapDataset",
    "S3RdmaStorageReader",
    "S3RdmaStorageWriter",
    "S3Reader",
    "connect",
    "load_safetensors",
    "release_host_memory",
]
