"""Issue 41: a buffer larger than the server's transfer cap moves in parts.

hipobj-server with ``--max-transfer`` 8 MiB; ``get_into`` and ``put_from``
of a 40 MiB buffer (one call each, under ``multipart_threshold``) must move
every byte by RDMA (the server's counters) in parts of at most the cap,
which the client learns from the server's refusal. Before, both failed
with ``InvalidRDMAToken: the token's length ... is over this server's
limit``.
"""

import numpy as np
import pytest

import hipobj
from conftest import AK, SK, Server, boto3_client, metrics

CAP = 8 << 20


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("capped-data"), rdma=True, max_transfer=CAP)
    boto3_client(s.endpoint).create_bucket(Bucket="big")
    yield s
    s.stop()


def test_a_buffer_five_times_the_cap_goes_and_comes_back_by_rdma(client, capped):
    s3 = hipobj.S3(client, capped.endpoint, AK, SK, fallback=False)
    n = 5 * CAP + 4321
    data = np.random.default_rng(41).integers(0, 256, n, dtype=np.uint8)
    before = metrics(capped)
    assert s3.put_from(data, "big", "obj") == n
    assert s3.last["rdma"], s3.last
    out = np.zeros(n, dtype=np.uint8)
    assert s3.get_into(out, "big", "obj") == n
    assert s3.last["rdma"], s3.last
    assert np.array_equal(out, data)
    after = metrics(capped)
    assert after["hipobj_rdma_bytes_read_total"] - before["hipobj_rdma_bytes_read_total"] == n
    written = after["hipobj_rdma_bytes_written_total"] - before["hipobj_rdma_bytes_written_total"]
    assert n <= written <= n + 1
    assert after["hipobj_rdma_declines_total"] == before["hipobj_rdma_declines_total"]
