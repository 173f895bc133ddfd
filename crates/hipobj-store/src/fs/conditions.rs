//! Conditional requests: the `If-*` conditions of a read (GET, HEAD) or of
//! a copy source, checked against the stored object, and those of a write
//! (PutObject, CompleteMultipartUpload), checked against what it replaces
//! in the same step that makes the new object visible.

use std::path::Path;

use s3s::dto::{self, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::errors::{internal, io_kind};
use super::layout::{Disk, Stored, TempFile};
use super::object::Meta;
use super::store::FsStore;
use super::text::{etag_of, strip_quotes};

/// Seconds since the epoch of an S3 timestamp (HTTP dates have whole
/// seconds, so conditions compare at that resolution).
fn epoch_secs(t: &Timestamp) -> Option<i64> {
    let mut out = Vec::new();
    t.format(dto::TimestampFormat::EpochSeconds, &mut out).ok()?;
    let text = String::from_utf8(out).ok()?;
    text.split('.').next()?.parse().ok()
}

fn etag_matches(cond: &dto::ETagCondition, etag: &str) -> bool {
    match cond {
        dto::ETagCondition::Any => true,
        dto::ETagCondition::ETag(e) => strip_quotes(etag_of(e)) == etag,
    }
}

/// The read conditions of a GetObject or HeadObject input (two types
/// with the same four fields).
/// With `copy_source`, the `x-amz-copy-source-if-*` conditions of a
/// CopyObject or UploadPartCopy input.
macro_rules! read_conditions {
    ($input:ident) => {
        $crate::fs::conditions::ReadConditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
    (copy_source $input:ident) => {
        $crate::fs::conditions::ReadConditions {
            if_match: $input.copy_source_if_match.as_ref(),
            if_none_match: $input.copy_source_if_none_match.as_ref(),
            if_modified_since: $input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: $input.copy_source_if_unmodified_since.as_ref(),
        }
    };
}

pub(super) use read_conditions;

/// The conditions of a read (GET, HEAD) or of a copy source.
#[derive(Default)]
pub(super) struct ReadConditions<'a> {
    pub(super) if_match: Option<&'a dto::ETagCondition>,
    pub(super) if_none_match: Option<&'a dto::ETagCondition>,
    pub(super) if_modified_since: Option<&'a Timestamp>,
    pub(super) if_unmodified_since: Option<&'a Timestamp>,
}

impl ReadConditions<'_> {
    /// RFC 9110 section 13.2.2 as S3 applies it: If-Match, else
    /// If-Unmodified-Since (412); then If-None-Match, else
    /// If-Modified-Since (304 for a read; `copy` turns that into 412, as
    /// S3 answers a copy whose source condition fails).
    pub(super) fn check(&self, meta: &Meta, copy: bool) -> S3Result<()> {
        let modified = i64::try_from(meta.modified_ms / 1000).unwrap_or(i64::MAX);
        let failed = |what: &str| {
            S3Error::with_message(
                S3ErrorCode::PreconditionFailed,
                format!("At least one of the pre-conditions you specified did not hold ({what})"),
            )
        };
        let not_modified = |what: &str| {
            if copy {
                failed(what)
            } else {
                // A 304 names the version the client already has (RFC 9110
                // section 15.4.5; S3 sends its ETag).
                let mut e = S3Error::with_message(S3ErrorCode::NotModified, format!("Not Modified ({what})"));
                let mut h = http::HeaderMap::new();
                if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
                    h.insert(http::header::ETAG, v);
                }
                e.set_headers(h);
                e
            }
        };
        match (self.if_match, self.if_unmodified_since) {
            (Some(m), _) if !etag_matches(m, &meta.etag) => return Err(failed("If-Match")),
            (None, Some(t)) if epoch_secs(t).is_some_and(|t| modified > t) => {
                return Err(failed("If-Unmodified-Since"));
            }
            _ => {}
        }
        match (self.if_none_match, self.if_modified_since) {
            (Some(m), _) if etag_matches(m, &meta.etag) => Err(not_modified("If-None-Match")),
            (None, Some(t)) if epoch_secs(t).is_some_and(|t| modified <= t) => {
                Err(not_modified("If-Modified-Since"))
            }
            _ => Ok(()),
        }
    }
}

