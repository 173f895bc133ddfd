//! The hipObjRcV2* calls through the C ABI, against the hipobj-rc-v2 server
//! double of the core's tests on a second soft RoCE device (the bytes cross
//! loopback UDP): PUT and GET with the bytes compared, every call out of
//! order, a hostile server's wrong cookie and byte counts, the CANCEL
//! values a failed session offers, End freeing every session whatever its
//! state, and calls after a shutdown.
#![allow(clippy::unwrap_used, unsafe_code)]

#[path = "../../hipobj/tests/support/rc_v2.rs"]
mod v2;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use hipobj_capi::types::{HipObjConfig, HipObjRcV2Session};
use hipobj_capi::*;
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::rc_v2;
use hipobj_softroce::{SoftConfig, SoftVerbs};

use v2::{Misbehave, V2Server};

const OK: c_int = 0;
const INVALID: c_int = 1;
const NOT_INIT: c_int = 2;
const RDMA: c_int = 4;
const S3: c_int = 5;
const TOO_LARGE: c_int = 10;
const BUSY: c_int = 12;
const OP_PUT: c_int = 0;
const OP_GET: c_int = 1;
const CLIENT_NIC: &CStr = c"softroce-capi-v2c";

type Session = *mut HipObjRcV2Session;

struct World {
    client: Arc<SoftVerbs>,
    server: V2Server,
}

/// One client device and one server double for the whole process (the
/// library is process-wide, so the tests also take turns).
fn world() -> (MutexGuard<'static, ()>, &'static World) {
    static TURN: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let w = WORLD.get_or_init(|| {
        let soft = |name: &str| {
            Arc::new(SoftVerbs::new(SoftConfig {
                name: name.into(),
                ..SoftConfig::default()
            }))
        };
        let server_verbs = soft("softroce-capi-v2s");
        World {
            client: soft(CLIENT_NIC.to_str().unwrap()),
            server: V2Server::open(server_verbs.as_ref() as &dyn Verbs, "softroce-capi-v2s"),
        }
    });
    *w.server.misbehave.lock().unwrap() = Misbehave::default();
    w.server.cancelled.lock().unwrap().clear();
    // A test that failed half-way left the library up: start clean.
    assert_eq!(hipObjShutdown().opError, OK);
    testing::set_platform(Some(Platform {
        verbs: w.client.clone(),
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    }));
    (turn, w)
}

fn init() {
    let mut c = HipObjConfig {
        endpoint: std::ptr::null(),
        region: std::ptr::null(),
        accessKey: std::ptr::null(),
        secretKey: std::ptr::null(),
        flags: 0,
        gpuDevice: -1,
        nicHint: CLIENT_NIC.as_ptr(),
    };
    // SAFETY: a valid config with a NUL-terminated hint.
    assert_eq!(unsafe { hipObjInit(&mut c) }.opError, OK);
}

fn begin(buf: &mut [u8], size: usize, at: i64, op: c_int) -> Result<Session, c_int> {
    let mut s: Session = std::ptr::null_mut();
    // SAFETY: a live buffer and a writable out-pointer.
    let e = unsafe { hipObjRcV2Begin(buf.as_ptr().cast::<c_void>(), size, at, op, &mut s) };
    if e.opError == OK {
        assert!(!s.is_null());
        Ok(s)
    } else {
        assert!(s.is_null(), "a failed Begin wrote its out-parameter");
        Err(e.opError)
    }
}

/// Header lines as the server double takes them.
fn parse_lines(text: &str) -> Vec<(String, String)> {
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_owned(), v.to_owned())
        })
        .collect()
}

/// Calls one of the header-writing functions with `room` bytes.
fn text_with(room: usize, f: impl FnOnce(*mut c_char, *mut usize) -> c_int) -> Result<String, c_int> {
    let mut buf = vec![0x55u8; room.max(1)];
    let mut len = room;
    let code = f(buf.as_mut_ptr().cast::<c_char>(), &mut len);
    if code != OK {
        assert_eq!(len, room, "a failed call wrote the length");
        assert!(buf.iter().all(|&b| b == 0x55), "a failed call wrote the buffer");
        return Err(code);
    }
    assert_eq!(buf[len], 0, "no NUL after the text");
    Ok(String::from_utf8(buf[..len].to_vec()).unwrap())
}

