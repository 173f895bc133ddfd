//! Versioning: the versions of a key on disk, and the operations that
//! read, add and remove them.
//!
//! A bucket's state (never versioned, Enabled, Suspended) is the file
//! `<root>/.versioning/<bucket>`; no file: never versioned, and the store
//! behaves as it always has (one file per key, no version folders). Once a
//! bucket is versioned, each key that has versions has a folder next to its
//! object file:
//!
//! ```text
//! <bucket>/o-<hex of key>                   the current version (a hard link)
//! <bucket>/v-o-<hex of key>/<seq>-<id>      every version, sealed as objects are
//! ```
//!
//! `<seq>` is 16 hex digits, one more than the largest in the folder when
//! the version was added, so the names sort oldest to newest whatever the
//! clock says; `<id>` is the version id, 32 hex digits, or `null`. A delete
//! marker is a sealed file with no data whose metadata says so. The object
//! file is a second name for the newest version when that is not a marker,
//! absent when it is: the unversioned read path and listings keep reading
//! the object file. An object file that is no version of the folder (same
//! device and inode as none of them) is the null version, newest of all:
//! that is what an object written before versioning was enabled is.
//!
//! Every change to a key's versions happens under the store's write lock
//! (`cond_lock`), in an order that leaves a state the read path accepts if
//! the process stops between two steps:
//!
//! * adding a version: (1) a loose object file is linked into the folder as
//!   the null version; (2) the new version is linked into the folder;
//!   (3) the object file is replaced by a link to it (removed for a
//!   marker); (4) older null versions are removed. After (1) or (2) the
//!   object file is a version, not the newest: reads and listings go by the
//!   folder, whose newest entry is the truth, and the next change of the
//!   key rewrites the object file. After (3) there can be two null entries:
//!   the newest counts, the next change removes the others.
//! * removing a version: (1) if it is the newest, the object file is
//!   pointed at the next one (or removed); (2) the version's file is
//!   removed; (3) an empty folder is removed. Stopping after (1) leaves the
//!   version in place as the newest: as if it was never removed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use s3s::dto::{self, ETag};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::canned::{self, Access};
use super::conditions::{ReadConditions, WriteCondition};
use super::errors::{internal, io_kind};
use super::index::{Item, Walk};
use super::layout::{Disk, FOLDER, Stored, TempFile};
use super::listing::{ListArgs, common_prefixes, encode_key};
use super::object::Meta;
use super::settings::{Setting, Status, damaged_setting};
use super::store::FsStore;
use super::text::{i64_of, now_ms, timestamp, unhex};
use crate::Requester;
use crate::disk::nonblocking as ndisk;

/// The null version's id.
pub(super) const NULL: &str = "null";

/// One version of a key.
struct Version {
    seq: u64,
    id: String,
    path: PathBuf,
    /// The object file not yet linked into the folder (the null version).
    loose: bool,
}

/// The versions of one key, newest first.
struct Versions {
    folder: PathBuf,
    current: PathBuf,
    list: Vec<Version>,
    /// Null entries that a newer null version replaced.
    stale: Vec<PathBuf>,
    /// The largest sequence number in use.
    top: u64,
}

/// What a deletion did: the version it made or removed, and whether that
/// is a delete marker.
#[derive(Default)]
pub(super) struct Deleted {
    pub(super) version_id: Option<String>,
    pub(super) marker: bool,
}

/// A version id as clients send it: `null` or 32 hex digits.
fn check_version_id(id: &str) -> S3Result<()> {
    if id == NULL || (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())) {
        Ok(())
    } else {
        Err(s3_error!(InvalidArgument, "Invalid version id specified"))
    }
}

fn new_version_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The device and inode of a file, `None` if it does not exist.
async fn identity(path: &Path) -> S3Result<Option<(u64, u64)>> {
    match tokio::fs::symlink_metadata(path).await {
        Ok(m) => Ok(Some((m.dev(), m.ino()))),
        Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(internal("reading a version", e)),
    }
}

