//! The client's cost per transfer, on the soft NIC with the in-process peer:
//!
//! * `control_path`: everything the library does for one transfer on a
//!   connection that is already bound (find the buffer, lease a connection,
//!   mint and encode the token, call the S3 side, parse its reply, check the
//!   CQ without waiting, return the lease), with an S3 side that answers at
//!   once, so no RDMA and no server time is in it. It is a PUT: a GET's
//!   success needs the server's WRITE WITH IMMEDIATE on the CQ, which only a
//!   real RDMA WRITE makes;
//! * `get_4k_round_trip`: a whole 4 KiB GET, the server's RDMA WRITE over
//!   loopback UDP included;
//! * `window_bind_invalidate`: the fence alone, which `control_path`
//!   includes: bind the connection's memory window over 4 KiB, wait for the
//!   bind's completion, invalidate it, wait for that completion.
//!
//! `cargo bench -p hipobj --bench control_path`
//!
//! With `HIPOBJ_CALLGRIND_ITERATIONS=N` set it skips criterion and runs the
//! control path N times, for instruction counts: run it under
//! `valgrind --tool=callgrind` with two values of N and divide the
//! difference in instructions by the difference in N (setup cancels out).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use criterion::Criterion;
use hipobj::{Config, Control, ControlError, Direction, Instance, Library, Options};
use hipobj_peer::{PeerConfig, RdmaPeer, Step};
use hipobj_platform::{MemRegion, NoGpu, NoTopology, Platform};
use hipobj_proto::Token;
use hipobj_softroce::{SoftConfig, SoftVerbs};

fn soft(name: &str) -> Arc<SoftVerbs> {
    Arc::new(SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    }))
}

/// Answers every request with a fixed reply, doing nothing else.
struct Canned(String);

impl Control for Canned {
    fn send_request(&mut self, _token: &str) -> Result<(), ControlError> {
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        reply[..self.0.len()].copy_from_slice(self.0.as_bytes());
        Ok(self.0.len())
    }
}

/// The server side of a GET: binds, then RDMA WRITEs `data`.
struct Get<'a> {
    peer: &'a RdmaPeer,
    data: &'a [u8],
    reply: String,
}

impl Control for Get<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let t = Token::decode(token.as_bytes()).map_err(|e| ControlError(e.to_string()))?;
        self.reply = match self.peer.step(&t).map_err(|e| ControlError(e.to_string()))? {
            Step::Bind(r) => r.to_string(),
            Step::Bound => {
                let data = self.data;
                self.peer
                    .write_to_client(&t, data.len() as u64, &mut |off, chunk| {
                        let off = off as usize;
                        chunk.copy_from_slice(&data[off..off + chunk.len()]);
                        Ok(())
                    })
                    .map_err(|e| ControlError(e.to_string()))?;
                self.peer
                    .success_reply(&t, 200, data.len() as u64)
                    .map_err(|e| ControlError(e.to_string()))?
                    .to_string()
            }
        };
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        reply[..self.reply.len()].copy_from_slice(self.reply.as_bytes());
        Ok(self.reply.len())
    }
}

fn setup() -> (Library, Arc<Instance>, RdmaPeer, MemRegion) {
    let platform = Platform {
        verbs: soft("bench-client"),
        gpu: Arc::new(NoGpu::new("bench")),
        topology: Arc::new(NoTopology),
    };
    let lib = Library::new();
    let cfg = Config {
        flags: 0,
        gpu_device: -1,
        nic_hint: Some("bench-client".into()),
    };
    // One connection, so the one bound below serves every iteration.
    lib.init(
        &cfg,
        || Ok(platform),
        || Options {
            max_transfers: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let inst = lib.instance().unwrap();
    let server = soft("bench-server");
    let peer = RdmaPeer::open(
        server.as_ref(),
        &NoTopology,
        Some("bench-server"),
        PeerConfig::default(),
    )
    .unwrap();
    let buf = MemRegion::from_static(Box::leak(vec![0u8; 4096].into_boxed_slice()));
    inst.register_host(buf).unwrap();
    (lib, inst, peer, buf)
}

fn benches(c: &mut Criterion) {
    let (_lib, inst, peer, buf) = setup();
    let data = vec![0x5au8; 4096];
    let mut get = Get {
        peer: &peer,
        data: &data,
        reply: String::new(),
    };
    // Bind the connection with one real GET, keeping its token.
    let mut rec = Recorder {
        inner: &mut get,
        token: None,
    };
    inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut rec)
        .unwrap();
    let token = rec.token.unwrap();
    // The reply a bound server gives to a PUT of 4096 bytes: 200, its own
    // QP's token and the count.
    let echo = peer.success_reply(&token, 200, 4096).unwrap().to_string();
    let mut canned = Canned(echo);
    c.bench_function("control_path", |b| {
        b.iter(|| {
            inst.transfer(Direction::Put, buf.addr(), 4096, 0, &mut canned)
                .unwrap()
        })
    });
    {
        let entry = inst.buffers().find(buf.addr()).unwrap();
        let mut lease = inst.pool().acquire().unwrap();
        let conn = lease.conn();
        let grant = |rkey| hipobj::Grant {
            mr: entry.window_mr(),
            addr: buf.addr() as u64,
            len: 4096,
            access: hipobj_platform::AccessFlags::REMOTE_WRITE,
            rkey,
        };
        c.bench_function("window_bind_invalidate", |b| {
            b.iter(|| {
                let rkey = conn.next_rkey(0);
                conn.open_grant(&grant(rkey)).unwrap();
                conn.close_grant().unwrap();
            })
        });
    }
    c.bench_function("get_4k_round_trip", |b| {
        b.iter(|| {
            inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut get)
                .unwrap()
        })
    });
}

/// Passes a request through and keeps its token.
struct Recorder<'a, C: Control> {
    inner: &'a mut C,
    token: Option<Token>,
}

impl<C: Control> Control for Recorder<'_, C> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.token = Some(Token::decode(token.as_bytes()).map_err(|e| ControlError(e.to_string()))?);
        self.inner.send_request(token)
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        self.inner.recv_reply(reply)
    }
}

/// Binds the connection and returns the canned reply of a bound server.
fn bound(inst: &Instance, peer: &RdmaPeer, buf: MemRegion, data: &[u8]) -> String {
    let mut get = Get {
        peer,
        data,
        reply: String::new(),
    };
    let mut rec = Recorder {
        inner: &mut get,
        token: None,
    };
    inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut rec)
        .unwrap();
    peer.success_reply(&rec.token.unwrap(), 200, 4096)
        .unwrap()
        .to_string()
}

fn main() {
    if let Some(n) = std::env::var("HIPOBJ_CALLGRIND_ITERATIONS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let (_lib, inst, peer, buf) = setup();
        let mut canned = Canned(bound(&inst, &peer, buf, &[0x5a; 4096]));
        for _ in 0..n {
            inst.transfer(Direction::Put, buf.addr(), 4096, 0, &mut canned)
                .unwrap();
        }
        println!("{n} control-path transfers");
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
