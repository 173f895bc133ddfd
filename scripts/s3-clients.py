#!/usr/bin/env python3
"""Third-party S3 client checks (boto3) against a running hipobj-server.

Usage: s3-clients.py ENDPOINT ACCESS_KEY SECRET_KEY [PREFIX]
Exits non-zero on the first wrong answer.
"""
import base64
import datetime
import hashlib
import os
import sys
import time
import zlib

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, ak, sk = sys.argv[1:4]
prefix = sys.argv[4] if len(sys.argv) > 4 else "py"
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=ak,
    aws_secret_access_key=sk,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
checks = 0


failed = 0


def check(cond, what):
    """Exits on the first wrong answer; with S3_CLIENTS_ALL=1 in the
    environment, reports every wrong answer and exits non-zero at the end."""
    global checks, failed
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        if not os.environ.get("S3_CLIENTS_ALL"):
            sys.exit(1)
        failed += 1
    checks += 1


def error_code(fn, **kw):
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def data(n, seed):
    return bytes(((i * 31 + seed) ^ (i >> 8)) & 0xFF for i in range(n))


# Over the S3 back end the answers are the back end's: the checks of the fs
# store's own S3 semantics (listing pages, conditions, error codes) run only
# against it. moto and SeaweedFS each differ from AWS in places noted below.
fs_store = prefix not in ("moto", "seaweedfs")

b = f"{prefix}-bucket"
s3.create_bucket(Bucket=b)
check(b in [x["Name"] for x in s3.list_buckets()["Buckets"]], "list_buckets shows the bucket")
s3.head_bucket(Bucket=b)
# AWS (and moto) answer 200 in us-east-1 for a bucket you already own; 409 elsewhere.
check(error_code(s3.create_bucket, Bucket=b)[1] in (200, 409), "creating it again")

for key, n in [("empty", 0), ("one", 1), ("dir/mib", 1 << 20), ("spaced key+plus", 4097)]:
    d = data(n, len(key))
    r = s3.put_object(Bucket=b, Key=key, Body=d, Metadata={"who": "boto3"})
    check(r["ETag"] == f'"{hashlib.md5(d).hexdigest()}"', f"PUT {key} ETag")
    g = s3.get_object(Bucket=b, Key=key)
    check(g["Body"].read() == d, f"GET {key} bytes")
    check(g["Metadata"].get("who") == "boto3", f"GET {key} metadata")
    h = s3.head_object(Bucket=b, Key=key)
    check(h["ContentLength"] == n and h["ETag"] == r["ETag"], f"HEAD {key}")

d = data(1 << 20, 3)
g = s3.get_object(Bucket=b, Key="dir/mib", Range="bytes=1000-1999")
check(g["Body"].read() == data(1 << 20, len("dir/mib"))[1000:2000], "ranged GET bytes")
check(g["ResponseMetadata"]["HTTPStatusCode"] == 206, "ranged GET is 206")
check(error_code(s3.get_object, Bucket=b, Key="dir/mib", Range="bytes=99999999-")[1] == 416, "bad range is 416")

keys = [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]]
check(keys == sorted(["empty", "one", "dir/mib", "spaced key+plus"]), f"list_objects_v2 keys {keys}")
lst = s3.list_objects_v2(Bucket=b, Delimiter="/")
check([p["Prefix"] for p in lst.get("CommonPrefixes", [])] == ["dir/"], "common prefixes")
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=b, PaginationConfig={"PageSize": 1})
check(sum(len(p.get("Contents", [])) for p in pages) == 4, "paginated listing")

s3.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "one"})
check(s3.get_object(Bucket=b, Key="copy")["Body"].read() == data(1, 3), "copy bytes")

# Multipart: 5 MiB, 5 MiB, 1 KiB.
parts = [data(5 << 20, 1), data(5 << 20, 2), data(1024, 3)]
up = s3.create_multipart_upload(Bucket=b, Key="mp")
done = []
for i, p in enumerate(parts, 1):
    r = s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=i, Body=p)
    check(r["ETag"] == f'"{hashlib.md5(p).hexdigest()}"', f"part {i} ETag")
    done.append({"PartNumber": i, "ETag": r["ETag"]})
if fs_store:
    # moto 5 answers ListParts with a <ListPartsResponse> root, which
    # aws-sdk-s3 (in the S3 back end) rightly refuses as malformed.
    lp = s3.list_parts(Bucket=b, Key="mp", UploadId=up["UploadId"])
    check([p["PartNumber"] for p in lp["Parts"]] == [1, 2, 3], "list_parts")
r = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": done})
want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
check(r["ETag"] == f'"{want}"', f"multipart ETag {r['ETag']} != {want}")
check(s3.get_object(Bucket=b, Key="mp")["Body"].read() == b"".join(parts), "multipart bytes")
up2 = s3.create_multipart_upload(Bucket=b, Key="aborted")
s3.abort_multipart_upload(Bucket=b, Key="aborted", UploadId=up2["UploadId"])
if fs_store:
    code = error_code(s3.list_parts, Bucket=b, Key="aborted", UploadId=up2["UploadId"])[0]
    check(code == "NoSuchUpload", f"abort: {code}")

# UploadPartCopy: "mp" in two ranges, then all of "dir/mib" as the last part.
mp_bytes = b"".join(parts)
mib = data(1 << 20, len("dir/mib"))
up4 = s3.create_multipart_upload(Bucket=b, Key="pc")
src_mp = {"Bucket": b, "Key": "mp"}
cut = 5 << 20
r1 = s3.upload_part_copy(Bucket=b, Key="pc", UploadId=up4["UploadId"], PartNumber=1, CopySource=src_mp, CopySourceRange=f"bytes=0-{cut - 1}")
if prefix != "seaweedfs":
    # SeaweedFS 4.48 answers a copied part with the ETag of its own chunk
    # layout ("<md5>-<chunks>"), not the part's MD5; the bytes are right.
    check(r1["CopyPartResult"]["ETag"] == f'"{hashlib.md5(mp_bytes[:cut]).hexdigest()}"', "UploadPartCopy range ETag")
r2 = s3.upload_part_copy(Bucket=b, Key="pc", UploadId=up4["UploadId"], PartNumber=2, CopySource=src_mp, CopySourceRange=f"bytes={cut}-{len(mp_bytes) - 1}")
r3 = s3.upload_part_copy(Bucket=b, Key="pc", UploadId=up4["UploadId"], PartNumber=3, CopySource={"Bucket": b, "Key": "dir/mib"})
check(r3["CopyPartResult"]["ETag"] == f'"{hashlib.md5(mib).hexdigest()}"', "UploadPartCopy whole ETag")
pc = [{"PartNumber": i + 1, "ETag": r["CopyPartResult"]["ETag"]} for i, r in enumerate([r1, r2, r3])]
s3.complete_multipart_upload(Bucket=b, Key="pc", UploadId=up4["UploadId"], MultipartUpload={"Parts": pc})
check(s3.get_object(Bucket=b, Key="pc")["Body"].read() == mp_bytes + mib, "UploadPartCopy bytes")
if fs_store:
    up5 = s3.create_multipart_upload(Bucket=b, Key="pc2")
    kw = dict(Bucket=b, Key="pc2", UploadId=up5["UploadId"], PartNumber=1, CopySource={"Bucket": b, "Key": "one"})
    check(error_code(s3.upload_part_copy, CopySourceRange="bytes=0-21", **kw) in [("InvalidRange", 416), ("InvalidRange", 400)], "UploadPartCopy past the end")
    check(error_code(s3.upload_part_copy, CopySourceRange="bytes=0-bar", **kw) == ("InvalidArgument", 400), "UploadPartCopy bad range")
    check(error_code(s3.upload_part_copy, CopySourceIfMatch='"0"', **kw) == ("PreconditionFailed", 412), "UploadPartCopy If-Match")
    check(error_code(s3.upload_part_copy, **dict(kw, CopySource={"Bucket": b, "Key": "nope"})) == ("NoSuchKey", 404), "UploadPartCopy missing source")
    s3.abort_multipart_upload(Bucket=b, Key="pc2", UploadId=up5["UploadId"])