/// The error `code` about the delete marker `id`, with the headers S3
/// sends with it (`x-amz-delete-marker`, `x-amz-version-id`).
fn marker_error(code: S3ErrorCode, message: &str, id: &str) -> S3Error {
    let mut e = S3Error::with_message(code, message.to_owned());
    let mut h = http::HeaderMap::new();
    h.insert("x-amz-delete-marker", http::HeaderValue::from_static("true"));
    if let Ok(v) = http::HeaderValue::from_str(id) {
        h.insert("x-amz-version-id", v);
    }
    e.set_headers(h);
    e
}

impl Versions {
    /// Reads the versions of `key` in the bucket folder `dir`.
    async fn load(dir: &Path, key: &str) -> S3Result<Self> {
        let name = Disk::file_name(key);
        let folder = dir.join(format!("{FOLDER}{name}"));
        let current = dir.join(&name);
        let mut list = Vec::new();
        match tokio::fs::read_dir(&folder).await {
            Ok(mut rd) => {
                while let Some(ent) = rd
                    .next_entry()
                    .await
                    .map_err(|e| internal("reading versions", e))?
                {
                    let file = ent.file_name();
                    let Some((seq, id)) = file.to_str().and_then(|n| n.split_once('-')) else {
                        continue;
                    };
                    let Ok(seq) = u64::from_str_radix(seq, 16) else {
                        continue;
                    };
                    if check_version_id(id).is_err() {
                        continue;
                    }
                    list.push(Version {
                        seq,
                        id: id.to_owned(),
                        path: ent.path(),
                        loose: false,
                    });
                }
            }
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal("reading versions", e)),
        }
        list.sort_by_key(|v| std::cmp::Reverse(v.seq));
        let top = list.first().map_or(0, |v| v.seq);
        let mut stale = Vec::new();
        let mut seen_null = false;
        list.retain(|v| {
            if v.id != NULL {
                return true;
            }
            if seen_null {
                stale.push(v.path.clone());
                return false;
            }
            seen_null = true;
            true
        });
        let mut vs = Self {
            folder,
            current,
            list,
            stale,
            top,
        };
        vs.find_loose().await?;
        Ok(vs)
    }

    /// Puts an object file that is none of the folder's versions first, as
    /// the null version (replacing any other null version).
    async fn find_loose(&mut self) -> S3Result<()> {
        let Some(current) = identity(&self.current).await? else {
            return Ok(());
        };
        // Usually the object file is the newest version: one look.
        for v in &self.list {
            if identity(&v.path).await? == Some(current) {
                return Ok(());
            }
        }
        if let Some(i) = self.list.iter().position(|v| v.id == NULL) {
            let old = self.list.remove(i);
            self.stale.push(old.path);
        }
        self.top += 1;
        self.list.insert(
            0,
            Version {
                seq: self.top,
                id: NULL.to_owned(),
                path: self.current.clone(),
                loose: true,
            },
        );
        Ok(())
    }

    fn entry(&mut self, id: &str) -> PathBuf {
        self.top += 1;
        self.folder.join(format!("{:016x}-{id}", self.top))
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.list.iter().position(|v| v.id == id)
    }
}

impl FsStore {
    /// The versioning state of `bucket` (an existing bucket).
    pub(super) async fn versioning(&self, bucket: &str) -> S3Result<Status> {
        Ok(
            match self
                .settings
                .get(&self.disk, Setting::Versioning, bucket)
                .await?
                .as_deref()
            {
                Some(dto::BucketVersioningStatus::ENABLED) => Status::Enabled,
                Some(dto::BucketVersioningStatus::SUSPENDED) => Status::Suspended,
                None => Status::Off,
                Some(other) => return Err(damaged_setting(Setting::Versioning, bucket, other)),
            },
        )
    }

