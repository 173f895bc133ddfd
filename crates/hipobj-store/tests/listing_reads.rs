//! A page of a listing reads the files of that page, not the bucket's or
//! the upload's (issue 40: every page read the whole bucket folder, and
//! ListParts every part). The store counts each file a listing opens and
//! cannot read (`hipobj_store::damage`): a damaged file outside the page
//! must not be counted by a listing of the page. One test in this binary,
//! since the count is the process's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use hipobj_store::damage;
use s3s::S3;
use s3s::dto;
use support::{bucket, open, page, put, req};

/// Cuts a file to a few bytes: it no longer reads back as an object.
fn damage_file(path: &std::path::Path) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(3).unwrap();
}

fn files_starting(dir: &std::path::Path, start: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(start))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_page_reads_only_its_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    bucket(&s, "bkt").await;
    // Long keys (over 100 bytes) are stored under a hash of the key, so
    // their names do not say which key they hold.
    let long: Vec<String> = (0..6).map(|i| format!("{i}-{}", "k".repeat(120))).collect();
    for k in &long {
        put(&s, "bkt", k, b"data").await;
    }
    let (keys, _, _) = page(&s, "bkt", "", None, 1000, None).await;
    assert_eq!(keys, long);
    // The files of the last three keys damaged: a page of the first two
    // does not open them.
    for f in files_starting(&dir.path().join("bkt"), "h-") {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        if ["3-", "4-", "5-"]
            .iter()
            .any(|k| text.contains(&format!("\"key\":\"{k}")))
        {
            damage_file(&f);
        }
    }
    let before = damage::counts().skipped_in_listings;
    let (keys, _, token) = page(&s, "bkt", "", None, 2, None).await;
    assert_eq!(keys, long[..2]);
    assert!(token.is_some());
    assert_eq!(
        damage::counts().skipped_in_listings,
        before,
        "a page of two opened the files of other keys"
    );
    // The page that holds them leaves them out, and counts them.
    let (keys, _, _) = page(&s, "bkt", "", None, 1000, token).await;
    assert_eq!(keys, long[2..3]);
    assert_eq!(damage::counts().skipped_in_listings, before + 3);

    // ListParts: a page of one part reads one part.
    let up = s
        .create_multipart_upload(req(dto::CreateMultipartUploadInput::builder()
            .bucket("bkt".into())
            .key("big".into())
            .build()
            .unwrap()))
        .await
        .unwrap()
        .output
        .upload_id
        .unwrap();
    for n in 1..=5 {
        let body = dto::StreamingBlob::from(s3s::Body::from(bytes::Bytes::from_static(b"part")));
        s.upload_part(req(dto::UploadPartInput::builder()
            .bucket("bkt".into())
            .key("big".into())
            .upload_id(up.clone())
            .part_number(n)
            .content_length(Some(4))
            .body(Some(body))
            .build()
            .unwrap()))
            .await
            .unwrap();
    }
    let parts = files_starting(&dir.path().join(".uploads").join(&up), "part-");
    assert_eq!(parts.len(), 5);
    damage_file(&parts[4]);
    let before = damage::counts().skipped_in_listings;
    let out = s
        .list_parts(req(dto::ListPartsInput::builder()
            .bucket("bkt".into())
            .key("big".into())
            .upload_id(up.clone())
            .max_parts(Some(1))
            .build()
            .unwrap()))
        .await
        .unwrap()
        .output;
    assert_eq!(out.parts.unwrap_or_default().len(), 1);
    assert_eq!(out.is_truncated, Some(true));
    assert_eq!(out.next_part_number_marker, Some(1));
    assert_eq!(
        damage::counts().skipped_in_listings,
        before,
        "a page of one part opened the other parts"
    );
}
