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

type Client = aws_sdk_s3::Client;

async fn put(c: &Client, bucket: &str, key: &str, body: &'static [u8]) -> String {
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

/// The object's bytes.
async fn get_bytes(c: &Client, bucket: &str, key: &str) -> Vec<u8> {
    let got = c.get_object().bucket(bucket).key(key).send().await.unwrap();
    got.body.collect().await.unwrap().into_bytes().to_vec()
}

/// Starts a multipart upload; its id.
async fn start_upload(c: &Client, bucket: &str, key: &str) -> String {
    let up = c.create_multipart_upload().bucket(bucket).key(key).send().await;
    up.unwrap().upload_id().unwrap().to_owned()
}

/// Uploads part `n`; its ETag.
async fn upload_part(c: &Client, bucket: &str, key: &str, id: &str, n: i32, body: ByteStream) -> String {
    let r = c
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .part_number(n)
        .body(body)
        .send()
        .await;
    r.unwrap().e_tag().unwrap().to_owned()
}

/// A listing page's common prefixes, then its keys.
fn entries<'a>(
    prefixes: impl IntoIterator<Item = Option<&'a str>>,
    keys: impl IntoIterator<Item = Option<&'a str>>,
) -> impl Iterator<Item = String> {
    prefixes.into_iter().chain(keys).flatten().map(str::to_owned)
}

/// One page of one entry of bucket "bkt" with the delimiter "/" after
/// `after` (v2: continuation token; v1: marker), and where the next page
/// starts if this one is truncated (v1: its NextMarker, which a truncated
/// page with a delimiter must carry).
async fn delimited_page(c: &Client, v2: bool, after: Option<String>) -> (Vec<String>, Option<String>) {
    if v2 {
        let r = c
            .list_objects_v2()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(1)
            .set_continuation_token(after);
        let r = r.send().await.unwrap();
        let page = entries(
            r.common_prefixes().iter().map(|p| p.prefix()),
            r.contents().iter().map(|o| o.key()),
        );
        let next = (r.is_truncated() == Some(true)).then(|| {
            r.next_continuation_token()
                .expect("a truncated v2 page's token")
                .to_owned()
        });
        (page.collect(), next)
    } else {
        let r = c
            .list_objects()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(1)
            .set_marker(after);
        let r = r.send().await.unwrap();
        let page = entries(
            r.common_prefixes().iter().map(|p| p.prefix()),
            r.contents().iter().map(|o| o.key()),
        );
        let next = (r.is_truncated() == Some(true)).then(|| {
            r.next_marker()
                .expect("a truncated v1 page with a delimiter has NextMarker")
                .to_owned()
        });
        (page.collect(), next)
    }
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
    for v2 in [true, false] {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        let mut ended = false;
        for _ in 0..10 {
            let (page, next) = delimited_page(&c, v2, after.clone()).await;
            seen.extend(page);
            let Some(next) = next else {
                ended = true;
                break;
            };
            assert_ne!(after.as_ref(), Some(&next), "v2 {v2}: the same token twice");
            after = Some(next);
        }
        assert!(ended, "v2 {v2}: the listing did not end: {seen:?}");
        assert_eq!(seen, want, "v2 {v2}");
    }
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
    let put_if = |key: &'static str, b: &'static [u8]| {
        c.put_object()
            .bucket("bkt")
            .key(key)
            .body(ByteStream::from_static(b))
    };
    let first = put_if("k", b"first").if_none_match("*").send().await.unwrap();
    let first = first.e_tag().unwrap().to_owned();
    let e = put_if("k", b"second")
        .if_none_match("*")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = put_if("k", b"third")
        .if_match("\"00000000000000000000000000000000\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    let e = put_if("k", b"third")
        .if_none_match(&first)
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412, "If-None-Match with the current ETag");
    assert_eq!(get_bytes(&c, "bkt", "k").await, b"first");

    put_if("k", b"fourth").if_match(&first).send().await.unwrap();
    assert_eq!(get_bytes(&c, "bkt", "k").await, b"fourth");
    let e = put_if("missing", b"x").if_match(&first).send().await.unwrap_err();
    assert_eq!(code(&e), "NoSuchKey");

    // Copy-source conditions: a failed one is 412 and copies nothing.
    let copy = || c.copy_object().bucket("bkt").key("copy").copy_source("bkt/k");
    let e = copy().copy_source_if_match("\"0123\"").send().await.unwrap_err();
    assert_eq!(status(&e), 412);
    let e = copy()
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
    copy().copy_source_if_none_match("\"0123\"").send().await.unwrap();
    h.shutdown().await;
}

