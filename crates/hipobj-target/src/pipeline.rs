//! The data mover both server paths share: a transfer in chunks through a
//! small ring of registered bounce slots, up to one work request per slot
//! in flight on one RC QP.
//!
//! - GET: the source fills a free slot in place (no scratch copy) while the
//!   WRITEs of earlier slots are on the wire; each slot is posted as soon as
//!   it is full, as a WRITE WITH IMMEDIATE whose immediate value names its
//!   place in the transfer (`hipobj_proto::landed`), so the client counts
//!   every byte that lands.
//! - PUT: a READ is posted into every free slot; as each completes, in
//!   order, the sink takes the slot's bytes in place while the later READs
//!   run, and the slot is posted again for the next chunk.
//!
//! Memory is the ring, whatever the transfer's length: `slots × chunk`.
//!
//! On any failure the mover leaves nothing of this transfer outstanding
//! when it returns where it can: after a store error it waits for the work
//! requests already posted (the QP stays usable when they all succeed);
//! after an RDMA or local error it moves the QP to ERROR, which flushes
//! every outstanding request, and collects those flush completions.
//! [`Outcome::drained`] says whether that worked; only then may the slots'
//! buffers be used again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::{
    CompletionQueue, QpAttr, QpAttrMask, QpState, QueuePair, SendOp, SendWr, VerbsError, WcStatus,
    WorkCompletion,
};

/// How long the flush completions of a QP moved to ERROR may take to show:
/// the NIC produces them locally, with no traffic.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The QP a transfer runs on.
pub(crate) struct Wire<'a> {
    pub qp: &'a dyn QueuePair,
    pub cq: &'a dyn CompletionQueue,
    /// The next work request id (ids only grow on a QP, across transfers).
    pub next_wr: &'a mut u64,
    /// How long the transfer may go without a completion.
    pub idle_timeout: Duration,
    /// When the whole transfer must be done, if ever.
    pub deadline: Option<Instant>,
}

/// The bounce memory: `slots` ranges of `chunk` bytes, each (buffer index,
/// offset in that buffer), inside `buffers`.
pub(crate) struct Ring<'a> {
    pub buffers: &'a mut [RegisteredBuffer],
    pub slots: Vec<(usize, usize)>,
    pub chunk: usize,
}

impl<'a> Ring<'a> {
    /// One slot per buffer, each a whole buffer of `chunk` bytes.
    pub(crate) fn per_buffer(buffers: &'a mut [RegisteredBuffer], chunk: usize) -> Self {
        let slots = (0..buffers.len()).map(|i| (i, 0)).collect();
        Self {
            buffers,
            slots,
            chunk,
        }
    }

    /// `n` slots of `chunk` bytes inside one buffer (of at least `n × chunk`).
    pub(crate) fn split(buffers: &'a mut [RegisteredBuffer], n: usize, chunk: usize) -> Self {
        let slots = (0..n).map(|i| (0, i * chunk)).collect();
        Self {
            buffers,
            slots,
            chunk,
        }
    }
}

/// Fills a GET's chunk at an offset of the transfer, in place.
pub(crate) type Fill<'a, E> = dyn FnMut(u64, &mut [u8]) -> Result<(), E> + 'a;
/// Takes a PUT's chunk read at an offset of the transfer, in place.
pub(crate) type Drain<'a, E> = dyn FnMut(u64, &[u8]) -> Result<(), E> + 'a;

/// Which way the bytes flow, and the caller's half of each chunk.
pub(crate) enum Flow<'a, E> {
    /// RDMA WRITE from the source, the last WRITE a WRITE WITH IMMEDIATE
    /// carrying `imm`: a GET of either protocol, in one chunk (one WRITE
    /// WITH IMMEDIATE) when its client counts what landed.
    Write { fill: &'a mut Fill<'a, E>, imm: u32 },
    /// RDMA READ into the sink.
    Read { drain: &'a mut Drain<'a, E> },
}

/// Why a transfer failed.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// The source or sink failed.
    Store(E),
    /// A work request completed in error (the peer's end failed).
    Rdma(String),
    /// No completion came in time.
    Timeout(String),
    /// A local verbs call failed.
    Local(VerbsError),
}

/// How a transfer ended.
pub(crate) struct Outcome<E> {
    pub result: Result<(), Failure<E>>,
    /// Every work request of the transfer completed successfully: the QP
    /// can carry the next transfer.
    pub qp_usable: bool,
    /// No work request of the transfer is outstanding: the ring's buffers
    /// may be reused.
    pub drained: bool,
    /// The most work requests this transfer had posted and not yet
    /// completed at once.
    pub peak_in_flight: usize,
}

struct Posted {
    wr_id: u64,
    slot: usize,
    off: u64,
    len: usize,
    done: bool,
}

