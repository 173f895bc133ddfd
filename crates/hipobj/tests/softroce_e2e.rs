//! The library (client) and `hipobj-target` (server) on two soft RoCE devices
//! in one process, bytes really crossing loopback UDP: PUT and GET from 1 B
//! to 64 MiB, an application-driven GET, loss, and the proof that a server
//! writing late cannot reach a buffer once the call has returned.
#![allow(clippy::unwrap_used, unsafe_code)]

mod support;

use std::sync::Arc;

use hipobj::{Control, ControlError, Direction, ErrorKind, Instance, Library, Options};
use hipobj_platform::{MemRegion, NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::Token;
use hipobj_softroce::{FaultConfig, SoftConfig, SoftVerbs};
use hipobj_target::double::Action;
use hipobj_target::{Target, TargetConfig};

use support::server::{Server, app_driven_get, put_get_roundtrip};
use support::{host_buf, read};

fn soft(name: &str, loss: f64) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        faults: FaultConfig {
            loss,
            seed: 7,
            ..FaultConfig::NONE
        },
        ..SoftConfig::default()
    }))
}

/// A client library on one soft device and a server on another.
fn pair(loss: f64) -> (Library, Server) {
    let (lib, server, _) = pair_with_client_nic(loss);
    (lib, server)
}

/// [`pair`], and the client's soft NIC.
fn pair_with_client_nic(loss: f64) -> (Library, Server, Arc<SoftVerbs>) {
    let client_verbs = soft("softroce-client", loss);
    let client_nic = client_verbs.clone();
    let server_verbs = soft("softroce-server", loss);
    let platform = Platform {
        verbs: client_verbs,
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("softroce-client".into()),
    };
    lib.init(
        &cfg,
        || Ok(platform),
        || Options {
            max_transfers: 4,
            ..Options::default()
        },
    )
    .unwrap();
    let peer = Target::open(
        server_verbs.as_ref() as &dyn Verbs,
        &NoTopology,
        Some("softroce-server"),
        TargetConfig {
            completion_timeout: std::time::Duration::from_secs(20),
            ..TargetConfig::default()
        },
    )
    .unwrap();
    (lib, Server::new(peer), client_nic)
}

#[test]
fn put_and_get_from_one_byte_to_64_mib() {
    let (lib, server) = pair(0.0);
    let inst = lib.instance().unwrap();
    put_get_roundtrip(&inst, &server, &[1, 4096, 1 << 20, 64 << 20]);
    assert_eq!(server.target.stats().transfers, 8);
    let want = server.objects.lock().unwrap()["obj-4096"].clone();
    assert_eq!(app_driven_get(&inst, &server, "obj-4096", 4096), want);
}

#[test]
fn put_and_get_through_one_percent_loss() {
    let (lib, server) = pair(0.01);
    put_get_roundtrip(&lib.instance().unwrap(), &server, &[1, 3 << 20]);
}

/// A server that binds, then fails the request without moving data, the
/// way an S3 error after a binding looks to the client.
struct FailAfterBind<'a> {
    server: &'a Server,
    token: Option<Token>,
    reply: Option<String>,
}

impl Control for FailAfterBind<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let first = self.token.is_none();
        self.token = Some(Token::decode(token.as_bytes()).unwrap());
        self.reply = if first {
            // A new client QP: the double binds it (409) and moves nothing.
            Some(self.server.serve(&Action::Put("never".into()), token).unwrap())
        } else {
            None
        };
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self
            .reply
            .take()
            .ok_or_else(|| ControlError("500 InternalError, no reply header".into()))?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
}

/// The server writes `token.len` bytes of 0xee through the token again, as
/// a GET would; whether it reported success.
fn late_write(server: &Server, token: &Token) -> bool {
    server
        .objects
        .lock()
        .unwrap()
        .insert("late".into(), vec![0xee; token.len as usize]);
    let r = server.serve_token(&Action::Get("late".into()), token);
    r.is_ok_and(|reply| hipobj_proto::parse_reply(reply.as_bytes()).is_ok_and(|p| p.is_success()))
}

#[test]
fn a_server_writing_after_a_failed_transfer_cannot_reach_the_buffer() {
    let (lib, server) = pair(0.0);
    let inst: Arc<Instance> = lib.instance().unwrap();
    let buf = host_buf(64 << 10);
    inst.register_host(buf).unwrap();
    let mut s3 = FailAfterBind {
        server: &server,
        token: None,
        reply: None,
    };
    let e = inst
        .transfer(Direction::Get, buf.addr(), 64 << 10, 0, &mut s3)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::S3Error, "{e}");
    // The server still holds its binding and now writes: the client QP it
    // was bound to is gone, so the write can only fail.
    let token = s3.token.unwrap();
    assert!(!late_write(&server, &token), "a late write succeeded");
    assert!(
        read(buf).iter().all(|&b| b == 0),
        "late bytes landed in the buffer"
    );
}

