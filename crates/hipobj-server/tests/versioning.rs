//! S3 versioning on the filesystem store, through aws-sdk-s3: version ids,
//! delete markers, removing versions, ListObjectVersions and its paging,
//! suspended versioning, objects written before versioning, and what the
//! current-object listings show.
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Delete, ObjectIdentifier, VersioningConfiguration};
use support::{client, code, start};

type Client = aws_sdk_s3::Client;

fn status<E>(e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> u16 {
    e.raw_response().map_or(0, |r| r.status().as_u16())
}

fn header<E>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    name: &str,
) -> Option<String> {
    e.raw_response()
        .and_then(|r| r.headers().get(name))
        .map(str::to_owned)
}

async fn versioning(c: &Client, bucket: &str, s: BucketVersioningStatus) {
    c.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(s).build())
        .send()
        .await
        .unwrap();
}

/// Puts `body` at `key`; the version id the answer names.
async fn put(c: &Client, bucket: &str, key: &str, body: &str) -> Option<String> {
    let r = c
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await
        .unwrap();
    r.version_id().map(str::to_owned)
}

/// The bytes of `key` (of `version` if given).
async fn get(c: &Client, bucket: &str, key: &str, version: Option<&str>) -> String {
    let r = c
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .unwrap();
    String::from_utf8(r.body.collect().await.unwrap().into_bytes().to_vec()).unwrap()
}

/// Every version and delete marker of the bucket in one listing: (key,
/// version id, is latest, is a marker), versions first.
async fn all_versions(c: &Client, bucket: &str) -> Vec<(String, String, bool, bool)> {
    let r = c.list_object_versions().bucket(bucket).send().await.unwrap();
    let mut out: Vec<_> = r
        .versions()
        .iter()
        .map(|v| {
            (
                v.key().unwrap().to_owned(),
                v.version_id().unwrap().to_owned(),
                v.is_latest().unwrap(),
                false,
            )
        })
        .collect();
    out.extend(r.delete_markers().iter().map(|m| {
        (
            m.key().unwrap().to_owned(),
            m.version_id().unwrap().to_owned(),
            m.is_latest().unwrap(),
            true,
        )
    }));
    out
}

