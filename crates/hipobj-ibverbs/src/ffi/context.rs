//! Owning handles for the device list, an open device context and a
//! protection domain.
//!
//! Each handle keeps what it was made from alive (a context its library
//! table, a PD its context), so no safe use can call a destroy function
//! twice or on an object whose parent is gone.

use std::ffi::{CStr, c_int};
use std::ptr::NonNull;
use std::sync::Arc;

use hipobj_platform::VerbsError;

use super::table::VerbsFns;
use super::{
    Zeroed, ibv_context, ibv_context_ops, ibv_device, ibv_device_attr, ibv_gid, ibv_pd, ibv_port_attr,
};
use crate::error::{check, errno, non_null, os_error};

/// The list `ibv_get_device_list` returned, freed on drop.
pub(crate) struct DeviceList {
    fns: Arc<VerbsFns>,
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl DeviceList {
    /// `ibv_get_device_list`. A NULL list gives its errno.
    pub(crate) fn get(fns: &Arc<VerbsFns>) -> Result<Self, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the count.
        let list = unsafe { (fns.get_device_list)(&mut n) };
        let Some(list) = NonNull::new(list) else {
            return Err(os_error("ibv_get_device_list", errno()));
        };
        Ok(Self {
            fns: fns.clone(),
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn entries(&self) -> &[*mut ibv_device] {
        // SAFETY: libibverbs returned an array of `len` device pointers
        // (followed by a NULL), valid until ibv_free_device_list in Drop.
        unsafe { std::slice::from_raw_parts(self.list.as_ptr(), self.len) }
    }

    /// The devices' names, in list order (empty for a device without one).
    pub(crate) fn names(&self) -> Vec<String> {
        self.entries().iter().map(|&dev| self.name_of(dev)).collect()
    }

    fn name_of(&self, dev: *mut ibv_device) -> String {
        // SAFETY: `dev` is an entry of this live list.
        let p = unsafe { (self.fns.get_device_name)(dev) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: libibverbs returns the NUL-terminated name stored in the
        // device, valid while the list is.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `ibv_open_device` on the entry at `index` (None past the end).
    pub(crate) fn open(&self, index: usize) -> Option<Result<Context, VerbsError>> {
        let &dev = self.entries().get(index)?;
        // SAFETY: `dev` is an entry of the live list; the context keeps its
        // own reference to the device after the list is freed.
        let ctx = non_null("ibv_open_device", unsafe { (self.fns.open_device)(dev) });
        Some(ctx.map(|ctx| Context {
            fns: self.fns.clone(),
            ctx,
        }))
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once;
        // no slice of it outlives `&self`.
        unsafe { (self.fns.free_device_list)(self.list.as_ptr()) };
    }
}

/// An open device context, closed on drop (after every PD and CQ made on
/// it, which hold it).
pub(crate) struct Context {
    fns: Arc<VerbsFns>,
    ctx: NonNull<ibv_context>,
}

// SAFETY: libibverbs objects may be used from any thread (verbs calls are
// thread-safe, as rdma-core documents); the pointer is only released in Drop.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc to this context, so none is left.
        unsafe { (self.fns.close_device)(self.ctx.as_ptr()) };
    }
}

impl Context {
    pub(super) fn fns(&self) -> &VerbsFns {
        &self.fns
    }

    pub(super) fn as_ptr(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    /// Whether the library has `ibv_reg_dmabuf_mr`.
    pub(crate) fn has_dmabuf(&self) -> bool {
        self.fns.reg_dmabuf_mr.is_some()
    }

    /// The provider's ops table (the inline verbs of verbs.h call through it).
    pub(crate) fn ops(&self) -> ibv_context_ops {
        // SAFETY: the context is open; its ops table is filled in by the
        // provider when the device is opened and never changes afterwards.
        unsafe { (*self.ctx.as_ptr()).ops }
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> Result<ibv_device_attr, VerbsError> {
        let mut attr = ibv_device_attr::zeroed();
        // SAFETY: the context is open and `attr` is a writable ibv_device_attr.
        check("ibv_query_device", unsafe {
            (self.fns.query_device)(self.ctx.as_ptr(), &mut attr)
        })?;
        Ok(attr)
    }

    /// `ibv_query_port`, into a zeroed structure.
    pub(crate) fn query_port(&self, port: u8) -> Result<ibv_port_attr, VerbsError> {
        let mut a = ibv_port_attr::zeroed();
        // SAFETY: the context is open; `a` is a zeroed ibv_port_attr, at
        // least as large as the compat structure the exported symbol fills.
        check("ibv_query_port", unsafe {
            (self.fns.query_port)(self.ctx.as_ptr(), port, &mut a)
        })?;
        Ok(a)
    }

    /// `ibv_query_gid`.
    pub(crate) fn query_gid(&self, port: u8, index: c_int) -> Result<ibv_gid, VerbsError> {
        let mut gid = ibv_gid::default();
        // SAFETY: the context is open and `gid` is a writable union ibv_gid.
        check("ibv_query_gid", unsafe {
            (self.fns.query_gid)(self.ctx.as_ptr(), port, index, &mut gid)
        })?;
        Ok(gid)
    }
}

/// A protection domain, deallocated on drop (after every MR, MW and QP on
/// it, which hold it).
pub(crate) struct Pd {
    ctx: Arc<Context>,
    pd: NonNull<ibv_pd>,
}

// SAFETY: see `Context`.
unsafe impl Send for Pd {}
// SAFETY: see `Context`.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR, MW and QP on this PD holds an Arc to it, so none
        // is left.
        unsafe { (self.ctx.fns.dealloc_pd)(self.pd.as_ptr()) };
    }
}

impl Pd {
    /// `ibv_alloc_pd`.
    pub(crate) fn alloc(ctx: &Arc<Context>) -> Result<Self, VerbsError> {
        // SAFETY: the context is open.
        let pd = non_null("ibv_alloc_pd", unsafe { (ctx.fns.alloc_pd)(ctx.as_ptr()) })?;
        Ok(Self { ctx: ctx.clone(), pd })
    }

    /// The context the PD was allocated on.
    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(super) fn as_ptr(&self) -> *mut ibv_pd {
        self.pd.as_ptr()
    }
}
