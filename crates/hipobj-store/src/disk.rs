//! Durable changes to a data directory: the one place where the store (and
//! the gateway's owner records) create, replace, link or remove a name.
//!
//! A change is on stable storage when its answer goes out: a file's data is
//! `fdatasync`ed before its name is made, and the directory that holds the
//! name is `fsync`ed after the name is made, changed or removed (POSIX
//! leaves a new directory entry in the page cache until then, so a power cut
//! could undo an acknowledged PUT). A new directory's parent is synced too.
//! Each step leaves either the old state or the new one, so a crash at any
//! point loses nothing that was acknowledged.
//!
//! [`Durability::Unsafe`] skips every sync: for tests and throwaway
//! stores only (docs/server.md, `fsync = false`); a power cut may then lose
//! acknowledged changes.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Whether changes are synced before they are acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Data, names and directories synced: the default.
    Synced,
    /// Nothing synced (tests only): a power cut may undo acknowledged
    /// changes.
    Unsafe,
}

impl Durability {
    /// `Synced` when `sync` is true.
    pub fn from_sync(sync: bool) -> Self {
        if sync { Self::Synced } else { Self::Unsafe }
    }

    fn on(self) -> bool {
        self == Self::Synced
    }
}

/// The folder that holds `path`'s name.
fn parent(path: &Path) -> std::io::Result<&Path> {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with no parent folder"))
}

/// Flushes the names in directory `dir` to stable storage.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Syncs the directory holding `path`, if `d` asks for it.
pub fn sync_parent(path: &Path, d: Durability) -> std::io::Result<()> {
    if d.on() { sync_dir(parent(path)?) } else { Ok(()) }
}

/// Writes `data` to `dest` as a whole: into `tmp` (a fresh name on the same
/// file system), synced, renamed over `dest`, then `dest`'s folder synced.
/// Readers see the old content or the new one; `tmp` is gone either way.
pub fn write_atomic(tmp: &Path, dest: &Path, data: &[u8], d: Durability) -> std::io::Result<()> {
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)?;
        f.write_all(data)?;
        if d.on() {
            f.sync_data()?;
        }
        std::fs::rename(tmp, dest)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written?;
    sync_parent(dest, d)
}

/// Renames `from` to `to` (replacing it), then syncs `to`'s folder. The
/// folder `from` leaves is not synced: callers rename out of `.tmp`, or
/// within one folder, where the old name coming back after a crash is
/// harmless.
pub fn rename(from: &Path, to: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    sync_parent(to, d)
}

/// Makes `to` a second name of the file `from` (failing if `to` exists),
/// then syncs `to`'s folder.
pub fn hard_link(from: &Path, to: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::hard_link(from, to)?;
    sync_parent(to, d)
}

/// Removes the name `path`, then syncs its folder. A missing name is
/// `NotFound`, as [`std::fs::remove_file`] has it.
pub fn remove_file(path: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::remove_file(path)?;
    sync_parent(path, d)
}

/// Removes the empty directory `path`, then syncs its parent.
pub fn remove_dir(path: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::remove_dir(path)?;
    sync_parent(path, d)
}

/// Removes `path` and everything under it, then syncs its parent.
pub fn remove_dir_all(path: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::remove_dir_all(path)?;
    sync_parent(path, d)
}

/// Creates the directory `path` (its parent must exist; `AlreadyExists` if
/// it does), then syncs the parent.
pub fn create_dir(path: &Path, d: Durability) -> std::io::Result<()> {
    std::fs::create_dir(path)?;
    sync_parent(path, d)
}

/// Creates `path` and any missing folder above it, syncing the parent of
/// each folder it creates (and `path` itself, so that names made in it next
/// have a durable home).
pub fn create_dir_all(path: &Path, d: Durability) -> std::io::Result<()> {
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    for p in missing.iter().rev() {
        match std::fs::create_dir(p) {
            Ok(()) => sync_parent(p, d)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && p.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The async forms, for the store's request paths: each runs its blocking
/// counterpart on tokio's blocking pool.
pub mod nonblocking {
    use std::path::{Path, PathBuf};

    use super::Durability;

    async fn run<T: Send + 'static>(
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| std::io::Error::other(format!("a file system task failed: {e}")))?
    }

    fn owned(p: &Path) -> PathBuf {
        p.to_path_buf()
    }

    /// [`super::write_atomic`].
    pub async fn write_atomic(tmp: &Path, dest: &Path, data: Vec<u8>, d: Durability) -> std::io::Result<()> {
        let (tmp, dest) = (owned(tmp), owned(dest));
        run(move || super::write_atomic(&tmp, &dest, &data, d)).await
    }

    /// [`super::rename`].
    pub async fn rename(from: &Path, to: &Path, d: Durability) -> std::io::Result<()> {
        let (from, to) = (owned(from), owned(to));
        run(move || super::rename(&from, &to, d)).await
    }

    /// [`super::hard_link`].
    pub async fn hard_link(from: &Path, to: &Path, d: Durability) -> std::io::Result<()> {
        let (from, to) = (owned(from), owned(to));
        run(move || super::hard_link(&from, &to, d)).await
    }

    /// [`super::remove_file`].
    pub async fn remove_file(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::remove_file(&path, d)).await
    }

    /// [`super::remove_dir`].
    pub async fn remove_dir(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::remove_dir(&path, d)).await
    }

    /// [`super::remove_dir_all`].
    pub async fn remove_dir_all(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::remove_dir_all(&path, d)).await
    }

    /// [`super::create_dir`].
    pub async fn create_dir(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::create_dir(&path, d)).await
    }

    /// [`super::create_dir_all`].
    pub async fn create_dir_all(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::create_dir_all(&path, d)).await
    }

    /// [`super::sync_parent`].
    pub async fn sync_parent(path: &Path, d: Durability) -> std::io::Result<()> {
        let path = owned(path);
        run(move || super::sync_parent(&path, d)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let dest = dir.path().join("f");
        let tmp = dir.path().join("t");
        write_atomic(&tmp, &dest, b"one", Durability::Synced).expect("first write");
        write_atomic(&tmp, &dest, b"two", Durability::Synced).expect("second write");
        assert_eq!(std::fs::read(&dest).expect("read"), b"two");
        assert!(!tmp.exists());
    }

    #[test]
    fn write_atomic_fails_without_touching_dest() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let dest = dir.path().join("f");
        std::fs::write(&dest, b"old").expect("seed");
        // The temporary name is taken: the write must fail, and dest stay.
        let tmp = dir.path().join("t");
        std::fs::write(&tmp, b"someone else's").expect("seed tmp");
        assert!(write_atomic(&tmp, &dest, b"new", Durability::Synced).is_err());
        assert_eq!(std::fs::read(&dest).expect("read"), b"old");
    }

    #[test]
    fn create_dir_all_makes_each_level() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let deep = dir.path().join("a/b/c");
        create_dir_all(&deep, Durability::Synced).expect("create");
        assert!(deep.is_dir());
        create_dir_all(&deep, Durability::Synced).expect("again is fine");
    }
}
