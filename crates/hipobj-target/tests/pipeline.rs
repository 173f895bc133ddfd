//! The pipelined data path of `Target::serve` (issue #15), on the soft NIC
//! seen through a counting verbs layer of the test's own: how many send
//! work requests the server has posted and not yet seen complete (and the
//! peak), and how much memory the server has registered (and the peak).
//! Those counts come from the verbs seam, not from the target's own
//! bookkeeping, so they hold it to what it claims:
//!
//! - a PUT keeps more than one READ in flight, exactly `pipeline_depth` at
//!   the peak, in no more than `depth × chunk` bytes of bounce memory for an
//!   object many times that, every byte checked;
//! - a GET of many chunks is one WRITE WITH IMMEDIATE from one staging
//!   buffer of its length (docs/protocol.md §2), the client's proof;
//! - a failure (the store at chunk k, a work request completing in error)
//!   fails the call with nothing outstanding, and the next transfer works;
//! - a ranged GET across many chunks ends in the proof, as a zero-byte one
//!   does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hipobj_platform::fake::ClientQp;
use hipobj_platform::memory::MemRegion;
use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, DeviceAttr, Gid, MemoryRegion, NoTopology, PortAttr,
    ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr, SendOp, SendWr, Verbs,
    VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_proto::landed::Tally;
use hipobj_proto::{Reply, Token};
use hipobj_softroce::SoftVerbs;
use hipobj_target::{Answer, Caller, Request, Selected, Sink, Source, Target, TargetConfig, TargetError};

// ---- the counting verbs layer -------------------------------------------

/// What the server's verbs saw.
#[derive(Debug, Default)]
struct Counts {
    /// Signaled send work requests posted and not yet polled.
    outstanding: AtomicI64,
    peak_outstanding: AtomicI64,
    /// Send work requests posted, ever.
    posts: AtomicU64,
    /// Bytes registered now, and the most at once.
    registered: AtomicI64,
    peak_registered: AtomicI64,
    /// The post (1-based, counting from `posts` when set) whose rkey is
    /// spoiled, so that it completes in error at the peer; 0: none.
    spoil_post: AtomicU64,
}

impl Counts {
    fn reset_peaks(&self) {
        self.peak_outstanding
            .store(self.outstanding.load(Ordering::SeqCst), Ordering::SeqCst);
        self.peak_registered
            .store(self.registered.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Spoils the `k`th send work request posted from now on (1-based).
    fn spoil(&self, k: u64) {
        self.spoil_post
            .store(self.posts.load(Ordering::SeqCst) + k, Ordering::SeqCst);
    }
}

type CqMap = Arc<Mutex<Vec<(usize, Arc<dyn CompletionQueue>)>>>;

#[derive(Debug)]
struct CountingVerbs {
    inner: Arc<SoftVerbs>,
    counts: Arc<Counts>,
    cqs: CqMap,
}

#[derive(Debug)]
struct CountingDevice {
    inner: Arc<dyn Device>,
    counts: Arc<Counts>,
    cqs: CqMap,
}

#[derive(Debug)]
struct CountingPd {
    inner: Arc<dyn ProtectionDomain>,
    counts: Arc<Counts>,
    cqs: CqMap,
}

#[derive(Debug)]
struct CountingMr {
    inner: Box<dyn MemoryRegion>,
    counts: Arc<Counts>,
}

#[derive(Debug)]
struct CountingQp {
    inner: Box<dyn QueuePair>,
    counts: Arc<Counts>,
}

#[derive(Debug)]
struct CountingCq {
    inner: Arc<dyn CompletionQueue>,
    counts: Arc<Counts>,
}

impl Verbs for CountingVerbs {
    fn backend(&self) -> &'static str {
        "counting"
    }
    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        self.inner.device_names()
    }
    fn open_device(&self, name: &str) -> Result<Arc<dyn Device>, VerbsError> {
        Ok(Arc::new(CountingDevice {
            inner: self.inner.open_device(name)?,
            counts: self.counts.clone(),
            cqs: self.cqs.clone(),
        }))
    }
}