#[test]
fn a_server_writing_after_deregistration_or_shutdown_cannot_reach_the_buffer() {
    let (lib, server) = pair(0.0);
    let inst: Arc<Instance> = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("k".into(), vec![1u8; 4096]);
    // A GET that works, then the buffer is deregistered.
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let mut req = server.request(Action::Get("k".into()));
    let mut tokens = Recorder {
        inner: &mut req,
        last: None,
    };
    inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut tokens)
        .unwrap();
    let token = tokens.last.unwrap();
    assert_eq!(read(buf), vec![1u8; 4096]);
    inst.deregister(buf.addr()).unwrap();
    // The client QP is still bound, but the key is gone: remote access error.
    assert!(!late_write(&server, &token));
    assert_eq!(read(buf), vec![1u8; 4096], "the deregistered buffer changed");

    // Register again, transfer, and shut down: the QPs go with the instance.
    let buf2 = host_buf(4096);
    inst.register_host(buf2).unwrap();
    let mut req = server.request(Action::Get("k".into()));
    let mut tokens = Recorder {
        inner: &mut req,
        last: None,
    };
    inst.transfer(Direction::Get, buf2.addr(), 4096, 0, &mut tokens)
        .unwrap();
    let token2 = tokens.last.unwrap();
    support::fill(buf2, &[0u8; 4096]);
    drop(inst);
    lib.shutdown();
    assert!(!late_write(&server, &token2));
    assert!(
        read(buf2).iter().all(|&b| b == 0),
        "late bytes landed after shutdown"
    );
}

/// Passes a request through and remembers its token.
struct Recorder<'a, C: Control> {
    inner: &'a mut C,
    last: Option<Token>,
}

impl<C: Control> Control for Recorder<'_, C> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.last = Some(Token::decode(token.as_bytes()).unwrap());
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        self.inner.recv_reply(reply)
    }
}

fn server(name: &str, config: TargetConfig) -> Server {
    let verbs = soft(name, 0.0);
    Server::new(Target::open(verbs.as_ref() as &dyn Verbs, &NoTopology, Some(name), config).unwrap())
}

/// One GET of `key` from `server` into `buf`, counting binding rounds.
fn get_into(
    inst: &Instance,
    server: &Server,
    key: &str,
    buf: hipobj_platform::MemRegion,
) -> Result<usize, ErrorKind> {
    let mut req = server.request(Action::Get(key.into()));
    let r = inst.transfer(Direction::Get, buf.addr(), buf.len(), 0, &mut req);
    r.map(|()| req.rounds).map_err(|e| e.kind())
}

