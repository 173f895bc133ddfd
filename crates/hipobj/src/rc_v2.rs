//! The client half of hipobj-rc-v2 (docs/protocol.md §9): one
//! [`RcV2Session`] per transfer, driven through three signed control
//! requests the application sends (PREPARE, READY, and CANCEL when anything
//! fails).
//!
//! The library makes every value the requests carry and checks every value
//! the answers carry; the application only moves them over HTTP. The order:
//!
//! 1. [`Instance::rc_v2_session`] leases a connection (a QP in INIT, which
//!    nothing can reach) and draws a random non-zero cookie and PSN.
//! 2. The PREPARE values ([`RcV2Session::token`], cookie, PSN, size, op)
//!    go to the server; its answer goes to [`RcV2Session::prepared`],
//!    which checks the server's token against the QP number it names and
//!    moves the QP to RTR/RTS against the server's QP and PSN. For a GET
//!    it then grants the server exactly the transfer's range, write only,
//!    under a fresh key ([`RcV2Session::ready_buffer`]).
//! 3. The READY values go to the server. For a PUT the application calls
//!    [`RcV2Session::start`] once READY is on its way: the client's RDMA
//!    WRITE WITH IMMEDIATE (immediate = cookie) into the server's staging
//!    buffer. The server answers READY after the transfer.
//! 4. [`RcV2Session::finish`] checks the READY answer: status 200, the
//!    cookie echoed, the byte count equal to the size; for a GET, that the
//!    server's WRITE WITH IMMEDIATE completed on this QP carrying the
//!    cookie and exactly that many bytes; for a PUT, that the client's
//!    write completed.
//!
//! Whatever happens, the session's grant ends before `finish` returns (or
//! the session is dropped), and the QP is destroyed with the session: it
//! leaves RTS, so a server that writes late reaches nothing. The connection
//! is never reused for another server's session; the pool replaces it.
//! [`RcV2Session::cancel_id`] says whether a CANCEL is owed: from the
//! moment the server named a session until a READY answer ended it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::{Gid, Sge};
use hipobj_proto::rc_v2::{
    CancelRequest, Cookie, Crc64Nvme, ObjectPath, PrepareRequest, PrepareResponse, Psn, Qpn, ReadyRequest,
    ReadyResponse, RemoteMr, SessionId, Size,
};
use hipobj_proto::{Token, Transport};

use crate::buffers::{BufEntry, BufKind};
use crate::connection::{Grant, Peer};
use crate::direction::{Direction, SyncDirection};
use crate::error::{Error, ErrorKind, Result};
use crate::instance::Instance;
use crate::peer::{ControlChannel, Servers};
use crate::pool::Lease;
use crate::rc_v2_state::{Input, Stage, V2State};

/// The protocol's largest transfer, in bytes (2^31 - 1).
pub const RC_V2_MAX_SIZE: u64 = 0x7fff_ffff;

/// How long the client's PUT write may take to complete once the server
/// answered READY (it answers only after it saw the write, so this is slack).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a GET's WRITE WITH IMMEDIATE may take to show on the CQ after
/// the READY answer arrived, unless the session is told otherwise
/// ([`RcV2Session::set_proof_wait`]): the server answers only after its
/// write completed, so normally it is already there.
pub const RC_V2_PROOF_WAIT: Duration = Duration::from_secs(2);

/// One hipobj-rc-v2 transfer on the client's side.
#[derive(Debug)]
pub struct RcV2Session {
    // Field order is drop order: the lease (and with it the QP, destroyed
    // because the session never calls `note_success`) goes first.
    lease: Option<Lease>,
    // Held until the session ends, so the buffer cannot be deregistered
    // under a live session; released then, so a finished one does not
    // keep it busy.
    entry: Option<Arc<BufEntry>>,
    /// The address the server sees for the transfer's first byte.
    addr: u64,
    instance: Arc<Instance>,
    dir: Direction,
    offset: usize,
    size: usize,
    cookie: u32,
    psn: u32,
    rkey: u32,
    qpn: u32,
    /// The stage and the server's session id (crate::rc_v2_state).
    state: V2State,
    staging: Option<RemoteMr>,
    /// The addresses the PREPARE answer's GID must be among (crate::peer).
    server_addrs: Option<Vec<IpAddr>>,
    /// How PREPARE reached the server (crate::peer).
    channel: ControlChannel,
    /// How long a GET's proof may lag the READY answer.
    proof_wait: Duration,
}