if fs_store:
    # An ACL change is not a write: HEAD and the listings keep the
    # object's LastModified.
    s3.put_object(Bucket=b, Key="acl-time", Body=b"t")
    before = s3.head_object(Bucket=b, Key="acl-time")["LastModified"]
    time.sleep(1.1)
    s3.put_object_acl(Bucket=b, Key="acl-time", ACL="private")
    # (HEAD says it to the second, a listing to the millisecond)
    listed = [o["LastModified"].replace(microsecond=0) for o in s3.list_objects_v2(Bucket=b, Prefix="acl-time")["Contents"]]
    check(s3.head_object(Bucket=b, Key="acl-time")["LastModified"] == before and listed == [before], f"LastModified after PutObjectAcl: {before} {listed}")
    s3.delete_object(Bucket=b, Key="acl-time")
    # Pages of one entry with a delimiter: botocore's paginator stops with
    # "same next token received twice" if a page repeats a common prefix.
    for k in ["pg/a/1", "pg/a/2", "pg/b/1", "pg/c"]:
        s3.put_object(Bucket=b, Key=k, Body=b"p")
    for op in ["list_objects_v2", "list_objects"]:
        got = []
        for p in s3.get_paginator(op).paginate(Bucket=b, Prefix="pg/", Delimiter="/", PaginationConfig={"PageSize": 1}):
            got += [x["Prefix"] for x in p.get("CommonPrefixes", [])] + [o["Key"] for o in p.get("Contents", [])]
        check(got == ["pg/a/", "pg/b/", "pg/c"], f"{op} pages with a delimiter: {got}")
    # Conditional requests.
    etag = s3.head_object(Bucket=b, Key="one")["ETag"]
    check(error_code(s3.get_object, Bucket=b, Key="one", IfNoneMatch=etag)[1] == 304, "GET If-None-Match is 304")
    try:
        s3.get_object(Bucket=b, Key="one", IfNoneMatch=etag)
        got = None
    except ClientError as e:
        got = e.response["ResponseMetadata"]["HTTPHeaders"].get("etag")
    check(got == etag, f"the 304 carries the object's ETag: {got}")
    check(error_code(s3.get_object, Bucket=b, Key="one", IfMatch='"0"')[1] == 412, "GET If-Match is 412")
    check(error_code(s3.put_object, Bucket=b, Key="one", Body=b"no", IfNoneMatch="*")[1] == 412, "PUT If-None-Match: * is 412")
    check(s3.get_object(Bucket=b, Key="one")["Body"].read() == data(1, 3), "a refused PUT changed nothing")
    # A retried CompleteMultipartUpload (first answer lost) is 200.
    up3 = s3.create_multipart_upload(Bucket=b, Key="mp2")
    r = s3.upload_part(Bucket=b, Key="mp2", UploadId=up3["UploadId"], PartNumber=1, Body=b"x")
    mpu = {"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]}
    e1 = s3.complete_multipart_upload(Bucket=b, Key="mp2", UploadId=up3["UploadId"], MultipartUpload=mpu)["ETag"]
    e2 = s3.complete_multipart_upload(Bucket=b, Key="mp2", UploadId=up3["UploadId"], MultipartUpload=mpu)["ETag"]
    check(e1 == e2, "retried CompleteMultipartUpload")
    # Creating a bucket you own again: 200 in us-east-1 (the region this
    # server answers GetBucketLocation with), as AWS.
    check(error_code(s3.create_bucket, Bucket=b) == (None, 200), "creating an owned bucket again is 200")
    check(s3.get_bucket_location(Bucket=b).get("LocationConstraint") is None, "GetBucketLocation: us-east-1")
    elsewhere = {"LocationConstraint": "eu-west-1"}
    check(error_code(s3.create_bucket, Bucket=f"{prefix}-eu", CreateBucketConfiguration=elsewhere) == ("IllegalLocationConstraintException", 400), "a bucket in another region is refused")
    # ListBuckets in pages (MaxBuckets, ContinuationToken, Prefix).
    lb = [f"{prefix}-lb-{i}" for i in range(3)]
    for x in lb:
        s3.create_bucket(Bucket=x)
    got, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_buckets(MaxBuckets=1, Prefix=f"{prefix}-lb-", **kw)
        got += [x["Name"] for x in r["Buckets"]]
        pages += 1
        token = r.get("ContinuationToken")
        check(r.get("Prefix") == f"{prefix}-lb-", "ListBuckets echoes the prefix")
        if not token or pages > 5:
            break
    check(got == lb and pages == 3, f"ListBuckets pages of one: {got} in {pages}")
    for x in lb:
        s3.delete_bucket(Bucket=x)
    # An empty Content-MD5 is 400 InvalidDigest, and nothing is stored.
    def empty_md5(params, **_):
        params["headers"]["Content-MD5"] = ""
    s3.meta.events.register("before-call.s3.PutObject", empty_md5)
    check(error_code(s3.put_object, Bucket=b, Key="md5", Body=b"bar") == ("InvalidDigest", 400), "an empty Content-MD5 is InvalidDigest")
    s3.meta.events.unregister("before-call.s3.PutObject", empty_md5)
    check(error_code(s3.head_object, Bucket=b, Key="md5")[1] == 404, "a PUT with an empty Content-MD5 stored nothing")
    # Non-ASCII metadata comes back RFC 2047 encoded, as AWS returns it.
    def latin_meta(params, **_):
        params["headers"]["x-amz-meta-m"] = "Hello World\xe9"
    s3.meta.events.register("before-call.s3.PutObject", latin_meta)
    s3.put_object(Bucket=b, Key="meta", Body=b"m")
    s3.meta.events.unregister("before-call.s3.PutObject", latin_meta)
    got = s3.head_object(Bucket=b, Key="meta")["Metadata"].get("m")
    check(got == "=?UTF-8?B?SGVsbG8gV29ybGTDqQ==?=", f"non-ASCII metadata is RFC 2047 on the way out: {got}")
    s3.delete_object(Bucket=b, Key="meta")
    # Expires is stored and returned (PUT, copy with REPLACE, multipart).
    exp = datetime.datetime(2031, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket=b, Key="exp", Body=b"e", Expires=exp)
    check(s3.head_object(Bucket=b, Key="exp").get("Expires") == exp, "HEAD returns Expires")
    check(s3.get_object(Bucket=b, Key="exp").get("Expires") == exp, "GET returns Expires")
    s3.copy_object(Bucket=b, Key="exp2", CopySource={"Bucket": b, "Key": "exp"}, MetadataDirective="REPLACE", Expires=exp)
    check(s3.head_object(Bucket=b, Key="exp2").get("Expires") == exp, "a REPLACE copy keeps the new Expires")
    up = s3.create_multipart_upload(Bucket=b, Key="exp3", Expires=exp)["UploadId"]
    r = s3.upload_part(Bucket=b, Key="exp3", UploadId=up, PartNumber=1, Body=b"x")
    s3.complete_multipart_upload(Bucket=b, Key="exp3", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})
    check(s3.head_object(Bucket=b, Key="exp3").get("Expires") == exp, "a multipart object keeps Expires")
    for k in ["exp", "exp2", "exp3"]:
        s3.delete_object(Bucket=b, Key=k)
    # Owners in listings: v2 with FetchOwner only, v1 always.
    v2 = s3.list_objects_v2(Bucket=b, MaxKeys=1, FetchOwner=True)["Contents"][0]
    check(v2.get("Owner", {}).get("ID") == ak, f"v2 FetchOwner names the bucket's owner: {v2.get('Owner')}")
    check("Owner" not in s3.list_objects_v2(Bucket=b, MaxKeys=1)["Contents"][0], "v2 without FetchOwner has no Owner")
    check(s3.list_objects(Bucket=b, MaxKeys=1)["Contents"][0].get("Owner", {}).get("ID") == ak, "v1 names the owner")
    # Dated by a signed Date header and no X-Amz-Date (botocore signs so
    # when the caller sets Date; AWS accepts it).
    from email.utils import formatdate
    def with_date(params, **_):
        params["headers"]["Date"] = formatdate(usegmt=True)
    s3.meta.events.register("before-call.s3.PutObject", with_date)
    check(error_code(s3.put_object, Bucket=b, Key="dated", Body=b"d") == (None, 200), "a SigV4 PUT dated by Date")
    s3.meta.events.unregister("before-call.s3.PutObject", with_date)
    s3.delete_object(Bucket=b, Key="dated")
    # GetObjectAttributes: the ETag bare, as AWS returns it here; parts of a
    # multipart object a page at a time; checksums that were stored.
    attrs = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]
    ga = s3.get_object_attributes(Bucket=b, Key="mp", ObjectAttributes=attrs, MaxParts=1, PartNumberMarker=1)
    mp_etag = s3.head_object(Bucket=b, Key="mp")["ETag"].strip('"')
    check(ga.get("ETag") == mp_etag and ga.get("ObjectSize") == sum(map(len, parts)), f"GetObjectAttributes of mp: {ga.get('ETag')}")
    op = ga.get("ObjectParts", {})
    check(op.get("TotalPartsCount", op.get("PartsCount")) == 3 and op.get("IsTruncated") is True and op.get("NextPartNumberMarker") == 2, f"ObjectParts page: {op}")
    check([(x["PartNumber"], x["Size"]) for x in op.get("Parts", [])] == [(2, 5 << 20)], "the second part alone")
    s3.put_object(Bucket=b, Key="summed", Body=b"x" * 1024, ChecksumAlgorithm="SHA256")
    ga = s3.get_object_attributes(Bucket=b, Key="summed", ObjectAttributes=attrs)
    want = base64.b64encode(hashlib.sha256(b"x" * 1024).digest()).decode()
    check(ga.get("Checksum", {}).get("ChecksumSHA256") == want and "ObjectParts" not in ga, f"GetObjectAttributes of a PUT: {ga.get('Checksum')}")
    check(ga.get("StorageClass") == "STANDARD" and ga.get("ObjectSize") == 1024, "StorageClass and ObjectSize")
    check(error_code(s3.get_object_attributes, Bucket=b, Key="nope", ObjectAttributes=attrs)[1] == 404, "GetObjectAttributes of no object")
    s3.delete_object(Bucket=b, Key="summed")
    # Conditional writes, PutObject and CompleteMultipartUpload alike (the
    # suite's test_*put_current_object_if_* without its versioning).
    def complete(key, body=b"abc", **cond):
        up = s3.create_multipart_upload(Bucket=b, Key=key)["UploadId"]
        r = s3.upload_part(Bucket=b, Key=key, UploadId=up, PartNumber=1, Body=body)
        mpu = {"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]}
        return s3.complete_multipart_upload(Bucket=b, Key=key, UploadId=up, MultipartUpload=mpu, **cond)
    def put(key, body=b"abc", **cond):
        return s3.put_object(Bucket=b, Key=key, Body=body, **cond)
    for name, write in [("PUT", put), ("Complete", complete)]:
        k = f"cond-{name}"
        check(error_code(write, key=k, IfMatch="*") == ("NoSuchKey", 404), f"{name} If-Match: * on no object")
        check(error_code(write, key=k, IfMatch="badetag") == ("NoSuchKey", 404), f"{name} If-Match on no object")
        e1 = write(k, b"data1", IfNoneMatch="*")["ETag"]
        e2 = write(k, b"data2", IfMatch="*")["ETag"]
        check(error_code(write, key=k, IfNoneMatch="*") == ("PreconditionFailed", 412), f"{name} If-None-Match: *")
        check(error_code(write, key=k, IfNoneMatch=e2) == ("PreconditionFailed", 412), f"{name} If-None-Match: current")
        check(error_code(write, key=k, IfMatch=e1) == ("PreconditionFailed", 412), f"{name} If-Match: old ETag")
        check(s3.get_object(Bucket=b, Key=k)["Body"].read() == b"data2", f"{name}: refused writes changed nothing")
        write(k, b"data3", IfNoneMatch=e1)
        e4 = write(k, b"data4", IfMatch=s3.head_object(Bucket=b, Key=k)["ETag"])["ETag"]
        check(s3.head_object(Bucket=b, Key=k)["ETag"] == e4, f"{name} If-Match: current ETag")
        s3.delete_object(Bucket=b, Key=k)
    # Multipart checksums: the algorithm chosen at CreateMultipartUpload,
    # each part's checksum (computed by botocore), the object's of them:
    # SHA-256 COMPOSITE (hashlib over the parts' digests) and CRC32
    # FULL_OBJECT (zlib over the whole object's bytes).
    mp_parts = [data(5 << 20, 11), data(5 << 20, 12), data(1000, 13)]
    whole_crc = base64.b64encode(zlib.crc32(b"".join(mp_parts)).to_bytes(4, "big")).decode()
    composite = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in mp_parts)).digest()
    for alg, kind, want in [("SHA256", "COMPOSITE", base64.b64encode(composite).decode() + "-3"), ("CRC32", "FULL_OBJECT", whole_crc)]:
        k, field = f"mpsum-{alg}", f"Checksum{alg}"
        cr = s3.create_multipart_upload(Bucket=b, Key=k, ChecksumAlgorithm=alg, ChecksumType=kind)
        check((cr.get("ChecksumAlgorithm"), cr.get("ChecksumType")) == (alg, kind), f"{alg}: CreateMultipartUpload echoes {cr.get('ChecksumType')}")
        up = cr["UploadId"]
        listed = []
        for i, p in enumerate(mp_parts, 1):
            r = s3.upload_part(Bucket=b, Key=k, UploadId=up, PartNumber=i, Body=p, ChecksumAlgorithm=alg)
            listed.append({"PartNumber": i, "ETag": r["ETag"], field: r[field]})
        check(error_code(s3.upload_part, Bucket=b, Key=k, UploadId=up, PartNumber=1, Body=b"x", ChecksumAlgorithm="SHA1" if alg != "SHA1" else "CRC32") == ("InvalidRequest", 400), f"{alg}: a part with another algorithm")
        bad = dict(listed[0], **{field: listed[1][field]})
        mpu = {"Parts": [bad] + listed[1:]}
        got = error_code(s3.complete_multipart_upload, Bucket=b, Key=k, UploadId=up, MultipartUpload=mpu)
        check(got == ("InvalidPart", 400), f"{alg}: a part listed with another part's checksum: {got}")
        other = base64.b64encode(b"\0" * (32 if alg == "SHA256" else 4)).decode() + ("-3" if kind == "COMPOSITE" else "")
        check(error_code(s3.complete_multipart_upload, Bucket=b, Key=k, UploadId=up, MultipartUpload={"Parts": listed}, **{field: other}) == ("BadDigest", 400), f"{alg}: a wrong whole-object checksum")
        done = s3.complete_multipart_upload(Bucket=b, Key=k, UploadId=up, MultipartUpload={"Parts": listed}, **{field: want})
        check((done.get(field), done.get("ChecksumType")) == (want, kind), f"{alg}: Complete gives {done.get(field)}, want {want}")
        again = s3.complete_multipart_upload(Bucket=b, Key=k, UploadId=up, MultipartUpload={"Parts": listed})
        check((again["ETag"], again.get(field)) == (done["ETag"], want), f"{alg}: a retried Complete says the same")
        h = s3.head_object(Bucket=b, Key=k, ChecksumMode="ENABLED")
        check((h.get(field), h.get("ChecksumType")) == (want, kind), f"{alg}: HEAD with checksum mode")
        check(field not in s3.head_object(Bucket=b, Key=k), f"{alg}: HEAD without checksum mode has none")
        g2 = s3.get_object(Bucket=b, Key=k, PartNumber=2, ChecksumMode="ENABLED")
        check(g2["Body"].read() == mp_parts[1] and g2.get(field) == listed[1][field], f"{alg}: GET partNumber=2 has part 2's checksum")
        ga = s3.get_object_attributes(Bucket=b, Key=k, ObjectAttributes=["Checksum", "ObjectParts"])
        check(ga["Checksum"].get(field) == want and ga["Checksum"].get("ChecksumType") == kind, f"{alg}: GetObjectAttributes Checksum")
        check([x.get(field) for x in ga["ObjectParts"]["Parts"]] == [x[field] for x in listed], f"{alg}: GetObjectAttributes parts' checksums")
        s3.delete_object(Bucket=b, Key=k)
    check(error_code(s3.create_multipart_upload, Bucket=b, Key="mpsum-bad", ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT") == ("InvalidRequest", 400), "SHA256 cannot be FULL_OBJECT")

# Authentication beyond the signature itself, with botocore's own signers.

import botocore.auth
import urllib3
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

creds = Credentials(ak, sk)
# Over https, trust what botocore trusts (AWS_CA_BUNDLE), as boto3 above does.
http = urllib3.PoolManager(ca_certs=os.environ.get("AWS_CA_BUNDLE") or None)


def send(req):
    r = http.request(req.method, req.url, headers=dict(req.headers.items()), body=req.body, retries=False)
    return r.status, r.data.decode(errors="replace")


# SigV2 carries no date: a captured request would replay forever.
req = AWSRequest(method="GET", url=f"{endpoint}/{b}/one")
botocore.auth.HmacV1Auth(creds).add_auth(req)
st, body = send(req)
check(st == 400 and "InvalidRequest" in body, f"SigV2 is refused ({st})")
# A header added after signing must not change what a signed request does.
req = AWSRequest(method="PUT", url=f"{endpoint}/{b}/hijack", data=b"")
botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
req.headers["x-amz-copy-source"] = f"/{b}/one"
st, body = send(req)
check(st == 403, f"an unsigned x-amz-copy-source is refused ({st})")
check(error_code(s3.head_object, Bucket=b, Key="hijack")[1] == 404, "nothing was copied")
# A request signed 20 minutes ago is outside AWS's 15-minute window.
real_now = botocore.auth.get_current_datetime
botocore.auth.get_current_datetime = lambda: real_now() - datetime.timedelta(minutes=20)
req = AWSRequest(method="GET", url=f"{endpoint}/{b}/one")
botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
botocore.auth.get_current_datetime = real_now
st, body = send(req)
check(st == 403 and "RequestTimeTooSkewed" in body, f"a stale signature is refused ({st})")
# Dated by a signed Date header: an attacker who moves the Date, or adds
# an X-Amz-Date of another instant, breaks the signature; a stale Date is
# as stale as a stale X-Amz-Date.
from email.utils import formatdate, parsedate_to_datetime


def date_signed(minutes_ago=0):
    req = AWSRequest(method="GET", url=f"{endpoint}/{b}/one")
    req.headers["Date"] = formatdate(usegmt=True)
    real_now = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda: real_now() - datetime.timedelta(minutes=minutes_ago)
    botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    botocore.auth.get_current_datetime = real_now
    check("X-Amz-Date" not in req.headers and "date" in req.headers["Authorization"], "botocore signed Date")
    return req


st, _ = send(date_signed())
check(st == 200, f"a GET dated by a signed Date ({st})")
req = date_signed()
later = parsedate_to_datetime(req.headers["Date"]) + datetime.timedelta(seconds=1)
req.headers["Date"] = formatdate(later.timestamp(), usegmt=True)
st, body = send(req)
check(st == 403 and "SignatureDoesNotMatch" in body, f"a Date moved after signing is refused ({st})")
# One second after this request's own signing time (the previous request's
# `later` equals this one's signing time whenever a second went by between
# the two, and the server rightly accepts a date that is the signed one).
req = date_signed()
later = parsedate_to_datetime(req.headers["Date"]) + datetime.timedelta(seconds=1)
req.headers["X-Amz-Date"] = later.strftime("%Y%m%dT%H%M%SZ")
st, body = send(req)
check(st == 403, f"an X-Amz-Date added to a Date-signed request is refused ({st})")
st, body = send(date_signed(minutes_ago=20))
check(st == 403 and "RequestTimeTooSkewed" in body, f"a stale signed Date is refused ({st})")
# Presigned URLs: at most 7 days, as AWS. (boto3 presigns with SigV2 unless
# told s3v4, and SigV2 is refused.)
url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "one"}, ExpiresIn=3600)
check(http.request("GET", url, retries=False).status == 400, "a SigV2 presigned URL is refused")
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=ak,
    aws_secret_access_key=sk,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4"),
)
url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "one"}, ExpiresIn=7 * 86400)
check(http.request("GET", url, retries=False).status == 200, "a 7-day presigned URL works")
url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "one"}, ExpiresIn=8 * 86400)
st = http.request("GET", url, retries=False).status
check(st == 403, f"an 8-day presigned URL is refused ({st})")
for method, verb in [("get_object", "GET"), ("put_object", "PUT")]:
    url = s3.generate_presigned_url(method, Params={"Bucket": b, "Key": "one"}, ExpiresIn=-7)
    st = http.request(verb, url, body=b"no" if verb == "PUT" else None, retries=False).status
    check(st == 403, f"a {verb} presigned with a negative expiry is refused ({st})")
