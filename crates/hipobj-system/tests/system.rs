//! The production platform on this machine: libibverbs present with no
//! device, and libibverbs missing. CI installs Debian's libibverbs1.
#![allow(clippy::unwrap_used)]

use hipobj::{Config, ErrorKind, Library, Options};

fn init_with(library: &str, hint: Option<&str>) -> hipobj::Error {
    let lib = Library::new();
    let cfg = Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: hint.map(str::to_owned),
    };
    lib.init(
        &cfg,
        || Ok(hipobj_system::platform_with(library)),
        Options::default,
    )
    .expect_err("no RDMA device exists on this machine, so init must fail")
}

#[test]
fn libibverbs_without_a_device_is_nic_not_found() {
    assert!(
        std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists()
            || std::path::Path::new("/usr/lib64/libibverbs.so.1").exists(),
        "this test needs Debian's libibverbs1 (apt-get install libibverbs1 ibverbs-providers)"
    );
    for hint in [None, Some("mlx5_0"), Some("bnxt_re0,ionic_0")] {
        let e = init_with(hipobj_ibverbs::DEFAULT_LIBRARY, hint);
        assert_eq!(e.kind(), ErrorKind::NicNotFound, "hint {hint:?}: {e}");
    }
}

#[test]
fn missing_libibverbs_is_an_rdma_error_naming_it() {
    let e = init_with("libibverbs-not-installed.so.1", Some("mlx5_0"));
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.detail().contains("libibverbs-not-installed.so.1"), "{e}");
}