/// Peer switch: one client QP goes back and forth between servers A and B.
/// Going to B rebinds the QP (B answers 409). Coming back to A finds A's
/// binding stale: A's packets carry PSNs the QP no longer expects, so A's
/// RDMA fails and A binds afresh (409), or the duplicate is acknowledged
/// without being executed and A's echoed token names the wrong QP, which
/// the client refuses. Either way no GET ever succeeds with the wrong bytes,
/// and a failed GET succeeds when retried.
#[test]
fn switching_servers_never_delivers_a_false_success() {
    let a = server("softroce-a", TargetConfig::default());
    let b = server("softroce-b", TargetConfig::default());
    a.objects.lock().unwrap().insert("k".into(), vec![0xaa; 8192]);
    b.objects.lock().unwrap().insert("k".into(), vec![0xbb; 8192]);
    let client = soft("softroce-c", 0.0);
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("softroce-c".into()),
    };
    lib.init(
        &cfg,
        || {
            Ok(Platform {
                verbs: client,
                gpu: Arc::new(NoGpu::new("test")),
                topology: Arc::new(NoTopology),
            })
        },
        || Options {
            max_transfers: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let inst = lib.instance().unwrap();
    let buf = host_buf(8192);
    inst.register_host(buf).unwrap();
    let (mut retried, mut rebound) = (0, 0);
    for i in 0..8 {
        let (srv, byte) = if i % 2 == 0 { (&a, 0xaa) } else { (&b, 0xbb) };
        support::fill(buf, &[0u8; 8192]);
        match get_into(&inst, srv, "k", buf) {
            Ok(rounds) => {
                rebound += usize::from(rounds > 1);
                assert!(
                    read(buf).iter().all(|&x| x == byte),
                    "round {i}: a success with the wrong bytes"
                );
            }
            Err(kind) => {
                assert!(
                    matches!(kind, ErrorKind::RdmaError | ErrorKind::S3Error),
                    "round {i}: {kind:?}"
                );
                retried += 1;
                support::fill(buf, &[0u8; 8192]);
                get_into(&inst, srv, "k", buf).unwrap();
                assert!(
                    read(buf).iter().all(|&x| x == byte),
                    "round {i}: the retry brought wrong bytes"
                );
            }
        }
    }
    println!(
        "peer switch: {rebound} GETs rebound in the same request, {retried} failed once and succeeded on retry"
    );
}

/// Server restart, as the client sees it: every binding is gone. The
/// client's QP is still bound to the old server QP; the server answers 409
/// and the client rebinds the same QP in the same request.
#[test]
fn a_server_that_forgot_its_bindings_rebinds_in_one_request() {
    let (lib, server) = pair(0.0);
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("k".into(), vec![3u8; 4096]);
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    assert_eq!(get_into(&inst, &server, "k", buf), Ok(2), "the first GET binds");
    assert_eq!(
        get_into(&inst, &server, "k", buf),
        Ok(1),
        "then one round suffices"
    );
    server.target.forget_bindings();
    assert_eq!(
        get_into(&inst, &server, "k", buf),
        Ok(2),
        "a restarted server binds again"
    );
    assert_eq!(read(buf), vec![3u8; 4096]);
}

/// Client restart: the library goes away with its QPs and comes back on the
/// same device, where new QPs may reuse the old numbers. A server binding
/// for such a number is stale; the RDMA on it fails and the server binds
/// afresh, so the first GET after the restart still succeeds.
#[test]
fn a_restarted_client_recovers_from_stale_bindings() {
    let server = server("softroce-srv", TargetConfig::default());
    server.objects.lock().unwrap().insert("k".into(), vec![9u8; 4096]);
    let client = soft("softroce-cli", 0.0);
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("softroce-cli".into()),
    };
    let platform = Platform {
        verbs: client,
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    for life in 0..3 {
        let p = platform.clone();
        lib.init(
            &cfg,
            || Ok(p),
            || Options {
                max_transfers: 2,
                ..Options::default()
            },
        )
        .unwrap();
        let inst = lib.instance().unwrap();
        let buf = host_buf(4096);
        inst.register_host(buf).unwrap();
        let rounds = get_into(&inst, &server, "k", buf).unwrap_or_else(|e| panic!("life {life}: {e:?}"));
        assert_eq!(rounds, 2, "life {life}: a new QP is bound first");
        assert_eq!(read(buf), vec![9u8; 4096]);
        drop(inst);
        lib.shutdown();
    }
}

/// Idle expiry: a binding unused for longer than the server's idle timeout
/// is dropped, and the next request binds again in the same request.
#[test]
fn an_expired_binding_rebinds_in_one_request() {
    let server = server(
        "softroce-idle",
        TargetConfig {
            idle_timeout: std::time::Duration::from_millis(200),
            ..TargetConfig::default()
        },
    );
    let (lib, _) = pair(0.0);
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("k".into(), vec![5u8; 1024]);
    let buf = host_buf(1024);
    inst.register_host(buf).unwrap();
    assert_eq!(get_into(&inst, &server, "k", buf), Ok(2));
    assert_eq!(get_into(&inst, &server, "k", buf), Ok(1));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        get_into(&inst, &server, "k", buf),
        Ok(2),
        "expired, so bound again"
    );
    assert_eq!(server.target.stats().bindings, 1);
}

