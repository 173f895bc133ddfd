"""hipobj.torch.load_safetensors against safetensors.torch.load_file on the
same bytes: one file and a sharded model, by RDMA."""

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

import hipobj.torch as ht  # noqa: E402
from conftest import boto3_client, torch_conn_kw  # noqa: E402


def model_tensors(seed: int, n: int = 40):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(n):
        kind = i % 5
        if kind == 0:
            out[f"layer.{i}.weight"] = torch.randn(64 + i, 33, generator=g)
        elif kind == 1:
            out[f"layer.{i}.bias"] = torch.randn(65, generator=g).to(torch.float16)
        elif kind == 2:
            out[f"layer.{i}.bf"] = torch.randn(17, 3, generator=g).to(torch.bfloat16)
        elif kind == 3:
            out[f"layer.{i}.mask"] = torch.rand(13, generator=g) > 0.5  # 13 bytes: the next tensor is unaligned
        else:
            out[f"layer.{i}.idx"] = torch.randint(0, 1 << 40, (9, 2), generator=g, dtype=torch.int64)
    out["big"] = torch.randn(2048, 1024, generator=g)  # 8 MiB
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.zeros(0, 4)
    return out


def identical(a: dict, b: dict):
    assert set(a) == set(b)
    for k in a:
        x, y = a[k], b[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.contiguous().reshape(-1).view(torch.uint8).equal(y.contiguous().reshape(-1).view(torch.uint8)), k


def test_one_file_byte_identical_with_load_file(rdma_server, bucket, tmp_path, counted):
    tensors = model_tensors(1)
    local = tmp_path / "model.safetensors"
    st_torch.save_file(tensors, str(local), metadata={"format": "pt"})
    boto3_client(rdma_server.endpoint).upload_file(str(local), bucket, "st/model.safetensors")
    reference = st_torch.load_file(str(local))
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with counted() as c:
            got = ht.load_safetensors(f"s3://{bucket}/st/model.safetensors", device="cpu", stats=stats, run_bytes=4 << 20, **torch_conn_kw(rdma_server))
    identical(reference, got)
    data = sum(t.numel() * t.element_size() for t in tensors.values())
    # The header: one plain ranged GET; the tensors: a few RDMA GETs that
    # carry runs of adjacent tensors (43 tensors, 8 MiB + the rest).
    assert c.plain == 1, c.d
    assert c["rdma_bytes_written_total"] == data
    assert 2 <= stats["gets"] <= 4, stats


def test_a_sharded_model_by_its_index(rdma_server, bucket, tmp_path):
    tensors = model_tensors(2, n=20)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    s3 = boto3_client(rdma_server.endpoint)
    weight_map = {}
    for shard, keys in shards.items():
        p = tmp_path / shard
        st_torch.save_file({k: tensors[k] for k in keys}, str(p))
        s3.upload_file(str(p), bucket, f"sharded/{shard}")
        weight_map.update({k: shard for k in keys})
    s3.put_object(Bucket=bucket, Key="sharded/model.safetensors.index.json", Body=json.dumps({"metadata": {}, "weight_map": weight_map}).encode())
    reference = {}
    for shard in shards:
        reference.update(st_torch.load_file(str(tmp_path / shard)))
    got = ht.load_safetensors(f"s3://{bucket}/sharded/model.safetensors.index.json", **torch_conn_kw(rdma_server))
    identical(reference, got)


def test_a_truncated_header_is_a_clear_error(rdma_server, bucket):
    s3 = boto3_client(rdma_server.endpoint)
    s3.put_object(Bucket=bucket, Key="st/bad.safetensors", Body=(10 ** 6).to_bytes(8, "little") + b"{}")
    import hipobj

    with pytest.raises(hipobj.HipObjError) as e:
        ht.load_safetensors(f"s3://{bucket}/st/bad.safetensors", **torch_conn_kw(rdma_server))
    assert e.value.name == "hipObjInvalidValue"


def test_a_later_load_reuses_the_memory_of_dead_tensors_and_never_of_live_ones(rdma_server, bucket, tmp_path, counted):
    import gc

    from hipobj._host_blocks import HOST_BLOCKS

    tensors = model_tensors(3)
    local = tmp_path / "again.safetensors"
    st_torch.save_file(tensors, str(local))
    boto3_client(rdma_server.endpoint).upload_file(str(local), bucket, "st/again.safetensors")
    reference = st_torch.load_file(str(local))
    url = f"s3://{bucket}/st/again.safetensors"
    kw = dict(run_bytes=4 << 20, **torch_conn_kw(rdma_server))

    def spans(d):
        out = set()
        for t in d.values():
            st = t.untyped_storage()
            if st.nbytes():
                out.add((st.data_ptr(), st.data_ptr() + st.nbytes()))
        return out

    def overlap(a, b):
        return any(lo < hi2 and lo2 < hi for lo, hi in a for lo2, hi2 in b)

    first = ht.load_safetensors(url, **kw)
    second = ht.load_safetensors(url, **kw)
    # Both loads alive: the second could reuse nothing of the first.
    assert not overlap(spans(first), spans(second))
    identical(reference, first)
    identical(reference, second)

    # One tensor of the second load kept: its block stays its own; the
    # first load's blocks all died and come back.
    kept_name = "big"
    kept = second[kept_name]
    kept_span = spans({kept_name: kept})
    earlier = spans(first) | spans(second)
    reused = HOST_BLOCKS.reused
    del first, second
    gc.collect()
    stats = {}
    with counted() as c:
        third = ht.load_safetensors(url, stats=stats, **kw)
    # Every run found a dead block of its size (each size was made twice).
    assert HOST_BLOCKS.reused - reused == stats["gets"]
    assert overlap(spans(third), earlier)
    assert not overlap(spans(third), kept_span)
    identical(reference, third)
    assert kept.equal(reference[kept_name])
    # The reused memory was written again, by RDMA, in full.
    data = sum(t.numel() * t.element_size() for t in tensors.values())
    assert c["rdma_bytes_written_total"] == data
