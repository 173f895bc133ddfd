//! What the store keeps with each object (size, ETag, the headers it was
//! written with, its checksums and part sizes) and how a read describes an
//! object from that record: GetObject's and HeadObject's headers, the part
//! or range a GetObject selects, GetObjectAttributes' page of parts.

use std::collections::BTreeMap;
use std::ops::Range;

use s3s::dto::{self, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};

use super::canned::Canned;
use super::checksums::{self, Sums};
use super::sse::Encryption;
use super::text::i64_of;
use crate::blocks::BlockSums;

/// What is stored with each object (and each part of an upload).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) key: String,
    pub(super) size: u64,
    pub(super) etag: String,
    pub(super) modified_ms: u64,
    #[serde(default, skip_serializing_if = "Attrs::is_empty")]
    pub(super) attrs: Attrs,
    #[serde(default, skip_serializing_if = "Sums::is_empty")]
    pub(super) sums: Sums,
    /// Part sizes of an object made by CompleteMultipartUpload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) parts: Vec<u64>,
    /// Each part's checksum of a multipart object whose upload chose an
    /// algorithm (the algorithm of `sums`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) part_sums: Vec<String>,
    /// The upload CompleteMultipartUpload made this object from, so that a
    /// retried Complete (its first answer lost) gets the same answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) upload_id: Option<String>,
    /// How the data is encrypted (`None`: it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) encryption: Option<Encryption>,
    /// The object's canned ACL (`None`: private).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) acl: Option<Canned>,
    /// Which version of its key this file is (`versions`); `None` for the
    /// null version, which is also every object of a bucket that was never
    /// versioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) version_id: Option<String>,
    /// A delete marker: a version with no data that says the key was
    /// deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) delete_marker: bool,
    /// The stored bytes' block checksums (`crate::blocks`), computed as
    /// they were written; `None` in files from before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) blocks: Option<BlockSums>,
}

/// The headers an object keeps (Content-Type and friends, x-amz-meta-*).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Attrs {
    pub(super) content_type: Option<String>,
    pub(super) content_encoding: Option<String>,
    pub(super) content_disposition: Option<String>,
    pub(super) content_language: Option<String>,
    pub(super) cache_control: Option<String>,
    /// The `Expires` header to return (RFC 3339 in the trailer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) expires: Option<Timestamp>,
    #[serde(default)]
    pub(super) metadata: BTreeMap<String, String>,
}

impl Attrs {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    pub(super) fn metadata(&self) -> Option<dto::Metadata> {
        (!self.metadata.is_empty()).then(|| self.metadata.clone().into_iter().collect())
    }
}

