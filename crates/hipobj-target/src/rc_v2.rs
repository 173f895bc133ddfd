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
//! - GET: the staging buffer, local access only, holds the whole range:
//!   the client checks that the WRITE WITH IMMEDIATE carrying the cookie
//!   counts every byte, and a receive completion counts only its own
//!   WRITE's. READY moves the range through it with the target's mover
//!   (the `pipeline` module) as one WRITE WITH IMMEDIATE. So a GET larger
//!   than [`V2Config::staging_max`] is refused with 413 at PREPARE, as a
//!   PUT is: a client moves such an object as ranged GETs within the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Gid, ProtectionDomain, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair,
    RecvWr, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_proto::rc_v2::{
    self as proto, CancelRequest, Cookie, Direction, ObjectPath, PrepareRequest, PrepareResponse, Psn,
    ReadyRequest, SessionId, Status, UploadPart,
};
use hipobj_proto::{Token, Transport};

use crate::quota::{Charge, Limits, Quotas};
use crate::{Caller, Request, Target, lock, random_psn};

/// Limits and timeouts of the v2 sessions.
#[derive(Clone, Debug)]
pub struct V2Config {
    /// Sessions open at once (prepared or transferring), all keys
    /// together; PREPARE beyond this gets 503.
    pub max_sessions: usize,
    /// Sessions one access key may hold open at once (503 beyond).
    pub max_sessions_per_key: usize,
    /// Staging bytes all sessions may hold at once: a PUT's buffer from
    /// PREPARE, a GET's from READY (503 beyond).
    pub memory_budget: usize,
    /// Staging bytes one access key's sessions may hold at once (503
    /// beyond).
    pub memory_per_key: usize,
    /// Largest staging buffer: the largest PUT and the largest GET (413
    /// above).
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
            max_sessions_per_key: 16,
            memory_budget: 1 << 30,
            memory_per_key: 256 << 20,
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

/// One session's verbs objects. Field order is drop order: the QP (moved
/// to ERROR first, in `Drop`), then the buffer's MR, the CQ, the PD. A
/// PUT's staging buffer is made at PREPARE (its address and key are the
/// answer); a GET's only at READY, when it is used.
struct Resources {
    qp: Box<dyn QueuePair>,
    staging: Option<RegisteredBuffer>,
    cq: Arc<dyn CompletionQueue>,
    pd: Arc<dyn ProtectionDomain>,
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
    op: Direction,
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
    /// Given back when the session drops, after its resources.
    charge: Charge,
    /// Which bucket the layer above found at PREPARE (its generation), to
    /// compare at each later step: a bucket deleted and made again under
    /// the same name is another bucket.
    bucket_generation: Option<String>,
    /// A PUT stored as a multipart upload's part (the `mp` extension).
    part: Option<UploadPart>,
}

impl Session {
    /// GET or PUT.
    pub fn op(&self) -> Direction {
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
    /// The bucket's generation the layer above recorded at PREPARE
    /// ([`V2Sessions::prepare_in`]).
    pub fn bucket_generation(&self) -> Option<&str> {
        self.bucket_generation.as_deref()
    }
    /// The multipart upload's part a PUT stores, when PREPARE named one.
    pub fn part(&self) -> Option<&UploadPart> {
        self.part.as_ref()
    }
}

/// The v2 sessions of one target.
#[derive(Debug)]
pub struct V2Sessions {
    target: Arc<Target>,
    config: V2Config,
    sessions: Mutex<HashMap<SessionId, Session>>,
    quotas: Arc<Quotas>,
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
            sessions: Mutex::new(HashMap::new()),
            quotas: Quotas::new(Limits {
                sessions: config.max_sessions.max(1),
                sessions_per_key: config.max_sessions_per_key.max(1),
                memory: config.memory_budget,
                memory_per_key: config.memory_per_key,
            }),
            config,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &V2Config {
        &self.config
    }

    /// Sessions open now (prepared or transferring).
    pub fn open_sessions(&self) -> usize {
        self.quotas.usage().0
    }

    /// Staging bytes the sessions hold now.
    pub fn staging_bytes(&self) -> usize {
        self.quotas.usage().1
    }

