//! The target side of a hipObject RDMA transfer (docs/protocol.md §4).
//!
//! A [`Target`] owns one open device and answers each request that carries
//! a client token through one call, [`Target::serve`]: it checks the token
//! once, against the caller that sent it; finds that caller's *binding* (a
//! server QP connected to the client QP the token names) or makes one and
//! answers `409`; moves the bytes with RDMA WRITE (a GET) or RDMA READ (a
//! PUT) through registered bounce buffers, waiting for its own completions;
//! and answers with the success reply. When the RDMA on a binding fails it
//! drops the binding, makes a fresh one and answers `409` again, so a client
//! whose QP went stale recovers within the same call.
//!
//! The layer above (the S3 server, or an in-process double) only maps: it
//! says who the caller is, supplies the object's bytes ([`Source`]) or takes
//! them ([`Sink`]), and turns the [`Answer`] or [`TargetError`] into its
//! own reply.

mod bindings;
mod caller;
#[cfg(feature = "testing")]
pub mod double;
mod pipeline;
mod quota;
pub mod rc_v2;
pub mod sigv4;
mod staging;

#[cfg(feature = "testing")]
use double::Cheat;

/// Without feature `testing` no GET cheats: no value of this type exists,
/// so the honest path is the only one compiled in.
#[cfg(not(feature = "testing"))]
#[derive(Debug)]
enum Cheat {}

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::selection::{self, Selection};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{
    AccessFlags, Device, Gid, NicTopology, ProtectionDomain, QpInitAttr, Verbs, VerbsError,
};
use hipobj_proto::{Reply, Token, Transport};

use bindings::{Binding, BindingKey, Bindings, Lookup, ServerQp};
pub use caller::{Caller, LocalAddresses, LoopbackOnly};

/// Limits and timeouts of a target.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// A binding unused this long is dropped.
    pub idle_timeout: Duration,
    /// Most bindings at once, exactly; the least recently used idle one
    /// makes room.
    pub max_bindings: usize,
    /// Largest transfer a token may ask for.
    pub max_transfer: u64,
    /// Largest GET a token may ask for (also within `max_transfer`): a
    /// GET is staged whole in memory and moved as one RDMA WRITE
    /// (docs/protocol.md §2).
    pub max_get: u64,
    /// GET staging buffers at once, out or kept: a GET larger than `chunk`
    /// waits for one (up to `completion_timeout`), so GET memory is at
    /// most `staging_buffers × max_get` beside the bounce buffers.
    pub staging_buffers: usize,
    /// Size of each bounce buffer, so of each RDMA work request.
    pub chunk: usize,
    /// Bounce buffers per transfer, so work requests in flight at once:
    /// the store fills (GET) or takes (PUT) one chunk while the others are
    /// on the wire. 1 to [`MAX_PIPELINE_DEPTH`]; a transfer's bounce memory
    /// is at most `pipeline_depth × chunk` whatever its length.
    pub pipeline_depth: usize,
    /// Bounce buffers kept for reuse.
    pub pooled_buffers: usize,
    /// How long one work request may take before the transfer fails.
    pub completion_timeout: Duration,
    /// Transfers moving bytes at once; more wait for a slot.
    pub max_concurrent: usize,
    /// Whether an IPv4-mapped token GID must be the caller's address (off
    /// only behind NAT, where the server sees another address).
    pub check_peer_address: bool,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(120),
            max_bindings: 4096,
            max_transfer: 4 << 30,
            max_get: 64 << 20,
            staging_buffers: 8,
            chunk: 4 << 20,
            pipeline_depth: 4,
            pooled_buffers: 16,
            completion_timeout: Duration::from_secs(30),
            max_concurrent: 64,
            check_peer_address: true,
        }
    }
}

/// The deepest pipeline a transfer runs (a binding's QP has room for 64
/// send work requests and its CQ for 64 completions).
pub const MAX_PIPELINE_DEPTH: usize = 32;

