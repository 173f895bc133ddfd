//! Loading runtimes that are not there: clean errors, never a panic, and a
//! host-only fallback that says what was tried.
#![allow(clippy::unwrap_used)]

use hipobj_gpu::LibraryNames;
use hipobj_gpu::cuda::CudaRuntime;
use hipobj_gpu::hip::HipRuntime;
use hipobj_platform::PointerKind;

const BOGUS: &[&str] = &["libhipobj-no-such-runtime.so.9", "/nonexistent/libcuda.so.1"];

#[test]
fn a_missing_hip_is_an_error_naming_each_library_tried() {
    let e = HipRuntime::load_from(BOGUS, BOGUS).unwrap_err();
    assert_eq!(e.call, "dlopen(libamdhip64)");
    assert!(e.detail.contains("libhipobj-no-such-runtime.so.9"), "{e}");
    assert!(e.detail.contains("/nonexistent/libcuda.so.1"), "{e}");
}

#[test]
fn a_missing_cuda_is_an_error() {
    let e = CudaRuntime::load_from(BOGUS).unwrap_err();
    assert_eq!(e.call, "dlopen(libcuda.so.1)");
    assert!(e.detail.contains("libhipobj-no-such-runtime.so.9"), "{e}");
}

#[test]
fn a_library_without_the_symbols_is_an_error() {
    // libc loads, but is neither HIP nor CUDA.
    let e = HipRuntime::load_from(&["libc.so.6"], BOGUS).unwrap_err();
    assert!(e.detail.contains("hipRuntimeGetVersion"), "{e}");
    let e = CudaRuntime::load_from(&["libc.so.6"]).unwrap_err();
    assert!(e.detail.contains("cuInit"), "{e}");
}

#[test]
fn nothing_loads_so_the_library_runs_host_only() {
    let names = LibraryNames {
        hip: BOGUS,
        hsa: BOGUS,
        cuda: BOGUS,
    };
    let rt = hipobj_gpu::select_from(None, names);
    assert_eq!(rt.name(), "none");
    assert_eq!(rt.device_count(), Ok(0));
    let buf = [0u8; 16];
    assert_eq!(
        rt.pointer_info(buf.as_ptr() as usize).unwrap().kind,
        PointerKind::Unknown
    );
    // The reason names both runtimes.
    let why = rt.current_device().unwrap_err().detail;
    assert!(why.contains("HIP: did not load"), "{why}");
    assert!(why.contains("CUDA: did not load"), "{why}");

    for (choice, expect) in [
        ("hip", "HIPOBJ_GPU_RUNTIME=hip, but HIP did not load"),
        ("cuda", "HIPOBJ_GPU_RUNTIME=cuda, but CUDA did not load"),
        ("none", "HIPOBJ_GPU_RUNTIME=none"),
        ("rocm", "is not one of hip, cuda, none, auto"),
    ] {
        let rt = hipobj_gpu::select_from(Some(choice), names);
        assert_eq!(rt.name(), "none", "{choice}");
        let why = rt.pci_bus_id(0).unwrap_err().detail;
        assert!(why.contains(expect), "{choice}: {why}");
    }
}
