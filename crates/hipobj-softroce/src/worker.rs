//! The thread per device that plays the NIC's DMA engine.
//!
//! It owns the socket and the clock and pumps the engine: receive a batch
//! with `recvmmsg`, hand every packet to the engine (which writes payloads
//! straight into registered memory; a UDP GRO datagram is split back into
//! its packets, and the whole batch is handled under one lock before anyone
//! is woken), fire due timers, collect up to a batch of datagrams to send,
//! send them with `sendmmsg` (runs of equal-size packets as UDP GSO
//! super-packets, [`udp::GsoSender`]), and when there is
//! nothing to do, sleep in `ppoll` on the socket and an eventfd that
//! `post_send` signals, with the engine's next timer as the timeout. The
//! responder side of every WRITE and READ runs here, never on application
//! threads.

use std::net::{SocketAddrV4, UdpSocket};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::{Counters, Engine, Time};
use crate::link::faults::{Fate, FaultConfig, FaultInjector};
use crate::link::pcap::PcapWriter;
use crate::link::udp::{self, BATCH, GsoSender, RawSocket, RxBatch, SLOT, Waker};
use crate::wire::PseudoHeader;

/// What the application's threads and the worker share.
#[derive(Debug)]
pub(crate) struct Nic {
    engine: Mutex<Engine>,
    pub waker: Waker,
    stop: AtomicBool,
    epoch: Instant,
    /// Socket errors other than "nothing to read".
    pub link_errors: AtomicU64,
}

impl Nic {
    pub(crate) fn new(engine: Engine, waker: Waker) -> Self {
        Self {
            engine: Mutex::new(engine),
            waker,
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            link_errors: AtomicU64::new(0),
        }
    }

    /// The engine. A panic while it was held leaves it as it was; the RC
    /// state stays consistent enough to fail work requests, so poisoning is
    /// ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// How the device reaches the wire.
#[derive(Debug)]
pub(crate) enum Link {
    /// A UDP socket at the device's address and port 4791: the kernel
    /// builds the IPv4 and UDP headers (identification 0 and DF, which the
    /// ICRC assumes) and hides those it receives.
    Udp(UdpSocket),
    /// A raw IPv4 socket: the NIC sends the headers it sealed under, and
    /// checks each received ICRC against the headers that arrived.
    Raw(RawSocket),
}

impl AsFd for Link {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Link::Udp(s) => s.as_fd(),
            Link::Raw(s) => s.as_fd(),
        }
    }
}

impl Link {
    fn send(&self, gso: &mut GsoSender, items: &[(&[u8], SocketAddrV4)]) -> std::io::Result<()> {
        match self {
            Link::Udp(s) => gso.send(s, items),
            Link::Raw(s) => s.send(items),
        }
    }
}

/// What shapes a worker's loop (from [`crate::SoftConfig`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkerOpts {
    pub faults: FaultConfig,
    pub gso: bool,
    pub stats: Option<Duration>,
    pub busy_poll: Duration,
}

/// The running worker; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct Worker {
    nic: Arc<Nic>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    pub(crate) fn spawn(
        nic: Arc<Nic>,
        sock: Link,
        opts: WorkerOpts,
        pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
        name: String,
    ) -> std::io::Result<Self> {
        let n = nic.clone();
        let stats = opts.stats.map(|every| Stats::new(name.clone(), every));
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&n, &sock, opts, pcap, stats))?;
        Ok(Self {
            nic,
            handle: Some(handle),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.nic.stop.store(true, Ordering::SeqCst);
        self.nic.waker.wake();
        if let Some(h) = self.handle.take() {
            // A panic in the worker has already been reported on stderr.
            let _ = h.join();
        }
    }
}

type TapWriter = PcapWriter<std::io::BufWriter<std::fs::File>>;
type Tap = Option<TapWriter>;

/// `HIPOBJ_SOFTROCE_STATS`: the engine's counters on stderr, every `every`
/// while they change.
struct Stats {
    name: String,
    every: Duration,
    next: Instant,
    last: Counters,
}

impl Stats {
    fn new(name: String, every: Duration) -> Self {
        Self {
            name,
            every,
            next: Instant::now() + every,
            last: Counters::default(),
        }
    }