/// What a write says about the object it replaces.
pub(super) enum WriteCondition {
    /// Overwrite whatever is there.
    None,
    /// `If-None-Match: *`: only if no object has the key.
    Absent,
    /// `If-Match`: only if the object exists with this ETag (or any, `*`).
    Matches(dto::ETagCondition),
    /// `If-None-Match: <etag>`: unless the object exists with this ETag.
    NoneMatch(dto::ETagCondition),
}

impl WriteCondition {
    pub(super) fn of(
        if_match: Option<dto::ETagCondition>,
        if_none_match: Option<dto::ETagCondition>,
    ) -> S3Result<Self> {
        match (if_match, if_none_match) {
            (Some(_), Some(_)) => Err(s3_error!(
                NotImplemented,
                "If-Match and If-None-Match together are not supported"
            )),
            (Some(m), None) => Ok(Self::Matches(m)),
            (None, Some(dto::ETagCondition::Any)) => Ok(Self::Absent),
            (None, Some(e)) => Ok(Self::NoneMatch(e)),
            (None, None) => Ok(Self::None),
        }
    }

    /// Whether the write may replace `current` (the object the key names
    /// now, `None` if none): `412 PreconditionFailed` otherwise, `404` for
    /// If-Match on no object.
    pub(super) fn check(&self, current: Option<&Meta>) -> S3Result<()> {
        let failed = |what: &str| {
            S3Error::with_message(
                S3ErrorCode::PreconditionFailed,
                format!("At least one of the pre-conditions you specified did not hold ({what})"),
            )
        };
        match (self, current) {
            (Self::None, _) | (Self::Absent | Self::NoneMatch(_), None) => Ok(()),
            (Self::Absent, Some(_)) => Err(failed("If-None-Match: * and the object exists")),
            (Self::NoneMatch(not), Some(m)) if etag_matches(not, &m.etag) => Err(failed("If-None-Match")),
            (Self::NoneMatch(_), Some(_)) => Ok(()),
            (Self::Matches(_), None) => Err(s3_error!(NoSuchKey, "If-Match: the object does not exist")),
            (Self::Matches(want), Some(m)) if !etag_matches(want, &m.etag) => Err(failed("If-Match")),
            (Self::Matches(_), Some(_)) => Ok(()),
        }
    }
}

impl FsStore {
    /// The object stored at `path`, if it exists and the conditions hold
    /// (`copy`: those of a copy source, see [`ReadConditions::check`]).
    pub(super) async fn read_if(path: &Path, cond: ReadConditions<'_>, copy: bool) -> S3Result<Stored> {
        let Some(st) = Disk::read_stored(path).await? else {
            return Err(if copy {
                s3_error!(NoSuchKey, "the copy source does not exist")
            } else {
                s3_error!(NoSuchKey)
            });
        };
        cond.check(&st.meta, copy)?;
        Ok(st)
    }

    /// As [`FsStore::finish`], if `cond` holds for what is at `dest`
    /// (`412 PreconditionFailed` otherwise; `404` for If-Match on no object).
    pub(super) async fn finish_if(
        &self,
        tmp: TempFile,
        meta: &Meta,
        dest: &Path,
        cond: WriteCondition,
    ) -> S3Result<()> {
        match cond {
            WriteCondition::None => self.disk.finish(tmp, meta, dest).await,
            WriteCondition::Absent => {
                let tmp = self.disk.seal(tmp, meta).await?;
                match tmp.commit_new(dest, self.disk.sync).await {
                    Ok(()) => Ok(()),
                    Err(e) if io_kind(&e) == std::io::ErrorKind::AlreadyExists => Err(s3_error!(
                        PreconditionFailed,
                        "At least one of the pre-conditions you specified did not hold (If-None-Match: * and the object exists)"
                    )),
                    Err(e) => Err(internal("committing an object", e)),
                }
            }
            WriteCondition::NoneMatch(_) | WriteCondition::Matches(_) => {
                // Conditional writers of this store take turns between the
                // check and the rename.
                let _turn = self.cond_lock.lock().await;
                let current = Disk::read_stored(dest).await?;
                cond.check(current.as_ref().map(|st| &st.meta))?;
                self.disk.finish(tmp, meta, dest).await
            }
        }
    }
}
