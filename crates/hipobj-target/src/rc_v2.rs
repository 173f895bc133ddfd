//! The target's half of `hipobj-rc-v2` (docs/protocol.md, "hipobj-rc-v2
//! server"): sessions made by PREPARE, run by READY, dropped by CANCEL or
//! a timeout.
//!
//! Each session has a protection domain, a completion queue, an RC queue
//! pair and a staging buffer of its own. Only the staging buffer of a PUT
//! grants remote write access, and only to queue pairs of the session's
//! own protection domain, which holds the one QP that READY connects to
//! the client QP named in PREPARE: no other session's client can reach it.
//! When a session ends (READY done or failed, CANCEL, expiry, drop) its QP
//! is moved to ERROR before anything is freed, so a late write finds no QP
//! in RTS and no memory.
//!
//! - PUT: the staging buffer holds the whole object (one WRITE WITH
//!   IMMEDIATE from the client, as the protocol has it), so a PUT larger
//!   than [`V2Config::staging_max`] is refused with 413. READY posts one
//!   receive, connects, and waits for `RecvRdmaWithImm` with immediate ==
//!   cookie and byte count == size; then the sink takes the bytes.
//! - GET: the staging buffer is a ring of bounce slots with local access
//!   only, as many as the target's `pipeline_depth` and each of its `chunk`
//!   bytes (at most [`V2Config::staging_max`]); READY moves the object
//!   through it as the target's own GETs do (the `pipeline` module): the
//!   source fills one slot while the others' RDMA WRITEs are on the wire,
//!   the last one WRITE WITH IMMEDIATE carrying the cookie (RC delivers in
//!   order, so its completion at the client means every byte before it is
//!   there).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Gid, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair,
    RecvWr, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_proto::rc_v2::{
    Cookie, Op, PrepareRequest, PrepareResponse, Psn, ReadyRequest, SessionId, Status, Target as ObjectPath,
};
use hipobj_proto::{Token, Transport};

use crate::{Caller, Request, Target, lock, random_psn};

/// Limits and timeouts of the v2 sessions.
#[derive(Clone, Debug)]
pub struct V2Config {
    /// Sessions open at once (prepared or transferring); PREPARE beyond
    /// this gets 503.
    pub max_sessions: usize,
    /// Largest staging buffer: the largest PUT (413 above), and the
    /// largest chunk of a GET (whose chunk is otherwise the target's).
    pub staging_max: usize,
    /// How long a prepared session waits for READY.
    pub prepare_timeout: Duration,
    /// How long READY waits for the transfer (408 after).
    pub transfer_timeout: Duration,
}

impl Default for V2Config {
    fn default() -> Self {
        Self {
            max_sessions: 64,
            staging_max: 64 << 20,
            prepare_timeout: Duration::from_secs(10),
            transfer_timeout: Duration::from_secs(30),
        }
    }
}

/// A v2 request the target refused or could not complete.
#[derive(Debug, thiserror::Error)]
pub enum V2Failure<E> {
    /// The protocol's status for it, and why.
    #[error("{1}")]
    Status(Status, String),
    /// The source or sink failed.
    #[error("the data source or sink failed")]
    Store(E),
}

impl<E> V2Failure<E> {
    fn new(status: Status, why: impl Into<String>) -> Self {
        Self::Status(status, why.into())
    }
}

/// Counts open sessions; one lives in each session.
#[derive(Debug)]
struct Count(Arc<AtomicUsize>);

impl Drop for Count {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One session's verbs objects. Field order is drop order: the QP (moved
/// to ERROR first, in `Drop`), then the buffer's MR, the CQ, the PD.
struct Resources {
    qp: Box<dyn QueuePair>,
    staging: RegisteredBuffer,
    cq: Arc<dyn CompletionQueue>,
    _pd: Arc<dyn ProtectionDomain>,
}

impl Drop for Resources {
    fn drop(&mut self) {
        // Out of RTS before the memory goes: a packet that arrives from now
        // on is dropped by the NIC, whatever it names.
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = self.qp.modify(&attr, QpAttrMask::STATE);
    }
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("qpn", &self.qp.qp_num())
            .finish_non_exhaustive()
    }
}

