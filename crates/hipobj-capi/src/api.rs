//! The exported functions of hipobj.h.
//!
//! Each one checks its C arguments, turns them into Rust values, calls the
//! core, and maps the result to `hipObjError_t`, inside the panic boundary.
//! Raw pointers are read here and nowhere else.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, PoisonError};

use hipobj::{Config, Control, ControlError, Direction, Error, ErrorKind, Library, Options, SyncDirection};
use hipobj_platform::MemRegion;

use crate::boundary::{guard, guard_or};
use crate::types::{HipObjConfig, HipObjError, HipObjOps, HipObjRcV2Session, OpError};
use crate::{rc_v2, strings};

/// The process's library state.
static LIBRARY: Library = Library::new();

/// Tokens handed out by `hipObjGetRdmaToken` and not yet released.
static TOKENS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// `HIPOBJ_RDMA_OP_PUT`.
pub(crate) const OP_PUT: c_int = 0;
/// `HIPOBJ_RDMA_OP_GET`.
pub(crate) const OP_GET: c_int = 1;
/// `HIPOBJ_SYNC_TO_HOST`.
pub(crate) const SYNC_TO_HOST: c_int = 0;
/// `HIPOBJ_SYNC_TO_DEVICE`.
pub(crate) const SYNC_TO_DEVICE: c_int = 1;

fn err(kind: ErrorKind) -> HipObjError {
    HipObjError::code(kind)
}

fn invalid() -> HipObjError {
    err(ErrorKind::InvalidValue)
}

/// A C offset as a Rust one: negative offsets are invalid.
fn offset(off: libc::off_t) -> Result<usize, HipObjError> {
    usize::try_from(off).map_err(|_| invalid())
}

/// Reads a NUL-terminated string argument that must be UTF-8.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char) -> Result<Option<&'a str>, HipObjError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL, and the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| invalid())
}

/// Runs `f` on the current instance.
fn with_instance(f: impl FnOnce(&hipobj::Instance) -> Result<(), Error>) -> HipObjError {
    match LIBRARY.instance() {
        Ok(inst) => f(&inst).into(),
        Err(e) => (&e).into(),
    }
}

/// `hipObjGetErrorString`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGetErrorString(err: OpError) -> *const c_char {
    guard_or(strings::FALLBACK_ERROR.as_ptr(), || {
        #[cfg(feature = "testing")]
        if crate::testing::panic_requested("hipObjGetErrorString") {
            panic!("injected panic in hipObjGetErrorString");
        }
        strings::error_string(err).as_ptr()
    })
}

/// `hipObjGetVersionString`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGetVersionString() -> *const c_char {
    guard_or(strings::FALLBACK_VERSION.as_ptr(), || {
        #[cfg(feature = "testing")]
        if crate::testing::panic_requested("hipObjGetVersionString") {
            panic!("injected panic in hipObjGetVersionString");
        }
        strings::VERSION.as_ptr()
    })
}

/// `hipObjGetVersion`.
///
/// # Safety
/// Each pointer must be NULL or point to a writable `unsigned`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> HipObjError {
    guard(|| {
        for (p, v) in [
            (major, strings::VERSION_MAJOR),
            (minor, strings::VERSION_MINOR),
            (patch, strings::VERSION_PATCH),
        ] {
            if !p.is_null() {
                // SAFETY: non-NULL, and the caller promises it is writable.
                unsafe { p.write(v) };
            }
        }
        HipObjError::OK
    })
}

/// `hipObjInit`.
///
/// # Safety
/// `config` must be NULL or point to a `hipObjConfig_t` whose `nicHint` is
/// NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjInit(config: *mut HipObjConfig) -> HipObjError {
    guard(|| {
        if config.is_null() {
            return invalid();
        }
        // SAFETY: non-NULL, and the caller promises a valid hipObjConfig_t.
        let c = unsafe { config.read() };
        // SAFETY: the caller promises nicHint is NULL or a C string.
        let hint = match unsafe { c_str(c.nicHint) } {
            Ok(h) => h.map(str::to_owned),
            Err(e) => return e,
        };
        let cfg = Config {
            flags: c.flags,
            gpu_device: c.gpuDevice,
            nic_hint: hint,
        };
        LIBRARY
            .init(&cfg, || Ok(crate::platform()), Options::from_env)
            .into()
    })
}

/// `hipObjShutdown`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjShutdown() -> HipObjError {
    guard(|| {
        LIBRARY.shutdown();
        HipObjError::OK
    })
}