/// A random non-zero value below `limit` (a power of two), from SipHash
/// under the process's random keys over a counter and the clock.
fn random_nonzero(limit: u64) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(std::collections::hash_map::RandomState::new);
    loop {
        let mut h = state.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let v = h.finish() & (limit - 1);
        if v != 0 {
            return v as u32;
        }
    }
}

fn failed(kind: ErrorKind, why: impl Into<String>) -> Error {
    Error::new(kind, why)
}

impl Instance {
    /// Starts a hipobj-rc-v2 session for `size` bytes at `offset` of the
    /// buffer registered at `addr`: leases a connection and draws the
    /// cookie and PSN. For a PUT of a staged buffer, the bytes are copied to
    /// the staging buffer first.
    pub fn rc_v2_session(
        self: &Arc<Self>,
        dir: Direction,
        addr: usize,
        size: usize,
        offset: usize,
    ) -> Result<RcV2Session> {
        let entry = self.find_usable(addr)?;
        if size == 0 {
            return Err(Error::invalid("the transfer size is 0"));
        }
        if size as u64 > RC_V2_MAX_SIZE {
            return Err(Error::new(
                ErrorKind::SizeTooLarge,
                format!("{size} bytes is over hipobj-rc-v2's limit of 2^31-1 bytes per transfer"),
            ));
        }
        entry.check_range(offset, size)?;
        if dir == Direction::Put {
            self.stage(&entry, offset, size, SyncDirection::ToHost)?;
        }
        let mut lease = self.acquire_idle()?;
        let conn = lease.conn();
        let qpn = conn.qp_num();
        let rkey = match dir {
            Direction::Get => conn.next_rkey(entry.rkey(Direction::Get))?,
            Direction::Put => 0,
        };
        let addr = entry.token_addr().wrapping_add(offset as u64);
        Ok(RcV2Session {
            lease: Some(lease),
            entry: Some(entry),
            addr,
            instance: self.clone(),
            dir,
            offset,
            size,
            cookie: random_nonzero(1 << 32),
            psn: random_nonzero(1 << 24),
            rkey,
            qpn,
            state: V2State::new(dir),
            staging: None,
            server_addrs: self.server_addrs(),
            channel: ControlChannel::Unauthenticated,
            proof_wait: RC_V2_PROOF_WAIT,
        })
    }
}

impl RcV2Session {
    /// The direction (`x-amz-rdma-op`).
    pub fn direction(&self) -> Direction {
        self.dir
    }

    /// `x-amz-rdma-size`: bytes to move.
    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// `x-amz-rdma-cookie`: non-zero, and the immediate value of the one
    /// write that moves the bytes.
    pub fn cookie(&self) -> u32 {
        self.cookie
    }

    /// `x-amz-rdma-psn`: the client's first PSN, non-zero, 24 bits.
    pub fn psn(&self) -> u32 {
        self.psn
    }

    /// The client's QP number (`x-amz-rdma-qpn` of READY).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The address the server sees for the transfer's first byte.
    fn remote_addr(&self) -> u64 {
        self.addr
    }

    fn entry(&self) -> Result<Arc<BufEntry>> {
        self.entry
            .clone()
            .ok_or_else(|| failed(ErrorKind::InvalidValue, "the session has ended"))
    }

    /// `x-amz-rdma-token` of PREPARE: RC, the client's QP, GID and port;
    /// for a GET the range the server will write and the key it will be
    /// granted under (nothing is reachable before READY), for a PUT the
    /// range with key 0 (the server is granted nothing).
    pub fn token(&self) -> Token {
        let d = self.instance.device();
        Token {
            transport: Transport::Rc,
            qpn: self.qpn,
            gid: d.gid().0,
            rkey: self.rkey,
            addr: self.remote_addr(),
            len: self.size as u64,
            port: d.port(),
            lid: 0,
        }
    }

