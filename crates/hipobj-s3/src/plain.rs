//! The plain-HTTP transfers: GetObject, PutObject and UploadPart with the
//! bytes in the HTTP body and no token. [`RdmaS3Client`](crate::RdmaS3Client)
//! falls back to them when a server declines RDMA; a caller with no RDMA
//! client at all runs them itself, through [`PlainFailover`](crate::PlainFailover)
//! for several gateways.
//!
//! Their errors fail over as the RDMA calls' do ([`Error::may_fail_over`]),
//! and so does a GetObject body that breaks off part way: the gateway died
//! while sending it, and another one sends the object again from its start.

use crate::{Error, ObjectArgs, Result, Transfer, capture};
use aws_sdk_s3::primitives::ByteStream;

/// GetObject (with `range`, an HTTP Range value), each piece of the body
/// handed to `write` with its offset from the body's start as it arrives.
/// A `write` error stops the call and is returned as it is.
pub async fn get_object(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    range: Option<&str>,
    write: impl FnMut(usize, &[u8]) -> Result<()>,
) -> Result<Transfer> {
    get_object_with(s3, bucket, key, range, &ObjectArgs::default(), write).await
}

/// [`get_object`] of the version and with the encryption key `args` name.
pub async fn get_object_with(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    range: Option<&str>,
    args: &ObjectArgs,
    mut write: impl FnMut(usize, &[u8]) -> Result<()>,
) -> Result<Transfer> {
    let out = args
        .get(s3.get_object())
        .bucket(bucket)
        .key(key)
        .set_range(range.map(str::to_owned))
        .send()
        .await
        .map_err(|e| Error::from_sdk("GetObject", &e))?;
    let status = if out.content_range().is_some() { 206 } else { 200 };
    let object_size = out
        .content_range()
        .and_then(capture::total_of_content_range)
        .or_else(|| out.content_length().and_then(|n| u64::try_from(n).ok()));
    let etag = out.e_tag().map(str::to_owned);
    let mut body = out.body;
    let mut n = 0usize;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Error::cut_off("GetObject", &e))?;
        write(n, &chunk)?;
        n += chunk.len();
    }
    Ok(Transfer {
        bytes: n as u64,
        etag,
        rdma: false,
        declined: None,
        object_size,
        status,
    })
}

/// PutObject of `body`.
pub async fn put_object(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    body: bytes::Bytes,
) -> Result<Transfer> {
    put_object_with(s3, bucket, key, body, &ObjectArgs::default()).await
}

/// [`put_object`] with the encryption `args` name.
pub async fn put_object_with(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    body: bytes::Bytes,
    args: &ObjectArgs,
) -> Result<Transfer> {
    let bytes = body.len() as u64;
    let out = args
        .put(s3.put_object())
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| Error::from_sdk("PutObject", &e))?;
    Ok(sent(bytes, out.e_tag()))
}

/// UploadPart `number` of multipart upload `upload_id`, from `body`.
pub async fn upload_part(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: i32,
    body: bytes::Bytes,
) -> Result<Transfer> {
    upload_part_with(s3, bucket, key, upload_id, number, body, &ObjectArgs::default()).await
}

/// [`upload_part`] with the upload's SSE-C key from `args`.
pub async fn upload_part_with(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: i32,
    body: bytes::Bytes,
    args: &ObjectArgs,
) -> Result<Transfer> {
    let bytes = body.len() as u64;
    let out = args
        .part(s3.upload_part())
        .bucket(bucket)
        .key(key)
        .upload_id(upload_id)
        .part_number(number)
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| Error::from_sdk("UploadPart", &e))?;
    Ok(sent(bytes, out.e_tag()))
}

fn sent(bytes: u64, etag: Option<&str>) -> Transfer {
    Transfer {
        bytes,
        etag: etag.map(str::to_owned),
        rdma: false,
        declined: None,
        object_size: None,
        status: 200,
    }
}
