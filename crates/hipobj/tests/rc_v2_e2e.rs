//! hipobj-rc-v2, the client half in the core, against a v2 server double on
//! a second soft RoCE device in the same process (bytes really cross
//! loopback UDP): PUT and GET at several sizes, a ranged GET, every check a
//! hostile server could try to slip past, CANCEL owed on failure, and no
//! late write once a session ended.
#![allow(clippy::unwrap_used, unsafe_code, clippy::too_many_arguments)]

mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use hipobj::{ControlChannel, Direction, ErrorKind, Instance, Library, Options, RcV2Session};
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::rc_v2::{self, PrepareResponse};
use hipobj_softroce::{SoftConfig, SoftVerbs};

use support::rc_v2::{Misbehave, V2Server};
use support::{fill, host_buf, read};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

fn pair() -> (Library, V2Server) {
    let client_verbs = soft("softroce-v2c");
    let server_verbs = soft("softroce-v2s");
    let platform = Platform {
        verbs: client_verbs,
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("softroce-v2c".into()),
    };
    lib.init(
        &cfg,
        || Ok(platform),
        || Options {
            max_transfers: 2,
            ..Options::default()
        },
    )
    .unwrap();
    let server = V2Server::open(server_verbs.as_ref() as &dyn Verbs, "softroce-v2s");
    (lib, server)
}

/// What the application does for one transfer: PREPARE, READY (in another
/// thread for a PUT, whose write goes out while READY waits), and CANCEL
/// when the session failed with the server holding it.
fn drive(
    inst: &Arc<Instance>,
    server: &V2Server,
    dir: Direction,
    addr: usize,
    size: usize,
    at: usize,
    key: &str,
    obj_offset: u64,
) -> (hipobj::Result<u64>, RcV2Session) {
    drive_with(inst, server, dir, addr, size, at, key, obj_offset, |_| {})
}

/// [`drive`], with `setup` run on the session before PREPARE.
fn drive_with(
    inst: &Arc<Instance>,
    server: &V2Server,
    dir: Direction,
    addr: usize,
    size: usize,
    at: usize,
    key: &str,
    obj_offset: u64,
    setup: impl FnOnce(&mut RcV2Session),
) -> (hipobj::Result<u64>, RcV2Session) {
    let mut s = inst.rc_v2_session(dir, addr, size, at).unwrap();
    setup(&mut s);
    let r = run(&mut s, server, key, obj_offset);
    if r.is_err()
        && let Some(c) = s.cancel_request()
    {
        assert_eq!(server.handle(rc_v2::CANCEL_PATH, &c.to_headers()).0, 204);
    }
    (r, s)
}

fn bytes<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a [u8])> {
    h.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
}

/// The application's part, in headers: PREPARE, READY (in another thread,
/// with the PUT's write started while it waits).
fn run(s: &mut RcV2Session, server: &V2Server, key: &str, obj_offset: u64) -> hipobj::Result<u64> {
    let prepare = s.prepare_request("bkt", key, Some(obj_offset))?;
    let (status, h) = server.handle(rc_v2::PREPARE_PATH, &prepare.to_headers());
    s.prepared_from(status, bytes(&h))?;
    let ready = s.ready_request()?.to_headers();
    let (status, h) = std::thread::scope(|sc| {
        let h = sc.spawn(|| server.handle(rc_v2::READY_PATH, &ready));
        s.start().map(|()| h.join().unwrap())
    })?;
    s.finish_from(status, bytes(&h))
}

fn prepared(server: &V2Server, s: &RcV2Session, size: u64) -> PrepareResponse {
    let mut r = s.prepare_request("bkt", "k", None).unwrap();
    r.size = rc_v2::Size::new(size).unwrap();
    server.prepare(&r).unwrap()
}

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + seed) % 251) as u8).collect()
}