/// Why a request got no [`Answer`]. `E` is the error of the caller's
/// [`Source`] or [`Sink`].
#[derive(Debug, thiserror::Error)]
pub enum TargetError<E> {
    /// The token's transport is not served here: decline, fall back to HTTP.
    #[error("this target serves RC tokens only")]
    Declined,
    /// The token is unusable: zero or oversized length, a range that wraps,
    /// a QPN or GID no client QP can have.
    #[error("invalid RDMA token: {0}")]
    InvalidToken(String),
    /// The token names a QP that is not the caller's.
    #[error("{0}")]
    NotTheCallers(String),
    /// The selection is larger than the token's buffer: nothing was sent.
    #[error("the client's buffer holds {have} bytes, {want} were to be moved")]
    BufferTooSmall {
        /// Bytes the token grants.
        have: u64,
        /// Bytes the request selects.
        want: u64,
    },
    /// Every binding is in use by a transfer.
    #[error("all {0} RDMA bindings are in use")]
    Busy(usize),
    /// Every GET staging buffer stayed in use for the whole wait
    /// (`TargetConfig::staging_buffers`); the binding is kept.
    #[error("all {0} GET staging buffers are in use")]
    StagingBusy(usize),
    /// A verbs call failed while binding.
    #[error("RDMA setup failed: {0}")]
    Verbs(#[from] VerbsError),
    /// The RDMA failed and no fresh binding could be made.
    #[error("the RDMA transfer failed: {0}")]
    Transfer(String),
    /// The source or sink failed (the object could not be read or stored).
    #[error("the data source or sink failed")]
    Store(E),
}

/// What the request selects, once the object is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    /// Bytes to move.
    pub len: u64,
    /// A range or part of the object (the reply is `206`).
    pub partial: bool,
}

/// A GET's bytes. [`open`](Source::open) runs only once the binding exists.
pub trait Source {
    /// Why the bytes could not be had.
    type Error;
    /// Opens the object: how much the request selects.
    fn open(&mut self) -> Result<Selected, Self::Error>;
    /// Fills `buf` with the selection's bytes from offset `off`; called in
    /// order, once per chunk.
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Self::Error>;
}

/// Where a PUT's bytes go. [`open`](Sink::open) runs only once the binding
/// exists; [`commit`](Sink::commit) after the last READ completed, and the
/// success reply only after it returned.
pub trait Sink {
    /// Why the bytes could not be stored.
    type Error;
    /// Prepares to take `len` bytes.
    fn open(&mut self, len: u64) -> Result<(), Self::Error>;
    /// Takes the bytes read at offset `off`, in order.
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), Self::Error>;
    /// Every byte was read: store them.
    fn commit(&mut self) -> Result<(), Self::Error>;
}

/// One request: which way the bytes go.
pub enum Request<'a, E> {
    /// GetObject: RDMA WRITE the source's selection into the client's buffer.
    Get(&'a mut dyn Source<Error = E>),
    /// PutObject or UploadPart: RDMA READ the token's length into the sink.
    Put(&'a mut dyn Sink<Error = E>),
}

impl<E> std::fmt::Debug for Request<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Get(_) => "Request::Get",
            Self::Put(_) => "Request::Put",
        })
    }
}

/// How a request ended, when it ended in a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// HTTP 409 with this `x-amz-rdma-reply`: the caller's client QP was not
    /// bound (or its binding failed, `after_failure` says why); a server QP
    /// now is. No byte moved.
    Bind {
        /// The `409:<server token>:<psn>` reply.
        reply: Reply,
        /// Why the old binding was dropped, if there was one.
        after_failure: Option<String>,
    },
    /// The bytes moved: every work request completed (and a PUT's sink
    /// committed) before this was returned.
    Done {
        /// The reply to send (`x-amz-rdma-reply`).
        reply: Reply,
        /// 200, or 206 for a partial GET.
        status: u16,
        /// Bytes moved.
        bytes: u64,
    },
}

/// Counters of what a target has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Transfers completed.
    pub transfers: u64,
    /// Bytes moved by them.
    pub bytes: u64,
    /// Live bindings.
    pub bindings: usize,
    /// The most work requests one transfer has had in flight at once (at
    /// most `pipeline_depth`).
    pub peak_in_flight: u64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A counting semaphore for transfer slots (the target's calls block).
#[derive(Debug)]
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Slot<'a>(&'a Slots);

