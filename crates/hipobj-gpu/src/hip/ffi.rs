//! The HIP runtime (`libamdhip64`) and HSA (`libhsa-runtime64`) as a table
//! of function pointers, with a safe wrapper around each call.
//!
//! The declarations follow `hip_runtime_api.h` and `hsa_ext_amd.h`; nothing
//! is generated. Every handle (stream, event, device pointer) is kept as a
//! `usize`, so the types holding them are `Send` and `Sync` without unsafe
//! impls; HIP's handles may be used from any thread.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use hipobj_platform::{CopyEvent, Dmabuf, GpuError, MemRegion, PinnedHostBuffer};
use libloading::Library;

use crate::dl;

/// `hipError_t` values this crate tells apart.
pub(crate) mod code {
    /// `hipSuccess`.
    pub(crate) const SUCCESS: i32 = 0;
    /// `hipErrorInvalidValue`: among others, a pointer HIP does not know.
    pub(crate) const INVALID_VALUE: i32 = 1;
    /// `hipErrorInvalidDevicePointer`.
    pub(crate) const INVALID_DEVICE_POINTER: i32 = 17;
    /// `hipErrorNoDevice`: what `hipGetDeviceCount` says on a host without a GPU.
    pub(crate) const NO_DEVICE: i32 = 100;
    /// `hipErrorNotReady`: what `hipEventQuery` says while work is pending.
    pub(crate) const NOT_READY: i32 = 600;
}

/// `hipPointer_attribute` values (the same numbers as CUDA's
/// `CUpointer_attribute`, in every HIP release that has the call).
mod attr {
    pub(super) const MEMORY_TYPE: i32 = 2;
    pub(super) const DEVICE_ORDINAL: i32 = 9;
}

/// `hipMemcpyDefault`: the direction follows from the addresses (unified
/// virtual addressing), so one call serves host-to-device and back.
const MEMCPY_DEFAULT: c_int = 4;
/// `hipEventDisableTiming`.
const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `hipHostMallocDefault`.
const HOST_MALLOC_DEFAULT: c_uint = 0;
/// `hipStreamPerThread`, which `hip_runtime_api.h` defines as
/// `((hipStream_t)2)`: the calling thread's implicit stream, so copies from
/// different threads do not serialize on the null stream.
const STREAM_PER_THREAD: *mut c_void = 2 as *mut c_void;
/// `hipMemRangeHandleTypeDmaBufFd` (HIP 7).
const MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
/// `HSA_STATUS_SUCCESS`.
const HSA_SUCCESS: c_int = 0;

type HipError = c_int;

/// What `hipPointerGetAttribute(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE)` reports,
/// decoded for the runtime's major version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryType {
    /// Plain host memory HIP has not registered (HIP 6 and later say so;
    /// HIP 5 fails the call instead).
    Unregistered,
    /// Host memory HIP allocated or registered.
    Host,
    /// Device memory.
    Device,
    /// Managed (unified) memory, arrays, and anything newer.
    Other(u32),
}

impl MemoryType {
    /// Decodes a `hipMemoryType`. The enum was renumbered in HIP 6 to match
    /// CUDA's `cudaMemoryType`:
    ///
    /// | value | HIP 5              | HIP 6 and later          |
    /// |-------|--------------------|--------------------------|
    /// | 0     | hipMemoryTypeHost  | hipMemoryTypeUnregistered|
    /// | 1     | hipMemoryTypeDevice| hipMemoryTypeHost        |
    /// | 2     | hipMemoryTypeArray | hipMemoryTypeDevice      |
    /// | 3     | hipMemoryTypeUnified | hipMemoryTypeManaged   |
    /// | 4     | hipMemoryTypeManaged | (unused)               |
    /// | 10/11 | (unused)           | Array / Unified          |
    pub(crate) fn decode(value: u32, hip_major: i32) -> Self {
        match (hip_major >= 6, value) {
            (false, 0) | (true, 1) => Self::Host,
            (false, 1) | (true, 2) => Self::Device,
            (true, 0) => Self::Unregistered,
            (_, v) => Self::Other(v),
        }
    }
}