/// The core's size check, made before the library is looked up, so that a
/// bad size fails the same way whether or not it is initialized.
fn size_ok(size: usize, what: &str) -> Result<(), HipObjError> {
    hipobj::check_size(size, what).map_err(|e| (&e).into())
}

fn region(ptr: *const c_void, size: usize) -> Result<MemRegion, HipObjError> {
    hipobj::check_region(ptr as usize, size).map_err(|e| HipObjError::from(&e))?;
    // SAFETY: hipobj.h makes the application keep a registered buffer
    // allocated until hipObjBufDeregister succeeds, which drops every MR over
    // it; the range is not NULL and does not wrap (checked above).
    Ok(unsafe { MemRegion::new(ptr as usize, size) })
}

/// `hipObjBufRegister`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjBufRegister(dev_ptr: *mut c_void, size: usize) -> HipObjError {
    guard(|| match region(dev_ptr, size) {
        Ok(r) => with_instance(|i| i.register_device(r)),
        Err(e) => e,
    })
}

/// `hipObjBufRegisterHost`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjBufRegisterHost(host_ptr: *mut c_void, size: usize) -> HipObjError {
    guard(|| match region(host_ptr, size) {
        Ok(r) => with_instance(|i| i.register_host(r)),
        Err(e) => e,
    })
}

/// `hipObjBufDeregister`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjBufDeregister(dev_ptr: *mut c_void) -> HipObjError {
    guard(|| {
        if dev_ptr.is_null() {
            return invalid();
        }
        with_instance(|i| i.deregister(dev_ptr as usize))
    })
}

/// `hipObjOps_t` and its context, as the core's [`Control`].
struct Callbacks {
    send: crate::types::SendRequestFn,
    recv: crate::types::RecvReplyFn,
    ctx: *mut c_void,
}

impl Control for Callbacks {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let token = CString::new(token).map_err(|_| ControlError("token holds a NUL byte".into()))?;
        // SAFETY: the application supplied this callback and context for this
        // call; the token is a NUL-terminated string that outlives the call.
        let rc = unsafe { (self.send)(self.ctx, token.as_ptr(), token.as_bytes().len()) };
        if rc < 0 {
            return Err(ControlError(format!("sendRequest returned {rc}")));
        }
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let mut len = reply.len();
        // SAFETY: the application supplied this callback and context; `reply`
        // is writable for `len` bytes and `len` is a valid, writable size_t.
        let rc = unsafe { (self.recv)(self.ctx, reply.as_mut_ptr().cast::<c_char>(), &mut len) };
        if rc < 0 {
            return Err(ControlError(format!("recvReply returned {rc}")));
        }
        Ok(len)
    }
}

fn transfer(
    dir: Direction,
    ptr: *const c_void,
    size: usize,
    off: libc::off_t,
    ops: *const HipObjOps,
    ctx: *mut c_void,
) -> HipObjError {
    if ptr.is_null() || ops.is_null() {
        return invalid();
    }
    let off = match offset(off) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if let Err(e) = size_ok(size, "transfer") {
        return e;
    }
    // SAFETY: non-NULL, and the caller promises a valid hipObjOps_t.
    let ops = unsafe { ops.read() };
    let (Some(send), Some(recv)) = (ops.sendRequest, ops.recvReply) else {
        return invalid();
    };
    let mut control = Callbacks { send, recv, ctx };
    with_instance(|i| i.transfer(dir, ptr as usize, size, off, &mut control))
}

/// `hipObjGet`.
///
/// # Safety
/// `ops` must be NULL or point to a `hipObjOps_t` whose callbacks are safe to
/// call with `ctx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGet(
    _handle: *mut c_void,
    dev_ptr: *mut c_void,
    size: usize,
    offset: libc::off_t,
    ops: *mut HipObjOps,
    ctx: *mut c_void,
) -> HipObjError {
    guard(|| transfer(Direction::Get, dev_ptr, size, offset, ops, ctx))
}

/// `hipObjPut`.
///
/// # Safety
/// As for [`hipObjGet`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjPut(
    _handle: *mut c_void,
    dev_ptr: *const c_void,
    size: usize,
    offset: libc::off_t,
    ops: *mut HipObjOps,
    ctx: *mut c_void,
) -> HipObjError {
    guard(|| transfer(Direction::Put, dev_ptr, size, offset, ops, ctx))
}

