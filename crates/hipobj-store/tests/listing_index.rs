//! The listings' index (issue 40, "An index that scales"): what a listing
//! of the index gives is what a listing of the files gives, for any
//! prefix, delimiter and page size; pages continue across changes to the
//! bucket; and a store opened on a folder that changed behind its back
//! (a crash, a power cut, another release) lists the files as they are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use s3s::S3;
use s3s::dto;
use support::{brute, bucket, delete, open, page, put, req, walk};

/// A few thousand keys under prefixes, with delimiters at several depths,
/// keys that are a prefix of others, non-ASCII keys and long keys (over
/// 100 bytes, stored under a hash of the key).
fn keys() -> Vec<String> {
    let mut keys = Vec::new();
    for top in ["a", "a-b", "b", "dir", "é"] {
        for mid in 0..12 {
            for leaf in 0..40 {
                keys.push(format!("{top}/{mid:02}/{leaf}"));
            }
            keys.push(format!("{top}/{mid:02}"));
        }
        keys.push(top.to_owned());
        keys.push(format!("{top}-{}", "x".repeat(120)));
    }
    keys.push("a//double".into());
    keys.push("z".into());
    keys
}

#[test]
fn the_indexed_listing_is_the_brute_force_listing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let mut all = keys();
    rt.block_on(async {
        bucket(&s, "bkt").await;
        for k in &all {
            put(&s, "bkt", k, k.as_bytes()).await;
        }
        // Some go again, so the index has seen removals as well.
        for k in all.iter().step_by(7) {
            delete(&s, "bkt", k).await;
        }
    });
    let gone: std::collections::HashSet<String> = all.iter().step_by(7).cloned().collect();
    all.retain(|k| !gone.contains(k));
    assert!(all.len() > 2000);

    let prefixes = prop_oneof![
        Just(String::new()),
        Just("a".to_owned()),
        Just("a/".to_owned()),
        Just("a/0".to_owned()),
        Just("dir/11/".to_owned()),
        Just("é/".to_owned()),
        Just("nothing".to_owned()),
        "[abdz/é0-9-]{0,5}",
    ];
    let delimiters = prop_oneof![
        Just(None),
        Just(Some("/".to_owned())),
        Just(Some("-".to_owned())),
        Just(Some("/0".to_owned())),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    runner
        .run(&(prefixes, delimiters, 1..400i32), |(prefix, delim, max)| {
            let got = rt.block_on(walk(&s, "bkt", &prefix, delim.as_deref(), max));
            prop_assert_eq!(got, brute(&all, &prefix, delim.as_deref()));
            Ok(())
        })
        .unwrap();
}

#[tokio::test]
async fn pages_continue_across_changes_to_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    bucket(&s, "bkt").await;
    for i in 0..100 {
        put(&s, "bkt", &format!("k{i:03}"), b"x").await;
    }
    let (first, _, token) = page(&s, "bkt", "", None, 10, None).await;
    assert_eq!(first.last().map(String::as_str), Some("k009"));
    // Between two pages: a key before the token is added, the next key is
    // removed, and keys after the token come and go.
    put(&s, "bkt", "k000a", b"x").await;
    delete(&s, "bkt", "k010").await;
    delete(&s, "bkt", "k050").await;
    put(&s, "bkt", "k0105", b"x").await;
    put(&s, "bkt", "zz", b"x").await;
    let (second, _, _) = page(&s, "bkt", "", None, 5, token).await;
    assert_eq!(second, ["k0105", "k011", "k012", "k013", "k014"]);
    // The walk from the start is the bucket as it is now.
    let rest = walk(&s, "bkt", "", None, 33).await;
    let mut want: Vec<String> = (0..100)
        .filter(|i| *i != 10 && *i != 50)
        .map(|i| format!("k{i:03}"))
        .collect();
    want.extend(["k000a".to_owned(), "k0105".to_owned(), "zz".to_owned()]);
    want.sort();
    assert_eq!(rest, want);
}

