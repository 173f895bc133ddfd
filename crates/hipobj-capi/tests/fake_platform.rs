//! The C ABI on the fake platform: a whole lifecycle through the exported
//! functions, and the panic boundary (every seam made to panic in turn).
#![allow(clippy::unwrap_used, unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, PoisonError};

use hipobj_capi::types::{HipObjConfig, HipObjOps};
use hipobj_capi::*;
use hipobj_platform::fake::{FakePlatform, Fault};

/// The library is process-wide: these tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

const INTERNAL: c_int = 11;
const INVALID: c_int = 1;

fn config(hint: &CStr) -> HipObjConfig {
    HipObjConfig {
        endpoint: std::ptr::null(),
        region: std::ptr::null(),
        accessKey: std::ptr::null(),
        secretKey: std::ptr::null(),
        flags: 0,
        gpuDevice: -1,
        nicHint: hint.as_ptr(),
    }
}

fn init(hint: &CStr) -> c_int {
    let mut c = config(hint);
    // SAFETY: a valid config with a NUL-terminated hint.
    unsafe { hipObjInit(&mut c) }.opError
}

unsafe extern "C" fn send_ok(_ctx: *mut c_void, _token: *const c_char, len: usize) -> c_int {
    if len == 88 { 0 } else { -1 }
}

unsafe extern "C" fn recv_501(_ctx: *mut c_void, reply: *mut c_char, len: *mut usize) -> c_int {
    // SAFETY: the library passes a buffer of *len bytes, at least 3.
    unsafe {
        std::ptr::copy_nonoverlapping(c"501".as_ptr(), reply, 3);
        *len = 3;
    }
    0
}

/// A string the library returns from static storage.
fn static_str(p: *const c_char) -> &'static str {
    // SAFETY: the two string functions return pointers to static,
    // NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap()
}

fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

#[test]
fn lifecycle_through_the_c_abi() {
    let _turn = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let p = FakePlatform::host_only();
    testing::set_platform(Some(p.platform()));
    assert_eq!(init(c"fake0"), 0);
    assert_eq!(init(c"fake0"), 3, "AlreadyInitialized");
    let mut buf = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr().cast::<c_void>();
    assert_eq!(hipObjBufRegisterHost(ptr, buf.len()).opError, 0);
    let mut token: *mut c_char = std::ptr::null_mut();
    // SAFETY: a registered buffer and a writable out-pointer.
    assert_eq!(unsafe { hipObjGetRdmaToken(ptr, 4096, 1, &mut token) }.opError, 0);
    // SAFETY: the library returned a NUL-terminated token.
    let text = unsafe { CStr::from_ptr(token) }.to_str().unwrap().to_owned();
    assert_eq!(text.len(), 88);
    let mut ip = [0 as c_char; 16];
    // SAFETY: a token string and a 16-byte buffer.
    let e = unsafe { hipObjTokenClientNic(token, ip.as_mut_ptr(), ip.len()) };
    assert_eq!(e.opError, 0);
    // SAFETY: the library wrote a NUL-terminated string.
    assert_eq!(unsafe { CStr::from_ptr(ip.as_ptr()) }, c"127.0.0.1");
    assert_eq!(hipObjPutRdmaToken(token).opError, 0);
    let mut ops = HipObjOps {
        sendRequest: Some(send_ok),
        recvReply: Some(recv_501),
    };
    // SAFETY: valid callbacks that ignore the context.
    let e = unsafe { hipObjGet(std::ptr::null_mut(), ptr, 16, 0, &mut ops, std::ptr::null_mut()) };
    assert_eq!(e.opError, 5, "501 is an S3 error");
    assert_eq!(hipObjBufDeregister(ptr).opError, 0);
    assert_eq!(hipObjShutdown().opError, 0);
    assert_eq!(hipObjBufRegisterHost(ptr, buf.len()).opError, 2, "NotInitialized");
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
    testing::set_platform(None);
}

#[test]
fn every_seam_panicking_in_turn_gives_internal_error_and_the_library_recovers() {
    let _turn = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    quiet_panics();
    let p = FakePlatform::host_only();
    testing::set_platform(Some(p.platform()));

    // Seams called during init.
    let init_calls = [
        "device_count",
        "topology_nics",
        "open_device",
        "query_device",
        "query_port",
        "query_gid",
        "alloc_pd",
        "create_cq",
        "create_qp",
        "modify_qp",
        "post_recv",
    ];
    for call in init_calls {
        p.faults.set(call, Fault::Panic);
        assert_eq!(init(c"fake0"), INTERNAL, "a panic in {call} during init");
        p.faults.clear();
        assert!(
            p.verbs.live().is_zero(),
            "a panic in {call} leaked {:?}",
            p.verbs.live()
        );
        assert_eq!(init(c"fake0"), 0, "init after a panic in {call}");
        assert_eq!(hipObjShutdown().opError, 0);
    }

    // Seams called by registration and transfers.
    assert_eq!(init(c"fake0"), 0);
    let mut buf = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr().cast::<c_void>();
    for call in ["pointer_info", "reg_mr"] {
        p.faults.set(call, Fault::Panic);
        assert_eq!(hipObjBufRegisterHost(ptr, buf.len()).opError, INTERNAL, "{call}");
        p.faults.clear();
    }
    assert_eq!(hipObjBufRegisterHost(ptr, buf.len()).opError, 0);
    let mut ops = HipObjOps {
        sendRequest: Some(send_ok),
        recvReply: Some(recv_501),
    };
    // The 501 fails the transfer; its connection is replaced, which calls
    // create_cq and create_qp.
    for call in ["create_cq", "create_qp"] {
        p.faults.set(call, Fault::Panic);
        // SAFETY: valid callbacks that ignore the context.
        let e = unsafe { hipObjGet(std::ptr::null_mut(), ptr, 16, 0, &mut ops, std::ptr::null_mut()) };
        assert_eq!(e.opError, INTERNAL, "{call}");
        p.faults.clear();
    }
    // SAFETY: as above.
    let e = unsafe { hipObjPut(std::ptr::null_mut(), ptr, 16, 0, &mut ops, std::ptr::null_mut()) };
    assert_eq!(e.opError, 5, "the library still runs transfers");
    assert_eq!(hipObjBufDeregister(ptr).opError, 0);
    assert_eq!(hipObjShutdown().opError, 0);

    // The functions that call no seam, and their fallbacks.
    testing::panic_in(Some("hipObjGetErrorString"));
    assert_eq!(static_str(hipObjGetErrorString(0)), "Unknown error");
    testing::panic_in(Some("hipObjGetVersionString"));
    assert_eq!(static_str(hipObjGetVersionString()), "0.0.0");
    testing::panic_in(None);
    assert!(static_str(hipObjGetErrorString(0)).starts_with("Success"));
    assert_eq!(static_str(hipObjGetVersionString()), env!("CARGO_PKG_VERSION"));
    testing::set_platform(None);
    let _ = std::panic::take_hook();
}

#[test]
fn hint_must_be_utf8_and_config_checked() {
    let _turn = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let p = FakePlatform::host_only();
    testing::set_platform(Some(p.platform()));
    assert_eq!(init(c"\xff\xfe"), INVALID);
    let mut c = config(c"fake0");
    c.flags = 2;
    // SAFETY: a valid config.
    assert_eq!(unsafe { hipObjInit(&mut c) }.opError, INVALID);
    assert_eq!(p.faults.count("open_device"), 0);
    testing::set_platform(None);
}
