//! Plain-HTTP S3 behaviour of the server over the filesystem store, with
//! aws-sdk-s3 as the client (and raw HTTP for what no SDK would send).
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, CompletedMultipartUpload, CompletedPart, CreateBucketConfiguration,
};
use support::{client, client_for, code, files, md5_bytes, md5_hex, pattern, raw, start};

/// A server configured for another region makes its buckets there, says so,
/// and refuses to make them anywhere else (AWS's rules outside us-east-1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buckets_live_in_the_configured_region() {
    let (h, _dir) = start(|c| c.region = "eu-west-1".into()).await;
    let c = client(&h);
    let in_region = |r: BucketLocationConstraint| {
        CreateBucketConfiguration::builder()
            .location_constraint(r)
            .build()
    };
    c.create_bucket()
        .bucket("here")
        .create_bucket_configuration(in_region(BucketLocationConstraint::EuWest1))
        .send()
        .await
        .unwrap();
    let loc = c.get_bucket_location().bucket("here").send().await.unwrap();
    assert_eq!(
        loc.location_constraint(),
        Some(&BucketLocationConstraint::EuWest1)
    );
    let e = c.create_bucket().bucket("here").send().await.unwrap_err();
    assert_eq!(code(&e), "BucketAlreadyOwnedByYou");
    let e = c
        .create_bucket()
        .bucket("there")
        .create_bucket_configuration(in_region(BucketLocationConstraint::UsWest2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "IllegalLocationConstraintException");
    let names = support::bucket_names(&c).await;
    assert_eq!(names, ["here"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buckets_create_list_head_delete() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("alpha").send().await.unwrap();
    c.create_bucket().bucket("beta-1").send().await.unwrap();
    // The default region is us-east-1, where AWS answers 200 to the
    // bucket's owner creating it again.
    c.create_bucket().bucket("alpha").send().await.unwrap();
    let loc = c.get_bucket_location().bucket("alpha").send().await.unwrap();
    // (An empty element, which aws-sdk-s3 reads as an unknown "".)
    assert!(
        loc.location_constraint().is_none_or(|l| l.as_str().is_empty()),
        "us-east-1 is the empty constraint: {loc:?}"
    );
    let e = c
        .create_bucket()
        .bucket("gamma")
        .create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::EuWest1)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "IllegalLocationConstraintException");
    let e = c.head_bucket().bucket("gamma").send().await.unwrap_err();
    assert_eq!(
        e.raw_response().unwrap().status().as_u16(),
        404,
        "a refused bucket was made"
    );
    let e = c.create_bucket().bucket("Bad_Name").send().await.unwrap_err();
    assert_eq!(code(&e), "InvalidBucketName");

    let names = support::bucket_names(&c).await;
    assert_eq!(names, ["alpha", "beta-1"]);

    c.head_bucket().bucket("alpha").send().await.unwrap();
    let e = c.head_bucket().bucket("nope").send().await.unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 404);

    c.put_object()
        .bucket("alpha")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let e = c.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(code(&e), "BucketNotEmpty");
    c.delete_object().bucket("alpha").key("k").send().await.unwrap();
    c.delete_bucket().bucket("alpha").send().await.unwrap();
    let e = c.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(code(&e), "NoSuchBucket");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn objects_put_get_head_delete_with_exact_bytes_and_etags() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    for (key, len) in [
        ("empty", 0usize),
        ("one", 1),
        ("dir/sub/mib", 1 << 20),
        ("odd size", 123_457),
    ] {
        let data = pattern(len, 3);
        let put = c
            .put_object()
            .bucket("bkt")
            .key(key)
            .content_type("application/x-test")
            .metadata("color", "blue")
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(
            put.e_tag(),
            Some(format!("\"{}\"", md5_hex(&data)).as_str()),
            "{key}"
        );
        let got = c.get_object().bucket("bkt").key(key).send().await.unwrap();
        assert_eq!(got.e_tag(), put.e_tag());
        assert_eq!(got.content_length(), Some(len as i64));
        assert_eq!(got.content_type(), Some("application/x-test"));
        assert_eq!(
            got.metadata().unwrap().get("color").map(String::as_str),
            Some("blue")
        );
        let body = got.body.collect().await.unwrap().into_bytes();
        assert!(body.as_ref() == data.as_slice(), "{key}: bytes differ");
        let head = c.head_object().bucket("bkt").key(key).send().await.unwrap();
        assert_eq!(head.content_length(), Some(len as i64));
        assert_eq!(head.e_tag(), put.e_tag());
    }
    // Overwrite replaces.
    c.put_object()
        .bucket("bkt")
        .key("one")
        .body(ByteStream::from_static(b"new"))
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("one").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"new");

    c.delete_object().bucket("bkt").key("one").send().await.unwrap();
    let e = c.get_object().bucket("bkt").key("one").send().await.unwrap_err();
    assert_eq!(code(&e), "NoSuchKey");
    // Deleting what is not there succeeds, as in S3.
    c.delete_object().bucket("bkt").key("one").send().await.unwrap();
    let e = c
        .put_object()
        .bucket("nobucket")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchBucket");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ranges_and_part_numbers() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let data = pattern(10_000, 9);
    c.put_object()
        .bucket("bkt")
        .key("r")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    for (range, want) in [
        ("bytes=0-0", &data[0..1]),
        ("bytes=100-199", &data[100..200]),
        ("bytes=9990-", &data[9990..]),
        ("bytes=-10", &data[9990..]),
        ("bytes=5000-999999", &data[5000..]),
    ] {
        let got = c
            .get_object()
            .bucket("bkt")
            .key("r")
            .range(range)
            .send()
            .await
            .unwrap();
        assert_eq!(got.content_length(), Some(want.len() as i64), "{range}");
        assert!(got.content_range().unwrap().ends_with("/10000"), "{range}");
        assert!(
            got.body.collect().await.unwrap().into_bytes().as_ref() == want,
            "{range}"
        );
    }
    let e = c
        .get_object()
        .bucket("bkt")
        .key("r")
        .range("bytes=10000-")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidRange");
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 416);

    let got = c
        .get_object()
        .bucket("bkt")
        .key("r")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(got.parts_count(), Some(1));
    assert!(got.body.collect().await.unwrap().into_bytes().as_ref() == data.as_slice());
    let e = c
        .get_object()
        .bucket("bkt")
        .key("r")
        .part_number(2)
        .send()
        .await
        .unwrap_err();
    // As S3 answers a part past the last (ceph/s3-tests'
    // test_multipart_get_part): 400 InvalidPart, not a range error.
    assert_eq!(code(&e), "InvalidPart");
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 400);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_objects_v2_with_prefix_delimiter_and_pages() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let long = format!("long/{}", "x".repeat(300));
    let keys = ["a/1", "a/2", "a/b/3", "c", "d e", long.as_str()];
    for k in keys {
        c.put_object()
            .bucket("bkt")
            .key(k)
            .body(ByteStream::from_static(b"12"))
            .send()
            .await
            .unwrap();
    }
    let all = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    let got: Vec<_> = all.contents().iter().filter_map(|o| o.key()).collect();
    let mut want = keys.to_vec();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(all.contents().iter().all(|o| o.size() == Some(2)));
    assert_eq!(
        all.contents()[0].e_tag(),
        Some(format!("\"{}\"", md5_hex(b"12")).as_str())
    );

    let d = c
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let objs: Vec<_> = d.contents().iter().filter_map(|o| o.key()).collect();
    let prefixes: Vec<_> = d.common_prefixes().iter().filter_map(|p| p.prefix()).collect();
    assert_eq!(objs, ["c", "d e"]);
    assert_eq!(prefixes, ["a/", "long/"]);

    let p = c
        .list_objects_v2()
        .bucket("bkt")
        .prefix("a/")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let objs: Vec<_> = p.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(objs, ["a/1", "a/2"]);
    assert_eq!(p.common_prefixes()[0].prefix(), Some("a/b/"));

    // Pages of two.
    let mut seen = Vec::new();
    let mut token = None;
    for _ in 0..10 {
        let page = c
            .list_objects_v2()
            .bucket("bkt")
            .max_keys(2)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        seen.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
        if page.is_truncated() != Some(true) {
            break;
        }
        token = page.next_continuation_token().map(str::to_owned);
    }
    assert_eq!(seen, want);
    let e = c.list_objects_v2().bucket("nope").send().await.unwrap_err();
    assert_eq!(code(&e), "NoSuchBucket");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_object_keeps_or_replaces_metadata() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    c.create_bucket().bucket("bkt2").send().await.unwrap();
    let data = pattern(70_000, 1);
    c.put_object()
        .bucket("bkt")
        .key("src")
        .metadata("m", "1")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    let r = c
        .copy_object()
        .bucket("bkt2")
        .key("dst")
        .copy_source("bkt/src")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.copy_object_result().unwrap().e_tag(),
        Some(format!("\"{}\"", md5_hex(&data)).as_str())
    );
    let got = c.get_object().bucket("bkt2").key("dst").send().await.unwrap();
    assert_eq!(got.metadata().unwrap().get("m").map(String::as_str), Some("1"));
    assert!(got.body.collect().await.unwrap().into_bytes().as_ref() == data.as_slice());

    c.copy_object()
        .bucket("bkt")
        .key("src")
        .copy_source("bkt/src")
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .metadata("m", "2")
        .send()
        .await
        .unwrap();
    let head = c.head_object().bucket("bkt").key("src").send().await.unwrap();
    assert_eq!(head.metadata().unwrap().get("m").map(String::as_str), Some("2"));
    let e = c
        .copy_object()
        .bucket("bkt")
        .key("x")
        .copy_source("bkt/missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchKey");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multipart_upload_complete_abort_and_list_parts() {
    let (h, _dir) = start(|c| c.limits.min_part_size = 1 << 20).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let parts = [pattern(1 << 20, 1), pattern(1 << 20, 2), pattern(5000, 3)];
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .content_type("text/x")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let mut done = Vec::new();
    // Out of order on purpose.
    for i in [2usize, 0, 1] {
        let r = c
            .upload_part()
            .bucket("bkt")
            .key("mp")
            .upload_id(id)
            .part_number(i as i32 + 1)
            .body(ByteStream::from(parts[i].clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.e_tag(), Some(format!("\"{}\"", md5_hex(&parts[i])).as_str()));
        done.push((i as i32 + 1, r.e_tag().unwrap().to_owned()));
    }
    done.sort();
    let listed = c
        .list_parts()
        .bucket("bkt")
        .key("mp")
        .upload_id(id)
        .send()
        .await
        .unwrap();
    let nums: Vec<_> = listed.parts().iter().filter_map(|p| p.part_number()).collect();
    assert_eq!(nums, [1, 2, 3]);
    assert_eq!(listed.parts()[2].size(), Some(5000));

    // A wrong ETag is refused and the upload stays.
    let bad = CompletedMultipartUpload::builder()
        .parts(CompletedPart::builder().part_number(1).e_tag("\"00\"").build())
        .build();
    let e = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(id)
        .multipart_upload(bad)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidPart");

    let mpu = CompletedMultipartUpload::builder()
        .set_parts(Some(
            done.iter()
                .map(|(n, e)| CompletedPart::builder().part_number(*n).e_tag(e).build())
                .collect(),
        ))
        .build();
    let r = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(id)
        .multipart_upload(mpu)
        .send()
        .await
        .unwrap();
    let mut cat = Vec::new();
    for p in &parts {
        cat.extend_from_slice(&md5_bytes(p));
    }
    let want_etag = format!("\"{}-3\"", md5_hex(&cat));
    assert_eq!(r.e_tag(), Some(want_etag.as_str()));
    let got = c.get_object().bucket("bkt").key("mp").send().await.unwrap();
    assert_eq!(got.e_tag(), Some(want_etag.as_str()));
    assert_eq!(got.content_type(), Some("text/x"));
    let all: Vec<u8> = parts.concat();
    assert!(got.body.collect().await.unwrap().into_bytes().as_ref() == all.as_slice());
    // partNumber selects one part of a multipart object.
    let p2 = c
        .get_object()
        .bucket("bkt")
        .key("mp")
        .part_number(2)
        .send()
        .await
        .unwrap();
    assert_eq!(p2.parts_count(), Some(3));
    assert!(p2.body.collect().await.unwrap().into_bytes().as_ref() == parts[1].as_slice());
    let e = c
        .list_parts()
        .bucket("bkt")
        .key("mp")
        .upload_id(id)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");

    // Too-small parts.
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("small")
        .send()
        .await
        .unwrap();
    let id2 = up.upload_id().unwrap();
    let mut small = Vec::new();
    for n in 1..=2 {
        let r = c
            .upload_part()
            .bucket("bkt")
            .key("small")
            .upload_id(id2)
            .part_number(n)
            .body(ByteStream::from_static(b"tiny"))
            .send()
            .await
            .unwrap();
        small.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().unwrap())
                .build(),
        );
    }
    let e = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("small")
        .upload_id(id2)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(small)).build())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "EntityTooSmall");
    // Abort removes it.
    c.abort_multipart_upload()
        .bucket("bkt")
        .key("small")
        .upload_id(id2)
        .send()
        .await
        .unwrap();
    let e = c
        .list_parts()
        .bucket("bkt")
        .key("small")
        .upload_id(id2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");
    let e = c
        .head_object()
        .bucket("bkt")
        .key("small")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 404);
    let e = c
        .upload_part()
        .bucket("bkt")
        .key("mp")
        .upload_id("0123456789abcdef0123456789abcdef")
        .part_number(1)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auth_is_required_and_checked() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    // Unsigned.
    let (status, text) = raw(
        h.addr(),
        "GET /bkt/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("<Code>AccessDenied</Code>"), "{text}");
    // Wrong secret, unknown key.
    let bad = client_for(&h.endpoint(), support::AK, "wrong-secret");
    let e = bad.list_buckets().send().await.unwrap_err();
    assert_eq!(code(&e), "SignatureDoesNotMatch");
    let unknown = client_for(&h.endpoint(), "nobody", "x");
    let e = unknown.list_buckets().send().await.unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 403);
    h.shutdown().await;

    // Anonymous when configured.
    let (h, _dir2) = start(|c| c.anonymous = true).await;
    let (status, text) = raw(
        h.addr(),
        "PUT /anon HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_keys_digests_and_sizes_store_nothing() {
    let (h, dir) = start(|c| c.limits.max_object_size = 1000).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    for key in ["../escape", "a/../../b", "x\0y", "./dot"] {
        let r = c
            .put_object()
            .bucket("bkt")
            .key(key)
            .body(ByteStream::from_static(b"x"))
            .send()
            .await;
        let e = r.expect_err(key);
        assert_eq!(e.raw_response().unwrap().status().as_u16(), 400, "{key}: {e:?}");
    }
    // Raw, so that no client normalizes the path.
    let (status, text) = raw(
        h.addr(),
        "GET /bkt/a/%2E%2E/%2E%2E/etc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(status == 400 || status == 403, "{text}");

    let e = c
        .put_object()
        .bucket("bkt")
        .key("md5")
        .content_md5("AAAAAAAAAAAAAAAAAAAAAA==")
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "BadDigest");
    let e = c
        .put_object()
        .bucket("bkt")
        .key("crc")
        .checksum_crc32("AAAAAA==")
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "BadDigest");
    // A right checksum is accepted and returned.
    let ok = c
        .put_object()
        .bucket("bkt")
        .key("crc-ok")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await
        .unwrap();
    assert!(ok.checksum_crc32().is_some());
    let e = c
        .put_object()
        .bucket("bkt")
        .key("big")
        .body(ByteStream::from(vec![0u8; 1001]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "EntityTooLarge");
    // Only the one good object exists; nothing is left in .tmp.
    let listed = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["crc-ok"]);
    let tmp = files(&dir.path().join(".tmp"));
    assert!(tmp.is_empty(), "{tmp:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_cut_short_stores_nothing() {
    let (h, dir) = start(|c| c.anonymous = true).await;
    let (status, _) = raw(
        h.addr(),
        "PUT /bkt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    // Content-Length promises 1000 bytes, 10 arrive, then the client goes.
    {
        use tokio::io::AsyncWriteExt;
        let mut s = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
        s.write_all(b"PUT /bkt/cut HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, text) = raw(
        h.addr(),
        "GET /bkt/cut HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404, "{text}");
    assert!(files(&dir.path().join(".tmp")).is_empty());
    // The server still serves.
    let (status, _) = raw(
        h.addr(),
        "GET /bkt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_and_health_endpoints() {
    let (h, _dir) = start(|_| {}).await;
    let (status, text) = raw(
        h.addr(),
        "GET /.hipobj/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    assert!(text.ends_with("ok\n"));
    let (status, text) = raw(
        h.addr(),
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let m = support::metrics::parse(&text);
    assert_eq!(m.value("hipobj_http_requests_total", &[]), Some(2.0), "{text}");
    assert!(
        matches!(
            m.samples("hipobj_rdma_in_flight").next().map(|s| &s.value),
            Some(prometheus_parse::Value::Gauge(_))
        ),
        "{text}"
    );
    h.shutdown().await;
}
