//! The server's RDMA half of the hipObject protocol (docs/protocol.md §4).
//!
//! An [`RdmaPeer`] owns one open device. For each client QP that sends it a
//! token it keeps a *binding*: a server QP connected to that client QP, in
//! RTS. A token from a client QP it holds no binding for gets a `409` reply
//! that names the new server QP and its first PSN; with a binding, the peer
//! moves the bytes with RDMA WRITE (a GET) or RDMA READ (a PUT) through
//! registered bounce buffers, waits for its own completions, and only then
//! reports success, so the S3 reply that follows is the client's completion
//! signal.
//!
//! The S3 server builds its RDMA support on this; the client's tests use it
//! as the other end of a transfer.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::selection::{self, Selection};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, NicTopology, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr,
    QpState, QueuePair, SendOp, SendWr, Verbs, VerbsError, WcStatus, WorkCompletion,
};
use hipobj_proto::{Reply, Token, Transport};

/// Limits and timeouts of a peer.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// A binding unused this long is dropped.
    pub idle_timeout: Duration,
    /// Most bindings at once; the least recently used idle one makes room.
    pub max_bindings: usize,
    /// Largest transfer a token may ask for.
    pub max_transfer: u64,
    /// Size of each bounce buffer, so of each RDMA work request.
    pub chunk: usize,
    /// Bounce buffers kept for reuse.
    pub pooled_buffers: usize,
    /// How long one work request may take before the transfer fails.
    pub completion_timeout: Duration,
}

impl Default for PeerConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(120),
            max_bindings: 4096,
            max_transfer: 4 << 30,
            chunk: 4 << 20,
            pooled_buffers: 16,
            completion_timeout: Duration::from_secs(30),
        }
    }
}

/// Why the peer could not serve a token.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The token is unusable: wrong transport, zero or oversized length.
    #[error("invalid RDMA token: {0}")]
    InvalidToken(String),
    /// The request asks for more bytes than the token's buffer holds.
    #[error("the client's buffer holds {have} bytes, {want} were to be moved")]
    BufferTooSmall {
        /// Bytes the token grants.
        have: u64,
        /// Bytes the request needs.
        want: u64,
    },
    /// Too many bindings are in use.
    #[error("all {0} RDMA bindings are in use")]
    Busy(usize),
    /// A verbs call failed.
    #[error("RDMA setup failed: {0}")]
    Verbs(#[from] VerbsError),
    /// The RDMA itself failed; the binding was dropped.
    #[error("the RDMA transfer failed: {0}")]
    Transfer(String),
    /// The caller's source or sink failed.
    #[error("the data source or sink failed: {0}")]
    Io(#[from] std::io::Error),
}

/// What the server answers a token with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No binding yet: answer HTTP 409 with this `x-amz-rdma-reply`, move no data.
    Bind(Reply),
    /// The binding exists: the transfer can run.
    Bound,
}

struct ServerQp {
    // Field order is drop order: the QP before its CQ.
    qp: Box<dyn QueuePair>,
    cq: Arc<dyn CompletionQueue>,
    next_wr: u64,
}

impl std::fmt::Debug for ServerQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerQp")
            .field("qpn", &self.qp.qp_num())
            .finish()
    }
}

#[derive(Debug)]
struct Binding {
    qpn: u32,
    conn: Mutex<ServerQp>,
    last_used: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The server's RDMA end: a device, its bindings, and its bounce buffers.
#[derive(Debug)]
pub struct RdmaPeer {
    // Field order is drop order: QPs and MRs before the PD, the PD before
    // the device.
    bindings: Mutex<HashMap<(Gid, u32), Arc<Binding>>>,
    buffers: Mutex<Vec<RegisteredBuffer>>,
    pd: Arc<dyn ProtectionDomain>,
    device: Arc<dyn Device>,
    selection: Selection,
    config: PeerConfig,
    transfers: AtomicU64,
    bytes: AtomicU64,
}

/// Counters of what a peer has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Transfers completed.
    pub transfers: u64,
    /// Bytes moved by them.
    pub bytes: u64,
    /// Live bindings.
    pub bindings: usize,
}

fn random_psn() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() as u32) & 0x00ff_ffff
}