impl Slots {
    fn take(&self) -> Slot<'_> {
        let mut n = lock(&self.free);
        while *n == 0 {
            n = self.freed.wait(n).unwrap_or_else(PoisonError::into_inner);
        }
        *n -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *lock(&self.0.free) += 1;
        self.0.freed.notify_one();
    }
}

/// A failed move: the RDMA failed at the client's end (the binding is
/// dropped and made afresh), a local verbs call failed (the binding is
/// dropped), the store failed while the QP could not be brought back to
/// idle (the binding is dropped, the store's error reported), or anything
/// else (the binding stays: every work request so far completed).
pub(crate) enum MoveError<E> {
    Rdma(String),
    Local(VerbsError),
    Broken(TargetError<E>),
    Other(TargetError<E>),
}

impl<E> From<VerbsError> for MoveError<E> {
    fn from(e: VerbsError) -> Self {
        Self::Local(e)
    }
}

/// Why a client address in a token was refused.
#[derive(Debug)]
pub(crate) enum AddressProblem {
    /// No client can have it (400).
    Invalid(String),
    /// It is not the caller's (403).
    NotTheCallers(String),
}

/// The target: a device, its bindings, and its bounce buffers.
#[derive(Debug)]
pub struct Target {
    // Field order is drop order: QPs and MRs before the PD, the PD before
    // the device.
    bindings: Bindings,
    buffers: Mutex<Vec<RegisteredBuffer>>,
    staging: staging::Staging,
    pd: Arc<dyn ProtectionDomain>,
    device: Arc<dyn Device>,
    selection: Selection,
    vendor: VendorProfile,
    limits: QpLimits,
    /// The device's port count (a caller on this host has no more).
    ports: u8,
    local: Arc<dyn LocalAddresses>,
    slots: Slots,
    config: TargetConfig,
    transfers: AtomicU64,
    bytes: AtomicU64,
    peak_in_flight: AtomicU64,
}

/// A random initial PSN (24 bits). The PSN is what a packet from another
/// QP would have to guess to be executed by a client QP.
/// The refusal for a token naming a client QP another key has bound.
fn taken<E>() -> TargetError<E> {
    TargetError::NotTheCallers(
        "the token's client QP is bound to another access key on this server; \
         a client must use a QP of its own"
            .into(),
    )
}

fn random_psn() -> Result<u32, VerbsError> {
    getrandom::u32().map(|v| v & 0x00ff_ffff).map_err(|e| {
        VerbsError::new(
            "getrandom",
            hipobj_platform::VerbsErrorKind::Os,
            format!("no random initial PSN: {e}"),
        )
    })
}

impl Target {
    /// Opens the device `nic_hint` names (or the one selection picks) and
    /// prepares to serve tokens.
    pub fn open(
        verbs: &dyn Verbs,
        topology: &dyn NicTopology,
        nic_hint: Option<&str>,
        config: TargetConfig,
    ) -> Result<Self, VerbsError> {
        let (device, selection) = selection::select(verbs, topology, None, nic_hint).map_err(|e| {
            e.verbs.clone().unwrap_or_else(|| {
                VerbsError::new(
                    "select",
                    hipobj_platform::VerbsErrorKind::NotFound,
                    e.detail.clone(),
                )
            })
        })?;
        let attr = device.attr()?;
        let port = device.query_port(selection.port)?;
        let vendor = match selection.vendor_id {
            Some(v) => VendorProfile::for_vendor(Some(v)),
            None => VendorProfile::for_device_vendor(attr.vendor_id),
        };
        let pd = device.alloc_pd()?;
        Ok(Self {
            bindings: Bindings::new(config.max_bindings, config.idle_timeout),
            buffers: Mutex::new(Vec::new()),
            staging: staging::Staging::new(config.staging_buffers, config.chunk),
            pd,
            device,
            selection,
            vendor,
            limits: QpLimits::new(&attr, &port),
            ports: attr.phys_port_cnt,
            local: Arc::new(LoopbackOnly),
            slots: Slots {
                free: Mutex::new(config.max_concurrent.max(1)),
                freed: Condvar::new(),
            },
            config,
            transfers: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
        })
    }