    /// PutBucketVersioning: records the state (a temporary file renamed
    /// over the old one).
    pub(super) async fn set_versioning(
        &self,
        bucket: &str,
        config: &dto::VersioningConfiguration,
    ) -> S3Result<()> {
        self.disk.existing_bucket(bucket).await?;
        if config
            .mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == dto::MFADelete::ENABLED)
        {
            return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        let status = match config.status.as_ref().map(dto::BucketVersioningStatus::as_str) {
            Some(dto::BucketVersioningStatus::ENABLED) => Status::Enabled,
            Some(dto::BucketVersioningStatus::SUSPENDED) => Status::Suspended,
            // A configuration without a status changes nothing, as in S3.
            None => return Ok(()),
            Some(_) => {
                return Err(S3Error::with_message(
                    S3ErrorCode::IllegalVersioningConfigurationException,
                    "The Versioning element must be Enabled or Suspended",
                ));
            }
        };
        let text = match status {
            Status::Suspended => dto::BucketVersioningStatus::SUSPENDED,
            _ => dto::BucketVersioningStatus::ENABLED,
        };
        self.settings
            .set(&self.disk, Setting::Versioning, bucket, Some(text))
            .await
    }

    /// GetBucketVersioning's answer: no status for a bucket never versioned.
    pub(super) async fn get_versioning(&self, bucket: &str) -> S3Result<dto::GetBucketVersioningOutput> {
        self.disk.existing_bucket(bucket).await?;
        let status = match self.versioning(bucket).await? {
            Status::Off => None,
            Status::Enabled => Some(dto::BucketVersioningStatus::ENABLED),
            Status::Suspended => Some(dto::BucketVersioningStatus::SUSPENDED),
        };
        Ok(dto::GetBucketVersioningOutput {
            status: status.map(dto::BucketVersioningStatus::from_static),
            mfa_delete: None,
        })
    }

