//! docs/architecture.md's "Where unsafe lives" checked against the code:
//! every production source file (each workspace crate's `src/` and
//! `python/src`) that holds unsafe code must be named there, itself or by
//! a folder above it, and every file or folder named there must hold some.
//!
//! Unsafe code is an `unsafe` block, `unsafe fn`, `unsafe impl`, `unsafe
//! trait`, `unsafe extern` block or `#[unsafe(...)]` attribute, outside
//! comments, string literals and `#[cfg(test)]` modules (inline, or files
//! declared as `#[cfg(test)] mod name;`). An `unsafe extern "C" fn(...)`
//! pointer type is not unsafe code: it declares nothing and calls nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `text` with comments, string and char literals blanked out (newlines
/// kept), so that only code remains.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        out.extend(b"  ");
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        out.extend(b"  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
            }
            // Raw strings: r"...", r#"..."#, br"...".
            b'r' if (i == 0
                || !is_ident(b[i - 1])
                || (b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2]))))
                && matches!(b.get(i + 1), Some(b'"' | b'#')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push(b[i]);
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let end = b[j + 1..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| j + 1 + p + close.len());
                for &c in &b[i..end] {
                    blank(&mut out, c);
                }
                i = end;
            }
            b'"' => {
                blank(&mut out, b'"');
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                    if i < b.len() {
                        blank(&mut out, b[i]);
                        i += 1;
                    }
                }
                if i < b.len() {
                    out.push(b' ');
                    i += 1;
                }
            }
            // A char literal ('x', '\n', '\''), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                let end = if b.get(i + 1) == Some(&b'\\') {
                    // The escaped character is at i + 2; the closing quote follows.
                    b.get(i + 3..)
                        .and_then(|r| r.iter().position(|&c| c == b'\''))
                        .map_or(b.len(), |p| i + 4 + p)
                } else {
                    i + 3
                };
                for &c in &b[i..end.min(b.len())] {
                    blank(&mut out, c);
                }
                i = end;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `code` without the bodies of its `#[cfg(test)]` inline modules, and the
/// names of the `#[cfg(test)] mod name;` files it declares.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut kept = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let Some(decl) = item
            .strip_prefix("mod ")
            .or_else(|| item.strip_prefix("pub mod "))
        else {
            rest = after;
            continue;
        };
        let name: String = decl
            .trim_start()
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        let tail = decl.trim_start()[name.len()..].trim_start();
        if tail.starts_with(';') {
            test_files.push(name);
            rest = after;
            continue;
        }
        // Skip the module's balanced braces.
        let open = after.len() - tail.len();
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    kept.push_str(rest);
    (kept, test_files)
}