/// The optional HSA half: `hsa_amd_portable_export_dmabuf` is in
/// hsa-runtime 6.1 and later (not in Debian bookworm's 5.2.3).
struct Hsa {
    _lib: &'static Library,
    init: unsafe extern "C" fn() -> c_int,
    export_dmabuf: unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> c_int,
    status_string: Option<unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int>,
    /// `hsa_init`'s result, from the first export. HSA counts `hsa_init`
    /// calls; this one is never matched by `hsa_shut_down`, so HSA stays up
    /// for the rest of the process, as the HIP runtime keeps it anyway.
    initialized: OnceLock<c_int>,
}

/// The loaded HIP runtime. The library itself is never unloaded (see
/// `dl::open_first`); buffers and events hold an `Arc` to this table, so
/// its state (such as HSA's) outlives them too.
pub(crate) struct HipApi {
    library: String,
    version: i32,
    get_device_count: unsafe extern "C" fn(*mut c_int) -> HipError,
    get_device: unsafe extern "C" fn(*mut c_int) -> HipError,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> HipError,
    pointer_get_attribute: unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> HipError,
    mem_get_address_range: unsafe extern "C" fn(*mut *mut c_void, *mut usize, *mut c_void) -> HipError,
    host_malloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> HipError,
    host_free: unsafe extern "C" fn(*mut c_void) -> HipError,
    memcpy_async: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> HipError,
    event_create_with_flags: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> HipError,
    event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> HipError,
    event_query: unsafe extern "C" fn(*mut c_void) -> HipError,
    event_destroy: unsafe extern "C" fn(*mut c_void) -> HipError,
    device_synchronize: unsafe extern "C" fn() -> HipError,
    /// Optional: without it, a stream is synchronized by the whole device.
    stream_synchronize: Option<unsafe extern "C" fn(*mut c_void) -> HipError>,
    get_error_string: unsafe extern "C" fn(HipError) -> *const c_char,
    /// HIP 7 and later.
    mem_get_handle_for_address_range:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, c_ulonglong) -> HipError>,
    hsa: Result<Hsa, String>,
    /// Never closed, so the pointers above stay valid.
    _lib: &'static Library,
}

impl fmt::Debug for HipApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipApi")
            .field("library", &self.library)
            .field("version", &self.version)
            .field(
                "hipMemGetHandleForAddressRange",
                &self.mem_get_handle_for_address_range.is_some(),
            )
            .field("hsa", &self.hsa.as_ref().map(|_| "loaded"))
            .finish()
    }
}

impl HipApi {
    /// Opens the first of `names` and resolves every required symbol, then
    /// the optional ones, then HSA from `hsa_names` (optional as a whole).
    pub(crate) fn load(names: &[&str], hsa_names: &[&str]) -> Result<Self, String> {
        let (lib, library) = dl::open_first(names)?;
        // SAFETY: each type below is the C prototype of that symbol in
        // hip_runtime_api.h (HIP 5.0 to 7.x; none of these changed), with
        // `hipError_t` and every enum as `int`, `hipDeviceptr_t`,
        // `hipStream_t` and `hipEvent_t` as `void *`, and `size_t` as
        // `usize`. The library is never unloaded, so the pointers stay valid.
        unsafe {
            let runtime_get_version: unsafe extern "C" fn(*mut c_int) -> HipError =
                dl::sym(lib, "hipRuntimeGetVersion")?;
            let mut version: c_int = 0;
            let rc = runtime_get_version(&raw mut version);
            if rc != code::SUCCESS {
                return Err(format!("{library}: hipRuntimeGetVersion failed with error {rc}"));
            }
            Ok(Self {
                version,
                get_device_count: dl::sym(lib, "hipGetDeviceCount")?,
                get_device: dl::sym(lib, "hipGetDevice")?,
                device_get_pci_bus_id: dl::sym(lib, "hipDeviceGetPCIBusId")?,
                pointer_get_attribute: dl::sym(lib, "hipPointerGetAttribute")?,
                mem_get_address_range: dl::sym(lib, "hipMemGetAddressRange")?,
                host_malloc: dl::sym(lib, "hipHostMalloc")?,
                host_free: dl::sym(lib, "hipHostFree")?,
                memcpy_async: dl::sym(lib, "hipMemcpyAsync")?,
                event_create_with_flags: dl::sym(lib, "hipEventCreateWithFlags")?,
                event_record: dl::sym(lib, "hipEventRecord")?,
                event_query: dl::sym(lib, "hipEventQuery")?,
                event_destroy: dl::sym(lib, "hipEventDestroy")?,
                device_synchronize: dl::sym(lib, "hipDeviceSynchronize")?,
                stream_synchronize: dl::sym(lib, "hipStreamSynchronize").ok(),
                get_error_string: dl::sym(lib, "hipGetErrorString")?,
                mem_get_handle_for_address_range: dl::sym(lib, "hipMemGetHandleForAddressRange").ok(),
                hsa: Hsa::load(hsa_names),
                library,
                _lib: lib,
            })
        }
    }

