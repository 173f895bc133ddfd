//! A success proves the bytes moved, on the soft NIC with `hipobj-target` as
//! the server: the malicious-server doubles of issue 11 (a replayed bare
//! success, a success naming another queue pair, a success with a wrong
//! count, a short object), and two servers taking turns without rebinding
//! the client's connections back and forth.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use hipobj::{Control, ControlError, Direction, ErrorKind, Instance, Library, Options};
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::{Reply, parse_reply};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::double::{Cheat, ObjectServer};
use hipobj_target::{Target, TargetConfig};

use support::server::{Action, Server};
use support::{fill, host_buf, read};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

fn server(name: &str) -> Server {
    let verbs = soft(name);
    Server::new(
        Target::open(
            verbs.as_ref() as &dyn Verbs,
            &NoTopology,
            Some(name),
            TargetConfig::default(),
        )
        .unwrap(),
    )
}

fn client(name: &str, max_transfers: u32) -> Library {
    let verbs = soft(name);
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some(name.into()),
    };
    lib.init(
        &cfg,
        || {
            Ok(Platform {
                verbs,
                gpu: Arc::new(NoGpu::new("test")),
                topology: Arc::new(NoTopology),
            })
        },
        || Options {
            max_transfers,
            ..Options::default()
        },
    )
    .unwrap();
    lib
}

fn get(inst: &Instance, server: &Server, key: &str, buf: hipobj_platform::MemRegion) -> hipobj::Result<()> {
    let mut req = server.request(Action::Get(key.into()));
    inst.transfer(Direction::Get, buf.addr(), buf.len(), 0, &mut req)
}

/// A man in the middle (a proxy, a replay, a confused server) that answers
/// with `reply` and never reaches the server.
struct Replay(String);

impl Control for Replay {
    fn send_request(&mut self, _token: &str) -> Result<(), ControlError> {
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        reply[..self.0.len()].copy_from_slice(self.0.as_bytes());
        Ok(self.0.len())
    }
}

/// Finding 1: once the connection is bound, a success that never reached
/// the server fails the GET and the buffer stays untouched, in every form:
/// `200`, `ok`, `204`, `206`, `200:<token>`, and even a replay of a real
/// full success (its count and server QP right, but no WRITE WITH
/// IMMEDIATE came with it).
#[test]
fn a_replayed_success_never_completes_a_get() {
    let lib = client("proof-replay-c", 1);
    let inst = lib.instance().unwrap();
    let srv = server("proof-replay-s");
    srv.objects.lock().unwrap().insert("k".into(), vec![0x5a; 4096]);
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    // A real GET, recording the real success reply.
    let mut req = srv.request(Action::Get("k".into()));
    let mut rec = RecordReplies {
        inner: &mut req,
        replies: Vec::new(),
    };
    inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut rec)
        .unwrap();
    let real = rec.replies.last().unwrap().clone();
    assert!(matches!(
        parse_reply(real.as_bytes()),
        Ok(Reply::Done { bytes: 4096, .. })
    ));
    let bound_echo = match parse_reply(real.as_bytes()).unwrap() {
        Reply::Done { token, .. } => Reply::WithToken { status: 200, token }.to_string(),
        other => panic!("{other:?}"),
    };
    for replayed in ["200", "ok", "204", "206", &bound_echo, &real] {
        // Bind (again) with a real GET, so the replay meets a bound QP.
        get(&inst, &srv, "k", buf).unwrap();
        fill(buf, &[0u8; 4096]);
        let e = inst
            .transfer(
                Direction::Get,
                buf.addr(),
                4096,
                0,
                &mut Replay(replayed.to_owned()),
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RdmaError, "{replayed:?}: {e}");
        assert!(
            read(buf).iter().all(|&b| b == 0),
            "{replayed:?}: the buffer changed"
        );
    }
}

struct RecordReplies<'a, C: Control> {
    inner: &'a mut C,
    replies: Vec<String>,
}

