//! A bucket's PublicAccessBlock (Put/Get/DeletePublicAccessBlock), kept as
//! one of its settings (`settings`), and what its two ACL switches do:
//!
//! * `BlockPublicAcls`: a request that would set a public canned ACL
//!   (`public-read`, `public-read-write`, `authenticated-read`) on the
//!   bucket or an object in it is `403 AccessDenied`;
//! * `IgnorePublicAcls`: the bucket's and its objects' public ACLs grant
//!   nothing; only the owner (and the keys the bucket is shared with) get
//!   in, as if every ACL were `private`. The ACLs stay as they were, and
//!   count again once the switch is off.
//!
//! `BlockPublicPolicy` and `RestrictPublicBuckets` are kept and returned;
//! they concern bucket policies, which this server does not have.

use s3s::dto;
use s3s::{S3Result, s3_error};

use super::canned::Canned;
use super::settings::{Setting, damaged_setting};
use super::store::FsStore;

/// The four switches, stored as four `0`/`1` characters in S3's order.
fn encode(c: &dto::PublicAccessBlockConfiguration) -> String {
    [
        c.block_public_acls,
        c.ignore_public_acls,
        c.block_public_policy,
        c.restrict_public_buckets,
    ]
    .iter()
    .map(|b| if b.unwrap_or(false) { '1' } else { '0' })
    .collect()
}

/// The configuration `encode` wrote; `None` for anything else (four
/// digits, each 0 or 1).
pub(super) fn decode(s: &str) -> Option<dto::PublicAccessBlockConfiguration> {
    let b = s.as_bytes();
    if b.len() != 4 || !b.iter().all(|c| matches!(c, b'0' | b'1')) {
        return None;
    }
    let on = |i: usize| Some(b[i] == b'1');
    Some(dto::PublicAccessBlockConfiguration {
        block_public_acls: on(0),
        ignore_public_acls: on(1),
        block_public_policy: on(2),
        restrict_public_buckets: on(3),
    })
}

impl FsStore {
    /// The bucket's configuration (`None`: it has none).
    pub(super) async fn public_access_block(
        &self,
        bucket: &str,
    ) -> S3Result<Option<dto::PublicAccessBlockConfiguration>> {
        match self
            .settings
            .get(&self.disk, Setting::PublicAccessBlock, bucket)
            .await?
        {
            None => Ok(None),
            Some(s) => decode(&s)
                .map(Some)
                .ok_or_else(|| damaged_setting(Setting::PublicAccessBlock, bucket, &s)),
        }
    }

    /// Sets the bucket's configuration, or removes it (`None`).
    pub(super) async fn set_public_access_block(
        &self,
        bucket: &str,
        config: Option<&dto::PublicAccessBlockConfiguration>,
    ) -> S3Result<()> {
        self.disk.existing_bucket(bucket).await?;
        let value = config.map(encode);
        self.settings
            .set(&self.disk, Setting::PublicAccessBlock, bucket, value.as_deref())
            .await
    }

    /// The ACL that counts for a requester other than the owner: `acl`,
    /// or `private` where the bucket ignores public ACLs.
    pub(super) async fn counted_acl(&self, bucket: &str, acl: Canned) -> S3Result<Canned> {
        if !acl.is_public() {
            return Ok(acl);
        }
        let ignore = self
            .public_access_block(bucket)
            .await?
            .is_some_and(|c| c.ignore_public_acls == Some(true));
        Ok(if ignore { Canned::Private } else { acl })
    }

    /// Refuses to set the ACL `acl` in a bucket that blocks public ones.
    pub(super) async fn check_acl_allowed(&self, bucket: &str, acl: Option<Canned>) -> S3Result<()> {
        if !acl.is_some_and(Canned::is_public) {
            return Ok(());
        }
        let block = self
            .public_access_block(bucket)
            .await?
            .is_some_and(|c| c.block_public_acls == Some(true));
        if block {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's PublicAccessBlock blocks public ACLs"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_switches_survive_the_file() {
        for bits in 0..16u8 {
            let c = dto::PublicAccessBlockConfiguration {
                block_public_acls: Some(bits & 1 != 0),
                ignore_public_acls: Some(bits & 2 != 0),
                block_public_policy: Some(bits & 4 != 0),
                restrict_public_buckets: Some(bits & 8 != 0),
            };
            assert_eq!(decode(&encode(&c)), Some(c), "{bits}");
        }
    }

    #[test]
    fn anything_encode_did_not_write_is_damage() {
        for bad in ["", "1", "10101", "0a01", "    "] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
