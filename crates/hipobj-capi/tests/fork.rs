//! The C ABI in a child that `fork()` made after `hipObjInit` (issue 38,
//! finding 6): every call that needs the library returns
//! `hipObjNotInitialized` (docs/c-api.md, "fork"), so the child can never
//! mint a token under the parent's window keys; `hipObjShutdown` releases
//! nothing of the parent's; and `hipObjInit` in the child gives it an
//! instance of its own. The child reports by its exit status.
#![allow(clippy::unwrap_used, unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};

use hipobj_capi::types::HipObjConfig;
use hipobj_capi::*;
use hipobj_platform::fake::FakePlatform;

const NOT_INITIALIZED: c_int = 2;

fn init(hint: &CStr) -> c_int {
    let mut c = HipObjConfig {
        endpoint: std::ptr::null(),
        region: std::ptr::null(),
        accessKey: std::ptr::null(),
        secretKey: std::ptr::null(),
        flags: 0,
        gpuDevice: -1,
        nicHint: hint.as_ptr(),
    };
    // SAFETY: a valid config with a NUL-terminated hint.
    unsafe { hipObjInit(&mut c) }.opError
}

fn token(ptr: *mut c_void) -> (c_int, *mut c_char) {
    let mut t: *mut c_char = std::ptr::null_mut();
    // SAFETY: a buffer pointer and a writable out-pointer.
    let e = unsafe { hipObjGetRdmaToken(ptr, 4096, 1, &mut t) };
    (e.opError, t)
}

/// The child's checks: 0, or the number of the first that failed.
fn child(p: &FakePlatform, ptr: *mut c_void, spare: *mut c_void) -> i32 {
    let calls = p.faults.calls().len();
    let (e, t) = token(ptr);
    if e != NOT_INITIALIZED || !t.is_null() {
        return 1;
    }
    if hipObjBufRegisterHost(spare, 4096).opError != NOT_INITIALIZED {
        return 2;
    }
    if hipObjBufDeregister(ptr).opError != NOT_INITIALIZED {
        return 3;
    }
    if hipObjShutdown().opError != 0 {
        return 4;
    }
    if p.faults.calls().len() != calls {
        return 5;
    }
    // Its own instance, on a NIC of its own.
    let own = FakePlatform::host_only();
    testing::set_platform(Some(own.platform()));
    if init(c"fake0") != 0 {
        return 6;
    }
    if hipObjBufRegisterHost(spare, 4096).opError != 0 {
        return 7;
    }
    let (e, t) = token(spare);
    if e != 0 || t.is_null() {
        return 8;
    }
    0
}

#[test]
fn a_forked_child_gets_not_initialized_until_it_initializes_its_own() {
    let p = FakePlatform::host_only();
    testing::set_platform(Some(p.platform()));
    assert_eq!(init(c"fake0"), 0);
    let mut buf = vec![0u8; 4096];
    let mut spare = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr().cast::<c_void>();
    let spare_ptr = spare.as_mut_ptr().cast::<c_void>();
    assert_eq!(hipObjBufRegisterHost(ptr, buf.len()).opError, 0);
    let (e, t) = token(ptr);
    assert_eq!(e, 0);
    assert_eq!(hipObjPutRdmaToken(t).opError, 0);

    // SAFETY: the child runs only the checks above (this file has one
    // test, so no other test thread runs) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(|| child(&p, ptr, spare_ptr)).unwrap_or(100);
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just made; `status` is a live i32.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child did not exit: {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "check {} failed in the child",
        libc::WEXITSTATUS(status)
    );

    // The parent goes on with its own instance.
    let (e, t) = token(ptr);
    assert_eq!(e, 0);
    assert_eq!(hipObjPutRdmaToken(t).opError, 0);
    assert_eq!(hipObjBufDeregister(ptr).opError, 0);
    assert_eq!(hipObjShutdown().opError, 0);
    assert!(p.verbs.live().is_zero(), "{:?}", p.verbs.live());
    testing::set_platform(None);
}