    /// Says which IPv4 addresses are this host's, for callers on loopback
    /// (the default knows only 127.0.0.0/8).
    pub fn with_local_addresses(mut self, local: Arc<dyn LocalAddresses>) -> Self {
        self.local = local;
        self
    }

    /// The device, port and GID in use.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The vendor profile applied to every binding's QP.
    pub fn vendor(&self) -> VendorProfile {
        self.vendor
    }

    /// What the target has done so far.
    pub fn stats(&self) -> TargetStats {
        TargetStats {
            transfers: self.transfers.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            bindings: self.bindings.len(),
            peak_in_flight: self.peak_in_flight.load(Ordering::Relaxed),
        }
    }

    /// Whether the port in use is up now (`ibv_query_port`'s state is
    /// ACTIVE): what a readiness check asks of the device.
    pub fn port_active(&self) -> Result<bool, VerbsError> {
        let state = self.device.query_port(self.selection.port)?.state;
        Ok(matches!(
            state,
            hipobj_platform::PortState::Active | hipobj_platform::PortState::ActiveDefer
        ))
    }

    /// Drops every binding (a server restart, as the client sees it).
    pub fn forget_bindings(&self) {
        self.bindings.clear();
    }

    /// Serves one request carrying `token` from `caller`: the whole of the
    /// target's half of docs/protocol.md §4. Blocks until the bytes moved.
    pub fn serve<E>(
        &self,
        caller: &Caller,
        token: &Token,
        request: Request<'_, E>,
    ) -> Result<Answer, TargetError<E>> {
        self.serve_as(caller, token, request, None)
    }

    /// [`Target::serve`], with a GET moved as `cheat` says instead of
    /// honestly: the malicious-server double's way in (`double`, feature
    /// `testing`).
    pub(crate) fn serve_as<E>(
        &self,
        caller: &Caller,
        token: &Token,
        request: Request<'_, E>,
        cheat: Option<&Cheat>,
    ) -> Result<Answer, TargetError<E>> {
        self.check(caller, token)?;
        if matches!(request, Request::Get(_)) && token.len > self.config.max_get {
            return Err(TargetError::InvalidToken(format!(
                "the token's length {} is over this server's limit of {} for a GET (one RDMA WRITE, staged whole)",
                token.len, self.config.max_get
            )));
        }
        let key = BindingKey {
            access_key: caller.access_key.clone(),
            gid: Gid(token.gid),
            qpn: token.qpn,
        };
        let binding = match self.bindings.lookup(&key) {
            Lookup::Bound(b) => b,
            Lookup::Full => return Err(TargetError::Busy(self.config.max_bindings)),
            Lookup::Taken => return Err(taken()),
            Lookup::Reserved => {
                let reply = self.bind(key, token)?;
                return Ok(Answer::Bind {
                    reply,
                    after_failure: None,
                });
            }
        };
        let moved = {
            let _slot = self.slots.take();
            let r = match request {
                Request::Get(src) => self.get(&binding, token, src, cheat),
                Request::Put(sink) => self.put(&binding, token, sink),
            };
            *lock(&binding.last_used) = Instant::now();
            r
        };
        let qpn = binding.qpn;
        if moved.is_ok() {
            binding.moved.store(true, Ordering::Relaxed);
        }
        drop(binding);
        match moved {
            Ok((status, bytes)) => {
                self.transfers.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(bytes, Ordering::Relaxed);
                Ok(Answer::Done {
                    reply: self.success_reply(status, qpn, bytes),
                    status,
                    bytes,
                })
            }
            Err(MoveError::Other(e)) => Err(e),
            Err(MoveError::Broken(e)) => {
                self.bindings.remove(&key, qpn);
                Err(e)
            }
            Err(MoveError::Local(e)) => {
                self.bindings.remove(&key, qpn);
                Err(TargetError::Verbs(e))
            }
            Err(MoveError::Rdma(why)) => {
                // The QP is in an unknown state (the client QP was reset,
                // recycled, rebound elsewhere, or broke): drop the binding
                // and bind afresh, moving no data.
                self.bindings.remove(&key, qpn);
                match self.bindings.lookup(&key) {
                    Lookup::Reserved => match self.bind::<E>(key, token) {
                        Ok(reply) => Ok(Answer::Bind {
                            reply,
                            after_failure: Some(why),
                        }),
                        Err(_) => Err(TargetError::Transfer(why)),
                    },
                    Lookup::Bound(_) | Lookup::Full | Lookup::Taken => Err(TargetError::Transfer(why)),
                }
            }
        }
    }

