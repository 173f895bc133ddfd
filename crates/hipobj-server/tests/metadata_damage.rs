//! Damage to the store's files, as a bad disk, a careless operator or a
//! crash of an older version can leave it, played against the server:
//!
//! * lost or damaged bucket metadata (the owner record, the versioning
//!   state, an ACL) fails closed: the bucket refuses access with an error
//!   that names the repair, and the damage is counted, never widening
//!   access or silently changing what a write does;
//! * a damaged object file is left out of listings (logged, counted) and
//!   fails only its own reads, and no error names the server's files.
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use hipobj_server::config::AccessKey;
use support::{bucket_names, client, client_for, code, raw, start};

const OTHER: &str = "hipobj-other";
const OTHER_SK: &str = "hipobj-other-secret";

fn add_other_key(c: &mut hipobj_server::Config) {
    c.credentials.push(AccessKey {
        access_key: OTHER.into(),
        secret_key: OTHER_SK.into(),
    });
}

/// The value of counter `name` in `/.hipobj/metrics` (`None`: not there).
async fn metric(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    let (_, text) = raw(
        addr,
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    support::metrics::value(&text, name).map(|v| v as u64)
}

/// The message of a failed call's S3 error.
fn message<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> String
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    e.as_service_error()
        .and_then(|s| s.message())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("not a service error: {e:?}"))
}

