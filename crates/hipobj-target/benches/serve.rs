//! The server's cost per request alone, on the soft NIC against a bare
//! client QP (no client library, no HTTP): [`Target::serve`] of a token on
//! a bound connection, which checks the token against the caller, looks
//! the binding up, moves the bytes by RDMA (WRITE WITH IMMEDIATE for a GET,
//! READ for a PUT, each checked by the client's NIC against the token's
//! rkey) and waits for its completion, and makes the success reply.
//!
//! * `serve_get_4k`, `serve_put_4k`: one request of 4 KiB each, the client
//!   side's receive completion consumed and its receive posted again (a
//!   few hundred ns of the total);
//! * `serve_refused`: a GET of an object larger than the token's buffer,
//!   refused before any byte moves: the token check, the lookup and the
//!   object's open alone.
//!
//! `cargo bench -p hipobj-target --bench serve`
//!
//! With `HIPOBJ_CALLGRIND_ITERATIONS=N` it skips criterion and serves N
//! GETs, for instruction counts: run it under `valgrind --tool=callgrind
//! --separate-threads=yes` with two values of N and divide the difference
//! of the main thread's instructions by the difference in N (the soft
//! NIC's worker threads count apart, in files of their own).
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use criterion::Criterion;
use hipobj_platform::fake::ClientQp;
use hipobj_platform::{AccessFlags, NoTopology, RecvWr, WcStatus};
use hipobj_proto::Token;
use hipobj_target::{Answer, Caller, Request, Selected, Sink, Source, Target, TargetConfig, TargetError};

const LEN: usize = 4096;

struct Bytes<'a>(&'a [u8]);

impl Source for Bytes<'_> {
    type Error = ();
    fn open(&mut self) -> Result<Selected, ()> {
        Ok(Selected {
            len: self.0.len() as u64,
            partial: false,
        })
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), ()> {
        let off = off as usize;
        buf.copy_from_slice(&self.0[off..off + buf.len()]);
        Ok(())
    }
}

/// Takes the bytes into a buffer of its own (what a store's write would
/// start from).
struct Into<'a>(&'a mut [u8]);

impl Sink for Into<'_> {
    type Error = ();
    fn open(&mut self, len: u64) -> Result<(), ()> {
        (len as usize <= self.0.len()).then_some(()).ok_or(())
    }
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), ()> {
        let off = off as usize;
        self.0[off..off + chunk.len()].copy_from_slice(chunk);
        Ok(())
    }
    fn commit(&mut self) -> Result<(), ()> {
        Ok(())
    }
}

struct Bench {
    target: Target,
    client: ClientQp,
    caller: Caller,
    token: Token,
    data: Vec<u8>,
    sink: Vec<u8>,
}

impl Bench {
    fn new() -> Self {
        let target = Target::open(
            support::soft("bench-srv").as_ref(),
            &NoTopology,
            Some("bench-srv"),
            TargetConfig::default(),
        )
        .unwrap();
        let client = ClientQp::with_access(
            support::soft("bench-cli"),
            "bench-cli",
            LEN,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        );
        let caller = Caller::key("bench");
        let token = support::token(&client, LEN as u64);
        let b = Self {
            target,
            client,
            caller,
            token,
            data: vec![0x5a; LEN],
            sink: vec![0; LEN],
        };
        match b
            .target
            .serve(&b.caller, &b.token, Request::Get(&mut Bytes(&b.data)))
        {
            Ok(Answer::Bind { reply, .. }) => support::connect(&b.client, &reply),
            other => panic!("expected a bind: {other:?}"),
        }
        b
    }

    fn get(&mut self) {
        let a = self
            .target
            .serve(&self.caller, &self.token, Request::Get(&mut Bytes(&self.data)));
        assert!(
            matches!(a, Ok(Answer::Done { bytes, .. }) if bytes == LEN as u64),
            "{a:?}"
        );
        // The proof's receive completion, and a receive for the next one.
        let wc = support::completion(&self.client, Duration::from_secs(5)).unwrap();
        assert_eq!(wc.status, WcStatus::Success);
        self.client
            .qp
            .post_recv(&RecvWr {
                wr_id: 7,
                sg_list: &[],
            })
            .unwrap();
    }

    fn put(&mut self) {
        let a = self
            .target
            .serve(&self.caller, &self.token, Request::Put(&mut Into(&mut self.sink)));
        assert!(
            matches!(a, Ok(Answer::Done { bytes, .. }) if bytes == LEN as u64),
            "{a:?}"
        );
    }

    fn refused(&mut self) {
        let mut small = self.token;
        small.len = LEN as u64 / 2;
        let a = self
            .target
            .serve(&self.caller, &small, Request::Get(&mut Bytes(&self.data)));
        assert!(matches!(a, Err(TargetError::BufferTooSmall { .. })), "{a:?}");
    }
}

fn main() {
    let mut b = Bench::new();
    if let Some(n) = std::env::var("HIPOBJ_CALLGRIND_ITERATIONS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        for _ in 0..n {
            b.get();
        }
        println!("{n} GETs served");
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("serve_get_4k", |i| i.iter(|| b.get()));
    c.bench_function("serve_put_4k", |i| i.iter(|| b.put()));
    c.bench_function("serve_refused", |i| i.iter(|| b.refused()));
    c.final_summary();
}