impl Device for CountingDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn attr(&self) -> Result<DeviceAttr, VerbsError> {
        self.inner.attr()
    }
    fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        self.inner.query_port(port)
    }
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        self.inner.query_gid(port, index)
    }
    fn supports_dmabuf(&self) -> bool {
        false
    }
    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        Ok(Arc::new(CountingPd {
            inner: self.inner.alloc_pd()?,
            counts: self.counts.clone(),
            cqs: self.cqs.clone(),
        }))
    }
    fn create_cq(&self, cqe: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        let inner = self.inner.create_cq(cqe)?;
        let outer: Arc<dyn CompletionQueue> = Arc::new(CountingCq {
            inner: inner.clone(),
            counts: self.counts.clone(),
        });
        let key = Arc::as_ptr(&outer) as *const u8 as usize;
        let mut cqs = self.cqs.lock().unwrap();
        cqs.retain(|(_, c)| Arc::strong_count(c) > 1);
        cqs.push((key, inner));
        Ok(outer)
    }
}

impl CountingPd {
    fn inner_cq(&self, cq: &Arc<dyn CompletionQueue>) -> Arc<dyn CompletionQueue> {
        let key = Arc::as_ptr(cq) as *const u8 as usize;
        let cqs = self.cqs.lock().unwrap();
        let found = cqs.iter().find(|(k, _)| *k == key).expect("a CQ of this layer");
        found.1.clone()
    }
}

impl ProtectionDomain for CountingPd {
    fn reg_mr(&self, region: MemRegion, access: AccessFlags) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        let inner = self.inner.reg_mr(region, access)?;
        let now = self
            .counts
            .registered
            .fetch_add(region.len() as i64, Ordering::SeqCst)
            + region.len() as i64;
        self.counts.peak_registered.fetch_max(now, Ordering::SeqCst);
        Ok(Box::new(CountingMr {
            inner,
            counts: self.counts.clone(),
        }))
    }
    fn reg_dmabuf_mr(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn MemoryRegion>, VerbsError> {
        self.inner.reg_dmabuf_mr(fd, offset, len, iova, access)
    }
    fn create_qp(&self, init: &QpInitAttr) -> Result<Box<dyn QueuePair>, VerbsError> {
        let attr = QpInitAttr {
            send_cq: self.inner_cq(&init.send_cq),
            recv_cq: self.inner_cq(&init.recv_cq),
            ..init.clone()
        };
        Ok(Box::new(CountingQp {
            inner: self.inner.create_qp(&attr)?,
            counts: self.counts.clone(),
        }))
    }
}

impl Drop for CountingMr {
    fn drop(&mut self) {
        self.counts
            .registered
            .fetch_sub(self.inner.len() as i64, Ordering::SeqCst);
    }
}

impl MemoryRegion for CountingMr {
    fn lkey(&self) -> u32 {
        self.inner.lkey()
    }
    fn rkey(&self) -> u32 {
        self.inner.rkey()
    }
    fn addr(&self) -> u64 {
        self.inner.addr()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

impl QueuePair for CountingQp {
    fn qp_num(&self) -> u32 {
        self.inner.qp_num()
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        self.inner.modify(attr, mask)
    }
    fn state(&self) -> Result<QpState, VerbsError> {
        self.inner.state()
    }
    fn post_send(&self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let n = self.counts.posts.fetch_add(1, Ordering::SeqCst) + 1;
        let mut wr = *wr;
        if n == self.counts.spoil_post.load(Ordering::SeqCst) {
            wr.op = match wr.op {
                SendOp::Write { remote_addr, rkey } => SendOp::Write {
                    remote_addr,
                    rkey: rkey ^ 0x00a5_5a00,
                },
                SendOp::WriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                } => SendOp::WriteWithImm {
                    remote_addr,
                    rkey: rkey ^ 0x00a5_5a00,
                    imm,
                },
                SendOp::Read { remote_addr, rkey } => SendOp::Read {
                    remote_addr,
                    rkey: rkey ^ 0x00a5_5a00,
                },
                other => other,
            };
        }
        self.inner.post_send(&wr)?;
        if wr.signaled {
            let now = self.counts.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
            self.counts.peak_outstanding.fetch_max(now, Ordering::SeqCst);
        }
        Ok(())
    }
    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.inner.post_recv(wr)
    }
}

