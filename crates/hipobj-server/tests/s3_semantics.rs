//! S3 behaviour that clients rely on beyond plain reads and writes:
//! listing pagination, conditional requests, retried multipart completion.
//! aws-sdk-s3 is the client (boto3 and curl repeat some of these in
//! scripts/s3-clients.sh).
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use support::{client, code, start};

fn status<E>(e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> u16 {
    e.raw_response().map_or(0, |r| r.status().as_u16())
}

async fn put(c: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &'static [u8]) -> String {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_owned()
}

/// Pages of one entry each, with a delimiter: a page that ends on a common
/// prefix must not make the next page return it again (the loop that
/// `aws s3 ls --page-size 1` reports as "same next token received twice").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_pages_ending_on_a_common_prefix_move_on() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    for k in ["a/1", "a/2", "b/x/1", "b/y", "c", "d/1"] {
        put(&c, "bkt", k, b"x").await;
    }
    let want = ["a/", "b/", "c", "d/"];

    // v2
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let r = c
            .list_objects_v2()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(1)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        seen.extend(
            r.common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_owned)),
        );
        seen.extend(r.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
        if r.is_truncated() != Some(true) {
            token = None;
            break;
        }
        let next = r.next_continuation_token().map(str::to_owned);
        assert_ne!(next, token, "the same continuation token twice");
        token = next;
    }
    assert!(token.is_none(), "v2 listing did not end: {seen:?}");
    assert_eq!(seen, want, "v2");

    // v1, following NextMarker
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    for _ in 0..10 {
        let r = c
            .list_objects()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(1)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        seen.extend(
            r.common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_owned)),
        );
        seen.extend(r.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
        if r.is_truncated() != Some(true) {
            marker = None;
            break;
        }
        marker = r.next_marker().map(str::to_owned);
        assert!(
            marker.is_some(),
            "a truncated v1 page with a delimiter has NextMarker"
        );
    }
    assert!(marker.is_none(), "v1 listing did not end: {seen:?}");
    assert_eq!(seen, want, "v1");
    h.shutdown().await;
}

/// MaxKeys=0 is an empty page that is not truncated; an empty delimiter is
/// no delimiter (and not echoed); v1 echoes the marker, empty if none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_edge_parameters() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    for k in ["a/1", "b"] {
        put(&c, "bkt", k, b"x").await;
    }
    let r = c
        .list_objects_v2()
        .bucket("bkt")
        .max_keys(0)
        .send()
        .await
        .unwrap();
    assert_eq!(r.is_truncated(), Some(false));
    assert!(r.contents().is_empty());
    let r = c.list_objects().bucket("bkt").max_keys(0).send().await.unwrap();
    assert_eq!(r.is_truncated(), Some(false));

    let r = c
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.delimiter(), None);
    assert_eq!(r.contents().len(), 2);
    assert!(r.common_prefixes().is_empty());

    let r = c.list_objects().bucket("bkt").send().await.unwrap();
    assert_eq!(r.marker(), Some(""));
    let e = c
        .list_objects()
        .bucket("bkt")
        .max_keys(-1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidArgument");
    h.shutdown().await;
}