    /// The token's own checks, and whether the caller may name its QP.
    fn check<E>(&self, caller: &Caller, token: &Token) -> Result<(), TargetError<E>> {
        let invalid = |m: String| Err(TargetError::InvalidToken(m));
        if token.transport != Transport::Rc {
            return Err(TargetError::Declined);
        }
        if token.len == 0 {
            return invalid("the token's length is 0".into());
        }
        if token.len > self.config.max_transfer {
            return invalid(format!(
                "the token's length {} is over this server's limit of {}",
                token.len, self.config.max_transfer
            ));
        }
        if token.addr.checked_add(token.len).is_none() {
            return invalid("the token's address range wraps".into());
        }
        if !(2..=0x00ff_ffff).contains(&token.qpn) {
            return invalid(format!("the token's QPN {:#x} is not a client QP's", token.qpn));
        }
        match self.check_client_address(caller, Gid(token.gid), token.port) {
            Ok(()) => Ok(()),
            Err(AddressProblem::Invalid(why)) => invalid(why),
            Err(AddressProblem::NotTheCallers(why)) => Err(TargetError::NotTheCallers(why)),
        }
    }

    /// Whether `caller` may name a client QP at `gid`, port `port`: a
    /// unicast address a client can own and a port the protocol allows
    /// (always), the caller's own address (unless `check_peer_address` is
    /// off, behind NAT). The binding exchange and PREPARE both ask this.
    pub(crate) fn check_client_address(
        &self,
        caller: &Caller,
        gid: Gid,
        port: u8,
    ) -> Result<(), AddressProblem> {
        if let Some(why) = caller::unowned_gid(gid) {
            return Err(AddressProblem::Invalid(why));
        }
        if let Some(why) = caller::bad_port(caller, port, self.ports) {
            return Err(AddressProblem::Invalid(why));
        }
        if self.config.check_peer_address
            && let Some(why) = caller::gid_mismatch(caller, gid, self.local.as_ref(), &|g| self.owns_gid(g))
        {
            return Err(AddressProblem::NotTheCallers(why));
        }
        Ok(())
    }

    /// Whether `gid` is in one of this device's GID tables (a caller on
    /// loopback shares them).
    fn owns_gid(&self, gid: Gid) -> bool {
        (1..=self.ports.max(1)).any(|port| {
            (0..256u32)
                .map_while(|i| self.device.query_gid(port, i).ok())
                .any(|g| g == gid)
        })
    }

    /// Makes a binding for `key` (room is reserved): a server QP in RTS
    /// towards the token's QP, and the `409` reply naming it.
    fn bind<E>(&self, key: BindingKey, token: &Token) -> Result<Reply, TargetError<E>> {
        let made = random_psn().and_then(|psn| self.connect(token, psn).map(|c| (c, psn)));
        let (conn, psn) = match made {
            Ok(c) => c,
            Err(e) => {
                self.bindings.unreserve();
                return Err(TargetError::Verbs(e));
            }
        };
        let qpn = conn.qp.qp_num();
        let fresh = Arc::new(Binding {
            qpn,
            conn: Mutex::new(conn),
            last_used: Mutex::new(Instant::now()),
            moved: AtomicBool::new(false),
        });
        if !self.bindings.insert(key, fresh) {
            return Err(taken());
        }
        Ok(Reply::Bind {
            token: self.server_token(qpn),
            psn,
        })
    }