impl RdmaPeer {
    /// Opens the device `nic_hint` names (or the one selection picks) and
    /// prepares to serve tokens.
    pub fn open(
        verbs: &dyn Verbs,
        topology: &dyn NicTopology,
        nic_hint: Option<&str>,
        config: PeerConfig,
    ) -> Result<Self, PeerError> {
        let (device, selection) = selection::select(verbs, topology, None, nic_hint).map_err(|e| {
            PeerError::Verbs(e.verbs.clone().unwrap_or_else(|| {
                VerbsError::new(
                    "select",
                    hipobj_platform::VerbsErrorKind::NotFound,
                    e.detail.clone(),
                )
            }))
        })?;
        let pd = device.alloc_pd()?;
        Ok(Self {
            bindings: Mutex::new(HashMap::new()),
            buffers: Mutex::new(Vec::new()),
            pd,
            device,
            selection,
            config,
            transfers: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }

    /// The device, port and GID in use.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// What the peer has done so far.
    pub fn stats(&self) -> PeerStats {
        PeerStats {
            transfers: self.transfers.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            bindings: lock(&self.bindings).len(),
        }
    }

    /// Drops every binding (a server restart, as the client sees it).
    pub fn forget_bindings(&self) {
        lock(&self.bindings).clear();
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

    /// Checks a client token: its transport and its length against `want`
    /// bytes to move.
    pub fn check_token(&self, token: &Token, want: u64) -> Result<(), PeerError> {
        if token.transport != Transport::Rc {
            return Err(PeerError::InvalidToken(
                "this server serves RC tokens only".into(),
            ));
        }
        if token.len == 0 {
            return Err(PeerError::InvalidToken("the token's length is 0".into()));
        }
        if token.len > self.config.max_transfer {
            return Err(PeerError::InvalidToken(format!(
                "the token's length {} is over this server's limit of {}",
                token.len, self.config.max_transfer
            )));
        }
        if token.addr.checked_add(token.len).is_none() {
            return Err(PeerError::InvalidToken("the token's address range wraps".into()));
        }
        if want > token.len {
            return Err(PeerError::BufferTooSmall {
                have: token.len,
                want,
            });
        }
        Ok(())
    }

    fn expire(&self, map: &mut HashMap<(Gid, u32), Arc<Binding>>) {
        let idle = self.config.idle_timeout;
        // A binding in use by a request (more than the map's reference) is
        // never expired under it.
        map.retain(|_, b| Arc::strong_count(b) > 1 || lock(&b.last_used).elapsed() < idle);
    }

    /// The first step for every token: binds the client QP if it is new.
    pub fn step(&self, token: &Token) -> Result<Step, PeerError> {
        let key = (Gid(token.gid), token.qpn);
        let mut map = lock(&self.bindings);
        self.expire(&mut map);
        if map.contains_key(&key) {
            return Ok(Step::Bound);
        }
        if map.len() >= self.config.max_bindings {
            let idle = map
                .iter()
                .filter(|(_, b)| Arc::strong_count(b) == 1)
                .min_by_key(|(_, b)| *lock(&b.last_used))
                .map(|(k, _)| *k);
            match idle {
                Some(k) => {
                    map.remove(&k);
                }
                None => return Err(PeerError::Busy(self.config.max_bindings)),
            }
        }
        drop(map);
        let psn = random_psn();
        let conn = self.connect(token, psn)?;
        let qpn = conn.qp.qp_num();
        let binding = Arc::new(Binding {
            qpn,
            conn: Mutex::new(conn),
            last_used: Mutex::new(Instant::now()),
        });
        lock(&self.bindings).insert(key, binding);
        Ok(Step::Bind(Reply::Bind {
            token: self.server_token(qpn),
            psn,
        }))
    }

    fn connect(&self, token: &Token, psn: u32) -> Result<ServerQp, PeerError> {
        use QpAttrMask as M;
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
        qp.modify(
            &QpAttr {
                qp_state: QpState::Init,
                port_num: s.port,
                qp_access_flags: AccessFlags::default(),
                ..QpAttr::default()
            },
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )?;
        qp.modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: s.mtu,
                dest_qp_num: token.qpn,
                rq_psn: 0,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
                dgid: Gid(token.gid),
                sgid_index: u8::try_from(s.gid_index).unwrap_or(0),
                hop_limit: 64,
                port_num: s.port,
                ..QpAttr::default()
            },
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
        )?;
        qp.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                sq_psn: psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 1,
                ..QpAttr::default()
            },
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        )?;
        Ok(ServerQp { qp, cq, next_wr: 1 })
    }

    fn binding(&self, token: &Token) -> Result<Arc<Binding>, PeerError> {
        lock(&self.bindings)
            .get(&(Gid(token.gid), token.qpn))
            .cloned()
            .ok_or_else(|| PeerError::Transfer("the client QP is not bound (it expired or failed)".into()))
    }

    fn drop_binding(&self, token: &Token, qpn: u32) {
        let mut map = lock(&self.bindings);
        let key = (Gid(token.gid), token.qpn);
        if map.get(&key).is_some_and(|b| b.qpn == qpn) {
            map.remove(&key);
        }
    }

    fn take_buffer(&self) -> Result<RegisteredBuffer, PeerError> {
        if let Some(b) = lock(&self.buffers).pop() {
            return Ok(b);
        }
        Ok(RegisteredBuffer::new(
            self.pd.as_ref(),
            self.config.chunk,
            AccessFlags::LOCAL_WRITE,
        )?)
    }

    fn return_buffer(&self, b: RegisteredBuffer) {
        let mut pool = lock(&self.buffers);
        if pool.len() < self.config.pooled_buffers {
            pool.push(b);
        }
    }

    /// The reply that ends a successful transfer: `status`, the bound server
    /// QP and the `bytes` moved (`NNN:<token>:<count>`, docs/protocol.md §2).
    pub fn success_reply(&self, token: &Token, status: u16, bytes: u64) -> Result<Reply, PeerError> {
        let b = self.binding(token)?;
        Ok(Reply::Done {
            status,
            token: self.server_token(b.qpn),
            bytes,
        })
    }

    /// GET: RDMA WRITEs `len` bytes into the client's buffer, asking `fill`
    /// for each chunk as (offset, buffer to fill). The last WRITE carries the
    /// token's rkey as its immediate value (zero bytes make one empty WRITE
    /// WITH IMMEDIATE), the client's proof that the GET reached its QP.
    /// Returns when every WRITE has completed.
    pub fn write_to_client(
        &self,
        token: &Token,
        len: u64,
        fill: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> Result<u64, PeerError> {
        self.check_token(token, len)?;
        self.run(token, len, true, &mut |off, buf, data| {
            fill(off, data)?;
            buf.write_at(0, data);
            Ok(())
        })
    }

    /// PUT: RDMA READs `len` bytes from the client's buffer, handing each
    /// chunk to `drain` as (offset, bytes) in order.
    pub fn read_from_client(
        &self,
        token: &Token,
        len: u64,
        drain: &mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> Result<u64, PeerError> {
        self.check_token(token, len)?;
        self.run(token, len, false, &mut |off, buf, data| {
            buf.read_at(0, data);
            drain(off, data)
        })
    }

    /// Moves `len` bytes chunk by chunk on the bound QP. For a WRITE, `io`
    /// fills the scratch slice and copies it into the bounce buffer before
    /// the work request; for a READ it runs after the completion and copies
    /// the bounce buffer out.
    fn run(&self, token: &Token, len: u64, write: bool, io: &mut ChunkIo<'_>) -> Result<u64, PeerError> {
        let binding = self.binding(token)?;
        let mut conn = lock(&binding.conn);
        let buf = self.take_buffer()?;
        let mut scratch = vec![0u8; self.config.chunk.min(usize::try_from(len).unwrap_or(usize::MAX))];
        let mut off = 0u64;
        let result = (|| -> Result<(), PeerError> {
            // A GET of zero bytes still sends its (empty) proof.
            let mut first = true;
            while off < len || (write && first && len == 0) {
                first = false;
                let n = (len - off).min(self.config.chunk as u64) as usize;
                let data = &mut scratch[..n];
                if write {
                    io(off, &buf, data)?;
                }
                let sge = buf
                    .sge(0, n as u32)
                    .ok_or_else(|| PeerError::Transfer("chunk larger than the bounce buffer".into()))?;
                let remote_addr = token.addr + off;
                let last = off + n as u64 == len;
                let op = if write && last {
                    SendOp::WriteWithImm {
                        remote_addr,
                        rkey: token.rkey,
                        imm: token.rkey,
                    }
                } else if write {
                    SendOp::Write {
                        remote_addr,
                        rkey: token.rkey,
                    }
                } else {
                    SendOp::Read {
                        remote_addr,
                        rkey: token.rkey,
                    }
                };
                let wr_id = conn.next_wr;
                conn.next_wr += 1;
                let sges = [sge];
                conn.qp.post_send(&SendWr {
                    wr_id,
                    op,
                    sg_list: if n == 0 { &[] } else { &sges },
                    signaled: true,
                })?;
                wait_for(conn.cq.as_ref(), wr_id, self.config.completion_timeout)?;
                if !write {
                    io(off, &buf, data)?;
                }
                off += n as u64;
            }
            Ok(())
        })();
        self.return_buffer(buf);
        *lock(&binding.last_used) = Instant::now();
        let qpn = binding.qpn;
        drop(conn);
        drop(binding);
        match result {
            Ok(()) => {
                self.transfers.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(len, Ordering::Relaxed);
                Ok(len)
            }
            Err(e) => {
                // Any failure leaves the QP in an unknown state: the next
                // request from this client QP binds afresh.
                self.drop_binding(token, qpn);
                Err(e)
            }
        }
    }
}

/// Moves one chunk between the caller and a bounce buffer: (offset in the
/// transfer, the bounce buffer, a scratch slice of the chunk's length).
type ChunkIo<'a> = dyn FnMut(u64, &RegisteredBuffer, &mut [u8]) -> std::io::Result<()> + 'a;

/// Waits for the completion of `wr_id` on `cq`; any error status fails.
fn wait_for(cq: &dyn CompletionQueue, wr_id: u64, timeout: Duration) -> Result<(), PeerError> {
    let deadline = Instant::now() + timeout;
    let mut wc = [WorkCompletion::EMPTY; 4];
    loop {
        let n = cq.poll(&mut wc)?;
        for c in &wc[..n] {
            if c.status != WcStatus::Success {
                return Err(PeerError::Transfer(format!(
                    "work request {} completed with {:?} (vendor error {:#x})",
                    c.wr_id, c.status, c.vendor_err
                )));
            }
            if c.wr_id == wr_id {
                return Ok(());
            }
        }
        if n > 0 {
            continue;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(PeerError::Transfer(format!(
                "no completion within {} ms",
                timeout.as_millis()
            )));
        }
        cq.wait((deadline - now).min(Duration::from_millis(100)))?;
    }
}
