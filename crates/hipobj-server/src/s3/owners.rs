//! Who may use a bucket (docs/server.md, "Access"): the key that created
//! it, and the keys the configuration shares it with.
//!
//! Owners are recorded as files `<data dir>/.owners/<bucket>`
//! (`hipobj_store::owner_record`: the access key and the bucket's
//! generation), written durably before CreateBucket makes the bucket. The
//! rules fail closed: an existing bucket whose record is missing, empty or
//! unreadable refuses every key (500, with a message that names the
//! repair, `hipobj-server fsck`, and the counter
//! `hipobj_store_metadata_refusals_total`), never opens to all. The record
//! of a deleted bucket stays until the name is created again, by anyone.
//!
//! Every request checks its bucket's owner, so the records are read from
//! disk once and then kept in memory: only this server writes them (the
//! data directory is its own), and `claim` updates the memory with the file.
//! One `Owners` serves the whole server (the S3 policy and the rc-v2
//! control path share its memory).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use hipobj_store::disk::Durability;
use hipobj_store::owner_record::{self, Lookup, OwnerRecord};
use s3s::{S3Error, S3ErrorCode, S3Result};

use super::bucket_use::BucketUses;
use crate::config::{Config, StorageConfig};

/// The ownership rules of one server.
#[derive(Debug, Clone)]
pub struct Owners {
    /// The fs store's data directory (records in its `.owners`); `None`
    /// for a store that has no data directory here (the S3 back end), or
    /// with `bucket_owners = false`, where the model does not apply.
    data: Option<PathBuf>,
    /// Bucket to the other keys that may use it.
    shares: HashMap<String, Vec<String>>,
    /// Records already read or written: bucket to its record, `None` where
    /// there is none. A damaged record is never remembered.
    known: Arc<RwLock<HashMap<String, Option<OwnerRecord>>>>,
    /// Access key to the user id `[[accounts]]` gives it.
    user_ids: HashMap<String, String>,
    /// Whether records are synced before CreateBucket goes on.
    durability: Durability,
    /// The buckets requests are using now (`super::bucket_use`).
    uses: BucketUses,
}

/// A bucket whose owner cannot be known: refused, whoever asks.
fn damaged_error(bucket: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InternalError,
        format!(
            "the owner record of bucket {bucket:?} is missing or damaged, so the bucket refuses every request; \
             an operator can repair it with `hipobj-server fsck`"
        ),
    )
}

impl Owners {
    /// The rules `config` describes; creates the record folder.
    pub fn new(config: &Config) -> Result<Self, crate::Error> {
        let mut shares: HashMap<String, Vec<String>> = HashMap::new();
        for s in &config.access.share {
            shares
                .entry(s.bucket.clone())
                .or_default()
                .extend(s.keys.iter().cloned());
        }
        let durability = Durability::from_sync(config.limits.fsync);
        let data = match &config.storage {
            StorageConfig::Fs { data_dir } if config.access.bucket_owners => {
                let dir = data_dir.join(owner_record::FOLDER);
                hipobj_store::disk::create_dir_all(&dir, durability)
                    .map_err(|e| crate::Error::Storage(format!("{}: {e}", dir.display())))?;
                Some(data_dir.clone())
            }
            _ => None,
        };
        Ok(Self {
            data,
            shares,
            known: Arc::default(),
            user_ids: config
                .accounts
                .iter()
                .map(|a| (a.access_key.clone(), a.user_id.clone()))
                .collect(),
            durability,
            uses: BucketUses::default(),
        })
    }

    /// The buckets in use, shared by every request of this server.
    pub fn uses(&self) -> &BucketUses {
        &self.uses
    }

    /// The user id of `bucket`'s owner (its account's, or its access key),
    /// if recorded.
    pub async fn owner_id(&self, bucket: &str) -> Option<String> {
        let key = self.record(bucket).await.ok()??.key;
        Some(self.user_ids.get(&key).cloned().unwrap_or(key))
    }

    /// `bucket`'s record (`Ok(None)`: none, or the model does not apply);
    /// `Err` with the log's reason for a damaged one.
    async fn record(&self, bucket: &str) -> Result<Option<OwnerRecord>, String> {
        let Some(data) = &self.data else {
            return Ok(None);
        };
        if let Some(known) = self.known.read().ok().and_then(|k| k.get(bucket).cloned()) {
            return Ok(known);
        }
        let found = match owner_record::read(data, bucket).await {
            Lookup::Found(r) => Some(r),
            Lookup::Missing => None,
            // Not remembered: the next request reads the file again, so a
            // repair takes effect at once.
            Lookup::Damaged(why) => return Err(why),
        };
        self.remember(bucket, found.clone());
        Ok(found)
    }

    fn remember(&self, bucket: &str, record: Option<OwnerRecord>) {
        if let Ok(mut k) = self.known.write() {
            k.insert(bucket.to_owned(), record);
        }
    }