/// `hipObjBufSync`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjBufSync(
    dev_ptr: *mut c_void,
    size: usize,
    off: libc::off_t,
    direction: c_int,
) -> HipObjError {
    guard(|| {
        if dev_ptr.is_null() {
            return invalid();
        }
        let off = match offset(off) {
            Ok(o) => o,
            Err(e) => return e,
        };
        let dir = match direction {
            SYNC_TO_HOST => SyncDirection::ToHost,
            SYNC_TO_DEVICE => SyncDirection::ToDevice,
            _ => return invalid(),
        };
        if let Err(e) = size_ok(size, "sync") {
            return e;
        }
        with_instance(|i| i.sync(dev_ptr as usize, size, off, dir))
    })
}

fn tokens() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    TOKENS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `hipObjGetRdmaToken`.
///
/// # Safety
/// `out_token` must be NULL or point to a writable `char *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetRdmaToken(
    dev_ptr: *const c_void,
    size: usize,
    op: c_int,
    out_token: *mut *mut c_char,
) -> HipObjError {
    guard(|| {
        if dev_ptr.is_null() || out_token.is_null() || !matches!(op, OP_PUT | OP_GET) {
            return invalid();
        }
        if let Err(e) = size_ok(size, "token") {
            return e;
        }
        let dir = if op == OP_PUT {
            Direction::Put
        } else {
            Direction::Get
        };
        let token = match LIBRARY
            .instance()
            .and_then(|i| i.rdma_token(dev_ptr as usize, size, dir))
        {
            Ok(t) => t,
            Err(e) => return (&e).into(),
        };
        let Ok(owned) = CString::new(token.as_str()) else {
            return err(ErrorKind::InternalError);
        };
        let raw = owned.into_raw();
        tokens().get_or_insert_with(HashSet::new).insert(raw as usize);
        // SAFETY: non-NULL, and the caller promises it is writable.
        unsafe { out_token.write(raw) };
        HipObjError::OK
    })
}

/// `hipObjPutRdmaToken`.
// The pointer is only dereferenced after it is found in the set of live
// tokens this library handed out, so any value a caller passes is safe.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[unsafe(no_mangle)]
pub extern "C" fn hipObjPutRdmaToken(token: *mut c_char) -> HipObjError {
    guard(|| {
        if token.is_null() {
            return invalid();
        }
        let known = tokens().as_mut().is_some_and(|set| set.remove(&(token as usize)));
        if !known {
            // Not ours, or already released: freeing it would corrupt the heap.
            return invalid();
        }
        // SAFETY: the pointer came from CString::into_raw in
        // hipObjGetRdmaToken and was just removed from the live set, so it is
        // released exactly once.
        let owned = unsafe { CString::from_raw(token) };
        // What the token granted (its memory window) ends here.
        if let (Ok(i), Ok(text)) = (LIBRARY.instance(), owned.to_str()) {
            i.release_token(text);
        }
        HipObjError::OK
    })
}

/// `hipObjParseRdmaReply`.
///
/// # Safety
/// `reply` must be NULL or readable for `reply_len` bytes; `http_code` must be
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjParseRdmaReply(
    reply: *const c_char,
    reply_len: usize,
    http_code: *mut c_int,
) -> HipObjError {
    guard(|| {
        if reply.is_null() || http_code.is_null() {
            return invalid();
        }
        // SAFETY: non-NULL, and the caller promises reply_len readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(reply.cast::<u8>(), reply_len) };
        match hipobj_proto::parse_reply(bytes) {
            Ok(r) => {
                // SAFETY: non-NULL, and the caller promises it is writable.
                unsafe { http_code.write(c_int::from(r.http_code())) };
                HipObjError::OK
            }
            Err(_) => invalid(),
        }
    })
}

/// `hipObjTokenClientNic`.
///
/// # Safety
/// `token` must be NULL or a NUL-terminated string; `nic_ip` must be NULL or
/// writable for `nic_ip_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjTokenClientNic(
    token: *const c_char,
    nic_ip: *mut c_char,
    nic_ip_len: usize,
) -> HipObjError {
    guard(|| {
        if token.is_null() || nic_ip.is_null() || nic_ip_len == 0 {
            return invalid();
        }
        // SAFETY: non-NULL, and the caller promises a NUL-terminated string.
        let hex = unsafe { CStr::from_ptr(token) }.to_bytes();
        let Ok(tok) = hipobj_proto::Token::decode(hex) else {
            return invalid();
        };
        let text = tok.client_ipv4().map(|ip| ip.to_string()).unwrap_or_default();
        if text.len() + 1 > nic_ip_len {
            return invalid();
        }
        // SAFETY: nic_ip is writable for nic_ip_len bytes, and text plus its
        // NUL fit (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), nic_ip.cast::<u8>(), text.len());
            nic_ip.add(text.len()).write(0);
        }
        HipObjError::OK
    })
}

