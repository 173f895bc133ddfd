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

/// Builds a C program from tests/c against the shared library.
fn build(name: &str, source: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let libs = lib_dir(name);
    let exe = libs.join(name);
    run_ok(
        Command::new("cc")
            .arg("-std=c99")
            .args(STRICT)
            .arg("-I")
            .arg(root().join("include"))
            .arg(root().join(source))
            .arg("-L")
            .arg(&libs)
            .arg("-lhipobj")
            .arg("-o")
            .arg(&exe),
    );
    (libs, exe)
}

#[test]
fn c_program_calls_every_function_on_the_soft_nic() {
    let (libs, exe) = build("api-test-soft", "tests/c/api_test.c");
    let out = run_ok(
        Command::new(&exe)
            .env("LD_LIBRARY_PATH", &libs)
            .env("HIPOBJ_TEST_NIC", "softroce0"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// C misuse (NULLs, double deregistration, calls after shutdown, a buffer
/// freed while registered, failing callbacks) gives the defined codes.
/// scripts/sanitizers.sh runs the same program under ASan, UBSan and
/// Valgrind.
#[test]
fn c_misuse_gives_defined_codes() {
    let (libs, exe) = build("misuse-test", "tests/c/misuse_test.c");
    let out = run_ok(
        Command::new(&exe)
            .arg("3")
            .env("LD_LIBRARY_PATH", &libs)
            .env("HIPOBJ_TEST_NIC", "softroce0"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
