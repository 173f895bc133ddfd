//! Helpers for the tests that build C programs against the library.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The profile directory cargo built this test into (target/debug).
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The shared library cargo built for this crate.
pub(crate) fn cdylib() -> PathBuf {
    let p = profile_dir().join("libhipobj_capi.so");
    assert!(
        p.exists(),
        "{} was not built: run `cargo build -p hipobj-capi` before these tests (scripts/test.sh does)",
        p.display()
    );
    p
}

/// A fresh scratch directory for one test.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A directory holding the library under its installed names
/// (libhipobj.so.0 and libhipobj.so), for linking and loading.
pub(crate) fn lib_dir(name: &str) -> PathBuf {
    let d = scratch(name);
    let so = cdylib();
    std::os::unix::fs::symlink(&so, d.join("libhipobj.so.0")).unwrap();
    std::os::unix::fs::symlink(&so, d.join("libhipobj.so")).unwrap();
    d
}

/// Runs a command and fails the test, with its output, unless it succeeds.
pub(crate) fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `hipObj*` functions the header declares.
pub(crate) fn header_functions() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("include/hipobj.h")).unwrap();
    let mut names: Vec<String> = text
        .split("HIPOBJ_API ")
        .skip(1)
        .filter_map(|decl| {
            let head = decl.split('(').next()?;
            let name = head
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .rfind(|w| !w.is_empty())?;
            name.starts_with("hipObj").then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names
}