async fn listed_keys(c: &Client, bucket: &str) -> Vec<String> {
    let r = c.list_objects_v2().bucket(bucket).send().await.unwrap();
    let v2: Vec<String> = r.contents().iter().map(|o| o.key().unwrap().to_owned()).collect();
    let r = c.list_objects().bucket(bucket).send().await.unwrap();
    let v1: Vec<String> = r.contents().iter().map(|o| o.key().unwrap().to_owned()).collect();
    assert_eq!(v1, v2, "ListObjects and ListObjectsV2 differ");
    v2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versions_markers_and_removal() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let got = c.get_bucket_versioning().bucket("bkt").send().await.unwrap();
    assert_eq!(got.status(), None, "a bucket never versioned has no status");
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    let got = c.get_bucket_versioning().bucket("bkt").send().await.unwrap();
    assert_eq!(got.status(), Some(&BucketVersioningStatus::Enabled));

    // Each write is a version of its own, readable by its id.
    let mut ids = Vec::new();
    for body in ["one", "two", "three"] {
        ids.push(put(&c, "bkt", "k", body).await.unwrap());
    }
    assert_eq!(ids.iter().collect::<std::collections::HashSet<_>>().len(), 3);
    for (id, body) in ids.iter().zip(["one", "two", "three"]) {
        assert_eq!(get(&c, "bkt", "k", Some(id)).await, body);
    }
    assert_eq!(get(&c, "bkt", "k", None).await, "three");
    let head = c.head_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(head.version_id(), Some(ids[2].as_str()));

    // Newest first, only the newest is latest.
    let listed = all_versions(&c, "bkt").await;
    let want: Vec<_> = [(2, true), (1, false), (0, false)]
        .iter()
        .map(|(i, l)| ("k".to_owned(), ids[*i].clone(), *l, false))
        .collect();
    assert_eq!(listed, want);

    // A version id of another key is not a version of this one.
    put(&c, "bkt", "other", "x").await;
    let e = c
        .get_object()
        .bucket("bkt")
        .key("other")
        .version_id(&ids[0])
        .send()
        .await
        .unwrap_err();
    assert_eq!((status(&e), code(&e).as_str()), (404, "NoSuchVersion"));

    // A delete without a version id adds a marker: the key reads as gone.
    let del = c.delete_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(del.delete_marker(), Some(true));
    let marker = del.version_id().unwrap().to_owned();
    let e = c.get_object().bucket("bkt").key("k").send().await.unwrap_err();
    assert_eq!((status(&e), code(&e).as_str()), (404, "NoSuchKey"));
    assert_eq!(header(&e, "x-amz-delete-marker").as_deref(), Some("true"));
    let e = c.head_object().bucket("bkt").key("k").send().await.unwrap_err();
    assert_eq!(status(&e), 404);
    assert_eq!(header(&e, "x-amz-delete-marker").as_deref(), Some("true"));
    // The marker's own id is not something to GET.
    let e = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .version_id(&marker)
        .send()
        .await
        .unwrap_err();
    assert_eq!((status(&e), code(&e).as_str()), (405, "MethodNotAllowed"));
    assert_eq!(
        listed_keys(&c, "bkt").await,
        ["other"],
        "a key whose latest is a marker is listed"
    );
    // Older versions stay readable.
    assert_eq!(get(&c, "bkt", "k", Some(&ids[1])).await, "two");

    // Removing the marker brings the object back.
    let del = c
        .delete_object()
        .bucket("bkt")
        .key("k")
        .version_id(&marker)
        .send()
        .await
        .unwrap();
    assert_eq!(del.delete_marker(), Some(true));
    assert_eq!(del.version_id(), Some(marker.as_str()));
    assert_eq!(get(&c, "bkt", "k", None).await, "three");
    assert_eq!(listed_keys(&c, "bkt").await, ["k", "other"]);

    // Removing the newest version makes the one before it current; removing
    // one in the middle changes nothing else.
    c.delete_object()
        .bucket("bkt")
        .key("k")
        .version_id(&ids[2])
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "bkt", "k", None).await, "two");
    c.delete_object()
        .bucket("bkt")
        .key("k")
        .version_id(&ids[0])
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "bkt", "k", None).await, "two");
    let e = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .version_id(&ids[0])
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchVersion");
    let keys: Vec<_> = all_versions(&c, "bkt").await.into_iter().map(|v| v.1).collect();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&ids[1]));

    // A bucket with versions left is not empty.
    c.delete_object()
        .bucket("bkt")
        .key("k")
        .version_id(&ids[1])
        .send()
        .await
        .unwrap();
    c.delete_object().bucket("bkt").key("other").send().await.unwrap();
    let e = c.delete_bucket().bucket("bkt").send().await.unwrap_err();
    assert_eq!(code(&e), "BucketNotEmpty");
    let objects: Vec<_> = all_versions(&c, "bkt")
        .await
        .into_iter()
        .map(|(k, id, _, _)| ObjectIdentifier::builder().key(k).version_id(id).build().unwrap())
        .collect();
    assert_eq!(objects.len(), 2, "other's version and its marker");
    let r = c
        .delete_objects()
        .bucket("bkt")
        .delete(Delete::builder().set_objects(Some(objects)).build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.deleted().len(), 2);
    assert_eq!(
        r.deleted()
            .iter()
            .filter(|d| d.delete_marker() == Some(true))
            .count(),
        1
    );
    c.delete_bucket().bucket("bkt").send().await.unwrap();
    // A bucket made again with the name starts unversioned.
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let got = c.get_bucket_versioning().bucket("bkt").send().await.unwrap();
    assert_eq!(got.status(), None);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_object_versions_pages_each_entry_once() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    let mut want = Vec::new();
    for key in ["a", "b/x", "b/y", "c"] {
        for i in 0..3 {
            want.push((
                key.to_owned(),
                put(&c, "bkt", key, &format!("{key}{i}")).await.unwrap(),
            ));
        }
    }
    let del = c.delete_object().bucket("bkt").key("c").send().await.unwrap();
    want.push(("c".into(), del.version_id().unwrap().to_owned()));

    let mut seen: Vec<(String, String)> = Vec::new();
    let (mut km, mut vm): (Option<String>, Option<String>) = (None, None);
    for _ in 0..100 {
        let r = c
            .list_object_versions()
            .bucket("bkt")
            .max_keys(1)
            .set_key_marker(km.clone())
            .set_version_id_marker(vm.clone())
            .send()
            .await
            .unwrap();
        let page: Vec<_> = r
            .versions()
            .iter()
            .map(|v| (v.key().unwrap().to_owned(), v.version_id().unwrap().to_owned()))
            .chain(
                r.delete_markers()
                    .iter()
                    .map(|m| (m.key().unwrap().to_owned(), m.version_id().unwrap().to_owned())),
            )
            .collect();
        assert_eq!(page.len(), 1, "max-keys=1");
        seen.extend(page);
        if r.is_truncated() != Some(true) {
            km = None;
            break;
        }
        km = r.next_key_marker().map(str::to_owned);
        vm = r.next_version_id_marker().map(str::to_owned);
    }
    assert!(km.is_none(), "the listing never ended");
    let mut sorted_seen = seen.clone();
    sorted_seen.sort();
    sorted_seen.dedup();
    assert_eq!(sorted_seen.len(), seen.len(), "an entry came twice: {seen:?}");
    let mut sorted_want = want.clone();
    sorted_want.sort();
    assert_eq!(sorted_seen, sorted_want);
    // Keys in order, each key's versions newest first.
    let mut expected = Vec::new();
    for key in ["a", "b/x", "b/y", "c"] {
        let mut of: Vec<_> = want.iter().filter(|(k, _)| k == key).cloned().collect();
        of.reverse();
        expected.extend(of);
    }
    assert_eq!(seen, expected);

    // With a delimiter the folder is one common prefix.
    let r = c
        .list_object_versions()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<_> = r.common_prefixes().iter().map(|p| p.prefix().unwrap()).collect();
    assert_eq!(prefixes, ["b/"]);
    assert_eq!(r.versions().len(), 6);
    assert_eq!(r.delete_markers().len(), 1);
    let r = c
        .list_object_versions()
        .bucket("bkt")
        .prefix("b/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.versions().len(), 6);
    // The version folders are never keys.
    assert_eq!(listed_keys(&c, "bkt").await, ["a", "b/x", "b/y"]);
    let r = c
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<_> = r.common_prefixes().iter().map(|p| p.prefix().unwrap()).collect();
    assert_eq!(prefixes, ["b/"]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn null_versions_before_and_while_suspended() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    // Written before versioning: afterwards the null version.
    assert_eq!(put(&c, "bkt", "k", "plain").await, None);
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    assert_eq!(
        all_versions(&c, "bkt").await,
        [("k".to_owned(), "null".to_owned(), true, false)]
    );
    let v1 = put(&c, "bkt", "k", "v1").await.unwrap();
    assert_eq!(get(&c, "bkt", "k", Some("null")).await, "plain");
    assert_eq!(get(&c, "bkt", "k", None).await, "v1");
    let listed = all_versions(&c, "bkt").await;
    assert_eq!(
        listed,
        [
            ("k".to_owned(), v1.clone(), true, false),
            ("k".to_owned(), "null".to_owned(), false, false),
        ]
    );

    // Suspended: a write is the null version and replaces the earlier one,
    // other versions are kept.
    versioning(&c, "bkt", BucketVersioningStatus::Suspended).await;
    let got = c.get_bucket_versioning().bucket("bkt").send().await.unwrap();
    assert_eq!(got.status(), Some(&BucketVersioningStatus::Suspended));
    assert_eq!(put(&c, "bkt", "k", "s1").await, None);
    assert_eq!(put(&c, "bkt", "k", "s2").await, None);
    assert_eq!(get(&c, "bkt", "k", None).await, "s2");
    assert_eq!(get(&c, "bkt", "k", Some("null")).await, "s2");
    assert_eq!(get(&c, "bkt", "k", Some(&v1)).await, "v1");
    let listed = all_versions(&c, "bkt").await;
    assert_eq!(
        listed,
        [
            ("k".to_owned(), "null".to_owned(), true, false),
            ("k".to_owned(), v1.clone(), false, false),
        ]
    );
    // A delete while suspended is a null marker, replacing the null version.
    let del = c.delete_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(del.delete_marker(), Some(true));
    assert_eq!(del.version_id(), Some("null"));
    let listed = all_versions(&c, "bkt").await;
    assert_eq!(
        listed,
        [
            ("k".to_owned(), v1.clone(), false, false),
            ("k".to_owned(), "null".to_owned(), true, true),
        ]
    );
    assert!(listed_keys(&c, "bkt").await.is_empty());
    c.delete_object()
        .bucket("bkt")
        .key("k")
        .version_id("null")
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "bkt", "k", None).await, "v1");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_uploads_and_conditions_use_versions() {
    let (h, _dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    let v1 = put(&c, "bkt", "k", "first").await.unwrap();
    put(&c, "bkt", "k", "second").await.unwrap();

    // Copying an older version over its key restores it as a new version.
    let r = c
        .copy_object()
        .bucket("bkt")
        .key("k")
        .copy_source(format!("bkt/k?versionId={v1}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.copy_source_version_id(), Some(v1.as_str()));
    let restored = r.version_id().unwrap().to_owned();
    assert_ne!(restored, v1);
    assert_eq!(get(&c, "bkt", "k", None).await, "first");

    // A multipart upload is a version too, and a part can copy a version.
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("m")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part_copy()
        .bucket("bkt")
        .key("m")
        .upload_id(id)
        .part_number(1)
        .copy_source(format!("bkt/k?versionId={v1}"))
        .send()
        .await
        .unwrap();
    assert_eq!(part.copy_source_version_id(), Some(v1.as_str()));
    let etag = part.copy_part_result().unwrap().e_tag().unwrap().to_owned();
    let done = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("m")
        .upload_id(id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(etag)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(done.version_id().is_some());
    assert_eq!(get(&c, "bkt", "m", None).await, "first");

    // Conditional writes see the current version.
    let cur = c.head_object().bucket("bkt").key("k").send().await.unwrap();
    let etag = cur.e_tag().unwrap().to_owned();
    let cond = |m: &str| {
        c.put_object()
            .bucket("bkt")
            .key("k")
            .if_match(m)
            .body(ByteStream::from_static(b"third"))
    };
    let e = cond("\"0123\"").send().await.unwrap_err();
    assert_eq!(status(&e), 412);
    cond(&etag).send().await.unwrap();
    let e = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .if_none_match("*")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(status(&e), 412);
    // With a marker latest the key does not exist for conditions.
    c.delete_object().bucket("bkt").key("k").send().await.unwrap();
    let e = cond(&etag).send().await.unwrap_err();
    assert_eq!(status(&e), 404);
    c.put_object()
        .bucket("bkt")
        .key("k")
        .if_none_match("*")
        .body(ByteStream::from_static(b"again"))
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "bkt", "k", None).await, "again");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_keep_every_version() {
    use std::os::unix::fs::MetadataExt;
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { put(&c, "bkt", "k", &format!("body {i}")).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    let listed = all_versions(&c, "bkt").await;
    assert_eq!(listed.len(), 16);
    let mut got: Vec<_> = listed.iter().map(|v| v.1.clone()).collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
    // The current object is the newest version listed.
    let newest = &listed[0];
    assert!(newest.2);
    let head = c.head_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(head.version_id(), Some(newest.1.as_str()));
    let current = get(&c, "bkt", "k", None).await;
    assert_eq!(get(&c, "bkt", "k", Some(&newest.1)).await, current);
    // On disk: each version has its own place in the order, and the object
    // file is the newest of them, not merely some version.
    let bucket = dir.path().join("bkt");
    let mut entries: Vec<String> = std::fs::read_dir(bucket.join("v-o-6b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    let seqs: std::collections::HashSet<_> = entries
        .iter()
        .map(|n| n.split('-').next().unwrap().to_owned())
        .collect();
    assert_eq!(seqs.len(), 16, "two versions share a place: {entries:?}");
    let last = entries.last().unwrap();
    assert!(last.ends_with(&newest.1));
    let ino = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(bucket.join("o-6b")), ino(bucket.join("v-o-6b").join(last)));
    h.shutdown().await;
}

/// What a crash between adding a version and pointing the object file at
/// it leaves (the object file names the version before): reads and
/// listings go by the version folder, and the next write repairs the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_current_name_is_tolerated() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    let v1 = put(&c, "bkt", "k", "the old one").await.unwrap();
    put(&c, "bkt", "k", "new").await.unwrap();
    let bucket = dir.path().join("bkt");
    let current = bucket.join("o-6b");
    let folder = bucket.join("v-o-6b");
    let old = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_str().unwrap().ends_with(&v1))
        .unwrap();
    std::fs::remove_file(&current).unwrap();
    std::fs::hard_link(&old, &current).unwrap();
    assert_eq!(get(&c, "bkt", "k", None).await, "new");
    let r = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    assert_eq!(r.contents()[0].size(), Some(3));
    assert_eq!(
        r.contents()[0].e_tag(),
        c.head_object()
            .bucket("bkt")
            .key("k")
            .send()
            .await
            .unwrap()
            .e_tag()
    );
    put(&c, "bkt", "k", "newer").await.unwrap();
    assert_eq!(std::fs::read(&current).unwrap()[..5], *b"newer");
    h.shutdown().await;
}

/// What a crash while adding a key's first version can leave, an empty
/// version folder, lists nothing and does not keep the bucket from being
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_version_folder_is_no_object() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("bkt").send().await.unwrap();
    versioning(&c, "bkt", BucketVersioningStatus::Enabled).await;
    std::fs::create_dir(dir.path().join("bkt").join("v-o-6b")).unwrap();
    assert!(listed_keys(&c, "bkt").await.is_empty());
    assert!(all_versions(&c, "bkt").await.is_empty());
    let e = c.get_object().bucket("bkt").key("k").send().await.unwrap_err();
    assert_eq!(code(&e), "NoSuchKey");
    c.delete_bucket().bucket("bkt").send().await.unwrap();
    h.shutdown().await;
}
