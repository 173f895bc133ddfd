//! The CUDA driver API (`libcuda.so.1`) as a table of function pointers,
//! with a safe wrapper around each call.
//!
//! The declarations follow `cuda.h` (CUDA 11.7 and later for the optional
//! dma-buf export; everything else since CUDA 4). `cuda.h` maps many names
//! to versioned symbols with macros (`#define cuMemAlloc cuMemAlloc_v2`);
//! this table names the symbol the macro expands to, which is what a program
//! compiled against `cuda.h` calls. Handles are kept as `usize`.
//!
//! The driver API works on the calling thread's *current context*. An
//! application using the runtime API (cudart) has the primary context of
//! its device current on its threads; on a thread with none, each call here
//! pushes the primary context of device 0 for its duration and pops it
//! again, so hipObject never changes a thread's current context.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use hipobj_platform::{CopyEvent, Dmabuf, GpuError, MemRegion, PinnedHostBuffer};
use libloading::Library;

use crate::dl;

/// `CUresult` values this crate tells apart.
pub(crate) mod code {
    /// `CUDA_SUCCESS`.
    pub(crate) const SUCCESS: i32 = 0;
    /// `CUDA_ERROR_INVALID_VALUE`: among others, a pointer CUDA does not know.
    pub(crate) const INVALID_VALUE: i32 = 1;
    /// `CUDA_ERROR_NOT_INITIALIZED`.
    pub(crate) const NOT_INITIALIZED: i32 = 3;
    /// `CUDA_ERROR_NO_DEVICE`: what `cuInit` says on a host without a GPU.
    pub(crate) const NO_DEVICE: i32 = 100;
    /// `CUDA_ERROR_NOT_READY`: what `cuEventQuery` says while work is pending.
    pub(crate) const NOT_READY: i32 = 600;
}

/// `CUpointer_attribute` values.
mod attr {
    use std::ffi::c_int;

    pub(super) const MEMORY_TYPE: c_int = 2;
    pub(super) const IS_MANAGED: c_int = 8;
    pub(super) const DEVICE_ORDINAL: c_int = 9;
}