/// A CompleteMultipartUpload retried after its answer was lost gets 200
/// and the same ETag, as from AWS; a different upload id is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retried_complete_multipart_upload_succeeds() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let id = start_upload(&c, "bkt", "mp").await;
    let etag = upload_part(&c, "bkt", "mp", &id, 1, ByteStream::from_static(b"only part")).await;
    let done = CompletedMultipartUpload::builder()
        .parts(CompletedPart::builder().part_number(1).e_tag(etag).build())
        .build();
    let complete = |id: &str| {
        c.complete_multipart_upload()
            .bucket("bkt")
            .key("mp")
            .upload_id(id)
            .multipart_upload(done.clone())
    };
    let first = complete(&id).send().await.unwrap();
    let again = complete(&id).send().await.unwrap();
    assert_eq!(first.e_tag(), again.e_tag());
    let e = complete("0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchUpload");
    h.shutdown().await;
}

/// SSE-KMS, object lock, grants to other accounts and tagging are not
/// implemented: asking for them is `501 NotImplemented` and stores
/// nothing (never plaintext where encryption was asked for). An SSE-C key
/// on plain HTTP is refused (400) and nothing is stored, unless the server
/// is told to take such keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unimplemented_features_are_refused_not_ignored() {
    use aws_sdk_s3::types::{ObjectCannedAcl, ObjectLockLegalHoldStatus, ServerSideEncryption};
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let put = || {
        c.put_object()
            .bucket("bkt")
            .key("k")
            .body(ByteStream::from_static(b"secret"))
    };
    let key = "k".repeat(32);
    let key_b64 = base64_simd::STANDARD.encode_to_string(key.as_bytes());
    let key_md5 = base64_simd::STANDARD.encode_to_string(support::md5_bytes(key.as_bytes()));
    let sse_c = || {
        put()
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_b64)
            .sse_customer_key_md5(&key_md5)
    };
    let e = sse_c().send().await.unwrap_err();
    assert_eq!(
        (status(&e), code(&e).as_str()),
        (400, "InvalidRequest"),
        "SSE-C over http"
    );
    let attempts = [
        put()
            .server_side_encryption(ServerSideEncryption::AwsKms)
            .send()
            .await,
        put().tagging("a=b").send().await,
        put().grant_read("id=someone-else").send().await,
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
    drop(dir);

    // Told to take SSE-C keys over http (a test rig without TLS).
    let (h, _dir) = start(|c| c.encryption.sse_c_over_http = true).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let put = || {
        c.put_object()
            .bucket("bkt")
            .key("k")
            .body(ByteStream::from_static(b"secret"))
    };
    put()
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_b64)
        .sse_customer_key_md5(&key_md5)
        .send()
        .await
        .unwrap();
    let e = c.get_object().bucket("bkt").key("k").send().await.unwrap_err();
    assert_eq!(status(&e), 400, "an SSE-C object read without its key");
    let got = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key_b64)
        .sse_customer_key_md5(&key_md5)
        .send()
        .await
        .unwrap();
    assert_eq!(got.sse_customer_key_md5(), Some(key_md5.as_str()));
    assert_eq!(&got.body.collect().await.unwrap().into_bytes()[..], b"secret");
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
        let id = start_upload(&c, "bkt", k).await;
        upload_part(&c, "bkt", k, &id, 1, ByteStream::from(vec![7u8; 100_000])).await;
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
    let old = start_upload(&c, "bkt", "old").await;
    upload_part(&c, "bkt", "old", &old, 1, ByteStream::from_static(b"abandoned")).await;
    // Older than the expiry age by any clock.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let new = start_upload(&c, "bkt", "new").await;
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
    assert_eq!(get_bytes(&owner, "mine", "k").await, b"private");
    assert_eq!(support::bucket_names(&other).await, ["theirs"]);
    assert_eq!(support::bucket_names(&owner).await, ["mine", "shared"]);

    // The shared bucket is open to the listed key.
    put(&other, "shared", "from-other", b"hello").await;
    assert_eq!(get_bytes(&owner, "shared", "from-other").await, b"hello");

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
        let id = start_upload(&c, "bkt", "k").await;
        upload_part(&c, "bkt", "k", &id, 1, ByteStream::from_static(b"part")).await;
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
