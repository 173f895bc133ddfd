#!/usr/bin/env python3
"""A checkpoint round trip: save a safetensors file's tensors to S3 with RDMA
PUTs, load them back with ranged RDMA GETs into one registered buffer,
compare every tensor, and print throughput next to plain boto3.

    python checkpoint.py --size-mib 256                 # starts hipobj-server on the soft NIC
    python checkpoint.py --endpoint http://host:9000 --access-key K --secret-key S --nic mlx5_0

The file layout is safetensors': an 8-byte little-endian header length, a
JSON header ({name: {dtype, shape, data_offsets}}), then the tensors' bytes.
"""

import argparse
import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import hipobj

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "U8": np.uint8}


def make_tensors(total_bytes, seed=0):
    """Layers of a made-up model adding up to about total_bytes."""
    rng = np.random.default_rng(seed)
    tensors, used, i = {}, 0, 0
    while used < total_bytes:
        rows = int(rng.integers(64, 1024))
        t = rng.standard_normal((rows, 1024), dtype=np.float32)
        if used + t.nbytes > total_bytes:
            t = t[: max(1, (total_bytes - used) // 4096)].copy()
        tensors[f"layers.{i}.weight"] = t
        tensors[f"layers.{i}.bias"] = rng.standard_normal(1024).astype(np.float16)
        used += t.nbytes + 2048
        i += 1
    tensors["step"] = np.array([1234], dtype=np.int64)
    return tensors


def serialize(tensors):
    """The whole safetensors file in one C-contiguous uint8 array."""
    header, off = {}, 0
    rev = {v: k for k, v in DTYPES.items()}
    for name, t in tensors.items():
        header[name] = {"dtype": rev[t.dtype.type], "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    out = np.empty(8 + len(hj) + off, dtype=np.uint8)
    out[:8] = np.frombuffer(struct.pack("<Q", len(hj)), dtype=np.uint8)
    out[8 : 8 + len(hj)] = np.frombuffer(hj, dtype=np.uint8)
    base = 8 + len(hj)
    for name, t in tensors.items():
        a, b = header[name]["data_offsets"]
        out[base + a : base + b] = t.reshape(-1).view(np.uint8)
    return out


def start_server(data_dir):
    exe = os.environ.get("HIPOBJ_SERVER_BIN")
    if not exe:
        root = pathlib.Path(__file__).resolve().parents[2]
        for p in ("release", "debug"):
            if (root / "target" / p / "hipobj-server").exists():
                exe = str(root / "target" / p / "hipobj-server")
                break
    if not exe:
        sys.exit("no hipobj-server: build it (cargo build -p hipobj-server) or set HIPOBJ_SERVER_BIN")
    proc = subprocess.Popen(
        [exe, "--address", "127.0.0.1:0", "--data-dir", data_dir, "--access-key", "ckpt", "--secret-key", "ckpt-secret",
         "--rdma-device", "softroce0", "--max-transfer", str(4 << 30), "--max-object-size", str(8 << 30)],
        stdout=subprocess.PIPE, text=True,
        # The server's soft NIC on the endpoint's own address, so that the
        # client's check of the server's QP address (docs/protocol.md §8) holds.
        env={**os.environ, "HIPOBJ_LOG": "warn", "HIPOBJ_SOFTROCE_ADDR": "127.0.0.1"},
    )
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        sys.exit(f"hipobj-server said {line!r}")
    return proc, "http://" + line.split(" ", 2)[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--endpoint")
    ap.add_argument("--access-key", default="ckpt")
    ap.add_argument("--secret-key", default="ckpt-secret")
    ap.add_argument("--nic", default="softroce0")
    ap.add_argument("--bucket", default="checkpoints")
    ap.add_argument("--part-mib", type=int, default=64, help="multipart upload above this size, in parts this size")
    args = ap.parse_args()

    proc, tmp = None, None
    endpoint = args.endpoint
    if endpoint is None:
        tmp = tempfile.TemporaryDirectory()
        proc, endpoint = start_server(tmp.name)
    try:
        run(args, endpoint)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            tmp.cleanup()


def run(args, endpoint):
    import boto3
    from botocore.config import Config

    b3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=args.access_key, aws_secret_access_key=args.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "total_max_attempts": 4},
                      request_checksum_calculation="when_required", response_checksum_validation="when_required"),
    )
    try:
        b3.create_bucket(Bucket=args.bucket)
    except b3.exceptions.ClientError:
        pass
    client = hipobj.Client(nic_hint=args.nic)
    part = args.part_mib << 20
    s3 = hipobj.S3(
        client, endpoint, args.access_key, args.secret_key, fallback=False, multipart_threshold=part, part_size=part
    )

    tensors = make_tensors(args.size_mib << 20)
    blob = serialize(tensors)
    key = "model.safetensors"
    client.register(blob)  # registration is set-up, not transfer time

    # Save: PutObject by RDMA, or above --part-mib a multipart upload whose
    # parts go by RDMA (put_from does that on its own).
    t0 = time.perf_counter()
    s3.put_from(blob, args.bucket, key)
    t_put = time.perf_counter() - t0
    parts = s3.last.get("parts", 1)

    # Load: the header by a small ranged GET, then every tensor by a ranged
    # RDMA GET into its place in one registered buffer.
    head = np.empty(8, dtype=np.uint8)
    s3.get_into(head, args.bucket, key, range="bytes=0-7")
    (hlen,) = struct.unpack("<Q", head.tobytes())
    hbuf = np.empty(hlen, dtype=np.uint8)
    s3.get_into(hbuf, args.bucket, key, range=f"bytes=8-{8 + hlen - 1}")
    header = json.loads(hbuf.tobytes())
    base = 8 + hlen
    data_len = max(v["data_offsets"][1] for v in header.values())
    buf = np.empty(data_len, dtype=np.uint8)
    client.register(buf)
    t0 = time.perf_counter()
    for name, v in header.items():
        a, b = v["data_offsets"]
        s3.get_into(buf[a:b], args.bucket, key, range=f"bytes={base + a}-{base + b - 1}")
    t_get = time.perf_counter() - t0
    for name, v in header.items():
        a, b = v["data_offsets"]
        got = buf[a:b].view(DTYPES[v["dtype"]]).reshape(v["shape"])
        if not np.array_equal(got, tensors[name]):
            sys.exit(f"tensor {name} differs")

    # The same with plain boto3 (bytes through HTTP bodies).
    t0 = time.perf_counter()
    b3.put_object(Bucket=args.bucket, Key=key + ".boto3", Body=blob.tobytes())
    t_bput = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = {}
    for name, v in header.items():
        a, b = v["data_offsets"]
        body = b3.get_object(Bucket=args.bucket, Key=key + ".boto3", Range=f"bytes={base + a}-{base + b - 1}")["Body"].read()
        loaded[name] = np.frombuffer(body, dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
    t_bget = time.perf_counter() - t0
    if any(not np.array_equal(loaded[n], tensors[n]) for n in tensors):
        sys.exit("boto3 read different bytes")

    mib = blob.nbytes / (1 << 20)
    print(f"checkpoint: {len(header)} tensors, {mib:.1f} MiB in {parts} part(s), NIC {client.device}; every tensor compared equal")
    print(f"{'':22}{'save (PUT)':>14}{'load (ranged GETs)':>22}")
    print(f"{'hipobj RDMA':22}{mib / t_put:>10.0f} MiB/s{mib / t_get:>18.0f} MiB/s")
    print(f"{'boto3 plain HTTP':22}{mib / t_bput:>10.0f} MiB/s{mib / t_bget:>18.0f} MiB/s")
    client.close()


if __name__ == "__main__":
    main()