/// GET and HEAD honour If-Match (412), If-None-Match (304),
/// If-Modified-Since (304) and If-Unmodified-Since (412).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_reads() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let etag = put(&c, "bkt", "k", b"conditional").await;
    let past = DateTime::from_secs(1_000_000_000);
    let future = DateTime::from_secs(4_000_000_000);

    let get = || c.get_object().bucket("bkt").key("k");
    get().if_match(&etag).send().await.unwrap();
    get().if_none_match("\"0123\"").send().await.unwrap();
    get().if_modified_since(past).send().await.unwrap();
    get().if_unmodified_since(future).send().await.unwrap();

    let e = get().if_match("\"0123\"").send().await.unwrap_err();
    assert_eq!(status(&e), 412);
    assert_eq!(code(&e), "PreconditionFailed");
    let e = get().if_none_match(&etag).send().await.unwrap_err();
    assert_eq!(status(&e), 304);
    let e = get().if_modified_since(future).send().await.unwrap_err();
    assert_eq!(status(&e), 304);
    let e = get().if_unmodified_since(past).send().await.unwrap_err();
    assert_eq!(status(&e), 412);
    // If-Match that holds wins over If-Unmodified-Since that does not.
    get()
        .if_match(&etag)
        .if_unmodified_since(past)
        .send()
        .await
        .unwrap();

    let head = || c.head_object().bucket("bkt").key("k");
    let e = head().if_match("\"0123\"").send().await.unwrap_err();
    assert_eq!(status(&e), 412);
    let e = head().if_none_match(&etag).send().await.unwrap_err();
    assert_eq!(status(&e), 304);
    head().if_match(&etag).send().await.unwrap();
    h.shutdown().await;
}

/// `PUT If-None-Match: *` creates only; `PUT If-Match` replaces only the
/// version the client saw. A refused write leaves the object as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_writes() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let body = |b: &'static [u8]| ByteStream::from_static(b);
    let first = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .if_none_match("*")
        .body(body(b"first"))
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_owned();
    let e = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .if_none_match("*")
        .body(body(b"second"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .if_match("\"00000000000000000000000000000000\"")
        .body(body(b"third"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .if_none_match(&first)
        .body(body(b"third"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412, "If-None-Match with the current ETag");
    let got = c.get_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"first");

    c.put_object()
        .bucket("bkt")
        .key("k")
        .if_match(&first)
        .body(body(b"fourth"))
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"fourth");
    let e = c
        .put_object()
        .bucket("bkt")
        .key("missing")
        .if_match(&first)
        .body(body(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchKey");

    // Copy-source conditions: a failed one is 412 and copies nothing.
    let e = c
        .copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source("bkt/k")
        .copy_source_if_match("\"0123\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = c
        .copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source("bkt/k")
        .copy_source_if_modified_since(DateTime::from_secs(4_000_000_000))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = c
        .head_object()
        .bucket("bkt")
        .key("copy")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 404);
    c.copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source("bkt/k")
        .copy_source_if_none_match("\"0123\"")
        .send()
        .await
        .unwrap();
    h.shutdown().await;
}

/// A CompleteMultipartUpload retried after its answer was lost gets 200
/// and the same ETag, as from AWS; a different upload id is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retried_complete_multipart_upload_succeeds() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("bkt")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"only part"))
        .send()
        .await
        .unwrap();
    let done = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .e_tag(part.e_tag().unwrap())
                .build(),
        )
        .build();
    let complete = || {
        c.complete_multipart_upload()
            .bucket("bkt")
            .key("mp")
            .upload_id(id)
            .multipart_upload(done.clone())
    };
    let first = complete().send().await.unwrap();
    let again = complete().send().await.unwrap();
    assert_eq!(first.e_tag(), again.e_tag());
    let e = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id("0123456789abcdef0123456789abcdef")
        .multipart_upload(done.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");
    h.shutdown().await;
}

/// Encryption, object lock, ACLs beyond private and tagging are not
/// implemented: asking for them is `501 NotImplemented` and stores
/// nothing (never plaintext where encryption was asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unimplemented_features_are_refused_not_ignored() {
    use aws_sdk_s3::types::{ObjectCannedAcl, ObjectLockLegalHoldStatus, ServerSideEncryption};
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let put = || {
        c.put_object()
            .bucket("bkt")
            .key("k")
            .body(ByteStream::from_static(b"secret"))
    };
    let key = "k".repeat(32);
    let key_b64 = {
        use base64_simd::STANDARD;
        STANDARD.encode_to_string(key.as_bytes())
    };
    let key_md5 = base64_simd::STANDARD.encode_to_string(support::md5_bytes(key.as_bytes()));
    let attempts = [
        put()
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_b64)
            .sse_customer_key_md5(&key_md5)
            .send()
            .await,
        put()
            .server_side_encryption(ServerSideEncryption::Aes256)
            .send()
            .await,
        put().tagging("a=b").send().await,
        put().acl(ObjectCannedAcl::PublicRead).send().await,
        put()
            .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
            .send()
            .await,
    ];
    for (i, r) in attempts.into_iter().enumerate() {
        let e = r.unwrap_err();
        assert_eq!(status(&e), 501, "attempt {i}");
        assert_eq!(code(&e), "NotImplemented", "attempt {i}");
    }
    let e = c.head_object().bucket("bkt").key("k").send().await.unwrap_err();
    assert_eq!(status(&e), 404, "a refused PUT stored something");
    put().acl(ObjectCannedAcl::Private).send().await.unwrap();
    h.shutdown().await;
}

/// ListObjectVersions on an unversioned bucket: every object as its null
/// version, paged by key marker, so tools that empty a bucket by listing
/// versions (and deleting them by version id "null") work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_object_versions_shows_null_versions() {
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    for k in ["a", "b", "c"] {
        put(&c, "bkt", k, b"v").await;
    }
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    for _ in 0..10 {
        let r = c
            .list_object_versions()
            .bucket("bkt")
            .max_keys(2)
            .set_key_marker(marker.clone())
            .send()
            .await
            .unwrap();
        for v in r.versions() {
            assert_eq!(v.version_id(), Some("null"));
            assert_eq!(v.is_latest(), Some(true));
            seen.push(v.key().unwrap().to_owned());
        }
        if r.is_truncated() != Some(true) {
            marker = None;
            break;
        }
        marker = r.next_key_marker().map(str::to_owned);
    }
    assert!(marker.is_none());
    assert_eq!(seen, ["a", "b", "c"]);
    let objects: Vec<_> = seen
        .iter()
        .map(|k| {
            ObjectIdentifier::builder()
                .key(k)
                .version_id("null")
                .build()
                .unwrap()
        })
        .collect();
    c.delete_objects()
        .bucket("bkt")
        .delete(Delete::builder().set_objects(Some(objects)).build().unwrap())
        .send()
        .await
        .unwrap();
    c.delete_bucket().bucket("bkt").send().await.unwrap();
    h.shutdown().await;
}