/// `CU_MEMORYTYPE_DEVICE`.
pub(crate) const CU_MEMORYTYPE_DEVICE: u32 = 2;
/// `CU_MEMORYTYPE_HOST`.
pub(crate) const CU_MEMORYTYPE_HOST: u32 = 1;
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` (CUDA 11.7).
const DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
/// `CU_STREAM_PER_THREAD`, `((CUstream)0x2)` in cuda.h: the calling thread's
/// implicit stream in the current context.
const STREAM_PER_THREAD: *mut c_void = 2 as *mut c_void;
/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not only the one
/// current at allocation.
const MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
const MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 0x1;

type CuResult = c_int;
type CuDevice = c_int;
type CuDeviceptr = u64;

/// The loaded driver API. The library itself is never unloaded (see
/// `dl::open_first`); buffers and events hold an `Arc` to this table.
pub(crate) struct CudaApi {
    library: String,
    driver_version: i32,
    /// `cuInit(0)`'s result: `CUDA_ERROR_NO_DEVICE` means a host without GPUs.
    init: CuResult,
    /// Primary context of device 0, retained on first need and kept for the
    /// rest of the process (never released: objects from it may outlive any
    /// runtime handle).
    primary: Mutex<Option<usize>>,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    device_primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, CuDevice) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut *mut c_void) -> CuResult,
    ctx_push_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    ctx_pop_current: unsafe extern "C" fn(*mut *mut c_void) -> CuResult,
    ctx_get_device: unsafe extern "C" fn(*mut CuDevice) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    /// Optional: without it, a stream is synchronized by its context.
    stream_synchronize: Option<unsafe extern "C" fn(*mut c_void) -> CuResult>,
    pointer_get_attribute: unsafe extern "C" fn(*mut c_void, c_int, CuDeviceptr) -> CuResult,
    mem_get_address_range: unsafe extern "C" fn(*mut CuDeviceptr, *mut usize, CuDeviceptr) -> CuResult,
    mem_host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult,
    mem_free_host: unsafe extern "C" fn(*mut c_void) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDeviceptr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDeviceptr) -> CuResult,
    memcpy_async: unsafe extern "C" fn(CuDeviceptr, CuDeviceptr, usize, *mut c_void) -> CuResult,
    event_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> CuResult,
    event_query: unsafe extern "C" fn(*mut c_void) -> CuResult,
    event_destroy: unsafe extern "C" fn(*mut c_void) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// CUDA 11.7 and later.
    mem_get_handle_for_address_range:
        Option<unsafe extern "C" fn(*mut c_void, CuDeviceptr, usize, c_int, c_ulonglong) -> CuResult>,
    /// Never closed, so the pointers above stay valid.
    _lib: &'static Library,
}

impl fmt::Debug for CudaApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaApi")
            .field("library", &self.library)
            .field("driver_version", &self.driver_version)
            .field("init", &self.init)
            .field(
                "cuMemGetHandleForAddressRange",
                &self.mem_get_handle_for_address_range.is_some(),
            )
            .finish()
    }
}

impl CudaApi {
    /// Opens the first of `names`, resolves every required symbol and the
    /// optional one, and calls `cuInit(0)`.
    pub(crate) fn load(names: &[&str]) -> Result<Self, String> {
        let (lib, library) = dl::open_first(names)?;
        // SAFETY: each type below is the C prototype in cuda.h of the symbol
        // named, with `CUresult` and every enum as `int`, `CUdevice` as
        // `int`, `CUdeviceptr` as `unsigned long long` (64-bit since the
        // `_v2` API of CUDA 3.2), `CUcontext`, `CUstream` and `CUevent` as
        // `void *`, and `size_t` as `usize`. The library is never
        // unloaded, so the pointers stay valid.
        unsafe {
            let cu_init: unsafe extern "C" fn(c_uint) -> CuResult = dl::sym(lib, "cuInit")?;
            let driver_get_version: unsafe extern "C" fn(*mut c_int) -> CuResult =
                dl::sym(lib, "cuDriverGetVersion")?;
            let mut driver_version: c_int = 0;
            if driver_get_version(&raw mut driver_version) != code::SUCCESS {
                driver_version = 0;
            }
            let api = Self {
                device_get_count: dl::sym(lib, "cuDeviceGetCount")?,
                device_get: dl::sym(lib, "cuDeviceGet")?,
                device_get_pci_bus_id: dl::sym(lib, "cuDeviceGetPCIBusId")?,
                device_get_attribute: dl::sym(lib, "cuDeviceGetAttribute")?,
                device_primary_ctx_retain: dl::sym(lib, "cuDevicePrimaryCtxRetain")?,
                ctx_get_current: dl::sym(lib, "cuCtxGetCurrent")?,
                ctx_push_current: dl::sym(lib, "cuCtxPushCurrent_v2")?,
                ctx_pop_current: dl::sym(lib, "cuCtxPopCurrent_v2")?,
                ctx_get_device: dl::sym(lib, "cuCtxGetDevice")?,
                ctx_synchronize: dl::sym(lib, "cuCtxSynchronize")?,
                stream_synchronize: dl::sym(lib, "cuStreamSynchronize").ok(),
                pointer_get_attribute: dl::sym(lib, "cuPointerGetAttribute")?,
                mem_get_address_range: dl::sym(lib, "cuMemGetAddressRange_v2")?,
                mem_host_alloc: dl::sym(lib, "cuMemHostAlloc")?,
                mem_free_host: dl::sym(lib, "cuMemFreeHost")?,
                mem_alloc: dl::sym(lib, "cuMemAlloc_v2")?,
                mem_free: dl::sym(lib, "cuMemFree_v2")?,
                memcpy_async: dl::sym(lib, "cuMemcpyAsync")?,
                event_create: dl::sym(lib, "cuEventCreate")?,
                event_record: dl::sym(lib, "cuEventRecord")?,
                event_query: dl::sym(lib, "cuEventQuery")?,
                event_destroy: dl::sym(lib, "cuEventDestroy_v2")?,
                get_error_string: dl::sym(lib, "cuGetErrorString")?,
                get_error_name: dl::sym(lib, "cuGetErrorName")?,
                mem_get_handle_for_address_range: dl::sym(lib, "cuMemGetHandleForAddressRange").ok(),
                init: cu_init(0),
                driver_version,
                primary: Mutex::new(None),
                library,
                _lib: lib,
            };
            if api.init != code::SUCCESS && api.init != code::NO_DEVICE {
                return Err(format!(
                    "{}: cuInit failed: {}",
                    api.library,
                    api.error_string(api.init)
                ));
            }
            Ok(api)
        }
    }

    pub(crate) fn library(&self) -> &str {
        &self.library
    }

    /// `cuDriverGetVersion`: major * 1000 + minor * 10 (0 if it failed).
    pub(crate) fn driver_version(&self) -> i32 {
        self.driver_version
    }

    pub(crate) fn has_mem_get_handle(&self) -> bool {
        self.mem_get_handle_for_address_range.is_some()
    }

    /// `"CUDA_ERROR_X: text"` for `rc`.
    pub(crate) fn error_string(&self, rc: CuResult) -> String {
        let text = |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: writes a pointer to a static string (or nothing, with
            // an error, for unknown values) through a valid pointer.
            let rc = unsafe { f(rc, &raw mut p) };
            // SAFETY: on success the driver hands out static C strings.
            (rc == code::SUCCESS && !p.is_null())
                .then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        match (text(self.get_error_name), text(self.get_error_string)) {
            (Some(name), Some(s)) => format!("{name}: {s}"),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => format!("CUresult {rc}"),
        }
    }

    pub(crate) fn err(&self, call: &'static str, rc: CuResult) -> GpuError {
        GpuError::new(call, rc, self.error_string(rc))
    }

    fn check(&self, call: &'static str, rc: CuResult) -> Result<(), GpuError> {
        if rc == code::SUCCESS {
            Ok(())
        } else {
            Err(self.err(call, rc))
        }
    }

    /// Whether `cuInit` found no device.
    pub(crate) fn no_device(&self) -> bool {
        self.init == code::NO_DEVICE
    }

    /// `cuDeviceGetCount` (0 when `cuInit` found no device).
    pub(crate) fn device_count(&self) -> Result<i32, GpuError> {
        if self.no_device() {
            return Ok(0);
        }
        let mut n: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        self.check("cuDeviceGetCount", unsafe { (self.device_get_count)(&raw mut n) })?;
        Ok(n)
    }

    /// `cuDeviceGet`: the handle of the device with this ordinal.
    fn device(&self, ordinal: i32) -> Result<CuDevice, GpuError> {
        let mut d: CuDevice = 0;
        // SAFETY: writes one int through a valid pointer.
        self.check("cuDeviceGet", unsafe { (self.device_get)(&raw mut d, ordinal) })?;
        Ok(d)
    }

    /// The ordinal of a device handle (the driver's handles are the
    /// ordinals in practice, but cuda.h does not promise it).
    fn ordinal_of(&self, handle: CuDevice) -> Result<i32, GpuError> {
        for i in 0..self.device_count()? {
            if self.device(i)? == handle {
                return Ok(i);
            }
        }
        Err(GpuError::new(
            "cuDeviceGet",
            0,
            format!("no device ordinal has the handle {handle}"),
        ))
    }

    /// `cuDeviceGetPCIBusId`, as the driver spells it.
    pub(crate) fn pci_bus_id(&self, ordinal: i32) -> Result<String, GpuError> {
        let dev = self.device(ordinal)?;
        let mut buf = [0 as c_char; 64];
        // SAFETY: the driver writes at most `len` bytes, NUL included.
        let rc = unsafe { (self.device_get_pci_bus_id)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        self.check("cuDeviceGetPCIBusId", rc)?;
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated (the last byte is 0), and outlives the borrow.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)`.
    pub(crate) fn dma_buf_supported(&self, ordinal: i32) -> Result<bool, GpuError> {
        let dev = self.device(ordinal)?;
        let mut v: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        let rc = unsafe { (self.device_get_attribute)(&raw mut v, DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) };
        self.check("cuDeviceGetAttribute(DMA_BUF_SUPPORTED)", rc)?;
        Ok(v != 0)
    }

    /// The context calls run in: the thread's current one, else the
    /// primary context of device 0 (retained once).
    fn context(&self) -> Result<usize, GpuError> {
        let mut cur: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer.
        self.check("cuCtxGetCurrent", unsafe { (self.ctx_get_current)(&raw mut cur) })?;
        if !cur.is_null() {
            return Ok(cur as usize);
        }
        let mut primary = self.primary.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ctx) = *primary {
            return Ok(ctx);
        }
        let dev = self.device(0)?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer. The retain is
        // never released (see `primary`).
        let rc = unsafe { (self.device_primary_ctx_retain)(&raw mut ctx, dev) };
        self.check("cuDevicePrimaryCtxRetain", rc)?;
        *primary = Some(ctx as usize);
        Ok(ctx as usize)
    }

    /// Runs `f` with `ctx` current on this thread, restoring what was
    /// current before.
    fn with_context<R>(&self, ctx: usize, f: impl FnOnce() -> Result<R, GpuError>) -> Result<R, GpuError> {
        let mut cur: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer.
        self.check("cuCtxGetCurrent", unsafe { (self.ctx_get_current)(&raw mut cur) })?;
        if cur as usize == ctx {
            return f();
        }
        // SAFETY: `ctx` is a live context: the thread's current one or the
        // primary context, which is never released.
        self.check("cuCtxPushCurrent", unsafe {
            (self.ctx_push_current)(ctx as *mut c_void)
        })?;
        let out = f();
        let mut popped: *mut c_void = std::ptr::null_mut();
        // SAFETY: pops the context pushed above; writes one handle.
        let rc = unsafe { (self.ctx_pop_current)(&raw mut popped) };
        match out {
            Ok(v) => {
                self.check("cuCtxPopCurrent", rc)?;
                Ok(v)
            }
            Err(e) => Err(e),
        }
    }

    /// The ordinal of the device of the context calls run in.
    pub(crate) fn current_device(&self) -> Result<i32, GpuError> {
        let ctx = self.context()?;
        let handle = self.with_context(ctx, || {
            let mut d: CuDevice = 0;
            // SAFETY: writes one int through a valid pointer.
            self.check("cuCtxGetDevice", unsafe { (self.ctx_get_device)(&raw mut d) })?;
            Ok(d)
        })?;
        self.ordinal_of(handle)
    }

    /// `cuPointerGetAttribute` of a 4-byte (or 1-byte `bool`) attribute,
    /// with its raw result. The buffer starts zeroed, so an attribute the
    /// driver writes as one byte still reads correctly (little endian).
    fn attribute_u32(&self, attribute: c_int, addr: usize) -> (CuResult, u32) {
        let mut v: u32 = 0;
        // SAFETY: MEMORY_TYPE (a CUmemorytype), DEVICE_ORDINAL (an int) and
        // IS_MANAGED (a bool) all fit in the 4 bytes of `v`. The address is
        // only looked up, never dereferenced.
        let rc = unsafe { (self.pointer_get_attribute)((&raw mut v).cast(), attribute, addr as CuDeviceptr) };
        (rc, v)
    }

    /// What the driver knows of `addr`: `Ok(None)` for memory it does not
    /// know, else the memory type, whether it is managed, and (for device
    /// memory) the ordinal.
    pub(crate) fn pointer_kind(&self, addr: usize) -> Result<Option<(u32, bool, i32)>, GpuError> {
        if self.no_device() {
            return Ok(None);
        }
        let ctx = self.context()?;
        self.with_context(ctx, || {
            let mem = match self.attribute_u32(attr::MEMORY_TYPE, addr) {
                (code::SUCCESS, v) => v,
                (code::INVALID_VALUE | code::NOT_INITIALIZED, _) => return Ok(None),
                (rc, _) => return Err(self.err("cuPointerGetAttribute(MEMORY_TYPE)", rc)),
            };
            let managed = match self.attribute_u32(attr::IS_MANAGED, addr) {
                (code::SUCCESS, v) => v != 0,
                (rc, _) => return Err(self.err("cuPointerGetAttribute(IS_MANAGED)", rc)),
            };
            let ordinal = if mem == CU_MEMORYTYPE_DEVICE {
                match self.attribute_u32(attr::DEVICE_ORDINAL, addr) {
                    (code::SUCCESS, v) => v as i32,
                    (rc, _) => return Err(self.err("cuPointerGetAttribute(DEVICE_ORDINAL)", rc)),
                }
            } else {
                -1
            };
            Ok(Some((mem, managed, ordinal)))
        })
    }

    /// `cuMemGetAddressRange_v2`: the allocation holding `addr`.
    pub(crate) fn address_range(&self, addr: usize) -> Result<(usize, usize), GpuError> {
        let ctx = self.context()?;
        self.with_context(ctx, || {
            let mut base: CuDeviceptr = 0;
            let mut size: usize = 0;
            // SAFETY: writes a pointer and a size through valid pointers.
            let rc =
                unsafe { (self.mem_get_address_range)(&raw mut base, &raw mut size, addr as CuDeviceptr) };
            self.check("cuMemGetAddressRange", rc)?;
            Ok((base as usize, size))
        })
    }

    /// `cuCtxSynchronize` on the context calls run in.
    pub(crate) fn synchronize(&self) -> Result<(), GpuError> {
        let ctx = self.context()?;
        self.with_context(ctx, || {
            // SAFETY: no arguments.
            self.check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() })
        })
    }

    /// `cuStreamSynchronize(stream)` on the context calls run in (a
    /// stream of another context names its own), or the context where the
    /// driver lacks it.
    pub(crate) fn stream_synchronize(&self, stream: usize) -> Result<(), GpuError> {
        let Some(f) = self.stream_synchronize else {
            return self.synchronize();
        };
        let ctx = self.context()?;
        self.with_context(ctx, || {
            // SAFETY: the handle is the caller's CUstream (0, and the
            // special handles 1 and 2, are the default streams); the driver
            // checks it and returns an error for a bad one.
            self.check("cuStreamSynchronize", unsafe {
                f(std::ptr::with_exposed_provenance_mut(stream))
            })
        })
    }

    /// `cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`
    /// over the pages covering `[addr, addr + len)`.
    pub(crate) fn export_dmabuf(&self, addr: usize, len: usize) -> Result<Dmabuf, GpuError> {
        const CALL: &str = "cuMemGetHandleForAddressRange";
        let get_handle = self.mem_get_handle_for_address_range.ok_or_else(|| {
            GpuError::new(
                CALL,
                0,
                "this driver has no cuMemGetHandleForAddressRange (CUDA 11.7 and later)",
            )
        })?;
        // The driver wants a range aligned to the host page size.
        let page = dl::page_size();
        let start = addr & !(page - 1);
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(page))
            .ok_or_else(|| GpuError::new(CALL, 0, "the range wraps"))?;
        let ctx = self.context()?;
        let fd = self.with_context(ctx, || {
            let mut fd: c_int = -1;
            // SAFETY: for the DMA_BUF_FD handle type the driver writes an int
            // file descriptor through the handle pointer; the range is only
            // looked up; flags 0 asks for the default mapping.
            let rc = unsafe {
                get_handle(
                    (&raw mut fd).cast(),
                    start as CuDeviceptr,
                    end - start,
                    MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            };
            self.check(CALL, rc)?;
            Ok(fd)
        })?;
        if fd < 0 {
            return Err(GpuError::new(CALL, 0, format!("returned success but fd {fd}")));
        }
        Ok(Dmabuf {
            // SAFETY: the driver created this descriptor for the caller and
            // keeps no use of it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            offset: (addr - start) as u64,
        })
    }

    /// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`.
    pub(crate) fn alloc_pinned(self: &Arc<Self>, len: usize) -> Result<CudaPinned, GpuError> {
        if len == 0 {
            return Err(GpuError::new(
                "cuMemHostAlloc",
                0,
                "a pinned buffer of 0 bytes was asked for",
            ));
        }
        let ctx = self.context()?;
        let addr = self.with_context(ctx, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: writes one pointer through a valid pointer.
            let rc = unsafe { (self.mem_host_alloc)(&raw mut p, len, MEMHOSTALLOC_PORTABLE) };
            self.check("cuMemHostAlloc", rc)?;
            Ok(p as usize)
        })?;
        if addr == 0 {
            return Err(GpuError::new(
                "cuMemHostAlloc",
                0,
                "the driver returned a NULL buffer",
            ));
        }
        Ok(CudaPinned {
            api: self.clone(),
            ctx,
            addr,
            len,
        })
    }

    /// `cuMemAlloc_v2`: device memory, for tools and tests.
    pub(crate) fn alloc_device(self: &Arc<Self>, len: usize) -> Result<CudaDeviceBuffer, GpuError> {
        if len == 0 {
            return Err(GpuError::new(
                "cuMemAlloc",
                0,
                "a device buffer of 0 bytes was asked for",
            ));
        }
        let ctx = self.context()?;
        let ptr = self.with_context(ctx, || {
            let mut p: CuDeviceptr = 0;
            // SAFETY: writes one device pointer through a valid pointer.
            self.check("cuMemAlloc", unsafe { (self.mem_alloc)(&raw mut p, len) })?;
            Ok(p)
        })?;
        Ok(CudaDeviceBuffer {
            api: self.clone(),
            ctx,
            ptr,
            len,
        })
    }

    /// Starts a copy on the calling thread's per-thread stream of the
    /// current context and records an event after it.
    pub(crate) fn copy_async(
        self: &Arc<Self>,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<CudaEvent, GpuError> {
        let ctx = self.context()?;
        self.with_context(ctx, || {
            let mut raw: *mut c_void = std::ptr::null_mut();
            // SAFETY: writes one handle through a valid pointer.
            let rc = unsafe { (self.event_create)(&raw mut raw, EVENT_DISABLE_TIMING) };
            self.check("cuEventCreate", rc)?;
            // Owned from here on, so every early return destroys it.
            let event = CudaEvent {
                api: self.clone(),
                ctx,
                event: raw as usize,
            };
            // SAFETY: the GpuRuntime seam only passes ranges inside buffers
            // the core holds registered (a MemRegion, whose builder promised
            // they stay allocated, and the pinned staging buffer the entry
            // owns), and keeps the entry alive until this event reports done
            // or is handed to the abandoned list. With unified addressing a
            // host address is a valid CUdeviceptr; the copy engine moves the
            // bytes, not Rust code.
            let rc = unsafe {
                (self.memcpy_async)(dst as CuDeviceptr, src as CuDeviceptr, len, STREAM_PER_THREAD)
            };
            self.check("cuMemcpyAsync", rc)?;
            // SAFETY: a live event and the per-thread stream handle.
            let rc = unsafe { (self.event_record)(event.event as *mut c_void, STREAM_PER_THREAD) };
            self.check("cuEventRecord", rc)?;
            Ok(event)
        })
    }
}