    /// Drops every prepared session whose READY did not come by `now`;
    /// returns how many. The table reads no clock of its own: each call
    /// says what time it is, so the rules can be tested without waiting.
    pub fn reap(&self, now: Instant) -> usize {
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
    pub fn prepare(
        &self,
        caller: &Caller,
        req: &PrepareRequest,
        now: Instant,
    ) -> Result<PrepareResponse, V2Failure<()>> {
        self.prepare_in(caller, req, now, None)
    }

    /// [`V2Sessions::prepare`], recording `bucket_generation` (which
    /// bucket of the target's name the layer above found) in the session,
    /// for the layer to compare at READY and during the transfer.
    pub fn prepare_in(
        &self,
        caller: &Caller,
        req: &PrepareRequest,
        now: Instant,
        bucket_generation: Option<String>,
    ) -> Result<PrepareResponse, V2Failure<()>> {
        self.reap(now);
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
        match self.target.check_client_address(caller, gid, token.port) {
            Ok(()) => {}
            Err(crate::AddressProblem::Invalid(why)) => return Err(bad(why)),
            Err(crate::AddressProblem::NotTheCallers(why)) => {
                return Err(V2Failure::new(Status::Forbidden, why));
            }
        }
        if req.op == Direction::Get && req.part.is_some() {
            return Err(bad("a GET names no multipart upload's part".into()));
        }
        let size = req.size.get();
        // One session's bytes are one WRITE WITH IMMEDIATE through one
        // staging buffer, either way.
        if size as usize > self.config.staging_max {
            return Err(V2Failure::new(
                Status::TooLarge,
                format!(
                    "a {} of {size} bytes is over this server's limit of {} bytes (its staging buffer)",
                    req.op.as_str(),
                    self.config.staging_max
                ),
            ));
        }
        let staging_len = size as usize;
        if req.op == Direction::Get && req.offset.unwrap_or(0).checked_add(u64::from(size)).is_none() {
            return Err(V2Failure::new(
                Status::RangeNotSatisfiable,
                "offset + size overflows",
            ));
        }
        // Room first: the counts are the limits, whatever races.
        let busy = |why: String| V2Failure::new(Status::Busy, why);
        let mut charge = self.quotas.session(&caller.access_key).map_err(busy)?;
        if req.op == Direction::Put {
            charge.memory(staging_len).map_err(busy)?;
        }
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
        // Only a PUT's client needs our buffer's address and key (its one
        // WRITE names them); a GET's answer names no server memory.
        let (addr, rkey) = res.staging.as_ref().map_or((0, 0), |b| (b.addr(), b.mr().rkey()));
        let response = PrepareResponse {
            token: Token {
                transport: Transport::Rc,
                qpn: res.qp.qp_num(),
                gid: sgid.0,
                rkey,
                addr,
                len: u64::from(size),
                port: self.target.selection.port,
                lid: 0,
            },
            session: SessionId(id),
            psn: server_psn,
            // The layer above stores a part session as UploadPart.
            multipart: true,
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
            deadline: now + self.config.prepare_timeout,
            res,
            charge,
            bucket_generation,
            part: req.part.clone(),
        };
        lock(&self.sessions).insert(SessionId(id), session);
        Ok(response)
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

    /// A PD, CQ and QP (in INIT) of the session's own, and for a PUT its
    /// remote-writable staging buffer (a GET's is made by READY).
    fn resources(&self, op: Direction, staging_len: usize) -> Result<Resources, VerbsError> {
        let t = &self.target;
        let pd = t.device.alloc_pd()?;
        let cq = t.device.create_cq(16)?;
        let staging = match op {
            Direction::Put => Some(RegisteredBuffer::new(
                pd.as_ref(),
                staging_len,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )?),
            Direction::Get => None,
        };
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
            Direction::Put => AccessFlags::REMOTE_WRITE,
            Direction::Get => AccessFlags::default(),
        };
        rc::to_init(qp.as_ref(), t.selection.port, qp_access).map_err(|(_, e)| e)?;
        Ok(Resources { qp, staging, cq, pd })
    }

    /// READY by `caller`: takes the session out of the table (so it runs
    /// once). 409 for an unknown or expired session or another key's (the
    /// session stays for its owner); 403 for a wrong cookie (the session is
    /// dropped); 400 for a GET without the client's buffer.
    pub fn claim(&self, caller: &Caller, req: &ReadyRequest, now: Instant) -> Result<Claimed, V2Failure<()>> {
        self.reap(now);
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
            (Direction::Get, None) => {
                return Err(V2Failure::new(
                    Status::BadRequest,
                    "a GET's READY names no client buffer",
                ));
            }
            (Direction::Put, None) => (0, 0),
        };
        let session = map.remove(&req.session).ok_or_else(unknown)?;
        Ok(Claimed {
            session,
            client_addr,
            client_rkey,
        })
    }

