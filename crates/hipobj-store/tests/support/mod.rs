//! What the listing tests share: a store in a temporary folder and its
//! operations called as the gateway calls them.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;

use hipobj_store::fs::{FsLimits, FsStore};
use s3s::dto;
use s3s::{S3, S3Request};

pub(crate) fn req<T>(input: T) -> S3Request<T> {
    S3Request {
        input,
        method: http::Method::GET,
        uri: http::Uri::from_static("/"),
        headers: http::HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: None,
        region: None,
        service: None,
        trailing_headers: None,
    }
}

/// A store that does not sync (the tests are about listings).
pub(crate) fn open(root: &Path) -> FsStore {
    FsStore::open(
        root,
        FsLimits {
            sync: false,
            ..FsLimits::default()
        },
    )
    .unwrap()
}

pub(crate) async fn bucket(s: &FsStore, name: &str) {
    s.create_bucket(req(dto::CreateBucketInput::builder()
        .bucket(name.into())
        .build()
        .unwrap()))
        .await
        .unwrap();
}

pub(crate) async fn put(s: &FsStore, bucket: &str, key: &str, data: &[u8]) {
    let body = s3s::dto::StreamingBlob::from(s3s::Body::from(bytes::Bytes::copy_from_slice(data)));
    s.put_object(req(dto::PutObjectInput::builder()
        .bucket(bucket.into())
        .key(key.into())
        .content_length(Some(i64::try_from(data.len()).unwrap()))
        .body(Some(body))
        .build()
        .unwrap()))
        .await
        .unwrap();
}

pub(crate) async fn delete(s: &FsStore, bucket: &str, key: &str) {
    s.delete_object(req(dto::DeleteObjectInput::builder()
        .bucket(bucket.into())
        .key(key.into())
        .build()
        .unwrap()))
        .await
        .unwrap();
}

/// One ListObjectsV2 page: the keys, the common prefixes, the token.
pub(crate) async fn page(
    s: &FsStore,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    max: i32,
    token: Option<String>,
) -> (Vec<String>, Vec<String>, Option<String>) {
    let out = s
        .list_objects_v2(req(dto::ListObjectsV2Input::builder()
            .bucket(bucket.into())
            .prefix(Some(prefix.into()))
            .delimiter(delimiter.map(str::to_owned))
            .max_keys(Some(max))
            .continuation_token(token)
            .build()
            .unwrap()))
        .await
        .unwrap()
        .output;
    let keys = out
        .contents
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.key.unwrap())
        .collect();
    let prefixes = out
        .common_prefixes
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.prefix.unwrap())
        .collect();
    assert_eq!(out.is_truncated, Some(out.next_continuation_token.is_some()));
    (keys, prefixes, out.next_continuation_token)
}

/// Every key and common prefix of a listing, walked a page of `max` at a
/// time, in order.
pub(crate) async fn walk(
    s: &FsStore,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    max: i32,
) -> Vec<String> {
    let mut all = Vec::new();
    let mut token = None;
    loop {
        let (keys, prefixes, next) = page(s, bucket, prefix, delimiter, max, token).await;
        let mut got: Vec<String> = keys.into_iter().chain(prefixes).collect();
        got.sort();
        assert!(got.len() <= usize::try_from(max).unwrap());
        all.extend(got);
        match next {
            Some(t) => token = Some(t),
            None => return all,
        }
    }
}

/// What a listing of `keys` must give, worked out the plain way: every
/// key with the prefix, those with the delimiter after the prefix rolled
/// up into one common prefix each, in order.
pub(crate) fn brute(keys: &[String], prefix: &str, delimiter: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut sorted: Vec<&String> = keys.iter().filter(|k| k.starts_with(prefix)).collect();
    sorted.sort();
    sorted.dedup();
    for k in sorted {
        let entry = match delimiter.and_then(|d| k[prefix.len()..].find(d).map(|i| (i, d))) {
            Some((i, d)) => k[..prefix.len() + i + d.len()].to_owned(),
            None => k.clone(),
        };
        if out.last() != Some(&entry) {
            out.push(entry);
        }
    }
    out
}
