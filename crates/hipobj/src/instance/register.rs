//! Registering and deregistering buffers, and the staging copies of GPU
//! memory the NIC cannot reach.

use std::sync::Arc;

use hipobj_platform::{MemRegion, PointerKind};

use super::Instance;
use crate::buffers::{BufEntry, BufKind, BufMrs, check_region};
use crate::direction::SyncDirection;
use crate::error::{Error, ErrorKind, Result};

impl Instance {
    fn check_new_region(&self, region: &MemRegion) -> Result<()> {
        check_region(region.addr(), region.len())?;
        self.buffers.check_free(region.addr(), region.len())
    }

    fn insert(&self, entry: BufEntry) -> Result<()> {
        // If another thread won a race for the same range, our registration
        // is released here, after the map's lock.
        self.buffers.insert(entry).map_err(|(e, _loser)| e)
    }

    /// Registers host memory (`hipObjBufRegisterHost`).
    pub fn register_host(&self, region: MemRegion) -> Result<()> {
        self.check_process()?;
        self.check_new_region(&region)?;
        let info = self.platform.gpu.pointer_info(region.addr()).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                "asking the GPU runtime about the pointer",
                &e,
            )
        })?;
        if let PointerKind::Device(d) = info.kind {
            return Err(Error::invalid(format!(
                "{:#x} is memory of GPU {d}: register it with hipObjBufRegister",
                region.addr()
            )));
        }
        let pd = self.device.pd();
        let windows = self.device.windows();
        let mrs = BufMrs::register(windows, |access| pd.reg_mr(region, access))
            .map_err(|e| Error::rdma("registering host memory", &e))?;
        self.insert(BufEntry::direct(region.addr(), region.len(), BufKind::Host, mrs))
    }

    /// Registers GPU memory (`hipObjBufRegister`): as a dma-buf when enabled
    /// and supported, else with a plain MR, else through a pinned host
    /// staging buffer (unless GPU-direct is required).
    pub fn register_device(&self, region: MemRegion) -> Result<()> {
        self.check_process()?;
        self.check_new_region(&region)?;
        let gpu = &self.platform.gpu;
        let info = gpu.pointer_info(region.addr()).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                "asking the GPU runtime about the pointer",
                &e,
            )
        })?;
        let PointerKind::Device(_) = info.kind else {
            return Err(Error::invalid(format!(
                "{:#x} is not GPU memory: register host memory with hipObjBufRegisterHost",
                region.addr()
            )));
        };
        let (base, size) = info.allocation.ok_or_else(|| {
            Error::invalid(format!(
                "the GPU runtime knows no allocation holding {:#x}",
                region.addr()
            ))
        })?;
        let inside =
            region.addr() >= base && region.len() <= size && region.addr() - base <= size - region.len();
        if !inside {
            return Err(Error::invalid(format!(
                "{:#x}+{} runs past the end of its GPU allocation {base:#x}+{size}",
                region.addr(),
                region.len()
            )));
        }
        let pd = self.device.pd();
        let windows = self.device.windows();
        if self.options.dmabuf && self.device.device().supports_dmabuf() {
            match gpu.export_dmabuf(region.addr(), region.len()) {
                Ok(buf) => {
                    use std::os::fd::AsFd;
                    let registered = BufMrs::register(windows, |access| {
                        pd.reg_dmabuf_mr(
                            buf.fd.as_fd(),
                            buf.offset,
                            region.len(),
                            region.addr() as u64,
                            access,
                        )
                    });
                    // The MRs keep their own reference to the dma-buf; its fd
                    // closes when `buf` goes out of scope.
                    match registered {
                        Ok(mrs) => {
                            return self.insert(BufEntry::direct(
                                region.addr(),
                                region.len(),
                                BufKind::Device { dmabuf: true },
                                mrs,
                            ));
                        }
                        Err(e) if self.options.rdma_debug => {
                            eprintln!("hipObject: dma-buf registration failed: {e}");
                        }
                        Err(_) => {}
                    }
                }
                Err(e) if self.options.rdma_debug => eprintln!("hipObject: dma-buf export failed: {e}"),
                Err(_) => {}
            }
        }
        if let Ok(mrs) = BufMrs::register(windows, |access| pd.reg_mr(region, access)) {
            return self.insert(BufEntry::direct(
                region.addr(),
                region.len(),
                BufKind::Device { dmabuf: false },
                mrs,
            ));
        }
        if self.options.require_gpu_direct {
            return Err(Error::new(
                ErrorKind::DmabufNotSupported,
                format!(
                    "the NIC cannot reach GPU memory at {:#x} directly, and HIPOBJ_REQUIRE_GPU_DIRECT forbids staging",
                    region.addr()
                ),
            ));
        }
        let staging = gpu
            .alloc_pinned(region.len())
            .map_err(|e| Error::gpu(ErrorKind::RdmaError, "allocating a pinned staging buffer", &e))?;
        // The entry owns the staging buffer and drops it after the MRs over it.
        let mrs = BufMrs::register(windows, |access| pd.reg_mr(staging.region(), access))
            .map_err(|e| Error::rdma("registering a staging buffer", &e))?;
        eprintln!(
            "hipObject: warning: the NIC cannot reach GPU memory at {:#x} directly; it is staged through host memory and no longer GPU-direct",
            region.addr()
        );
        self.insert(BufEntry::staged(region.addr(), region.len(), mrs, staging))
    }

    /// Deregisters a buffer, unless something still uses it.
    pub fn deregister(&self, addr: usize) -> Result<()> {
        self.check_process()?;
        if addr == 0 {
            return Err(Error::invalid("the buffer pointer is NULL"));
        }
        self.abandoned.prune_all();
        self.revoke_token_for_buffer(addr);
        let entry = self.buffers.remove(addr)?;
        // The MR and staging buffer are released here, after the map's lock.
        drop(entry);
        Ok(())
    }

    /// Copies part of a staged buffer between device and staging memory,
    /// with the staging deadline. A copy that misses it is handed to the
    /// abandoned list and the call fails with `InternalError`.
    pub(crate) fn stage(
        &self,
        entry: &Arc<BufEntry>,
        offset: usize,
        size: usize,
        dir: SyncDirection,
    ) -> Result<()> {
        let Some(staging) = entry.staging_addr() else {
            return Ok(());
        };
        let (dst, src) = match dir {
            SyncDirection::ToHost => (staging + offset, entry.addr() + offset),
            SyncDirection::ToDevice => (entry.addr() + offset, staging + offset),
        };
        let slot = self.abandoned.reserve();
        let event = self
            .platform
            .gpu
            .copy_async(dst, src, size)
            .map_err(|e| Error::gpu(ErrorKind::InternalError, "starting a staging copy", &e))?;
        match hipobj_platform::gpu::wait_for_copy(event.as_ref(), self.options.stage_timeout) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.abandoned.add(slot, entry.clone(), event);
                Err(Error::new(
                    ErrorKind::InternalError,
                    format!(
                        "a staging copy did not finish within {} ms; the buffer stays busy until it does",
                        self.options.stage_timeout.as_millis()
                    ),
                ))
            }
            Err(e) => {
                self.abandoned.add(slot, entry.clone(), event);
                Err(Error::gpu(
                    ErrorKind::InternalError,
                    "waiting for a staging copy",
                    &e,
                ))
            }
        }
    }

    /// `hipObjBufSync`: copies a staged buffer's range between device and
    /// host; does nothing for a buffer the NIC reaches directly.
    pub fn sync(&self, addr: usize, size: usize, offset: usize, dir: SyncDirection) -> Result<()> {
        let entry = self.find_usable(addr)?;
        entry.check_range(offset, size)?;
        self.stage(&entry, offset, size, dir)
    }

    /// Waits for the GPU work queued so far on `stream`, a stream handle of
    /// the platform's GPU runtime (0 is the default stream). Bindings call
    /// it before a transfer's token exists, so the server's RDMA READ of a
    /// PUT sees what the stream's kernels wrote, and the RDMA WRITE of a GET
    /// (or, for a staged buffer, the copy to the GPU that ends it) does not
    /// race the stream's own use of the buffer. A failure is
    /// `InvalidValue` carrying the runtime's error number: a handle the
    /// runtime does not know, or no GPU runtime at all.
    pub fn synchronize_stream(&self, stream: usize) -> Result<()> {
        self.check_process()?;
        self.platform.gpu.stream_synchronize(stream).map_err(|e| {
            Error::gpu(
                ErrorKind::InvalidValue,
                &format!("synchronizing stream {stream:#x}"),
                &e,
            )
        })
    }
}
