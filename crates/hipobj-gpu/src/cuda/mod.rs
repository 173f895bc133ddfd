//! CUDA behind [`GpuRuntime`], through the driver API in `libcuda.so.1`,
//! loaded with dlopen at run time.
//!
//! Only the driver is needed (it ships with the NVIDIA kernel driver), not
//! the CUDA toolkit. See docs/gpu-runtimes.md for every call and symbol.

mod ffi;

use std::sync::Arc;

use hipobj_platform::{CopyEvent, Dmabuf, GpuError, GpuRuntime, PinnedHostBuffer, PointerInfo, PointerKind};

use ffi::{CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CudaApi};
pub use ffi::{CudaDeviceBuffer, CudaEvent, CudaPinned};

/// The names [`CudaRuntime::load`] tries: the soname the driver installs,
/// then the development symlink.
pub const CUDA_LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The CUDA driver API.
#[derive(Debug, Clone)]
pub struct CudaRuntime {
    api: Arc<CudaApi>,
}

impl CudaRuntime {
    /// Loads the driver by its usual names and calls `cuInit(0)`. A driver
    /// that reports no device loads fine and counts 0 GPUs.
    pub fn load() -> Result<Self, GpuError> {
        Self::load_from(CUDA_LIBRARY_NAMES)
    }

    /// Loads the driver from the first of `names` that opens. Fails, never
    /// panics, when none opens, a required symbol is missing, or `cuInit`
    /// fails for a reason other than having no device.
    pub fn load_from(names: &[&str]) -> Result<Self, GpuError> {
        CudaApi::load(names)
            .map(|api| Self { api: Arc::new(api) })
            .map_err(|why| GpuError::new("dlopen(libcuda.so.1)", 0, why))
    }

    /// The library that was opened.
    pub fn library(&self) -> &str {
        self.api.library()
    }

    /// `cuDriverGetVersion`: major * 1000 + minor * 10, such as 12040.
    pub fn driver_version(&self) -> i32 {
        self.api.driver_version()
    }

    /// Whether the driver has `cuMemGetHandleForAddressRange` (CUDA 11.7+).
    pub fn has_dmabuf_export(&self) -> bool {
        self.api.has_mem_get_handle()
    }

    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` of a device.
    pub fn dma_buf_supported(&self, device: i32) -> Result<bool, GpuError> {
        self.api.dma_buf_supported(device)
    }

    /// Pinned host memory, as its concrete type (for tools and tests that
    /// fill or read it).
    pub fn alloc_pinned_buffer(&self, len: usize) -> Result<CudaPinned, GpuError> {
        self.api.alloc_pinned(len)
    }

    /// Device memory with `cuMemAlloc`, freed on drop (for tools and tests;
    /// the library itself never allocates device memory).
    pub fn alloc_device(&self, len: usize) -> Result<CudaDeviceBuffer, GpuError> {
        self.api.alloc_device(len)
    }

    /// The concrete event of [`GpuRuntime::copy_async`].
    pub fn copy_async_event(&self, dst: usize, src: usize, len: usize) -> Result<CudaEvent, GpuError> {
        self.api.copy_async(dst, src, len)
    }
}

impl GpuRuntime for CudaRuntime {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> Result<i32, GpuError> {
        self.api.device_count()
    }

    fn current_device(&self) -> Result<i32, GpuError> {
        self.api.current_device()
    }

    fn pci_bus_id(&self, device: i32) -> Result<String, GpuError> {
        let raw = self.api.pci_bus_id(device)?;
        crate::pci::normalize_bus_id(&raw)
            .ok_or_else(|| GpuError::new("cuDeviceGetPCIBusId", 0, format!("{raw:?} is not a PCI address")))
    }

    fn pointer_info(&self, addr: usize) -> Result<PointerInfo, GpuError> {
        let unknown = PointerInfo {
            kind: PointerKind::Unknown,
            allocation: None,
        };
        let kind = match self.api.pointer_kind(addr)? {
            // Managed memory is neither device memory the NIC can reach nor
            // pinned host memory; the core treats it as ordinary host memory.
            None | Some((_, true, _)) => return Ok(unknown),
            Some((CU_MEMORYTYPE_DEVICE, false, ordinal)) => PointerKind::Device(ordinal),
            Some((CU_MEMORYTYPE_HOST, false, _)) => PointerKind::Host,
            Some(_) => return Ok(unknown),
        };
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
