//! HIP on a host without an AMD GPU, with Debian's ROCm 5.2.3 runtime.
//!
//! These tests need `libamdhip64-5` installed (`.ci/run` installs it) and
//! FAIL without it: a HIP backend that was never loaded is not tested.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use hipobj::{Config, ErrorKind, Library, Options};
use hipobj_gpu::hip::HipRuntime;
use hipobj_platform::fake::{FakeDeviceSpec, FakeTopology, FakeVerbs, Faults};
use hipobj_platform::{GpuRuntime, MemRegion, Platform, PointerKind};

fn hip() -> HipRuntime {
    match HipRuntime::load() {
        Ok(rt) => rt,
        Err(e) => panic!(
            "libamdhip64 did not load ({e}); install Debian's HIP runtime: \
             apt-get install -y libamdhip64-5"
        ),
    }
}

fn platform(gpu: Arc<dyn GpuRuntime>) -> Platform {
    let faults = Faults::default();
    Platform {
        verbs: Arc::new(FakeVerbs::new(vec![FakeDeviceSpec::default()], faults.clone())),
        gpu,
        topology: Arc::new(FakeTopology::new(Vec::new(), faults)),
    }
}

fn config(gpu_device: i32) -> Config {
    Config {
        flags: 0,
        gpu_device,
        nic_hint: Some("fake0".into()),
    }
}

fn host_buf(len: usize) -> MemRegion {
    MemRegion::from_static(Box::leak(vec![0u8; len].into_boxed_slice()))
}

#[test]
fn hip_loads_and_sees_no_gpu() {
    let rt = hip();
    assert_eq!(rt.name(), "hip");
    assert!(rt.library().starts_with("libamdhip64.so"), "{}", rt.library());
    assert!(rt.version() >= 50_000_000, "HIP version {}", rt.version());
    assert_eq!(rt.device_count(), Ok(0));
}

#[test]
fn without_a_gpu_every_pointer_is_plain_host_memory() {
    let rt = hip();
    let buf = vec![7u8; 4096];
    let info = rt.pointer_info(buf.as_ptr() as usize).unwrap();
    assert_eq!(info.kind, PointerKind::Unknown);
    assert_eq!(info.allocation, None);
}

#[test]
fn without_a_gpu_device_calls_fail_cleanly() {
    let rt = hip();
    let buf = [0u8; 64];
    let a = buf.as_ptr() as usize;
    assert!(rt.current_device().is_err());
    assert!(rt.pci_bus_id(0).is_err());
    let e = rt.alloc_pinned(4096).unwrap_err();
    assert_eq!(e.call, "hipHostMalloc");
    assert_ne!(e.code, 0, "{e}");
    assert!(rt.copy_async(a, a + 32, 8).is_err());
    assert!(rt.alloc_pinned(0).is_err());
}

#[test]
fn debian_hip_has_no_dmabuf_export_and_says_so() {
    let rt = hip();
    // HIP 5.2.3 has neither hipMemGetHandleForAddressRange nor HSA's export.
    if rt.version() < 60_000_000 {
        let why = rt.dmabuf_unavailable().expect("HIP 5 cannot export dma-bufs");
        assert!(why.contains("hipMemGetHandleForAddressRange"), "{why}");
        let buf = [0u8; 64];
        let e = rt.export_dmabuf(buf.as_ptr() as usize, 64).unwrap_err();
        assert!(e.detail.contains("unavailable"), "{e}");
    }
}

#[test]
fn core_refuses_gpu_0_and_still_registers_host_memory() {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(hip());
    let p = platform(gpu);

    let lib = Library::new();
    let e = lib
        .init(&config(0), || Ok(p.clone()), Options::default)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue, "{e}");
    assert!(e.to_string().contains("hip"), "{e}");
    assert!(!lib.is_initialized());

    lib.init(&config(-1), || Ok(p.clone()), Options::default).unwrap();
    let inst = lib.instance().unwrap();
    assert_eq!(inst.chosen().gpu, None);
    let host = host_buf(8192);
    inst.register_host(host).unwrap();
    // Without a GPU, hipObjBufRegister has nothing to register.
    let other = host_buf(4096);
    assert_eq!(
        inst.register_device(other).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    inst.deregister(host.addr()).unwrap();
    lib.shutdown();
}

#[test]
fn auto_selection_passes_over_a_hip_without_gpus() {
    let _ = hip();
    let rt = hipobj_gpu::select(None);
    // This host has no GPU: HIP loads but sees none, and CUDA is absent or
    // sees none, so the choice is host-only, with the reason.
    assert_eq!(rt.name(), "none");
    assert_eq!(rt.device_count(), Ok(0));
    let forced = hipobj_gpu::select(Some("hip"));
    assert_eq!(forced.name(), "hip");
    assert_eq!(forced.device_count(), Ok(0));
}