    /// The version `version_id` of `key` (the newest without one), if the
    /// requester may read it and then the read conditions hold (ACLs
    /// first: see [`FsStore::read_as`]); with the version id to report
    /// (`None` in a bucket never versioned). `copy`: the source of a copy,
    /// whose errors differ.
    pub(super) async fn read_version_if(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        (cond, who): (ReadConditions<'_>, &Requester),
        copy: bool,
    ) -> S3Result<(Stored, Option<String>)> {
        let path = self.disk.object_path(bucket, key).await?;
        if let Some(id) = version_id {
            check_version_id(id)?;
        }
        let status = self.versioning(bucket).await?;
        if status == Status::Off && version_id.is_none() {
            if copy {
                return Ok((Self::read_if(&path, cond, copy).await?, None));
            }
            return Ok((self.read_as(bucket, &path, who, cond).await?, None));
        }
        let dir = self.disk.existing_bucket(bucket).await?;
        // A requester who may not list the bucket learns nothing of what is
        // missing or deleted: 403 for all of it, as S3.
        let may_list =
            *who == Requester::Owner || self.check_bucket_access(bucket, who, Access::Read).await.is_ok();
        let hide = |e: S3Error| if may_list { e } else { s3_error!(AccessDenied) };
        let no_version = || hide(s3_error!(NoSuchVersion, "The specified version does not exist."));
        let no_key = || {
            hide(if copy {
                s3_error!(NoSuchKey, "the copy source does not exist")
            } else {
                s3_error!(NoSuchKey)
            })
        };
        // Reads take no lock: a version removed between reading the folder
        // and opening the file is looked for once more.
        let mut tries = 0;
        let (chosen, st) = loop {
            tries += 1;
            let mut vs = Versions::load(&dir, key).await?;
            let i = match version_id {
                None if vs.list.is_empty() => return Err(no_key()),
                None => 0,
                Some(id) => vs.find(id).ok_or_else(no_version)?,
            };
            let chosen = vs.list.swap_remove(i);
            match Disk::read_stored(&chosen.path).await? {
                Some(st) => break (chosen, st),
                None if tries < 2 => {}
                None => {
                    return Err(if version_id.is_some() {
                        no_version()
                    } else {
                        no_key()
                    });
                }
            }
        };
        if st.meta.delete_marker {
            return Err(hide(match (version_id, copy) {
                (None, _) => marker_error(
                    S3ErrorCode::NoSuchKey,
                    "The specified key does not exist.",
                    &chosen.id,
                ),
                (Some(_), false) => {
                    let mut e = marker_error(
                        S3ErrorCode::MethodNotAllowed,
                        "The specified method is not allowed against this resource.",
                        &chosen.id,
                    );
                    e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
                    e
                }
                (Some(_), true) => s3_error!(
                    InvalidRequest,
                    "The source of a copy request may not specifically refer to a delete marker by version id."
                ),
            }));
        }
        canned::check(
            self.counted_acl(bucket, st.meta.acl.unwrap_or_default()).await?,
            who,
            Access::Read,
        )?;
        cond.check(&st.meta, copy)?;
        let id = (status != Status::Off || version_id.is_some()).then(|| chosen.id.clone());
        Ok((st, id))
    }

    /// Makes `tmp` (filled, not sealed) the new object `key` if `cond`
    /// holds: in a bucket never versioned as [`FsStore::finish_if`], else
    /// as a new version (the null version while versioning is suspended).
    /// Sets `meta`'s version id; returns it (`None` for a null version).
    /// The key's entry in the listings' index follows, whatever happened.
    pub(super) async fn store_object(
        &self,
        bucket: &str,
        key: &str,
        tmp: TempFile,
        meta: &mut Meta,
        cond: WriteCondition,
    ) -> S3Result<Option<String>> {
        let done = self.store_object_in(bucket, key, tmp, meta, cond).await;
        self.reindex(bucket, key).await;
        done
    }

    async fn store_object_in(
        &self,
        bucket: &str,
        key: &str,
        tmp: TempFile,
        meta: &mut Meta,
        cond: WriteCondition,
    ) -> S3Result<Option<String>> {
        let dest = self.disk.object_path(bucket, key).await?;
        let status = self.versioning(bucket).await?;
        if status == Status::Off {
            self.finish_if(tmp, meta, &dest, cond).await?;
            return Ok(None);
        }
        meta.version_id = (status == Status::Enabled).then(new_version_id);
        let id = meta.version_id.clone().unwrap_or_else(|| NULL.to_owned());
        let tmp = self.disk.seal(tmp, meta).await?;
        let dir = self.disk.existing_bucket(bucket).await?;
        let _turn = self.cond_lock.lock().await;
        let mut vs = Versions::load(&dir, key).await?;
        let newest = match vs.list.first() {
            Some(v) => Disk::read_stored(&v.path)
                .await?
                .map(|st| st.meta)
                .filter(|m| !m.delete_marker),
            None => None,
        };
        cond.check(newest.as_ref())?;
        self.add_version(&mut vs, tmp, &id, false).await?;
        // A write while versioning is suspended makes the null version,
        // and S3 names no version in its answer.
        Ok(meta.version_id.clone())
    }

    /// DeleteObject without a version id: removes the object in a bucket
    /// never versioned, else adds a delete marker (the null version while
    /// versioning is suspended).
    /// The key's entry in the listings' index follows, whatever happened.
    pub(super) async fn delete_newest(&self, bucket: &str, key: &str) -> S3Result<Deleted> {
        let done = self.delete_newest_in(bucket, key).await;
        self.reindex(bucket, key).await;
        done
    }

    async fn delete_newest_in(&self, bucket: &str, key: &str) -> S3Result<Deleted> {
        let path = self.disk.object_path(bucket, key).await?;
        let status = self.versioning(bucket).await?;
        if status == Status::Off {
            return match ndisk::remove_file(&path, self.durability()).await {
                Ok(()) => Ok(Deleted::default()),
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(Deleted::default()),
                Err(e) => Err(internal("deleting an object", e)),
            };
        }
        let meta = Meta {
            key: key.to_owned(),
            modified_ms: now_ms(),
            version_id: (status == Status::Enabled).then(new_version_id),
            delete_marker: true,
            ..Default::default()
        };
        let id = meta.version_id.clone().unwrap_or_else(|| NULL.to_owned());
        let tmp = self.disk.seal(self.disk.temp().await?, &meta).await?;
        let dir = self.disk.existing_bucket(bucket).await?;
        let _turn = self.cond_lock.lock().await;
        let mut vs = Versions::load(&dir, key).await?;
        self.add_version(&mut vs, tmp, &id, true).await?;
        Ok(Deleted {
            version_id: Some(id),
            marker: true,
        })
    }

    /// DeleteObject with a version id: removes that version (nothing if
    /// there is none); the one before it becomes the newest.
    /// The key's entry in the listings' index follows, whatever happened.
    pub(super) async fn delete_version(&self, bucket: &str, key: &str, id: &str) -> S3Result<Deleted> {
        let done = self.delete_version_in(bucket, key, id).await;
        self.reindex(bucket, key).await;
        done
    }

    async fn delete_version_in(&self, bucket: &str, key: &str, id: &str) -> S3Result<Deleted> {
        check_version_id(id)?;
        self.disk.object_path(bucket, key).await?;
        let dir = self.disk.existing_bucket(bucket).await?;
        let _turn = self.cond_lock.lock().await;
        let vs = Versions::load(&dir, key).await?;
        let mut gone = Deleted {
            version_id: Some(id.to_owned()),
            marker: false,
        };
        let Some(i) = vs.find(id) else {
            return Ok(gone);
        };
        gone.marker = Disk::read_stored(&vs.list[i].path)
            .await?
            .is_some_and(|st| st.meta.delete_marker);
        if i == 0 {
            let next = match vs.list.get(1) {
                Some(v) => match Disk::read_stored(&v.path).await? {
                    Some(st) if !st.meta.delete_marker => Some(v.path.clone()),
                    _ => None,
                },
                None => None,
            };
            self.point_current(&vs.current, next.as_deref()).await?;
        }
        let v = &vs.list[i];
        if !v.loose {
            match ndisk::remove_file(&v.path, self.durability()).await {
                Ok(()) => {}
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal("removing a version", e)),
            }
        }
        self.tidy(&vs).await;
        Ok(gone)
    }

