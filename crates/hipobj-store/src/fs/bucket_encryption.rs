//! A bucket's default encryption (PutBucketEncryption): SSE-S3 for every
//! object written without encryption headers of its own, kept as one of
//! the bucket's settings (`settings`); SSE-KMS defaults are refused (501),
//! since SSE-KMS is.

use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::settings::{Setting, damaged_setting};
use super::sse::Protection;
use super::store::FsStore;

/// The setting of a bucket with SSE-S3 by default.
pub(super) const SSE_S3: &str = "AES256";

impl FsStore {
    /// Sets the bucket's default: SSE-S3 is the only one served.
    pub(super) async fn set_bucket_encryption(
        &self,
        bucket: &str,
        config: &dto::ServerSideEncryptionConfiguration,
    ) -> S3Result<()> {
        self.disk.existing_bucket(bucket).await?;
        let mut algorithms = config
            .rules
            .iter()
            .filter_map(|r| r.apply_server_side_encryption_by_default.as_ref());
        let (Some(rule), None) = (algorithms.next(), algorithms.next()) else {
            return Err(s3_error!(
                MalformedXML,
                "the configuration needs exactly one ApplyServerSideEncryptionByDefault rule"
            ));
        };
        match rule.sse_algorithm.as_str() {
            SSE_S3 => {}
            kms if kms.starts_with("aws:kms") => {
                return Err(S3Error::with_message(
                    S3ErrorCode::NotImplemented,
                    format!("{kms} is not implemented by this server"),
                ));
            }
            other => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("The encryption method specified is not supported: {other}"),
                ));
            }
        }
        self.settings
            .set(&self.disk, Setting::Encryption, bucket, Some(SSE_S3))
            .await
    }

    /// The bucket's default (`None`: objects are not encrypted unless asked).
    pub(super) async fn bucket_encryption(&self, bucket: &str) -> S3Result<Option<&'static str>> {
        match self
            .settings
            .get(&self.disk, Setting::Encryption, bucket)
            .await?
            .as_deref()
        {
            None => Ok(None),
            Some(SSE_S3) => Ok(Some(SSE_S3)),
            Some(other) => Err(damaged_setting(Setting::Encryption, bucket, other)),
        }
    }

    /// Removes the bucket's default (nothing to remove is no error).
    pub(super) async fn clear_bucket_encryption(&self, bucket: &str) -> S3Result<()> {
        self.settings
            .set(&self.disk, Setting::Encryption, bucket, None)
            .await
    }

    /// What a write asks for, the bucket's default filling in when it
    /// names no encryption of its own.
    pub(super) async fn with_default(&self, bucket: &str, asked: Protection) -> S3Result<Protection> {
        if asked.encrypts() {
            return Ok(asked);
        }
        Ok(match self.bucket_encryption(bucket).await? {
            Some(_) => Protection::Server,
            None => asked,
        })
    }
}