async fn put(c: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &'static [u8]) {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_or_empty_owner_record_closes_the_bucket_to_everyone() {
    let (h, dir) = start(add_other_key).await;
    let owner = client(&h);
    let other = client_for(&h.endpoint(), OTHER, OTHER_SK);
    owner.create_bucket().bucket("closed").send().await.unwrap();
    put(&owner, "closed", "secret", b"the owner's secret").await;
    let record = dir.path().join(".owners").join("closed");
    assert!(record.is_file());

    for damage in ["missing", "empty"] {
        match damage {
            "missing" => std::fs::remove_file(&record).unwrap(),
            _ => std::fs::write(&record, b"").unwrap(),
        }
        // The server restarted would have no memory of the record; this
        // one must not trust its memory either once the file is read
        // again, so start a fresh server on the same directory.
        let (h2, _unused) = start(|c| {
            add_other_key(c);
            c.storage = hipobj_server::config::StorageConfig::Fs {
                data_dir: dir.path().to_path_buf(),
            };
        })
        .await;
        let owner = client(&h2);
        let other = client_for(&h2.endpoint(), OTHER, OTHER_SK);
        let before = metric(h2.addr(), "hipobj_store_metadata_refusals_total")
            .await
            .unwrap_or(0);
        for c in [&owner, &other] {
            let e = c
                .get_object()
                .bucket("closed")
                .key("secret")
                .send()
                .await
                .unwrap_err();
            assert_eq!(code(&e), "InternalError", "{damage}");
            assert!(
                message(&e).contains("hipobj-server fsck"),
                "{damage}: {}",
                message(&e)
            );
            let e = c.list_objects_v2().bucket("closed").send().await.unwrap_err();
            assert_eq!(code(&e), "InternalError", "{damage}");
            let e = c
                .put_object()
                .bucket("closed")
                .key("new")
                .body(ByteStream::from_static(b"x"))
                .send()
                .await
                .unwrap_err();
            assert_eq!(code(&e), "InternalError", "{damage}");
            // Nobody sees whose the bucket is.
            assert!(!bucket_names(c).await.contains(&"closed".to_owned()), "{damage}");
        }
        // Nobody can take the name over either.
        let e = other.create_bucket().bucket("closed").send().await.unwrap_err();
        assert_eq!(code(&e), "InternalError", "{damage}");
        let after = metric(h2.addr(), "hipobj_store_metadata_refusals_total").await;
        assert!(
            after.is_some_and(|n| n > before),
            "{damage}: not counted ({after:?})"
        );
        h2.shutdown().await;
    }
    drop((owner, other));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_versioning_state_refuses_writes_instead_of_unversioning_them() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("ver").send().await.unwrap();
    c.put_bucket_versioning()
        .bucket("ver")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    put(&c, "ver", "k", b"version one").await;
    h.shutdown().await;

    std::fs::write(dir.path().join(".versioning").join("ver"), b"").unwrap();
    let (h, _unused) = start(|c| {
        c.storage = hipobj_server::config::StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        };
    })
    .await;
    let c = client(&h);
    let e = c
        .put_object()
        .bucket("ver")
        .key("k")
        .body(ByteStream::from_static(b"would replace version one"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InternalError");
    assert!(message(&e).contains("versioning state"), "{}", message(&e));
    let e = c.get_bucket_versioning().bucket("ver").send().await.unwrap_err();
    assert_eq!(code(&e), "InternalError");
    // Nothing was replaced or unversioned: repairing the state shows the
    // one version as it was.
    std::fs::write(dir.path().join(".versioning").join("ver"), b"Enabled").unwrap();
    h.shutdown().await;
    let (h, _unused) = start(|c| {
        c.storage = hipobj_server::config::StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        };
    })
    .await;
    let c = client(&h);
    let vs = c.list_object_versions().bucket("ver").send().await.unwrap();
    assert_eq!(vs.versions().len(), 1);
    let got = c.get_object().bucket("ver").key("k").send().await.unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"version one"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_acl_is_refused_not_read_as_private_or_public() {
    let (h, dir) = start(|c| c.public_access = true).await;
    let c = client(&h);
    c.create_bucket().bucket("acl").send().await.unwrap();
    put(&c, "acl", "k", b"data").await;
    h.shutdown().await;
    std::fs::create_dir_all(dir.path().join(".acls")).unwrap();
    std::fs::write(dir.path().join(".acls").join("acl"), b"public-read-wri").unwrap();
    let (h, _unused) = start(|c| {
        c.public_access = true;
        c.storage = hipobj_server::config::StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        };
    })
    .await;
    let e = client(&h)
        .get_bucket_acl()
        .bucket("acl")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InternalError");
    // A stranger is refused too (not let in by a half-written grant).
    let (status, _) = raw(
        h.addr(),
        "GET /acl/k HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_ne!(status, 200);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_truncated_object_is_left_out_of_listings_and_fails_only_its_own_get() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("lst").send().await.unwrap();
    for k in ["a", "b", "c"] {
        put(&c, "lst", k, b"some bytes of an object").await;
    }
    // Truncate b's file to a few bytes: its trailer is gone.
    let bdir = dir.path().join("lst");
    let b_file = std::fs::read_dir(&bdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap() == "o-62")
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&b_file).unwrap();
    f.set_len(5).unwrap();
    drop(f);

    let before = metric(h.addr(), "hipobj_store_listing_skipped_total")
        .await
        .unwrap_or(0);
    let v2 = c.list_objects_v2().bucket("lst").send().await.unwrap();
    let keys: Vec<_> = v2.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["a", "c"]);
    let v1 = c.list_objects().bucket("lst").send().await.unwrap();
    let keys: Vec<_> = v1.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["a", "c"]);
    let after = metric(h.addr(), "hipobj_store_listing_skipped_total").await;
    assert!(after.is_some_and(|n| n >= before + 2), "not counted ({after:?})");

    let e = c.get_object().bucket("lst").key("b").send().await.unwrap_err();
    assert_eq!(code(&e), "InternalError");
    let data_dir = dir.path().canonicalize().unwrap();
    assert!(
        !message(&e).contains(data_dir.to_str().unwrap()) && !message(&e).contains("o-62"),
        "the error names the server's files: {}",
        message(&e)
    );
    let got = c.get_object().bucket("lst").key("a").send().await.unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"some bytes of an object"
    );
    h.shutdown().await;
}
