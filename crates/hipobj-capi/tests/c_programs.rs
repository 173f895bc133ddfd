//! The C contract, checked from C: the header compiles as strict C99 and
//! C++, and a C program linked to the shared library calls every function.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use support::{lib_dir, root, run_ok, scratch};

const STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

#[test]
fn header_compiles_as_c99() {
    let out = scratch("c99").join("probe.o");
    run_ok(
        Command::new("cc")
            .arg("-std=c99")
            .args(STRICT)
            .arg("-I")
            .arg(root().join("include"))
            .arg("-c")
            .arg(root().join("tests/c/header_c99.c"))
            .arg("-o")
            .arg(out),
    );
}

#[test]
fn header_compiles_as_cxx() {
    let out = scratch("cxx").join("probe.o");
    run_ok(
        Command::new("c++")
            .arg("-std=c++11")
            .args(STRICT)
            .arg("-I")
            .arg(root().join("include"))
            .arg("-c")
            .arg(root().join("tests/c/header_cxx.cc"))
            .arg("-o")
            .arg(out),
    );
}

#[test]
fn c_program_calls_every_function() {
    let libs = lib_dir("api-test");
    let exe = libs.join("api_test");
    run_ok(
        Command::new("cc")
            .arg("-std=c99")
            .args(STRICT)
            .arg("-I")
            .arg(root().join("include"))
            .arg(root().join("tests/c/api_test.c"))
            .arg("-L")
            .arg(&libs)
            .arg("-lhipobj")
            .arg("-o")
            .arg(&exe),
    );
    // The program must name every function of the header.
    let source = std::fs::read_to_string(root().join("tests/c/api_test.c")).unwrap();
    for f in support::header_functions() {
        assert!(
            source.contains(&format!("{f}(")),
            "tests/c/api_test.c never calls {f}"
        );
    }
    let out = run_ok(
        Command::new(&exe)
            .env("LD_LIBRARY_PATH", &libs)
            .env_remove("HIPOBJ_TEST_NIC"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