    /// The library that was opened.
    pub(crate) fn library(&self) -> &str {
        &self.library
    }

    /// `hipRuntimeGetVersion`: major * 10^7 + minor * 10^5 + patch.
    pub(crate) fn version(&self) -> i32 {
        self.version
    }

    /// The major version, which decides how memory types are numbered.
    pub(crate) fn major(&self) -> i32 {
        self.version / 10_000_000
    }

    /// Why HSA's dma-buf export is unavailable, if it is.
    pub(crate) fn hsa_missing(&self) -> Option<&str> {
        self.hsa.as_ref().err().map(String::as_str)
    }

    /// Whether HIP 7's `hipMemGetHandleForAddressRange` is present.
    pub(crate) fn has_mem_get_handle(&self) -> bool {
        self.mem_get_handle_for_address_range.is_some()
    }

    /// `hipGetErrorString`, or a placeholder when HIP has no text for `rc`.
    pub(crate) fn error_string(&self, rc: HipError) -> String {
        // SAFETY: hipGetErrorString takes any int and returns a pointer to a
        // static NUL-terminated string, or NULL in old releases for unknown
        // values, which is checked.
        let p = unsafe { (self.get_error_string)(rc) };
        if p.is_null() {
            return format!("hipError_t {rc}");
        }
        // SAFETY: non-null, and HIP's error strings are static C strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub(crate) fn err(&self, call: &'static str, rc: HipError) -> GpuError {
        GpuError::new(call, rc, self.error_string(rc))
    }

    fn check(&self, call: &'static str, rc: HipError) -> Result<(), GpuError> {
        if rc == code::SUCCESS {
            Ok(())
        } else {
            Err(self.err(call, rc))
        }
    }

    /// `hipGetDeviceCount`, with its raw result.
    pub(crate) fn device_count(&self) -> (HipError, i32) {
        let mut n: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        let rc = unsafe { (self.get_device_count)(&raw mut n) };
        (rc, n)
    }

    /// `hipGetDevice`.
    pub(crate) fn current_device(&self) -> Result<i32, GpuError> {
        let mut d: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        self.check("hipGetDevice", unsafe { (self.get_device)(&raw mut d) })?;
        Ok(d)
    }

    /// `hipDeviceGetPCIBusId`, as HIP spells it.
    pub(crate) fn pci_bus_id(&self, device: i32) -> Result<String, GpuError> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: HIP writes at most `len` bytes, NUL included, into `buf`.
        let rc = unsafe { (self.device_get_pci_bus_id)(buf.as_mut_ptr(), buf.len() as c_int, device) };
        self.check("hipDeviceGetPCIBusId", rc)?;
        // The last byte stays 0 whatever HIP wrote, so this always finds a NUL.
        buf[buf.len() - 1] = 0;
        // SAFETY: `buf` is NUL-terminated (see above) and outlives the borrow.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `hipPointerGetAttribute` of a 4-byte attribute, with its raw result.
    fn attribute_u32(&self, attribute: c_int, addr: usize) -> (HipError, u32) {
        let mut v: u32 = 0;
        // SAFETY: both attributes asked for here (MEMORY_TYPE, an `unsigned
        // int` holding a hipMemoryType, and DEVICE_ORDINAL, an `int`) are
        // written as 4 bytes into `v`. HIP only looks the address up in its
        // tables; it does not dereference it.
        let rc = unsafe { (self.pointer_get_attribute)((&raw mut v).cast(), attribute, addr as *mut c_void) };
        (rc, v)
    }

