//! The GPU runtime seam: what the library asks of HIP or CUDA.
//!
//! Addresses are plain `usize` values here: the runtime only inspects them or
//! hands them to its own copy engine, and never dereferences them in Rust.

use std::fmt;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// A failed runtime call, with the runtime's own error number (hipError_t or
/// CUresult), which the C API reports in `hipObjError_t::hipError`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed with error {code}: {detail}")]
pub struct GpuError {
    /// The runtime call, such as `"hipPointerGetAttributes"`.
    pub call: &'static str,
    /// The runtime's error number (0 when the failure is not the runtime's own).
    pub code: i32,
    /// A sentence for people.
    pub detail: String,
}

impl GpuError {
    /// Builds an error.
    pub fn new(call: &'static str, code: i32, detail: impl Into<String>) -> Self {
        Self {
            call,
            code,
            detail: detail.into(),
        }
    }
}

/// Where a pointer points, as the runtime knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerKind {
    /// Memory the runtime does not know (plain `malloc`, stack, or no GPU runtime).
    Unknown,
    /// Host memory the runtime allocated or registered (pinned).
    Host,
    /// Device memory of the GPU with this index.
    Device(i32),
}

/// What the runtime reports about a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerInfo {
    /// Host, device, or unknown.
    pub kind: PointerKind,
    /// The allocation holding the pointer, as (base, size), when the runtime knows it.
    pub allocation: Option<(usize, usize)>,
}

/// A dma-buf exported from GPU memory.
#[derive(Debug)]
pub struct Dmabuf {
    /// The dma-buf file descriptor.
    pub fd: OwnedFd,
    /// Where the exported range starts inside the dma-buf.
    pub offset: u64,
}

/// Pinned host memory from the runtime; dropping it frees the memory.
pub trait PinnedHostBuffer: Send + Sync + fmt::Debug {
    /// The first byte's address.
    fn addr(&self) -> usize;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// The memory as a region to register. It stays valid for as long as
    /// this buffer lives, so every MR over it must be dropped first.
    fn region(&self) -> crate::memory::MemRegion;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An event recorded after an asynchronous copy.
pub trait CopyEvent: Send + Sync + fmt::Debug {
    /// Whether the copy has finished. Never blocks.
    fn is_done(&self) -> Result<bool, GpuError>;
}

/// A GPU runtime (HIP, CUDA) or its absence.
pub trait GpuRuntime: Send + Sync + fmt::Debug {
    /// A short name ("hip", "cuda", "none", "fake").
    fn name(&self) -> &'static str;

    /// How many GPUs the runtime sees.
    fn device_count(&self) -> Result<i32, GpuError>;

    /// The calling thread's current device.
    fn current_device(&self) -> Result<i32, GpuError>;

    /// The PCI address of a GPU, as `"dddd:bb:dd.f"` in lowercase.
    fn pci_bus_id(&self, device: i32) -> Result<String, GpuError>;

    /// What the runtime knows about the memory at `addr`.
    fn pointer_info(&self, addr: usize) -> Result<PointerInfo, GpuError>;

    /// Allocates pinned host memory that the NIC can register.
    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedHostBuffer>, GpuError>;

    /// Exports `[addr, addr + len)` of device memory as a dma-buf.
    fn export_dmabuf(&self, addr: usize, len: usize) -> Result<Dmabuf, GpuError>;

    /// Starts copying `len` bytes from `src` to `dst` (either may be device
    /// memory) on the calling thread's stream, and records an event after it.
    fn copy_async(&self, dst: usize, src: usize, len: usize) -> Result<Box<dyn CopyEvent>, GpuError>;

    /// Waits for all work on the current device.
    fn synchronize(&self) -> Result<(), GpuError>;

    /// Waits for the work queued so far on `stream`, a stream handle of this
    /// runtime (`hipStream_t`, `CUstream`; 0 is the default stream). Callers
    /// use it to order a transfer after the GPU work that writes or reads
    /// the buffer. The default waits for the whole device, which covers
    /// every stream.
    fn stream_synchronize(&self, stream: usize) -> Result<(), GpuError> {
        let _ = stream;
        self.synchronize()
    }
}

/// Polls `event` until it reports done or `timeout` passes; says which.
///
/// Polls at most once a millisecond after a short spin, which is how long a
/// copy that is not yet done will usually still take.
pub fn wait_for_copy(event: &dyn CopyEvent, timeout: Duration) -> Result<bool, GpuError> {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if event.is_done()? {
            return Ok(true);
        }
        if start.elapsed() >= timeout {
            return Ok(false);
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1).min(timeout.saturating_sub(start.elapsed())));
        }
    }
}

/// The runtime of a host without a usable GPU: no devices, every pointer is
/// plain host memory.
#[derive(Debug, Clone)]
pub struct NoGpu {
    reason: String,
}

impl NoGpu {
    /// A host-only runtime; `reason` says why there is no GPU runtime.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// Why there is no GPU runtime.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    fn unsupported(&self, call: &'static str) -> GpuError {
        GpuError::new(call, 0, format!("no GPU runtime: {}", self.reason))
    }
}

impl GpuRuntime for NoGpu {
    fn name(&self) -> &'static str {
        "none"
    }
    fn device_count(&self) -> Result<i32, GpuError> {
        Ok(0)
    }
    fn current_device(&self) -> Result<i32, GpuError> {
        Err(self.unsupported("current_device"))
    }
    fn pci_bus_id(&self, _device: i32) -> Result<String, GpuError> {
        Err(self.unsupported("pci_bus_id"))
    }
    fn pointer_info(&self, _addr: usize) -> Result<PointerInfo, GpuError> {
        Ok(PointerInfo {
            kind: PointerKind::Unknown,
            allocation: None,
        })
    }
    fn alloc_pinned(&self, _len: usize) -> Result<Box<dyn PinnedHostBuffer>, GpuError> {
        Err(self.unsupported("alloc_pinned"))
    }
    fn export_dmabuf(&self, _addr: usize, _len: usize) -> Result<Dmabuf, GpuError> {
        Err(self.unsupported("export_dmabuf"))
    }
    fn copy_async(&self, _dst: usize, _src: usize, _len: usize) -> Result<Box<dyn CopyEvent>, GpuError> {
        Err(self.unsupported("copy_async"))
    }
    fn synchronize(&self) -> Result<(), GpuError> {
        Ok(())
    }
    fn stream_synchronize(&self, _stream: usize) -> Result<(), GpuError> {
        // A stream handle cannot come from a runtime that is not there.
        Err(self.unsupported("stream_synchronize"))
    }
}