    /// The server's session id, once PREPARE succeeded and until READY was
    /// answered: while this is `Some`, the server holds resources that a
    /// CANCEL (with this id) releases.
    pub fn cancel_id(&self) -> Option<SessionId> {
        self.state.cancel_owed()
    }

    /// GET: `x-amz-rdma-mr-addr` and `x-amz-rdma-mr-rkey` of READY, the
    /// range the server may write. `None` for a PUT.
    pub fn ready_buffer(&self) -> Option<RemoteMr> {
        (self.dir == Direction::Get).then(|| RemoteMr {
            addr: self.remote_addr(),
            rkey: self.rkey,
        })
    }

    /// The server's staging buffer (PUT), once PREPARE succeeded.
    pub fn staging(&self) -> Option<RemoteMr> {
        self.staging
    }

    /// The PREPARE request for `bucket`/`key`, starting `object_offset`
    /// bytes into the object (a ranged GET; `None` for a PUT or a GET from
    /// the start).
    pub fn prepare_request(
        &self,
        bucket: &str,
        key: &str,
        object_offset: Option<u64>,
    ) -> Result<PrepareRequest> {
        self.expect(Stage::Prepare, "PREPARE")?;
        let target = ObjectPath::new(bucket, key).map_err(|e| {
            Error::invalid(format!(
                "s3://{bucket}/{key} cannot be a hipobj-rc-v2 target: {e}"
            ))
        })?;
        if object_offset.is_some_and(|o| o != 0) && self.dir == Direction::Put {
            return Err(Error::invalid(
                "a hipobj-rc-v2 PUT writes a whole object: no offset",
            ));
        }
        Ok(PrepareRequest {
            op: self.dir,
            target,
            size: Size::new(self.size as u64)
                .ok_or_else(|| Error::new(ErrorKind::SizeTooLarge, "over the protocol's size"))?,
            offset: object_offset.filter(|&o| o != 0),
            token: self.token(),
            psn: Psn::new(self.psn).ok_or_else(|| Error::new(ErrorKind::InternalError, "PSN"))?,
            cookie: Cookie::new(self.cookie).ok_or_else(|| Error::new(ErrorKind::InternalError, "cookie"))?,
            client_mr: None,
            part: None,
        })
    }

    /// The READY request: the session, the cookie, and the client's QP
    /// (with, for a GET, the buffer range the server may write).
    pub fn ready_request(&self) -> Result<ReadyRequest> {
        self.expect(Stage::Ready, "READY")?;
        let session = self
            .state
            .cancel_owed()
            .ok_or_else(|| Error::new(ErrorKind::InternalError, "no session"))?;
        let qpn = Qpn::new(self.qpn).ok_or_else(|| Error::new(ErrorKind::InternalError, "QPN"))?;
        let mr = self.ready_buffer().unwrap_or(RemoteMr { addr: 0, rkey: 0 });
        Ok(ReadyRequest {
            session,
            cookie: Cookie::new(self.cookie).ok_or_else(|| Error::new(ErrorKind::InternalError, "cookie"))?,
            client_mr: Some((mr, qpn)),
        })
    }

    /// The CANCEL request the server is owed, if any (see
    /// [`RcV2Session::cancel_id`]).
    pub fn cancel_request(&self) -> Option<CancelRequest> {
        self.state.cancel_owed().map(|session| CancelRequest { session })
    }

    fn lease(&mut self) -> Result<&mut Lease> {
        self.lease
            .as_mut()
            .ok_or_else(|| failed(ErrorKind::InternalError, "the session has ended"))
    }

    fn expect(&self, want: Stage, what: &str) -> Result<()> {
        if self.state.stage() == want {
            Ok(())
        } else {
            Err(failed(
                ErrorKind::InvalidValue,
                format!(
                    "{what} does not fit the session's state ({:?})",
                    self.state.stage()
                ),
            ))
        }
    }

