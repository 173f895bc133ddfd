//! Keeps the extension module's exports to `PyInit__native`: rustc exports
//! every `#[no_mangle]` function of every crate linked in, and crc-fast
//! (which aws-sdk-s3 builds with its C API) would add 26 of its own.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs=ALL");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