/// `hipObjHandleRdmaReply`.
///
/// # Safety
/// `reply` must be NULL or readable for `reply_len` bytes; `http_code` must be
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjHandleRdmaReply(
    reply: *const c_char,
    reply_len: usize,
    http_code: *mut c_int,
) -> HipObjError {
    guard(|| {
        if reply.is_null() || http_code.is_null() {
            return invalid();
        }
        // SAFETY: non-NULL, and the caller promises reply_len readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(reply.cast::<u8>(), reply_len) };
        match LIBRARY.instance().and_then(|i| i.handle_token_reply(bytes)) {
            Ok(code) => {
                // SAFETY: non-NULL, and the caller promises it is writable.
                unsafe { http_code.write(c_int::from(code)) };
                HipObjError::OK
            }
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjSetServerAddress`.
///
/// # Safety
/// `host` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjSetServerAddress(host: *const c_char) -> HipObjError {
    guard(|| {
        // SAFETY: the caller promises NULL or a NUL-terminated string.
        let host = match unsafe { c_str(host) } {
            Ok(h) => h,
            Err(e) => return e,
        };
        let addrs = match host.map(hipobj::resolve_host) {
            Some(a) if a.is_empty() => return invalid(),
            a => a,
        };
        with_instance(|i| {
            i.set_server_addrs(addrs);
            Ok(())
        })
    })
}

// ---------------------------------------------------------------------------
// hipobj-rc-v2 sessions
// ---------------------------------------------------------------------------

/// Writes `text` and its NUL to `out` when `*len` (the room) holds both,
/// and then sets `*len` to the text's length; otherwise writes nothing.
///
/// # Safety
/// `out` must be writable for `*len` bytes and `len` readable and writable;
/// both non-NULL.
unsafe fn write_text(text: &str, out: *mut c_char, len: *mut usize) -> HipObjError {
    // SAFETY: the caller promises `len` is a valid, readable size_t.
    let room = unsafe { len.read() };
    if text.len() >= room {
        return invalid();
    }
    // SAFETY: `out` is writable for `room` bytes, and the text plus its NUL
    // fit (checked above); `len` is writable.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), text.len());
        out.add(text.len()).write(0);
        len.write(text.len());
    }
    HipObjError::OK
}

/// A session handle as the table's key.
fn handle(session: *const HipObjRcV2Session) -> Result<usize, HipObjError> {
    if session.is_null() {
        Err(invalid())
    } else {
        Ok(session as usize)
    }
}

/// A header block argument: NULL is refused, except an empty one.
///
/// # Safety
/// `p` must be NULL or readable for `len` bytes.
unsafe fn block<'a>(p: *const c_char, len: usize) -> Result<&'a [u8], HipObjError> {
    if p.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(invalid()) };
    }
    // SAFETY: non-NULL, and the caller promises `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `hipObjRcV2Begin`.
///
/// # Safety
/// `out_session` must be NULL or point to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2Begin(
    dev_ptr: *const c_void,
    size: usize,
    off: libc::off_t,
    op: c_int,
    out_session: *mut *mut HipObjRcV2Session,
) -> HipObjError {
    guard(|| {
        if dev_ptr.is_null() || out_session.is_null() || !matches!(op, OP_PUT | OP_GET) || size == 0 {
            return invalid();
        }
        let off = match offset(off) {
            Ok(o) => o,
            Err(e) => return e,
        };
        if size as u64 > hipobj::RC_V2_MAX_SIZE {
            return err(ErrorKind::SizeTooLarge);
        }
        let dir = if op == OP_PUT {
            Direction::Put
        } else {
            Direction::Get
        };
        match LIBRARY
            .instance()
            .and_then(|i| rc_v2::begin(i, dir, dev_ptr as usize, size, off))
        {
            Ok(h) => {
                // SAFETY: non-NULL, and the caller promises it is writable.
                unsafe { out_session.write(h as *mut HipObjRcV2Session) };
                HipObjError::OK
            }
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjRcV2PrepareHeaders`.
///
/// # Safety
/// `bucket` and `key` must be NULL or NUL-terminated strings; `headers`
/// NULL or writable for `*headers_len` bytes; `headers_len` NULL or a
/// writable size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2PrepareHeaders(
    session: *mut HipObjRcV2Session,
    bucket: *const c_char,
    key: *const c_char,
    object_offset: u64,
    headers: *mut c_char,
    headers_len: *mut usize,
) -> HipObjError {
    guard(|| {
        if headers.is_null() || headers_len.is_null() {
            return invalid();
        }
        let h = match handle(session) {
            Ok(h) => h,
            Err(e) => return e,
        };
        // SAFETY: the caller promises NULL or NUL-terminated strings.
        let (bucket, key) = match unsafe { (c_str(bucket), c_str(key)) } {
            (Ok(Some(b)), Ok(Some(k))) => (b, k),
            _ => return invalid(),
        };
        match rc_v2::prepare_headers(h, LIBRARY.instance(), bucket, key, object_offset) {
            // SAFETY: checked non-NULL; the caller promises the room.
            Ok(text) => unsafe { write_text(&text, headers, headers_len) },
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjRcV2HandlePrepare`.
///
/// # Safety
/// `headers` must be NULL or readable for `headers_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2HandlePrepare(
    session: *mut HipObjRcV2Session,
    http_status: c_int,
    headers: *const c_char,
    headers_len: usize,
) -> HipObjError {
    guard(|| {
        let h = match handle(session) {
            Ok(h) => h,
            Err(e) => return e,
        };
        // SAFETY: the caller promises NULL or headers_len readable bytes.
        let block = match unsafe { block(headers, headers_len) } {
            Ok(b) => b,
            Err(e) => return e,
        };
        rc_v2::handle_prepare(h, LIBRARY.instance(), http_status, block).into()
    })
}

/// `hipObjRcV2ReadyHeaders`.
///
/// # Safety
/// `headers` must be NULL or writable for `*headers_len` bytes;
/// `headers_len` NULL or a writable size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2ReadyHeaders(
    session: *mut HipObjRcV2Session,
    headers: *mut c_char,
    headers_len: *mut usize,
) -> HipObjError {
    guard(|| {
        if headers.is_null() || headers_len.is_null() {
            return invalid();
        }
        let h = match handle(session) {
            Ok(h) => h,
            Err(e) => return e,
        };
        match rc_v2::ready_headers(h, LIBRARY.instance()) {
            // SAFETY: checked non-NULL; the caller promises the room.
            Ok(text) => unsafe { write_text(&text, headers, headers_len) },
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjRcV2StartWrite`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjRcV2StartWrite(session: *mut HipObjRcV2Session) -> HipObjError {
    guard(|| match handle(session) {
        Ok(h) => rc_v2::start(h, LIBRARY.instance()).into(),
        Err(e) => e,
    })
}

/// `hipObjRcV2HandleReady`.
///
/// # Safety
/// `headers` must be NULL or readable for `headers_len` bytes;
/// `bytes_moved` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2HandleReady(
    session: *mut HipObjRcV2Session,
    http_status: c_int,
    headers: *const c_char,
    headers_len: usize,
    bytes_moved: *mut u64,
) -> HipObjError {
    guard(|| {
        let h = match handle(session) {
            Ok(h) => h,
            Err(e) => return e,
        };
        // SAFETY: the caller promises NULL or headers_len readable bytes.
        let block = match unsafe { block(headers, headers_len) } {
            Ok(b) => b,
            Err(e) => return e,
        };
        match rc_v2::handle_ready(h, LIBRARY.instance(), http_status, block) {
            Ok(n) => {
                if !bytes_moved.is_null() {
                    // SAFETY: non-NULL, and the caller promises it is writable.
                    unsafe { bytes_moved.write(n) };
                }
                HipObjError::OK
            }
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjRcV2CancelHeaders`.
///
/// # Safety
/// `headers` must be NULL or writable for `*headers_len` bytes;
/// `headers_len` NULL or a writable size_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjRcV2CancelHeaders(
    session: *mut HipObjRcV2Session,
    headers: *mut c_char,
    headers_len: *mut usize,
) -> HipObjError {
    guard(|| {
        if headers.is_null() || headers_len.is_null() {
            return invalid();
        }
        let h = match handle(session) {
            Ok(h) => h,
            Err(e) => return e,
        };
        match rc_v2::cancel_headers(h) {
            // SAFETY: checked non-NULL; the caller promises the room.
            Ok(text) => unsafe { write_text(&text, headers, headers_len) },
            Err(e) => (&e).into(),
        }
    })
}

/// `hipObjRcV2End`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjRcV2End(session: *mut HipObjRcV2Session) -> HipObjError {
    guard(|| match handle(session) {
        Ok(h) => rc_v2::end(h).into(),
        Err(e) => e,
    })
}
