//! A malicious server against the library, both on soft RoCE devices with
//! real bytes over loopback UDP: what a token lets a server do, and for how
//! long (docs/protocol.md §1). The server keeps every token it was given and
//! tries to use it outside the transfer it was for.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use hipobj::{Control, ControlError, Direction, Instance, Library, Options};
use hipobj_platform::{NoGpu, NoTopology, Platform, Verbs};
use hipobj_proto::{Token, parse_reply};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::{Target, TargetConfig};

use support::server::{Action, Server};
use support::{fill, host_buf, read};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// A client library with one connection (so every transfer reuses it) and a server.
fn pair(tag: &str) -> (Library, Server) {
    let client = format!("fence-c-{tag}");
    let serv = format!("fence-s-{tag}");
    let platform = Platform {
        verbs: soft(&client),
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    let cfg = hipobj::Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some(client),
    };
    lib.init(
        &cfg,
        || Ok(platform),
        || Options {
            max_transfers: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let verbs = soft(&serv);
    let target = Target::open(
        verbs.as_ref() as &dyn Verbs,
        &NoTopology,
        Some(&serv),
        TargetConfig {
            completion_timeout: std::time::Duration::from_secs(20),
            ..TargetConfig::default()
        },
    )
    .unwrap();
    (lib, Server::new(target))
}

/// Passes a request through and keeps every token it carried.
struct Keeper<'a, C: Control> {
    inner: &'a mut C,
    tokens: Vec<Token>,
}

impl<C: Control> Control for Keeper<'_, C> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.tokens.push(Token::decode(token.as_bytes()).unwrap());
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        self.inner.recv_reply(reply)
    }
}

/// The server writes 0xee through `token` as it stands, as a GET would, on
/// the binding it kept for the token's QP: `Ok` with the success reply if
/// the bytes moved, `Err` with what the target answered instead (a fresh
/// binding after the RDMA failed, or an error).
fn write_with(server: &Server, token: &Token) -> Result<String, String> {
    server
        .objects
        .lock()
        .unwrap()
        .insert("evil".into(), vec![0xee; token.len as usize]);
    match server.serve_token(&Action::Get("evil".into()), token) {
        Ok(r) if parse_reply(r.as_bytes()).is_ok_and(|p| p.is_success()) => Ok(r),
        Ok(r) => Err(r),
        Err(e) => Err(e),
    }
}

/// A malicious server for one transfer: binds when asked, then, instead of
/// the transfer, writes 0xee through the token as `forge` rewrites it, and
/// answers `500`. Keeps what the forged write came to.
struct Forger<'a> {
    server: &'a Server,
    forge: Box<dyn Fn(Token) -> Token + 'a>,
    reply: Option<String>,
    rounds: usize,
    result: Option<Result<String, String>>,
}

impl Control for Forger<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let t = Token::decode(token.as_bytes()).unwrap();
        self.rounds += 1;
        if self.rounds == 1 {
            // Every transfer here starts on a fresh QP, so the first round
            // only binds (409) and moves nothing.
            self.reply = Some(self.server.serve_token(&Action::Get("bind".into()), &t).unwrap());
            return Ok(());
        }
        self.result = Some(write_with(self.server, &(self.forge)(t)));
        self.reply = Some("500".into());
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let r = self.reply.take().unwrap();
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
}

/// A GET of `key` into `buf` through `server`, returning the tokens sent.
fn get(
    inst: &Instance,
    server: &Server,
    key: &str,
    buf: hipobj_platform::MemRegion,
    len: usize,
) -> Vec<Token> {
    let mut req = server.request(Action::Get(key.into()));
    let mut keep = Keeper {
        inner: &mut req,
        tokens: Vec::new(),
    };
    inst.transfer(Direction::Get, buf.addr(), len, 0, &mut keep)
        .unwrap();
    keep.tokens
}

#[test]
fn a_late_write_after_a_successful_get_fails_and_the_buffer_is_unchanged() {
    let (lib, server) = pair("late");
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("k".into(), vec![7u8; 4096]);
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let tokens = get(&inst, &server, "k", buf, 4096);
    assert_eq!(read(buf), vec![7u8; 4096]);
    // The call returned: the server writes again with the token it kept.
    let late = write_with(&server, tokens.last().unwrap());
    assert!(
        late.is_err(),
        "a late write after a successful GET landed: {late:?}"
    );
    assert_eq!(
        read(buf),
        vec![7u8; 4096],
        "the buffer changed after the call returned"
    );
}

