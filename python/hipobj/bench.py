"""Side-by-side benchmark of the PyTorch paths (``python -m hipobj.bench``).

Against one S3 server (``--endpoint``, or a hipobj-server it starts on the
soft RoCE NIC), with one state_dict of ``--size-mib`` MiB in ``--tensors``
tensors, each path ``--repeat`` times in rounds (one run of every path,
then the next round; the median is reported):

- DCP save and load: hipobj.torch's S3RdmaStorageWriter / Reader,
  s3torchconnector's S3StorageWriter / Reader (if it is installed), and
  torch's FileSystemWriter layout is not used: the boto3 row is
  ``torch.save`` into memory + ``put_object`` and ``get_object`` +
  ``torch.load``, what a program without a storage layer does.
- A safetensors load: hipobj.torch.load_safetensors, boto3 ``get_object`` +
  ``safetensors.torch.load``, s3torchconnector's reader +
  ``safetensors.torch.load``; repeated in one process, and as the first
  load of a fresh interpreter (each path's client made before the clock).

hipObject's loads are reported cold (a fresh hipobj.Client: a new NIC
connection, nothing registered) and warm (the same client again, its
registration cache and staging buffers made). The import cost of each
package is measured in a fresh interpreter, and the installed size of each
is read from site-packages.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

AK, SK = "bench", "bench-secret"


def start_server(data_dir: str) -> Tuple[subprocess.Popen, str]:
    exe = os.environ.get("HIPOBJ_SERVER_BIN")
    if not exe:
        root = pathlib.Path(__file__).resolve().parents[2]
        for p in ("release", "debug"):
            if (root / "target" / p / "hipobj-server").exists():
                exe = str(root / "target" / p / "hipobj-server")
                break
    if not exe:
        sys.exit("no hipobj-server: set HIPOBJ_SERVER_BIN (or pass --endpoint)")
    proc = subprocess.Popen(
        [exe, "--address", "127.0.0.1:0", "--data-dir", data_dir, "--access-key", AK, "--secret-key", SK,
         "--rdma-device", "softroce0", "--max-transfer", str(4 << 30), "--max-object-size", str(8 << 30)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "HIPOBJ_LOG": "warn", "HIPOBJ_SOFTROCE_ADDR": "127.0.0.1"},
    )
    line = (proc.stdout.readline() if proc.stdout else "").strip()
    if not line.startswith("listening on "):
        proc.kill()
        sys.exit(f"hipobj-server said {line!r}")
    return proc, "http://" + line[len("listening on "):]


def state_dict(total: int, count: int):
    import torch

    g = torch.Generator().manual_seed(0)
    per = max(total // count // 4, 1)
    out = {}
    for i in range(count):
        # Sizes vary around the mean, as a model's layers do.
        n = max(1, int(per * (0.5 + (i % 7) / 6)))
        out[f"layers.{i}.weight"] = torch.randn(n, generator=g)
    return out


def nbytes(sd) -> int:
    return sum(t.numel() * t.element_size() for t in sd.values())


def timed(fn: Callable[[], None], repeat: int) -> List[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def round_robin(paths: Dict[Tuple[str, str], Callable[[], None]], repeat: int) -> Dict[Tuple[str, str], List[float]]:
    """Each path timed ``repeat`` times, one round of every path after
    another. A 1 GiB load's time depends on the state of the memory it
    lands in (on a VM that returns freed memory to its host, fresh memory
    costs the host a fault per page), which the previous path leaves: in
    rounds every path follows every other alike, instead of the first
    path of a block paying for the one before it."""
    out: Dict[Tuple[str, str], List[float]] = {p: [] for p in paths}
    for _ in range(repeat):
        for p, fn in paths.items():
            out[p].extend(timed(fn, 1))
    return out


def import_cost(module: str) -> Optional[float]:
    code = f"import time; t=time.perf_counter(); import {module}; print(time.perf_counter()-t)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(p.stdout.strip()) if p.returncode == 0 else None


def installed_mib(dist: str) -> Optional[float]:
    try:
        from importlib import metadata

        files = metadata.distribution(dist).files or []
        total = 0
        for f in files:
            p = f.locate()
            if os.path.isfile(p):
                total += os.path.getsize(p)
        return total / (1 << 20)
    except Exception:
        return None


class Bench:
    def __init__(self, args, endpoint: str):
        self.args = args
        self.endpoint = endpoint
        self.bucket = args.bucket
        self.rows: List[Tuple[str, str, List[float], int]] = []
        import boto3
        from botocore.config import Config

        self.boto = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=args.access_key, aws_secret_access_key=args.secret_key,
            region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )
        try:
            self.boto.create_bucket(Bucket=self.bucket)
        except Exception:
            pass

    def kw(self):
        return dict(endpoint_url=self.endpoint, aws_access_key_id=self.args.access_key, aws_secret_access_key=self.args.secret_key, nic_hint=self.args.nic)

    def add(self, what: str, path: str, times: List[float], n: int) -> None:
        self.rows.append((what, path, times, n))
        med = statistics.median(times)
        print(f"  {what:<22} {path:<34} {med:7.3f} s  {n / med / (1 << 30):6.2f} GiB/s", flush=True)

    def run(self, rows: Dict[Tuple[str, str], Callable[[], None]], n: int) -> None:
        """Times ``rows`` (``(what, path): fn``) in rounds and reports each."""
        for (what, path), times in round_robin(rows, self.args.repeat).items():
            self.add(what, path, times, n)

    # DCP and torch.save: each adds its save and its load rows (the loads
    # read what the saves wrote, so every save round runs before the
    # first load round).

    def dcp_hipobj(self, sd, zero, saves, loads, warm_ups):
        import torch.distributed.checkpoint as dcp

        import hipobj
        import hipobj.torch as ht

        path = f"s3://{self.bucket}/bench/dcp-hipobj"
        client = hipobj.Client(nic_hint=self.args.nic)
        kw = self.kw()
        saves["DCP save", "hipobj.torch (RDMA)"] = lambda: dcp.save(sd, storage_writer=ht.S3RdmaStorageWriter(path, client=client, **kw))

        def cold():
            c = hipobj.Client(nic_hint=self.args.nic)
            dcp.load(zero, storage_reader=ht.S3RdmaStorageReader(path, client=c, **kw))
            c.close()

        def warm():
            dcp.load(zero, storage_reader=ht.S3RdmaStorageReader(path, client=client, **kw))

        loads["DCP load, cold", "hipobj.torch (RDMA)"] = cold
        loads["DCP load, warm", "hipobj.torch (RDMA)"] = warm
        warm_ups.append(warm)  # the warm client's registrations are made here, untimed

    def dcp_s3torchconnector(self, sd, zero, saves, loads, warm_ups):
        try:
            from s3torchconnector import S3ClientConfig
            from s3torchconnector._s3client import S3Client
            from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
            from s3torchconnector.dcp.s3_file_system import S3FileSystem
        except Exception as e:  # not installed, or its dependencies missing
            print(f"  s3torchconnector: not run ({type(e).__name__}: {e})")
            return
        import torch.distributed.checkpoint as dcp

        os.environ.setdefault("AWS_ACCESS_KEY_ID", self.args.access_key)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", self.args.secret_key)
        conf = S3ClientConfig(force_path_style=True, max_attempts=1)
        path = f"s3://{self.bucket}/bench/dcp-s3tc"

        def fs():
            return S3FileSystem("us-east-1", s3_client=S3Client("us-east-1", endpoint=self.endpoint, s3client_config=conf))

        def save():
            w = S3StorageWriter("us-east-1", path, s3client_config=conf, thread_count=4)
            w.fs = fs()
            dcp.save(sd, storage_writer=w)

        def load():
            r = S3StorageReader("us-east-1", path, s3client_config=conf)
            r.fs = fs()
            dcp.load(zero, storage_reader=r)

        saves["DCP save", "s3torchconnector DCP"] = save
        loads["DCP load", "s3torchconnector DCP"] = load

    def torch_save_boto3(self, sd, zero, saves, loads, warm_ups):
        import torch

        def save():
            b = io.BytesIO()
            torch.save(sd, b)
            self.boto.put_object(Bucket=self.bucket, Key="bench/torch.pt", Body=b.getvalue())

        def load():
            body = self.boto.get_object(Bucket=self.bucket, Key="bench/torch.pt")["Body"].read()
            got = torch.load(io.BytesIO(body), weights_only=True)
            for k, v in got.items():
                zero[k].copy_(v)

        saves["state_dict save", "boto3 + torch.save"] = save
        loads["state_dict load", "boto3 + torch.load"] = load

    def checkpoints(self, sd, skip) -> None:
        """The DCP and torch.save rows: every save in rounds, then every
        load in rounds, then each path's loaded tensors checked."""
        import torch

        saves: Dict[Tuple[str, str], Callable[[], None]] = {}
        loads: Dict[Tuple[str, str], Callable[[], None]] = {}
        warm_ups: List[Callable[[], None]] = []
        targets = []
        for name, section in (("dcp-hipobj", self.dcp_hipobj), ("dcp-s3tc", self.dcp_s3torchconnector), ("boto3", self.torch_save_boto3)):
            if name not in skip:
                zero = {k: torch.zeros_like(v) for k, v in sd.items()}
                section(sd, zero, saves, loads, warm_ups)
                targets.append(zero)
        n = nbytes(sd)
        self.run(saves, n)
        for fn in warm_ups:
            fn()
        self.run(loads, n)
        for zero in targets:
            for k in sd:
                assert zero[k].equal(sd[k]), k

    # safetensors

    def safetensors_all(self, sd):
        try:
            import safetensors.torch as st
        except ImportError:
            print("  safetensors: not installed")
            return
        import hipobj
        import hipobj.torch as ht

        blob = st.save(sd)
        n = nbytes(sd)
        self.boto.put_object(Bucket=self.bucket, Key="bench/model.safetensors", Body=blob)
        del blob
        url = f"s3://{self.bucket}/bench/model.safetensors"

        def cold():
            c = hipobj.Client(nic_hint=self.args.nic)
            ht.load_safetensors(url, client=c, **self.kw())
            c.close()

        client = hipobj.Client(nic_hint=self.args.nic)
        what = "safetensors load"
        warm = lambda: ht.load_safetensors(url, client=client, **self.kw())  # noqa: E731
        paths: Dict[Tuple[str, str], Callable[[], None]] = {
            (what, "hipobj.torch (RDMA), cold"): cold,
            (what, "hipobj.torch (RDMA), warm client"): warm,
            (what, "boto3 + safetensors.load"): lambda: st.load(self.boto.get_object(Bucket=self.bucket, Key="bench/model.safetensors")["Body"].read()),
        }
        try:
            from s3torchconnector import S3Checkpoint, S3ClientConfig

            os.environ.setdefault("AWS_ACCESS_KEY_ID", self.args.access_key)
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", self.args.secret_key)
            ck = S3Checkpoint("us-east-1", endpoint=self.endpoint, s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1))

            def s3tc():
                with ck.reader(url) as r:
                    st.load(r.read())

            paths[what, "s3torchconnector + safetensors.load"] = s3tc
        except Exception as e:
            print(f"  s3torchconnector safetensors: not run ({type(e).__name__}: {e})")
        warm()  # the warm client's first load, untimed
        self.run(paths, n)
        self.first_loads(url, n)

    def first_loads(self, url: str, n: int) -> None:
        """Each path's first safetensors load in a fresh interpreter, its
        client made before the clock starts: a model server's start-up,
        where no path has memory or registrations from a load before."""
        bucket, key = url[len("s3://"):].split("/", 1)
        setup = {
            "hipobj.torch (RDMA)": (
                "import hipobj.torch as ht\n"
                "kw = dict(endpoint_url=EP, aws_access_key_id=AK, aws_secret_access_key=SK, nic_hint=NIC)\n"
                "ht.connect(**kw)\n"
                "load = lambda: ht.load_safetensors(URL, **kw)\n"
            ),
            "boto3 + safetensors.load": (
                "import boto3, safetensors.torch as st\n"
                "from botocore.config import Config\n"
                "c = boto3.client('s3', endpoint_url=EP, aws_access_key_id=AK, aws_secret_access_key=SK, region_name='us-east-1', config=Config(s3={'addressing_style': 'path'}))\n"
                "load = lambda: st.load(c.get_object(Bucket=BUCKET, Key=KEY)['Body'].read())\n"
            ),
            "s3torchconnector + safetensors.load": (
                "import os, safetensors.torch as st\n"
                "os.environ['AWS_ACCESS_KEY_ID'], os.environ['AWS_SECRET_ACCESS_KEY'] = AK, SK\n"
                "from s3torchconnector import S3Checkpoint, S3ClientConfig\n"
                "ck = S3Checkpoint('us-east-1', endpoint=EP, s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1))\n"
                "def load():\n"
                "    with ck.reader(URL) as r:\n"
                "        return st.load(r.read())\n"
            ),
        }
        consts = dict(EP=self.endpoint, AK=self.args.access_key, SK=self.args.secret_key, NIC=self.args.nic, URL=url, BUCKET=bucket, KEY=key)
        head = "".join(f"{k} = {v!r}\n" for k, v in consts.items())
        tail = "import time\nt = time.perf_counter()\nout = load()\nprint(time.perf_counter() - t)\n"
        what = "safetensors first load, new process"
        times: Dict[str, List[float]] = {p: [] for p in setup}
        failed: set = set()
        for _ in range(self.args.repeat):
            for path in times:
                if path in failed:
                    continue
                r = subprocess.run([sys.executable, "-c", head + setup[path] + tail], capture_output=True, text=True)
                if r.returncode != 0:
                    # That path alone is left out (s3torchconnector is optional); the others go on.
                    failed.add(path)
                    print(f"  {what}, {path}: not run ({r.stderr.strip().splitlines()[-1:]})")
                    continue
                times[path].append(float(r.stdout.strip().splitlines()[-1]))
        for path, ts in times.items():
            if path not in failed:
                self.add(what, path, ts, n)


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m hipobj.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--endpoint")
    ap.add_argument("--access-key", default=AK)
    ap.add_argument("--secret-key", default=SK)
    ap.add_argument("--nic", default="softroce0")
    ap.add_argument("--bucket", default="bench")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--skip", default="", help="comma-separated: dcp-hipobj, dcp-s3tc, boto3, safetensors")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))

    proc, tmp = None, None
    endpoint = args.endpoint
    if endpoint is None:
        tmp = tempfile.TemporaryDirectory()
        proc, endpoint = start_server(tmp.name)
        args.access_key, args.secret_key = AK, SK
    try:
        print(f"hipobj.bench: {args.size_mib} MiB in {args.tensors} tensors, medians of {args.repeat}, endpoint {endpoint}, NIC {args.nic}")
        print("import cost (fresh interpreter):", {m: import_cost(m) for m in ("hipobj", "hipobj.torch", "boto3", "s3torchconnector", "torch")})
        print("installed MiB:", {d: installed_mib(d) for d in ("hipobj", "boto3", "botocore", "s3torchconnector", "s3torchconnectorclient", "torch")})
        b = Bench(args, endpoint)
        sd = state_dict(args.size_mib << 20, args.tensors)
        b.checkpoints(sd, skip)
        if "safetensors" not in skip:
            b.safetensors_all(sd)
        if args.json:
            with open(args.json, "w") as f:
                json.dump([{"what": w, "path": p, "seconds": t, "bytes": n} for w, p, t, n in b.rows], f, indent=1)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