/// Uploads in progress are listed, and take their disk with them when
/// aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multipart_uploads_are_listed_block_delete_bucket_and_abort_frees_disk() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let mut ids = Vec::new();
    for k in ["x/1", "y"] {
        let id = c
            .create_multipart_upload()
            .bucket("bkt")
            .key(k)
            .send()
            .await
            .unwrap()
            .upload_id()
            .unwrap()
            .to_owned();
        c.upload_part()
            .bucket("bkt")
            .key(k)
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from(vec![7u8; 100_000]))
            .send()
            .await
            .unwrap();
        ids.push((k, id));
    }
    let r = c.list_multipart_uploads().bucket("bkt").send().await.unwrap();
    let listed: Vec<_> = r
        .uploads()
        .iter()
        .map(|u| (u.key().unwrap().to_owned(), u.upload_id().unwrap().to_owned()))
        .collect();
    assert_eq!(
        listed,
        ids.iter()
            .map(|(k, i)| ((*k).to_owned(), i.clone()))
            .collect::<Vec<_>>()
    );
    let r = c
        .list_multipart_uploads()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.common_prefixes().len(), 1);
    assert_eq!(r.uploads().len(), 1);

    let upload_bytes = || {
        support::files(&dir.path().join(".uploads"))
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    assert!(upload_bytes() >= 200_000);
    for (k, id) in &ids {
        c.abort_multipart_upload()
            .bucket("bkt")
            .key(*k)
            .upload_id(id)
            .send()
            .await
            .unwrap();
    }
    assert_eq!(upload_bytes(), 0, "aborted uploads left bytes on disk");
    assert!(
        c.list_multipart_uploads()
            .bucket("bkt")
            .send()
            .await
            .unwrap()
            .uploads()
            .is_empty()
    );
    c.delete_bucket().bucket("bkt").send().await.unwrap();
    h.shutdown().await;
}

