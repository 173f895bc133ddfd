//! Loading libibverbs and resolving its functions.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;

use libloading::Library;

use super::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_gid, ibv_mr, ibv_pd,
    ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
};

/// The functions the backend calls, resolved once from the loaded library.
///
/// The pointers stay valid for as long as `_lib` is loaded, which is as long
/// as this table exists: the table owns the library, and every verbs object
/// of the backend holds the table (through an `Arc`) until it is released.
pub(crate) struct VerbsFns {
    pub get_device_list: unsafe extern "C" fn(num: *mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(list: *mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(dev: *mut ibv_device) -> *const c_char,
    pub open_device: unsafe extern "C" fn(dev: *mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(ctx: *mut ibv_context) -> c_int,
    pub query_device: unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int,
    pub query_port: unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int,
    pub query_gid:
        unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(ctx: *mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int,
    pub reg_mr:
        unsafe extern "C" fn(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr,
    /// Absent before rdma-core 34: then dma-buf registration is unsupported.
    pub reg_dmabuf_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            offset: u64,
            len: usize,
            iova: u64,
            fd: c_int,
            access: c_int,
        ) -> *mut ibv_mr,
    >,
    pub dereg_mr: unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(ctx: *mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(ch: *mut ibv_comp_channel) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int,
    pub get_cq_event: unsafe extern "C" fn(
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint),
    pub create_qp: unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int,
    pub query_qp: unsafe extern "C" fn(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        mask: c_int,
        init: *mut ibv_qp_init_attr,
    ) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int,
    /// The library; declared last so that it is unloaded after nothing else
    /// here can be used (there is no `Drop` that calls through the table).
    _lib: Library,
}

impl fmt::Debug for VerbsFns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsFns")
            .field("reg_dmabuf_mr", &self.reg_dmabuf_mr.is_some())
            .finish_non_exhaustive()
    }
}

/// Why loading failed.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// `dlopen` failed.
    Open(String),
    /// A required symbol is missing.
    Symbol(&'static str, String),
}

impl VerbsFns {
    /// Opens `path` with `dlopen` and resolves every function.
    pub(crate) fn load(path: &str) -> Result<Self, LoadError> {
        // SAFETY: loading libibverbs runs its ELF constructors, which only
        // initialise the library's own state (and register no handlers that
        // could break Rust invariants). It is loaded by soname or a path the
        // caller chose for this purpose.
        let lib = unsafe { Library::new(path) }.map_err(|e| LoadError::Open(e.to_string()))?;

        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol has the C signature of the field it is
                // stored in, as declared by verbs.h for the default symbol
                // version of libibverbs.so.1; the pointer is only used while
                // `lib` stays loaded (see the struct's documentation).
                let s = unsafe { lib.get(concat!($name, "\0").as_bytes()) };
                *s.map_err(|e| LoadError::Symbol($name, e.to_string()))?
            }};
        }
        macro_rules! optional_sym {
            ($name:literal) => {{
                // SAFETY: as for `sym!`.
                let s = unsafe { lib.get(concat!($name, "\0").as_bytes()) };
                s.ok().map(|s| *s)
            }};
        }

        Ok(Self {
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_device: sym!("ibv_query_device"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            reg_dmabuf_mr: optional_sym!("ibv_reg_dmabuf_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_comp_channel: sym!("ibv_create_comp_channel"),
            destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            get_cq_event: sym!("ibv_get_cq_event"),
            ack_cq_events: sym!("ibv_ack_cq_events"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            query_qp: sym!("ibv_query_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            _lib: lib,
        })
    }
}
