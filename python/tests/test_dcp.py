"""torch.distributed.checkpoint through hipobj.torch's storage writer and
reader: byte-exact round trips in one process and in two (gloo), with the
server's counters showing the tensor bytes moved by RDMA."""

import os
import warnings

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

import hipobj  # noqa: E402
import hipobj.torch as ht  # noqa: E402
from conftest import AK, SK, torch_conn_kw  # noqa: E402


def state(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {
        "big": torch.randn(3000, 1024, generator=g),  # 12 MiB: its own object
        "bf16": torch.randn(513, 77, generator=g).to(torch.bfloat16),
        "ints": torch.randint(-1000, 1000, (4099,), generator=g, dtype=torch.int64),
        "small": [torch.randn(7, generator=g), torch.tensor(3.5)],
        "flag": torch.tensor([True, False, True]),
        "step": 17,
        "name": "run-α",
    }


def zeros_like_state(s):
    out = {}
    for k, v in s.items():
        if isinstance(v, torch.Tensor):
            out[k] = torch.zeros_like(v)
        elif isinstance(v, list):
            out[k] = [torch.zeros_like(t) for t in v]
        else:
            out[k] = None
    return out


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.contiguous().reshape(-1).view(torch.uint8).equal(b.contiguous().reshape(-1).view(torch.uint8))


def tensor_bytes(s):
    n = 0
    for v in s.values():
        for t in v if isinstance(v, list) else [v]:
            if isinstance(t, torch.Tensor):
                n += t.numel() * t.element_size()
    return n


def test_one_process_round_trip_by_rdma(rdma_server, bucket, counted):
    kw = torch_conn_kw(rdma_server)
    src = state(1)
    path = f"s3://{bucket}/dcp/one"
    with warnings.catch_warnings():
        warnings.simplefilter("error", hipobj.RdmaFallbackWarning)
        with counted() as save:
            dcp.save(src, storage_writer=ht.S3RdmaStorageWriter(path, direct_bytes=8 << 20, **kw))
        dst = zeros_like_state(src)
        reader = ht.S3RdmaStorageReader(path, **kw)
        with counted() as load:
            dcp.load(dst, storage_reader=reader)
    for k in ("big", "bf16", "ints", "flag"):
        assert same_bytes(src[k], dst[k]), k
    assert all(same_bytes(a, b) for a, b in zip(src["small"], dst["small"]))
    assert dst["step"] == 17 and dst["name"] == "run-α"
    n = tensor_bytes(src)
    # Every tensor byte crossed by RDMA; the only plain requests were the
    # metadata object (PUT on save, GET on load).
    assert save["rdma_bytes_read_total"] >= n and save["rdma_declines_total"] == 0
    assert load["rdma_bytes_written_total"] >= n and load["rdma_declines_total"] == 0
    assert save.plain == 1, save.d
    assert load.plain == 1, load.d
    # The 12 MiB tensor came straight into its destination; the rest in
    # coalesced runs (fewer GETs than pieces).
    assert reader.stats["direct"] >= 1
    assert reader.stats["runs"] < reader.stats["pieces"], reader.stats


def test_repeated_loads_reuse_the_registrations(rdma_server, bucket):
    kw = torch_conn_kw(rdma_server)
    path = f"s3://{bucket}/dcp/steps"
    src = state(2)
    dcp.save(src, storage_writer=ht.S3RdmaStorageWriter(path, **kw))
    dst = zeros_like_state(src)
    conn = ht.connect(**kw)
    dcp.load(dst, storage_reader=ht.S3RdmaStorageReader(path, **kw))
    regs = conn.client.cache.registrations
    made = conn.staging.made
    for _ in range(2):
        dcp.load(dst, storage_reader=ht.S3RdmaStorageReader(path, **kw))
    assert conn.client.cache.registrations == regs and conn.staging.made == made
    assert same_bytes(src["big"], dst["big"])


def test_a_missing_checkpoint_says_no_such_key(rdma_server, bucket):
    # torch wraps what the reader raised (hipobj.NoSuchKey) in its own exception.
    kw = torch_conn_kw(rdma_server)
    with pytest.raises(BaseException, match="NoSuchKey"):  # CheckpointException is a BaseException
        dcp.load({"x": torch.zeros(3)}, storage_reader=ht.S3RdmaStorageReader(f"s3://{bucket}/dcp/none", **kw))


WORKER = r"""
import os, sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard, Replicate
import hipobj.torch as ht

rank, world, init, endpoint, ak, sk, path = int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
mesh = init_device_mesh("cpu", (world,))
kw = dict(endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk, nic_hint="softroce0", fallback=False)
g = torch.Generator().manual_seed(7)
full = torch.randn(1024, 515, generator=g)
full2 = torch.arange(6000, dtype=torch.int32)
sd = {"w": distribute_tensor(full, mesh, [Shard(0)]), "b": distribute_tensor(full2, mesh, [Shard(0)]), "r": distribute_tensor(torch.ones(9), mesh, [Replicate()])}
dcp.save(sd, storage_writer=ht.S3RdmaStorageWriter(path, **kw))
# Load into a different sharding (dim 1), so that each rank reads pieces of
# the other rank's objects: ranged reads.
dst = {"w": distribute_tensor(torch.zeros(1024, 515), mesh, [Shard(1)]), "b": distribute_tensor(torch.zeros(6000, dtype=torch.int32), mesh, [Shard(0)]), "r": distribute_tensor(torch.zeros(9), mesh, [Replicate()])}
dcp.load(dst, storage_reader=ht.S3RdmaStorageReader(path, **kw))
ok = torch.equal(dst["w"].full_tensor(), full) and torch.equal(dst["b"].full_tensor(), full2) and torch.equal(dst["r"].full_tensor(), torch.ones(9))
print(f"rank {rank} ok={ok}", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 3)
"""


def test_two_processes_with_gloo(rdma_server, bucket, tmp_path, counted):
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    init = f"file://{tmp_path}/rendezvous"
    path = f"s3://{bucket}/dcp/two"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    with counted() as c:
        procs = [
            subprocess.Popen([sys.executable, str(script), str(r), "2", init, rdma_server.endpoint, AK, SK, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for r in range(2)
        ]
        outs = [p.communicate(timeout=600) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}: rc {p.returncode}\n{out}\n{err[-3000:]}"
        assert f"rank {r} ok=True" in out
    n = (1024 * 515 * 4) + 6000 * 4
    assert c["rdma_bytes_read_total"] >= n and c["rdma_bytes_written_total"] >= n
    assert c["rdma_declines_total"] == 0