check(s3.get_object(Bucket=b, Key="one")["Body"].read() == data(1, 3), "the refused presigned PUT changed nothing")
# CORS preflights, as S3 answers them for a bucket without CORS.
url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "one"}, ExpiresIn=600)
check(http.request("OPTIONS", url, retries=False).status == 400, "a preflight without Origin is 400")
pre = {"Origin": "https://example.com", "Access-Control-Request-Method": "GET"}
check(http.request("OPTIONS", url, headers=pre, retries=False).status == 403, "a preflight is 403 without CORS")
check(http.request("GET", url, retries=False).status == 200, "the URL itself works")
# Encryption at rest (the fs store's; a back end's own otherwise): SSE-S3
# always, SSE-C keys only over https (on plain http everyone on the path
# reads the key).
if fs_store:
    key = b"k" * 32
    code, st = error_code(s3.put_object, Bucket=b, Key="sse-c", Body=b"secret", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    if endpoint.startswith("https://"):
        check(st == 200, f"SSE-C over https is stored ({code})")
        got = s3.get_object(Bucket=b, Key="sse-c", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
        check(got["Body"].read() == b"secret" and got.get("SSECustomerAlgorithm") == "AES256", "SSE-C reads back with its key")
        check(error_code(s3.get_object, Bucket=b, Key="sse-c")[1] == 400, "SSE-C without its key is 400")
        check(error_code(s3.get_object, Bucket=b, Key="sse-c", SSECustomerAlgorithm="AES256", SSECustomerKey=b"o" * 32)[1] == 400, "SSE-C with another key is 400")
    else:
        check(st == 400, f"an SSE-C key over http is refused ({code})")
        check(error_code(s3.head_object, Bucket=b, Key="sse-c")[1] == 404, "a refused SSE-C PUT stored nothing")
    r = s3.put_object(Bucket=b, Key="sse-s3", Body=b"at rest", ServerSideEncryption="AES256")
    check(r.get("ServerSideEncryption") == "AES256", "SSE-S3 PUT says AES256")
    got = s3.get_object(Bucket=b, Key="sse-s3", Range="bytes=3-6")
    check(got["Body"].read() == b"rest" and got.get("ServerSideEncryption") == "AES256", "SSE-S3 ranged GET")
# What the server does not implement is refused, never silently ignored.
for extra in [{"ServerSideEncryption": "aws:kms"}, {"Tagging": "a=b"}, {"GrantRead": "id=someone-else"}, {"ObjectLockLegalHoldStatus": "ON"}]:
    check(error_code(s3.put_object, Bucket=b, Key="x", Body=b"x", **extra)[1] == 501, f"{extra} is 501")
s3.put_object(Bucket=b, Key="acl-private", Body=b"x", ACL="private")

# Content-Encoding is the object's, not how the body travelled (boto3
# sends aws-chunked bodies with "gzip,aws-chunked").
s3.put_object(Bucket=b, Key="gz", Body=b"not really gzip", ContentEncoding="gzip", ChecksumAlgorithm="CRC32")
ce = s3.head_object(Bucket=b, Key="gz").get("ContentEncoding")
check(ce == "gzip", f"Content-Encoding stored as {ce!r}")
try:
    s3.get_object(Bucket=b, Key="missing")
except ClientError as e:
    rid = e.response["ResponseMetadata"].get("RequestId")
    check(rid and e.response["Error"].get("RequestId", rid) == rid, "errors carry a request id")

check(error_code(s3.get_object, Bucket=b, Key="missing")[0] == "NoSuchKey", "NoSuchKey")
check(error_code(s3.get_object, Bucket=f"{prefix}-nobucket", Key="k")[0] == "NoSuchBucket", "NoSuchBucket")
check(error_code(s3.delete_bucket, Bucket=b)[0] == "BucketNotEmpty", "BucketNotEmpty")


# Errors as botocore parses them (what the AWS CLI prints after the code):
# a message that says something, never botocore's "Unknown" for none (issue
# 39, finding 6), for a missing key, a wrong secret, an unknown access key
# and a non-empty bucket.
def with_keys(key, secret):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


for what, call, want, status in [
    ("a missing key", lambda: s3.get_object(Bucket=b, Key="missing"), "NoSuchKey", 404),
    ("a wrong secret", lambda: with_keys(ak, "not-" + sk).list_objects_v2(Bucket=b), "SignatureDoesNotMatch", 403),
    ("an unknown key", lambda: with_keys("AKIDNOTKNOWNHERE", sk).list_buckets(), "InvalidAccessKeyId", 403),
    ("a non-empty bucket", lambda: s3.delete_bucket(Bucket=b), "BucketNotEmpty", 409),
]:
    try:
        call()
        check(False, f"{what}: no error")
    except ClientError as e:
        err, meta = e.response["Error"], e.response["ResponseMetadata"]
        check((err.get("Code"), meta["HTTPStatusCode"]) == (want, status), f"{what}: {err} {meta['HTTPStatusCode']}")
        message = err.get("Message") or ""
        check(" " in message and message != "Unknown" and sk not in message, f"{what}: message {message!r}")
        if fs_store:
            check(err.get("Resource", "").startswith("/"), f"{what}: no Resource in {err}")
check(error_code(s3.put_object, Bucket=b, Key="../up", Body=b"x")[1] == 400, "key with .. is refused")

for o in s3.list_objects_v2(Bucket=b)["Contents"]:
    s3.delete_object(Bucket=b, Key=o["Key"])
s3.delete_bucket(Bucket=b)
check(error_code(s3.head_bucket, Bucket=b)[1] == 404, "bucket deleted")
if failed:
    print(f"boto3: {failed} of {checks} checks failed against {endpoint}", file=sys.stderr)
    sys.exit(1)
print(f"boto3: {checks} checks passed against {endpoint}")
