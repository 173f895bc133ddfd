//! The embedded store: objects as files under one data directory.
//!
//! Layout (docs/server.md has the full description):
//!
//! ```text
//! <root>/<bucket>/o-<hex of key>      one file per object (keys up to 100 bytes)
//! <root>/<bucket>/h-<sha256 of key>   one file per object (longer keys)
//! <root>/.format                      the data directory's format version (`format`)
//! <root>/.tmp/                        files being written
//! <root>/.uploads/<upload id>/        a multipart upload: upload.json, part-00001, ...
//! <root>/.keys/sse-s3.key             the SSE-S3 master key (unless configured elsewhere)
//! <root>/.encryption/<bucket>         a bucket's default encryption (PutBucketEncryption)
//! <root>/.acls/<bucket>               a bucket's canned ACL, unless private
//! <root>/.public-access/<bucket>      a bucket's PublicAccessBlock
//! <root>/.versioning/<bucket>         Enabled or Suspended (no file: never versioned)
//! <root>/<bucket>/v-<object file>/    the versions of a key (see `versions`)
//! ```
//!
//! An object file holds the data, then its metadata as JSON, then the
//! JSON's length (u32, little-endian) and the magic `HOB1`. A write goes to
//! a fresh file in `.tmp`, is verified (length, Content-MD5, checksums),
//! then renamed over the object's name: readers see the old object or the
//! new one, never a part of either. An encrypted object's data is
//! ciphertext (`sse`), and its metadata says how to decrypt it. Bucket
//! names cannot start with `.`, so the internal folders never clash with a
//! bucket, and object file names are derived from the key, never the key
//! itself, so no key can name a path outside its bucket.
//!
//! The store's files, one concern each:
//!
//! * `layout`: names on disk, temporary files, the trailer (sealing, reading);
//! * `write`: filling a temporary file from a request body or a stored file;
//! * `checksums`: what a request says its body hashes to, and the check;
//! * `conditions`: conditional reads and writes (If-Match and friends);
//! * `object`: what is stored with an object and how a read describes it;
//! * `sse`: encryption at rest (SSE-S3, SSE-C): keys, chunks, ranges;
//! * `settings`: a bucket's settings on disk (versioning, encryption, ACL);
//! * `bucket_encryption`: a bucket's default encryption;
//! * `acl`: canned ACLs on buckets and objects, and who they let in;
//! * `public_access`: a bucket's PublicAccessBlock and its ACL switches;
//! * `index`: the listings' ordered index of keys and uploads, in memory;
//! * `listing`: ListObjects (both versions), ListObjectVersions, ListBuckets;
//! * `uploads`: multipart uploads and their parts;
//! * `upload_sums`: an upload's checksum algorithm and the object's checksum of its parts';
//! * `versions`: bucket versioning, the versions of a key on disk;
//! * `format`: the data directory's format version, checked at every open;
//! * `fsck`: the offline check and repair of a data directory (and `scrub`);
//! * `s3`: only `impl S3 for FsStore`, each operation in terms of the above.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::dto::{self, ETag, Timestamp};
use s3s::{S3Error, S3ErrorCode};

use crate::disk::{self, Durability};

pub use fsck::{Finding, FsckOptions, FsckReport, fsck};
pub use layout::parse_object_file;
pub use uploads::parse_upload_file;

mod acl;
mod bucket_encryption;
mod checksums;
mod conditions;
pub mod format;
mod fsck;
mod index;
mod layout;
mod listing;
mod object;
mod public_access;
mod s3;
mod settings;
mod sse;
mod upload_sums;
mod uploads;
mod versions;
mod write;

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
const US_EAST_1: &str = "us-east-1";

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
    root: PathBuf,
    limits: FsLimits,
    counter: AtomicU64,
    /// Held between the check and the commit of a conditional write, and
    /// around every change to a key's versions.
    cond_lock: tokio::sync::Mutex<()>,
    /// Bucket settings read or written so far (`settings`).
    settings: settings::Cache,
    /// When stale uploads were last swept (`now_ms`), 0: never.
    last_sweep_ms: AtomicU64,
    /// The key-encryption key of SSE-S3 objects.
    master: sse::MasterKey,
    /// The listings' index (`index`).
    index: std::sync::Arc<index::KeyIndex>,
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
            root,
            limits,
            counter: AtomicU64::new(0),
            cond_lock: tokio::sync::Mutex::new(()),
            settings: settings::Cache::default(),
            last_sweep_ms: AtomicU64::new(0),
            master,
        })
    }

    /// Whether changes are synced before they are acknowledged.
    fn durability(&self) -> Durability {
        Durability::from_sync(self.limits.sync)
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The owner of a bucket's objects: the key that created the bucket
    /// (the record s3::owners keeps in `.owners/`; objects belong to their
    /// bucket's owner, as with S3's default object ownership), else the
    /// key asking, else this server.
    /// Whether `id` is the user id of an account of this server.
    fn is_account(&self, id: &str) -> bool {
        self.limits.accounts.values().any(|(known, _)| known == id)
    }

    async fn bucket_owner(&self, bucket: &str, asking: &Option<s3s::auth::Credentials>) -> dto::Owner {
        let recorded = match crate::owner_record::read(&self.root, bucket).await {
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

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// A failure of the store's own: logged with `what` and the cause (which
/// may name files of the data directory), answered with neither. A cause
/// that is a full file system or an exhausted quota (`ENOSPC`, `EDQUOT`) is
/// [`insufficient_storage`], which a client can act on; anything else is
/// `500 InternalError`.
fn internal<E: std::fmt::Display + 'static>(what: &str, e: E) -> S3Error {
    let io = (&e as &dyn std::any::Any).downcast_ref::<std::io::Error>();
    if io.is_some_and(is_out_of_space) {
        tracing::warn!("fs store: {what}: {e}");
        return insufficient_storage();
    }
    tracing::error!("fs store: {what}: {e}");
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "The server met an internal error; its log has the details.",
    )
}

/// Whether `e` says the data directory's file system is full, or its
/// owner's quota spent.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// `507 InsufficientStorage`: the answer to a write that found no room.
/// S3 itself never runs out of space; the S3-compatible stores that can
/// (MinIO's `XMinioStorageFull`, versitygw's `InsufficientStorage`) answer
/// 507, which clients do not retry as they retry a 500 or a 503. Nothing of
/// the write is kept: it was going to a temporary file, which is removed.
pub fn insufficient_storage() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("InsufficientStorage".into()),
        "The server has no room left to store this data; free some space and try again.",
    );
    e.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
    e
}

fn io_kind(e: &std::io::Error) -> std::io::ErrorKind {
    e.kind()
}

fn strip_quotes(s: &str) -> &str {
    s.trim_start_matches("W/").trim_matches('"')
}

fn etag_of(e: &ETag) -> &str {
    match e {
        ETag::Strong(s) | ETag::Weak(s) => s,
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
