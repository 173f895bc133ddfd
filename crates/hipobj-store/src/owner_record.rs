//! A bucket's owner record: `<data dir>/.owners/<bucket>`, which the
//! gateway's access policy writes at CreateBucket and reads on every
//! request, and which the fs store reads for the owners it names in
//! listings and ACLs. Bucket names cannot start with `.`, so the folder
//! never clashes with a bucket.
//!
//! The file holds the owning access key on its first line and, on its
//! second, the bucket's generation: a random id made when the name was
//! claimed, so that a bucket deleted and made again under the same name is
//! told apart from the old one (an rc-v2 session prepared in the old bucket
//! dies with it). Records written before generations existed hold the key
//! alone, and read as generation `None`.
//!
//! A record is written whole (`crate::disk::write_atomic`) or not at all,
//! and a record that cannot be read, is empty or does not parse is
//! [`Lookup::Damaged`]: the bucket then refuses access until an operator
//! repairs it (`hipobj-server fsck`), never opens it.

use std::path::{Path, PathBuf};

use crate::disk::{Durability, nonblocking as ndisk};

/// The folder of the records in a data directory.
pub const FOLDER: &str = ".owners";

/// Who owns a bucket, and which bucket of that name it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The access key that created the bucket.
    pub key: String,
    /// The bucket's generation (`None` in records from before they had one).
    pub generation: Option<String>,
}

impl OwnerRecord {
    /// A record for a bucket `key` creates now, with a fresh generation.
    pub fn new(key: &str) -> Self {
        Self {
            key: key.to_owned(),
            generation: Some(uuid::Uuid::new_v4().simple().to_string()),
        }
    }

    /// The record's text.
    pub fn encode(&self) -> String {
        match &self.generation {
            Some(g) => format!("{}\n{g}\n", self.key),
            None => format!("{}\n", self.key),
        }
    }

    /// Reads a record's text; `None` if it is not one (empty, a key with
    /// spaces or control characters, more than two lines).
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let key = lines.next()?.trim();
        let generation = lines.next().map(str::trim).filter(|g| !g.is_empty());
        if lines.any(|l| !l.trim().is_empty()) {
            return None;
        }
        let fine = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic());
        if !fine(key) || generation.is_some_and(|g| !fine(g)) {
            return None;
        }
        Some(Self {
            key: key.to_owned(),
            generation: generation.map(str::to_owned),
        })
    }
}

/// What looking up a bucket's record found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No record.
    Missing,
    /// A record that cannot be read or does not parse; why, for the log
    /// (it may name the data directory: never for a client).
    Damaged(String),
    /// The record.
    Found(OwnerRecord),
}

/// The record's file for `bucket` under the data directory `root`.
pub fn path(root: &Path, bucket: &str) -> PathBuf {
    root.join(FOLDER).join(bucket)
}

/// Reads `bucket`'s record.
pub async fn read(root: &Path, bucket: &str) -> Lookup {
    let p = path(root, bucket);
    match tokio::fs::read(&p).await {
        Ok(bytes) => match std::str::from_utf8(&bytes).ok().and_then(OwnerRecord::parse) {
            Some(r) => Lookup::Found(r),
            None => Lookup::Damaged(format!(
                "{}: not an owner record ({} bytes)",
                p.display(),
                bytes.len()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Lookup::Missing,
        Err(e) => Lookup::Damaged(format!("{}: {e}", p.display())),
    }
}

/// Writes `bucket`'s record durably: whole, synced, its folder synced.
pub async fn write(root: &Path, bucket: &str, record: &OwnerRecord, d: Durability) -> std::io::Result<()> {
    let folder = root.join(FOLDER);
    ndisk::create_dir_all(&folder, d).await?;
    // The temporary name starts with `.`, which no bucket name does.
    let tmp = folder.join(format!(".new-{}", uuid::Uuid::new_v4().simple()));
    ndisk::write_atomic(&tmp, &path(root, bucket), record.encode().into_bytes(), d).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_old_ones_read() {
        let r = OwnerRecord::new("AKIA1");
        assert_eq!(OwnerRecord::parse(&r.encode()), Some(r));
        let old = OwnerRecord::parse("AKIA1").expect("a record of one line");
        assert_eq!(old.key, "AKIA1");
        assert_eq!(old.generation, None);
    }

    #[test]
    fn damage_is_not_a_record() {
        for bad in ["", "\n", "  \n", "two words\n", "k\ng\nextra\n", "k\u{0}\n"] {
            assert_eq!(OwnerRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn an_empty_file_is_damaged_and_a_missing_one_missing() {
        let dir = tempfile::tempdir().expect("a temp dir");
        assert_eq!(read(dir.path(), "b").await, Lookup::Missing);
        std::fs::create_dir_all(dir.path().join(FOLDER)).expect("folder");
        std::fs::write(path(dir.path(), "b"), b"").expect("empty record");
        assert!(matches!(read(dir.path(), "b").await, Lookup::Damaged(_)));
        let r = OwnerRecord::new("k");
        write(dir.path(), "b", &r, Durability::Synced)
            .await
            .expect("write");
        assert_eq!(read(dir.path(), "b").await, Lookup::Found(r));
    }
}
