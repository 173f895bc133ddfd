//! A bucket's settings (its versioning state, default encryption, canned
//! ACL and PublicAccessBlock): one small text file per bucket and setting, in a dot folder of the
//! data directory (no bucket name starts with `.`). A write goes to a
//! temporary file, synced, renamed into place, its folder synced
//! (`crate::disk::write_atomic`); what was read or written is kept in
//! memory, since this process is the store's only writer, so the requests
//! that consult a setting (every write asks for the default encryption)
//! read no file. DeleteBucket forgets all of a bucket's settings, so that a
//! bucket made again with its name starts with none.

use std::collections::HashMap;
use std::sync::RwLock;

use s3s::{S3Error, S3ErrorCode, S3Result};

use super::errors::{internal, io_kind};
use super::layout::Disk;
use crate::disk::nonblocking as ndisk;

/// One setting of a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Setting {
    /// `Enabled` or `Suspended` (none: never versioned).
    Versioning,
    /// `AES256` (none: objects are encrypted only when they ask).
    Encryption,
    /// A canned ACL other than `private`.
    Acl,
    /// A PublicAccessBlock (`public_access`).
    PublicAccessBlock,
}

impl Setting {
    pub(super) const ALL: [Self; 4] = [
        Self::Versioning,
        Self::Encryption,
        Self::Acl,
        Self::PublicAccessBlock,
    ];

    pub(super) fn folder(self) -> &'static str {
        match self {
            Self::Versioning => ".versioning",
            Self::Encryption => ".encryption",
            Self::Acl => ".acls",
            Self::PublicAccessBlock => ".public-access",
        }
    }
}

/// A bucket's versioning state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    /// Never versioned: one object per key, no version folders.
    Off,
    Enabled,
    Suspended,
}

/// The settings read or written so far (`None`: the bucket has none).
pub(super) type Cache = RwLock<HashMap<(Setting, String), Option<String>>>;

impl Setting {
    /// What the setting is called in messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Versioning => "versioning state",
            Self::Encryption => "default encryption",
            Self::Acl => "ACL",
            Self::PublicAccessBlock => "PublicAccessBlock",
        }
    }
}

/// The refusal of a request whose bucket's setting `s` cannot be read or
/// makes no sense: logged, counted (`crate::damage`), and never taken as
/// "not set" (an empty versioning state must not turn versioning off, an
/// empty ACL must not drop a PublicAccessBlock's protection).
pub(super) fn damaged_setting(s: Setting, bucket: &str, why: &str) -> S3Error {
    crate::damage::metadata_refusal();
    tracing::error!(bucket, "the bucket's {} setting is damaged: {why}", s.name());
    S3Error::with_message(
        S3ErrorCode::InternalError,
        format!(
            "the {} setting of bucket {bucket:?} is damaged, so the bucket refuses requests that depend on it; \
             an operator can repair it with `hipobj-server fsck`",
            s.name()
        ),
    )
}

/// A data directory's bucket settings, and those read or written so far.
#[derive(Debug, Default)]
pub(super) struct Settings {
    cache: Cache,
}

impl Settings {
    fn file(disk: &Disk, s: Setting, bucket: &str) -> std::path::PathBuf {
        disk.root.join(s.folder()).join(bucket)
    }

    fn remember(&self, s: Setting, bucket: &str, value: Option<String>) {
        if let Ok(mut c) = self.cache.write() {
            c.insert((s, bucket.to_owned()), value);
        }
    }

    /// The bucket's setting `s`, trimmed (`None`: not set).
    pub(super) async fn get(&self, disk: &Disk, s: Setting, bucket: &str) -> S3Result<Option<String>> {
        let known = self
            .cache
            .read()
            .ok()
            .and_then(|c| c.get(&(s, bucket.to_owned())).cloned());
        if let Some(v) = known {
            return Ok(v);
        }
        let v = match tokio::fs::read(Self::file(disk, s, bucket)).await {
            Ok(t) => match String::from_utf8(t).map(|t| t.trim().to_owned()) {
                Ok(t) if !t.is_empty() => Some(t),
                // Never remembered: a repair takes effect at once.
                _ => return Err(damaged_setting(s, bucket, "empty or not text")),
            },
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(damaged_setting(s, bucket, &e.to_string())),
        };
        self.remember(s, bucket, v.clone());
        Ok(v)
    }

    /// Sets the bucket's setting `s` to `value`, or removes it (`None`).
    pub(super) async fn set(
        &self,
        disk: &Disk,
        s: Setting,
        bucket: &str,
        value: Option<&str>,
    ) -> S3Result<()> {
        let path = Self::file(disk, s, bucket);
        let d = disk.durability();
        let done = match value {
            None => match ndisk::remove_file(&path, d).await {
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(()),
                r => r,
            },
            Some(v) => {
                let tmp = disk.temp_path();
                match ndisk::create_dir_all(&disk.root.join(s.folder()), d).await {
                    Ok(()) => ndisk::write_atomic(&tmp, &path, v.as_bytes().to_vec(), d).await,
                    Err(e) => Err(e),
                }
            }
        };
        done.map_err(|e| internal("recording a bucket's settings", e))?;
        self.remember(s, bucket, value.map(str::to_owned));
        Ok(())
    }

    /// Removes every setting of a bucket that is gone (DeleteBucket); a
    /// file that cannot be removed is logged, not an error, since the
    /// bucket is already gone.
    pub(super) async fn forget(&self, disk: &Disk, bucket: &str) {
        for s in Setting::ALL {
            if let Err(e) = self.set(disk, s, bucket, None).await {
                tracing::warn!("removing a setting of the deleted bucket {bucket}: {e:?}");
            }
        }
    }
}