fn prepare_headers(s: Session, key: &CStr, obj_off: u64) -> Result<String, c_int> {
    text_with(4096, |h, l| {
        // SAFETY: C strings and a buffer of *l bytes.
        unsafe { hipObjRcV2PrepareHeaders(s, c"bkt".as_ptr(), key.as_ptr(), obj_off, h, l) }.opError
    })
}

fn ready_headers(s: Session) -> Result<String, c_int> {
    // SAFETY: a buffer of *l bytes.
    text_with(4096, |h, l| unsafe { hipObjRcV2ReadyHeaders(s, h, l) }.opError)
}

fn cancel_headers(s: Session) -> Result<String, c_int> {
    // SAFETY: a buffer of *l bytes.
    text_with(4096, |h, l| unsafe { hipObjRcV2CancelHeaders(s, h, l) }.opError)
}

/// An HTTP/1.1 header block, as libcurl's header callback would gather it.
fn block(status: u16, headers: &[(&'static str, String)]) -> Vec<u8> {
    let mut b = format!("HTTP/1.1 {status} Whatever\r\nContent-Length: 0\r\n");
    for (n, v) in headers {
        // Names as a server might case them.
        let name: String = n
            .split('-')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("-");
        b.push_str(&format!("{name}: {v}\r\n"));
    }
    b.push_str("\r\n");
    b.into_bytes()
}

fn handle_prepare(s: Session, status: u16, block: &[u8]) -> c_int {
    // SAFETY: a block of block.len() bytes.
    unsafe { hipObjRcV2HandlePrepare(s, c_int::from(status), block.as_ptr().cast(), block.len()) }.opError
}

fn handle_ready(s: Session, status: u16, block: &[u8]) -> Result<u64, c_int> {
    let mut n = u64::MAX;
    // SAFETY: a block of block.len() bytes and a writable count.
    let e =
        unsafe { hipObjRcV2HandleReady(s, c_int::from(status), block.as_ptr().cast(), block.len(), &mut n) };
    if e.opError == OK {
        Ok(n)
    } else {
        assert_eq!(n, u64::MAX, "a failed call wrote the count");
        Err(e.opError)
    }
}

fn to_server(h: &[(String, String)]) -> Vec<(String, String)> {
    h.to_vec()
}

/// PREPARE through the double.
fn prepare(w: &World, s: Session, key: &CStr, obj_off: u64) -> c_int {
    prepare_id(w, s, key, obj_off).0
}

/// PREPARE through the double, and the session the double made.
fn prepare_id(w: &World, s: Session, key: &CStr, obj_off: u64) -> (c_int, Option<rc_v2::SessionId>) {
    let lines = parse_lines(&prepare_headers(s, key, obj_off).unwrap());
    let (status, h) = w.server.handle(rc_v2::PREPARE_PATH, &to_server(&lines));
    let id = h
        .iter()
        .find(|(n, _)| *n == rc_v2::SESSION_HEADER)
        .and_then(|(_, v)| rc_v2::SessionId::parse(v.as_bytes()));
    (handle_prepare(s, status, &block(status, &h)), id)
}

/// READY through the double, with the PUT's write started while the
/// double waits for it (its READY runs on another thread).
fn ready(w: &World, s: Session) -> Result<u64, c_int> {
    let lines = parse_lines(&ready_headers(s).unwrap());
    let (status, h) = std::thread::scope(|sc| {
        let t = sc.spawn(|| w.server.handle(rc_v2::READY_PATH, &lines));
        // The double's READY posts its receive before it waits; an early
        // write is retried by RC, as with a real server.
        assert_eq!(hipObjRcV2StartWrite(s).opError, OK);
        t.join().unwrap()
    });
    handle_ready(s, status, &block(status, &h))
}

fn end(s: Session) {
    assert_eq!(hipObjRcV2End(s).opError, OK);
}

fn register(buf: &mut [u8]) {
    assert_eq!(
        hipObjBufRegisterHost(buf.as_mut_ptr().cast(), buf.len()).opError,
        OK
    );
}

fn deregister(buf: &mut [u8]) {
    assert_eq!(hipObjBufDeregister(buf.as_mut_ptr().cast()).opError, OK);
}

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 131 + seed) % 253) as u8).collect()
}