    /// Drops every prepared session `owner` holds (its access key was
    /// revoked); returns how many. A session already claimed by READY runs
    /// to its end.
    pub fn drop_owner(&self, owner: &str) -> usize {
        let mut map = lock(&self.sessions);
        let before = map.len();
        map.retain(|_, s| s.owner != owner);
        before - map.len()
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
        match (s.op, io) {
            (Direction::Put, Request::Put(sink)) => self.run_put(&mut s, sink, deadline)?,
            (Direction::Get, Request::Get(source)) => {
                self.run_get(&mut s, source, (client_addr, client_rkey), deadline)?;
            }
            _ => {
                return Err(V2Failure::new(
                    Status::Internal,
                    "the layer above passed the wrong direction for this session",
                ));
            }
        }
        // Whatever happened, the session ends when `s` drops: its QP moves
        // to ERROR before the staging buffer goes.
        Ok(u64::from(s.size))
    }

    /// A PUT: the receive, the connection, the client's one WRITE WITH
    /// IMMEDIATE (the cookie, every byte), then the staging buffer drained
    /// into `sink` with the QP out of RTS.
    fn run_put<E>(
        &self,
        s: &mut Session,
        sink: &mut dyn crate::Sink<Error = E>,
        deadline: Instant,
    ) -> Result<(), V2Failure<E>> {
        let size = u64::from(s.size);
        // The receive before the QP can take the write.
        s.res
            .qp
            .post_recv(&RecvWr {
                wr_id: 1,
                sg_list: &[],
            })
            .map_err(local)?;
        self.connect(s).map_err(local)?;
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
        // The bytes are in: no more writes may land while the sink reads
        // them.
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        s.res.qp.modify(&attr, QpAttrMask::STATE).map_err(local)?;
        sink.open(size).map_err(V2Failure::Store)?;
        let Some(staging) = s.res.staging.as_ref() else {
            return Err(V2Failure::new(Status::Internal, "the PUT has no staging buffer"));
        };
        let chunk = (4usize << 20).min(s.size as usize).max(1);
        let mut data = vec![0u8; chunk];
        let mut off = 0u64;
        while off < size {
            let n = (size - off).min(chunk as u64) as usize;
            let piece = &mut data[..n];
            if !staging.read_at(off as usize, piece) {
                return Err(V2Failure::new(Status::Internal, "the staging buffer is short"));
            }
            sink.drain(off, piece).map_err(V2Failure::Store)?;
            off += n as u64;
        }
        sink.commit().map_err(V2Failure::Store)
    }

