//! HIP (AMD ROCm) behind [`GpuRuntime`], loaded with dlopen at run time.
//!
//! Nothing links against HIP: [`HipRuntime::load`] opens `libamdhip64` by
//! name, so a host without ROCm runs the library host-only. See
//! docs/gpu-runtimes.md for every call and symbol used.

mod ffi;

use std::sync::Arc;

use hipobj_platform::{CopyEvent, Dmabuf, GpuError, GpuRuntime, PinnedHostBuffer, PointerInfo, PointerKind};

use ffi::{HipApi, MemoryType, code};
pub use ffi::{HipEvent, HipPinned};

/// The names [`HipRuntime::load`] tries, in order: the development symlink
/// (a ROCm install), then the sonames of HIP 6 and 7 (`.so.6`, `.so.7`)
/// and HIP 5 (`.so.5`, which Debian bookworm ships).
pub const HIP_LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// Where HSA's dma-buf export lives.
pub const HSA_LIBRARY_NAMES: &[&str] = &["libhsa-runtime64.so.1", "libhsa-runtime64.so"];

/// The HIP runtime.
#[derive(Debug, Clone)]
pub struct HipRuntime {
    api: Arc<HipApi>,
}

impl HipRuntime {
    /// Loads HIP by its usual names. HSA is optional: without it (or without
    /// its `hsa_amd_portable_export_dmabuf`), only [`GpuRuntime::export_dmabuf`]
    /// fails.
    pub fn load() -> Result<Self, GpuError> {
        Self::load_from(HIP_LIBRARY_NAMES, HSA_LIBRARY_NAMES)
    }

    /// Loads HIP from the first of `names` that opens, and HSA from
    /// `hsa_names`. Fails, never panics, when no name opens or a required
    /// symbol is missing.
    pub fn load_from(names: &[&str], hsa_names: &[&str]) -> Result<Self, GpuError> {
        HipApi::load(names, hsa_names)
            .map(|api| Self { api: Arc::new(api) })
            .map_err(|why| GpuError::new("dlopen(libamdhip64)", 0, why))
    }

    /// The library that was opened, such as `"libamdhip64.so.5"`.
    pub fn library(&self) -> &str {
        self.api.library()
    }

    /// `hipRuntimeGetVersion`: major * 10,000,000 + minor * 100,000 + patch.
    pub fn version(&self) -> i32 {
        self.api.version()
    }

    /// Why dma-buf export cannot work with this HIP, or `None` when one of
    /// its two routes is present.
    pub fn dmabuf_unavailable(&self) -> Option<String> {
        if self.api.has_mem_get_handle() {
            return None;
        }
        self.api
            .hsa_missing()
            .map(|why| format!("no hipMemGetHandleForAddressRange (HIP 7), and no HSA export: {why}"))
    }

    /// Pinned host memory, as its concrete type (for tests and tools that
    /// fill or read it).
    pub fn alloc_pinned_buffer(&self, len: usize) -> Result<HipPinned, GpuError> {
        self.api.alloc_pinned(len)
    }
}

impl GpuRuntime for HipRuntime {
    fn name(&self) -> &'static str {
        "hip"
    }

    fn device_count(&self) -> Result<i32, GpuError> {
        match self.api.device_count() {
            (code::SUCCESS, n) => Ok(n),
            // What HIP says on a host without an AMD GPU (or without
            // /dev/kfd): no devices, which is not an error for us.
            (code::NO_DEVICE, _) => Ok(0),
            (rc, _) => Err(self.api.err("hipGetDeviceCount", rc)),
        }
    }

    fn current_device(&self) -> Result<i32, GpuError> {
        self.api.current_device()
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, GpuError> {
        let raw = self.api.pci_bus_id(device)?;
        crate::pci::normalize_bus_id(&raw)
            .ok_or_else(|| GpuError::new("hipDeviceGetPCIBusId", 0, format!("{raw:?} is not a PCI address")))
    }

    fn pointer_info(&self, addr: usize) -> Result<PointerInfo, GpuError> {
        let unknown = PointerInfo {
            kind: PointerKind::Unknown,
            allocation: None,
        };
        let kind = match self.api.memory_type(addr) {
            Ok(MemoryType::Device) => PointerKind::Device(self.api.device_ordinal(addr)?),
            Ok(MemoryType::Host) => PointerKind::Host,
            // Managed memory and arrays are neither memory the NIC can reach
            // as device memory nor pinned host memory; the core treats them
            // as ordinary host memory.
            Ok(MemoryType::Unregistered | MemoryType::Other(_)) => return Ok(unknown),
            // HIP 5 reports memory it does not know as an invalid value.
            Err(code::INVALID_VALUE | code::INVALID_DEVICE_POINTER) => return Ok(unknown),
            // With no GPU, HIP 5.2 fails every call (hipErrorInvalidDevice),
            // but then no pointer can be GPU memory.
            Err(_) if self.device_count() == Ok(0) => return Ok(unknown),
            Err(rc) => return Err(self.api.err("hipPointerGetAttribute(MEMORY_TYPE)", rc)),
        };
        // The range is what registration checks device memory against; for
        // pinned host memory it is a nicety, so its absence is no error.
        let allocation = match kind {
            PointerKind::Device(_) => Some(self.api.address_range(addr)?),
            _ => self.api.address_range(addr).ok(),
        };
        Ok(PointerInfo { kind, allocation })
    }

    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedHostBuffer>, GpuError> {
        Ok(Box::new(self.api.alloc_pinned(len)?))
    }

    fn export_dmabuf(&self, addr: usize, len: usize) -> Result<Dmabuf, GpuError> {
        self.api.export_dmabuf(addr, len)
    }

    fn copy_async(&self, dst: usize, src: usize, len: usize) -> Result<Box<dyn CopyEvent>, GpuError> {
        Ok(Box::new(self.api.copy_async(dst, src, len)?))
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.api.synchronize()
    }

    fn stream_synchronize(&self, stream: usize) -> Result<(), GpuError> {
        self.api.stream_synchronize(stream)
    }
}
