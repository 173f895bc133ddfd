//! Gives the shared library the soname `libhipobj.so.<major>`, whatever file
//! name cargo writes it under, so that programs linked against it find the
//! installed `libhipobj.so.0`; and keeps its exports to hipobj.h's functions.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhipobj.so.{major}");
        // Only hipobj.h's functions are exported. rustc exports every
        // `#[no_mangle]` function of every crate linked in, and a workspace
        // build links crc-fast with its C API (aws-sdk-s3 asks for its
        // default features): symbols from the Rust libraries stay local.
        println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs=ALL");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