impl CompletionQueue for CountingCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let n = self.inner.poll(out)?;
        // The target's QPs post no receives: every completion is a send's.
        self.counts.outstanding.fetch_sub(n as i64, Ordering::SeqCst);
        Ok(n)
    }
    fn wait(&self, timeout: Duration) -> Result<bool, VerbsError> {
        self.inner.wait(timeout)
    }
}

// ---- the rig -------------------------------------------------------------

use support::soft;

const CHUNK: usize = 256 << 10;
const DEPTH: usize = 3;
/// 32 MiB: 128 chunks, about 43 × depth × chunk.
const BIG: usize = 32 << 20;

struct Rig {
    target: Target,
    counts: Arc<Counts>,
}

impl Rig {
    fn new(name: &str) -> Self {
        Self::with(
            name,
            TargetConfig {
                chunk: CHUNK,
                pipeline_depth: DEPTH,
                completion_timeout: Duration::from_secs(10),
                ..TargetConfig::default()
            },
        )
    }

    /// A target on a soft device called `name`, seen through the counting
    /// verbs layer.
    fn with(name: &str, config: TargetConfig) -> Self {
        let counts = Arc::new(Counts::default());
        let verbs = CountingVerbs {
            inner: soft(name),
            counts: counts.clone(),
            cqs: Arc::default(),
        };
        let target = Target::open(&verbs, &NoTopology, Some(name), config).unwrap();
        Self { target, counts }
    }

    /// A client QP (granting remote read and write) connected to a fresh
    /// binding of this target, signing with an access key of its own (the
    /// soft devices of one process share an address and number their QPs
    /// alike, so clients are told apart by key).
    fn client(&self, name: &str, len: usize) -> Client {
        let c = Client {
            inner: ClientQp::with_receives(
                soft(name),
                name,
                len,
                AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
                4,
            ),
            caller: Caller::key(name),
        };
        let token = c.token(len as u64);
        let reply = match self
            .target
            .serve(&c.caller, &token, Request::Get(&mut Pattern::new(0)))
        {
            Ok(Answer::Bind {
                reply,
                after_failure: None,
            }) => reply,
            other => panic!("expected a bind: {other:?}"),
        };
        c.connect(&reply);
        c
    }

    fn outstanding(&self) -> i64 {
        self.counts.outstanding.load(Ordering::SeqCst)
    }
}

struct Client {
    inner: ClientQp,
    caller: Caller,
}

impl std::ops::Deref for Client {
    type Target = ClientQp;
    fn deref(&self) -> &ClientQp {
        &self.inner
    }
}

impl Client {
    fn token(&self, len: u64) -> Token {
        support::token(self, len)
    }

    fn connect(&self, reply: &Reply) {
        support::connect(self, reply)
    }

    /// The next completion on the client QP, if one comes within a while.
    fn completion(&self, wait: Duration) -> Option<WorkCompletion> {
        support::completion(self, wait)
    }

    /// What a GET of `len` bytes landed, as the client counts it: every
    /// completion on the client QP (each must be a successful WRITE WITH
    /// IMMEDIATE) fed to the client's tally, the receives posted again.
    /// Returns the tally and how many WRITEs it counted.
    fn tally(&self, len: u64) -> (Tally, u32) {
        let mut tally = Tally::new(self.buf.mr().rkey(), len);
        let mut writes = 0;
        while let Some(wc) = self.completion(Duration::from_millis(if writes == 0 { 2000 } else { 50 })) {
            assert_eq!(
                (wc.status, wc.opcode),
                (WcStatus::Success, WcOpcode::RecvRdmaWithImm),
                "{wc:?}"
            );
            tally
                .add(wc.imm_data.unwrap(), wc.byte_len)
                .unwrap_or_else(|r| panic!("WRITE {writes}: {r}"));
            writes += 1;
            self.qp
                .post_recv(&RecvWr {
                    wr_id: 7,
                    sg_list: &[],
                })
                .unwrap();
        }
        (tally, writes)
    }

