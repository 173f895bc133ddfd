"""safetensors files straight from S3 into tensors, by RDMA.

The header comes with one small ranged GET (two when it is larger than
``header_guess``); the data section is cut into runs of adjacent tensors of
at most ``run_bytes`` each, and the server writes each run with one RDMA
GET straight into a buffer that the run's tensors are views of: no copy
after the bytes land (a tensor whose offset does not suit its dtype's
alignment is the one exception, copied out once). On the host those
buffers come from the process's pool of host blocks (``_host_blocks.py``),
so a repeated load reuses memory already faulted and registered. Sharded
models load through their ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Optional, Tuple

import torch

from .._client import Client
from .._errors import error
from .._host_blocks import HOST_BLOCKS
from .._shared import DEFAULT_IN_FLIGHT, Piece, connect, parse_s3, runs

__all__ = ["load_safetensors", "DTYPES"]

# safetensors' dtype names (the format's spec) and torch's types.
DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "C64": torch.complex64,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _attr):
        DTYPES[_name] = getattr(torch, _attr)

_MAX_HEADER = 100 << 20  # what the safetensors format allows


def _header(conn, bucket: str, key: str, guess: int) -> Tuple[Dict[str, Any], int]:
    """The parsed header and where the data section starts."""
    head = conn.s3.get_bytes(bucket, key, f"bytes=0-{guess - 1}")
    if len(head) < 8:
        raise error("hipObjInvalidValue", f"s3://{bucket}/{key} is not a safetensors file (only {len(head)} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > _MAX_HEADER:
        raise error("hipObjInvalidValue", f"s3://{bucket}/{key}: a {n}-byte safetensors header is over the format's limit")
    if 8 + n > len(head) == guess:  # the object goes on: fetch the header's rest
        head += conn.s3.get_bytes(bucket, key, f"bytes={len(head)}-{8 + n - 1}")
    if 8 + n > len(head):
        raise error("hipObjInvalidValue", f"s3://{bucket}/{key}: the file ends inside its header")
    try:
        hdr = json.loads(head[8 : 8 + n])
    except ValueError as e:
        raise error("hipObjInvalidValue", f"s3://{bucket}/{key}: the header is not JSON: {e}") from e
    if not isinstance(hdr, dict):
        raise error("hipObjInvalidValue", f"s3://{bucket}/{key}: the header is not a JSON object")
    return hdr, 8 + n


def _entries(hdr: Dict[str, Any], where: str) -> List[Tuple[str, torch.dtype, List[int], int, int]]:
    out = []
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        try:
            dtype = DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise error("hipObjInvalidValue", f"{where}: tensor {name!r} has a malformed entry ({e})") from e
        count = 1
        for s in shape:
            count *= s
        if begin < 0 or end < begin or end - begin != count * torch.empty((), dtype=dtype).element_size():
            raise error("hipObjInvalidValue", f"{where}: tensor {name!r} spans [{begin}, {end}), not its {shape} of {info['dtype']}")
        out.append((name, dtype, shape, begin, end))
    return out


def _load_file(conn, bucket: str, key: str, device: Any, run_bytes: int, in_flight: int, header_guess: int, stats: Dict[str, int]) -> Dict[str, torch.Tensor]:
    where = f"s3://{bucket}/{key}"
    hdr, data_start = _header(conn, bucket, key, header_guess)
    entries = _entries(hdr, where)
    out: Dict[str, torch.Tensor] = {}
    pieces = []
    for name, dtype, shape, begin, end in entries:
        if end == begin:
            out[name] = torch.empty(shape, dtype=dtype, device=device)
        else:
            pieces.append(Piece(begin, end - begin, (name, dtype, shape)))
    # Runs small enough that `in_flight` GETs share the file (at least 1 MiB
    # each, at most `run_bytes`).
    total = sum(p.length for p in pieces)
    limit = max(min(run_bytes, -(-total // max(in_flight, 1))), 1 << 20)
    groups = runs(pieces, limit)
    if device.type == "cpu":
        # Host memory from the process's pool (_host_blocks.py): a block
        # that an earlier load's tensors no longer use comes back faulted
        # and registered. The GET targets the array under each tensor,
        # whose registration is keyed by the block's mapping and so
        # outlives this load's tensors; `dests` goes with this frame.
        taken = [HOST_BLOCKS.take(end - start) for start, end, _ in groups]
        bufs = [t for t, _ in taken]
        dests: List[Any] = [a for _, a in taken]
    else:
        bufs = [torch.empty(end - start, dtype=torch.uint8, device=device) for start, end, _ in groups]
        dests = list(bufs)

    def fetch(i: int) -> None:
        start, end, _ = groups[i]
        rng = f"bytes={data_start + start}-{data_start + end - 1}"
        conn.s3.get_into(dests[i], bucket, key, nbytes=end - start, range=rng)

    pool = conn.executor()
    futures = []
    for i in range(len(groups)):
        futures.append(pool.submit(fetch, i))
        if len(futures) >= in_flight:
            futures.pop(0).result()
    for f in futures:
        f.result()
    stats["gets"] += len(groups)
    stats["bytes"] += sum(e - s for s, e, _ in groups)
    for buf, (start, _, ps) in zip(bufs, groups):
        for p in ps:
            name, dtype, shape = p.what
            at = p.offset - start
            raw = buf[at : at + p.length]
            try:
                t = raw.view(dtype).view(shape)
            except RuntimeError:
                # The offset does not suit the dtype's alignment.
                t = raw.clone().view(dtype).view(shape)
                stats["copied"] += 1
            out[name] = t
    return out


def load_safetensors(
    url: str,
    device: Any = "cpu",
    *,
    client: Optional[Client] = None,
    run_bytes: int = 256 << 20,
    in_flight: int = DEFAULT_IN_FLIGHT,
    header_guess: int = 64 << 10,
    stats: Optional[Dict[str, int]] = None,
    **kw: Any,
) -> Dict[str, torch.Tensor]:
    """``{name: tensor}`` of the safetensors file at ``url``
    (``s3://bucket/model.safetensors``), or of every shard a
    ``....safetensors.index.json`` names, on ``device``.

    ``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``profile``, ``region_name``, ``nic_hint`` and
    ``fallback`` as for the DCP storage.
    Tensors of one run share one storage; on the host it is a block of the
    process's pool, which takes the block back when they have all died
    (``release_host_memory()``). ``stats``, when given, is filled
    with ``gets`` (RDMA GETs made), ``bytes`` and ``copied`` (tensors
    copied because their offset did not suit their dtype).
    """
    conn = connect(client=client, **kw)
    st = stats if stats is not None else {}
    for k in ("gets", "bytes", "copied"):
        st.setdefault(k, 0)
    dev = torch.device(device)
    bucket, key = parse_s3(url)
    if key.endswith(".json"):
        index = json.loads(conn.s3.get_bytes(bucket, key))
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise error("hipObjInvalidValue", f"s3://{bucket}/{key} has no weight_map")
        base = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        out: Dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            got = _load_file(conn, bucket, base + shard, dev, run_bytes, in_flight, header_guess, st)
            out.update({n: t for n, t in got.items() if weight_map.get(n) == shard})
        missing = set(weight_map) - set(out)
        if missing:
            raise error("hipObjInvalidValue", f"s3://{bucket}/{key}: the shards lack {sorted(missing)[:5]}")
        return out
    return _load_file(conn, bucket, key, dev, run_bytes, in_flight, header_guess, st)
