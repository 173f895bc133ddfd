"""Issue 41: hipobj.torch's DCP and safetensors loads move a run larger
than the server's transfer cap in parts, by RDMA.

hipobj-server with ``--max-transfer`` 1 MiB (and a 64 KiB smallest part,
so that the save's multipart uploads of 1 MiB parts complete); tensors of
several MiB. Each load must give the bytes torch's own DCP load
(``torch.distributed.checkpoint.load``) and the ``safetensors`` package
give, with every tensor byte written by the server's RDMA (its counters)
and nothing declined. Before, a direct GET into a tensor or a coalesced
run over the cap failed with ``InvalidRDMAToken: the token's length ... is
over this server's limit of 1048576``.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
st_torch = pytest.importorskip("safetensors.torch")

import hipobj  # noqa: E402
import hipobj.torch as ht  # noqa: E402
from conftest import Counted, Server, boto3_client, torch_conn_kw  # noqa: E402

CAP = 1 << 20


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch-capped")
    conf = d / "server.toml"
    conf.write_text("[limits]\nmin_part_size = 65536\n")
    s = Server(d / "data", rdma=True, max_transfer=CAP, extra_args=["--config", str(conf)])
    boto3_client(s.endpoint).create_bucket(Bucket="parts")
    yield s
    s.stop()


def fresh_kw(server, client):
    # A connection of its own (the S3 client in it has learned no limit
    # from an earlier test, so the first part finds the cap from the
    # server's refusal) on the session's hipObject client.
    return dict(torch_conn_kw(server), client=client)


def state(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {
        "w1": torch.randn(1536, 1024, generator=g),  # 6 MiB: an object of its own
        "w2": torch.randn(3, 1000, 512, generator=g).to(torch.bfloat16),  # ~2.9 MiB, packed
        "ids": torch.randint(-(1 << 40), 1 << 40, (300_001,), generator=g, dtype=torch.int64),  # ~2.3 MiB
        "small": torch.randn(7, generator=g),
        "step": 3,
    }


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))


TENSORS = ("w1", "w2", "ids", "small")


@pytest.mark.parametrize("direct_bytes", [1 << 20, 1 << 40], ids=["direct", "runs"])
def test_dcp_load_of_tensors_over_the_cap_goes_by_rdma_in_parts(capped, client, direct_bytes):
    src = state(41)
    path = f"s3://parts/dcp-{direct_bytes}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", hipobj.RdmaFallbackWarning)
        dcp.save(src, storage_writer=ht.S3RdmaStorageWriter(path, direct_bytes=4 << 20, **fresh_kw(capped, client)))
        dst = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in src.items()}
        # direct: the 6 MiB and ~2.9 MiB chunks land straight in their
        # tensors; runs: every piece comes in coalesced runs of up to 64 MiB.
        reader = ht.S3RdmaStorageReader(path, direct_bytes=direct_bytes, **fresh_kw(capped, client))
        with Counted(capped) as load:
            dcp.load(dst, storage_reader=reader)
    for k in TENSORS:
        assert same_bytes(src[k], dst[k]), k
    assert dst["step"] == 3
    n = sum(src[k].numel() * src[k].element_size() for k in TENSORS)
    # Every byte the reader fetched (the tensors and the padding between
    # packed ones) was written by RDMA; nothing was declined; the one plain
    # request was the metadata object.
    assert reader.stats["bytes"] >= n
    assert load["rdma_bytes_written_total"] == reader.stats["bytes"], load.d
    assert load["rdma_declines_total"] == 0
    assert load.plain == 1, load.d
    if direct_bytes == 1 << 20:
        assert reader.stats["direct"] >= 3, reader.stats
    else:
        assert reader.stats["direct"] == 0 and reader.stats["runs"] >= 1, reader.stats


def test_safetensors_load_of_runs_over_the_cap_goes_by_rdma_in_parts(capped, client, tmp_path):
    g = torch.Generator().manual_seed(7)
    tensors = {
        "embed": torch.randn(1024, 1536, generator=g),  # 6 MiB
        "head": torch.randn(2048, 1024, generator=g).to(torch.float16),  # 4 MiB
        "mask": torch.rand(13, generator=g) > 0.5,  # the next tensor is unaligned
        "norm": torch.randn(4097, generator=g),
    }
    local = tmp_path / "model.safetensors"
    st_torch.save_file(tensors, str(local))
    boto3_client(capped.endpoint).upload_file(str(local), "parts", "model.safetensors")
    reference = st_torch.load_file(str(local))
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Counted(capped) as c:
            got = ht.load_safetensors("s3://parts/model.safetensors", stats=stats, **fresh_kw(capped, client))
    assert set(got) == set(reference)
    for k in reference:
        assert same_bytes(reference[k].contiguous(), got[k].contiguous()), k
    data = sum(t.numel() * t.element_size() for t in tensors.values())
    # Runs of about a quarter of the data section each (over the cap), all
    # by RDMA; the header was the one plain request.
    assert stats["bytes"] == data
    assert max(stats["bytes"] // stats["gets"], 0) > CAP, stats
    assert c["rdma_bytes_written_total"] == data, c.d
    assert c["rdma_declines_total"] == 0
    assert c.plain == 1, c.d