    /// Writes `c` if it is time and they changed.
    fn tick(&mut self, c: Counters, force: bool) {
        let now = Instant::now();
        if !force && now < self.next {
            return;
        }
        self.next = now + self.every;
        if c != self.last || force {
            self.last = c;
            eprintln!("{} counters: {c:?}", self.name);
        }
    }
}

/// What the tap records of a packet the UDP link received: the datagram
/// index, the packet's bytes within it and the identification its ICRC
/// verified under.
type RxNote = (usize, Range<usize>, u16);

/// Records in the tap what the link just received: on the UDP link each
/// packet the engine took, as `notes` lists them (and empties it); on the raw
/// link each datagram `ours` marks as the engine's.
fn record_received(
    p: &mut TapWriter,
    sock: &Link,
    local: SocketAddrV4,
    rx: &RxBatch,
    notes: &mut Vec<RxNote>,
    ours: &[bool],
) {
    for (i, seg, id) in notes.drain(..) {
        let (data, from) = rx.get(i);
        let pseudo = PseudoHeader {
            src: from,
            dst: local,
        };
        let _ = p.record_with_id(&pseudo, &data[seg], id);
    }
    if matches!(sock, Link::Raw(_)) {
        for (i, _) in ours.iter().enumerate().filter(|(_, m)| **m) {
            let _ = p.record_ip(rx.get(i).0);
        }
    }
}

/// One round of transmission: the engine's new packets and those the fault
/// injector held back the round before.
struct Outgoing<'a> {
    /// The engine's packets, one to a `SLOT` of `tx`, each `meta`'s
    /// length long, to its destination.
    tx: &'a [u8],
    meta: &'a [(usize, SocketAddrV4)],
    held: &'a [(Vec<u8>, SocketAddrV4)],
}

impl Outgoing<'_> {
    /// Sends the batch as the injector decides each packet's fate (a packet
    /// it delays goes into `delayed`, for the next round), then the held
    /// packets, recording all of it in the tap.
    fn send(
        &self,
        sock: &Link,
        gso: &mut GsoSender,
        injector: &mut FaultInjector,
        delayed: &mut Vec<(Vec<u8>, SocketAddrV4)>,
        pcap: Option<&mut TapWriter>,
        local: SocketAddrV4,
    ) -> std::io::Result<()> {
        let mut items: Vec<(&[u8], SocketAddrV4)> = Vec::with_capacity(2 * BATCH);
        for (i, &(len, dst)) in self.meta.iter().enumerate() {
            let data = &self.tx[i * SLOT..i * SLOT + len];
            match injector.fate() {
                Fate::Deliver => items.push((data, dst)),
                Fate::Drop => {}
                Fate::Duplicate => {
                    items.push((data, dst));
                    items.push((data, dst));
                }
                Fate::Delay => delayed.push((data.to_vec(), dst)),
            }
        }
        // Packets held back from the batch before go out after this one.
        items.extend(self.held.iter().map(|(d, a)| (d.as_slice(), *a)));
        if let Some(p) = pcap {
            record_sent(p, local, &items, matches!(sock, Link::Udp(_)) && gso.enabled());
        }
        sock.send(gso, &items)
    }
}