/// The names of a bucket folder's object files for `key` (the store's
/// layout, docs/server.md).
fn object_file(root: &std::path::Path, bucket: &str, key: &str) -> std::path::PathBuf {
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    root.join(bucket).join(format!("o-{hex}"))
}

#[tokio::test]
async fn a_folder_changed_behind_the_index_lists_as_it_is_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let first = open(&root);
    bucket(&first, "bkt").await;
    for k in ["a", "b", "c"] {
        put(&first, "bkt", k, k.as_bytes()).await;
    }
    assert_eq!(walk(&first, "bkt", "", None, 1000).await, ["a", "b", "c"]);
    // What a crash could leave: an object committed whose index entry was
    // never made ("d"), and one removed whose entry stayed ("b"). The
    // first store is still open, as a store left over in the process.
    std::fs::copy(object_file(&root, "bkt", "a"), object_file(&root, "bkt", "d")).unwrap();
    std::fs::remove_file(object_file(&root, "bkt", "b")).unwrap();
    // The removed one is never listed, even by the store that indexed it.
    assert!(
        !walk(&first, "bkt", "", None, 1000)
            .await
            .contains(&"b".to_owned())
    );
    let second = open(&root);
    assert_eq!(walk(&second, "bkt", "", None, 1000).await, ["a", "c", "d"]);
    assert_eq!(walk(&first, "bkt", "", None, 1000).await, ["a", "c", "d"]);
    drop((first, second));
    // A data directory as an earlier release left it (no index anywhere):
    // indexed at the first listing.
    std::fs::remove_file(object_file(&root, "bkt", "a")).unwrap();
    let third = open(&root);
    assert_eq!(walk(&third, "bkt", "", None, 2).await, ["c", "d"]);
}

#[tokio::test]
async fn a_deleted_bucket_made_again_lists_nothing_of_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    bucket(&s, "bkt").await;
    put(&s, "bkt", "k", b"x").await;
    assert_eq!(walk(&s, "bkt", "", None, 10).await, ["k"]);
    delete(&s, "bkt", "k").await;
    s.delete_bucket(req(dto::DeleteBucketInput::builder()
        .bucket("bkt".into())
        .build()
        .unwrap()))
        .await
        .unwrap();
    bucket(&s, "bkt").await;
    assert!(walk(&s, "bkt", "", None, 10).await.is_empty());
    put(&s, "bkt", "j", b"x").await;
    assert_eq!(walk(&s, "bkt", "", None, 10).await, ["j"]);
}

async fn versions(s: &hipobj_store::fs::FsStore, max: i32) -> Vec<(String, String, bool)> {
    let mut all = Vec::new();
    let (mut km, mut im) = (None, None);
    loop {
        let out = s
            .list_object_versions(req(dto::ListObjectVersionsInput::builder()
                .bucket("bkt".into())
                .max_keys(Some(max))
                .key_marker(km.clone())
                .version_id_marker(im.clone())
                .build()
                .unwrap()))
            .await
            .unwrap()
            .output;
        let mut page: Vec<(String, String, bool)> = Vec::new();
        for v in out.versions.unwrap_or_default() {
            page.push((v.key.unwrap(), v.version_id.unwrap(), false));
        }
        for m in out.delete_markers.unwrap_or_default() {
            page.push((m.key.unwrap(), m.version_id.unwrap(), true));
        }
        assert!(page.len() <= usize::try_from(max).unwrap());
        all.extend(page);
        if out.is_truncated != Some(true) {
            return all;
        }
        km = out.next_key_marker;
        im = out.next_version_id_marker;
    }
}

