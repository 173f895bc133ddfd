//! An in-memory link between engines, with virtual time.
//!
//! [`SimNet`] joins any number of [`Engine`]s by their addresses. Packets
//! travel with a fixed one-way latency through a [`FaultInjector`]; time
//! stands still while packets move and jumps to the next delivery or timer
//! when nothing else can happen, so a test of a 60-second retry budget runs
//! in microseconds and always the same way for a given seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddrV4;
use std::time::Duration;

use super::faults::{Fate, FaultConfig, FaultInjector};
use crate::engine::{Engine, Time};
use crate::wire::MAX_PACKET;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Time,
    seq: u64,
    to: usize,
    from: SocketAddrV4,
    data: Vec<u8>,
}

/// Engines joined by an in-memory network.
#[derive(Debug)]
pub struct SimNet {
    engines: Vec<Engine>,
    now: Time,
    latency: Duration,
    faults: FaultInjector,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    buf: Vec<u8>,
    spare: Vec<Vec<u8>>,
    /// Datagrams sent to an address no engine has.
    pub unroutable: u64,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Prints every delivered packet to stderr (for debugging tests).
    pub trace: bool,
    /// The rate of each engine's link in bytes per second, or `None` for
    /// a link without a rate (every datagram leaves at once). With a rate,
    /// an engine's datagrams leave one after another, each taking its
    /// length over the rate, so that what a requester sends beyond what
    /// the link carries in a round trip waits in a queue, as on a real
    /// link (and in the socket buffers and batches of the UDP link).
    pub rate: Option<u64>,
    /// When each engine's link is next free (with a rate).
    busy_until: Vec<Time>,
}

impl SimNet {
    /// A network of `engines`, `latency` apart, disturbed by `faults`.
    pub fn new(engines: Vec<Engine>, latency: Duration, faults: FaultConfig) -> Self {
        Self {
            engines,
            now: Time::ZERO,
            latency,
            faults: FaultInjector::new(faults),
            in_flight: BinaryHeap::new(),
            seq: 0,
            buf: vec![0; MAX_PACKET],
            spare: Vec::new(),
            unroutable: 0,
            delivered: 0,
            trace: false,
            rate: None,
            busy_until: Vec::new(),
        }
    }

    /// Sets the one-way latency of every link.
    pub fn set_latency(&mut self, latency: Duration) {
        self.latency = latency;
    }

    /// The virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Engine `i`.
    pub fn engine(&mut self, i: usize) -> &mut Engine {
        &mut self.engines[i]
    }

    /// The fault injector (for its counts).
    pub fn faults(&self) -> &FaultInjector {
        &self.faults
    }

    /// Puts a datagram on the wire as if `from` had sent it to engine `to`.
    pub fn inject(&mut self, to: usize, from: SocketAddrV4, data: &[u8]) {
        let at = self.now + self.latency;
        self.push(at, to, from, data);
    }

    fn push(&mut self, at: Time, to: usize, from: SocketAddrV4, data: &[u8]) {
        let mut v = self.spare.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(data);
        self.seq += 1;
        self.in_flight.push(Reverse(InFlight {
            at,
            seq: self.seq,
            to,
            from,
            data: v,
        }));
    }

    /// Moves packets and fires timers until `done` says so, nothing is left
    /// to happen, or `limit` of virtual time has passed. Returns whether
    /// `done` became true.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            let mut moved = false;
            for i in 0..self.engines.len() {
                if self.engines[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.engines[i].handle_timeout(self.now);
                }
                let from = self.engines[i].config().local;
                while let Some(t) = self.engines[i].poll_transmit(self.now, &mut self.buf) {
                    moved = true;
                    let Some(to) = self.engines.iter().position(|e| e.config().local == t.dst) else {
                        self.unroutable += 1;
                        continue;
                    };
                    let data = std::mem::take(&mut self.buf);
                    let at = self.departure(i, t.len) + self.latency;
                    match self.faults.fate() {
                        Fate::Deliver => self.push(at, to, from, &data[..t.len]),
                        Fate::Drop => {}
                        Fate::Duplicate => {
                            self.push(at, to, from, &data[..t.len]);
                            self.push(at, to, from, &data[..t.len]);
                        }
                        Fate::Delay => self.push(at + self.latency * 3, to, from, &data[..t.len]),
                    }
                    self.buf = data;
                }
            }
            while self.in_flight.peek().is_some_and(|Reverse(p)| p.at <= self.now) {
                let Some(Reverse(p)) = self.in_flight.pop() else {
                    break;
                };
                if self.trace {
                    match crate::wire::Packet::parse_unverified(&p.data) {
                        Ok(pk) => eprintln!(
                            "{:>12} {} -> {}: {:?} psn {} aeth {:?} reth {:?} len {}",
                            self.now.as_nanos(),
                            p.from.ip(),
                            p.to,
                            pk.headers.bth.opcode,
                            pk.headers.bth.psn,
                            pk.headers.aeth.map(|a| a.syndrome),
                            pk.headers.reth.map(|r| r.dma_len),
                            pk.payload.len()
                        ),
                        Err(e) => eprintln!("{:>12} {} -> {}: {e}", self.now.as_nanos(), p.from.ip(), p.to),
                    }
                }
                self.engines[p.to].handle_datagram(self.now, p.from, &p.data);
                self.delivered += 1;
                self.spare.push(p.data);
                moved = true;
            }
            if moved {
                continue;
            }
            let next_packet = self.in_flight.peek().map(|Reverse(p)| p.at);
            let next_timer = self.engines.iter().filter_map(|e| e.poll_timeout()).min();
            let next = match (next_packet, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => return done(self),
                },
            };
            if next > end {
                self.now = end;
                return done(self);
            }
            // A timer due now that changed nothing must not stall the clock.
            self.now = self.now.max(next).max(self.now + Duration::from_nanos(1));
        }
    }

    /// When a datagram of `len` bytes that engine `i` sends now has left its
    /// link: now without a rate, else after the datagrams before it and its
    /// own length at the rate.
    fn departure(&mut self, i: usize, len: usize) -> Time {
        let Some(rate) = self.rate.filter(|&r| r > 0) else {
            return self.now;
        };
        if self.busy_until.len() < self.engines.len() {
            self.busy_until.resize(self.engines.len(), Time::ZERO);
        }
        let start = self.busy_until[i].max(self.now);
        let nanos = (len as u64).saturating_mul(1_000_000_000) / rate;
        let done = start + Duration::from_nanos(nanos);
        self.busy_until[i] = done;
        done
    }

    /// Runs until nothing is left to happen or `limit` passes.
    pub fn drive(&mut self, limit: Duration) {
        self.run_until(limit, |_| false);
    }
}