    /// The GET's proof: the one WRITE WITH IMMEDIATE of a GET of `len`
    /// bytes covers it; returns how many WRITEs there were.
    fn landed(&self, len: u64) -> u32 {
        let (tally, writes) = self.tally(len);
        tally.finish().unwrap_or_else(|r| panic!("{r} of {len}"));
        writes
    }
}

/// Byte `i` of the generated object: no two nearby chunks alike, so a chunk
/// landing at another's offset shows.
fn byte(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (i >> 18) as u8
}

/// An object of `len` generated bytes, held nowhere; fails at chunk
/// `fail_at` if set. Checks that it is read in order.
struct Pattern {
    len: u64,
    base: u64,
    partial: bool,
    next: u64,
    calls: u64,
    fail_at: Option<u64>,
    largest: usize,
}

impl Pattern {
    fn new(len: u64) -> Self {
        Self {
            len,
            base: 0,
            partial: false,
            next: 0,
            calls: 0,
            fail_at: None,
            largest: 0,
        }
    }
}

impl Source for Pattern {
    type Error = String;
    fn open(&mut self) -> Result<Selected, String> {
        Ok(Selected {
            len: self.len,
            partial: self.partial,
        })
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), String> {
        assert_eq!(off, self.next, "chunks read out of order");
        if self.fail_at == Some(self.calls) {
            return Err(format!("the disk failed at chunk {}", self.calls));
        }
        self.calls += 1;
        self.largest = self.largest.max(buf.len());
        for (j, b) in buf.iter_mut().enumerate() {
            *b = byte(self.base + off + j as u64);
        }
        self.next = off + buf.len() as u64;
        Ok(())
    }
}

/// A store that checks every byte as it arrives and keeps none; fails at
/// chunk `fail_at` if set.
#[derive(Default)]
struct Checker {
    opened: Option<u64>,
    next: u64,
    calls: u64,
    fail_at: Option<u64>,
    committed: bool,
    largest: usize,
}

impl Sink for Checker {
    type Error = String;
    fn open(&mut self, len: u64) -> Result<(), String> {
        self.opened = Some(len);
        Ok(())
    }
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), String> {
        assert_eq!(off, self.next, "chunks drained out of order");
        if self.fail_at == Some(self.calls) {
            return Err(format!("the disk filled at chunk {}", self.calls));
        }
        self.calls += 1;
        self.largest = self.largest.max(chunk.len());
        for (j, b) in chunk.iter().enumerate() {
            let i = off + j as u64;
            assert_eq!(*b, byte(i), "byte {i} of the PUT");
        }
        self.next = off + chunk.len() as u64;
        Ok(())
    }
    fn commit(&mut self) -> Result<(), String> {
        assert_eq!(Some(self.next), self.opened, "committed short");
        self.committed = true;
        Ok(())
    }
}

fn fill_client(c: &Client, len: usize) {
    let data: Vec<u8> = (0..len as u64).map(byte).collect();
    assert!(c.buf.write_at(0, &data));
}

fn check_client(c: &Client, base: u64, len: usize) {
    let mut got = vec![0u8; len];
    assert!(c.buf.read_at(0, &mut got));
    for (j, b) in got.iter().enumerate() {
        let i = base + j as u64;
        assert_eq!(*b, byte(i), "byte {j} of the GET (object byte {i})");
    }
}

fn done(a: Result<Answer, TargetError<String>>) -> (u16, u64) {
    match a {
        Ok(Answer::Done { status, bytes, .. }) => (status, bytes),
        other => panic!("not a success: {other:?}"),
    }
}

// ---- the tests -----------------------------------------------------------

