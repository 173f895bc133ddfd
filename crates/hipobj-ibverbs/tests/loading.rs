//! Loading libibverbs: a missing library, a host without RDMA devices, and
//! the promise that nothing links libibverbs at build time.

use std::process::Command;

use hipobj_ibverbs::{DEFAULT_LIBRARY, IbVerbs, SysfsTopology};
use hipobj_platform::selection::{self, SelectionErrorKind};
use hipobj_platform::{Verbs, VerbsErrorKind};

#[test]
fn a_missing_library_is_library_missing_and_named() {
    let e = IbVerbs::load_from("libhipobj-no-such-ibverbs.so.9").expect_err("bogus library");
    assert_eq!(e.kind, VerbsErrorKind::LibraryMissing);
    assert!(e.to_string().contains("libhipobj-no-such-ibverbs.so.9"), "{e}");
}

#[test]
fn a_library_without_verbs_is_library_missing() {
    // libc loads fine but has no ibv_* functions.
    let e = IbVerbs::load_from("libc.so.6").expect_err("not libibverbs");
    assert_eq!(e.kind, VerbsErrorKind::LibraryMissing);
    assert!(e.to_string().contains("ibv_get_device_list"), "{e}");
}

/// Whether this test is running inside the rxe VM (or on a host with RDMA).
fn host_has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// With Debian's libibverbs1 installed and no RDMA device (as on CI), the
/// backend loads and reports an empty list, which the core maps to
/// hipObjNicNotFound; opening any name is NotFound. Fails if libibverbs1 is
/// not installed: CI installs it.
#[test]
fn no_devices_is_an_empty_list() {
    let verbs = IbVerbs::load().unwrap_or_else(|e| {
        panic!("{DEFAULT_LIBRARY} must be installed for this test (apt-get install libibverbs1 ibverbs-providers): {e}")
    });
    assert_eq!(verbs.backend(), "ibverbs");
    assert_eq!(verbs.library(), DEFAULT_LIBRARY);
    assert!(verbs.has_dmabuf(), "rdma-core 34+ exports ibv_reg_dmabuf_mr");
    if host_has_rdma_devices() {
        eprintln!("this host has RDMA devices; the empty-list case is not observable here");
        return;
    }
    assert_eq!(verbs.device_names().expect("a list"), Vec::<String>::new());
    let e = verbs.open_device("mlx5_0").expect_err("no such device");
    assert_eq!(e.kind, VerbsErrorKind::NotFound);
    assert!(e.to_string().contains("mlx5_0"), "{e}");

    // Selection over the real backend and the real sysfs fails with a
    // reason for each case; the core maps every one to hipObjNicNotFound.
    let topo = SysfsTopology::system();
    let e = selection::select(&verbs, &topo, None, None).expect_err("no GPU, no hint");
    assert_eq!(e.kind, SelectionErrorKind::NoGpuNoHint);
    let e = selection::select(&verbs, &topo, Some("0000:03:00.0"), None).expect_err("no NIC");
    assert_eq!(e.kind, SelectionErrorKind::NoCandidate);
    let e = selection::select(&verbs, &topo, None, Some("mlx5_0")).expect_err("hinted NIC absent");
    assert_eq!(e.kind, SelectionErrorKind::Verbs);
    assert_eq!(e.verbs.map(|v| v.kind), Some(VerbsErrorKind::NotFound));
}

#[test]
fn test_binaries_do_not_link_libibverbs() {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new("ldd").arg(&exe).output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ldd failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("libibverbs"), "libibverbs is linked:\n{text}");
}