fn run(nic: &Nic, sock: &Link, opts: WorkerOpts, mut pcap: Tap, mut stats: Option<Stats>) {
    let mut gso = GsoSender::new(opts.gso);
    let local = nic.lock().config().local;
    let mut rx = RxBatch::default();
    let mut tx = vec![0u8; SLOT * BATCH];
    let mut tx_meta = [(0usize, local); BATCH];
    let mut injector = FaultInjector::new(opts.faults);
    let mut delayed: Vec<(Vec<u8>, SocketAddrV4)> = Vec::new();
    let mut held: Vec<(Vec<u8>, SocketAddrV4)> = Vec::new();
    let mut ours = [false; BATCH];
    let mut notes: Vec<RxNote> = Vec::new();
    let mut last_busy = Instant::now();
    while !nic.stop.load(Ordering::Relaxed) {
        let n = rx.recv(sock).unwrap_or_else(|_| {
            nic.link_errors.fetch_add(1, Ordering::Relaxed);
            0
        });
        notes.clear();
        let (m, next_timer, now) = {
            let mut engine = nic.lock();
            let now = nic.now();
            for (i, mine) in ours.iter_mut().enumerate().take(n) {
                let (data, from) = rx.get(i);
                *mine = match sock {
                    Link::Udp(_) => {
                        let tap = pcap.is_some();
                        engine.handle_gro(now, from, data, rx.segment_size(i), &mut |seg, id| {
                            if tap {
                                notes.push((i, seg, id));
                            }
                        });
                        true
                    }
                    Link::Raw(_) => engine.handle_ipv4(now, data),
                };
            }
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
            }
            let mut m = 0;
            while m < BATCH {
                let slot = &mut tx[m * SLOT..(m + 1) * SLOT];
                match engine.poll_transmit(now, slot) {
                    Some(t) => {
                        tx_meta[m] = (t.len, t.dst);
                        m += 1;
                    }
                    None => break,
                }
            }
            if let Some(st) = stats.as_mut() {
                st.tick(engine.counters(), false);
            }
            (m, engine.poll_timeout(), now)
        };
        if let Some(p) = pcap.as_mut() {
            record_received(p, sock, local, &rx, &mut notes, &ours[..n]);
        }
        if m > 0 || !held.is_empty() {
            let out = Outgoing {
                tx: &tx,
                meta: &tx_meta[..m],
                held: &held,
            };
            if out
                .send(sock, &mut gso, &mut injector, &mut delayed, pcap.as_mut(), local)
                .is_err()
            {
                nic.link_errors.fetch_add(1, Ordering::Relaxed);
            }
            held.clear();
            std::mem::swap(&mut held, &mut delayed);
        }
        // Busy polling: for `busy_poll` after the last datagram in or out,
        // look again at once instead of sleeping. A wake-up from `ppoll`
        // costs tens of microseconds on a virtual machine's idle core, and
        // a loss costs go-back-N a round trip that holds two of them.
        if n > 0 || m > 0 {
            last_busy = Instant::now();
        } else if held.is_empty() && last_busy.elapsed() < opts.busy_poll {
            std::hint::spin_loop();
            continue;
        }
        if n == 0 && m == 0 && held.is_empty() {
            if let Some(p) = pcap.as_mut() {
                let _ = p.flush();
            }
            let mut timeout = next_timer.map(|t| t.saturating_since(now));
            if let Some(st) = stats.as_ref() {
                timeout = Some(timeout.map_or(st.every, |t| t.min(st.every)));
            }
            if udp::wait(sock, &nic.waker, timeout).is_err() {
                nic.link_errors.fetch_add(1, Ordering::Relaxed);
            }
            nic.waker.drain();
        }
    }
    if let Some(p) = pcap.as_mut() {
        let _ = p.flush();
    }
    if let Some(st) = stats.as_mut() {
        st.tick(nic.lock().counters(), true);
    }
}

/// Records sent datagrams in the tap in the order and with the headers
/// they leave under: with GSO, each QP's together, and segment `k` of a
/// run carries identification `k` and the ICRC [`udp::GsoSender`] gives it.
fn record_sent(p: &mut TapWriter, local: SocketAddrV4, items: &[(&[u8], SocketAddrV4)], gso: bool) {
    let grouped;
    let (items, runs) = if gso {
        grouped = udp::group_by_qp(items);
        (grouped.as_slice(), udp::gso_runs(&grouped))
    } else {
        (items, (0..items.len()).map(|i| i..i + 1).collect())
    };
    let mut deltas = crate::wire::icrc::SegmentDeltas::default();
    let mut buf = Vec::new();
    for run in runs {
        for (k, (data, dst)) in items[run].iter().enumerate() {
            let pseudo = PseudoHeader {
                src: local,
                dst: *dst,
            };
            buf.clear();
            buf.extend_from_slice(data);
            if let Some(body) = data.len().checked_sub(4) {
                buf[body..].copy_from_slice(&deltas.icrc_for(k as u16, data));
            }
            let _ = p.record_with_id(&pseudo, &buf, k as u16);
        }
    }
}