    /// A GET: the staging buffer (charged now, when it is used), the
    /// connection, and the range from `source` to the client's buffer
    /// `(addr, rkey)` as one WRITE WITH IMMEDIATE carrying the cookie.
    fn run_get<E>(
        &self,
        s: &mut Session,
        source: &mut dyn crate::Source<Error = E>,
        (client_addr, client_rkey): (u64, u32),
        deadline: Instant,
    ) -> Result<(), V2Failure<E>> {
        let size = u64::from(s.size);
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
        // One slot of the whole range (PREPARE refused a range over the
        // staging limit): the client takes the GET as done on the receive
        // completion of the WRITE WITH IMMEDIATE carrying the cookie and
        // checks that it counts every byte, and a receive completion counts
        // only its own WRITE's.
        let (slots, chunk) = (1, (s.size as usize).max(1));
        // The staging memory now, when it is used, within the budgets (503
        // when there is no room).
        s.charge
            .memory(slots * chunk)
            .map_err(|why| V2Failure::new(Status::Busy, why))?;
        let buffer = RegisteredBuffer::new(s.res.pd.as_ref(), slots * chunk, AccessFlags::LOCAL_WRITE)
            .map_err(local)?;
        s.res.staging = Some(buffer);
        self.connect(s).map_err(local)?;
        let imm = s.cookie.get();
        let res = &mut s.res;
        let Some(staging) = res.staging.as_mut() else {
            return Err(V2Failure::new(Status::Internal, "the GET has no staging buffer"));
        };
        let mut next_wr = 1u64;
        let out = crate::pipeline::transfer(
            crate::pipeline::Wire {
                qp: res.qp.as_ref(),
                cq: res.cq.as_ref(),
                next_wr: &mut next_wr,
                idle_timeout: self.config.transfer_timeout,
                deadline: Some(deadline),
            },
            crate::pipeline::Ring::split(std::slice::from_mut(staging), slots, chunk),
            crate::pipeline::Flow::Write {
                fill: &mut |off, data| source.fill(off, data),
                imm,
            },
            client_addr,
            client_rkey,
            size,
        );
        match out.result {
            Ok(()) => Ok(()),
            Err(crate::pipeline::Failure::Store(e)) => Err(V2Failure::Store(e)),
            Err(crate::pipeline::Failure::Timeout(_)) => Err(V2Failure::new(
                Status::Timeout,
                "the transfer did not complete in time",
            )),
            Err(crate::pipeline::Failure::Rdma(why)) => Err(V2Failure::new(
                Status::Internal,
                format!("the write to the client failed: {why}"),
            )),
            Err(crate::pipeline::Failure::Local(e)) => Err(local(e)),
        }
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

/// A control request as HTTP delivered it, before any check.
#[derive(Clone, Copy, Debug)]
pub struct ControlHttp<'a> {
    /// The method (`POST`).
    pub method: &'a str,
    /// The URI's path.
    pub path: &'a str,
    /// The URI's query, if it has one.
    pub query: Option<&'a str>,
    /// The `(name, value)` pairs, lowercase names, one pair per value (as
    /// an `http::HeaderMap` holds them).
    pub headers: &'a [(&'a str, &'a [u8])],
}

/// A control request that passed every check of [`check_control`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlRequest {
    /// `/.hipobj-rc/prepare`.
    Prepare(PrepareRequest),
    /// `/.hipobj-rc/ready`.
    Ready(ReadyRequest),
    /// `/.hipobj-rc/cancel`.
    Cancel(CancelRequest),
}

/// Why [`check_control`] refused a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The status to answer with.
    pub status: Status,
    /// Why, for the response body.
    pub why: String,
    /// Whether it is a decline (501: RDMA off, or not hipobj-rc-v2), which
    /// the server counts apart from errors.
    pub declined: bool,
}

impl Refused {
    fn new(status: Status, why: impl Into<String>) -> Self {
        Self {
            status,
            why: why.into(),
            declined: false,
        }
    }
}

/// Everything the server checks on a control request before a session is
/// touched, in its order: the path (404), the method (400), RDMA on (501),
/// [`proto::PROTOCOL_HEADER`] (501), no body (400), the SigV4 signature at
/// `now` seconds since the epoch against `keys` (403), then the headers of
/// the path's message (their [`proto::V2Error`] status). `Ok` with the
/// access key that signed it and the message. A refusal changes nothing.
pub fn check_control(
    req: &ControlHttp<'_>,
    enabled: bool,
    keys: &HashMap<String, String>,
    now: u64,
) -> Result<(String, ControlRequest), Refused> {
    #[derive(Clone, Copy)]
    enum Which {
        Prepare,
        Ready,
        Cancel,
    }
    let which = match req.path {
        proto::PREPARE_PATH => Which::Prepare,
        proto::READY_PATH => Which::Ready,
        proto::CANCEL_PATH => Which::Cancel,
        _ => return Err(Refused::new(Status::NotFound, "no such control path")),
    };
    if req.method != proto::METHOD {
        return Err(Refused::new(Status::BadRequest, "control requests are POSTs"));
    }
    let decline = |why: &str| Refused {
        declined: true,
        ..Refused::new(Status::Unsupported, why)
    };
    if !enabled {
        return Err(decline("RDMA is not enabled on this server; use plain HTTP"));
    }
    let headers = || req.headers.iter().copied();
    if !proto::is_v2(headers()) {
        return Err(decline("x-amz-rdma-protocol is not hipobj-rc-v2"));
    }
    let first = |name: &str| {
        req.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    let has_body = first("content-length").is_some_and(|v| v != b"0") || first("transfer-encoding").is_some();
    if has_body {
        return Err(Refused::new(Status::BadRequest, "control requests have no body"));
    }
    let key = crate::sigv4::verify_at(req.method, req.path, req.query, req.headers, keys, now)
        .map_err(|why| Refused::new(Status::Forbidden, why))?;
    let bad = |e: proto::V2Error| Refused::new(e.status(), e.to_string());
    let control = match which {
        Which::Prepare => ControlRequest::Prepare(PrepareRequest::from_headers(headers()).map_err(bad)?),
        Which::Ready => ControlRequest::Ready(ReadyRequest::from_headers(headers()).map_err(bad)?),
        Which::Cancel => ControlRequest::Cancel(CancelRequest::from_headers(headers()).map_err(bad)?),
    };
    Ok((key, control))
}

/// A local RDMA failure's 500.
fn local<E>(e: VerbsError) -> V2Failure<E> {
    V2Failure::new(Status::Internal, format!("RDMA failed: {e}"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4;

    const NOW: u64 = 1_796_064_060;

    fn keys() -> HashMap<String, String> {
        HashMap::from([("k".to_owned(), "s".to_owned())])
    }

    /// A CANCEL signed by `k` for `path`, over the usual headers and
    /// `extra`.
    fn cancel(path: &str, extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        let date = sigv4::amz_date(NOW);
        let mut h: Vec<(String, String)> = vec![
            ("host".into(), "127.0.0.1".into()),
            ("x-amz-date".into(), date.clone()),
            (proto::PROTOCOL_HEADER.into(), proto::PROTOCOL.into()),
            (proto::SESSION_HEADER.into(), "ab".repeat(16)),
        ];
        h.extend(extra.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())));
        let auth = sigv4::sign("POST", path, &h, "k", "s", &date);
        h.push(("authorization".into(), auth));
        h.into_iter().map(|(n, v)| (n, v.into_bytes())).collect()
    }

    fn check(
        method: &str,
        path: &str,
        h: &[(String, Vec<u8>)],
        enabled: bool,
    ) -> Result<String, (u16, bool)> {
        let pairs: Vec<(&str, &[u8])> = h.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let req = ControlHttp {
            method,
            path,
            query: None,
            headers: &pairs,
        };
        check_control(&req, enabled, &keys(), NOW)
            .map(|(k, _)| k)
            .map_err(|r| (r.status.code(), r.declined))
    }

    #[test]
    fn control_requests_are_checked_in_the_servers_order() {
        let p = proto::CANCEL_PATH;
        let good = cancel(p, &[]);
        assert_eq!(check("POST", p, &good, true), Ok("k".to_owned()));
        assert_eq!(check("POST", "/.hipobj-rc/other", &good, true), Err((404, false)));
        assert_eq!(check("GET", p, &good, true), Err((400, false)));
        assert_eq!(check("POST", p, &good, false), Err((501, true)));
        let v1: Vec<_> = good
            .iter()
            .map(|(n, v)| {
                let v = if n == proto::PROTOCOL_HEADER {
                    b"hipobj-rc-v1".to_vec()
                } else {
                    v.clone()
                };
                (n.clone(), v)
            })
            .collect();
        assert_eq!(check("POST", p, &v1, true), Err((501, true)));
        // A body is refused before the signature is looked at.
        assert_eq!(
            check("POST", p, &cancel(p, &[("content-length", "5")]), true),
            Err((400, false))
        );
        assert_eq!(
            check("POST", p, &cancel(p, &[("content-length", "0")]), true),
            Ok("k".to_owned())
        );
        // Signed for another path, or unsigned: 403.
        assert_eq!(
            check("POST", p, &cancel(proto::READY_PATH, &[]), true),
            Err((403, false))
        );
        let unsigned: Vec<_> = good
            .iter()
            .filter(|(n, _)| n != "authorization")
            .cloned()
            .collect();
        assert_eq!(check("POST", p, &unsigned, true), Err((403, false)));
        // Signed, but the message is malformed: its own status, after the
        // signature (so an unsigned probe learns nothing of the parser).
        let mut bad = cancel(p, &[]);
        for (n, v) in &mut bad {
            if n == proto::SESSION_HEADER {
                v.pop();
            }
        }
        assert_eq!(check("POST", p, &bad, true), Err((403, false)));
        let short = "ab".repeat(15);
        let date = sigv4::amz_date(NOW);
        let mut h: Vec<(String, String)> = vec![
            ("host".into(), "127.0.0.1".into()),
            ("x-amz-date".into(), date.clone()),
            (proto::PROTOCOL_HEADER.into(), proto::PROTOCOL.into()),
            (proto::SESSION_HEADER.into(), short),
        ];
        let auth = sigv4::sign("POST", p, &h, "k", "s", &date);
        h.push(("authorization".into(), auth));
        let h: Vec<_> = h.into_iter().map(|(n, v)| (n, v.into_bytes())).collect();
        assert_eq!(check("POST", p, &h, true), Err((400, false)));
    }
}
