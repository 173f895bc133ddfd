//! hipObject's real GPU runtimes: HIP and CUDA behind
//! [`hipobj_platform::GpuRuntime`], each loaded with dlopen when the library
//! starts, so that one build runs on AMD hosts, NVIDIA hosts, and hosts with
//! no GPU at all.
//!
//! * [`hip::HipRuntime`]: `libamdhip64` (plus HSA for dma-buf export),
//! * [`cuda::CudaRuntime`]: the CUDA driver API in `libcuda.so.1`,
//! * [`system_gpu`]: picks one at run time, or falls back to
//!   [`hipobj_platform::NoGpu`] with the reason.
//!
//! The unsafe code is confined to the `ffi` module of each runtime and to
//! the loader; everything else is safe. docs/gpu-runtimes.md lists each
//! function and symbol used.

pub mod cuda;
mod dl;
pub mod hip;
mod pci;
mod select;

pub use select::{ENV_VAR, LibraryNames, RuntimeChoice, select, select_from, system_gpu};

/// The host's page size, to which dma-buf exports are aligned (the export
/// covers whole pages and reports where the range starts inside them).
pub fn host_page_size() -> usize {
    dl::page_size()
}