/// A GET of many chunks is one WRITE from one staging buffer of its
/// length: the source fills it whole, then the WRITE WITH IMMEDIATE goes,
/// and the client's tally proves it.
#[test]
fn a_large_get_is_one_write_from_one_staging_buffer() {
    let rig = Rig::new("pipe-get-srv");
    let c = rig.client("pipe-get-cli", BIG);
    rig.counts.reset_peaks();
    let registered_before = rig.counts.registered.load(Ordering::SeqCst);
    let posts_before = rig.counts.posts.load(Ordering::SeqCst);
    let mut src = Pattern::new(BIG as u64);
    let a = rig
        .target
        .serve(&c.caller, &c.token(BIG as u64), Request::Get(&mut src));
    assert_eq!(done(a), (200, BIG as u64));
    assert_eq!(rig.outstanding(), 0, "a work request outstanding after the call");
    assert_eq!(
        rig.counts.posts.load(Ordering::SeqCst) - posts_before,
        1,
        "WRITEs posted"
    );
    let staged = rig.counts.peak_registered.load(Ordering::SeqCst) - registered_before;
    assert_eq!(staged, BIG as i64, "bytes registered to stage the GET");
    assert_eq!(src.calls, 1);
    assert_eq!(src.largest, BIG, "the source filled the staging buffer whole");
    assert_eq!(
        c.landed(BIG as u64),
        1,
        "one WRITE WITH IMMEDIATE the client counts"
    );
    check_client(&c, 0, BIG);
}

#[test]
fn a_large_put_keeps_depth_reads_in_flight_and_the_store_sees_every_byte_in_order() {
    let rig = Rig::new("pipe-put-srv");
    let c = rig.client("pipe-put-cli", BIG);
    fill_client(&c, BIG);
    rig.counts.reset_peaks();
    let registered_before = rig.counts.registered.load(Ordering::SeqCst);
    let mut sink = Checker::default();
    let a = rig
        .target
        .serve(&c.caller, &c.token(BIG as u64), Request::Put(&mut sink));
    assert_eq!(done(a), (200, BIG as u64));
    assert!(sink.committed);
    assert_eq!(sink.next, BIG as u64);
    assert_eq!(sink.largest, CHUNK);
    assert_eq!(rig.outstanding(), 0);
    assert_eq!(
        rig.counts.peak_outstanding.load(Ordering::SeqCst),
        DEPTH as i64,
        "READs in flight at once"
    );
    let bounce = rig.counts.peak_registered.load(Ordering::SeqCst) - registered_before;
    assert!(
        bounce <= (DEPTH * CHUNK) as i64,
        "{bounce} bytes of bounce memory"
    );
    assert!(
        c.completion(Duration::from_millis(50)).is_none(),
        "a PUT makes no completion at the client"
    );
}

/// The pool gives the ring back between transfers, and a GET's staging
/// buffer is kept: a second and third GET and PUT on the same target
/// register nothing new.
#[test]
fn transfers_reuse_the_pooled_ring() {
    let rig = Rig::new("pipe-pool-srv");
    let c = rig.client("pipe-pool-cli", 4 << 20);
    let len = 4u64 << 20;
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Get(&mut Pattern::new(len)))
        ),
        (200, len)
    );
    c.landed(len);
    fill_client(&c, len as usize);
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Put(&mut Checker::default()))
        ),
        (200, len)
    );
    let after_first = rig.counts.registered.load(Ordering::SeqCst);
    rig.counts.reset_peaks();
    for _ in 0..2 {
        assert_eq!(
            done(
                rig.target
                    .serve(&c.caller, &c.token(len), Request::Get(&mut Pattern::new(len)))
            ),
            (200, len)
        );
        c.landed(len);
        let mut sink = Checker::default();
        fill_client(&c, len as usize);
        assert_eq!(
            done(
                rig.target
                    .serve(&c.caller, &c.token(len), Request::Put(&mut sink))
            ),
            (200, len)
        );
    }
    assert_eq!(rig.counts.peak_registered.load(Ordering::SeqCst), after_first);
}

