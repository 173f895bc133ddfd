//! The crate exports only what its users need (issue 40): every module
//! `src/lib.rs` makes public (`pub mod name;` or `pub use path::name;`) is
//! used as `hipobj_server::name` by a user outside the library: the
//! `hipobj-server` binary (src/main.rs), this crate's tests, or another
//! crate of the workspace.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, recursively, leaving out build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && name != ".git" {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The public modules `lib.rs` declares or re-exports.
fn public_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(m) = l.strip_prefix("pub mod ") {
                return m.strip_suffix(';').map(str::to_owned);
            }
            let used = l.strip_prefix("pub use ")?.strip_suffix(';')?;
            let last = used.rsplit("::").next()?;
            // A module is lower case; types (`Config`, `{Handle, Server}`) are not.
            last.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_')
                .then(|| last.to_owned())
        })
        .collect()
}

#[test]
fn every_public_module_has_a_user_outside_the_library() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(here.join("src/lib.rs")).expect("src/lib.rs");
    let modules = public_modules(&lib);
    assert!(modules.len() >= 3, "lib.rs read wrong: {modules:?}");
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    let library = here.join("src");
    let users: Vec<String> = files
        .iter()
        // The library's own files are not its users; its binary is.
        .filter(|f| !f.starts_with(&library) || f.ends_with("src/main.rs"))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let unused: Vec<&String> = modules
        .iter()
        .filter(|m| {
            let path = format!("hipobj_server::{m}");
            !users.iter().any(|text| {
                text.match_indices(&path).any(|(at, _)| {
                    // `hipobj_server::tls` and not `hipobj_server::tls_x`.
                    !text[at + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            })
        })
        .collect();
    assert!(
        unused.is_empty(),
        "public modules of hipobj-server that no user outside the library names: {unused:?} \
         (make them private, or pub(crate))"
    );
}

#[test]
fn the_scan_reads_modules_and_not_types() {
    let lib = "mod a;\npub mod b;\npub use x::c;\npub use y::{D, E};\npub use z::Config;\n";
    assert_eq!(public_modules(lib), ["b", "c"]);
}
