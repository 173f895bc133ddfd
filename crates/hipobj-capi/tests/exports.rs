//! The shared library exports exactly the functions of hipobj.h, carries the
//! soname with the major version, and links no RDMA or GPU library.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use support::{cdylib, header_functions, run_ok};

#[test]
fn exports_are_exactly_the_header_functions() {
    let out = run_ok(Command::new("nm").args(["-D", "--defined-only"]).arg(cdylib()));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut exported: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (_addr, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            // Version-definition entries (kind A) are not symbols of code or data.
            (kind != "A").then(|| name.to_owned())
        })
        .collect();
    exported.sort();
    assert!(!exported.is_empty(), "nm -D found no exported symbols at all");
    let declared = header_functions();
    assert_eq!(
        declared.len(),
        25,
        "the header should declare the spec's 15 functions, hipObjHandleRdmaReply, hipObjSetServerAddress and the eight hipObjRcV2* calls: {declared:?}"
    );
    assert_eq!(
        exported, declared,
        "exported symbols differ from the header's functions"
    );
}

#[test]
fn soname_and_needed_libraries() {
    let out = run_ok(Command::new("readelf").arg("-d").arg(cdylib()));
    let text = String::from_utf8_lossy(&out.stdout);
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    assert!(
        text.contains(&format!("Library soname: [libhipobj.so.{major}]")),
        "wrong or missing soname:\n{text}"
    );
    for forbidden in ["libibverbs", "libamdhip64", "libhsa-runtime", "libcuda"] {
        assert!(
            !text.contains(forbidden),
            "{forbidden} is linked at build time:\n{text}"
        );
    }
}
