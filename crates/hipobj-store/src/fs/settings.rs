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

use s3s::S3Result;

use super::{FsStore, internal, io_kind};
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
    const ALL: [Self; 4] = [
        Self::Versioning,
        Self::Encryption,
        Self::Acl,
        Self::PublicAccessBlock,
    ];

    fn folder(self) -> &'static str {
        match self {
            Self::Versioning => ".versioning",
            Self::Encryption => ".encryption",
            Self::Acl => ".acls",
            Self::PublicAccessBlock => ".public-access",
        }
    }
}

/// The settings read or written so far (`None`: the bucket has none).
pub(super) type Cache = RwLock<HashMap<(Setting, String), Option<String>>>;

impl FsStore {
    fn setting_file(&self, s: Setting, bucket: &str) -> std::path::PathBuf {
        self.root.join(s.folder()).join(bucket)
    }

    fn remember(&self, s: Setting, bucket: &str, value: Option<String>) {
        if let Ok(mut c) = self.settings.write() {
            c.insert((s, bucket.to_owned()), value);
        }
    }

    /// The bucket's setting `s`, trimmed (`None`: not set).
    pub(super) async fn setting(&self, s: Setting, bucket: &str) -> S3Result<Option<String>> {
        let known = self
            .settings
            .read()
            .ok()
            .and_then(|c| c.get(&(s, bucket.to_owned())).cloned());
        if let Some(v) = known {
            return Ok(v);
        }
        let v = match tokio::fs::read_to_string(self.setting_file(s, bucket)).await {
            Ok(t) => Some(t.trim().to_owned()),
            Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(internal("reading a bucket's settings", e)),
        };
        self.remember(s, bucket, v.clone());
        Ok(v)
    }

    /// Sets the bucket's setting `s` to `value`, or removes it (`None`).
    pub(super) async fn set_setting(&self, s: Setting, bucket: &str, value: Option<&str>) -> S3Result<()> {
        let path = self.setting_file(s, bucket);
        let d = self.durability();
        let done = match value {
            None => match ndisk::remove_file(&path, d).await {
                Err(e) if io_kind(&e) == std::io::ErrorKind::NotFound => Ok(()),
                r => r,
            },
            Some(v) => {
                let tmp = self.temp_path();
                match ndisk::create_dir_all(&self.root.join(s.folder()), d).await {
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
    pub(super) async fn forget_settings(&self, bucket: &str) {
        for s in Setting::ALL {
            if let Err(e) = self.set_setting(s, bucket, None).await {
                tracing::warn!("removing a setting of the deleted bucket {bucket}: {e:?}");
            }
        }
    }
}