#[test]
fn put_then_get_through_the_c_calls_moves_the_bytes() {
    let (_turn, w) = world();
    init();
    for size in [1usize, 5000, 1 << 20] {
        let mut src = pattern(size + 100, size);
        let mut dst = vec![0xeeu8; size + 300];
        register(&mut src);
        register(&mut dst);
        let key = std::ffi::CString::new(format!("c{size}")).unwrap();
        // PUT the bytes from offset 100 of the source buffer.
        let s = begin(&mut src, size, 100, OP_PUT).unwrap();
        assert_eq!(prepare(w, s, &key, 0), OK);
        assert_eq!(ready(w, s), Ok(size as u64));
        assert_eq!(cancel_headers(s).as_deref(), Ok(""), "nothing owed after READY");
        end(s);
        assert!(
            w.server.objects.lock().unwrap()[key.to_str().unwrap()] == src[100..100 + size],
            "PUT of {size}"
        );
        // GET them into offset 200 of the destination buffer, which
        // cannot be deregistered under the live session.
        let s = begin(&mut dst, size, 200, OP_GET).unwrap();
        assert_eq!(prepare(w, s, &key, 0), OK);
        assert_eq!(hipObjBufDeregister(dst.as_mut_ptr().cast()).opError, BUSY);
        assert_eq!(ready(w, s), Ok(size as u64));
        end(s);
        assert!(dst[200..200 + size] == src[100..100 + size], "GET of {size}");
        assert!(dst[..200].iter().chain(&dst[200 + size..]).all(|&b| b == 0xee));
        deregister(&mut src);
        deregister(&mut dst);
    }
    // A ranged GET: the object's bytes from 1000 on.
    let mut dst = vec![0u8; 3000];
    register(&mut dst);
    let s = begin(&mut dst, 3000, 0, OP_GET).unwrap();
    let text = prepare_headers(s, c"c5000", 1000).unwrap();
    assert!(text.contains("x-amz-rdma-offset: 1000\n"), "{text}");
    let lines = parse_lines(&text);
    let (status, h) = w.server.handle(rc_v2::PREPARE_PATH, &lines);
    assert_eq!(handle_prepare(s, status, &block(status, &h)), OK);
    assert_eq!(ready(w, s), Ok(3000));
    end(s);
    let obj = w.server.objects.lock().unwrap()["c5000"].clone();
    assert!(dst == obj[1000..4000]);
    deregister(&mut dst);
    assert_eq!(w.server.open_sessions(), 0);
    assert!(w.server.cancelled.lock().unwrap().is_empty());
    assert_eq!(hipObjShutdown().opError, OK);
}