    /// A server QP connected to the token's QP. It grants no remote access:
    /// it only issues requests.
    fn connect(&self, token: &Token, psn: u32) -> Result<ServerQp, VerbsError> {
        let cq = self.device.create_cq(64)?;
        let qp = self.pd.create_qp(&QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            max_send_wr: 64,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: false,
        })?;
        let s = &self.selection;
        let verbs = |(_, e): (rc::RcStep, VerbsError)| e;
        rc::to_init(qp.as_ref(), s.port, AccessFlags::default()).map_err(verbs)?;
        let path = RcPath {
            port: s.port,
            sgid_index: u8::try_from(s.gid_index).unwrap_or(0),
            mtu: s.mtu,
            dest_qpn: token.qpn,
            dgid: Gid(token.gid),
            rq_psn: 0,
            sq_psn: psn,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 1,
        };
        rc::to_rts(qp.as_ref(), &path, self.vendor, &self.limits).map_err(verbs)?;
        Ok(ServerQp { qp, cq, next_wr: 1 })
    }

    fn server_token(&self, qpn: u32) -> Token {
        Token {
            transport: Transport::Rc,
            qpn,
            gid: self.selection.gid.0,
            rkey: 0,
            addr: 0,
            len: 0,
            port: self.selection.port,
            lid: 0,
        }
    }

    /// The reply that ends a transfer: `NNN:<server token>:<count>`, naming
    /// the bound server QP and the bytes moved (docs/protocol.md §2).
    fn success_reply(&self, status: u16, qpn: u32, bytes: u64) -> Reply {
        Reply::Done {
            status,
            token: self.server_token(qpn),
            bytes,
        }
    }

    /// A bounce buffer of at least `size` bytes: a pooled one of the
    /// configured chunk, or, larger than that (a GET staged whole), a
    /// staging buffer ([`staging`]).
    fn take_buffer(&self, size: usize) -> Result<RegisteredBuffer, staging::Shortage> {
        if size > self.config.chunk {
            return self
                .staging
                .take(self.pd.as_ref(), size, self.config.completion_timeout);
        }
        if let Some(b) = lock(&self.buffers).pop() {
            return Ok(b);
        }
        RegisteredBuffer::new(self.pd.as_ref(), self.config.chunk, AccessFlags::LOCAL_WRITE)
            .map_err(staging::Shortage::Verbs)
    }

    fn return_buffer(&self, b: RegisteredBuffer) {
        if b.len() != self.config.chunk {
            self.staging.give_back(Some(b));
            return;
        }
        let mut pool = lock(&self.buffers);
        if pool.len() < self.config.pooled_buffers {
            pool.push(b);
        }
    }

    /// GET: opens the source, refuses a selection larger than the buffer,
    /// and RDMA WRITEs the selection at the token's address as one WRITE
    /// WITH IMMEDIATE carrying the token's key (`hipobj_proto::landed`).
    /// The count reported is the selection's length: min(selection, token
    /// length), since a larger selection is refused; the client fails a
    /// count short of what it asked for.
    fn get<E>(
        &self,
        binding: &Binding,
        token: &Token,
        src: &mut dyn Source<Error = E>,
        cheat: Option<&Cheat>,
    ) -> Result<(u16, u64), MoveError<E>> {
        let sel = src.open().map_err(|e| MoveError::Other(TargetError::Store(e)))?;
        if sel.len > token.len {
            return Err(MoveError::Other(TargetError::BufferTooSmall {
                have: token.len,
                want: sel.len,
            }));
        }
        let status = if sel.partial { 206 } else { 200 };
        if let Some(cheat) = cheat {
            #[cfg(feature = "testing")]
            return double::cheat_get(self, binding, token, src, sel.len, cheat).map(|n| (status, n));
            #[cfg(not(feature = "testing"))]
            match *cheat {}
        }
        self.write_whole(binding, token, sel.len, src)?;
        Ok((status, sel.len))
    }

    /// RDMA WRITEs the `total` bytes of a GET from `src` to the token's
    /// address as one WRITE WITH IMMEDIATE carrying the token's key, from a
    /// buffer that holds them all (a staging buffer when they are more than
    /// a chunk). An empty GET is one empty WRITE WITH IMMEDIATE.
    pub(crate) fn write_whole<E>(
        &self,
        binding: &Binding,
        token: &Token,
        total: u64,
        src: &mut dyn Source<Error = E>,
    ) -> Result<(), MoveError<E>> {
        let whole = usize::try_from(total).map_err(|_| {
            MoveError::Local(VerbsError::new(
                "post_send",
                hipobj_platform::VerbsErrorKind::InvalidArgument,
                "a GET larger than the address space",
            ))
        })?;
        self.run(
            binding,
            token.addr,
            token.rkey,
            total,
            whole.max(1),
            pipeline::Flow::Write {
                fill: &mut |off, data| src.fill(off, data),
                imm: hipobj_proto::landed::imm(token.rkey),
            },
        )
    }

    /// PUT: RDMA READs exactly the token's length into the sink, then has
    /// it commit.
    fn put<E>(
        &self,
        binding: &Binding,
        token: &Token,
        sink: &mut dyn Sink<Error = E>,
    ) -> Result<(u16, u64), MoveError<E>> {
        let store = |e: E| MoveError::Other(TargetError::Store(e));
        sink.open(token.len).map_err(store)?;
        self.run(
            binding,
            token.addr,
            token.rkey,
            token.len,
            self.config.chunk.max(1),
            pipeline::Flow::Read {
                drain: &mut |off, data| sink.drain(off, data),
            },
        )?;
        sink.commit().map_err(store)?;
        Ok((200, token.len))
    }

    /// Moves `len` bytes between the client's memory at `remote_addr` (key
    /// `rkey`) and the bound QP, in chunks of `chunk` bytes, through a ring
    /// of bounce buffers from the pool, one per work request in flight, at
    /// most `pipeline_depth` of them (fewer for a short transfer): the mover
    /// in `pipeline` overlaps the store's side of one chunk with the wire's
    /// side of the others. The buffers go back to the pool only when no
    /// work request of this transfer is outstanding on them.
    pub(crate) fn run<E>(
        &self,
        binding: &Binding,
        remote_addr: u64,
        rkey: u32,
        len: u64,
        chunk: usize,
        dir: pipeline::Flow<'_, E>,
    ) -> Result<(), MoveError<E>> {
        let mut conn = lock(&binding.conn);
        let chunks = len.div_ceil(chunk as u64).max(1);
        let depth = u64::try_from(self.depth()).unwrap_or(1).min(chunks) as usize;
        let mut ring = Vec::with_capacity(depth);
        for _ in 0..depth {
            match self.take_buffer(chunk) {
                Ok(b) => ring.push(b),
                Err(e) => {
                    for b in ring {
                        self.return_buffer(b);
                    }
                    return Err(match e {
                        staging::Shortage::Busy(n) => MoveError::Other(TargetError::StagingBusy(n)),
                        staging::Shortage::Verbs(e) => MoveError::Local(e),
                    });
                }
            }
        }
        let conn = &mut *conn;
        let out = pipeline::transfer(
            pipeline::Wire {
                qp: conn.qp.as_ref(),
                cq: conn.cq.as_ref(),
                next_wr: &mut conn.next_wr,
                idle_timeout: self.config.completion_timeout,
                deadline: None,
            },
            pipeline::Ring::per_buffer(&mut ring, chunk),
            dir,
            remote_addr,
            rkey,
            len,
        );
        self.peak_in_flight
            .fetch_max(out.peak_in_flight as u64, Ordering::Relaxed);
        if out.drained {
            for b in ring {
                self.return_buffer(b);
            }
        }
        // Otherwise the buffers are dropped here, deregistered: the QP is
        // in ERROR (see `pipeline`), so nothing can reach them any more.
        match out.result {
            Ok(()) => Ok(()),
            Err(pipeline::Failure::Store(e)) if out.qp_usable => Err(MoveError::Other(TargetError::Store(e))),
            Err(pipeline::Failure::Store(e)) => Err(MoveError::Broken(TargetError::Store(e))),
            Err(pipeline::Failure::Rdma(why) | pipeline::Failure::Timeout(why)) => Err(MoveError::Rdma(why)),
            Err(pipeline::Failure::Local(e)) => Err(MoveError::Local(e)),
        }
    }

    /// Work requests (and bounce buffers) per transfer.
    fn depth(&self) -> usize {
        self.config.pipeline_depth.clamp(1, MAX_PIPELINE_DEPTH)
    }
}