/// GPU memory the NIC cannot reach (the fake GPU's device memory has no host
/// access, and the soft NIC, like a real NIC's driver, refuses to register
/// such memory) is staged through pinned host memory: PUT copies device to
/// staging before the server's RDMA READ, GET copies staging to device after
/// the server's RDMA WRITE, and the bytes come out exact in device memory.
#[test]
fn gpu_memory_the_nic_cannot_reach_is_staged_and_moves_exact_bytes() {
    use hipobj::BufKind;
    use hipobj_platform::fake::{FakeGpu, Faults};
    let gpu = Arc::new(FakeGpu::new(1, Faults::default()));
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: 0,
        nic_hint: Some("softroce-gpu".into()),
    };
    let g = gpu.clone();
    lib.init(
        &cfg,
        || {
            Ok(Platform {
                verbs: soft("softroce-gpu", 0.0),
                gpu: g,
                topology: Arc::new(NoTopology),
            })
        },
        Options::default,
    )
    .unwrap();
    let inst = lib.instance().unwrap();
    let server = server("softroce-gpu-srv", TargetConfig::default());
    let len = 3 << 20;
    let pattern: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
    let src = gpu.alloc_device(0, len);
    let dst = gpu.alloc_device(0, len);
    assert!(gpu.write(src, &pattern));
    // SAFETY: the fake GPU keeps both allocations for the rest of the test,
    // after the library has deregistered them.
    let (src_r, dst_r) = unsafe { (MemRegion::new(src, len), MemRegion::new(dst, len)) };
    inst.register_device(src_r).unwrap();
    inst.register_device(dst_r).unwrap();
    assert_eq!(inst.buffers().find(src).unwrap().kind(), BufKind::Staged);
    assert_eq!(inst.buffers().find(dst).unwrap().kind(), BufKind::Staged);

    let mut put = server.request(Action::Put("gpu".into()));
    inst.transfer(Direction::Put, src, len, 0, &mut put).unwrap();
    assert!(
        server.objects.lock().unwrap()["gpu"] == pattern,
        "the PUT did not carry the device bytes"
    );

    let mut get = server.request(Action::Get("gpu".into()));
    inst.transfer(Direction::Get, dst, len, 0, &mut get).unwrap();
    assert!(
        gpu.read(dst, len).unwrap() == pattern,
        "the GET did not land in device memory"
    );

    // An application-driven GET into a staged buffer: the token names the
    // staging buffer, and HIPOBJ_SYNC_TO_DEVICE brings the bytes over.
    assert!(gpu.write(dst, &vec![0u8; len]));
    let token = inst.rdma_token(dst, len, Direction::Get).unwrap();
    let t = Token::decode(token.as_bytes()).unwrap();
    assert_eq!(
        t.addr,
        inst.buffers().find(dst).unwrap().staging_addr().unwrap() as u64
    );
    let mut req = server.request(Action::Get("gpu".into()));
    loop {
        req.send_request(token.as_str()).unwrap();
        let mut reply = [0u8; 512];
        let n = req.recv_reply(&mut reply).unwrap();
        if inst.handle_token_reply(&reply[..n]).unwrap() != 409 {
            break;
        }
    }
    assert!(
        gpu.read(dst, len).unwrap().iter().all(|&b| b == 0),
        "not synced yet"
    );
    inst.sync(dst, len, 0, hipobj::SyncDirection::ToDevice).unwrap();
    assert!(gpu.read(dst, len).unwrap() == pattern);
    inst.deregister(src).unwrap();
    inst.deregister(dst).unwrap();
}

/// Records the token of each request it passes on.
struct Recording<'a> {
    inner: support::server::Request<'a>,
    tokens: Vec<Token>,
}

impl Control for Recording<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.tokens.push(Token::decode(token.as_bytes()).unwrap());
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        self.inner.recv_reply(reply)
    }
}

/// Issue 15, on the soft NIC end to end: after a PUT returned, its server
/// READs through the PUT's token again (as a late duplicate READ does).
/// The window is invalidated, so the client's QP NAKs the READ and goes to
/// ERR while idle in the pool. The next transfers must not use it: they
/// succeed on other connections, and the pool keeps its size.
#[test]
fn a_connection_a_late_server_read_killed_while_idle_is_never_used_again() {
    let (lib, server, nic) = pair_with_client_nic(0.0);
    let inst: Arc<Instance> = lib.instance().unwrap();
    let buf = host_buf(64 << 10);
    inst.register_host(buf).unwrap();
    let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
    support::fill(buf, &data);
    let mut put = Recording {
        inner: server.request(Action::Put("first".into())),
        tokens: Vec::new(),
    };
    inst.transfer(Direction::Put, buf.addr(), 64 << 10, 0, &mut put)
        .unwrap();
    let token = *put.tokens.last().unwrap();

    let late = server.serve_token(&Action::Put("late".into()), &token);
    let late_ok = late.is_ok_and(|r| hipobj_proto::parse_reply(r.as_bytes()).is_ok_and(|p| p.is_success()));
    assert!(!late_ok, "a READ through an ended grant succeeded");
    assert!(!server.objects.lock().unwrap().contains_key("late"));
    let c = nic.counters().unwrap();
    assert_eq!(
        c.naks_fatal, 1,
        "the client's QP refused the READ and went to ERR: {c:?}"
    );

    for key in ["second", "third"] {
        let mut next = Recording {
            inner: server.request(Action::Put(key.into())),
            tokens: Vec::new(),
        };
        inst.transfer(Direction::Put, buf.addr(), 64 << 10, 0, &mut next)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(
            next.tokens.iter().all(|t| t.qpn != token.qpn),
            "{key} was sent on the QP the late READ killed"
        );
        assert_eq!(server.objects.lock().unwrap()[key], data);
    }
    assert_eq!(inst.pool().size(), 4, "the dead connection was replaced");
}