#[test]
fn put_and_get_from_one_byte_to_64_mib() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    for size in [1usize, 4097, 1 << 20, 64 << 20] {
        let src = host_buf(size);
        let dst = host_buf(size);
        let data = pattern(size, size);
        fill(src, &data);
        inst.register_host(src).unwrap();
        inst.register_host(dst).unwrap();
        let key = format!("k{size}");
        let (r, s) = drive(&inst, &server, Direction::Put, src.addr(), size, 0, &key, 0);
        assert_eq!(r.unwrap(), size as u64);
        assert!(s.is_done());
        assert!(server.objects.lock().unwrap()[&key] == data, "PUT of {size}");
        let (r, _) = drive(&inst, &server, Direction::Get, dst.addr(), size, 0, &key, 0);
        assert_eq!(r.unwrap(), size as u64);
        assert!(read(dst) == data, "GET of {size}");
        inst.deregister(src.addr()).unwrap();
        inst.deregister(dst.addr()).unwrap();
    }
    assert_eq!(server.open_sessions(), 0);
    assert!(server.cancelled.lock().unwrap().is_empty());
}

#[test]
fn ranged_get_lands_at_the_buffer_offset_asked_for() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    let obj = pattern(100_000, 3);
    server.objects.lock().unwrap().insert("o".into(), obj.clone());
    let dst = host_buf(10_000);
    fill(dst, &[0xee; 10_000]);
    inst.register_host(dst).unwrap();
    let (r, _) = drive(&inst, &server, Direction::Get, dst.addr(), 5000, 100, "o", 12_345);
    assert_eq!(r.unwrap(), 5000);
    let got = read(dst);
    assert!(
        got[..100].iter().all(|&b| b == 0xee),
        "bytes before the range untouched"
    );
    assert!(got[100..5100] == obj[12_345..17_345]);
    assert!(
        got[5100..].iter().all(|&b| b == 0xee),
        "bytes after the range untouched"
    );
    // Past the object's end: 416 from PREPARE, nothing owed.
    let (r, s) = drive(&inst, &server, Direction::Get, dst.addr(), 5000, 0, "o", 99_000);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::S3Error);
    assert!(s.cancel_id().is_none());
}

fn hostile(m: Misbehave) -> (hipobj::Error, Vec<u8>) {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    server
        .objects
        .lock()
        .unwrap()
        .insert("o".into(), pattern(4096, 9));
    *server.misbehave.lock().unwrap() = m;
    let dst = host_buf(4096);
    inst.register_host(dst).unwrap();
    let (r, s) = drive(&inst, &server, Direction::Get, dst.addr(), 4096, 0, "o", 0);
    assert!(!s.is_done());
    // The QP left RTS with the session: a write now reaches nothing.
    (r.unwrap_err(), read(dst))
}

