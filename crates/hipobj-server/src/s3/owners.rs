//! Who may use a bucket (docs/server.md, "Access"): the key that created
//! it, and the keys the configuration shares it with.
//!
//! Owners are recorded as files `<data dir>/.owners/<bucket>` holding the
//! access key (bucket names cannot start with `.`, so the folder never
//! clashes with a bucket). A bucket with no record (made before the model,
//! or by hand) is open to every configured key, as before. The record of a
//! deleted bucket stays until the name is created again, by anyone.
//!
//! Every request checks its bucket's owner, so the records are read from
//! disk once and then kept in memory: only this server writes them (the
//! data directory is its own), and `claim` updates the memory with the file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::config::{Config, StorageConfig};

/// The ownership rules of one server.
#[derive(Debug, Clone)]
pub struct Owners {
    /// `<data dir>/.owners`; `None` for a store that has no data directory
    /// here (the S3 back end), where the model does not apply.
    dir: Option<PathBuf>,
    /// Where the fs store keeps bucket directories.
    data: Option<PathBuf>,
    /// Bucket to the other keys that may use it.
    shares: HashMap<String, Vec<String>>,
    /// Records already read or written: bucket to its owner, `None` where
    /// there is no record.
    known: Arc<RwLock<HashMap<String, Option<String>>>>,
    /// Access key to the user id `[[accounts]]` gives it.
    user_ids: HashMap<String, String>,
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
        let (dir, data) = match &config.storage {
            StorageConfig::Fs { data_dir } if config.access.bucket_owners => {
                let dir = data_dir.join(".owners");
                std::fs::create_dir_all(&dir)
                    .map_err(|e| crate::Error::Storage(format!("{}: {e}", dir.display())))?;
                (Some(dir), Some(data_dir.clone()))
            }
            _ => (None, None),
        };
        Ok(Self {
            dir,
            data,
            shares,
            known: Arc::default(),
            user_ids: config
                .accounts
                .iter()
                .map(|a| (a.access_key.clone(), a.user_id.clone()))
                .collect(),
        })
    }

    /// The user id of `bucket`'s owner (its account's, or its access key),
    /// if recorded.
    pub async fn owner_id(&self, bucket: &str) -> Option<String> {
        let key = self.owner(bucket).await?;
        Some(self.user_ids.get(&key).cloned().unwrap_or(key))
    }

    /// The key that owns `bucket`, if recorded.
    async fn owner(&self, bucket: &str) -> Option<String> {
        let dir = self.dir.as_ref()?;
        if let Some(known) = self.known.read().ok().and_then(|k| k.get(bucket).cloned()) {
            return known;
        }
        let owner = match tokio::fs::read_to_string(dir.join(bucket)).await {
            Ok(s) => Some(s.trim().to_owned()),
            // No record: remembered as such. Any other failure is not
            // remembered, so the next request reads the file again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => return None,
        };
        self.remember(bucket, owner.clone());
        owner
    }

    fn remember(&self, bucket: &str, owner: Option<String>) {
        if let Ok(mut k) = self.known.write() {
            k.insert(bucket.to_owned(), owner);
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

    /// Whether `key` may use `bucket` (any operation but CreateBucket).
    pub async fn check(&self, bucket: &str, key: &str) -> S3Result<()> {
        if self.dir.is_none()
            || self
                .shares
                .get(bucket)
                .is_some_and(|k| k.iter().any(|k| k == key))
        {
            return Ok(());
        }
        match self.owner(bucket).await {
            Some(o) if o != key && self.bucket_exists(bucket).await => Err(S3Error::with_message(
                S3ErrorCode::AccessDenied,
                format!("bucket {bucket:?} belongs to another key"),
            )),
            _ => Ok(()),
        }
    }

    /// CreateBucket by `key`: refused if another key owns an existing
    /// bucket of that name; otherwise `key` is recorded as the owner.
    pub async fn claim(&self, bucket: &str, key: &str) -> S3Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        if hipobj_store::names::check_bucket(bucket).is_err() {
            // The store refuses the name with the right error.
            return Ok(());
        }
        if self.bucket_exists(bucket).await {
            return match self.owner(bucket).await {
                Some(o) if o != key => Err(S3Error::with_message(
                    S3ErrorCode::BucketAlreadyExists,
                    "The requested bucket name is not available: another key owns it",
                )),
                // Ours, or made before owners were recorded: the store
                // answers BucketAlreadyOwnedByYou.
                _ => Ok(()),
            };
        }
        match tokio::fs::write(dir.join(bucket), key).await {
            Ok(()) => {
                self.remember(bucket, Some(key.to_owned()));
                Ok(())
            }
            Err(e) => {
                // The file may hold part of the key: the next request reads
                // it again rather than trust the memory.
                if let Ok(mut k) = self.known.write() {
                    k.remove(bucket);
                }
                tracing::error!("recording the owner of {bucket}: {e}");
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
