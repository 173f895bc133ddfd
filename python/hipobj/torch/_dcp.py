"""torch.distributed.checkpoint storage over hipObject: every tensor's
bytes move by RDMA between registered memory and the S3 server.

Layout under ``s3://bucket/prefix``: one ``.metadata`` object (torch's
``Metadata``, pickled, as FileSystemWriter writes it) and data objects
``__{rank}_{n}.distcp`` holding each item's raw bytes (C order, the
tensor's dtype) back to back; the metadata's ``storage_data`` maps each
item to ``(object, offset, length)``.

Save: a large contiguous CPU tensor is an object of its own, PUT straight
from the tensor's memory (its storage's registration is cached across
steps); smaller items are copied into a registered staging buffer, one
object per buffer. Load: the pieces a rank needs are ranged GETs; a whole
chunk of at least ``direct_bytes`` whose destination is a contiguous CPU
tensor is written by the server straight into that tensor, and adjacent
smaller pieces share one GET into a staging buffer and are copied out.
Several transfers are in flight at once (``in_flight``).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import uuid
from concurrent.futures import Future as _PyFuture
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from .._client import Client
from .._shared import DEFAULT_IN_FLIGHT, DEFAULT_RUN_BYTES, Piece, connect, join_key, parse_s3, runs

__all__ = ["S3RdmaStorageReader", "S3RdmaStorageWriter"]

_METADATA = ".metadata"
_SUFFIX = ".distcp"
# Items in a packed object start at multiples of this, so that each can be
# viewed in its dtype where it lies.
_ALIGN = 64
_GAP = 64 << 10


@dataclass(frozen=True)
class _Stored:
    """Where one item's bytes are: ``length`` bytes at ``offset`` of ``relative_path``."""

    relative_path: str
    offset: int
    length: int


@dataclass(frozen=True)
class _Prefix:
    prefix: str


