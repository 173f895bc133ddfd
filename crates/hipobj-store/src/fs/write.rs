//! Filling a temporary file: from a request body (PutObject, UploadPart),
//! measured against the limits and hashed as it streams, or from a range of
//! a stored object (the copies, CompleteMultipartUpload); encrypted on the
//! way when the new object is. Also which object a copy source names.

use std::io::SeekFrom;

use crate::md5::Md5;
use bytes::Bytes;
use futures::StreamExt;
use s3s::checksum::ChecksumHasher;
use s3s::dto::{self, StreamingBlob};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::checksums::{Expected, Sums};
use super::errors::internal;
use super::layout::{Stored, TempFile};
use super::sse::{Encryption, Protection, Segment, Unlocked};
use super::store::FsStore;
use crate::blocks::Checker;

/// How a copy names its failures: reading the source, writing the copy.
pub(super) struct CopyErrors {
    pub(super) reading: &'static str,
    pub(super) writing: &'static str,
}

/// What a request body or a copy made: the file, its plaintext's size and
/// MD5, its checksums, and how it is encrypted.
pub(super) struct Received {
    pub(super) tmp: TempFile,
    pub(super) size: u64,
    pub(super) md5: [u8; 16],
    pub(super) sums: Sums,
    pub(super) encryption: Option<Encryption>,
}

/// The bucket, key and version id of a copy source (the only kind this
/// store copies).
pub(super) fn bucket_key_source(source: &dto::CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    match source {
        dto::CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((&**bucket, &**key, version_id.as_deref())),
        _ => Err(s3_error!(
            NotImplemented,
            "only bucket/key copy sources are supported"
        )),
    }
}

impl FsStore {
    /// A temporary file that encrypts as `dest` asks, and the record of
    /// that encryption once `size` bytes are in it.
    async fn temp_for(&self, dest: &Protection) -> S3Result<(TempFile, Option<String>)> {
        let mut tmp = self.disk.temp().await?;
        let sealer = dest.sealer(&self.master)?;
        let key = sealer.as_ref().map(|(_, k)| k.clone());
        tmp.encrypt_with(sealer.map(|(s, _)| s));
        Ok((tmp, key))
    }

    /// Copies the `len` plaintext bytes at `start` of a source object into
    /// a new temporary file (CopyObject, UploadPartCopy), decrypting the
    /// source with `unlocked`, encrypting as `dest` asks and computing the
    /// checksums `sums` is set up for: at most the largest object, and all
    /// of them, or the source changed during the copy. `writing` names the
    /// write in an error.
    pub(super) async fn copy_range(
        &self,
        (src, unlocked): (Stored, Option<Unlocked>),
        (start, len): (u64, u64),
        mut sums: ChecksumHasher,
        writing: &'static str,
        dest: &Protection,
    ) -> S3Result<Received> {
        if len > self.limits.max_object_size {
            return Err(S3Error::new(S3ErrorCode::EntityTooLarge));
        }
        let (mut tmp, key) = self.temp_for(dest).await?;
        let mut md5 = Md5::new();
        let errors = CopyErrors {
            reading: "reading the copy source",
            writing,
        };
        let checker = Stored::checker(&src.meta)?;
        let copied = match unlocked {
            None if !dest.encrypts() => {
                tmp.append_from((src.file, checker), start, len, &errors, |chunk| {
                    md5.update(chunk);
                    sums.update(chunk);
                })
                .await?
            }
            unlocked => {
                let mut body = Stored::plain(src.file, (unlocked, checker), start, len).await?;
                let mut copied = 0u64;
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| internal(errors.reading, e))?;
                    md5.update(&chunk);
                    sums.update(&chunk);
                    tmp.put(&chunk).await.map_err(|e| internal(errors.writing, e))?;
                    copied += chunk.len() as u64;
                }
                copied
            }
        };
        if copied != len {
            return Err(internal(writing, "the source changed during the copy"));
        }
        Ok(Received {
            tmp,
            size: len,
            md5: md5.finalize(),
            sums: Sums::from_dto(sums.finalize()),
            encryption: key.and_then(|key| dest.record(vec![Segment { key, size: len }])),
        })
    }

    /// Streams `body` into a temporary file, hashing it (and encrypting it
    /// as `protection` asks), and checks the length and digests before
    /// anything becomes visible.
    pub(super) async fn receive(
        &self,
        body: Option<StreamingBlob>,
        content_length: Option<i64>,
        expected: &mut Expected,
        trailers: Option<s3s::TrailingHeaders>,
        protection: &Protection,
    ) -> S3Result<Received> {
        let max = self.limits.max_object_size;
        if let Some(n) = content_length
            && u64::try_from(n).unwrap_or(u64::MAX) > max
        {
            return Err(S3Error::with_message(
                S3ErrorCode::EntityTooLarge,
                format!("{n} bytes is over this server's limit of {max}"),
            ));
        }
        let (mut tmp, key) = self.temp_for(protection).await?;
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
                tmp.put(&chunk)
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
        Ok(Received {
            tmp,
            size,
            md5,
            sums: computed,
            encryption: key.and_then(|key| protection.record(vec![Segment { key, size }])),
        })
    }
}

impl TempFile {
    /// Appends the `len` bytes of `file` that start at `start`, showing
    /// each chunk to `seen`; returns how many bytes there were (fewer than
    /// `len` if the file is shorter).
    pub(super) async fn append_from(
        &mut self,
        (mut file, checker): (tokio::fs::File, Option<Checker>),
        start: u64,
        len: u64,
        errors: &CopyErrors,
        mut seen: impl FnMut(&[u8]),
    ) -> S3Result<u64> {
        if let Some(checker) = checker {
            // Every block is checked before a byte of it is copied, so
            // rotten bytes never become a good copy's.
            let mut body = Stored::plain(file, (None, Some(checker)), start, len).await?;
            let mut copied = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| internal(errors.reading, e))?;
                seen(&chunk);
                self.put(&chunk).await.map_err(|e| internal(errors.writing, e))?;
                copied += chunk.len() as u64;
            }
            return Ok(copied);
        }
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
            self.put(&buf[..n])
                .await
                .map_err(|e| internal(errors.writing, e))?;
            copied += n as u64;
        }
        Ok(copied)
    }
}
