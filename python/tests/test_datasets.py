"""hipobj.torch's datasets under a DataLoader with two workers."""

import pytest

torch = pytest.importorskip("torch")

import hipobj.torch as ht  # noqa: E402
from conftest import boto3_client, torch_conn_kw  # noqa: E402


@pytest.fixture(scope="module")
def samples(rdma_server, bucket):
    s3 = boto3_client(rdma_server.endpoint)
    out = {}
    for i in range(12):
        body = bytes([i]) * (1000 + 4096 * i)
        key = f"ds/sample-{i:02d}.bin"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        out[key] = body
    s3.put_object(Bucket=bucket, Key="dsx/other.bin", Body=b"not in the prefix")
    return out


def read(r):
    return (r.key, r.read())


def test_map_dataset_with_two_workers(rdma_server, bucket, samples, counted):
    ds = ht.S3MapDataset.from_prefix(f"s3://{bucket}/ds/", transform=read, **torch_conn_kw(rdma_server))
    assert len(ds) == 12
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    with counted() as c:
        got = dict(loader)
    assert got == samples
    assert c["rdma_gets_total"] == 12 and c["rdma_bytes_written_total"] == sum(map(len, samples.values()))


def test_a_forked_worker_is_told_to_spawn(rdma_server, bucket, samples):
    """The NIC's state does not survive fork (a forked worker's transfer
    failed with RetryExcErr): the worker says what to do instead."""
    import hipobj

    ds = ht.S3MapDataset.from_prefix(f"s3://{bucket}/ds/", transform=read, **torch_conn_kw(rdma_server))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    with pytest.raises(hipobj.HipObjError, match="spawn"):
        list(loader)


def test_iterable_dataset_with_two_workers(rdma_server, bucket, samples):
    ds = ht.S3IterableDataset.from_prefix(f"s3://{bucket}/ds/", transform=read, **torch_conn_kw(rdma_server))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    got = list(loader)
    assert sorted(k for k, _ in got) == sorted(samples)  # each object once
    assert dict(got) == samples


def test_a_reader_is_a_file(rdma_server, bucket, samples):
    ds = ht.S3MapDataset.from_prefix(f"s3://{bucket}/ds/", **torch_conn_kw(rdma_server))
    r = ds[3]
    assert r.bucket == bucket and r.key == "ds/sample-03.bin"
    assert r.read(10) == bytes([3]) * 10
    r.seek(-5, 2)
    assert r.read() == bytes([3]) * 5


def test_a_front_end_is_refused_with_the_reason(client):
    # hipobj.torch's DCP storage takes s3=; a dataset's workers connect from
    # the endpoint arguments, and a front end has no listing to give them.
    import hipobj
    from hipobj import HipObjError

    s3 = hipobj.Boto3(client, boto3_client("http://127.0.0.1:9"))
    for cls in (ht.S3MapDataset, ht.S3IterableDataset):
        with pytest.raises(HipObjError, match="endpoint arguments, not s3="):
            cls.from_prefix("s3://b/ds/", s3=s3)