impl<C: Control> Control for RecordReplies<'_, C> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let n = self.inner.recv_reply(reply)?;
        self.replies
            .push(String::from_utf8_lossy(&reply[..n]).into_owned());
        Ok(n)
    }
}

/// Finding 7: 8192 bytes asked of a 100-byte object is not a success: the
/// server moved (and counted) 100, and the call fails with `S3Error`.
#[test]
fn a_short_get_is_an_error_not_a_success() {
    let lib = client("proof-short-c", 1);
    let inst = lib.instance().unwrap();
    let srv = server("proof-short-s");
    srv.objects.lock().unwrap().insert("small".into(), vec![1u8; 100]);
    let buf = host_buf(8192);
    inst.register_host(buf).unwrap();
    let e = get(&inst, &srv, "small", buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
    assert!(e.to_string().contains("100 bytes of the 8192"), "{e}");
    // An empty object: the server's one zero-length WRITE WITH IMMEDIATE
    // proves the (empty) GET reached the QP, and the count of 0 makes it a
    // short GET, not a broken one.
    srv.objects.lock().unwrap().insert("empty".into(), Vec::new());
    let e = get(&inst, &srv, "empty", buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
    assert!(e.to_string().contains("0 bytes of the 8192"), "{e}");
    // Asking for exactly the object works.
    let exact = host_buf(100);
    inst.register_host(exact).unwrap();
    get(&inst, &srv, "small", exact).unwrap();
    assert_eq!(read(exact), vec![1u8; 100]);
}

/// How a malicious server rewrites its full success reply.
type Rewrite = fn(Reply) -> String;

/// A malicious server: does the real transfer, then rewrites its success.
struct Tamper<'a> {
    inner: support::server::Request<'a>,
    rewrite: Rewrite,
}

impl Control for Tamper<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let n = self.inner.recv_reply(reply)?;
        let r = parse_reply(&reply[..n]).unwrap();
        let out = if matches!(r, Reply::Done { .. }) {
            (self.rewrite)(r)
        } else {
            r.to_string()
        };
        reply[..out.len()].copy_from_slice(out.as_bytes());
        Ok(out.len())
    }
}

/// Malicious-server double: a success naming another server QP, counting
/// one byte fewer or one more than moved, or leaving the count out, fails
/// the transfer even though the bytes really moved; PUT and GET alike.
#[test]
fn a_tampered_success_fails_the_transfer() {
    let lib = client("proof-tamper-c", 2);
    let inst = lib.instance().unwrap();
    let srv = server("proof-tamper-s");
    srv.objects.lock().unwrap().insert("k".into(), vec![7u8; 4096]);
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    fn other_qp(r: Reply) -> String {
        let Reply::Done {
            status,
            mut token,
            bytes,
        } = r
        else {
            unreachable!()
        };
        token.qpn ^= 1;
        Reply::Done { status, token, bytes }.to_string()
    }
    fn fewer(r: Reply) -> String {
        let Reply::Done { status, token, bytes } = r else {
            unreachable!()
        };
        Reply::Done {
            status,
            token,
            bytes: bytes - 1,
        }
        .to_string()
    }
    fn more(r: Reply) -> String {
        let Reply::Done { status, token, bytes } = r else {
            unreachable!()
        };
        Reply::Done {
            status,
            token,
            bytes: bytes + 1,
        }
        .to_string()
    }
    fn no_count(r: Reply) -> String {
        let Reply::Done { status, token, .. } = r else {
            unreachable!()
        };
        Reply::WithToken { status, token }.to_string()
    }
    let cases: [(&str, Rewrite, ErrorKind); 4] = [
        ("another server QP", other_qp, ErrorKind::RdmaError),
        ("one byte fewer", fewer, ErrorKind::S3Error),
        ("one byte more", more, ErrorKind::RdmaError),
        ("no count", no_count, ErrorKind::RdmaError),
    ];
    for (what, rewrite, kind) in cases {
        for (dir, op) in [
            (Direction::Get, Action::Get("k".into())),
            (Direction::Put, Action::Put("p".into())),
        ] {
            let mut t = Tamper {
                inner: srv.request(op),
                rewrite,
            };
            let e = inst.transfer(dir, buf.addr(), 4096, 0, &mut t).unwrap_err();
            assert_eq!(e.kind(), kind, "{what}, {dir:?}: {e}");
        }
    }
    get(&inst, &srv, "k", buf).unwrap();
}