/// The Content-Type of an object stored without one (a PutObject,
/// CreateMultipartUpload or CopyObject with `REPLACE` that sent none): S3's.
pub(super) const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// Content-Encoding as stored: without `aws-chunked`, which describes how
/// the request body travelled, not the object.
pub(super) fn stored_encoding(e: Option<String>) -> Option<String> {
    let e = e?;
    let kept: Vec<&str> = e
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The attributes a PutObject, CopyObject (REPLACE) or
/// CreateMultipartUpload input gives its object (three types with the same
/// fields).
macro_rules! attrs_of {
    ($input:ident) => {
        $crate::fs::object::Attrs {
            content_type: $input.content_type.map(|c| c.to_string()),
            content_encoding: $crate::fs::object::stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input.expires,
            metadata: $input.metadata.unwrap_or_default().into_iter().collect(),
        }
    };
}

pub(super) use attrs_of;

/// A GetObject or HeadObject output (two types with the same fields)
/// describing the object `$meta` (an object stored without a Content-Type
/// has S3's [`DEFAULT_CONTENT_TYPE`]), with the checksums `$sums` (from
/// `Meta::read_sums`: as S3, only for `x-amz-checksum-mode: ENABLED`, as a
/// client that did not ask may not expect to validate them), and the
/// fields given.
macro_rules! described {
    ($ty:path, $meta:expr, $sums:expr, { $($field:ident $(: $value:expr)?),* $(,)? }) => {{
        let meta: $crate::fs::object::Meta = $meta;
        let enc = $crate::fs::sse::Described::of(meta.encryption.as_ref());
        let a = meta.attrs;
        let sums: $crate::fs::checksums::Sums = $sums;
        let checksum_type = $crate::fs::checksums::checksum_type(&sums);
        $ty {
            $($field $(: $value)?,)*
            accept_ranges: Some("bytes".into()),
            e_tag: Some(s3s::dto::ETag::Strong(meta.etag)),
            last_modified: Some($crate::fs::text::timestamp(meta.modified_ms)),
            metadata: a.metadata(),
            content_type: Some(a.content_type.unwrap_or_else(|| $crate::fs::object::DEFAULT_CONTENT_TYPE.to_owned())),
            content_encoding: a.content_encoding,
            content_disposition: a.content_disposition,
            content_language: a.content_language,
            cache_control: a.cache_control,
            expires: a.expires,
            checksum_crc32: sums.crc32,
            checksum_crc32c: sums.crc32c,
            checksum_sha1: sums.sha1,
            checksum_sha256: sums.sha256,
            checksum_type,
            checksum_crc64nvme: sums.crc64nvme,
            server_side_encryption: enc.server_side_encryption,
            sse_customer_algorithm: enc.sse_customer_algorithm,
            sse_customer_key_md5: enc.sse_customer_key_md5,
            ..Default::default()
        }
    }};
}

pub(super) use described;

impl Meta {
    /// The checksums a read returns if it asked for them (`enabled`): the
    /// object's for a read of all of it, part `n`'s for a read of a part
    /// (`x-amz-part-number`) of an object whose upload chose an algorithm,
    /// none for a range.
    pub(super) fn read_sums(&self, part: Option<i32>, whole: bool, enabled: bool) -> Sums {
        if !enabled {
            return Sums::default();
        }
        let stored = part
            .and_then(|n| usize::try_from(n).ok()?.checked_sub(1))
            .and_then(|i| self.part_sums.get(i));
        match stored {
            Some(v) => checksums::of_part(&self.sums, v),
            None if whole => self.sums.clone(),
            None => Sums::default(),
        }
    }

    /// Bytes the data takes in the object's file.
    pub(super) fn stored_len(&self) -> u64 {
        self.encryption.as_ref().map_or(self.size, Encryption::stored_len)
    }

    /// The bytes of part `n` (from 1) and how many parts the object has; an
    /// object not made by CompleteMultipartUpload is its only part.
    fn part(&self, n: i32) -> S3Result<(Range<u64>, i32)> {
        let parts: Vec<u64> = if self.parts.is_empty() {
            vec![self.size]
        } else {
            self.parts.clone()
        };
        let idx = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .filter(|i| *i < parts.len())
            .ok_or_else(|| {
                S3Error::with_message(
                    S3ErrorCode::InvalidPart,
                    format!("the object has {} part(s)", parts.len()),
                )
            })?;
        let start: u64 = parts[..idx].iter().sum();
        let count = i32::try_from(parts.len()).unwrap_or(i32::MAX);
        Ok((start..start + parts[idx], count))
    }

    /// The bytes a GetObject selects with a Range or a partNumber (`None`:
    /// the whole object), and with a partNumber the object's part count.
    pub(super) fn selection(
        &self,
        range: Option<&dto::Range>,
        part_number: Option<i32>,
    ) -> S3Result<(Option<Range<u64>>, Option<i32>)> {
        let size = self.size;
        match (range, part_number) {
            (Some(_), Some(_)) => Err(s3_error!(
                InvalidRequest,
                "Range and partNumber cannot be used together"
            )),
            (Some(r), None) => Ok((
                Some(r.check(size).map_err(|_| {
                    S3Error::with_message(S3ErrorCode::InvalidRange, format!("the object is {size} bytes"))
                })?),
                None,
            )),
            (None, Some(n)) => self.part(n).map(|(r, count)| (Some(r), Some(count))),
            (None, None) => Ok((None, None)),
        }
    }

    /// GetObjectAttributes' page of the parts of a multipart object, after
    /// part `marker`, at most `max` (`None` for an object of one PutObject,
    /// which has no parts, as in S3).
    pub(super) fn parts_page(
        &self,
        marker: Option<i32>,
        max: Option<i32>,
    ) -> S3Result<Option<dto::GetObjectAttributesParts>> {
        if self.parts.is_empty() {
            return Ok(None);
        }
        let marker = marker.unwrap_or(0);
        let max = max.unwrap_or(1000);
        let (Ok(after), Ok(take)) = (usize::try_from(marker), usize::try_from(max)) else {
            return Err(s3_error!(
                InvalidArgument,
                "max-parts and part-number-marker must not be negative"
            ));
        };
        let page: Vec<dto::ObjectPart> = self
            .parts
            .iter()
            .enumerate()
            .skip(after)
            .take(take)
            .map(|(i, size)| {
                let sums = self.part_sums.get(i).map(|v| checksums::of_part(&self.sums, v));
                let sums = sums.unwrap_or_default();
                dto::ObjectPart {
                    part_number: i32::try_from(i + 1).ok(),
                    size: Some(i64_of(*size)),
                    checksum_crc32: sums.crc32,
                    checksum_crc32c: sums.crc32c,
                    checksum_crc64nvme: sums.crc64nvme,
                    checksum_sha1: sums.sha1,
                    checksum_sha256: sums.sha256,
                }
            })
            .collect();
        let last = page.last().and_then(|p| p.part_number);
        Ok(Some(dto::GetObjectAttributesParts {
            total_parts_count: i32::try_from(self.parts.len()).ok(),
            part_number_marker: Some(marker),
            next_part_number_marker: last,
            max_parts: Some(max),
            is_truncated: Some(after.saturating_add(page.len()) < self.parts.len()),
            parts: Some(page),
        }))
    }
}
