//! The store's side of ACLs: a bucket's canned ACL as one of its settings,
//! the check of a request against it, and an object's ACL read and
//! rewritten in its record. What an ACL is and grants is `canned`'s.

use s3s::{S3Result, s3_error};

use super::canned::{Access, Canned, check};
use super::conditions::ReadConditions;
use super::errors::internal;
use super::layout::{Disk, Stored};
use super::object::Meta;
use super::settings::{Setting, damaged_setting};
use super::store::FsStore;
use super::write::CopyErrors;
use crate::Requester;

impl FsStore {
    /// The bucket's ACL (private unless set).
    pub(super) async fn bucket_acl(&self, bucket: &str) -> S3Result<Canned> {
        match self.settings.get(&self.disk, Setting::Acl, bucket).await? {
            None => Ok(Canned::Private),
            Some(v) => match Canned::parse(Some(&v), false) {
                Ok(Some(c)) => Ok(c),
                _ => Err(damaged_setting(Setting::Acl, bucket, &v)),
            },
        }
    }

    /// Sets the bucket's ACL (`private` is no setting at all).
    pub(super) async fn set_bucket_acl(&self, bucket: &str, acl: Canned) -> S3Result<()> {
        let value = (acl != Canned::Private).then(|| acl.as_str());
        self.settings.set(&self.disk, Setting::Acl, bucket, value).await
    }

    /// Checks that `who` may do `what` in the bucket.
    pub(super) async fn check_bucket_access(
        &self,
        bucket: &str,
        who: &Requester,
        what: Access,
    ) -> S3Result<()> {
        if *who == Requester::Owner {
            return Ok(());
        }
        check(
            self.counted_acl(bucket, self.bucket_acl(bucket).await?).await?,
            who,
            what,
        )
    }

    /// The object at `path` of `bucket`, if `who` may read it and then the
    /// conditions hold: ACLs first, so that a requester without access
    /// learns nothing from a 304 or 412, and a missing key is 403 to a
    /// requester who may not list the bucket, as S3.
    pub(super) async fn read_as(
        &self,
        bucket: &str,
        path: &std::path::Path,
        who: &Requester,
        cond: ReadConditions<'_>,
    ) -> S3Result<Stored> {
        let Some(st) = Disk::read_stored(path).await? else {
            self.check_bucket_access(bucket, who, Access::Read).await?;
            return Err(s3_error!(NoSuchKey));
        };
        check(
            self.counted_acl(bucket, st.meta.acl.unwrap_or_default()).await?,
            who,
            Access::Read,
        )?;
        cond.check(&st.meta, false)?;
        Ok(st)
    }

    /// Writes the object file at `path` again with its record changed by
    /// `edit` (the data copied as it is stored), in place of the old file:
    /// readers see the old record or the new one. The caller holds
    /// `cond_lock`, so that no conditional or versioned write interleaves.
    pub(super) async fn rewrite_file(
        &self,
        path: &std::path::Path,
        edit: impl FnOnce(&mut Meta),
    ) -> S3Result<()> {
        let Some(st) = Disk::read_stored(path).await? else {
            return Err(s3_error!(NoSuchKey));
        };
        let checker = Stored::checker(&st.meta)?;
        let mut meta = st.meta;
        let len = meta.stored_len();
        let mut tmp = self.disk.temp().await?;
        let errors = CopyErrors {
            reading: "reading an object",
            writing: "writing an object",
        };
        if tmp
            .append_from((st.file, checker), 0, len, &errors, |_| {})
            .await?
            != len
        {
            return Err(internal(
                "rewriting an object",
                "the object changed while it was copied",
            ));
        }
        edit(&mut meta);
        self.disk.finish(tmp, &meta, path).await
    }
}