/// Whether `code` (comments and literals removed) holds unsafe code.
fn has_unsafe(code: &str) -> bool {
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(p) = code[from..].find("unsafe") {
        let at = from + p;
        from = at + "unsafe".len();
        if (at > 0 && is_ident(b[at - 1])) || b.get(from).is_some_and(|&c| is_ident(c)) {
            continue;
        }
        if at > 0 && code[..at].trim_end().ends_with("#[") {
            return true; // #[unsafe(no_mangle)] and the like
        }
        let next = code[from..].trim_start();
        // `unsafe fn name` declares; `unsafe fn(` is a pointer type.
        let declares_fn = |s: &str| {
            s.strip_prefix("fn")
                .is_some_and(|f| !f.trim_start().starts_with('('))
        };
        let word: String = next
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        let extern_item = || {
            // The ABI string was blanked with the other literals.
            let after = next["extern".len()..].trim_start();
            after.starts_with('{') || declares_fn(after)
        };
        if next.starts_with('{')
            || word == "impl"
            || word == "trait"
            || (word == "fn" && declares_fn(next))
            || (word == "extern" && extern_item())
        {
            return true;
        }
    }
    false
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The production files with unsafe code, as paths relative to the root
/// with `/` separators (`crates/hipobj-x/src/a.rs`, `python/src/b.rs`).
fn files_with_unsafe() -> BTreeSet<String> {
    let root = root();
    let mut src_dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    src_dirs.push(root.join("python/src"));
    let mut files = Vec::new();
    for d in &src_dirs {
        rust_files(d, &mut files);
    }
    let mut test_only = BTreeSet::new();
    let mut found = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        let (code, tests) = without_tests(&code_only(&text));
        // A module file's children live next to it (mod.rs, lib.rs,
        // main.rs) or in a folder named after it.
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let dir = if matches!(stem, "mod" | "lib" | "main") {
            f.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            f.with_extension("")
        };
        for t in tests {
            test_only.insert(dir.join(format!("{t}.rs")));
            test_only.insert(dir.join(&t).join("mod.rs"));
        }
        found.insert(f.clone(), has_unsafe(&code));
    }
    found
        .into_iter()
        .filter(|(f, unsafe_code)| *unsafe_code && !test_only.contains(f))
        .map(|(f, _)| {
            f.strip_prefix(&root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect()
}

/// The files and folders the section names: every backticked path with a
/// `src/` in it, `.rs` files or folders ending in `/`, relative to
/// `crates/` (or to the root for `python/`).
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let start = text
        .find("## Where unsafe lives")
        .expect("docs/architecture.md has a \"Where unsafe lives\" section");
    let section = &text[start + 3..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.contains("src/") && (t.ends_with(".rs") || t.ends_with('/')) && !t.contains(' '))
        .map(|t| {
            if t.starts_with("python/") {
                t.to_owned()
            } else {
                format!("crates/{t}")
            }
        })
        .collect()
}

fn covered_by(file: &str, named: &str) -> bool {
    file == named || (named.ends_with('/') && file.starts_with(named))
}

#[test]
fn every_file_with_unsafe_code_is_in_the_table_and_nothing_else() {
    let real = files_with_unsafe();
    let named = documented();
    assert!(
        real.len() > 5,
        "the scan found too few files with unsafe code: {real:?}"
    );
    let missing: Vec<&String> = real
        .iter()
        .filter(|f| !named.iter().any(|n| covered_by(f, n)))
        .collect();
    let stale: Vec<&String> = named
        .iter()
        .filter(|n| !real.iter().any(|f| covered_by(f, n)))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's \"Where unsafe lives\" is out of date.\n\
         files with unsafe code it does not name: {missing:?}\n\
         files or folders it names that hold none: {stale:?}\n\
         (the scan found: {real:?})"
    );
}

#[test]
fn the_scan_sees_unsafe_code_and_only_code() {
    let code = |s: &str| has_unsafe(&without_tests(&code_only(s)).0);
    assert!(code("fn f() { unsafe { g() } }"));
    assert!(code("unsafe impl Send for X {}"));
    assert!(code("pub unsafe fn f() {}"));
    assert!(code("unsafe extern \"C\" fn f() {}"));
    assert!(code("unsafe extern \"C\" { fn f(); }"));
    assert!(code("#[unsafe(no_mangle)]\npub extern \"C\" fn f() {}"));
    assert!(!code("// unsafe { g() }\nfn f() {}"));
    assert!(!code("/* unsafe { g() } */ fn f() {}"));
    assert!(!code("const S: &str = \"unsafe { }\";"));
    assert!(!code("const S: &str = r#\"unsafe { }\"#;"));
    assert!(!code("type F = unsafe extern \"C\" fn(i32) -> i32;"));
    assert!(!code("type F = unsafe fn(i32);"));
    assert!(!code("fn unsafe_name() {}"));
    assert!(!code(
        "#[cfg(test)]\nmod tests {\n fn f() { unsafe { g() } }\n}\nfn h() {}"
    ));
    assert!(code(
        "#[cfg(test)]\nmod tests {\n fn f() {}\n}\nfn h() { unsafe { g() } }"
    ));
    assert!(!code("let c = '\"'; // unsafe {\nfn f() {}"));
    assert!(!code("let c = '\\''; let s = \"unsafe {\";"));
    assert!(code("fn f<'a>(x: &'a u8) { unsafe { g() } }"));
    assert_eq!(
        without_tests(&code_only("#[cfg(test)]\nmod layout;\n")).1,
        ["layout"]
    );
}
