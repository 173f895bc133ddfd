//! The data directory's format version: `<root>/.format`, one line holding
//! a number. It is written (durably, `crate::disk::write_atomic`) when the
//! store first opens a directory and read at every open: a release reads
//! the formats in [`READS`] and refuses any other before it changes a
//! thing, so an older release never writes into a layout it does not know
//! (docs/server.md, "Upgrading").
//!
//! Format 1 is the layout of `super` (object files with the `HOB1`
//! trailer, `.uploads/`, the settings folders). A directory without the
//! file but with something in it was made by a release from before the
//! marker, which wrote format 1: it is marked as such.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::disk::{self, Durability};

/// The marker's name, at the data directory's root (bucket names cannot
/// start with `.`).
pub const FILE: &str = ".format";

/// The format this release writes.
pub const CURRENT: u32 = 1;

/// The formats this release reads.
pub const READS: &[u32] = &[1];

/// What the marker says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Marker {
    /// No marker: a new directory, or one from a release before markers
    /// (format 1).
    #[default]
    Missing,
    /// The format the marker names, one this release reads.
    Format(u32),
}

/// What opening a directory did with its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The directory was empty: marked with [`CURRENT`].
    Created,
    /// The directory held data but no marker (an earlier release's):
    /// marked as format 1.
    Adopted,
    /// The marker was there and names a format this release reads.
    Found(u32),
}

/// A marker this release does not read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A format this release does not read (a newer release's, as a rule).
    #[error(
        "data directory format {found}; this release reads format {}: \
         run the release that wrote it (docs/server.md, \"Upgrading\")",
        reads()
    )]
    Unreadable {
        /// The data directory (the caller names it in its message).
        dir: PathBuf,
        /// The format its marker names.
        found: u32,
    },
    /// A marker that names no format at all.
    #[error(
        "{FILE} holds {text:?}, not a data directory format; this release reads format {}",
        reads()
    )]
    Unknown {
        /// The data directory (the caller names it in its message).
        dir: PathBuf,
        /// What the marker holds (at most its first 40 bytes).
        text: String,
    },
}

fn reads() -> String {
    READS.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

impl From<FormatError> for std::io::Error {
    fn from(e: FormatError) -> Self {
        std::io::Error::new(ErrorKind::InvalidData, e)
    }
}

/// Reads `root`'s marker without changing anything (fsck does this): a
/// marker naming a format this release does not read is an error.
pub fn read(root: &Path) -> std::io::Result<Marker> {
    let bytes = match std::fs::read(root.join(FILE)) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Marker::Missing),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&bytes);
    match text.trim().parse::<u32>() {
        Ok(n) if READS.contains(&n) => Ok(Marker::Format(n)),
        Ok(n) => Err(FormatError::Unreadable {
            dir: root.to_path_buf(),
            found: n,
        }
        .into()),
        Err(_) => Err(FormatError::Unknown {
            dir: root.to_path_buf(),
            text: text.trim().chars().take(40).collect(),
        }
        .into()),
    }
}

/// Checks `root`'s marker, and writes one where there is none: what every
/// open of the store does first.
pub fn check_and_mark(root: &Path, d: Durability) -> std::io::Result<Opened> {
    if let Marker::Format(n) = read(root)? {
        return Ok(Opened::Found(n));
    }
    let has_data = std::fs::read_dir(root)?.next().is_some();
    let (format, opened) = if has_data {
        (1, Opened::Adopted)
    } else {
        (CURRENT, Opened::Created)
    };
    // A name of its own, so that two servers opening one new directory at
    // once do not write into one temporary file.
    let tmp = root.join(format!("{FILE}.tmp-{}", uuid::Uuid::new_v4().simple()));
    disk::write_atomic(&tmp, &root.join(FILE), format!("{format}\n").as_bytes(), d)?;
    if opened == Opened::Adopted {
        tracing::info!(
            dir = %root.display(),
            "a data directory from a release before format markers: marked as format 1"
        );
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_new_directory_is_marked_with_the_current_format() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            check_and_mark(dir.path(), Durability::Synced).unwrap(),
            Opened::Created
        );
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), "1\n");
        assert_eq!(read(dir.path()).unwrap(), Marker::Format(CURRENT));
        // Nothing else is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(
            check_and_mark(dir.path(), Durability::Synced).unwrap(),
            Opened::Found(1)
        );
    }
}