/// Issue 24, finding 6: READY's CRC-64/NVME (sent in both header forms)
/// is checked against the bytes that landed: the right one passes, one bit
/// off fails the GET, and a PUT's is checked against what the client wrote.
#[test]
fn a_get_whose_checksum_differs_from_what_landed_fails() {
    let (e, _) = hostile(Misbehave {
        wrong_checksum: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");

    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    server
        .objects
        .lock()
        .unwrap()
        .insert("o".into(), pattern(4096, 9));
    server.misbehave.lock().unwrap().checksum = true;
    let dst = host_buf(4096);
    inst.register_host(dst).unwrap();
    let (r, s) = drive(&inst, &server, Direction::Get, dst.addr(), 4096, 0, "o", 0);
    assert_eq!(r.unwrap(), 4096);
    assert!(s.is_done());
    assert_eq!(read(dst), pattern(4096, 9));
    let src = host_buf(4096);
    fill(src, &pattern(4096, 3));
    inst.register_host(src).unwrap();
    let (r, _) = drive(&inst, &server, Direction::Put, src.addr(), 4096, 0, "p", 0);
    assert_eq!(r.unwrap(), 4096);
    server.misbehave.lock().unwrap().wrong_checksum = true;
    let (r, _) = drive(&inst, &server, Direction::Put, src.addr(), 4096, 0, "p", 0);
    assert!(r.unwrap_err().to_string().contains("checksum mismatch"));
}

#[test]
fn a_get_whose_immediate_is_not_the_cookie_fails() {
    let (e, _) = hostile(Misbehave {
        wrong_imm: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("cookie"), "{e}");
}

#[test]
fn a_get_shorter_than_asked_fails_even_when_the_server_admits_it() {
    let (e, _) = hostile(Misbehave {
        short_write: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
}

#[test]
fn a_ready_answer_that_echoes_another_cookie_fails() {
    let (e, _) = hostile(Misbehave {
        wrong_echo: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
}

#[test]
fn a_ready_answer_that_counts_more_than_the_size_fails() {
    let (e, _) = hostile(Misbehave {
        overcount: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
}

/// Issue 40: the wait for a GET's proof is the session's own
/// (`set_proof_wait`, the fuzz target sets zero; no `cfg(fuzzing)`): with
/// no wait at all a success with no write behind it fails the same way.
#[test]
fn a_success_with_no_write_behind_it_fails_whatever_the_proof_wait() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    server
        .objects
        .lock()
        .unwrap()
        .insert("o".into(), pattern(4096, 9));
    *server.misbehave.lock().unwrap() = Misbehave {
        no_write: true,
        ..Misbehave::default()
    };
    let dst = host_buf(4096);
    inst.register_host(dst).unwrap();
    let (r, s) = drive_with(&inst, &server, Direction::Get, dst.addr(), 4096, 0, "o", 0, |s| {
        s.set_proof_wait(std::time::Duration::ZERO);
    });
    assert!(!s.is_done());
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("no RDMA WRITE WITH IMMEDIATE"), "{e}");
    assert!(read(dst).iter().all(|&b| b == 0));
    assert_eq!(hipobj::RC_V2_PROOF_WAIT, std::time::Duration::from_secs(2));
}

#[test]
fn a_success_with_no_write_behind_it_fails() {
    let (e, got) = hostile(Misbehave {
        no_write: true,
        ..Misbehave::default()
    });
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("no RDMA WRITE WITH IMMEDIATE"), "{e}");
    assert!(got.iter().all(|&b| b == 0));
}

#[test]
fn a_server_writing_after_the_session_ended_reaches_nothing() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("o".into(), vec![7u8; 4096]);
    let dst = host_buf(4096);
    inst.register_host(dst).unwrap();
    let (r, _) = drive(&inst, &server, Direction::Get, dst.addr(), 4096, 0, "o", 0);
    r.unwrap();
    fill(dst, &[1u8; 4096]);
    // The server's QP is still connected to the session's; the client's is gone.
    assert!(!server.write_late(), "a late write completed");
    assert!(
        read(dst).iter().all(|&b| b == 1),
        "a late write changed the buffer"
    );
}

#[test]
fn a_client_that_gives_up_between_prepare_and_ready_owes_and_sends_a_cancel() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    let src = host_buf(4096);
    inst.register_host(src).unwrap();
    let mut s = inst.rc_v2_session(Direction::Put, src.addr(), 4096, 0).unwrap();
    let a = prepared(&server, &s, 4096);
    s.prepared(200, Some(&a)).unwrap();
    assert_eq!(server.open_sessions(), 1);
    s.abort();
    let id = s.cancel_id().unwrap();
    let c = s.cancel_request().unwrap().to_headers();
    assert_eq!(server.handle(rc_v2::CANCEL_PATH, &c).0, 204);
    assert_eq!(server.open_sessions(), 0);
    assert_eq!(*server.cancelled.lock().unwrap(), vec![id]);
    // A READY after the abort is refused by the session itself.
    assert!(s.start().is_err());
}

#[test]
fn a_prepare_answer_whose_token_names_another_qp_is_refused_and_cancelled() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    let src = host_buf(64);
    inst.register_host(src).unwrap();
    let mut s = inst.rc_v2_session(Direction::Put, src.addr(), 64, 0).unwrap();
    let a = prepared(&server, &s, 64);
    let mut h = a.to_headers();
    for (n, v) in &mut h {
        if *n == rc_v2::QPN_HEADER {
            *v = format!("{:x}", a.token.qpn ^ 1);
        }
    }
    let e = s.prepared_from(200, bytes(&h)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
    assert_eq!(s.cancel_id(), Some(a.session));
    // A staging buffer smaller than the PUT is refused too.
    let mut s = inst.rc_v2_session(Direction::Put, src.addr(), 64, 0).unwrap();
    let a = prepared(&server, &s, 32);
    let e = s.prepared(200, Some(&a)).unwrap_err();
    assert!(e.to_string().contains("fewer than the 64"), "{e}");
    // A server QP number that cannot be an RC QP (1 is the GSI).
    let mut s = inst.rc_v2_session(Direction::Put, src.addr(), 64, 0).unwrap();
    let mut a = prepared(&server, &s, 64);
    a.token.qpn = 1;
    assert!(s.prepared(200, Some(&a)).is_err());
}

/// docs/protocol.md §8 (issue 38, finding 3): the server's soft NIC has a
/// loopback address of its own, not the endpoint's 127.0.0.1, as a
/// multi-homed server's RDMA NIC sits on another network than its S3
/// endpoint. When PREPARE went over an unauthenticated channel (plain
/// HTTP), an answer naming that NIC is refused and the session cancelled;
/// when it went over TLS with a verified certificate, only the server can
/// have written the answer, and a PUT and a GET move the bytes.
#[test]
fn a_prepare_answer_naming_another_address_is_taken_over_verified_tls_only() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    let size = 1 << 20;
    let (src, dst) = (host_buf(size), host_buf(size));
    let data = pattern(size, 9);
    fill(src, &data);
    inst.register_host(src).unwrap();
    inst.register_host(dst).unwrap();
    let over = |channel| {
        move |s: &mut RcV2Session| {
            s.expect_server(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
            s.control_channel(channel);
        }
    };
    let plain = over(ControlChannel::Unauthenticated);
    let (r, _) = drive_with(
        &inst,
        &server,
        Direction::Put,
        src.addr(),
        size,
        0,
        "mh",
        0,
        plain,
    );
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("not an address of the server"), "{e}");
    assert!(
        !server.objects.lock().unwrap().contains_key("mh"),
        "a PUT went through"
    );
    assert_eq!(server.open_sessions(), 0, "the refused session was cancelled");

    let tls = over(ControlChannel::VerifiedTls);
    let (r, s) = drive_with(&inst, &server, Direction::Put, src.addr(), size, 0, "mh", 0, tls);
    assert_eq!(r.unwrap(), size as u64);
    assert!(s.is_done());
    assert!(server.objects.lock().unwrap()["mh"] == data, "the PUT's bytes");
    let tls = over(ControlChannel::VerifiedTls);
    let (r, _) = drive_with(&inst, &server, Direction::Get, dst.addr(), size, 0, "mh", 0, tls);
    assert_eq!(r.unwrap(), size as u64);
    assert!(read(dst) == data, "the GET's bytes");
    assert_eq!(server.open_sessions(), 0);
}

#[test]
fn cookies_and_psns_are_nonzero_and_differ_between_sessions() {
    let (lib, _server) = pair();
    let inst = lib.instance().unwrap();
    let src = host_buf(64);
    inst.register_host(src).unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let s = inst.rc_v2_session(Direction::Get, src.addr(), 64, 0).unwrap();
        assert_ne!(s.cookie(), 0);
        assert!(s.psn() != 0 && s.psn() < 1 << 24);
        assert!(seen.insert(s.cookie()));
    }
}

/// A READY answer to a PUT whose write never started ends the session as
/// `finish` does, whatever its headers: the server's session is over (no
/// CANCEL is owed), a 200 claims bytes the client never wrote (an RDMA
/// error), and any other status is the server's refusal (an S3 error). It
/// is never reported as the server's unusable answer.
#[test]
fn a_ready_answer_before_the_puts_write_fails_the_session_whatever_it_says() {
    let (lib, server) = pair();
    let inst = lib.instance().unwrap();
    let src = host_buf(4096);
    inst.register_host(src).unwrap();
    for (status, want) in [(200, ErrorKind::RdmaError), (408, ErrorKind::S3Error)] {
        let mut s = inst.rc_v2_session(Direction::Put, src.addr(), 4096, 0).unwrap();
        let a = prepared(&server, &s, 4096);
        s.prepared(200, Some(&a)).unwrap();
        let garbage: [(&str, &[u8]); 1] = [("x-amz-rdma-bytes", b"4096")];
        let e = s.finish_from(status, garbage).unwrap_err();
        assert_eq!(e.kind(), want, "{status}: {e}");
        assert_eq!(s.cancel_id(), None, "{status}: a READY answer left a CANCEL owed");
        // The session is over: a second answer is out of order.
        let e = s.finish_from(200, garbage).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue, "{e}");
    }
}