/// Counts, per server, how often the client connected to it: a 409 reply
/// followed by the same token again is a binding round; a 409 followed by a
/// different token is the client trading its connection for another.
struct Counting<'a> {
    inner: support::server::Request<'a>,
    last_token: Option<String>,
    last_was_bind: bool,
    binds: usize,
    rounds: usize,
}

impl Control for Counting<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        if self.last_was_bind && self.last_token.as_deref() == Some(token) {
            self.binds += 1;
        }
        self.rounds += 1;
        self.last_token = Some(token.to_owned());
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let n = self.inner.recv_reply(reply)?;
        self.last_was_bind = matches!(parse_reply(&reply[..n]), Ok(Reply::Bind { .. }));
        Ok(n)
    }
}

/// Finding 8: GETs alternating between servers A and B bind each server
/// once. The connection bound to A is never rebound to B and back: a 409
/// from the other server trades the leased connection for the one bound to
/// that server (or an unbound one) without spending the binding round, and
/// after the first few GETs every GET takes a single request.
#[test]
fn alternating_servers_bind_each_once() {
    let lib = client("proof-alt-c", 4);
    let inst = lib.instance().unwrap();
    let a = server("proof-alt-a");
    let b = server("proof-alt-b");
    a.objects.lock().unwrap().insert("k".into(), vec![0xaa; 4096]);
    b.objects.lock().unwrap().insert("k".into(), vec![0xbb; 4096]);
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let (mut binds_a, mut binds_b) = (0, 0);
    let mut rounds = Vec::new();
    for i in 0..12 {
        let (srv, byte, binds) = if i % 2 == 0 {
            (&a, 0xaa, &mut binds_a)
        } else {
            (&b, 0xbb, &mut binds_b)
        };
        fill(buf, &[0u8; 4096]);
        let mut c = Counting {
            inner: srv.request(Action::Get("k".into())),
            last_token: None,
            last_was_bind: false,
            binds: 0,
            rounds: 0,
        };
        inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut c)
            .unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert!(read(buf).iter().all(|&x| x == byte), "GET {i}: wrong bytes");
        *binds += c.binds;
        rounds.push(c.rounds);
    }
    assert_eq!((binds_a, binds_b), (1, 1), "rounds per GET: {rounds:?}");
    assert!(
        rounds[4..].iter().all(|&r| r == 1),
        "once both are bound every GET takes one request: {rounds:?}"
    );
}

/// A malicious server of issue 24 on its own soft NIC: every GET moves its
/// bytes as `cheat` says and claims the whole selection. Chunks of 16 KiB,
/// so a 64 KiB GET takes four WRITEs.
fn hostile(name: &str, cheat: Cheat) -> Server {
    hostile_chunked(name, cheat, 16 << 10)
}

/// [`hostile`] with WRITEs of `chunk` bytes.
fn hostile_chunked(name: &str, cheat: Cheat, chunk: usize) -> Server {
    let verbs = soft(name);
    Server::wrap(ObjectServer::hostile(
        Target::open(
            verbs.as_ref() as &dyn Verbs,
            &NoTopology,
            Some(name),
            TargetConfig {
                chunk,
                ..TargetConfig::default()
            },
        )
        .unwrap(),
        cheat,
    ))
}