    /// Moves the stage machine on by `input`; a misfit is an error and
    /// changes nothing.
    fn take(&mut self, input: Input) -> Result<Stage> {
        self.state.take(input).map_err(|m| {
            failed(
                ErrorKind::InvalidValue,
                format!("{:?} does not fit the session's state ({:?})", m.input, m.stage),
            )
        })
    }

    /// Ends the session's grant and its QP: called on every failure.
    fn fail(&mut self, e: Error) -> Error {
        // A session already over stays as it is.
        let _ = self.state.take(Input::Fail);
        self.end();
        e
    }

    fn end(&mut self) {
        if self.instance.forked() {
            // A session a forked child inherited: its QP is the parent's.
            std::mem::forget(self.lease.take());
            std::mem::forget(self.entry.take());
            self.instance.leak_if_forked();
            return;
        }
        if let Some(mut lease) = self.lease.take() {
            // The grant ends first; then the QP leaves RTS for good (the
            // lease, never marked a success, destroys it).
            let _ = lease.conn().close_grant();
            let _ = lease.conn().disable();
        }
        self.entry = None;
    }

    /// The addresses of the server PREPARE goes to (its endpoint's host,
    /// resolved): the answer's GID must be one of them, or one that
    /// `HIPOBJ_ALLOW_PEER_GID` lists, unless PREPARE went over verified TLS
    /// ([`RcV2Session::control_channel`]; docs/protocol.md §8). Without this
    /// call, those of [`Instance::set_server_addrs`], if any.
    pub fn expect_server(&mut self, addrs: Vec<IpAddr>) {
        self.server_addrs = Some(addrs);
    }

    /// How long [`RcV2Session::finish`] waits for a GET's WRITE WITH
    /// IMMEDIATE to show on the QP once READY was answered with success
    /// ([`RC_V2_PROOF_WAIT`] unless set). A caller whose NIC delivers a
    /// write before its answer can be read (a fake one, as the fuzz target
    /// has) may set it to zero.
    pub fn set_proof_wait(&mut self, wait: Duration) {
        self.proof_wait = wait;
    }

    /// How PREPARE reached the server. Say
    /// [`ControlChannel::VerifiedTls`] only when it went over TLS whose
    /// certificate the HTTP client verified for the endpoint's host: the
    /// answer's GID may then be any unicast address (a multi-homed server's
    /// RDMA NIC), not only one of [`RcV2Session::expect_server`]'s
    /// (docs/protocol.md §8). Without this call,
    /// [`ControlChannel::Unauthenticated`].
    pub fn control_channel(&mut self, channel: ControlChannel) {
        self.channel = channel;
    }

    /// Consumes the answer to PREPARE: status `status` with the values of
    /// `answer` (`None` when the headers were missing or malformed). On
    /// success the QP is connected to the server's and, for a GET, the
    /// transfer's range is granted. On failure the session is over and
    /// [`RcV2Session::cancel_id`] says whether the server still needs a
    /// CANCEL.
    pub fn prepared(&mut self, status: u16, answer: Option<&PrepareResponse>) -> Result<()> {
        self.expect(Stage::Prepare, "a PREPARE answer")?;
        let r = self.prepared_inner(status, answer);
        r.map_err(|e| self.fail(e))
    }

