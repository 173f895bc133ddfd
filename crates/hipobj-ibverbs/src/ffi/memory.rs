//! Owning handles for memory regions and type-2 memory windows.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hipobj_platform::{MemRegion, VerbsError};

use super::context::Pd;
use super::{IBV_MW_TYPE_2, ibv_mr, ibv_mw};
use crate::error::{non_null, unsupported};

/// Why a dma-buf registration is unsupported when the library lacks it.
pub(crate) const DMABUF_MISSING: &str =
    "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later needed)";

/// What a registration returned: the keys and the range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MrInfo {
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: usize,
}

/// A registered memory region, deregistered on drop.
pub(crate) struct Mr {
    pd: Arc<Pd>,
    mr: NonNull<ibv_mr>,
}

// SAFETY: see `Context`.
unsafe impl Send for Mr {}
// SAFETY: see `Context`.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR is live and deregistered once; its PD outlives it.
        unsafe { (self.pd.context().fns().dereg_mr)(self.mr.as_ptr()) };
    }
}

impl Mr {
    /// `ibv_reg_mr` over `region`.
    pub(crate) fn register(pd: &Arc<Pd>, region: MemRegion, access: c_int) -> Result<Self, VerbsError> {
        // SAFETY: the PD is live. The memory itself is vouched for by
        // `MemRegion`'s contract: it stays allocated until this MR is dropped.
        let mr = non_null("ibv_reg_mr", unsafe {
            (pd.context().fns().reg_mr)(pd.as_ptr(), region.addr() as *mut c_void, region.len(), access)
        })?;
        Ok(Self { pd: pd.clone(), mr })
    }

    /// `ibv_reg_dmabuf_mr` (Unsupported when the library lacks it).
    pub(crate) fn register_dmabuf(
        pd: &Arc<Pd>,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: c_int,
    ) -> Result<Self, VerbsError> {
        let Some(reg) = pd.context().fns().reg_dmabuf_mr else {
            return Err(unsupported("ibv_reg_dmabuf_mr", DMABUF_MISSING));
        };
        // SAFETY: the PD is live and `fd` is an open dma-buf for the duration
        // of the call; the kernel takes its own reference to the buffer.
        let mr = non_null("ibv_reg_dmabuf_mr", unsafe {
            reg(pd.as_ptr(), offset, len, iova, fd.as_raw_fd(), access)
        })?;
        Ok(Self { pd: pd.clone(), mr })
    }

    /// The PD the region was registered on.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The keys and range libibverbs filled in.
    pub(crate) fn info(&self) -> MrInfo {
        // SAFETY: the MR is live; libibverbs never changes these fields
        // after the registration returned.
        let m = unsafe { self.mr.as_ref() };
        MrInfo {
            lkey: m.lkey,
            rkey: m.rkey,
            addr: m.addr as u64,
            len: m.length,
        }
    }

    pub(super) fn as_ptr(&self) -> *mut ibv_mr {
        self.mr.as_ptr()
    }
}

/// A type-2 memory window, deallocated on drop.
pub(crate) struct Mw {
    pd: Arc<Pd>,
    mw: NonNull<ibv_mw>,
    /// Held across a bind's post and the store of its key, so that the
    /// provider's read of `ibv_mw.rkey` and this handle's write of it never
    /// overlap.
    bind: Mutex<()>,
}

// SAFETY: see `Context`.
unsafe impl Send for Mw {}
// SAFETY: see `Context`.
unsafe impl Sync for Mw {}

impl Drop for Mw {
    fn drop(&mut self) {
        if let Some(dealloc) = self.pd.context().ops().dealloc_mw {
            // SAFETY: the window is live and deallocated once, before its PD
            // (as the inline `ibv_dealloc_mw` of verbs.h does).
            unsafe { dealloc(self.mw.as_ptr()) };
        }
    }
}

impl Mw {
    /// The inline `ibv_alloc_mw` of verbs.h, for a type-2 window. A provider
    /// without `alloc_mw` or `dealloc_mw` gives Unsupported.
    pub(crate) fn alloc(pd: &Arc<Pd>) -> Result<Self, VerbsError> {
        let ops = pd.context().ops();
        let (Some(alloc), Some(_)) = (ops.alloc_mw, ops.dealloc_mw) else {
            return Err(unsupported("ibv_alloc_mw", "the provider has no memory windows"));
        };
        // SAFETY: the PD is live; this is what the inline `ibv_alloc_mw` of
        // verbs.h does.
        let mw = non_null("ibv_alloc_mw", unsafe { alloc(pd.as_ptr(), IBV_MW_TYPE_2) })?;
        Ok(Self {
            pd: pd.clone(),
            mw,
            bind: Mutex::new(()),
        })
    }

    /// The PD the window was allocated on.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    fn rkey_cell(&self) -> &AtomicU32 {
        // SAFETY: the window is live while `self` is and `rkey` is an
        // aligned u32 field of it. Every access from Rust goes through this
        // atomic view; the provider reads the field only inside a bind's
        // post_send, which `Qp::post_bind` makes under `bind`, as it makes
        // the only write.
        unsafe { AtomicU32::from_ptr(&raw mut (*self.mw.as_ptr()).rkey) }
    }

    /// `ibv_mw.rkey`: the key the window has now.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey_cell().load(Ordering::Relaxed)
    }

    /// Stores the key of a bind just posted into `ibv_mw.rkey`. For a type-2
    /// window the application keeps this field current: providers (rxe) put
    /// it in the next bind as the key the window has, and the kernel refuses
    /// a bind that names a stale one.
    pub(super) fn set_rkey(&self, _bind: &MutexGuard<'_, ()>, key: u32) {
        self.rkey_cell().store(key, Ordering::Relaxed);
    }

    /// The lock a bind holds (see `bind`).
    pub(super) fn lock_bind(&self) -> MutexGuard<'_, ()> {
        self.bind.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn as_ptr(&self) -> *mut ibv_mw {
        self.mw.as_ptr()
    }
}