struct Mover<'w, 'r, 'd, E> {
    wire: Wire<'w>,
    ring: Ring<'r>,
    dir: Flow<'d, E>,
    remote_addr: u64,
    rkey: u32,
    len: u64,
    free: Vec<usize>,
    posted: VecDeque<Posted>,
    peak: usize,
    // Whether the QP has been moved to ERROR (or went there by itself).
    broken: bool,
}

/// Moves `len` bytes between the ring and the peer's memory at
/// `remote_addr` (key `rkey`) on `wire`. A WRITE of zero bytes is one
/// empty WRITE WITH IMMEDIATE.
pub(crate) fn transfer<E>(
    wire: Wire<'_>,
    ring: Ring<'_>,
    dir: Flow<'_, E>,
    remote_addr: u64,
    rkey: u32,
    len: u64,
) -> Outcome<E> {
    let free = (0..ring.slots.len()).rev().collect();
    let mut m = Mover {
        wire,
        ring,
        dir,
        remote_addr,
        rkey,
        len,
        free,
        posted: VecDeque::new(),
        peak: 0,
        broken: false,
    };
    let result = m.run();
    let drained = match &result {
        Ok(()) => true,
        Err(Failure::Store(_)) => m.settle(),
        Err(_) => m.abort(),
    };
    Outcome {
        qp_usable: result.is_ok() || (drained && !m.broken),
        result,
        drained,
        peak_in_flight: m.peak,
    }
}