/// Runs a GET of 64 KiB of `0x5a` from `srv` into a buffer holding `0x11`
/// (with a guard byte after the range), and returns the outcome and the
/// buffer afterwards.
fn get_64k(inst: &Instance, srv: &Server) -> (hipobj::Result<()>, Vec<u8>) {
    const LEN: usize = 64 << 10;
    srv.objects.lock().unwrap().insert("k".into(), vec![0x5a; LEN]);
    let buf = host_buf(LEN + 1);
    fill(buf, &vec![0x11; LEN + 1]);
    inst.register_host(buf).unwrap();
    let mut req = srv.request(Action::Get("k".into()));
    let r = inst.transfer(Direction::Get, buf.addr(), LEN, 0, &mut req);
    let after = read(buf);
    inst.deregister(buf.addr()).unwrap();
    (r, after)
}

/// A GET refused for what its server did: by the proof (the first WRITE
/// WITH IMMEDIATE is a piece), or, when the server's later WRITEs found no
/// receive posted (the client keeps two) and it gave up and asked to bind
/// again, by the one binding round a transfer gets.
fn assert_refused(e: &hipobj::Error) {
    let by_proof = e.kind() == ErrorKind::RdmaError && e.to_string().contains("a GET is one WRITE");
    let by_rebind = e.kind() == ErrorKind::S3Error && e.to_string().contains("bind the connection twice");
    assert!(by_proof || by_rebind, "{:?}: {e}", e.kind());
}

/// Issue 24 finding 1: a server that proves with the token's key alone (one
/// zero-length WRITE WITH IMMEDIATE carrying it, then
/// `200:<server token>:<65536>`) moved no byte, and the GET fails.
#[test]
fn a_server_proving_with_the_key_alone_fails_the_get() {
    let lib = client("proof-keyalone-c", 1);
    let inst = lib.instance().unwrap();
    let srv = hostile("proof-keyalone-s", Cheat::KeyAlone);
    let (r, after) = get_64k(&inst, &srv);
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(after.iter().all(|&b| b == 0x11), "bytes moved");
}

/// Issue 24 finding 1: a server that writes 4 KiB of the 64 KiB asked for
/// and claims the whole range leaves 61440 stale bytes: the GET fails.
#[test]
fn a_server_writing_part_of_the_range_fails_the_get() {
    let lib = client("proof-part-c", 1);
    let inst = lib.instance().unwrap();
    let srv = hostile("proof-part-s", Cheat::Part(4096));
    let (r, after) = get_64k(&inst, &srv);
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert!(e.to_string().contains("placed 4096 of the 65536 bytes"), "{e}");
    assert!(after[..4096].iter().all(|&b| b == 0x5a));
    assert!(after[4096..].iter().all(|&b| b == 0x11));
}

/// Issue 24 finding 1: a server that writes every chunk but the second
/// (each WRITE as an honest server sends it) and claims the whole range:
/// the client sees a gap and fails the GET.
#[test]
fn a_server_skipping_a_chunk_fails_the_get() {
    let lib = client("proof-skip-c", 1);
    let inst = lib.instance().unwrap();
    let srv = hostile("proof-skip-s", Cheat::SkipChunk(1));
    let (r, after) = get_64k(&inst, &srv);
    let e = r.unwrap_err();
    assert_refused(&e);
    assert!(
        after[16 << 10..32 << 10].iter().all(|&b| b == 0x11),
        "the skipped chunk"
    );
}

/// Issue 24 finding 5: on a bound connection, a server WRITE one byte past
/// the range is refused by the client's NIC (nothing lands, the client QP
/// goes to ERR); the server then binds afresh (409) and moves the whole
/// range with a valid proof and success reply. The refused access fails
/// the GET all the same.
#[test]
fn a_refused_access_fails_the_get_even_when_a_proof_follows() {
    let lib = client("proof-past-c", 1);
    let inst = lib.instance().unwrap();
    // One WRITE per GET, so only the refused access tells this GET apart
    // from an honest one.
    let srv = hostile_chunked("proof-past-s", Cheat::past_the_end(), 1 << 20);
    let (r, _) = get_64k(&inst, &srv);
    r.expect("an honest GET binds the connection");
    srv.cheat().unwrap().arm();
    let (r, after) = get_64k(&inst, &srv);
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RdmaError, "{e}");
    assert_eq!(after[64 << 10], 0x11, "the byte past the range changed");
}

