//! The library (client) and `hipobj-peer` (server) on two soft RoCE devices
//! in one process, bytes really crossing loopback UDP: PUT and GET from 1 B
//! to 64 MiB, an application-driven GET, loss, and the proof that a server
//! writing late cannot reach a buffer once the call has returned.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use hipobj::{Control, ControlError, Direction, ErrorKind, Instance, Library, Options};
use hipobj_peer::{PeerConfig, PeerError, RdmaPeer, Step};
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::Token;
use hipobj_softroce::{FaultConfig, SoftConfig, SoftVerbs};

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
    let client_verbs = soft("softroce-client", loss);
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
    let peer = RdmaPeer::open(
        server_verbs.as_ref() as &dyn Verbs,
        &NoTopology,
        Some("softroce-server"),
        PeerConfig {
            completion_timeout: std::time::Duration::from_secs(20),
            ..PeerConfig::default()
        },
    )
    .unwrap();
    (lib, Server::new(peer))
}

#[test]
fn put_and_get_from_one_byte_to_64_mib() {
    let (lib, server) = pair(0.0);
    let inst = lib.instance().unwrap();
    put_get_roundtrip(&inst, &server, &[1, 4096, 1 << 20, 64 << 20]);
    assert_eq!(server.peer.stats().transfers, 8);
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
    peer: &'a RdmaPeer,
    token: Option<Token>,
    reply: Option<String>,
}

impl Control for FailAfterBind<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let t = Token::decode(token.as_bytes()).unwrap();
        self.token = Some(t);
        self.reply = match self.peer.step(&t).unwrap() {
            Step::Bind(r) => Some(r.to_string()),
            Step::Bound => None,
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

fn late_write(peer: &RdmaPeer, token: &Token) -> Result<u64, PeerError> {
    peer.write_to_client(token, token.len, &mut |_, chunk| {
        chunk.fill(0xee);
        Ok(())
    })
}

#[test]
fn a_server_writing_after_a_failed_transfer_cannot_reach_the_buffer() {
    let (lib, server) = pair(0.0);
    let inst: Arc<Instance> = lib.instance().unwrap();
    let buf = host_buf(64 << 10);
    inst.register_host(buf).unwrap();
    let mut s3 = FailAfterBind {
        peer: &server.peer,
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
    let late = late_write(&server.peer, &token);
    assert!(late.is_err(), "a late write succeeded: {late:?}");
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
    let mut req = server.request(support::server::Op::Get("k".into()));
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
    assert!(late_write(&server.peer, &token).is_err());
    assert_eq!(read(buf), vec![1u8; 4096], "the deregistered buffer changed");

    // Register again, transfer, and shut down: the QPs go with the instance.
    let buf2 = host_buf(4096);
    inst.register_host(buf2).unwrap();
    let mut req = server.request(support::server::Op::Get("k".into()));
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
    assert!(late_write(&server.peer, &token2).is_err());
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
