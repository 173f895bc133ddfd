//! The client's cost per transfer, on the soft NIC with the in-process server double (`hipobj_target::double`):
//!
//! * `control_path`: everything the library does for one transfer on a
//!   connection that is already bound (find the buffer, lease a connection,
//!   mint and encode the token, call the S3 side, parse its reply, check the
//!   CQ without waiting, return the lease), with an S3 side that answers at
//!   once, so no RDMA and no server time is in it. It is a PUT: a GET's
//!   success needs the server's WRITEs WITH IMMEDIATE on the CQ, which only
//!   real RDMA WRITEs make;
//! * `get_4k_round_trip`: a whole 4 KiB GET, the server's RDMA WRITE over
//!   loopback UDP included;
//! * `window_bind_invalidate`: the fence alone, which `control_path`
//!   includes: take a window and a fresh key from the device's pool, bind
//!   it over 4 KiB, wait for the bind's completion, invalidate it, wait for
//!   that completion, give the window back;
//! * `landed_tally_1`: the GET proof's own arithmetic (docs/protocol.md
//!   §2), which a GET adds to its CQ poll: the client's tally of its one
//!   WRITE WITH IMMEDIATE, without the NIC.
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
use hipobj_platform::{MemRegion, NoGpu, NoTopology, Platform};
use hipobj_softroce::{SoftConfig, SoftVerbs};
use hipobj_target::double::{Action, ObjectServer};
use hipobj_target::{Target, TargetConfig};

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

/// A request to the in-process server double.
struct Req<'a> {
    server: &'a ObjectServer,
    op: Action,
    reply: String,
}

impl Control for Req<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        self.reply = self.server.serve(&self.op, token).map_err(ControlError)?;
        Ok(())
    }
    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        reply[..self.reply.len()].copy_from_slice(self.reply.as_bytes());
        Ok(self.reply.len())
    }
}

fn setup() -> (Library, Arc<Instance>, ObjectServer, MemRegion) {
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
    let target = Target::open(
        server.as_ref(),
        &NoTopology,
        Some("bench-server"),
        TargetConfig::default(),
    )
    .unwrap();
    let server = ObjectServer::new(target);
    server
        .objects
        .lock()
        .unwrap()
        .insert("bench".into(), vec![0x5au8; 4096]);
    let buf = MemRegion::from_static(Box::leak(vec![0u8; 4096].into_boxed_slice()));
    inst.register_host(buf).unwrap();
    (lib, inst, server, buf)
}

fn benches(c: &mut Criterion) {
    let (_lib, inst, server, buf) = setup();
    let mut get = Req {
        server: &server,
        op: Action::Get("bench".into()),
        reply: String::new(),
    };
    // Bind the connection with one real PUT, keeping the reply a bound
    // server gives it (200, its own QP's token, 4096 bytes).
    let mut canned = Canned(bound(&inst, &server, buf));
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
                let rkey = conn.next_rkey(0).unwrap();
                conn.open_grant(&grant(rkey)).unwrap();
                conn.close_grant().unwrap();
            })
        });
    }
    c.bench_function("landed_tally_1", |b| {
        b.iter(|| {
            let mut t = hipobj_proto::landed::Tally::new(std::hint::black_box(0x1234_5678), 4096);
            t.add(std::hint::black_box(0x1234_5678), 4096).unwrap();
            t.finish().unwrap()
        })
    });
    c.bench_function("get_4k_round_trip", |b| {
        b.iter(|| {
            inst.transfer(Direction::Get, buf.addr(), 4096, 0, &mut get)
                .unwrap()
        })
    });
}

/// Binds the connection with one real PUT of 4096 bytes and returns the
/// success reply the bound server gave.
fn bound(inst: &Instance, server: &ObjectServer, buf: MemRegion) -> String {
    let mut put = Req {
        server,
        op: Action::Put("bench-put".into()),
        reply: String::new(),
    };
    inst.transfer(Direction::Put, buf.addr(), 4096, 0, &mut put)
        .unwrap();
    put.reply
}

fn main() {
    if let Some(n) = std::env::var("HIPOBJ_CALLGRIND_ITERATIONS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let (_lib, inst, server, buf) = setup();
        let mut canned = Canned(bound(&inst, &server, buf));
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