/// An upload abandoned for longer than `multipart_expiry_secs` is removed
/// with its parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandoned_uploads_expire() {
    let (h, dir) = start(|c| c.limits.multipart_expiry_secs = 1).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let old = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("old")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_owned();
    c.upload_part()
        .bucket("bkt")
        .key("old")
        .upload_id(&old)
        .part_number(1)
        .body(ByteStream::from_static(b"abandoned"))
        .send()
        .await
        .unwrap();
    // Older than the expiry age by any clock.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let new = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("new")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_owned();
    let r = c.list_multipart_uploads().bucket("bkt").send().await.unwrap();
    let ids: Vec<_> = r.uploads().iter().filter_map(|u| u.upload_id()).collect();
    assert_eq!(ids, [new.as_str()]);
    assert!(!dir.path().join(".uploads").join(&old).exists());
    let e = c
        .upload_part()
        .bucket("bkt")
        .key("old")
        .upload_id(&old)
        .part_number(2)
        .body(ByteStream::from_static(b"late"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");
    h.shutdown().await;
}

/// Buckets belong to the key that created them: another key is refused
/// every operation on them (copying out of them included) and cannot
/// create the same name, unless the configuration shares the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buckets_belong_to_the_key_that_created_them() {
    use hipobj_server::config::{AccessKey, Share};
    let (h, _dir) = start(|c| {
        c.credentials.push(AccessKey {
            access_key: "other".into(),
            secret_key: "other-secret".into(),
        });
        c.access.share.push(Share {
            bucket: "shared".into(),
            keys: vec!["other".into()],
        });
    })
    .await;
    let owner = client(&h);
    let other = support::client_for(&h.endpoint(), "other", "other-secret");
    owner.create_bucket().bucket("mine").send().await.unwrap();
    owner.create_bucket().bucket("shared").send().await.unwrap();
    put(&owner, "mine", "k", b"private").await;
    other.create_bucket().bucket("theirs").send().await.unwrap();

    let denied = |r: u16, what: &str| assert_eq!(r, 403, "{what}");
    let e = other
        .get_object()
        .bucket("mine")
        .key("k")
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "GET");
    let e = other
        .head_object()
        .bucket("mine")
        .key("k")
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "HEAD");
    let e = other
        .put_object()
        .bucket("mine")
        .key("k")
        .body(ByteStream::from_static(b"overwrite"))
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "PUT");
    let e = other
        .delete_object()
        .bucket("mine")
        .key("k")
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "DELETE");
    let e = other.list_objects_v2().bucket("mine").send().await.unwrap_err();
    denied(status(&e), "LIST");
    let e = other.delete_bucket().bucket("mine").send().await.unwrap_err();
    denied(status(&e), "DeleteBucket");
    let e = other
        .copy_object()
        .bucket("theirs")
        .key("stolen")
        .copy_source("mine/k")
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "copy out of another key's bucket");
    let e = other.create_bucket().bucket("mine").send().await.unwrap_err();
    assert_eq!(code(&e), "BucketAlreadyExists");
    let got = owner.get_object().bucket("mine").key("k").send().await.unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"private"
    );
    let names = |r: aws_sdk_s3::operation::list_buckets::ListBucketsOutput| {
        r.buckets()
            .iter()
            .filter_map(|b| b.name().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(other.list_buckets().send().await.unwrap()), ["theirs"]);
    assert_eq!(
        names(owner.list_buckets().send().await.unwrap()),
        ["mine", "shared"]
    );

    // The shared bucket is open to the listed key.
    put(&other, "shared", "from-other", b"hello").await;
    let got = owner
        .get_object()
        .bucket("shared")
        .key("from-other")
        .send()
        .await
        .unwrap();
    assert_eq!(got.body.collect().await.unwrap().into_bytes().as_ref(), b"hello");

    // A name deleted by its owner and created again by another key belongs
    // to the new key from then on (the server keeps owners in memory too).
    owner.create_bucket().bucket("gone").send().await.unwrap();
    put(&owner, "gone", "k", b"old").await;
    owner
        .delete_object()
        .bucket("gone")
        .key("k")
        .send()
        .await
        .unwrap();
    owner.delete_bucket().bucket("gone").send().await.unwrap();
    other.create_bucket().bucket("gone").send().await.unwrap();
    put(&other, "gone", "k", b"new").await;
    let e = owner
        .get_object()
        .bucket("gone")
        .key("k")
        .send()
        .await
        .unwrap_err();
    denied(status(&e), "GET from a name another key created again");
    h.shutdown().await;
}