#[test]
fn a_store_read_error_mid_get_fails_the_call_with_nothing_written() {
    let rig = Rig::new("pipe-gerr-srv");
    let c = rig.client("pipe-gerr-cli", 8 << 20);
    let len = 8u64 << 20;
    let posts_before = rig.counts.posts.load(Ordering::SeqCst);
    let mut src = Pattern::new(len);
    src.fail_at = Some(0);
    let a = rig.target.serve(&c.caller, &c.token(len), Request::Get(&mut src));
    assert!(
        matches!(a, Err(TargetError::Store(ref m)) if m.contains("chunk 0")),
        "{a:?}"
    );
    assert_eq!(
        rig.outstanding(),
        0,
        "WRITEs left outstanding after a store error"
    );
    assert_eq!(
        rig.counts.posts.load(Ordering::SeqCst),
        posts_before,
        "a WRITE posted for a GET whose bytes were never all read"
    );
    let (_, writes) = c.tally(len);
    assert_eq!(writes, 0, "a failed GET landed a WRITE WITH IMMEDIATE");
    // The binding carries the next GET, proof and all.
    let mut src = Pattern::new(len);
    src.base = 0;
    assert_eq!(
        done(rig.target.serve(&c.caller, &c.token(len), Request::Get(&mut src))),
        (200, len)
    );
    c.landed(len);
    check_client(&c, 0, len as usize);
}

#[test]
fn a_store_error_mid_put_fails_the_call_commits_nothing_and_the_next_put_works() {
    let rig = Rig::new("pipe-perr-srv");
    let len = 8u64 << 20;
    let c = rig.client("pipe-perr-cli", len as usize);
    fill_client(&c, len as usize);
    let mut sink = Checker {
        fail_at: Some(4),
        ..Checker::default()
    };
    let a = rig
        .target
        .serve(&c.caller, &c.token(len), Request::Put(&mut sink));
    assert!(
        matches!(a, Err(TargetError::Store(ref m)) if m.contains("chunk 4")),
        "{a:?}"
    );
    assert!(!sink.committed);
    assert_eq!(rig.outstanding(), 0, "READs left outstanding after a store error");
    let mut sink = Checker::default();
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Put(&mut sink))
        ),
        (200, len)
    );
    assert!(sink.committed);
}

/// A WRITE or READ that completes in error at chunk k (its key spoiled, so
/// the client's NIC refuses it): the call ends with the binding dropped
/// and made afresh (409), nothing outstanding, no proof, nothing stored;
/// a client on the fresh binding then moves the whole object.
#[test]
fn a_work_request_failing_mid_pipeline_fails_the_call_with_nothing_outstanding() {
    let rig = Rig::new("pipe-wrerr-srv");
    let len = 8u64 << 20;
    for (i, put) in [false, true].into_iter().enumerate() {
        let c = rig.client(&format!("pipe-wrerr-cli{i}"), len as usize);
        fill_client(&c, len as usize);
        // A GET is one WRITE; a PUT's sixth READ is mid-pipeline.
        rig.counts.spoil(if put { 6 } else { 1 });
        let mut src = Pattern::new(len);
        let mut sink = Checker::default();
        let req = if put {
            Request::Put(&mut sink)
        } else {
            Request::Get(&mut src)
        };
        let a = rig.target.serve(&c.caller, &c.token(len), req);
        let Ok(Answer::Bind {
            after_failure: Some(why),
            ..
        }) = &a
        else {
            panic!("put={put}: expected a rebind after the failed work request: {a:?}")
        };
        assert!(why.contains("RemAccessErr") || why.contains("Rem"), "{why}");
        assert_eq!(
            rig.outstanding(),
            0,
            "put={put}: work requests outstanding after the failure"
        );
        assert!(!sink.committed, "put={put}: committed after a failed READ");
        // No proof: the GET's one WRITE failed.
        let mut tally = Tally::new(c.buf.mr().rkey(), len);
        while let Some(wc) = c.completion(Duration::from_millis(100)) {
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::RecvRdmaWithImm {
                assert!(!put, "a PUT's READs landed a WRITE WITH IMMEDIATE");
                tally.add(wc.imm_data.unwrap(), wc.byte_len).unwrap();
            }
        }
        assert!(!tally.complete(), "put={put}: a proof after a failed WRITE");
    }
    // A fresh client QP, a fresh binding: the whole object moves.
    let c = rig.client("pipe-wrerr-cli-next", len as usize);
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Get(&mut Pattern::new(len)))
        ),
        (200, len)
    );
    c.landed(len);
    check_client(&c, 0, len as usize);
    fill_client(&c, len as usize);
    let mut sink = Checker::default();
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Put(&mut sink))
        ),
        (200, len)
    );
    assert!(sink.committed);
    assert_eq!(rig.outstanding(), 0);
}