def _metadata_name(rank: Optional[int]) -> str:
    return _METADATA if rank is None else f"__{rank}{_METADATA}"


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat uint8 view."""
    return t.reshape(-1).view(torch.uint8)


class _Base:
    def __init__(self, path: Any, client: Optional[Client], in_flight: int, kw: Dict[str, Any]):
        self._conn_kw = dict(kw)
        self._client = client
        self._conn = connect(client=client, **kw)
        self.in_flight = max(1, in_flight)
        self._set_path(path)

    def _set_path(self, path: Any) -> None:
        self.path = str(path)
        self.bucket, self.prefix = parse_s3(self.path)

    def _key(self, name: str) -> str:
        return join_key(self.prefix, name)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        try:
            parse_s3(checkpoint_id)
            return True
        except Exception:
            return False

    @property
    def checkpoint_id(self) -> str:
        return self.path

    def _run_all(self, jobs) -> List[Any]:
        """Runs ``jobs`` (callables) on the connection's workers, at most
        ``in_flight`` at a time; returns their results in order, raising the
        first failure after every started job has ended."""
        pool = self._conn.executor()
        results: List[Any] = [None] * len(jobs)
        pending: Dict[_PyFuture, int] = {}
        nxt = 0
        failure: Optional[BaseException] = None
        while nxt < len(jobs) or pending:
            while failure is None and nxt < len(jobs) and len(pending) < self.in_flight:
                pending[pool.submit(jobs[nxt])] = nxt
                nxt += 1
            if not pending:
                break
            done, _ = wait(list(pending), return_when="FIRST_COMPLETED")
            for f in done:
                i = pending.pop(f)
                try:
                    results[i] = f.result()
                except BaseException as e:  # noqa: BLE001 - re-raised below
                    failure = failure or e
            if failure is not None and nxt < len(jobs):
                nxt = len(jobs)  # start nothing more
        if failure is not None:
            raise failure
        return results


class S3RdmaStorageWriter(_Base, StorageWriter):
    """A ``StorageWriter`` for ``dcp.save`` into ``s3://bucket/prefix``.

    ``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token`` and ``region_name`` as boto3 takes them, or
    ``profile``; credentials not given come from the AWS SDK's default chain
    (environment, ``AWS_PROFILE``, SSO, web identity, container, instance
    metadata), and temporary ones are renewed during the save; ``nic_hint``
    for the RDMA device, ``fallback`` (plain HTTP with an
    ``RdmaFallbackWarning`` when the server declines RDMA; False: an error).
    ``direct_bytes``: a contiguous CPU tensor at least this large is PUT
    from its own memory; ``object_bytes``: the size of the staging objects
    that carry the rest; ``in_flight``: transfers at once. ``s3``: a
    ``hipobj.S3`` or ``hipobj.Boto3`` to send every request through,
    instead of the endpoint arguments (it brings its client, endpoint,
    credentials and retries).
    """

    def __init__(
        self,
        path: Any,
        *,
        client: Optional[Client] = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        direct_bytes: int = 16 << 20,
        object_bytes: int = DEFAULT_RUN_BYTES,
        **kw: Any,
    ):
        _Base.__init__(self, path, client, in_flight, kw)
        self.direct_bytes = direct_bytes
        self.object_bytes = object_bytes
        self.save_id = str(uuid.uuid4())
        self.rank: Optional[int] = None
        self.use_collectives = True
        self.is_coordinator = False

    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id:
            self._set_path(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if self.rank is not None and not self.use_collectives:
            plan = dataclasses.replace(plan, storage_data=_Prefix(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        return [
            dataclasses.replace(p, storage_data=_Prefix(f"__{i}_")) if p.storage_data is None else p
            for i, p in enumerate(plans)
        ]

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        prefix = plan.storage_data.prefix if plan.storage_data is not None else "__0_"
        names = (f"{prefix}{n}{_SUFFIX}" for n in range(1 << 62))
        jobs = []
        packed: List[Tuple[WriteItem, Any, int]] = []
        packed_bytes = 0
        resolved = [(item, planner.resolve_data(item)) for item in plan.items]
        # A storage that several items share is packed, not PUT from its
        # own memory: a transfer locks its storage (docs/python.md), and
        # the packing copies read the other items while it runs.
        users: Dict[int, int] = {}
        for item, data in resolved:
            if isinstance(data, torch.Tensor):
                k = data.untyped_storage()._cdata
                users[k] = users.get(k, 0) + 1

        def flush():
            nonlocal packed, packed_bytes
            if packed:
                jobs.append(self._packed_job(next(names), packed, packed_bytes))
                packed, packed_bytes = [], 0

        for item, data in resolved:
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getbuffer() if isinstance(data, io.BytesIO) else memoryview(bytes(data))
                n = raw.nbytes
            else:
                t = data.detach()
                n = t.numel() * t.element_size()
                alone = users.get(t.untyped_storage()._cdata, 0) == 1
                if alone and n >= self.direct_bytes and t.device.type == "cpu" and t.is_contiguous() and not t.requires_grad:
                    jobs.append(self._direct_job(next(names), item, t, n))
                    continue
                raw = t
            if packed and packed_bytes + n > self.object_bytes:
                flush()
            packed.append((item, raw, n))
            packed_bytes += -(-n // _ALIGN) * _ALIGN
        flush()
        results: List[WriteResult] = [r for group in self._run_all(jobs) for r in group]
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def _direct_job(self, name: str, item: WriteItem, t: torch.Tensor, n: int):
        def job():
            self._conn.s3.put_from(t, self.bucket, self._key(name))
            return [WriteResult(index=item.index, size_in_bytes=n, storage_data=_Stored(name, 0, n))]

        return job

    def _packed_job(self, name: str, items: List[Tuple[WriteItem, Any, int]], total: int):
        def job():
            out: List[WriteResult] = []
            if total == 0:
                self._conn.s3.put_bytes(self.bucket, self._key(name), b"")
                return [WriteResult(index=i.index, size_in_bytes=0, storage_data=_Stored(name, 0, 0)) for i, _, _ in items]
            buf = self._conn.staging.take(total)
            try:
                flat = torch.from_numpy(buf)
                at = 0
                for item, raw, n in items:
                    if n:
                        if isinstance(raw, torch.Tensor):
                            # copy_ takes any strides and device (a GPU
                            # tensor is copied to the staging buffer here).
                            flat[at : at + n].view(raw.dtype).view(raw.shape).copy_(raw)
                        else:
                            buf[at : at + n] = memoryview(raw).cast("B")
                    out.append(WriteResult(index=item.index, size_in_bytes=n, storage_data=_Stored(name, at, n)))
                    at += -(-n // _ALIGN) * _ALIGN
                self._conn.s3.put_from(buf, self.bucket, self._key(name), nbytes=total)
            finally:
                self._conn.staging.give(buf)
            return out

        return job

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        storage: Dict[MetadataIndex, Any] = {}
        for group in results:
            for wr in group:
                storage[wr.index] = wr.storage_data
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        rank = self.rank if not self.use_collectives else None
        self._conn.s3.put_bytes(self.bucket, self._key(_metadata_name(rank)), pickle.dumps(metadata))


class S3RdmaStorageReader(_Base, StorageReader):
    """A ``StorageReader`` for ``dcp.load`` from ``s3://bucket/prefix``
    (arguments as for :class:`S3RdmaStorageWriter`; ``run_bytes``: the
    most bytes one coalesced GET carries).

    The ``.metadata`` object is unpickled, as torch's own FileSystemReader
    does: load checkpoints only from buckets you trust.
    """

    def __init__(
        self,
        path: Any,
        *,
        client: Optional[Client] = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        direct_bytes: int = 1 << 20,
        run_bytes: int = DEFAULT_RUN_BYTES,
        **kw: Any,
    ):
        _Base.__init__(self, path, client, in_flight, kw)
        self.direct_bytes = direct_bytes
        self.run_bytes = run_bytes
        self.storage_data: Dict[MetadataIndex, _Stored] = {}
        self._chunks: Dict[Tuple[str, Tuple[int, ...]], Tuple[torch.Size, torch.dtype]] = {}
        self.load_id = str(uuid.uuid4())
        self.rank: Optional[int] = None
        self.use_collectives = True
        self.stats = {"direct": 0, "runs": 0, "pieces": 0, "bytes": 0}

    def reset(self, checkpoint_id: Any = None) -> None:
        self.storage_data = {}
        self._chunks = {}
        if checkpoint_id:
            self._set_path(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        raw = self._conn.s3.get_bytes(self.bucket, self._key(_metadata_name(kwargs.get("rank"))))
        md = pickle.loads(raw)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)
        self._chunks = {}
        for fqn, md in metadata.state_dict_metadata.items():
            if isinstance(md, TensorStorageMetadata):
                for c in md.chunks:
                    self._chunks[(fqn, tuple(c.offsets))] = (c.sizes, md.properties.dtype)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def _chunk(self, req: ReadItem) -> Tuple[torch.Size, torch.dtype]:
        idx = req.storage_index
        return self._chunks[(idx.fqn, tuple(idx.offset))]

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        per_object: Dict[str, List[Piece]] = {}
        jobs = []
        for req in plan.items:
            st: _Stored = self.storage_data[req.storage_index]
            if req.type == LoadItemType.TENSOR:
                sizes, _ = self._chunk(req)
                if st.length >= self.direct_bytes and list(req.lengths) == list(sizes):
                    target = planner.resolve_tensor(req).detach()
                    if target.device.type == "cpu" and target.is_contiguous() and target.numel() * target.element_size() == st.length:
                        jobs.append(self._direct_job(req, st, target, planner))
                        continue
            per_object.setdefault(st.relative_path, []).append(Piece(st.offset, st.length, req))
        for name, pieces in per_object.items():
            # Pieces less than _GAP apart share a GET: the padding between
            # packed items, and small holes, cost less than a request.
            for start, end, ps in runs(pieces, self.run_bytes, max_gap=_GAP):
                jobs.append(self._run_job(name, start, end, ps))
        # Direct GETs land in their tensors; runs come back for copying
        # here, on the caller's thread, where the planner is called.
        # Every job has ended before anything is copied: a transfer locks its
        # tensor's storage, which another destination may share.
        for res in self._run_all(jobs):
            if res[0] == "direct":
                planner.commit_tensor(res[1], res[2])
                continue
            _, buf, start, ps = res
            try:
                for p in ps:
                    self._deliver(p.what, buf, p.offset - start, planner)
            finally:
                self._conn.staging.give(buf)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _direct_job(self, req: ReadItem, st: _Stored, target: torch.Tensor, planner: LoadPlanner):
        def job():
            rng = f"bytes={st.offset}-{st.offset + st.length - 1}"
            self._conn.s3.get_into(target, self.bucket, self._key(st.relative_path), nbytes=st.length, range=rng)
            self.stats["direct"] += 1
            self.stats["bytes"] += st.length
            return ("direct", req, target)

        return job

    def _run_job(self, name: str, start: int, end: int, ps: List[Piece]):
        def job():
            n = end - start
            buf = self._conn.staging.take(max(n, 1))
            try:
                if n:
                    self._conn.s3.get_into(buf, self.bucket, self._key(name), nbytes=n, range=f"bytes={start}-{end - 1}")
            except BaseException:
                self._conn.staging.give(buf)
                raise
            self.stats["runs"] += 1
            self.stats["pieces"] += len(ps)
            self.stats["bytes"] += n
            return ("run", buf, start, ps)

        return job

    def _deliver(self, req: ReadItem, buf, at: int, planner: LoadPlanner) -> None:
        st: _Stored = self.storage_data[req.storage_index]
        raw = buf[at : at + st.length]
        if req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(req, io.BytesIO(raw.tobytes()))
            return
        sizes, dtype = self._chunk(req)
        src = torch.from_numpy(raw).view(dtype).view(sizes) if st.length else torch.empty(sizes, dtype=dtype)
        for dim, (off, n) in enumerate(zip(req.storage_offsets, req.lengths)):
            if n < src.size(dim):
                src = src.narrow(dim, off, n)
        target = planner.resolve_tensor(req).detach()
        if target.size() != src.size():
            raise RuntimeError(f"{req.storage_index}: the checkpoint's piece is {tuple(src.size())}, the destination {tuple(target.size())}")
        target.copy_(src)
        planner.commit_tensor(req, target)
