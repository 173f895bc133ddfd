"""The fsspec filesystem (protocol hipobj): fsspec.open, the filesystem's
calls, torch.save / torch.load through it, and fsspec's own abstract test
suite (copy, get, put, open, pipe) against hipobj-server on the soft NIC."""

import io
import warnings

import pytest

fsspec = pytest.importorskip("fsspec")
from fsspec.tests import abstract  # noqa: E402

import hipobj  # noqa: E402
from hipobj._fsspec import HipObjFileSystem  # noqa: E402
from conftest import AK, SK  # noqa: E402


def fs_kw(server):
    return dict(endpoint_url=server.endpoint, key=AK, secret=SK, nic_hint="softroce0", fallback=False)


def test_the_protocol_is_registered(rdma_server):
    # By the package's entry point when installed, else on import of hipobj.
    cls = fsspec.get_filesystem_class("hipobj")
    assert cls is HipObjFileSystem or cls.__name__ == "HipObjFileSystem"


def test_open_read_write_ls_info_cat_rm(rdma_server, bucket, counted):
    kw = fs_kw(rdma_server)
    data = bytes(range(256)) * 4000  # ~1 MiB
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with counted() as c:
            with fsspec.open(f"hipobj://{bucket}/fs/a.bin", "wb", **kw) as f:
                f.write(data[:1000])
                f.write(data[1000:])
            with fsspec.open(f"hipobj://{bucket}/fs/a.bin", "rb", **kw) as f:
                assert f.read(10) == data[:10]
                f.seek(500000)
                assert f.read(100) == data[500000:500100]
                f.seek(0)
                assert f.read() == data
        assert c["rdma_bytes_read_total"] >= len(data) and c["rdma_bytes_written_total"] >= len(data)
        assert c["rdma_declines_total"] == 0
        fs = fsspec.filesystem("hipobj", **kw)
        fs.pipe_file(f"{bucket}/fs/sub/b.txt", b"hello")
        fs.pipe_file(f"{bucket}/fs/empty", b"")
        assert fs.cat_file(f"{bucket}/fs/sub/b.txt") == b"hello"
        assert fs.cat_file(f"{bucket}/fs/a.bin", start=10, end=20) == data[10:20]
        assert fs.cat_file(f"{bucket}/fs/a.bin", start=-5) == data[-5:]
        assert fs.cat_file(f"{bucket}/fs/empty") == b""
        names = fs.ls(f"{bucket}/fs", detail=False)
        assert names == [f"{bucket}/fs/a.bin", f"{bucket}/fs/empty", f"{bucket}/fs/sub"]
        assert fs.info(f"{bucket}/fs/a.bin")["size"] == len(data)
        assert fs.info(f"{bucket}/fs/sub")["type"] == "directory"
        assert fs.isdir(f"{bucket}/fs/sub") and fs.isfile(f"{bucket}/fs/sub/b.txt")
        fs.rm(f"{bucket}/fs", recursive=True)
        assert not fs.exists(f"{bucket}/fs/a.bin")
        with pytest.raises(FileNotFoundError):
            fs.info(f"{bucket}/fs/a.bin")


def test_torch_save_and_load_through_fsspec(rdma_server, bucket):
    torch = pytest.importorskip("torch")
    kw = fs_kw(rdma_server)
    sd = {"w": torch.randn(300, 200), "b": torch.arange(10)}
    with fsspec.open(f"hipobj://{bucket}/fs-torch/ckpt.pt", "wb", **kw) as f:
        torch.save(sd, f)
    with fsspec.open(f"hipobj://{bucket}/fs-torch/ckpt.pt", "rb", **kw) as f:
        back = torch.load(f, weights_only=True)
    assert torch.equal(back["w"], sd["w"]) and torch.equal(back["b"], sd["b"])


class HipObjFixtures(abstract.AbstractFixtures):
    @pytest.fixture(scope="class")
    def fs(self, rdma_server):
        fs = HipObjFileSystem(**fs_kw(rdma_server))
        fs.mkdir("fsabstract")
        return fs

    @pytest.fixture
    def fs_join(self):
        return lambda *args: "/".join(args)

    @pytest.fixture
    def fs_path(self):
        return "fsabstract"

    @pytest.fixture
    def supports_empty_directories(self):
        return False


class TestHipObjCopy(abstract.AbstractCopyTests, HipObjFixtures):
    pass


class TestHipObjGet(abstract.AbstractGetTests, HipObjFixtures):
    pass


class TestHipObjPut(abstract.AbstractPutTests, HipObjFixtures):
    pass


class TestHipObjOpen(abstract.AbstractOpenTests, HipObjFixtures):
    pass


class TestHipObjPipe(abstract.AbstractPipeTests, HipObjFixtures):
    pass