    /// Links the sealed `tmp` into the folder as version `id` and makes it
    /// the newest (see the module documentation for the steps).
    async fn add_version(&self, vs: &mut Versions, tmp: TempFile, id: &str, marker: bool) -> S3Result<()> {
        let sync = self.disk.sync;
        ndisk::create_dir_all(&vs.folder, self.durability())
            .await
            .map_err(|e| internal("creating a version folder", e))?;
        if let Some(first) = vs.list.first()
            && first.loose
        {
            let entry = vs.entry(NULL);
            ndisk::hard_link(&vs.current, &entry, self.durability())
                .await
                .map_err(|e| internal("keeping the null version", e))?;
            if let Some(v) = vs.list.first_mut() {
                v.path = entry;
                v.loose = false;
            }
        }
        let entry = vs.entry(id);
        tmp.commit_new(&entry, sync)
            .await
            .map_err(|e| internal("committing a version", e))?;
        self.point_current(&vs.current, (!marker).then_some(entry.as_path()))
            .await?;
        if id == NULL
            && let Some(old) = vs.list.iter().find(|v| v.id == NULL)
        {
            vs.stale.push(old.path.clone());
        }
        self.tidy(vs).await;
        Ok(())
    }

    /// Changes the record of version `version_id` of `key` (the newest
    /// without one) with `edit`: PutObjectAcl. The version's file is
    /// written again, and the object file pointed at it again when it is
    /// the newest, so that it stays the same file as its version.
    pub(super) async fn edit_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        edit: impl FnOnce(&mut Meta),
    ) -> S3Result<()> {
        let path = self.disk.object_path(bucket, key).await?;
        if let Some(id) = version_id {
            check_version_id(id)?;
        }
        let _turn = self.cond_lock.lock().await;
        if self.versioning(bucket).await? == Status::Off && version_id.is_none() {
            return self.rewrite_file(&path, edit).await;
        }
        let dir = self.disk.existing_bucket(bucket).await?;
        let vs = Versions::load(&dir, key).await?;
        let i = match version_id {
            None if vs.list.is_empty() => return Err(s3_error!(NoSuchKey)),
            None => 0,
            Some(id) => vs
                .find(id)
                .ok_or_else(|| s3_error!(NoSuchVersion, "The specified version does not exist."))?,
        };
        let v = &vs.list[i];
        let marker = Disk::read_stored(&v.path)
            .await?
            .is_some_and(|st| st.meta.delete_marker);
        if marker {
            return Err(marker_error(
                S3ErrorCode::MethodNotAllowed,
                "The specified method is not allowed against this resource.",
                &v.id,
            ));
        }
        self.rewrite_file(&v.path, edit).await?;
        if i == 0 && !v.loose {
            self.point_current(&vs.current, Some(&v.path)).await?;
        }
        Ok(())
    }

    /// Makes the object file a link to `to`, or removes it for `None`.
    async fn point_current(&self, current: &Path, to: Option<&Path>) -> S3Result<()> {
        let Some(to) = to else {
            return match ndisk::remove_file(current, self.durability()).await {
                Ok(()) => Ok(()),
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(internal("removing the current version's name", e)),
            };
        };
        let link = self
            .disk
            .root
            .join(".tmp")
            .join(format!("{}-current", new_version_id()));
        tokio::fs::hard_link(to, &link)
            .await
            .map_err(|e| internal("linking the current version", e))?;
        if let Err(e) = ndisk::rename(&link, current, self.durability()).await {
            let _ = tokio::fs::remove_file(&link).await;
            return Err(internal("linking the current version", e));
        }
        Ok(())
    }

    /// Removes superseded null entries, and the folder once it is empty
    /// (best effort: what is left is tolerated and tidied next time).
    async fn tidy(&self, vs: &Versions) {
        for p in &vs.stale {
            if let Err(e) = ndisk::remove_file(p, self.durability()).await
                && io_kind(&e) != std::io::ErrorKind::NotFound
            {
                tracing::warn!("removing {}: {e}", p.display());
            }
        }
        // Fails, as it should, while the folder holds a version.
        let _ = tokio::fs::remove_dir(&vs.folder).await;
    }

    /// Removes the empty version folders of the bucket folder `dir` (a
    /// crash while adding a first version can leave one), so that they do
    /// not keep DeleteBucket from deleting a bucket that lists nothing.
    pub(super) async fn drop_empty_folders(&self, dir: &Path) -> S3Result<()> {
        let _turn = self.cond_lock.lock().await;
        let mut rd = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| internal("reading a bucket", e))?;
        while let Some(ent) = rd
            .next_entry()
            .await
            .map_err(|e| internal("reading a bucket", e))?
        {
            if ent.file_name().to_str().is_some_and(|n| n.starts_with(FOLDER)) {
                // Fails, as it should, for a folder that holds versions.
                let _ = tokio::fs::remove_dir(ent.path()).await;
            }
        }
        Ok(())
    }

    /// The key a name in a bucket folder stands for, and whether the name
    /// is a folder of versions; `None` for a name that is neither an object
    /// nor a folder.
    pub(super) async fn key_of_name(dir: &Path, name: &str) -> S3Result<Option<(String, bool)>> {
        let (name, folder) = match name.strip_prefix(FOLDER) {
            Some(n) => (n, true),
            None => (name, false),
        };
        if let Some(h) = name.strip_prefix("o-") {
            return Ok(unhex(h)
                .and_then(|b| String::from_utf8(b).ok())
                .map(|k| (k, folder)));
        }
        if !name.starts_with("h-") {
            return Ok(None);
        }
        // A long key is kept in the metadata: the object's, or any version's.
        let path = if folder {
            let mut rd = match tokio::fs::read_dir(dir.join(format!("{FOLDER}{name}"))).await {
                Ok(rd) => rd,
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(internal("reading versions", e)),
            };
            match rd
                .next_entry()
                .await
                .map_err(|e| internal("reading versions", e))?
            {
                Some(ent) => ent.path(),
                None => return Ok(None),
            }
        } else {
            dir.join(name)
        };
        Ok(Disk::read_listed(&path).await.map(|st| (st.meta.key, folder)))
    }

    /// For the listings of current objects: the file of `key`'s current
    /// object in the bucket folder `dir`, `None` if it has none (no file,
    /// a damaged one, or a delete marker as its newest version). In a
    /// bucket ever `versioned`, the newest version of the key's folder
    /// counts, else the object file.
    pub(super) async fn current_of(
        &self,
        dir: &Path,
        key: &str,
        versioned: bool,
    ) -> S3Result<Option<Stored>> {
        if !versioned {
            return Ok(Disk::read_listed(&dir.join(Disk::file_name(key))).await);
        }
        let vs = Versions::load(dir, key).await?;
        let Some(v) = vs.list.first() else {
            return Ok(None);
        };
        Ok(Disk::read_listed(&v.path)
            .await
            .filter(|st| !st.meta.delete_marker))
    }

    /// ListObjectVersions: the versions and delete markers of each key
    /// after the markers, newest first, keys in order; a delimiter rolls
    /// keys up into common prefixes; at most max-keys entries.
    pub(super) async fn version_page(
        &self,
        input: dto::ListObjectVersionsInput,
        owner: dto::Owner,
    ) -> S3Result<dto::ListObjectVersionsOutput> {
        let dir = self.disk.existing_bucket(&input.bucket).await?;
        let args = ListArgs::of(
            input.prefix.as_deref(),
            input.delimiter,
            input.max_keys,
            input.encoding_type.as_ref(),
        )?;
        let key_marker = input.key_marker.filter(|m| !m.is_empty());
        let id_marker = input.version_id_marker.filter(|m| !m.is_empty());
        let url = args.url;
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut truncated = false;
        let mut next: Option<(String, Option<String>)> = None;
        let mut walk = Walk::new(
            &args.prefix,
            args.delimiter.as_deref(),
            key_marker.as_deref(),
            id_marker.is_some(),
        );
        'keys: loop {
            let want = args.max + 1 - (versions.len() + markers.len() + prefixes.len()).min(args.max);
            let items = if args.max == 0 {
                Vec::new()
            } else {
                self.index_page(&input.bucket, &dir, &mut walk, want).await?
            };
            if items.is_empty() {
                break;
            }
            for item in items {
                let key = match item {
                    Item::Prefix(cp) => {
                        if versions.len() + markers.len() + prefixes.len() >= args.max {
                            truncated = true;
                            break 'keys;
                        }
                        next = Some((cp.clone(), None));
                        prefixes.push(cp);
                        continue;
                    }
                    Item::Key(key) => key,
                };
                let at_marker = key_marker.as_ref() == Some(&key);
                let vs = Versions::load(&dir, &key).await?;
                let mut skipping = at_marker;
                for (i, v) in vs.list.iter().enumerate() {
                    if skipping {
                        skipping = id_marker.as_deref() != Some(v.id.as_str());
                        continue;
                    }
                    let Some(st) = Disk::read_listed(&v.path).await else {
                        continue;
                    };
                    if versions.len() + markers.len() + prefixes.len() >= args.max {
                        truncated = true;
                        break 'keys;
                    }
                    let m = st.meta;
                    next = Some((key.clone(), Some(v.id.clone())));
                    if m.delete_marker {
                        markers.push(dto::DeleteMarkerEntry {
                            key: Some(encode_key(&key, url)),
                            version_id: Some(v.id.clone()),
                            is_latest: Some(i == 0),
                            last_modified: Some(timestamp(m.modified_ms)),
                            owner: Some(owner.clone()),
                        });
                    } else {
                        versions.push(dto::ObjectVersion {
                            key: Some(encode_key(&key, url)),
                            version_id: Some(v.id.clone()),
                            is_latest: Some(i == 0),
                            last_modified: Some(timestamp(m.modified_ms)),
                            size: Some(i64_of(m.size)),
                            e_tag: Some(ETag::Strong(m.etag)),
                            owner: Some(owner.clone()),
                            storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                                dto::ObjectVersionStorageClass::STANDARD,
                            )),
                            ..Default::default()
                        });
                    }
                }
            }
        }
        let (next_key, next_id) = if truncated { next.unzip() } else { (None, None) };
        Ok(dto::ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: args.prefix_out(),
            delimiter: args.delimiter_out(),
            key_marker: args.marker_out(key_marker.as_deref()),
            version_id_marker: Some(id_marker.unwrap_or_default()),
            max_keys: args.max_keys_out(),
            is_truncated: Some(truncated),
            next_key_marker: next_key.map(|k| encode_key(&k, url)),
            next_version_id_marker: next_id.flatten(),
            encoding_type: input.encoding_type,
            versions: (!versions.is_empty()).then_some(versions),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: common_prefixes(&prefixes, url),
            ..Default::default()
        })
    }
}