#[tokio::test]
async fn versions_list_through_the_index_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    bucket(&s, "bkt").await;
    put(&s, "bkt", "before", b"null version").await;
    s.put_bucket_versioning(req(dto::PutBucketVersioningInput::builder()
        .bucket("bkt".into())
        .versioning_configuration(dto::VersioningConfiguration {
            status: Some(dto::BucketVersioningStatus::from_static(
                dto::BucketVersioningStatus::ENABLED,
            )),
            ..Default::default()
        })
        .build()
        .unwrap()))
        .await
        .unwrap();
    for i in 0..20 {
        for _ in 0..3 {
            put(&s, "bkt", &format!("k{i:02}"), b"v").await;
        }
    }
    // A delete marker hides a key from the current listing, not from the
    // versions.
    delete(&s, "bkt", "k05").await;
    let current = walk(&s, "bkt", "", None, 7).await;
    assert_eq!(current.len(), 20);
    assert!(!current.contains(&"k05".to_owned()));
    assert!(current.contains(&"before".to_owned()));
    let all = versions(&s, 1000).await;
    assert_eq!(all.len(), 1 + 20 * 3 + 1);
    // Any page size walks the same versions.
    let mut paged = versions(&s, 4).await;
    let mut whole = all.clone();
    paged.sort();
    whole.sort();
    assert_eq!(paged, whole);
}

#[tokio::test]
async fn uploads_list_through_the_index_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    bucket(&s, "bkt").await;
    bucket(&s, "other").await;
    let mut ids = Vec::new();
    for k in ["a/1", "a/2", "b", "b", "c/x/1", "d"] {
        let out = s
            .create_multipart_upload(req(dto::CreateMultipartUploadInput::builder()
                .bucket("bkt".into())
                .key(k.into())
                .build()
                .unwrap()))
            .await
            .unwrap()
            .output;
        ids.push((k, out.upload_id.unwrap()));
    }
    s.create_multipart_upload(req(dto::CreateMultipartUploadInput::builder()
        .bucket("other".into())
        .key("a/1".into())
        .build()
        .unwrap()))
        .await
        .unwrap();
    // One is aborted: gone from the listing.
    let (k, id) = ids.remove(5);
    s.abort_multipart_upload(req(dto::AbortMultipartUploadInput::builder()
        .bucket("bkt".into())
        .key(k.into())
        .upload_id(id)
        .build()
        .unwrap()))
        .await
        .unwrap();
    let list = |delimiter: Option<&str>, max: i32, km: Option<String>, im: Option<String>| {
        let input = dto::ListMultipartUploadsInput::builder()
            .bucket("bkt".into())
            .delimiter(delimiter.map(str::to_owned))
            .max_uploads(Some(max))
            .key_marker(km)
            .upload_id_marker(im)
            .build()
            .unwrap();
        let s = &s;
        async move { s.list_multipart_uploads(req(input)).await.unwrap().output }
    };
    let mut got = Vec::new();
    let (mut km, mut im) = (None, None);
    loop {
        let out = list(None, 2, km, im).await;
        for u in out.uploads.unwrap_or_default() {
            got.push((u.key.unwrap(), u.upload_id.unwrap()));
        }
        if out.is_truncated != Some(true) {
            break;
        }
        km = out.next_key_marker;
        im = out.next_upload_id_marker;
    }
    let mut want: Vec<(String, String)> = ids.iter().map(|(k, i)| ((*k).to_owned(), i.clone())).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let mut got_sorted = got.clone();
    got_sorted.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), 5);
    assert_eq!(
        got.iter().map(|u| u.0.clone()).collect::<Vec<_>>(),
        ["a/1", "a/2", "b", "b", "c/x/1"]
    );
    let mut want_ids: Vec<&String> = want.iter().map(|u| &u.1).collect();
    let mut got_ids: Vec<&String> = got.iter().map(|u| &u.1).collect();
    want_ids.sort();
    got_ids.sort();
    assert_eq!(got_ids, want_ids);
    // With a delimiter: the prefixes once each, then the key.
    let out = list(Some("/"), 10, None, None).await;
    let prefixes: Vec<String> = out
        .common_prefixes
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.prefix.unwrap())
        .collect();
    assert_eq!(prefixes, ["a/", "c/"]);
    assert_eq!(out.uploads.unwrap_or_default().len(), 2);
    let out = list(Some("/"), 1, None, None).await;
    assert_eq!(out.is_truncated, Some(true));
    let out = list(Some("/"), 10, out.next_key_marker, None).await;
    assert_eq!(out.uploads.unwrap_or_default().len(), 2);
    assert_eq!(out.common_prefixes.unwrap_or_default().len(), 1);
}