#[test]
fn a_write_beyond_the_requested_range_fails() {
    let (lib, server) = pair("range");
    let inst = lib.instance().unwrap();
    // A 4 KiB GET at offset 4 KiB of a 64 KiB buffer.
    let buf = host_buf(64 << 10);
    inst.register_host(buf).unwrap();
    for (shift, extra) in [(0i64, 4096u64), (-4096, 0), (-1, 0), (0, 1)] {
        fill(buf, &vec![0u8; 64 << 10]);
        // Binds, then writes 8 KiB where 4 KiB were asked for, or 4 KiB
        // just before the range, and so on.
        let mut s3 = Forger {
            server: &server,
            forge: Box::new(move |t| {
                let mut wide = t;
                wide.addr = t.addr.wrapping_add_signed(shift);
                wide.len = t.len + extra;
                wide
            }),
            reply: None,
            rounds: 0,
            result: None,
        };
        let e = inst.transfer(Direction::Get, buf.addr(), 4096, 4096, &mut s3);
        assert!(e.is_err());
        let r = s3.result.expect("the server got to write");
        assert!(
            r.is_err(),
            "a write {shift:+} bytes, {extra} extra, beyond the range landed"
        );
        assert!(
            read(buf).iter().all(|&b| b == 0),
            "bytes landed from a write {shift:+}/{extra} outside the requested range"
        );
    }
}

#[test]
fn a_put_tokens_key_cannot_write() {
    let (lib, server) = pair("putkey");
    let inst = lib.instance().unwrap();
    let buf = host_buf(4096);
    fill(buf, &[3u8; 4096]);
    inst.register_host(buf).unwrap();
    // The key itself, and the keys next to it (on the old soft NIC the GET
    // registration's key was the PUT key + 0x100).
    for delta in [0u32, 0x100, 0x100u32.wrapping_neg(), 1] {
        // Binds, then during the PUT writes through the PUT token's key
        // (or a key guessed from it) instead of reading.
        let mut s3 = Forger {
            server: &server,
            forge: Box::new(move |mut t| {
                t.rkey = t.rkey.wrapping_add(delta);
                t
            }),
            reply: None,
            rounds: 0,
            result: None,
        };
        assert!(
            inst.transfer(Direction::Put, buf.addr(), 4096, 0, &mut s3)
                .is_err()
        );
        let r = s3.result.expect("the server got to write");
        assert!(r.is_err(), "a PUT token's key + {delta:#x} let the server write");
        assert_eq!(
            read(buf),
            vec![3u8; 4096],
            "the PUT token's key + {delta:#x} changed the buffer"
        );
    }
}

#[test]
fn after_the_connection_moved_on_to_another_buffer_the_old_key_is_useless() {
    let (lib, server) = pair("moved");
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("a".into(), vec![1u8; 4096]);
    server.objects.lock().unwrap().insert("b".into(), vec![2u8; 4096]);
    let (a, b) = (host_buf(4096), host_buf(4096));
    inst.register_host(a).unwrap();
    inst.register_host(b).unwrap();
    let old = get(&inst, &server, "a", a, 4096);
    let new = get(&inst, &server, "b", b, 4096);
    // One connection: the same QP carried both.
    assert_eq!(old.last().unwrap().qpn, new.last().unwrap().qpn);
    assert_ne!(old.last().unwrap().rkey, new.last().unwrap().rkey);
    let late = write_with(&server, old.last().unwrap());
    assert!(late.is_err(), "the old buffer's key still works: {late:?}");
    assert_eq!(read(a), vec![1u8; 4096]);
    assert_eq!(read(b), vec![2u8; 4096]);
}

#[test]
fn application_driven_tokens_grant_until_released() {
    let (lib, server) = pair("app");
    let inst = lib.instance().unwrap();
    server.objects.lock().unwrap().insert("k".into(), vec![5u8; 4096]);
    let got = support::server::app_driven_get(&inst, &server, "k", 4096);
    assert_eq!(got, vec![5u8; 4096]);
    // A second token for another buffer: the server may write it until it
    // is released, and not after.
    let buf = host_buf(4096);
    inst.register_host(buf).unwrap();
    let hex = inst.rdma_token(buf.addr(), 4096, Direction::Get).unwrap();
    let t = Token::decode(hex.as_bytes()).unwrap();
    assert!(write_with(&server, &t).is_ok(), "the live token works");
    assert_eq!(read(buf), vec![0xee; 4096]);
    fill(buf, &[0u8; 4096]);
    inst.release_token(hex.as_str());
    let late = write_with(&server, &t);
    assert!(late.is_err(), "a released token still works: {late:?}");
    assert_eq!(read(buf), vec![0u8; 4096]);
}