/// DeleteBucket with uploads in progress: by default they are aborted with
/// the bucket, as AWS does (nothing stays on disk, unlistable); with
/// `refuse_delete_with_uploads` the delete is refused instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_bucket_with_uploads_in_progress() {
    for refuse in [false, true] {
        let (h, dir) = start(|c| c.limits.refuse_delete_with_uploads = refuse).await;
        let c = client(&h);
        c.create_bucket().bucket("bkt").send().await.unwrap();
        let id = c
            .create_multipart_upload()
            .bucket("bkt")
            .key("k")
            .send()
            .await
            .unwrap()
            .upload_id()
            .unwrap()
            .to_owned();
        c.upload_part()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from_static(b"part"))
            .send()
            .await
            .unwrap();
        put(&c, "bkt", "obj", b"x").await;
        // Objects still keep a bucket.
        let e = c.delete_bucket().bucket("bkt").send().await.unwrap_err();
        assert_eq!(code(&e), "BucketNotEmpty");
        assert!(
            dir.path().join(".uploads").join(&id).exists(),
            "a refused delete aborted the upload"
        );
        c.delete_object().bucket("bkt").key("obj").send().await.unwrap();
        let r = c.delete_bucket().bucket("bkt").send().await;
        if refuse {
            assert_eq!(code(&r.unwrap_err()), "BucketNotEmpty");
            assert!(dir.path().join(".uploads").join(&id).exists());
        } else {
            r.unwrap();
            assert!(
                support::files(&dir.path().join(".uploads")).is_empty(),
                "parts left on disk"
            );
        }
        h.shutdown().await;
    }
}

/// The smaller S3 details: request ids in errors, DeleteObjects' 1000-key
/// limit, Content-MD5 that is not an MD5, checksums only when asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_ids_key_limits_digests_and_checksum_mode() {
    use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, Delete, ObjectIdentifier};
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();

    // An error's <RequestId> is its x-amz-request-id header.
    let (st, text) = support::raw(
        h.addr(),
        "GET /bkt/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(st, 403);
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix("x-amz-request-id: "))
        .expect("x-amz-request-id header")
        .trim()
        .to_owned();
    assert!(
        text.contains(&format!("<RequestId>{header}</RequestId>")),
        "{text}"
    );

    let many: Vec<_> = (0..1001)
        .map(|i| ObjectIdentifier::builder().key(format!("k{i}")).build().unwrap())
        .collect();
    let e = c
        .delete_objects()
        .bucket("bkt")
        .delete(Delete::builder().set_objects(Some(many)).build().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "MalformedXML");

    let e = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .content_md5("AAAAAA==")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidDigest");

    c.put_object()
        .bucket("bkt")
        .key("sum")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .body(ByteStream::from_static(b"checksummed"))
        .send()
        .await
        .unwrap();
    let plain = c.get_object().bucket("bkt").key("sum").send().await.unwrap();
    assert_eq!(plain.checksum_crc32(), None, "a checksum nobody asked for");
    let asked = c
        .get_object()
        .bucket("bkt")
        .key("sum")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert!(asked.checksum_crc32().is_some());
    let head = c.head_object().bucket("bkt").key("sum").send().await.unwrap();
    assert_eq!(head.checksum_crc32(), None);
    h.shutdown().await;
}