/// Pinned host memory from `cuMemHostAlloc`, freed with `cuMemFreeHost`.
#[derive(Debug)]
pub struct CudaPinned {
    api: Arc<CudaApi>,
    ctx: usize,
    addr: usize,
    len: usize,
}

impl CudaPinned {
    /// Copies `data` into the buffer at `offset`; `false` when it does not fit.
    /// Do not call while a copy into this buffer may be running.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        if offset > self.len || data.len() > self.len - offset {
            return false;
        }
        // SAFETY: the range lies inside this live host allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr + offset) as *mut u8, data.len()) };
        true
    }

    /// Copies `len` bytes at `offset` out of the buffer; `None` when the
    /// range does not fit. Do not call while a copy into it may be running.
    pub fn read(&self, offset: usize, len: usize) -> Option<Vec<u8>> {
        if offset > self.len || len > self.len - offset {
            return None;
        }
        let mut out = vec![0u8; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping((self.addr + offset) as *const u8, out.as_mut_ptr(), len) };
        Some(out)
    }
}

impl PinnedHostBuffer for CudaPinned {
    fn addr(&self) -> usize {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn region(&self) -> MemRegion {
        // SAFETY: the memory stays allocated until this buffer is dropped,
        // and the PinnedHostBuffer contract makes every MR over it be
        // dropped first. The driver never returns a range that wraps.
        unsafe { MemRegion::new(self.addr, self.len) }
    }
}

impl Drop for CudaPinned {
    fn drop(&mut self) {
        let addr = self.addr;
        // A failure cannot be reported from drop; the memory then stays pinned.
        let _ = self.api.with_context(self.ctx, || {
            // SAFETY: `addr` came from cuMemHostAlloc on this library and is
            // freed exactly once, here.
            self.api.check("cuMemFreeHost", unsafe {
                (self.api.mem_free_host)(addr as *mut c_void)
            })
        });
    }
}

/// Device memory from `cuMemAlloc_v2`, freed with `cuMemFree_v2` on drop.
#[derive(Debug)]
pub struct CudaDeviceBuffer {
    api: Arc<CudaApi>,
    ctx: usize,
    ptr: CuDeviceptr,
    len: usize,
}

impl CudaDeviceBuffer {
    /// The device address.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: 0-byte allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for CudaDeviceBuffer {
    fn drop(&mut self) {
        let ptr = self.ptr;
        let _ = self.api.with_context(self.ctx, || {
            // SAFETY: `ptr` came from cuMemAlloc_v2 and is freed exactly once.
            self.api.check("cuMemFree", unsafe { (self.api.mem_free)(ptr) })
        });
    }
}

/// An event recorded after a copy, destroyed with `cuEventDestroy_v2`.
#[derive(Debug)]
pub struct CudaEvent {
    api: Arc<CudaApi>,
    ctx: usize,
    event: usize,
}

impl CopyEvent for CudaEvent {
    fn is_done(&self) -> Result<bool, GpuError> {
        self.api.with_context(self.ctx, || {
            // SAFETY: a live event; cuEventQuery never blocks.
            match unsafe { (self.api.event_query)(self.event as *mut c_void) } {
                code::SUCCESS => Ok(true),
                code::NOT_READY => Ok(false),
                rc => Err(self.api.err("cuEventQuery", rc)),
            }
        })
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let event = self.event;
        let _ = self.api.with_context(self.ctx, || {
            // SAFETY: destroyed exactly once; the driver allows destroying
            // an event whose work is pending (it is released when done).
            self.api.check("cuEventDestroy", unsafe {
                (self.api.event_destroy)(event as *mut c_void)
            })
        });
    }
}