#[test]
fn calls_out_of_order_or_with_bad_arguments_give_defined_codes() {
    let (_turn, w) = world();
    let mut buf = vec![0u8; 8192];
    // Before init: argument checks first, then NotInitialized.
    assert_eq!(begin(&mut buf, 0, 0, OP_GET), Err(INVALID));
    assert_eq!(begin(&mut buf, 16, -1, OP_GET), Err(INVALID));
    assert_eq!(begin(&mut buf, 16, 0, 7), Err(INVALID));
    assert_eq!(begin(&mut buf, 1 << 31, 0, OP_GET), Err(TOO_LARGE));
    assert_eq!(begin(&mut buf, 16, 0, OP_GET), Err(NOT_INIT));
    init();
    let mut s: Session = std::ptr::null_mut();
    // SAFETY: NULL buffer and NULL out-pointer are refused before use.
    unsafe {
        assert_eq!(
            hipObjRcV2Begin(std::ptr::null(), 16, 0, OP_GET, &mut s).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2Begin(buf.as_ptr().cast(), 16, 0, OP_GET, std::ptr::null_mut()).opError,
            INVALID
        );
    }
    assert_eq!(begin(&mut buf, 16, 0, OP_GET), Err(6), "BufNotRegistered");
    register(&mut buf);
    assert_eq!(begin(&mut buf, 8000, 500, OP_GET), Err(INVALID), "past the end");

    // NULL and forged handles.
    let forged = 0x1000 as Session;
    for h in [std::ptr::null_mut(), forged] {
        assert_eq!(hipObjRcV2StartWrite(h).opError, INVALID);
        assert_eq!(hipObjRcV2End(h).opError, INVALID);
        assert_eq!(ready_headers(h), Err(INVALID));
        assert_eq!(cancel_headers(h), Err(INVALID));
        assert_eq!(prepare_headers(h, c"k", 0), Err(INVALID));
        assert_eq!(handle_prepare(h, 200, b""), INVALID);
        assert_eq!(handle_ready(h, 200, b""), Err(INVALID));
    }

    let s = begin(&mut buf, 4096, 0, OP_PUT).unwrap();
    // NULL output pointers and text arguments.
    // SAFETY: each NULL is refused before anything is read or written.
    unsafe {
        let mut len = 4096usize;
        let mut out = [0 as c_char; 4096];
        let o = out.as_mut_ptr();
        assert_eq!(
            hipObjRcV2PrepareHeaders(s, std::ptr::null(), c"k".as_ptr(), 0, o, &mut len).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2PrepareHeaders(s, c"b".as_ptr(), std::ptr::null(), 0, o, &mut len).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2PrepareHeaders(s, c"b".as_ptr(), c"\xff".as_ptr(), 0, o, &mut len).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2PrepareHeaders(s, c"b".as_ptr(), c"k".as_ptr(), 0, std::ptr::null_mut(), &mut len)
                .opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2PrepareHeaders(s, c"b".as_ptr(), c"k".as_ptr(), 0, o, std::ptr::null_mut()).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2ReadyHeaders(s, o, std::ptr::null_mut()).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2CancelHeaders(s, std::ptr::null_mut(), &mut len).opError,
            INVALID
        );
        assert_eq!(
            hipObjRcV2HandlePrepare(s, 200, std::ptr::null(), 5).opError,
            INVALID
        );
    }
    assert_eq!(prepare_headers(s, c"", 0), Err(INVALID), "an empty key");
    // No header can be smuggled in through the key or the bucket: the key
    // is percent-encoded, and a bucket with a control byte is refused.
    let text = prepare_headers(s, c"k\r\nx-amz-rdma-op: GET", 0).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("x-amz-rdma-op:")).count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("x-amz-rdma-target: /bkt/k%0D%0Ax-amz-rdma-op%3A%20GET\n"),
        "{text}"
    );
    let r = text_with(4096, |h, l| {
        // SAFETY: C strings and a buffer of *l bytes.
        unsafe { hipObjRcV2PrepareHeaders(s, c"b\nx".as_ptr(), c"k".as_ptr(), 0, h, l) }.opError
    });
    assert_eq!(r, Err(INVALID), "a bucket with a newline");
    assert_eq!(
        prepare_headers(s, c"k", 7),
        Err(INVALID),
        "a PUT with an object offset"
    );
    // Too little room: nothing written, and the exact room works.
    let full = prepare_headers(s, c"k", 0).unwrap();
    for room in [0, 1, full.len()] {
        let r = text_with(room, |h, l| {
            // SAFETY: a buffer of *l bytes.
            unsafe { hipObjRcV2PrepareHeaders(s, c"bkt".as_ptr(), c"k".as_ptr(), 0, h, l) }.opError
        });
        assert_eq!(r, Err(INVALID), "room {room}");
    }
    let exact = text_with(full.len() + 1, |h, l| {
        // SAFETY: a buffer of *l bytes.
        unsafe { hipObjRcV2PrepareHeaders(s, c"bkt".as_ptr(), c"k".as_ptr(), 0, h, l) }.opError
    });
    assert_eq!(exact.as_deref(), Ok(full.as_str()));
    // Steps before PREPARE's answer.
    assert_eq!(ready_headers(s), Err(INVALID));
    assert_eq!(hipObjRcV2StartWrite(s).opError, INVALID);
    assert_eq!(handle_ready(s, 200, b""), Err(INVALID));
    assert_eq!(handle_prepare(s, 42, b""), INVALID, "not an HTTP status");
    // A full PUT, each step once more out of order on the way.
    assert_eq!(prepare(w, s, c"misuse", 0), OK);
    assert_eq!(prepare_headers(s, c"misuse", 0), Err(INVALID), "PREPARE again");
    assert_eq!(handle_prepare(s, 200, b""), INVALID, "a second PREPARE answer");
    assert_eq!(ready(w, s), Ok(4096));
    assert_eq!(ready_headers(s), Err(INVALID), "READY after the end");
    assert_eq!(hipObjRcV2StartWrite(s).opError, INVALID);
    assert_eq!(handle_ready(s, 200, b""), Err(INVALID), "a second READY answer");
    end(s);
    assert_eq!(hipObjRcV2End(s).opError, INVALID, "a second End");
    assert_eq!(hipObjRcV2StartWrite(s).opError, INVALID, "a call after End");

    // A GET's StartWrite does nothing and succeeds once connected.
    let s = begin(&mut buf, 100, 0, OP_GET).unwrap();
    assert_eq!(hipObjRcV2StartWrite(s).opError, INVALID, "before PREPARE");
    assert_eq!(prepare(w, s, c"misuse", 0), OK);
    assert_eq!(ready(w, s), Ok(100));
    end(s);
    deregister(&mut buf);
    assert_eq!(w.server.open_sessions(), 0);
    assert_eq!(hipObjShutdown().opError, OK);
}

