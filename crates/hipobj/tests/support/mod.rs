//! Shared pieces of the core's tests: a fake platform and a scripted S3 side.
#![allow(dead_code, clippy::unwrap_used, unsafe_code)]

pub(crate) mod rc_v2;
pub(crate) mod server;

use std::collections::VecDeque;

use hipobj::{Config, Control, ControlError, Library, Options};
use hipobj_platform::fake::{FakeDeviceSpec, FakeGpu, FakePlatform, FakeTopology, FakeVerbs, Faults};
use std::sync::Arc;

/// A fake platform with `gpus` fake GPUs and one fake NIC.
pub(crate) fn fake(gpus: i32, spec: FakeDeviceSpec) -> FakePlatform {
    let faults = Faults::default();
    FakePlatform {
        verbs: Arc::new(FakeVerbs::new(vec![spec], faults.clone())),
        gpu: Arc::new(FakeGpu::new(gpus, faults.clone())),
        topology: Arc::new(FakeTopology::new(Vec::new(), faults.clone())),
        faults,
    }
}

/// Config naming the fake NIC.
pub(crate) fn config() -> Config {
    Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("fake0".into()),
    }
}

/// Options with a small pool.
pub(crate) fn options(max_transfers: u32) -> Options {
    Options {
        max_transfers,
        ..Options::default()
    }
}

/// A library initialized on `p`.
pub(crate) fn started(p: &FakePlatform, max_transfers: u32) -> Library {
    let lib = Library::new();
    lib.init(&config(), || Ok(p.platform()), || options(max_transfers))
        .unwrap();
    lib
}

/// A fake NIC's spec with type-2 memory windows, or without.
pub(crate) fn windows(on: bool) -> FakeDeviceSpec {
    FakeDeviceSpec {
        mw_type2: on,
        ..FakeDeviceSpec::default()
    }
}

/// A `409` binding reply with [`server_token`] and receive PSN `psn`.
pub(crate) fn bind_reply(psn: u32) -> String {
    hipobj_proto::Reply::Bind {
        token: server_token(),
        psn,
    }
    .to_string()
}

/// A server's token for binding: RC, QP 0x99, GID ::ffff:127.9.9.9.
pub(crate) fn server_token() -> hipobj_proto::Token {
    hipobj_proto::Token {
        transport: hipobj_proto::Transport::Rc,
        qpn: 0x99,
        gid: hipobj_platform::Gid::from_ipv4(std::net::Ipv4Addr::new(127, 9, 9, 9)).0,
        rkey: 0,
        addr: 0,
        len: 0,
        port: 1,
        lid: 0,
    }
}

/// The full success reply of the server of [`server_token`]: `status`, its
/// token, and `bytes` moved.
pub(crate) fn done_status(status: u16, bytes: u64) -> String {
    hipobj_proto::Reply::Done {
        status,
        token: server_token(),
        bytes,
    }
    .to_string()
}

/// `200:<server token>:<bytes>`.
pub(crate) fn done(bytes: u64) -> String {
    done_status(200, bytes)
}

/// Whether `token` is a GET token: its key is one that allows RDMA WRITE,
/// either a memory window's (the latest bind under that key granted
/// REMOTE_WRITE; a device with windows) or a registration's (the
/// access-flag fallback).
pub(crate) fn is_get_token(verbs: &FakeVerbs, token: &hipobj_proto::Token) -> bool {
    let write = hipobj_platform::AccessFlags::REMOTE_WRITE;
    match verbs.mw_bind(token.rkey) {
        Some(b) => b.access.contains(write),
        None => verbs.mr_access(token.rkey).is_some_and(|a| a.contains(write)),
    }
}

/// What the client's QP sees of a GET's RDMA WRITEs, on the fake NIC
/// (which moves no bytes): the receive completion of one WRITE WITH
/// IMMEDIATE of the whole range, its immediate naming offset 0 under the
/// token's key (docs/protocol.md §2).
pub(crate) fn deliver_get_proof(verbs: &FakeVerbs, token: &hipobj_proto::Token) -> bool {
    let imm = hipobj_proto::landed::imm(token.rkey);
    verbs.deliver_write_with_imm(token.qpn, imm, token.len as u32)
}

/// The S3 side of a test: answers each request with the next scripted reply.
/// With `prove` set it also plays the server's RDMA: before handing over a
/// full success reply to a request whose token is a GET token, it delivers
/// that GET's WRITE WITH IMMEDIATE to the token's QP.
#[derive(Default)]
pub(crate) struct Script {
    pub replies: VecDeque<Result<String, String>>,
    pub tokens: Vec<String>,
    pub send_fails: bool,
    pub on_send: Option<Box<dyn FnMut() + Send>>,
    pub prove: Option<Arc<FakeVerbs>>,
}

impl Script {
    pub(crate) fn replying(replies: &[&str]) -> Self {
        Self {
            replies: replies.iter().map(|r| Ok((*r).to_owned())).collect(),
            ..Self::default()
        }
    }

    /// Scripted replies, with the RDMA of a GET that succeeds played on `p`.
    pub(crate) fn serving(p: &FakePlatform, replies: &[&str]) -> Self {
        Self {
            prove: Some(p.verbs.clone()),
            ..Self::replying(replies)
        }
    }
}

impl Control for Script {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.tokens.push(token.to_owned());
        if let Some(f) = self.on_send.as_mut() {
            f();
        }
        if self.send_fails {
            return Err(ControlError("the test's sendRequest fails".into()));
        }
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        match self.replies.pop_front() {
            Some(Ok(r)) => {
                let full = matches!(
                    hipobj_proto::parse_reply(r.as_bytes()),
                    Ok(hipobj_proto::Reply::Done { .. })
                );
                if let (true, Some(verbs), Some(t)) = (full, &self.prove, self.tokens.last()) {
                    let t = hipobj_proto::Token::decode(t.as_bytes()).unwrap();
                    if is_get_token(verbs, &t) {
                        deliver_get_proof(verbs, &t);
                    }
                }
                reply[..r.len()].copy_from_slice(r.as_bytes());
                Ok(r.len())
            }
            Some(Err(e)) => Err(ControlError(e)),
            None => Err(ControlError("no reply scripted".into())),
        }
    }
}

/// Host memory that lives for the rest of the test run, as a region.
pub(crate) fn host_buf(len: usize) -> hipobj_platform::MemRegion {
    hipobj_platform::MemRegion::from_static(Box::leak(vec![0u8; len].into_boxed_slice()))
}

/// Copies `data` into the start of a region from [`host_buf`].
pub(crate) fn fill(region: hipobj_platform::MemRegion, data: &[u8]) {
    assert!(data.len() <= region.len());
    // SAFETY: host_buf regions are leaked heap memory that nothing else
    // references; no transfer on it is running.
    unsafe {
        std::ptr::copy_nonoverlapping(
            data.as_ptr(),
            std::ptr::with_exposed_provenance_mut::<u8>(region.addr()),
            data.len(),
        )
    };
}

/// Copies a region from [`host_buf`] out.
pub(crate) fn read(region: hipobj_platform::MemRegion) -> Vec<u8> {
    let mut out = vec![0u8; region.len()];
    // SAFETY: as in `fill`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::with_exposed_provenance::<u8>(region.addr()),
            out.as_mut_ptr(),
            out.len(),
        )
    };
    out
}