/// A prepared session.
#[derive(Debug)]
pub struct Session {
    owner: String,
    op: Op,
    object: ObjectPath,
    size: u32,
    offset: u64,
    cookie: Cookie,
    client_qpn: u32,
    client_gid: Gid,
    client_psn: Psn,
    server_psn: Psn,
    sgid_index: u8,
    deadline: Instant,
    res: Resources,
    _count: Count,
}

impl Session {
    /// GET or PUT.
    pub fn op(&self) -> Op {
        self.op
    }
    /// The object.
    pub fn object(&self) -> &ObjectPath {
        &self.object
    }
    /// The bytes to move.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Where a GET starts in the object.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The cookie PREPARE carried (the immediate of the one write).
    pub fn cookie(&self) -> Cookie {
        self.cookie
    }
    /// The access key that prepared it.
    pub fn owner(&self) -> &str {
        &self.owner
    }
}

/// The v2 sessions of one target.
#[derive(Debug)]
pub struct V2Sessions {
    target: Arc<Target>,
    config: V2Config,
    sessions: Mutex<HashMap<SessionId, Session>>,
    open: Arc<AtomicUsize>,
}

/// What READY found: the session, taken out of the table (a second READY
/// for it gets 409), and the client's buffer.
#[derive(Debug)]
pub struct Claimed {
    session: Session,
    client_addr: u64,
    client_rkey: u32,
}

