//! Filling a temporary file: from a request body (PutObject, UploadPart),
//! measured against the limits and hashed as it streams, or from a range of
//! a stored file (the copies, CompleteMultipartUpload).

use std::io::SeekFrom;

use bytes::Bytes;
use futures::StreamExt;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode, S3Result};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::checksums::{Expected, Sums};
use super::layout::TempFile;
use super::{FsStore, internal};

/// How a copy names its failures: reading the source, writing the copy.
pub(super) struct CopyErrors {
    pub(super) reading: &'static str,
    pub(super) writing: &'static str,
}

impl FsStore {
    /// Copies the `len` bytes at `start` of an open source object into a new
    /// temporary file (CopyObject, UploadPartCopy): at most the largest
    /// object, and all of them, or the source changed during the copy.
    /// Returns the file and the MD5 of what it holds. `writing` names the
    /// write in an error.
    pub(super) async fn copy_range(
        &self,
        file: tokio::fs::File,
        start: u64,
        len: u64,
        writing: &'static str,
    ) -> S3Result<(TempFile, [u8; 16])> {
        if len > self.limits.max_object_size {
            return Err(S3Error::new(S3ErrorCode::EntityTooLarge));
        }
        let mut tmp = self.temp().await?;
        let mut md5 = Md5::new();
        let errors = CopyErrors {
            reading: "reading the copy source",
            writing,
        };
        let copied = tmp
            .append_from(file, start, len, &errors, |chunk| md5.update(chunk))
            .await?;
        if copied != len {
            return Err(internal(writing, "the source changed during the copy"));
        }
        Ok((tmp, md5.finalize()))
    }

    /// Streams `body` into a temporary file, hashing it, and checks the
    /// length and digests before anything becomes visible.
    pub(super) async fn receive(
        &self,
        body: Option<StreamingBlob>,
        content_length: Option<i64>,
        expected: &mut Expected,
        trailers: Option<s3s::TrailingHeaders>,
    ) -> S3Result<(TempFile, u64, [u8; 16], Sums)> {
        let max = self.limits.max_object_size;
        if let Some(n) = content_length
            && u64::try_from(n).unwrap_or(u64::MAX) > max
        {
            return Err(S3Error::with_message(
                S3ErrorCode::EntityTooLarge,
                format!("{n} bytes is over this server's limit of {max}"),
            ));
        }
        let mut tmp = self.temp().await?;
        let mut md5 = Md5::new();
        let mut sums = expected.hasher()?;
        let mut size = 0u64;
        if let Some(mut body) = body {
            while let Some(chunk) = body.next().await {
                let chunk: Bytes = chunk.map_err(|e| {
                    S3Error::with_message(
                        S3ErrorCode::IncompleteBody,
                        format!("reading the body failed: {e}"),
                    )
                })?;
                size += chunk.len() as u64;
                if size > max {
                    return Err(S3Error::with_message(
                        S3ErrorCode::EntityTooLarge,
                        format!("the body is over this server's limit of {max} bytes"),
                    ));
                }
                md5.update(&chunk);
                sums.update(&chunk);
                tmp.out
                    .write_all(&chunk)
                    .await
                    .map_err(|e| internal("writing an object", e))?;
            }
        }
        if let Some(n) = content_length
            && u64::try_from(n).ok() != Some(size)
        {
            return Err(S3Error::with_message(
                S3ErrorCode::IncompleteBody,
                format!("received {size} bytes, Content-Length said {n}"),
            ));
        }
        let md5 = md5.finalize();
        let computed = Sums::from_dto(sums.finalize());
        // Trailers arrive after the body; the hasher was set up from the
        // algorithm header that announced them.
        expected.add_trailers(trailers)?;
        expected.verify(&md5, &computed)?;
        Ok((tmp, size, md5, computed))
    }
}

impl TempFile {
    /// Appends the `len` bytes of `file` that start at `start`, showing
    /// each chunk to `seen`; returns how many bytes there were (fewer than
    /// `len` if the file is shorter).
    pub(super) async fn append_from(
        &mut self,
        mut file: tokio::fs::File,
        start: u64,
        len: u64,
        errors: &CopyErrors,
        mut seen: impl FnMut(&[u8]),
    ) -> S3Result<u64> {
        file.seek(SeekFrom::Start(start))
            .await
            .map_err(|e| internal(errors.reading, e))?;
        let mut data = file.take(len);
        let mut buf = vec![0u8; 256 << 10];
        let mut copied = 0u64;
        loop {
            let n = data
                .read(&mut buf)
                .await
                .map_err(|e| internal(errors.reading, e))?;
            if n == 0 {
                break;
            }
            seen(&buf[..n]);
            self.out
                .write_all(&buf[..n])
                .await
                .map_err(|e| internal(errors.writing, e))?;
            copied += n as u64;
        }
        Ok(copied)
    }
}
