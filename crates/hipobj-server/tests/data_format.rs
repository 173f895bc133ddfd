//! The data directory's format version through the binary (issue 39,
//! finding 1): a directory written by a newer release is refused at start
//! with one line naming the format found and the formats this release
//! reads, and nothing is served; fsck names the format it found.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const MARKER: &str = ".format";

#[test]
fn a_newer_data_directory_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("bkt")).unwrap();
    std::fs::write(data.join(MARKER), "2\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args([
            "--address",
            "127.0.0.1:0",
            "--access-key",
            "ak",
            "--secret-key",
            "sk",
            "--data-dir",
        ])
        .arg(&data)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.is_empty() {
        let _ = child.kill();
        panic!("the server served a newer data directory: {line:?}");
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("data directory format 2"), "{err}");
    assert!(err.contains("this release reads format 1"), "{err}");
    assert!(err.contains(&data.display().to_string()), "{err}");
    // The directory is as it was.
    assert_eq!(std::fs::read_to_string(data.join(MARKER)).unwrap(), "2\n");
    assert!(!data.join(".tmp").exists());
}

fn fsck(data: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["fsck", "--data-dir"])
        .arg(data)
        .env("HIPOBJ_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn the_server_marks_its_directory_and_fsck_reads_the_mark() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A directory of the release before markers: data, no marker.
    std::fs::create_dir_all(data.join("bkt")).unwrap();
    let out = fsck(&data);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no marker"), "{text}");
    assert!(!data.join(MARKER).exists(), "fsck changes nothing");

    // The server's start marks it format 1.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args([
            "--address",
            "127.0.0.1:0",
            "--access-key",
            "ak",
            "--secret-key",
            "sk",
            "--data-dir",
        ])
        .arg(&data)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on "), "{line:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(data.join(MARKER)).unwrap(), "1\n");
    // (fsck exits 1 here: the hand-made bucket has no owner record.)
    let out = fsck(&data);
    assert!(String::from_utf8_lossy(&out.stdout).contains("data directory format 1"));

    // A newer format: fsck refuses to walk it (exit 2), naming it.
    std::fs::write(data.join(MARKER), "2\n").unwrap();
    let out = fsck(&data);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data directory format 2"), "{err}");
}