impl Claimed {
    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl V2Sessions {
    /// Sessions on `target`'s device.
    pub fn new(target: Arc<Target>, config: V2Config) -> Self {
        Self {
            target,
            config,
            sessions: Mutex::new(HashMap::new()),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &V2Config {
        &self.config
    }

    /// Sessions open now (prepared or transferring).
    pub fn open_sessions(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Drops every prepared session whose READY did not come in time;
    /// returns how many.
    pub fn reap(&self) -> usize {
        let now = Instant::now();
        let expired: Vec<Session> = {
            let mut map = lock(&self.sessions);
            let ids: Vec<SessionId> = map
                .iter()
                .filter(|(_, s)| s.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| map.remove(&id)).collect()
        };
        expired.len()
    }

    /// PREPARE by `caller` (whose object checks, 404 and 416, the layer
    /// above has made): a session with its QP in INIT and its staging
    /// buffer, and the response naming them.
    pub fn prepare(&self, caller: &Caller, req: &PrepareRequest) -> Result<PrepareResponse, V2Failure<()>> {
        self.reap();
        let bad = |why: String| V2Failure::new(Status::BadRequest, why);
        let token = &req.token;
        if token.transport != Transport::Rc {
            return Err(bad(
                "the client token is not an RC token (an all-zero token is not served)".into(),
            ));
        }
        if !(2..=0x00ff_ffff).contains(&token.qpn) {
            return Err(bad(format!(
                "the token's QPN {:#x} is not a client QP's",
                token.qpn
            )));
        }
        let gid = Gid(token.gid);
        if gid.is_zero() || token.gid[0] == 0xff {
            return Err(bad("the token's GID is zero or multicast".into()));
        }
        if self.target.config.check_peer_address
            && let Some(why) = crate::caller::gid_mismatch(caller, gid, self.target.local.as_ref())
        {
            return Err(V2Failure::new(Status::Forbidden, why));
        }
        let size = req.size.get();
        let staging_len = match req.op {
            Op::Put if size as usize > self.config.staging_max => {
                return Err(V2Failure::new(
                    Status::TooLarge,
                    format!(
                        "a PUT of {size} bytes is over this server's staging buffer of {} bytes",
                        self.config.staging_max
                    ),
                ));
            }
            Op::Put => size as usize,
            Op::Get => {
                let (slots, chunk) = self.get_ring(size);
                slots * chunk
            }
        };
        if req.op == Op::Get && req.offset.unwrap_or(0).checked_add(u64::from(size)).is_none() {
            return Err(V2Failure::new(
                Status::RangeNotSatisfiable,
                "offset + size overflows",
            ));
        }
        // Room first: the count is the limit, whatever races.
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.config.max_sessions {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(V2Failure::new(
                Status::Busy,
                format!(
                    "all {} hipobj-rc-v2 sessions are in use",
                    self.config.max_sessions
                ),
            ));
        }
        let count = Count(self.open.clone());
        let internal = |e: VerbsError| V2Failure::new(Status::Internal, format!("RDMA setup failed: {e}"));
        let (sgid_index, sgid) = self.source_gid(gid).map_err(internal)?;
        let server_psn = loop {
            if let Some(p) = Psn::new(random_psn().map_err(internal)?) {
                break p;
            }
        };
        let mut id = [0u8; 16];
        getrandom::fill(&mut id)
            .map_err(|e| V2Failure::new(Status::Internal, format!("no random session id: {e}")))?;
        let res = self.resources(req.op, staging_len).map_err(internal)?;
        let response = PrepareResponse {
            token: Token {
                transport: Transport::Rc,
                qpn: res.qp.qp_num(),
                gid: sgid.0,
                rkey: res.staging.mr().rkey(),
                addr: res.staging.addr(),
                len: u64::from(size),
                port: self.target.selection.port,
                lid: 0,
            },
            session: SessionId(id),
            psn: server_psn,
        };
        let session = Session {
            owner: caller.access_key.clone(),
            op: req.op,
            object: req.target.clone(),
            size,
            offset: req.offset.unwrap_or(0),
            cookie: req.cookie,
            client_qpn: token.qpn,
            client_gid: gid,
            client_psn: req.psn,
            server_psn,
            sgid_index,
            deadline: Instant::now() + self.config.prepare_timeout,
            res,
            _count: count,
        };
        lock(&self.sessions).insert(SessionId(id), session);
        Ok(response)
    }

    /// A GET's ring of `size` bytes: (slots, bytes per slot). The target's
    /// chunk (at most `staging_max`, at most the object) and its pipeline
    /// depth (at most one slot per chunk).
    fn get_ring(&self, size: u32) -> (usize, usize) {
        let chunk = self
            .target
            .config
            .chunk
            .min(self.config.staging_max)
            .min(size as usize)
            .max(1);
        let chunks = (size as usize).div_ceil(chunk).max(1);
        (self.target.depth().min(chunks), chunk)
    }

    /// The GID of ours that reaches `peer`: for a link-local peer GID (the
    /// upstream client sends its table entry 0, `fe80::`), a link-local GID
    /// of our port; otherwise the one selection chose.
    fn source_gid(&self, peer: Gid) -> Result<(u8, Gid), VerbsError> {
        let s = &self.target.selection;
        let chosen = (u8::try_from(s.gid_index).unwrap_or(0), s.gid);
        if !peer.is_link_local() || s.gid.is_link_local() {
            return Ok(chosen);
        }
        for index in 0..16u8 {
            match self.target.device.query_gid(s.port, u32::from(index)) {
                Ok(g) if g.is_link_local() => return Ok((index, g)),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        Ok(chosen)
    }

    /// A PD, CQ and QP (in INIT) of the session's own, and its staging
    /// buffer: remote-writable for a PUT, local for a GET.
    fn resources(&self, op: Op, staging_len: usize) -> Result<Resources, VerbsError> {
        let t = &self.target;
        let pd = t.device.alloc_pd()?;
        let cq = t.device.create_cq(16)?;
        let access = match op {
            Op::Put => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            Op::Get => AccessFlags::LOCAL_WRITE,
        };
        let staging = RegisteredBuffer::new(pd.as_ref(), staging_len, access)?;
        let qp = pd.create_qp(&QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: false,
        })?;
        let qp_access = match op {
            Op::Put => AccessFlags::REMOTE_WRITE,
            Op::Get => AccessFlags::default(),
        };
        rc::to_init(qp.as_ref(), t.selection.port, qp_access).map_err(|(_, e)| e)?;
        Ok(Resources {
            qp,
            staging,
            cq,
            _pd: pd,
        })
    }

    /// READY by `caller`: takes the session out of the table (so it runs
    /// once). 409 for an unknown or expired session or another key's (the
    /// session stays for its owner); 403 for a wrong cookie (the session is
    /// dropped); 400 for a GET without the client's buffer.
    pub fn claim(&self, caller: &Caller, req: &ReadyRequest) -> Result<Claimed, V2Failure<()>> {
        self.reap();
        let mut map = lock(&self.sessions);
        let unknown = || {
            V2Failure::new(
                Status::UnknownSession,
                "no such session (unknown, expired or used)",
            )
        };
        let s = map.get(&req.session).ok_or_else(unknown)?;
        if s.owner != caller.access_key {
            return Err(unknown());
        }
        if s.cookie != req.cookie {
            map.remove(&req.session);
            return Err(V2Failure::new(
                Status::Forbidden,
                "the cookie is not the session's; the session is dropped",
            ));
        }
        let (client_addr, client_rkey) = match (s.op, req.client_mr) {
            (_, Some((mr, qpn))) => {
                if qpn.get() != s.client_qpn {
                    return Err(V2Failure::new(
                        Status::BadRequest,
                        "x-amz-rdma-qpn is not the QP the PREPARE token named",
                    ));
                }
                (mr.addr, mr.rkey)
            }
            (Op::Get, None) => {
                return Err(V2Failure::new(
                    Status::BadRequest,
                    "a GET's READY names no client buffer",
                ));
            }
            (Op::Put, None) => (0, 0),
        };
        let session = map.remove(&req.session).ok_or_else(unknown)?;
        Ok(Claimed {
            session,
            client_addr,
            client_rkey,
        })
    }

    /// CANCEL by `caller`: drops its session if there is one (another
    /// key's is left alone). Always succeeds.
    pub fn cancel(&self, caller: &Caller, id: &SessionId) {
        let mut map = lock(&self.sessions);
        if map.get(id).is_some_and(|s| s.owner == caller.access_key) {
            map.remove(id);
        }
    }

    /// Runs a claimed session: connects its QP and moves the bytes, GET
    /// from `source` into the client's buffer, PUT from the staging buffer
    /// into `sink` (committed before this returns). Blocks. The session
    /// ends here whatever happens: its QP leaves RTS.
    pub fn run<E>(&self, claimed: Claimed, io: Request<'_, E>) -> Result<u64, V2Failure<E>> {
        let Claimed {
            session: mut s,
            client_addr,
            client_rkey,
        } = claimed;
        let deadline = Instant::now() + self.config.transfer_timeout;
        let local = |e: VerbsError| V2Failure::new(Status::Internal, format!("RDMA failed: {e}"));
        let size = u64::from(s.size);
        match (s.op, io) {
            (Op::Put, Request::Put(sink)) => {
                // The receive before the QP can take the write.
                s.res
                    .qp
                    .post_recv(&RecvWr {
                        wr_id: 1,
                        sg_list: &[],
                    })
                    .map_err(local)?;
                self.connect(&s).map_err(local)?;
                let wc = wait_one(s.res.cq.as_ref(), deadline)?;
                if wc.status != WcStatus::Success
                    || wc.opcode != WcOpcode::RecvRdmaWithImm
                    || wc.imm_data != Some(s.cookie.get())
                    || u64::from(wc.byte_len) != size
                {
                    return Err(V2Failure::new(
                        Status::Internal,
                        format!(
                            "the client's write did not complete as the session says: {:?} {:?}, immediate {:?} (want {}), {} bytes (want {size})",
                            wc.status, wc.opcode, wc.imm_data, s.cookie, wc.byte_len
                        ),
                    ));
                }
                // The bytes are in: no more writes may land while the sink
                // reads them.
                let attr = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                s.res.qp.modify(&attr, QpAttrMask::STATE).map_err(local)?;
                sink.open(size).map_err(V2Failure::Store)?;
                let chunk = (4usize << 20).min(s.size as usize).max(1);
                let mut data = vec![0u8; chunk];
                let mut off = 0u64;
                while off < size {
                    let n = (size - off).min(chunk as u64) as usize;
                    let piece = &mut data[..n];
                    if !s.res.staging.read_at(off as usize, piece) {
                        return Err(V2Failure::new(Status::Internal, "the staging buffer is short"));
                    }
                    sink.drain(off, piece).map_err(V2Failure::Store)?;
                    off += n as u64;
                }
                sink.commit().map_err(V2Failure::Store)?;
            }
            (Op::Get, Request::Get(source)) => {
                let sel = source.open().map_err(V2Failure::Store)?;
                if sel.len != size {
                    return Err(V2Failure::new(
                        Status::RangeNotSatisfiable,
                        format!(
                            "the object gives {} bytes where the session asked for {size}",
                            sel.len
                        ),
                    ));
                }
                self.connect(&s).map_err(local)?;
                let (slots, chunk) = self.get_ring(s.size);
                let res = &mut s.res;
                let mut next_wr = 1u64;
                let out = crate::pipeline::transfer(
                    crate::pipeline::Wire {
                        qp: res.qp.as_ref(),
                        cq: res.cq.as_ref(),
                        next_wr: &mut next_wr,
                        idle_timeout: self.config.transfer_timeout,
                        deadline: Some(deadline),
                    },
                    crate::pipeline::Ring::split(std::slice::from_mut(&mut res.staging), slots, chunk),
                    crate::pipeline::Direction::Write {
                        fill: &mut |off, data| source.fill(off, data),
                        imm: s.cookie.get(),
                    },
                    client_addr,
                    client_rkey,
                    size,
                );
                // Whatever happened, the session ends here: dropping it
                // moves its QP to ERROR before the staging buffer goes.
                match out.result {
                    Ok(()) => {}
                    Err(crate::pipeline::Failure::Store(e)) => return Err(V2Failure::Store(e)),
                    Err(crate::pipeline::Failure::Timeout(_)) => {
                        return Err(V2Failure::new(
                            Status::Timeout,
                            "the transfer did not complete in time",
                        ));
                    }
                    Err(crate::pipeline::Failure::Rdma(why)) => {
                        return Err(V2Failure::new(
                            Status::Internal,
                            format!("the write to the client failed: {why}"),
                        ));
                    }
                    Err(crate::pipeline::Failure::Local(e)) => return Err(local(e)),
                }
            }
            _ => {
                return Err(V2Failure::new(
                    Status::Internal,
                    "the layer above passed the wrong direction for this session",
                ));
            }
        }
        Ok(size)
    }

    /// INIT -> RTR -> RTS towards the client QP: receive PSN the client's,
    /// send PSN ours.
    fn connect(&self, s: &Session) -> Result<(), VerbsError> {
        let t = &self.target;
        let path = RcPath {
            port: t.selection.port,
            sgid_index: s.sgid_index,
            mtu: t.selection.mtu,
            dest_qpn: s.client_qpn,
            dgid: s.client_gid,
            rq_psn: s.client_psn.get(),
            sq_psn: s.server_psn.get(),
            max_dest_rd_atomic: 0,
            max_rd_atomic: 1,
        };
        rc::to_rts(s.res.qp.as_ref(), &path, t.vendor, &t.limits).map_err(|(_, e)| e)
    }
}

/// The next completion on `cq`, or 408 at `deadline`.
fn wait_one<E>(cq: &dyn CompletionQueue, deadline: Instant) -> Result<WorkCompletion, V2Failure<E>> {
    let mut wc = [WorkCompletion::EMPTY; 1];
    loop {
        let n = cq
            .poll(&mut wc)
            .map_err(|e| V2Failure::new(Status::Internal, format!("polling failed: {e}")))?;
        if n > 0 {
            return Ok(wc[0]);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(V2Failure::new(
                Status::Timeout,
                "the transfer did not complete in time",
            ));
        }
        cq.wait((deadline - now).min(Duration::from_millis(100)))
            .map_err(|e| V2Failure::new(Status::Internal, format!("waiting failed: {e}")))?;
    }
}