    fn prepared_inner(&mut self, status: u16, answer: Option<&PrepareResponse>) -> Result<()> {
        if status != 200 {
            return Err(failed(
                ErrorKind::S3Error,
                format!("the server answered PREPARE with HTTP {status}"),
            ));
        }
        let a = answer.ok_or_else(|| {
            failed(
                ErrorKind::S3Error,
                "the server's PREPARE answer lacks or garbles a hipobj-rc-v2 header",
            )
        })?;
        // From here on the server holds a session: a failure owes a CANCEL.
        self.take(Input::Prepared {
            session: Some(a.session),
        })?;
        let servers = self.instance.servers(self.server_addrs.as_deref(), self.channel);
        let peer = check_server(a, self.dir, self.size as u64, servers)?;
        let (psn, dir) = (a.psn.get(), self.dir);
        let sq_psn = self.psn;
        self.staging = (dir == Direction::Put).then(|| a.staging());
        let (addr, len, rkey) = (self.remote_addr(), self.size as u64, self.rkey);
        let entry = self.entry()?;
        let lease = self
            .lease
            .as_mut()
            .ok_or_else(|| failed(ErrorKind::InternalError, "the session has ended"))?;
        let conn = lease.conn();
        conn.connect_with(peer, psn, sq_psn)?;
        if dir == Direction::Get {
            conn.open_grant(&Grant {
                mr: entry.window_mr(),
                addr,
                len,
                access: hipobj_platform::AccessFlags::REMOTE_WRITE,
                rkey,
            })?;
        }
        self.take(Input::Connected)?;
        Ok(())
    }

    /// [`RcV2Session::prepared`] from the response's status and headers
    /// (any `(name, value)` pairs; names in any case).
    pub fn prepared_from<'n, 'v>(
        &mut self,
        status: u16,
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<()> {
        let headers: Vec<(&str, &[u8])> = headers.into_iter().collect();
        let parsed = (status == 200).then(|| PrepareResponse::from_headers(headers.iter().copied()));
        match parsed {
            Some(Err(e)) => {
                self.expect(Stage::Prepare, "a PREPARE answer")?;
                // The server may hold a session even if we cannot read the
                // rest of its answer: if it named one, it is owed a CANCEL.
                let session = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(hipobj_proto::rc_v2::SESSION_HEADER))
                    .and_then(|(_, v)| SessionId::parse(v));
                self.take(Input::Prepared { session })?;
                Err(self.fail(failed(
                    ErrorKind::S3Error,
                    format!("the server's PREPARE answer is unusable: {e}"),
                )))
            }
            Some(Ok(a)) => self.prepared(status, Some(&a)),
            None => self.prepared(status, None),
        }
    }

    /// [`RcV2Session::finish`] from the response's status and headers.
    pub fn finish_from<'n, 'v>(
        &mut self,
        status: u16,
        headers: impl IntoIterator<Item = (&'n str, &'v [u8])>,
    ) -> Result<u64> {
        // A PUT whose write never started fails as `finish` says, whatever
        // the answer holds; any other answer out of order is refused as
        // `finish` refuses it, before its headers are read: nothing changes.
        if self.dir == Direction::Put && self.state.stage() == Stage::Ready {
            return self.finish(status, None);
        }
        self.expect(self.state.ready_stage(), "a READY answer")?;
        let parsed = (status == 200).then(|| ReadyResponse::from_headers(headers));
        match parsed {
            Some(Err(e)) => {
                let _ = self.finish(status, None);
                Err(failed(
                    ErrorKind::S3Error,
                    format!("the server's READY answer is unusable: {e}"),
                ))
            }
            Some(Ok(a)) => self.finish(status, Some(&a)),
            None => self.finish(status, None),
        }
    }

    /// PUT: posts the client's RDMA WRITE WITH IMMEDIATE (immediate = the
    /// cookie) of the whole range into the server's staging buffer. Call it
    /// once READY is on its way (the server accepts the write only after
    /// READY reached it; RC retransmits until then, about half a second).
    /// A GET has nothing to start; this is then a no-op.
    pub fn start(&mut self) -> Result<()> {
        if self.dir == Direction::Get {
            return self.expect(Stage::Ready, "start");
        }
        self.expect(Stage::Ready, "start")?;
        let r = self.start_inner();
        r.map_err(|e| self.fail(e))
    }

    fn start_inner(&mut self) -> Result<()> {
        let RemoteMr { addr, rkey } = self
            .staging
            .ok_or_else(|| failed(ErrorKind::InternalError, "no staging buffer"))?;
        let sge = Sge {
            addr: self.remote_addr(),
            length: u32::try_from(self.size).map_err(|_| failed(ErrorKind::SizeTooLarge, "size"))?,
            lkey: self.entry()?.lkey(),
        };
        let cookie = self.cookie;
        self.lease()?.conn().post_write_imm(sge, addr, rkey, cookie)?;
        self.take(Input::WriteStarted)?;
        Ok(())
    }