/// A ranged GET (a 206 selection of many chunks whose length is no
/// multiple of the chunk) and a zero-byte GET both end in the proof.
#[test]
fn ranged_and_zero_byte_gets_carry_their_proof() {
    let rig = Rig::new("pipe-range-srv");
    let c = rig.client("pipe-range-cli", 4 << 20);
    let len = (3 << 20) + 12345u64;
    let mut src = Pattern::new(len);
    src.partial = true;
    src.base = 777;
    // The source generates from object offset 777 on; the bytes land at
    // the token's address.
    let a = rig
        .target
        .serve(&c.caller, &c.token(4 << 20), Request::Get(&mut src));
    assert_eq!(done(a), (206, len));
    assert_eq!(
        c.landed(len),
        1,
        "a GET of many chunks is one WRITE WITH IMMEDIATE"
    );
    check_client(&c, 777, len as usize);
    let a = rig
        .target
        .serve(&c.caller, &c.token(4 << 20), Request::Get(&mut Pattern::new(0)));
    assert_eq!(done(a), (200, 0));
    assert_eq!(
        c.landed(0),
        1,
        "a GET of zero bytes is one empty WRITE WITH IMMEDIATE"
    );
    assert_eq!(rig.outstanding(), 0);
}

/// A source that makes the client vanish (its QP destroyed) when chunk
/// `at` is read: the WRITE after it gets no answer.
struct Vanishing {
    inner: Pattern,
    at: u64,
    client: Option<Client>,
}

impl Source for Vanishing {
    type Error = String;
    fn open(&mut self) -> Result<Selected, String> {
        self.inner.open()
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), String> {
        if self.inner.calls == self.at {
            self.client = None;
        }
        self.inner.fill(off, buf)
    }
}

/// The client's QP disappears mid-GET, so the WRITE is never answered: the target's own completion timeout fires before the NIC gives
/// up retrying, it moves the QP to ERROR and collects the flushed WRITEs,
/// and the call returns with nothing outstanding; the next client works.
#[test]
fn a_client_vanishing_mid_pipeline_times_out_with_nothing_outstanding() {
    let rig = Rig::with(
        "pipe-gone-srv",
        TargetConfig {
            chunk: CHUNK,
            pipeline_depth: DEPTH,
            completion_timeout: Duration::from_millis(300),
            ..TargetConfig::default()
        },
    );
    let len = 8u64 << 20;
    let c = rig.client("pipe-gone-cli", len as usize);
    let (caller, token) = (c.caller.clone(), c.token(len));
    let mut src = Vanishing {
        inner: Pattern::new(len),
        at: 0,
        client: Some(c),
    };
    let a = rig.target.serve(&caller, &token, Request::Get(&mut src));
    assert!(src.client.is_none(), "the client never vanished");
    match &a {
        Ok(Answer::Bind {
            after_failure: Some(why),
            ..
        }) => assert!(
            // A client that vanishes deregisters its buffer a moment before
            // its QP goes (ClientQp's drop order): a WRITE landing in that
            // moment is NAKed with a remote access error, one landing after
            // gets no answer (retries, or the completion timeout).
            why.contains("no completion") || why.contains("RetryExc") || why.contains("RemAccessErr"),
            "{why}"
        ),
        other => panic!("expected a rebind after the lost client: {other:?}"),
    }
    assert_eq!(rig.outstanding(), 0, "a WRITE left outstanding after the timeout");
    let c = rig.client("pipe-gone-next", len as usize);
    assert_eq!(
        done(
            rig.target
                .serve(&c.caller, &c.token(len), Request::Get(&mut Pattern::new(len)))
        ),
        (200, len)
    );
    c.landed(len);
    check_client(&c, 0, len as usize);
}