/// Issue 38 finding 5: a server that writes the first 4 KiB sixteen times,
/// each WRITE WITH IMMEDIATE naming another place of the 64 KiB range, so
/// that the byte counts add up to the range while 61440 bytes keep what the
/// buffer held before (another object, another tenant's data): the GET
/// fails, and the stale bytes are never handed over as this object.
#[test]
fn a_server_writing_one_place_while_naming_every_place_fails_the_get() {
    let lib = client("proof-repeat-c", 1);
    let inst = lib.instance().unwrap();
    let srv = hostile("proof-repeat-s", Cheat::RepeatFirst);
    let (r, after) = get_64k(&inst, &srv);
    let e = r.expect_err("a GET whose bytes past 4 KiB never landed succeeded");
    assert_refused(&e);
    assert!(
        after[4096..64 << 10].iter().all(|&b| b == 0x11),
        "only the first 4 KiB were written"
    );
}

/// Issue 24 finding 1, the application-driven path: `handle_token_reply`
/// refuses a success whose GET moved no byte (the key-alone server), and one
/// that moved part of the range.
#[test]
fn an_application_driven_get_succeeds_only_when_its_bytes_landed() {
    for (tag, cheat) in [("keyalone", Cheat::KeyAlone), ("part", Cheat::Part(4096))] {
        let lib = client(&format!("proof-app-{tag}-c"), 1);
        let inst = lib.instance().unwrap();
        let srv = hostile(&format!("proof-app-{tag}-s"), cheat);
        srv.objects.lock().unwrap().insert("k".into(), vec![0x5a; 8192]);
        let dst = host_buf(8192);
        inst.register_host(dst).unwrap();
        let token = inst.rdma_token(dst.addr(), 8192, Direction::Get).unwrap();
        let mut request = srv.request(Action::Get("k".into()));
        let mut outcome = Ok(409);
        for _ in 0..2 {
            request.send_request(token.as_str()).unwrap();
            let mut reply = [0u8; 512];
            let n = request.recv_reply(&mut reply).unwrap();
            outcome = inst.handle_token_reply(&reply[..n]);
            if !matches!(outcome, Ok(409)) {
                break;
            }
        }
        let e = outcome.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RdmaError, "{tag}: {e}");
    }
}

/// The honest side of the rule: GETs of one byte to many chunks (a chunk
/// of no round size), each staged whole at the server and proven by its one
/// WRITE WITH IMMEDIATE, every byte right.
#[test]
fn a_multi_chunk_get_is_proven_by_what_landed() {
    let lib = client("proof-multi-c", 1);
    let inst = lib.instance().unwrap();
    let verbs = soft("proof-multi-s");
    let srv = Server::new(
        Target::open(
            verbs.as_ref() as &dyn Verbs,
            &NoTopology,
            Some("proof-multi-s"),
            TargetConfig {
                chunk: 10_000,
                ..TargetConfig::default()
            },
        )
        .unwrap(),
    );
    for len in [1usize, 4096, 8192 + 17, 100_000, 1 << 20, (5 << 20) + 3] {
        let pattern: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        srv.objects.lock().unwrap().insert("k".into(), pattern.clone());
        let buf = host_buf(len);
        inst.register_host(buf).unwrap();
        get(&inst, &srv, "k", buf).unwrap_or_else(|e| panic!("{len}: {e}"));
        assert!(read(buf) == pattern, "{len}: wrong bytes");
        inst.deregister(buf.addr()).unwrap();
    }
}
