//! The version lives in Cargo.toml; the header's macros and the functions
//! must agree with it.
#![allow(clippy::unwrap_used, unsafe_code)]

mod support;

use std::ffi::CStr;

fn header_macro(text: &str, name: &str) -> u32 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("include/hipobj.h has no #define {name}"));
    line.rsplit(' ').next().unwrap().trim().parse().unwrap()
}

#[test]
fn header_crate_and_functions_agree() {
    let text = std::fs::read_to_string(support::root().join("include/hipobj.h")).unwrap();
    let header = (
        header_macro(&text, "HIPOBJ_VERSION_MAJOR"),
        header_macro(&text, "HIPOBJ_VERSION_MINOR"),
        header_macro(&text, "HIPOBJ_VERSION_PATCH"),
    );
    let krate: Vec<u32> = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(
        vec![header.0, header.1, header.2],
        krate,
        "header and Cargo.toml disagree"
    );

    let (mut ma, mut mi, mut pa) = (99, 99, 99);
    // SAFETY: three valid, writable unsigned ints.
    let e = unsafe { hipobj_capi::hipObjGetVersion(&mut ma, &mut mi, &mut pa) };
    assert_eq!(e.opError, 0);
    assert_eq!((ma, mi, pa), header);
    // SAFETY: the function returns a static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(hipobj_capi::hipObjGetVersionString()) };
    assert_eq!(s.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}