/// A source whose first fill waits until the test lets it go, telling the
/// test it has started.
struct Held {
    inner: Pattern,
    started: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
}

impl Source for Held {
    type Error = String;
    fn open(&mut self) -> Result<Selected, String> {
        self.inner.open()
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), String> {
        if self.inner.calls == 0 {
            self.started.send(()).unwrap();
            self.go.recv().unwrap();
        }
        self.inner.fill(off, buf)
    }
}

/// GET staging is bounded: with one staging buffer, a second large GET
/// while the first holds it waits, then fails as busy (503 SlowDown at the
/// server) with its binding kept, so the client's retry needs no new
/// binding and moves the object; memory never goes past one GET's length.
#[test]
fn a_get_finding_every_staging_buffer_out_is_busy_and_keeps_its_binding() {
    let rig = Rig::with(
        "pipe-stage-srv",
        TargetConfig {
            chunk: CHUNK,
            pipeline_depth: DEPTH,
            staging_buffers: 1,
            // Both the WRITE's and the staging wait's limit: long
            // enough for a debug build's 4 MiB WRITE on a busy machine.
            completion_timeout: Duration::from_secs(3),
            ..TargetConfig::default()
        },
    );
    let len = 4u64 << 20;
    let (first, second) = (
        rig.client("pipe-stage-a", len as usize),
        rig.client("pipe-stage-b", len as usize),
    );
    let registered_before = rig.counts.registered.load(Ordering::SeqCst);
    rig.counts.reset_peaks();
    let (started_tx, started) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let held = s.spawn(|| {
            let mut src = Held {
                inner: Pattern::new(len),
                started: started_tx,
                go: go_rx,
            };
            done(
                rig.target
                    .serve(&first.caller, &first.token(len), Request::Get(&mut src)),
            )
        });
        started.recv().unwrap();
        let a = rig.target.serve(
            &second.caller,
            &second.token(len),
            Request::Get(&mut Pattern::new(len)),
        );
        assert!(matches!(a, Err(TargetError::StagingBusy(1))), "{a:?}");
        let (_, writes) = second.tally(len);
        assert_eq!(writes, 0, "a busy GET wrote");
        go.send(()).unwrap();
        assert_eq!(held.join().unwrap(), (200, len));
    });
    first.landed(len);
    check_client(&first, 0, len as usize);
    // The retry on the kept binding: no 409, the object moves.
    assert_eq!(
        done(rig.target.serve(
            &second.caller,
            &second.token(len),
            Request::Get(&mut Pattern::new(len))
        )),
        (200, len)
    );
    second.landed(len);
    check_client(&second, 0, len as usize);
    let staged = rig.counts.peak_registered.load(Ordering::SeqCst) - registered_before;
    assert_eq!(staged, len as i64, "more than one staging buffer registered");
}

/// A store that takes longer to fill a staged GET than the completion
/// timeout is not a peer that stopped answering: the timeout runs from the
/// WRITE's post, and the GET succeeds.
#[test]
fn a_store_slower_than_the_completion_timeout_still_serves_the_get() {
    struct Slow(Pattern);
    impl Source for Slow {
        type Error = String;
        fn open(&mut self) -> Result<Selected, String> {
            self.0.open()
        }
        fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), String> {
            std::thread::sleep(Duration::from_millis(1500));
            self.0.fill(off, buf)
        }
    }
    let rig = Rig::with(
        "pipe-slow-srv",
        TargetConfig {
            chunk: CHUNK,
            completion_timeout: Duration::from_millis(1000),
            ..TargetConfig::default()
        },
    );
    let len = 1u64 << 20;
    let c = rig.client("pipe-slow-cli", len as usize);
    let a = rig.target.serve(
        &c.caller,
        &c.token(len),
        Request::Get(&mut Slow(Pattern::new(len))),
    );
    assert_eq!(done(a), (200, len));
    c.landed(len);
    check_client(&c, 0, len as usize);
}