    /// The memory type at `addr`, or the raw error.
    pub(crate) fn memory_type(&self, addr: usize) -> Result<MemoryType, HipError> {
        match self.attribute_u32(attr::MEMORY_TYPE, addr) {
            (code::SUCCESS, v) => Ok(MemoryType::decode(v, self.major())),
            (rc, _) => Err(rc),
        }
    }

    /// The GPU whose memory `addr` is.
    pub(crate) fn device_ordinal(&self, addr: usize) -> Result<i32, GpuError> {
        let (rc, v) = self.attribute_u32(attr::DEVICE_ORDINAL, addr);
        self.check("hipPointerGetAttribute(DEVICE_ORDINAL)", rc)?;
        Ok(v as i32)
    }

    /// `hipMemGetAddressRange`: the allocation holding `addr`, as (base, size).
    pub(crate) fn address_range(&self, addr: usize) -> Result<(usize, usize), GpuError> {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: writes a pointer and a size through valid pointers; the
        // address is only looked up.
        let rc = unsafe { (self.mem_get_address_range)(&raw mut base, &raw mut size, addr as *mut c_void) };
        self.check("hipMemGetAddressRange", rc)?;
        Ok((base as usize, size))
    }

    /// `hipDeviceSynchronize`.
    pub(crate) fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: no arguments.
        self.check("hipDeviceSynchronize", unsafe { (self.device_synchronize)() })
    }

    /// `hipStreamSynchronize(stream)`, or the whole device where the
    /// runtime lacks it.
    pub(crate) fn stream_synchronize(&self, stream: usize) -> Result<(), GpuError> {
        match self.stream_synchronize {
            // SAFETY: the handle is the caller's hipStream_t (0 is the null
            // stream); HIP checks it and returns an error for a bad one.
            Some(f) => self.check("hipStreamSynchronize", unsafe {
                f(std::ptr::with_exposed_provenance_mut(stream))
            }),
            None => self.synchronize(),
        }
    }

    /// Exports `[addr, addr + len)` of device memory as a dma-buf: through
    /// `hipMemGetHandleForAddressRange` when HIP has it, else through HSA.
    pub(crate) fn export_dmabuf(&self, addr: usize, len: usize) -> Result<Dmabuf, GpuError> {
        if let Some(get_handle) = self.mem_get_handle_for_address_range {
            // The call wants a page-aligned range; export the pages covering
            // the range and say where it starts inside them.
            let page = dl::page_size();
            let start = addr & !(page - 1);
            let end = addr
                .checked_add(len)
                .and_then(|e| e.checked_next_multiple_of(page))
                .ok_or_else(|| GpuError::new("hipMemGetHandleForAddressRange", 0, "the range wraps"))?;
            let mut fd: c_int = -1;
            // SAFETY: HIP writes an int file descriptor through the handle
            // pointer for the DMA_BUF_FD handle type; the range is only
            // looked up, and flags must be 0.
            let rc = unsafe {
                get_handle(
                    (&raw mut fd).cast(),
                    start as *mut c_void,
                    end - start,
                    MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            };
            self.check("hipMemGetHandleForAddressRange", rc)?;
            return Ok(Dmabuf {
                fd: own_fd("hipMemGetHandleForAddressRange", fd)?,
                offset: (addr - start) as u64,
            });
        }
        let hsa = self.hsa.as_ref().map_err(|why| {
            GpuError::new(
                "hsa_amd_portable_export_dmabuf",
                0,
                format!("dma-buf export is unavailable: neither hipMemGetHandleForAddressRange (HIP 7) nor HSA's export is present ({why})"),
            )
        })?;
        hsa.export(addr, len)
    }

    /// `hipHostMalloc`: `len` bytes of pinned host memory.
    pub(crate) fn alloc_pinned(self: &Arc<Self>, len: usize) -> Result<HipPinned, GpuError> {
        if len == 0 {
            return Err(GpuError::new(
                "hipHostMalloc",
                0,
                "a pinned buffer of 0 bytes was asked for",
            ));
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer through a valid pointer.
        let rc = unsafe { (self.host_malloc)(&raw mut p, len, HOST_MALLOC_DEFAULT) };
        self.check("hipHostMalloc", rc)?;
        if p.is_null() {
            return Err(GpuError::new("hipHostMalloc", 0, "HIP returned a NULL buffer"));
        }
        Ok(HipPinned {
            api: self.clone(),
            addr: p as usize,
            len,
        })
    }

    /// Starts a copy on the calling thread's per-thread stream and records
    /// an event after it.
    pub(crate) fn copy_async(
        self: &Arc<Self>,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<HipEvent, GpuError> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer.
        let rc = unsafe { (self.event_create_with_flags)(&raw mut raw, EVENT_DISABLE_TIMING) };
        self.check("hipEventCreateWithFlags", rc)?;
        // Owned from here on, so every early return destroys it.
        let event = HipEvent {
            api: self.clone(),
            event: raw as usize,
        };
        // SAFETY: the GpuRuntime seam only passes ranges inside buffers the
        // core holds registered (a MemRegion, whose builder promised they
        // stay allocated, and the pinned staging buffer the entry owns), and
        // the core keeps the entry alive until this event reports done or is
        // handed to the abandoned list. HIP reads `src` and writes `dst` on
        // the GPU's copy engine, not through Rust references.
        let rc = unsafe {
            (self.memcpy_async)(
                dst as *mut c_void,
                src as *const c_void,
                len,
                MEMCPY_DEFAULT,
                STREAM_PER_THREAD,
            )
        };
        self.check("hipMemcpyAsync", rc)?;
        // SAFETY: a live event and the per-thread stream handle.
        let rc = unsafe { (self.event_record)(event.event as *mut c_void, STREAM_PER_THREAD) };
        self.check("hipEventRecord", rc)?;
        Ok(event)
    }
}

impl Hsa {
    fn load(names: &[&str]) -> Result<Self, String> {
        let (lib, _name) = dl::open_first(names)?;
        // SAFETY: the prototypes of hsa.h and hsa_ext_amd.h (ROCm 6.1 and
        // later): `hsa_status_t` is an int enum, `hsa_status_t hsa_init(void)`,
        // `hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr,
        // size_t size, int *dmabuf, uint64_t *offset)`, and
        // `hsa_status_t hsa_status_string(hsa_status_t, const char **)`.
        unsafe {
            Ok(Self {
                init: dl::sym(lib, "hsa_init")?,
                export_dmabuf: dl::sym(lib, "hsa_amd_portable_export_dmabuf")?,
                status_string: dl::sym(lib, "hsa_status_string").ok(),
                initialized: OnceLock::new(),
                _lib: lib,
            })
        }
    }

    fn err(&self, call: &'static str, status: c_int) -> GpuError {
        let mut text: *const c_char = std::ptr::null();
        let detail = match self.status_string {
            // SAFETY: writes a pointer to a static string through a valid pointer.
            Some(f) if unsafe { f(status, &raw mut text) } == HSA_SUCCESS && !text.is_null() => {
                // SAFETY: HSA's status strings are static C strings.
                unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
            }
            _ => format!("hsa_status_t {status:#x}"),
        };
        GpuError::new(call, status, detail)
    }

    fn export(&self, addr: usize, len: usize) -> Result<Dmabuf, GpuError> {
        // SAFETY: hsa_init takes no arguments; see `initialized`.
        let init = *self.initialized.get_or_init(|| unsafe { (self.init)() });
        if init != HSA_SUCCESS {
            return Err(self.err("hsa_init", init));
        }
        let mut fd: c_int = -1;
        let mut offset: u64 = 0;
        // SAFETY: writes an fd and an offset through valid pointers; the
        // range is only looked up in HSA's allocation tables.
        let status =
            unsafe { (self.export_dmabuf)(addr as *const c_void, len, &raw mut fd, &raw mut offset) };
        if status != HSA_SUCCESS {
            return Err(self.err("hsa_amd_portable_export_dmabuf", status));
        }
        // hsa_amd_portable_close_dmabuf is documented as close(2) on the fd,
        // so the OwnedFd closing it is the same thing.
        Ok(Dmabuf {
            fd: own_fd("hsa_amd_portable_export_dmabuf", fd)?,
            offset,
        })
    }
}

/// Takes ownership of a descriptor a runtime just created for us.
fn own_fd(call: &'static str, fd: c_int) -> Result<OwnedFd, GpuError> {
    if fd < 0 {
        return Err(GpuError::new(call, 0, format!("returned success but fd {fd}")));
    }
    // SAFETY: the runtime created this descriptor for the caller and keeps
    // no use of it; nothing else in this process owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Pinned host memory from `hipHostMalloc`, freed with `hipHostFree` on drop.
#[derive(Debug)]
pub struct HipPinned {
    api: Arc<HipApi>,
    addr: usize,
    len: usize,
}

impl HipPinned {
    /// Copies `data` into the buffer at `offset`; `false` when it does not fit.
    /// Do not call while a copy into this buffer may be running.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        if offset > self.len || data.len() > self.len - offset {
            return false;
        }
        // SAFETY: the range lies inside this live allocation (checked above),
        // and the allocation is plain host memory.
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

impl PinnedHostBuffer for HipPinned {
    fn addr(&self) -> usize {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn region(&self) -> MemRegion {
        // SAFETY: the memory stays allocated until this buffer is dropped,
        // and the PinnedHostBuffer contract makes every MR over the region
        // be dropped before the buffer. hipHostMalloc never returns a range
        // that wraps.
        unsafe { MemRegion::new(self.addr, self.len) }
    }
}

impl Drop for HipPinned {
    fn drop(&mut self) {
        // SAFETY: `addr` came from hipHostMalloc on this library and is
        // freed exactly once, here. A failure
        // cannot be reported from drop; the memory would then stay pinned.
        let _ = unsafe { (self.api.host_free)(self.addr as *mut c_void) };
    }
}

/// An event recorded after a copy, destroyed with `hipEventDestroy` on drop.
#[derive(Debug)]
pub struct HipEvent {
    api: Arc<HipApi>,
    event: usize,
}

impl CopyEvent for HipEvent {
    fn is_done(&self) -> Result<bool, GpuError> {
        // SAFETY: a live event of this library; hipEventQuery never blocks.
        match unsafe { (self.api.event_query)(self.event as *mut c_void) } {
            code::SUCCESS => Ok(true),
            code::NOT_READY => Ok(false),
            rc => Err(self.api.err("hipEventQuery", rc)),
        }
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        // SAFETY: destroyed exactly once; HIP allows destroying an event
        // whose work is still pending (it is released when that finishes).
        let _ = unsafe { (self.api.event_destroy)(self.event as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryType;

    #[test]
    fn memory_types_follow_the_hip_6_renumbering() {
        assert_eq!(MemoryType::decode(0, 5), MemoryType::Host);
        assert_eq!(MemoryType::decode(1, 5), MemoryType::Device);
        assert_eq!(MemoryType::decode(4, 5), MemoryType::Other(4));
        assert_eq!(MemoryType::decode(0, 6), MemoryType::Unregistered);
        assert_eq!(MemoryType::decode(1, 6), MemoryType::Host);
        assert_eq!(MemoryType::decode(2, 7), MemoryType::Device);
        assert_eq!(MemoryType::decode(3, 6), MemoryType::Other(3));
    }
}
