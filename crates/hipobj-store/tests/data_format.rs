//! The data directory's format version (issue 39, finding 1): written at
//! the first open, checked at every open; a directory of the release
//! before markers is taken as format 1; a format this release does not
//! read is refused, naming what was found and what is read, and nothing
//! in the directory changes.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use hipobj_store::fs::format::{self, FILE};
use hipobj_store::fs::{FsLimits, FsStore};

fn marker(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(FILE)).ok()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn the_first_open_writes_the_format_and_later_opens_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    drop(FsStore::open(&root, FsLimits::default()).unwrap());
    assert_eq!(marker(&root).as_deref(), Some("1\n"));
    drop(FsStore::open(&root, FsLimits::default()).unwrap());
    assert_eq!(marker(&root).as_deref(), Some("1\n"));
    assert_eq!(format::read(&root).unwrap(), format::Marker::Format(1));
}

#[test]
fn a_directory_of_the_release_before_markers_is_format_1() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // What the previous release left: a bucket with an object file, its
    // folders, and no marker.
    std::fs::create_dir_all(root.join("bkt")).unwrap();
    std::fs::write(root.join("bkt/o-6b6579"), b"object file").unwrap();
    std::fs::create_dir_all(root.join(".uploads")).unwrap();
    assert_eq!(
        format::check_and_mark(root, hipobj_store::disk::Durability::Synced).unwrap(),
        format::Opened::Adopted
    );
    assert_eq!(marker(root).as_deref(), Some("1\n"));
    assert_eq!(std::fs::read(root.join("bkt/o-6b6579")).unwrap(), b"object file");
}

#[test]
fn a_newer_format_is_refused_before_anything_changes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("bkt")).unwrap();
    std::fs::write(root.join(FILE), "2\n").unwrap();
    let before = names(root);
    let e = FsStore::open(root, FsLimits::default()).err().unwrap();
    let text = e.to_string();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(text.contains("format 2"), "{text}");
    assert!(text.contains("reads format 1"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    // No .tmp, .uploads or key was made; the marker is as it was.
    assert_eq!(names(root), before);
    assert_eq!(marker(root).as_deref(), Some("2\n"));
}

#[test]
fn an_unknown_marker_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE), "version two\n").unwrap();
    let text = FsStore::open(dir.path(), FsLimits::default())
        .err()
        .unwrap()
        .to_string();
    assert!(text.contains("\"version two\""), "{text}");
    assert!(text.contains("reads format 1"), "{text}");
    // Format 0 (no release wrote it) is not read either.
    std::fs::write(dir.path().join(FILE), "0\n").unwrap();
    let text = FsStore::open(dir.path(), FsLimits::default())
        .err()
        .unwrap()
        .to_string();
    assert!(text.contains("format 0"), "{text}");
}
