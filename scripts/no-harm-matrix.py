"""The no-harm matrix (issue 38; docs/protocol.md, "A token never harms a
server that ignores it"), driven by scripts/no-harm-matrix.sh.

For each S3 server that does not speak the RDMA protocol, each bucket
(unversioned, versioned), each client (the hipobj CLI, hipobj-s3's
roundtrip example, Python hipobj.S3, Python hipobj.Boto3, the C examples)
and each mode (fallback to plain HTTP allowed, or --require-rdma /
fallback=False): an object of known random bytes exists; the client PUTs
new bytes over it and GETs it back. Judged with boto3 alone, after every
cell:

  * the object is byte for byte the old one (the PUT failed) or the full new
    one (the PUT succeeded);
  * the key has exactly the versions it should (1, or 2 after a successful
    PUT in a versioned bucket), each of them the old or the new bytes
    whole: no empty or extra version;
  * a GET that succeeded handed over exactly the object's bytes.

usage: no-harm-matrix.py BIN CEXE NAME=ENDPOINT,ACCESS,SECRET...
  BIN: hipobj, roundtrip (hipobj-s3's example); CEXE: put-object,
  get-object, built against libhipobj (LD_LIBRARY_PATH set by the caller).
The `hipobj` package must be importable. Prints a markdown table; exits 1
on any violation.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import warnings

import boto3
from botocore.config import Config

import hipobj

MIB = 1 << 20
NIC = os.environ.get("HIPOBJ_NIC", "softroce0")
# The multipart case: 12 MiB in 5 MiB parts (S3's smallest part but the last).
BIG, PART = 12 * MIB, 5 * MIB


def h(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:8]


def size(n: int) -> str:
    return f"{n // MIB} MiB" if n and n % MIB == 0 else str(n)


def label(after, old, new) -> str:
    if after is None:
        return "" if old is None else " (GONE)"
    return " (new)" if after == new else " (old)" if after == old else " (EMPTY)" if not after else " (OTHER)"


def show(b: bytes | None) -> str:
    return "none" if b is None else f"{size(len(b))} {h(b)}"


class Server:
    def __init__(self, spec: str):
        self.name, rest = spec.split("=", 1)
        self.endpoint, self.ak, self.sk = rest.split(",")
        cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
        self.s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.ak,
            aws_secret_access_key=self.sk,
            region_name="us-east-1",
            config=cfg,
        )

    def env(self) -> dict:
        e = dict(os.environ)
        e.update(
            AWS_ACCESS_KEY_ID=self.ak,
            AWS_SECRET_ACCESS_KEY=self.sk,
            AWS_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE="/dev/null",
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
            HIPOBJ_NIC=NIC,
        )
        e.pop("AWS_ENDPOINT_URL", None)
        e.pop("AWS_PROFILE", None)
        return e


def run(cmd: list, env: dict) -> tuple[bool, str]:
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False, "timed out after 120 s"
    out = (p.stderr or b"").decode(errors="replace").strip().splitlines()
    return p.returncode == 0, out[-1] if out else f"exit {p.returncode}"


# --- the clients: each returns (put ok, why), (get ok, bytes or why) ---------


def cli(bin_dir, srv, bucket, key, new, require, work):
    src, dst = os.path.join(work, "new.bin"), os.path.join(work, "got.bin")
    with open(src, "wb") as f:
        f.write(new)
    flag = ["--require-rdma"] if require else []
    common = ["--endpoint-url", srv.endpoint, "--part-size", str(PART), *flag]
    put = run([f"{bin_dir}/hipobj", "put", src, f"s3://{bucket}/{key}", *common], srv.env())
    ok, why = run([f"{bin_dir}/hipobj", "get", f"s3://{bucket}/{key}", dst, *common], srv.env())
    got = open(dst, "rb").read() if ok else why
    if ok:
        os.unlink(dst)
    return put, (ok, got)


def roundtrip(bin_dir, srv, bucket, key, new, require, work):
    # The example PUTs 1 MiB of i % 251 to `roundtrip` and GETs it back
    # (RdmaS3Client, with .fallback(false) under --require-rdma).
    flag = ["--require-rdma"] if require else []
    ok, why = run([f"{bin_dir}/examples/roundtrip", *flag, srv.endpoint, bucket, NIC], srv.env())
    # It checks the bytes it got back itself: a success is a GET of the new bytes.
    return (ok, why), (ok, new if ok else why)


_client = None


def py_client():
    global _client
    if _client is None:
        _client = hipobj.Client(NIC)
    return _client


def _py(front, bucket, key, new):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            front.put_from(bytearray(new), bucket, key)
        put = (True, "")
    except Exception as e:  # the cell records it
        put = (False, f"{type(e).__name__}: {e}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = int(front.head(bucket, key)["size"])
            buf = bytearray(n)
            got = front.get_into(buf, bucket, key)
        get = (True, bytes(buf[:got]))
    except Exception as e:
        get = (False, f"{type(e).__name__}: {e}")
    return put, get


def py_s3(bin_dir, srv, bucket, key, new, require, work):
    front = hipobj.S3(
        py_client(), srv.endpoint, srv.ak, srv.sk, fallback=not require, multipart_threshold=8 * MIB, part_size=PART
    )
    return _py(front, bucket, key, new)


def py_boto3(bin_dir, srv, bucket, key, new, require, work):
    s3 = boto3.client(
        "s3",
        endpoint_url=srv.endpoint,
        aws_access_key_id=srv.ak,
        aws_secret_access_key=srv.sk,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    front = hipobj.Boto3(py_client(), s3, fallback=not require, multipart_threshold=8 * MIB, part_size=PART)
    return _py(front, bucket, key, new)


def c_example(cexe, srv, bucket, key, new, require, work):
    src, dst = os.path.join(work, "new.bin"), os.path.join(work, "got.bin")
    with open(src, "wb") as f:
        f.write(new)
    put = run([f"{cexe}/put-object", srv.endpoint, bucket, key, src], srv.env())
    # get-object needs the exact size: the object's, or the new bytes' when there is none.
    obj = current(srv, bucket, key)
    n = len(new) if obj is None else len(obj)
    ok, why = run([f"{cexe}/get-object", srv.endpoint, bucket, key, str(n), dst], srv.env())
    got = open(dst, "rb").read() if ok else why
    if ok:
        os.unlink(dst)
    return put, (ok, got)


def control(bin_dir, srv, bucket, key, new, require, work):
    """The bug the matrix is for, sent on purpose: a body-less PutObject
    with a token, reported failed as the CLI did (issue 38, finding 1).
    The judge must flag it on every server and bucket."""
    s3 = boto3.client(
        "s3",
        endpoint_url=srv.endpoint,
        aws_access_key_id=srv.ak,
        aws_secret_access_key=srv.sk,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    s3.meta.events.register("before-sign.s3.PutObject", lambda request, **_: request.headers.__setitem__("x-amz-rdma-token", "x"))
    s3.put_object(Bucket=bucket, Key=key, Body=b"")
    return (False, "no x-amz-rdma-reply"), (False, "not read")


CONTROL = "control: a body-less PUT with a token"

# (name, function, sizes, modes: fallback allowed / required, or why not)
CLIENTS = [
    ("hipobj CLI", cli, (MIB, BIG), (False, True)),
    ("hipobj-s3 (roundtrip example)", roundtrip, (MIB,), (False, True)),
    ("Python hipobj.S3", py_s3, (MIB, BIG), (False, True)),
    ("Python hipobj.Boto3", py_boto3, (MIB, BIG), (False, True)),
    ("C examples", c_example, (MIB,), ("the examples never fall back: they refuse a server that does not speak RDMA", True)),
    # Last: it must come out a violation (the judge sees the harm), and is
    # not counted as one.
    (CONTROL, control, (MIB,), (False, "one row is enough")),
]


# --- the judge ----------------------------------------------------------------


def versions(srv, bucket, key, versioned, after=None, seeded=None):
    """(each version's bytes, or None where ListObjectVersions is not
    implemented; delete markers; how the versions were counted). Bodies are
    read only with `after` (the current bytes, which the latest version
    holds); the version `seeded` = (VersionId, bytes) is not read again."""
    try:
        r = srv.s3.list_object_versions(Bucket=bucket, Prefix=key)
    except srv.s3.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") != "NotImplemented" or versioned:
            raise
        keys = [o["Key"] for o in srv.s3.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", []) if o["Key"] == key]
        return None, 0, f"{len(keys)} key (no ListObjectVersions)"
    vs = [v for v in r.get("Versions", []) if v["Key"] == key]
    markers = len([m for m in r.get("DeleteMarkers", []) if m["Key"] == key])
    bodies = []
    for v in vs if after is not None else ():
        if seeded is not None and v.get("VersionId") == seeded[0] and versioned:
            bodies.append(seeded[1])  # a version never changes
        elif v.get("IsLatest") or not versioned:
            bodies.append(after)
        else:
            bodies.append(srv.s3.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])["Body"].read())
    return (bodies if after is not None else vs), markers, str(len(vs))


def purge(srv, bucket, key) -> None:
    try:
        r = srv.s3.list_object_versions(Bucket=bucket, Prefix=key)
    except srv.s3.exceptions.ClientError:
        srv.s3.delete_object(Bucket=bucket, Key=key)
        return
    for v in r.get("Versions", []) + r.get("DeleteMarkers", []):
        if v["Key"] == key:
            srv.s3.delete_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])


def open_uploads(srv, bucket, key) -> int:
    try:
        r = srv.s3.list_multipart_uploads(Bucket=bucket, Prefix=key)
    except srv.s3.exceptions.ClientError:
        return -1
    return len([u for u in r.get("Uploads", []) if u["Key"] == key])


def current(srv, bucket, key) -> bytes | None:
    try:
        return srv.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except srv.s3.exceptions.NoSuchKey:
        return None


def cell(srv, bucket, versioned, name, fn, n, require, existing, bin_dir, cexe, work, rows, bad):
    mode = "--require-rdma" if require else "fallback"
    if fn is roundtrip:
        # The example's one key: emptied (every version) before its cells
        # that start from no object.
        key = "roundtrip"
        new = bytes(i % 251 for i in range(MIB))
        if not existing:
            purge(srv, bucket, key)
    else:
        key = f"{name.split()[-1].lower().replace('.', '-')}-{mode.strip('-')}-{n}-{'old' if existing else 'none'}"
        new = os.urandom(n)
    old = os.urandom(n) if existing else None
    seeded = None
    if existing:
        seeded = (srv.s3.put_object(Bucket=bucket, Key=key, Body=old).get("VersionId"), old)
    elif current(srv, bucket, key) is not None:
        raise RuntimeError(f"{srv.name}/{bucket}/{key}: the object exists before the cell")
    before, _, _ = versions(srv, bucket, key, versioned)
    t = time.monotonic()
    (put_ok, put_why), (get_ok, got) = fn(cexe if fn is c_example else bin_dir, srv, bucket, key, new, require, work)
    secs = time.monotonic() - t
    after = current(srv, bucket, key)
    vs, markers, vcount = versions(srv, bucket, key, versioned, after if after is not None else b"", seeded)
    uploads = open_uploads(srv, bucket, key)

    why = []
    if put_ok and after != new:
        why.append(f"the PUT succeeded but the object is {show(after)}, not the new {size(len(new))}")
    if not put_ok and after != old:
        why.append(f"the PUT failed but the object changed: {show(after)}, was {show(old)}")
    if vs is not None:
        want = (len(before or []) + (1 if put_ok else 0)) if versioned else (1 if after is not None else 0)
        if len(vs) != want:
            why.append(f"{len(vs)} versions, expected {want}")
        for b in vs:
            if b not in (old, new):
                why.append(f"a version of {size(len(b))} ({h(b)}) is neither the old nor the new object")
        if markers:
            why.append(f"{markers} delete markers")
    if get_ok and got != after:
        why.append(f"the GET succeeded with {show(got)}, the object is {show(after)}")
    if name == CONTROL:
        # The judge must see the harm; a control it passes is the violation.
        why = [] if why else ["the judge did not see a body-less token PUT's harm"]
    if why:
        bad.append((srv.name, "versioned" if versioned else "unversioned", name, mode, size(n), "; ".join(why), put_why))
    rows.append(
        [
            srv.name,
            "versioned" if versioned else "unversioned",
            name,
            mode,
            size(n),
            show(old),
            "ok" if put_ok else "failed",
            show(after) + label(after, old, new),
            (vcount if vs is None else f"{len(before)}→{len(vs)}") + (f" (+{markers} markers)" if markers else ""),
            ("ok" if got == after else "WRONG BYTES") if get_ok else "failed",
            "—" if uploads <= 0 else str(uploads),
            "VIOLATION" if why else "caught (as it must be)" if name == CONTROL else "pass",
            f"{secs:.1f}",
        ]
    )
    if not put_ok:
        print(f"  {srv.name} {name} {mode} {size(n)}: PUT failed: {put_why[:200]}", file=sys.stderr)
    if not get_ok:
        print(f"  {srv.name} {name} {mode} {size(n)}: GET failed: {str(got)[:200]}", file=sys.stderr)


def compact(rows) -> None:
    """The same cells, one row per client case and one column per server
    and bucket: PUT / the object after / versions before→after (or the
    keys listed, where there is no ListObjectVersions) / GET."""
    cols: list = []
    cases: dict = {}
    for r in rows:
        col, case = (r[0], r[1]), (r[2], r[3], r[4], r[5].split()[0] if r[5] == "none" else "old")
        if col not in cols:
            cols.append(col)
        after = r[7].split("(")[-1].rstrip(")") if "(" in r[7] else r[7]
        vers = r[8].split()[0] if "key" not in r[8] else r[8].split()[0] + " key"
        cell = f"{r[6]} / {after} / {vers} / {r[9]}" + ("" if r[11] == "pass" else " (caught)" if r[11].startswith("caught") else " **VIOLATION**")
        cases.setdefault(case, {})[col] = cell
    head = ["client", "mode", "size", "before"] + [f"{a} {b}" for a, b in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case, cells in cases.items():
        print("| " + " | ".join(list(case) + [cells.get(c, "—") for c in cols]) + " |")


def main() -> int:
    bin_dir, cexe, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows: list = []
    bad: list = []
    notes: list = []
    with tempfile.TemporaryDirectory(prefix="hipobj-noharm-") as work:
        for spec in specs:
            srv = Server(spec)
            buckets = []
            for versioned in (False, True):
                b = "nh-versioned" if versioned else "nh-plain"
                srv.s3.create_bucket(Bucket=b)
                if versioned:
                    try:
                        srv.s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
                        if srv.s3.get_bucket_versioning(Bucket=b).get("Status") != "Enabled":
                            raise RuntimeError("GetBucketVersioning does not say Enabled")
                    except Exception as e:
                        notes.append(f"{srv.name}: no versioned bucket (PutBucketVersioning: {e}); skipped")
                        print(f"skip: {notes[-1]}", file=sys.stderr)
                        continue
                buckets.append((b, versioned))
            for b, versioned in buckets:
                for name, fn, sizes, modes in CLIENTS:
                    for require, m in zip((False, True), modes):
                        if isinstance(m, str):
                            note = f"{name}, {'--require-rdma' if require else 'fallback'}: n/a ({m})"
                            if note not in notes:
                                notes.append(note)
                            continue
                        # No object first (the roundtrip example has one key), then
                        # an existing one at each size.
                        if fn is not control:
                            cell(srv, b, versioned, name, fn, MIB, require, False, bin_dir, cexe, work, rows, bad)
                        for n in sizes:
                            cell(srv, b, versioned, name, fn, n, require, True, bin_dir, cexe, work, rows, bad)
    head = ["server", "bucket", "client", "mode", "size", "before", "PUT", "after", "versions", "GET", "open uploads", "verdict", "s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    compact(rows)
    print()
    for n in notes:
        print(f"- {n}")
    controls = len([r for r in rows if r[2] == CONTROL])
    print(f"\n{len(rows) - controls} cells and {controls} controls, {len(bad)} violations")
    for b in bad:
        print("VIOLATION: " + " / ".join(b[:5]) + f": {b[5]} (client said: {b[6][:300]})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