    async fn bucket_exists(&self, bucket: &str) -> bool {
        match &self.data {
            Some(d) => tokio::fs::metadata(d.join(bucket))
                .await
                .is_ok_and(|m| m.is_dir()),
            None => false,
        }
    }

    /// The refusal of an existing bucket whose record is missing or
    /// damaged, logged and counted.
    fn refuse_damaged(&self, bucket: &str, why: &str) -> S3Error {
        hipobj_store::damage::metadata_refusal();
        tracing::error!(bucket, "refusing a bucket whose owner record is unusable: {why}");
        damaged_error(bucket)
    }

    /// The record of an existing `bucket`, or the refusal if it has none
    /// that can be trusted; `Ok(None)` where the model does not apply or
    /// the bucket does not exist (the store answers NoSuchBucket, and a
    /// damaged record of a bucket that is gone does not stop CreateBucket
    /// from writing a new one).
    async fn trusted(&self, bucket: &str) -> S3Result<Option<OwnerRecord>> {
        if self.data.is_none() || !self.bucket_exists(bucket).await {
            return Ok(None);
        }
        match self.record(bucket).await {
            Ok(Some(r)) => Ok(Some(r)),
            Ok(None) => Err(self.refuse_damaged(bucket, "no owner record for an existing bucket")),
            Err(why) => Err(self.refuse_damaged(bucket, &why)),
        }
    }

    /// Whether `key` may use `bucket` (any operation but CreateBucket).
    pub async fn check(&self, bucket: &str, key: &str) -> S3Result<()> {
        self.permitted(bucket, key).await.map(drop)
    }

    /// The record `key` is let into `bucket` by (`None` where the model
    /// does not apply or the bucket does not exist), from one read.
    async fn permitted(&self, bucket: &str, key: &str) -> S3Result<Option<OwnerRecord>> {
        let Some(record) = self.trusted(bucket).await? else {
            return Ok(None);
        };
        let shared = self
            .shares
            .get(bucket)
            .is_some_and(|k| k.iter().any(|k| k == key));
        if record.key != key && !shared {
            return Err(S3Error::with_message(
                S3ErrorCode::AccessDenied,
                format!("bucket {bucket:?} belongs to another key"),
            ));
        }
        Ok(Some(record))
    }

    /// Which bucket of the name `bucket` is there now, for `key`: its
    /// generation (the owner's key where its record predates generations),
    /// after the same check as [`Owners::check`]. A session prepared in a
    /// bucket compares it again at each later step, so that one deleted
    /// and made again under the same name, by anyone, ends the session.
    /// `None` where the model does not apply.
    pub async fn generation(&self, bucket: &str, key: &str) -> S3Result<Option<String>> {
        // The generation of the very record the check passed on: a second
        // read could find a bucket made again in between.
        Ok(self
            .permitted(bucket, key)
            .await?
            .map(|r| r.generation.unwrap_or(r.key)))
    }

    /// CreateBucket by `key`: refused if another key owns an existing
    /// bucket of that name, or if an existing bucket's record is unusable;
    /// otherwise `key` is recorded as the owner, on stable storage, before
    /// the store makes the bucket.
    pub async fn claim(&self, bucket: &str, key: &str) -> S3Result<()> {
        let Some(data) = &self.data else { return Ok(()) };
        if hipobj_store::names::check_bucket(bucket).is_err() {
            // The store refuses the name with the right error.
            return Ok(());
        }
        match self.trusted(bucket).await? {
            Some(o) if o.key != key => {
                return Err(S3Error::with_message(
                    S3ErrorCode::BucketAlreadyExists,
                    "The requested bucket name is not available: another key owns it",
                ));
            }
            // Ours: the store answers BucketAlreadyOwnedByYou.
            Some(_) => return Ok(()),
            None => {}
        }
        let record = OwnerRecord::new(key);
        // Forgotten first: whatever happens below, the next request reads
        // the file rather than trust the memory.
        if let Ok(mut k) = self.known.write() {
            k.remove(bucket);
        }
        match owner_record::write(data, bucket, &record, self.durability).await {
            Ok(()) => {
                self.remember(bucket, Some(record));
                Ok(())
            }
            Err(e) if hipobj_store::fs::is_out_of_space(&e) => {
                tracing::warn!(bucket, "recording the owner of a new bucket: {e}");
                Err(hipobj_store::fs::insufficient_storage())
            }
            Err(e) => {
                tracing::error!(bucket, "recording the owner of a new bucket: {e}");
                Err(S3Error::with_message(
                    S3ErrorCode::InternalError,
                    "recording the bucket's owner failed",
                ))
            }
        }
    }

    /// Whether `key` may see `bucket` in ListBuckets.
    pub async fn visible(&self, bucket: &str, key: &str) -> bool {
        self.check(bucket, key).await.is_ok()
    }
}