impl<E> Mover<'_, '_, '_, E> {
    fn run(&mut self) -> Result<(), Failure<E>> {
        if self.ring.slots.is_empty() || self.ring.chunk == 0 {
            return Err(Failure::Local(VerbsError::new(
                "post_send",
                hipobj_platform::VerbsErrorKind::InvalidArgument,
                "a transfer needs at least one bounce slot",
            )));
        }
        let write = matches!(self.dir, Flow::Write { .. });
        let mut next = 0u64;
        // A GET of zero bytes still sends one WRITE WITH IMMEDIATE, empty.
        let mut proof_due = write;
        let mut wcs = vec![WorkCompletion::EMPTY; self.ring.slots.len()];
        let mut last_progress = Instant::now();
        loop {
            while next < self.len || proof_due {
                let Some(slot) = self.free.pop() else { break };
                let n = (self.len - next).min(self.ring.chunk as u64) as usize;
                let last = next + n as u64 == self.len;
                // The completion timeout runs from the post, not from the
                // fill before it: a store slow to fill a staged GET is not
                // a peer that stopped answering.
                let idle = self.posted.is_empty();
                self.post(slot, next, n)?;
                if idle {
                    last_progress = Instant::now();
                }
                if write && last {
                    proof_due = false;
                }
                next += n as u64;
            }
            if self.posted.is_empty() {
                return Ok(());
            }
            let got = self.poll(&mut wcs, &mut last_progress)?;
            // Every completion of the batch is marked before any error is
            // returned: they are off the CQ now, and the drain after a
            // failure must not wait for them.
            let mut first_error = Ok(());
            for wc in &wcs[..got] {
                let r = self.complete(wc);
                if first_error.is_ok() {
                    first_error = r;
                }
            }
            first_error?;
            self.retire()?;
        }
    }

    /// Fills (GET) and posts one work request for `n` bytes at offset
    /// `off` from `slot`.
    #[allow(unsafe_code)]
    fn post(&mut self, slot: usize, off: u64, n: usize) -> Result<(), Failure<E>> {
        let (b, at) = self.ring.slots[slot];
        let buf = &mut self.ring.buffers[b];
        if let Flow::Write { fill, .. } = &mut self.dir
            && n > 0
        {
            // SAFETY: `slot` came from the free list, where a slot goes
            // only after its request completed (`retire`), and its request
            // is posted below, after the fill: nothing is in flight on it.
            unsafe { buf.with_bytes_mut(at, n, |data| fill(off, data)) }
                .ok_or_else(|| Failure::Local(outside()))?
                .map_err(Failure::Store)?;
        }
        let sge = buf.sge(at, n as u32).ok_or_else(|| Failure::Local(outside()))?;
        let remote_addr = self.remote_addr.wrapping_add(off);
        let rkey = self.rkey;
        let last = off + n as u64 == self.len;
        let op = match &self.dir {
            // The proof may be posted while earlier WRITEs are still in
            // flight: an RC responder executes one QP's requests in PSN
            // order, so when the WRITE WITH IMMEDIATE completes at the
            // client every earlier WRITE's bytes are placed; and if an
            // earlier WRITE fails, the QPs go to ERROR and this one is
            // flushed, never executed, so no proof without its bytes.
            Flow::Write { imm, .. } if last => SendOp::WriteWithImm {
                remote_addr,
                rkey,
                imm: *imm,
            },
            Flow::Write { .. } => SendOp::Write { remote_addr, rkey },
            Flow::Read { .. } => SendOp::Read { remote_addr, rkey },
        };
        let wr_id = *self.wire.next_wr;
        *self.wire.next_wr += 1;
        let sges = [sge];
        self.wire
            .qp
            .post_send(&SendWr {
                wr_id,
                op,
                sg_list: if n == 0 { &[] } else { &sges },
                signaled: true,
            })
            .map_err(Failure::Local)?;
        self.posted.push_back(Posted {
            wr_id,
            slot,
            off,
            len: n,
            done: false,
        });
        self.peak = self.peak.max(self.posted.len());
        Ok(())
    }

    /// Waits for completions; fills `wcs` and says how many.
    fn poll(&mut self, wcs: &mut [WorkCompletion], last_progress: &mut Instant) -> Result<usize, Failure<E>> {
        loop {
            let n = self.wire.cq.poll(wcs).map_err(Failure::Local)?;
            if n > 0 {
                *last_progress = Instant::now();
                return Ok(n);
            }
            let mut until = *last_progress + self.wire.idle_timeout;
            if let Some(d) = self.wire.deadline {
                until = until.min(d);
            }
            let now = Instant::now();
            if now >= until {
                return Err(Failure::Timeout(format!(
                    "no completion within {} ms",
                    (until - *last_progress).as_millis()
                )));
            }
            self.wire
                .cq
                .wait((until - now).min(Duration::from_millis(100)))
                .map_err(Failure::Local)?;
        }
    }

    /// Marks one completion's request done; an error status fails.
    fn complete(&mut self, wc: &WorkCompletion) -> Result<(), Failure<E>> {
        let known = self.posted.iter_mut().find(|p| p.wr_id == wc.wr_id && !p.done);
        if let Some(p) = known {
            p.done = true;
        }
        if wc.status != WcStatus::Success {
            self.broken = true;
            return Err(Failure::Rdma(format!(
                "work request {} completed with {:?} (vendor error {:#x})",
                wc.wr_id, wc.status, wc.vendor_err
            )));
        }
        Ok(())
    }

    /// Frees the slots of the oldest requests that are done, in order; a
    /// READ's bytes go to the sink first.
    #[allow(unsafe_code)]
    fn retire(&mut self) -> Result<(), Failure<E>> {
        while self.posted.front().is_some_and(|p| p.done) {
            let Some(p) = self.posted.pop_front() else { break };
            let result = match &mut self.dir {
                Flow::Read { drain } if p.len > 0 => {
                    let (b, at) = self.ring.slots[p.slot];
                    // SAFETY: `p` is done (its READ completed) and its slot
                    // is freed only after this drain: nothing is in flight
                    // on the slot's range.
                    unsafe { self.ring.buffers[b].with_bytes_mut(at, p.len, |data| drain(p.off, data)) }
                        .ok_or_else(|| Failure::Local(outside()))
                        .and_then(|r| r.map_err(Failure::Store))
                }
                _ => Ok(()),
            };
            self.free.push(p.slot);
            result?;
        }
        Ok(())
    }

    /// After a store error: waits for the requests already posted. True
    /// when they all completed (successfully or not: nothing outstanding);
    /// a failed one, or none in time, breaks the QP ([`abort`](Self::abort)).
    fn settle(&mut self) -> bool {
        let mut wcs = vec![WorkCompletion::EMPTY; self.ring.slots.len().max(1)];
        let mut last_progress = Instant::now();
        while self.posted.iter().any(|p| !p.done) {
            let ok = self.poll(&mut wcs, &mut last_progress).map(|got| {
                let mut ok = true;
                for wc in &wcs[..got] {
                    ok &= self.complete(wc).is_ok();
                }
                ok
            });
            if !matches!(ok, Ok(true)) {
                return self.abort();
            }
        }
        self.posted.clear();
        true
    }

    /// After an RDMA or local failure: moves the QP to ERROR, which flushes
    /// every outstanding request, and collects the flushes. True when every
    /// request of this transfer is accounted for.
    fn abort(&mut self) -> bool {
        self.broken = true;
        if self.posted.iter().all(|p| p.done) {
            self.posted.clear();
            return true;
        }
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        if self.wire.qp.modify(&attr, QpAttrMask::STATE).is_err() {
            return false;
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        let mut wcs = vec![WorkCompletion::EMPTY; self.ring.slots.len().max(1)];
        while self.posted.iter().any(|p| !p.done) {
            let Ok(got) = self.wire.cq.poll(&mut wcs) else {
                return false;
            };
            for wc in &wcs[..got] {
                if let Some(p) = self.posted.iter_mut().find(|p| p.wr_id == wc.wr_id) {
                    p.done = true;
                }
            }
            if got == 0 {
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                if self
                    .wire
                    .cq
                    .wait((deadline - now).min(Duration::from_millis(100)))
                    .is_err()
                {
                    return false;
                }
            }
        }
        self.posted.clear();
        true
    }
}

fn outside() -> VerbsError {
    VerbsError::new(
        "post_send",
        hipobj_platform::VerbsErrorKind::InvalidArgument,
        "a chunk outside its bounce slot, or a bounce buffer with remote access",
    )
}
