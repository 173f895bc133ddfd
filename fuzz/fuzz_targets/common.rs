//! Pieces the client-side targets share: the input reader, the servers
//! they play, and a debug print for reproducing a crash.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use hipobj::{Config, Library, Options};
use hipobj_platform::fake::{FakeDeviceSpec, FakeGpu, FakePlatform, FakeTopology, FakeVerbs, Faults};

use hipobj_platform::Gid;
use hipobj_proto::{Token, Transport};

/// The fuzzer's bytes, read front to back; past the end every read is 0.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
    pub fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// One of two honest servers' tokens: QP 0x99 at ::ffff:127.9.9.9, or QP
/// 0x77 at ::ffff:127.8.8.8.
pub fn server(which: u8) -> Token {
    let (qpn, ip) = match which % 2 {
        0 => (0x99, Ipv4Addr::new(127, 9, 9, 9)),
        _ => (0x77, Ipv4Addr::new(127, 8, 8, 8)),
    };
    Token {
        transport: Transport::Rc,
        qpn,
        gid: Gid::from_ipv4(ip).0,
        rkey: 0,
        addr: 0,
        len: 0,
        port: 1,
        lid: 0,
    }
}

/// Server tokens no binding may connect to (docs/protocol.md §3 step 3).
pub fn bogus(which: u8) -> Token {
    let mut t = server(0);
    match which % 8 {
        0 => t.qpn = 0,
        1 => t.qpn = 1,
        2 => t.qpn = 1 << 24,
        3 => t.gid = [0; 16],
        4 => t.gid[0] = 0xff,
        5 => t.gid = Gid::from_ipv4(Ipv4Addr::new(224, 0, 0, 1)).0,
        6 => t.port = 0,
        _ => t.transport = Transport::Dc,
    }
    t
}

/// With `HIPOBJ_FUZZ_DEBUG` set (reproducing a crash), the exchange is
/// printed to stderr.
pub fn debug(what: std::fmt::Arguments<'_>) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("HIPOBJ_FUZZ_DEBUG").is_some()) {
        eprintln!("{what}");
    }
}

/// A fake platform with one NIC (with type-2 memory windows or not) and
/// the library initialized on it with a pool of `pool` connections.
pub fn start(mw: bool, pool: u32) -> (FakePlatform, Library) {
    let faults = Faults::default();
    let p = FakePlatform {
        verbs: Arc::new(FakeVerbs::new(
            vec![FakeDeviceSpec {
                mw_type2: mw,
                ..FakeDeviceSpec::default()
            }],
            faults.clone(),
        )),
        gpu: Arc::new(FakeGpu::new(0, faults.clone())),
        topology: Arc::new(FakeTopology::new(Vec::new(), faults.clone())),
        faults,
    };
    let lib = Library::new();
    let config = Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("fake0".into()),
    };
    lib.init(
        &config,
        || Ok(p.platform()),
        || Options {
            max_transfers: pool,
            ..Options::default()
        },
    )
    .expect("init on the fake NIC");
    (p, lib)
}
