//! The store's state: its data directory, its limits, and what it keeps
//! between requests (the settings cache, the listings' index, the SSE-S3
//! master key). Each concern of the store extends [`FsStore`] in a file of
//! its own; this file depends on none of them.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use s3s::dto;

use super::{format, index, layout, settings, sse};
use crate::disk::{self, Durability};

/// Limits of the filesystem store.
#[derive(Clone, Debug)]
pub struct FsLimits {
    /// Largest object or part accepted by PutObject or UploadPart.
    pub max_object_size: u64,
    /// Smallest part other than the last one in CompleteMultipartUpload.
    pub min_part_size: u64,
    /// Flush each file to disk before it becomes visible.
    pub sync: bool,
    /// Multipart uploads initiated longer ago than this (milliseconds) are
    /// removed with their parts.
    pub upload_expiry_ms: u64,
    /// DeleteBucket refuses while uploads are in progress (rather than
    /// aborting them, as AWS does).
    pub refuse_delete_with_uploads: bool,
    /// The region the buckets are in (GetBucketLocation; the only
    /// LocationConstraint CreateBucket accepts).
    pub region: String,
    /// The SSE-S3 master key's file (`None`: `.keys/sse-s3.key` in the
    /// data directory), created with a fresh key if missing.
    pub sse_s3_key_file: Option<PathBuf>,
    /// The user id and display name of an access key's account (owners in
    /// ACLs and listings; a key missing here is named by itself).
    pub accounts: std::collections::BTreeMap<String, (String, String)>,
    /// Whether buckets have owner records (`crate::owner_record`, kept by
    /// the gateway): ListBuckets then shows a key only the buckets whose
    /// record names it, and none whose record is missing or damaged.
    pub owner_records: bool,
}

/// AWS's first region, whose GetBucketLocation answer is empty.
pub(super) const US_EAST_1: &str = "us-east-1";

impl Default for FsLimits {
    fn default() -> Self {
        Self {
            max_object_size: 5 << 30,
            min_part_size: 5 << 20,
            sync: true,
            upload_expiry_ms: 7 * 24 * 3600 * 1000,
            refuse_delete_with_uploads: false,
            region: US_EAST_1.into(),
            sse_s3_key_file: None,
            accounts: std::collections::BTreeMap::new(),
            owner_records: false,
        }
    }
}

/// The filesystem store. See the module documentation.
#[derive(Debug)]
pub struct FsStore {
    /// Where everything is on disk (`layout`).
    pub(super) disk: layout::Disk,
    pub(super) limits: FsLimits,
    /// Held between the check and the commit of a conditional write, and
    /// around every change to a key's versions.
    pub(super) cond_lock: tokio::sync::Mutex<()>,
    /// Bucket settings read or written so far (`settings`).
    pub(super) settings: settings::Settings,
    /// When stale uploads were last swept (`now_ms`), 0: never.
    pub(super) last_sweep_ms: AtomicU64,
    /// The key-encryption key of SSE-S3 objects.
    pub(super) master: sse::MasterKey,
    /// The listings' index (`index`).
    pub(super) index: std::sync::Arc<index::KeyIndex>,
}

impl FsStore {
    /// Opens (creating it if needed) the store in `root`, and removes
    /// files left in `.tmp` by an earlier run.
    pub fn open(root: impl AsRef<Path>, limits: FsLimits) -> std::io::Result<Self> {
        let root = root.as_ref();
        let d = Durability::from_sync(limits.sync);
        disk::create_dir_all(root, d)?;
        let root = root.canonicalize()?;
        // Before anything is changed: a format this release does not read
        // is refused as it is.
        format::check_and_mark(&root, d)?;
        let tmp = root.join(".tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        disk::create_dir_all(&tmp, d)?;
        disk::create_dir_all(&root.join(".uploads"), d)?;
        let key_file = limits
            .sse_s3_key_file
            .clone()
            .unwrap_or_else(|| root.join(".keys").join("sse-s3.key"));
        let master = sse::MasterKey::load_or_create(&key_file)?;
        Ok(Self {
            index: index::KeyIndex::of(&root),
            disk: layout::Disk::new(root, limits.sync),
            limits,
            cond_lock: tokio::sync::Mutex::new(()),
            settings: settings::Settings::default(),
            last_sweep_ms: AtomicU64::new(0),
            master,
        })
    }

    /// Whether changes are synced before they are acknowledged.
    pub(super) fn durability(&self) -> Durability {
        self.disk.durability()
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.disk.root
    }

    /// The owner of a bucket's objects: the key that created the bucket
    /// (the record s3::owners keeps in `.owners/`; objects belong to their
    /// bucket's owner, as with S3's default object ownership), else the
    /// key asking, else this server.
    /// Whether `id` is the user id of an account of this server.
    pub(super) fn is_account(&self, id: &str) -> bool {
        self.limits.accounts.values().any(|(known, _)| known == id)
    }

    pub(super) async fn bucket_owner(
        &self,
        bucket: &str,
        asking: &Option<s3s::auth::Credentials>,
    ) -> dto::Owner {
        let recorded = match crate::owner_record::read(&self.disk.root, bucket).await {
            crate::owner_record::Lookup::Found(r) => Some(r.key),
            _ => None,
        };
        let key = recorded
            .or_else(|| asking.as_ref().map(|c| c.access_key.clone()))
            .unwrap_or_else(|| "hipobj".into());
        let (id, name) = self
            .limits
            .accounts
            .get(&key)
            .cloned()
            .unwrap_or_else(|| (key.clone(), key));
        dto::Owner {
            display_name: Some(name),
            id: Some(id),
        }
    }
}