    /// Consumes the answer to READY and ends the session. Success needs
    /// status 200, the cookie echoed, a byte count equal to the size, and
    /// the RDMA itself: for a GET the server's WRITE WITH IMMEDIATE on this
    /// QP with the cookie and that many bytes, for a PUT the successful
    /// completion of the client's write. Returns the bytes moved. The grant
    /// and the QP end before this returns, whatever the outcome.
    ///
    /// A PUT whose write was never started (the answer came back first, or
    /// the application never called [`RcV2Session::start`]) fails: with an
    /// S3 error for a non-200 status, and as an RDMA error for a 200, which
    /// claims bytes the client never wrote.
    pub fn finish(&mut self, status: u16, answer: Option<&ReadyResponse>) -> Result<u64> {
        if self.dir == Direction::Put && self.state.stage() == Stage::Ready {
            // The answer ends the server's session, and this one.
            self.take(Input::ReadyAnswered)?;
            let e = if status == 200 {
                failed(
                    ErrorKind::RdmaError,
                    "the server answered READY with success, but the client never wrote the bytes",
                )
            } else {
                failed(
                    ErrorKind::S3Error,
                    format!("the server answered READY with HTTP {status} before the write started"),
                )
            };
            return Err(self.fail(e));
        }
        self.expect(self.state.ready_stage(), "a READY answer")?;
        // Any answer to READY ends the server's session: no CANCEL is owed.
        self.take(Input::ReadyAnswered)?;
        let r = self.finish_inner(status, answer);
        match r {
            Ok(n) => {
                let entry = self.entry();
                self.end();
                self.take(Input::Proven)?;
                if self.dir == Direction::Get {
                    self.instance
                        .stage(&entry?, self.offset, self.size, SyncDirection::ToDevice)?;
                }
                Ok(n)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn finish_inner(&mut self, status: u16, a: Option<&ReadyResponse>) -> Result<u64> {
        let size = self.size as u64;
        if status != 200 {
            return Err(failed(
                ErrorKind::S3Error,
                format!("the server answered READY with HTTP {status}"),
            ));
        }
        let a = a.ok_or_else(|| {
            failed(
                ErrorKind::S3Error,
                "the server's READY answer lacks or garbles a hipobj-rc-v2 header",
            )
        })?;
        if a.cookie.get() != self.cookie {
            return Err(failed(
                ErrorKind::RdmaError,
                format!(
                    "the READY answer echoes cookie {}, not this session's {:08x}",
                    a.cookie, self.cookie
                ),
            ));
        }
        match a.bytes {
            n if n == size => {}
            n if n < size => {
                return Err(failed(
                    ErrorKind::S3Error,
                    format!("the server moved {n} bytes of the {size} asked for"),
                ));
            }
            n => {
                return Err(failed(
                    ErrorKind::RdmaError,
                    format!("the READY answer claims {n} bytes, more than the session's {size}"),
                ));
            }
        }
        let (dir, cookie, proof_wait) = (self.dir, self.cookie, self.proof_wait);
        let conn = self.lease()?.conn();
        match dir {
            Direction::Put => conn.wait_write(WRITE_TIMEOUT)?,
            Direction::Get => {
                let deadline = Instant::now() + proof_wait;
                let (imm, len) = loop {
                    if let Some(got) = conn.take_write_imm_len()? {
                        break got;
                    }
                    if Instant::now() >= deadline {
                        conn.mark_broken();
                        return Err(failed(
                            ErrorKind::RdmaError,
                            "the server answered READY with success, but no RDMA WRITE WITH IMMEDIATE reached the client's queue pair",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                if imm != cookie {
                    return Err(failed(
                        ErrorKind::RdmaError,
                        format!(
                            "the server's WRITE WITH IMMEDIATE carried {imm:#010x}, not the cookie {cookie:#010x}"
                        ),
                    ));
                }
                if u64::from(len) != size {
                    return Err(failed(
                        ErrorKind::RdmaError,
                        format!("the server's WRITE WITH IMMEDIATE carried {len} bytes, not {size}"),
                    ));
                }
            }
        }
        conn.close_grant()?;
        conn.check()?;
        if let Some(want) = a.checksum_crc64nvme {
            self.check_checksum(want)?;
        }
        if matches!(self.entry()?.kind(), BufKind::Device { .. }) {
            self.instance
                .platform()
                .gpu
                .synchronize()
                .map_err(|e| Error::gpu(ErrorKind::RdmaError, "synchronizing the GPU", &e))?;
        }
        Ok(size)
    }

    /// Checks the READY answer's CRC-64/NVME against the session's bytes in
    /// host memory: what landed (GET) or what was written (PUT), in the
    /// buffer itself or in a staged buffer's host copy. GPU memory that the
    /// NIC reaches directly has no host copy, and is not checked.
    fn check_checksum(&self, want: Crc64Nvme) -> Result<()> {
        let entry = self.entry()?;
        let base = match entry.kind() {
            BufKind::Host => entry.addr(),
            BufKind::Staged => match entry.staging_addr() {
                Some(a) => a,
                None => return Ok(()),
            },
            BufKind::Device { .. } => return Ok(()),
        };
        // The entry is held for the call, and the grant has ended: nothing
        // frees or (through this session) writes the range meanwhile.
        let got = crate::checksum::crc64nvme_at(base + self.offset, self.size);
        if got != want {
            let what = match self.dir {
                Direction::Get => "the bytes that landed",
                Direction::Put => "the bytes the client wrote",
            };
            return Err(failed(
                ErrorKind::RdmaError,
                format!("checksum mismatch: the server's CRC64NVME is {want}, but {what} have {got}"),
            ));
        }
        Ok(())
    }

    /// Ends the session without a READY answer (the application gave up, or
    /// READY could not be sent): the grant and the QP end now. The caller
    /// still owes the server a CANCEL if [`RcV2Session::cancel_id`] was set.
    pub fn abort(&mut self) {
        // A session already over stays as it is.
        let _ = self.state.take(Input::Fail);
        self.end();
    }

    /// Whether the session finished with success.
    pub fn is_done(&self) -> bool {
        self.state.stage() == Stage::Done
    }
}

impl Drop for RcV2Session {
    fn drop(&mut self) {
        self.end();
    }
}

/// Checks the server's PREPARE answer before anything is connected, beyond
/// what parsing it checked (an RC token agreeing with `X-Amz-Rdma-Qpn` and
/// the staging headers, a non-zero GID and PSN): a QP number that can be an
/// RC QP, a unicast GID, a port, (PUT) a staging buffer that holds `size`
/// bytes, and a GID on a server `servers` accepts (crate::peer).
fn check_server(a: &PrepareResponse, dir: Direction, size: u64, servers: Servers<'_>) -> Result<Peer> {
    let bad = |why: String| {
        Err(failed(
            ErrorKind::S3Error,
            format!("the server's PREPARE answer is unusable: {why}"),
        ))
    };
    let t = &a.token;
    if t.transport != Transport::Rc {
        return bad("its token is not for a reliable connection".into());
    }

    if !(2..=hipobj_proto::PSN_MAX).contains(&t.qpn) {
        return bad(format!("QP number {:#x} is not in 2..2^24", t.qpn));
    }
    let gid = Gid(t.gid);
    if t.gid == [0; 16] || t.gid[0] == 0xff {
        return bad(format!("its GID {gid} is not a unicast address"));
    }
    if let Some(v4) = gid.to_ipv4()
        && (v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast())
    {
        return bad(format!("its GID {gid} maps {v4}, which is not a unicast address"));
    }
    if t.port == 0 {
        return bad("its token's port is 0".into());
    }
    if dir == Direction::Put && t.len < size {
        return bad(format!(
            "its staging buffer holds {} bytes, fewer than the {size} to write",
            t.len
        ));
    }
    servers.check(gid)?;
    Ok(Peer { gid, qpn: t.qpn })
}