#[test]
fn a_hostile_servers_ready_answer_fails_the_session() {
    let (_turn, w) = world();
    init();
    let mut src = pattern(8192, 1);
    register(&mut src);
    let s = begin(&mut src, 8192, 0, OP_PUT).unwrap();
    assert_eq!(prepare(w, s, c"h", 0), OK);
    assert_eq!(ready(w, s), Ok(8192));
    end(s);
    let mut dst = vec![0u8; 8192];
    register(&mut dst);
    type Case = (&'static str, fn(&mut Misbehave), c_int);
    let cases: [Case; 5] = [
        ("an immediate other than the cookie", |m| m.wrong_imm = true, RDMA),
        ("another cookie echoed", |m| m.wrong_echo = true, RDMA),
        ("a count above the size", |m| m.overcount = true, RDMA),
        ("a short write", |m| m.short_write = true, S3),
        ("a 200 without a write", |m| m.no_write = true, RDMA),
    ];
    for (what, set, code) in cases {
        *w.server.misbehave.lock().unwrap() = Misbehave::default();
        set(&mut w.server.misbehave.lock().unwrap());
        let s = begin(&mut dst, 8192, 0, OP_GET).unwrap();
        assert_eq!(prepare(w, s, c"h", 0), OK, "{what}");
        assert_eq!(ready(w, s), Err(code), "{what}");
        assert_eq!(cancel_headers(s).as_deref(), Ok(""), "{what}: READY was answered");
        assert_eq!(
            handle_ready(s, 200, b""),
            Err(INVALID),
            "{what}: the session is over"
        );
        end(s);
    }
    *w.server.misbehave.lock().unwrap() = Misbehave::default();

    // Answers forged on the client's side of the wire: the right session,
    // but a wrong cookie or count in the headers.
    for (what, cookie_xor, bytes, code) in [
        ("a wrong cookie echoed", 1u32, 8192u64, RDMA),
        ("a count above the size", 0, 8193, RDMA),
        ("a count below the size", 0, 8191, S3),
    ] {
        let s = begin(&mut dst, 8192, 0, OP_GET).unwrap();
        let prep = prepare_headers(s, c"h", 0).unwrap();
        let cookie = parse_lines(&prep)
            .into_iter()
            .find(|(n, _)| n == rc_v2::COOKIE_HEADER)
            .map(|(_, v)| u32::from_str_radix(&v, 16).unwrap())
            .unwrap();
        let (status, h) = w.server.handle(rc_v2::PREPARE_PATH, &parse_lines(&prep));
        assert_eq!(handle_prepare(s, status, &block(status, &h)), OK);
        let lines = parse_lines(&ready_headers(s).unwrap());
        let (status, _) = w.server.handle(rc_v2::READY_PATH, &lines);
        assert_eq!(status, 200);
        let forged = vec![
            (rc_v2::PROTOCOL_HEADER, rc_v2::PROTOCOL.to_owned()),
            (rc_v2::COOKIE_HEADER, format!("{:08x}", cookie ^ cookie_xor)),
            (rc_v2::BYTES_HEADER, bytes.to_string()),
        ];
        assert_eq!(handle_ready(s, 200, &block(200, &forged)), Err(code), "{what}");
        end(s);
    }
    // A READY answered with an error before the PUT's write started.
    let s = begin(&mut src, 8192, 0, OP_PUT).unwrap();
    assert_eq!(prepare(w, s, c"h2", 0), OK);
    let id = cancel_id(&ready_headers(s).unwrap());
    assert_eq!(handle_ready(s, 500, &block(500, &[])), Err(S3));
    assert_eq!(cancel_headers(s).as_deref(), Ok(""));
    end(s);
    assert_eq!(
        w.server.cancel(id),
        204,
        "the double still held the session: drop it"
    );
    deregister(&mut src);
    deregister(&mut dst);
    assert_eq!(hipObjShutdown().opError, OK);
}

/// The session id among READY's (or CANCEL's) header lines.
fn cancel_id(text: &str) -> rc_v2::SessionId {
    parse_lines(text)
        .into_iter()
        .find(|(n, _)| n == rc_v2::SESSION_HEADER)
        .and_then(|(_, v)| rc_v2::SessionId::parse(v.as_bytes()))
        .unwrap()
}

#[test]
fn a_failed_or_abandoned_session_offers_its_cancel() {
    let (_turn, w) = world();
    init();
    let mut buf = vec![0u8; 4096];
    register(&mut buf);
    w.server.objects.lock().unwrap().insert("c".into(), vec![7; 4096]);

    // A PREPARE answer that names a session but another QP than its token:
    // refused, and the session it names is owed a CANCEL.
    let s = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    let lines = parse_lines(&prepare_headers(s, c"c", 0).unwrap());
    let (status, mut h) = w.server.handle(rc_v2::PREPARE_PATH, &lines);
    assert_eq!(status, 200);
    for (n, v) in &mut h {
        if *n == rc_v2::QPN_HEADER {
            *v = "abcd".into();
        }
    }
    assert_eq!(handle_prepare(s, 200, &block(200, &h)), S3);
    assert_eq!(ready_headers(s), Err(INVALID), "the session is over");
    let cancel = cancel_headers(s).unwrap();
    assert!(
        cancel.starts_with("x-amz-rdma-protocol: hipobj-rc-v2\n"),
        "{cancel}"
    );
    let id = cancel_id(&cancel);
    let (st, _) = w.server.handle(rc_v2::CANCEL_PATH, &parse_lines(&cancel));
    assert_eq!(st, 204);
    assert_eq!(*w.server.cancelled.lock().unwrap(), vec![id]);
    end(s);

    // A repeated x-amz-rdma-* header makes the answer unusable; the
    // session it named is still owed a CANCEL.
    let s = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    let lines = parse_lines(&prepare_headers(s, c"c", 0).unwrap());
    let (_, mut h) = w.server.handle(rc_v2::PREPARE_PATH, &lines);
    let psn = h.iter().find(|(n, _)| *n == rc_v2::PSN_HEADER).unwrap().clone();
    h.push(psn);
    assert_eq!(handle_prepare(s, 200, &block(200, &h)), S3);
    let cancel = cancel_headers(s).unwrap();
    assert_eq!(w.server.handle(rc_v2::CANCEL_PATH, &parse_lines(&cancel)).0, 204);
    end(s);

    // A refusal names no session: nothing owed.
    let s = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    let _ = prepare_headers(s, c"missing", 0).unwrap();
    assert_eq!(handle_prepare(s, 404, &block(404, &[])), S3);
    assert_eq!(cancel_headers(s).as_deref(), Ok(""));
    end(s);

    // The application gives up between PREPARE and READY: asking for the
    // CANCEL ends the session there.
    let s = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    assert_eq!(prepare(w, s, c"c", 0), OK);
    assert_eq!(w.server.open_sessions(), 1);
    let cancel = cancel_headers(s).unwrap();
    assert_eq!(cancel_headers(s).as_deref(), Ok(cancel.as_str()), "asked twice");
    assert_eq!(ready_headers(s), Err(INVALID));
    assert_eq!(hipObjRcV2StartWrite(s).opError, INVALID);
    assert_eq!(w.server.handle(rc_v2::CANCEL_PATH, &parse_lines(&cancel)).0, 204);
    assert_eq!(w.server.open_sessions(), 0);
    end(s);
    assert_eq!(w.server.cancelled.lock().unwrap().len(), 3);
    w.server.cancelled.lock().unwrap().clear();
    deregister(&mut buf);
    assert_eq!(hipObjShutdown().opError, OK);
}

#[test]
fn end_frees_every_session_whatever_its_state_and_a_late_write_reaches_nothing() {
    let (_turn, w) = world();
    init();
    let mut buf = vec![0u8; 4096];
    register(&mut buf);
    w.server.objects.lock().unwrap().insert("e".into(), vec![9; 4096]);
    // Every connection of the pool (16 unless HIPOBJ_MAX_TRANSFERS says
    // otherwise) held by sessions of this thread: the next Begin says Busy
    // rather than wait for itself.
    let mut held = Vec::new();
    let refused = loop {
        match begin(&mut buf, 64, 0, OP_GET) {
            Ok(s) => held.push(s),
            Err(code) => break code,
        }
        assert!(held.len() <= 1024, "the pool never ran out");
    };
    assert_eq!(refused, BUSY);
    let pool = held.len();
    assert!(pool >= 1);
    for s in held {
        end(s);
    }
    // Ended in each state, over and over: no connection is lost.
    for round in 0..6 {
        let s = begin(&mut buf, 4096, 0, OP_GET).unwrap();
        if round == 1 {
            let _ = prepare_headers(s, c"e", 0).unwrap();
        }
        let mut id = None;
        if round >= 2 {
            let (code, named) = prepare_id(w, s, c"e", 0);
            assert_eq!(code, OK);
            id = named;
        }
        if round == 3 {
            let _ = cancel_headers(s).unwrap();
        }
        if round >= 4 {
            let _ = ready_headers(s).unwrap();
        }
        if round == 5 {
            // Done.
            assert_eq!(handle_ready(s, 500, &block(500, &[])), Err(S3));
        }
        end(s);
        // The double's sessions that saw no READY are dropped by CANCEL.
        if let Some(id) = id {
            assert_eq!(w.server.cancel(id), 204);
        }
        w.server.cancelled.lock().unwrap().clear();
    }
    let held: Vec<Session> = (0..pool)
        .map(|_| begin(&mut buf, 64, 0, OP_GET).unwrap())
        .collect();
    for s in held {
        end(s);
    }
    // A finished GET's queue pair has left RTS: the server's late write
    // does not complete, and the buffer is untouched.
    let mut dst = vec![0u8; 4096];
    register(&mut dst);
    let s = begin(&mut dst, 4096, 0, OP_GET).unwrap();
    assert_eq!(prepare(w, s, c"e", 0), OK);
    assert_eq!(ready(w, s), Ok(4096));
    end(s);
    dst.fill(0);
    assert!(!w.server.write_late(), "a late write completed");
    assert!(dst.iter().all(|&b| b == 0), "a late write landed");
    deregister(&mut dst);
    deregister(&mut buf);
    assert_eq!(hipObjShutdown().opError, OK);
}

#[test]
fn after_shutdown_a_session_is_refused_but_can_still_cancel_and_end() {
    let (_turn, w) = world();
    init();
    let mut buf = vec![0u8; 4096];
    register(&mut buf);
    w.server.objects.lock().unwrap().insert("s".into(), vec![1; 4096]);
    let before = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    assert_eq!(prepare(w, before, c"s", 0), OK);
    let unprepared = begin(&mut buf, 4096, 0, OP_GET).unwrap();
    assert_eq!(hipObjShutdown().opError, OK);
    assert_eq!(ready_headers(before), Err(NOT_INIT));
    assert_eq!(hipObjRcV2StartWrite(before).opError, NOT_INIT);
    assert_eq!(handle_ready(before, 200, b""), Err(NOT_INIT));
    assert_eq!(prepare_headers(unprepared, c"s", 0), Err(NOT_INIT));
    // Under a new instance the old sessions stay refused.
    init();
    assert_eq!(ready_headers(before), Err(NOT_INIT));
    assert_eq!(handle_prepare(unprepared, 404, b""), NOT_INIT);
    // The server is still owed its CANCEL, and End frees both.
    let cancel = cancel_headers(before).unwrap();
    assert_eq!(w.server.handle(rc_v2::CANCEL_PATH, &parse_lines(&cancel)).0, 204);
    assert_eq!(cancel_headers(unprepared).as_deref(), Ok(""));
    end(before);
    end(unprepared);
    assert_eq!(hipObjShutdown().opError, OK);
    assert_eq!(w.server.open_sessions(), 0);
    w.server.cancelled.lock().unwrap().clear();
}
