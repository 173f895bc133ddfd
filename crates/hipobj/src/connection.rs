//! An RC connection: one queue pair and the completion queue it reports to.
//!
//! The client's QPs only ever respond: the server WRITEs into (GET) or READs
//! from (PUT) the client's memory. Each connection keeps empty receives
//! posted: one at least, and two before a GET. A GET's bytes come as one
//! WRITE WITH IMMEDIATE of the whole range, which consumes a receive: its
//! completion, with the byte count the NIC reports, is the client's proof
//! of what landed ([`Connection::take_landed`]); the second receive catches
//! a WRITE WITH IMMEDIATE too many. The receives are posted again.
//! Otherwise a receive completion means the QP went to the error state (it
//! flushes the receives), which a non-blocking poll notices.
//!
//! What a server may touch is fenced per transfer ([`Grant`]): on a device
//! with type-2 memory windows, a window taken from the device's pool
//! (`crate::windows`) is bound over exactly
//! the transfer's range with only its right, under the key the token
//! carries, and invalidated before the call returns; without windows, the
//! QP's remote access flags are opened to the transfer's right by an
//! RTS->RTS modify and closed again afterwards. Window binds and invalidates
//! are the only send work requests a client posts; their completions are
//! consumed here, so any other completion than these and a GET's proof
//! still means the QP failed. A GET's proof is taken before its window is
//! invalidated.

use std::sync::Arc;

use std::time::{Duration, Instant};

use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::{
    AccessFlags, BindMwWr, CompletionQueue, Gid, MemoryRegion, MemoryWindow, QpAttr, QpAttrMask, QpInitAttr,
    QpState, QueuePair, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

use crate::device::RdmaDevice;
use crate::error::{Error, Result};

/// The server end a connection is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The server's GID.
    pub gid: Gid,
    /// The server's QP number.
    pub qpn: u32,
}

/// What one transfer grants the server, through one connection.
#[derive(Clone, Copy, Debug)]
pub struct Grant<'a> {
    /// Window mode: the registration the window covers (registered with
    /// `MW_BIND`). `None` in the access-flag fallback.
    pub mr: Option<&'a dyn MemoryRegion>,
    /// First byte granted.
    pub addr: u64,
    /// Bytes granted.
    pub len: u64,
    /// The one remote right granted: REMOTE_WRITE for a GET, REMOTE_READ for a PUT.
    pub access: AccessFlags,
    /// The key the token carries (window mode: the key the window is bound
    /// under; fallback: the key of the registration with that right).
    pub rkey: u32,
}

/// A queue pair, its completion queue, its memory window, and whom it is bound to.
#[derive(Debug)]
pub struct Connection {
    // Field order is drop order: the QP goes before its window and its CQ.
    // Destroying the QP ends any binding of the window (a type-2 window is
    // reachable only through the QP that bound it); dropping the window
    // deallocates it, before the buffers' MRs go.
    qp: Box<dyn QueuePair>,
    mw: Option<Box<dyn MemoryWindow>>,
    cq: Arc<dyn CompletionQueue>,
    device: Arc<RdmaDevice>,
    peer: Option<Peer>,
    broken: bool,
    /// Set when [`Connection::open_grant`] failed because the QP was already
    /// in the error state (see [`Connection::found_dead`]).
    found_dead: bool,
    /// The grant in force: the window's key while bound, or the right the
    /// QP's access flags grant.
    open: Option<(u32, AccessFlags)>,
    /// Receives posted and not yet completed.
    posted: u32,
    /// Receives to keep posted: the most a transfer on it has needed.
    depth: u32,
}

/// Receives kept posted before a GET: one for its WRITE WITH IMMEDIATE,
/// one to see a second.
const GET_RECVS: u32 = 2;
/// Completions polled at once while counting a GET's WRITEs.
const POLL_BATCH: usize = 32;

/// The `wr_id` of every receive the connection posts.
const SENTINEL: u64 = 0x6869_706f_626a_0001;
/// The `wr_id` of window binds.
const BIND: u64 = 0x6869_706f_626a_0002;
/// The `wr_id` of local invalidates.
const INVALIDATE: u64 = 0x6869_706f_626a_0003;
/// The `wr_id` of hipobj-rc-v2's PUT write.
const WRITE: u64 = 0x6869_706f_626a_0004;
/// How long a window bind or invalidate may take to complete.
const WINDOW_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed grant or wait, with the status of the completion that showed
/// it, if one did.
#[derive(Debug)]
struct GrantError {
    error: Error,
    first_completion: Option<WcStatus>,
}

impl From<Error> for GrantError {
    fn from(error: Error) -> Self {
        Self {
            error,
            first_completion: None,
        }
    }
}

fn rdma(what: &str, e: &hipobj_platform::VerbsError) -> Error {
    Error::rdma(what, e)
}

impl Connection {
    /// Creates a QP and CQ on `device` and moves the QP to INIT, where it
    /// waits for a peer.
    pub fn new(device: Arc<RdmaDevice>) -> Result<Self> {
        // Room for every receive (a QP in ERR flushes them all) and the
        // window operations.
        let cq = device
            .device()
            .create_cq(GET_RECVS + 16)
            .map_err(|e| rdma("creating a completion queue", &e))?;
        let qp = device
            .pd()
            .create_qp(&QpInitAttr {
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                max_send_wr: 8,
                max_recv_wr: GET_RECVS,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .map_err(|e| rdma("creating a queue pair", &e))?;
        let mut conn = Self {
            qp,
            mw: None,
            cq,
            device,
            peer: None,
            broken: false,
            found_dead: false,
            open: None,
            posted: 0,
            depth: 1,
        };
        conn.enter_init()?;
        Ok(conn)
    }

    fn enter_init(&mut self) -> Result<()> {
        // With windows the window's rights are what a peer gets (and the QP's
        // flags must allow them); without, the QP grants nothing until a
        // transfer opens the one right it needs.
        let access = if self.device.windows() {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
        } else {
            AccessFlags::LOCAL_WRITE
        };
        let attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: self.device.port(),
            qp_access_flags: access,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
        self.qp
            .modify(&attr, mask)
            .map_err(|e| rdma("moving a queue pair to INIT", &e))?;
        // A reset dropped every receive.
        self.posted = 0;
        self.post_receives()
    }

    /// Posts receives until `depth` are posted.
    fn post_receives(&mut self) -> Result<()> {
        while self.posted < self.depth {
            self.qp
                .post_recv(&RecvWr {
                    wr_id: SENTINEL,
                    sg_list: &[],
                })
                .map_err(|e| rdma("posting a receive", &e))?;
            self.posted += 1;
        }
        Ok(())
    }

    /// Makes sure a GET finds a receive for its WRITE WITH IMMEDIATE and one
    /// more, so that a second is seen: the receive queue stays that deep.
    /// Called before the token leaves. A failure marks the connection
    /// broken.
    pub fn ready_for_get(&mut self) -> Result<()> {
        self.depth = self.depth.max(GET_RECVS);
        let r = self.post_receives();
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// The QP number tokens carry.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The server end this connection is bound to, if any.
    pub fn peer(&self) -> Option<Peer> {
        self.peer
    }

    /// Whether the connection saw an error and must not be used again.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Marks the connection unusable; the pool destroys it.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Takes the QP out of RTS for good (to RESET, which drops everything a
    /// peer sends) and marks the connection broken. Returns whether the QP
    /// left RTS; if not, the caller must destroy it.
    pub fn disable(&mut self) -> bool {
        self.broken = true;
        self.peer = None;
        let reset = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        self.qp.modify(&reset, QpAttrMask::STATE).is_ok()
    }

    /// Binds the QP to `peer`: RTR expecting `psn` first, then RTS. A QP
    /// bound to another peer is reset and brought back to INIT first, so the
    /// QP number, which the server's binding names, stays the same.
    pub fn connect(&mut self, peer: Peer, psn: u32) -> Result<()> {
        self.connect_with(peer, psn, 0)
    }

    /// [`Connection::connect`] with our own first PSN `sq_psn` (hipobj-rc-v2
    /// announces it to the server in PREPARE; the binding protocol sends 0).
    pub fn connect_with(&mut self, peer: Peer, psn: u32, sq_psn: u32) -> Result<()> {
        let result = self.connect_inner(peer, psn, sq_psn);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn connect_inner(&mut self, peer: Peer, psn: u32, sq_psn: u32) -> Result<()> {
        if self.peer.is_some() {
            // A bound QP is rebound during a transfer: anything it saw since
            // the transfer began (an access its NIC refused, which moved it
            // to ERR and flushed its receives) fails the transfer, and the
            // reset below must not wipe that out.
            self.check()?;
            if matches!(self.qp.state(), Ok(QpState::Err)) {
                return Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    "the connection went to the error state during the transfer (its NIC refused an access by the server)",
                ));
            }
            // Nothing granted survives the move to another server. A QP the
            // server's failed RDMA left in ERR cannot invalidate (the work
            // request flushes), and a reset keeps the QP and its number, so
            // the window could outlive the rebind: it goes instead, which
            // ends every key it had, and a fresh one takes its place.
            if self.end_grant().is_err() {
                self.discard_window();
                self.broken = false;
            }
            self.peer = None;
            let reset = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            self.qp
                .modify(&reset, QpAttrMask::STATE)
                .map_err(|e| rdma("resetting a queue pair", &e))?;
            self.posted = 0;
            self.drain();
            self.enter_init()?;
        }
        let d = &self.device;
        let path = RcPath {
            port: d.port(),
            sgid_index: d.gid_index(),
            mtu: d.mtu(),
            dest_qpn: peer.qpn,
            dgid: peer.gid,
            rq_psn: psn,
            sq_psn,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 1,
        };
        rc::to_rts(self.qp.as_ref(), &path, d.vendor(), d.limits())
            .map_err(|(step, e)| rdma(step.doing(), &e))?;
        self.peer = Some(peer);
        Ok(())
    }

    /// Readies a connection taken from the pool for a transfer. A QP that
    /// failed while idle (a late or stray access by the server moved it to
    /// ERR, which flushed the receives) goes back to INIT and forgets its
    /// server, so the transfer binds afresh in its first round.
    pub fn refresh(&mut self) -> Result<()> {
        let mut wc = [WorkCompletion::EMPTY; 1];
        match self.cq.poll(&mut wc) {
            Ok(0) => return Ok(()),
            Ok(_) if self.open.is_none() => {}
            Ok(_) => {
                self.broken = true;
                return Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    "the connection failed while it still granted access",
                ));
            }
            Err(e) => {
                self.broken = true;
                return Err(rdma("polling the completion queue", &e));
            }
        }
        self.peer = None;
        let reset = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        let r = self
            .qp
            .modify(&reset, QpAttrMask::STATE)
            .map_err(|e| rdma("resetting a queue pair", &e))
            .and_then(|()| {
                self.posted = 0;
                self.drain();
                self.enter_init()
            });
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// The key a token for `mr_rkey`'s registration carries: in window mode
    /// the key of a window taken at random from the device's pool, with a
    /// fresh key byte (`crate::windows`), which [`Connection::open_grant`]
    /// binds it under; else the registration's own key. A window this
    /// connection held unbound goes back to the pool first.
    pub fn next_rkey(&mut self, mr_rkey: u32) -> Result<u32> {
        let Some(pool) = self.device.window_pool() else {
            return Ok(mr_rkey);
        };
        if self.open.is_some() {
            return Err(Error::new(
                crate::ErrorKind::InternalError,
                "a new key was asked of a connection whose grant is still open",
            ));
        }
        if let Some(w) = self.mw.take() {
            pool.give_back(w);
        }
        let (w, key) = pool
            .take(self.device.pd().as_ref())
            .map_err(|e| rdma("allocating a memory window", &e))?;
        self.mw = Some(w);
        Ok(key)
    }

    /// Whether a grant under `rkey` can be bound on the window this
    /// connection holds (the key names it); always true without windows.
    pub fn window_takes(&self, rkey: u32) -> bool {
        if !self.device.windows() {
            return true;
        }
        self.mw.as_ref().is_some_and(|mw| mw.rkey() >> 8 == rkey >> 8)
    }

    /// Grants `g` to the bound server: binds the window under `g.rkey` over
    /// exactly `g`'s range with only `g`'s right and waits for the bind to
    /// complete, or (fallback) opens the QP's remote access to that right. A
    /// QP not yet bound to a server (in INIT) can be reached by nobody:
    /// nothing is done, and the caller grants again after binding. A failure
    /// marks the connection broken.
    pub fn open_grant(&mut self, g: &Grant<'_>) -> Result<()> {
        if self.peer.is_none() || self.open.is_some() {
            return Ok(());
        }
        let r = self.open_inner(g);
        if let Err(e) = &r {
            self.broken = true;
            self.found_dead = match e.first_completion {
                // Our own bind or invalidate failing completes with its own
                // status (MW_BIND_ERR, ...) before the QP flushes anything;
                // a flush first means the QP was in ERR before it ran.
                Some(status) => status == WcStatus::WrFlushErr,
                // The post or the modify was refused, or nothing completed:
                // ask the QP (only on this failure path, so a QP query costs
                // a healthy transfer nothing).
                None => matches!(self.qp.state(), Ok(QpState::Err)),
            };
        }
        r.map_err(|e| e.error)
    }

    /// Whether the last [`Connection::open_grant`] failed because the QP had
    /// already failed while idle (a late or stray access by the server
    /// moved it to ERR after the lease's CQ check): its window bind was
    /// flushed, or the post or modify was refused by a QP in ERR. Nothing
    /// of the transfer reached the server then, so the transfer may go on
    /// with another connection; this one is broken.
    pub fn found_dead(&self) -> bool {
        self.found_dead
    }

    fn open_inner(&mut self, g: &Grant<'_>) -> std::result::Result<(), GrantError> {
        if !self.device.windows() {
            self.set_access(g.access)?;
            self.open = Some((g.rkey, g.access));
            return Ok(());
        }
        match (&self.mw, g.mr) {
            (Some(mw), Some(mr)) => {
                let key = self
                    .qp
                    .bind_mw(&BindMwWr {
                        wr_id: BIND,
                        mw: mw.as_ref(),
                        mr,
                        addr: g.addr,
                        length: g.len,
                        access: g.access,
                        signaled: true,
                        rkey: Some(g.rkey),
                    })
                    .map_err(|e| rdma("binding a memory window", &e))?;
                // Counted as open from the post on: if the completion never
                // comes, the close path still tries to invalidate.
                self.open = Some((key, g.access));
                self.wait_op(BIND, WcOpcode::BindMw, "binding a memory window", WINDOW_TIMEOUT)?;
                if key != g.rkey {
                    return Err(Error::new(
                        crate::ErrorKind::RdmaError,
                        "the NIC bound the memory window under another key than the token carries",
                    )
                    .into());
                }
                Ok(())
            }
            (None, _) => Err(Error::new(
                crate::ErrorKind::InternalError,
                "a grant on a connection that holds no window",
            )
            .into()),
            (Some(_), None) => Err(Error::new(
                crate::ErrorKind::RdmaError,
                "a buffer registered without MW_BIND on a connection that fences with windows",
            )
            .into()),
        }
    }

    /// Ends the grant in force: invalidates the window and waits for that to
    /// complete, or closes the QP's remote access. Called before every
    /// transfer returns, on success and on failure. When it fails the
    /// connection is marked broken and the pool destroys the QP, which ends
    /// the window's binding as surely (a type-2 window's key works only
    /// through the QP that bound it), and drops the window.
    ///
    /// The window, its grant ended, goes back to the device's pool.
    pub fn close_grant(&mut self) -> Result<()> {
        self.end_grant()?;
        if let (Some(pool), Some(w)) = (self.device.window_pool(), self.mw.take()) {
            pool.give_back(w);
        }
        Ok(())
    }

    /// [`Connection::close_grant`], keeping the window: a rebind grants
    /// again under the key the token already carries.
    fn end_grant(&mut self) -> Result<()> {
        let Some((key, _)) = self.open.take() else {
            return Ok(());
        };
        let r = if self.device.windows() {
            self.qp
                .post_send(&SendWr {
                    wr_id: INVALIDATE,
                    op: SendOp::LocalInv { rkey: key },
                    sg_list: &[],
                    signaled: true,
                })
                .map_err(|e| rdma("invalidating a memory window", &e))
                .and_then(|()| {
                    self.wait_op(
                        INVALIDATE,
                        WcOpcode::LocalInv,
                        "invalidating a memory window",
                        WINDOW_TIMEOUT,
                    )
                    .map_err(|e| e.error)
                })
        } else {
            self.set_access(AccessFlags::default())
        };
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// Deallocates the window this connection holds (its keys find nothing
    /// from then on); the next key comes from another.
    fn discard_window(&mut self) {
        drop(self.mw.take());
    }

    /// Posts one signaled RDMA WRITE WITH IMMEDIATE of `sge` to
    /// `remote_addr`/`rkey` at the bound peer (hipobj-rc-v2's PUT: the
    /// client writes into the server's staging buffer). Its completion is
    /// awaited by [`Connection::wait_write`]. A failure marks the connection
    /// broken.
    pub fn post_write_imm(
        &mut self,
        sge: hipobj_platform::Sge,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()> {
        if self.peer.is_none() {
            return Err(Error::new(
                crate::ErrorKind::InternalError,
                "a write was posted on a connection bound to no server",
            ));
        }
        let r = self
            .qp
            .post_send(&SendWr {
                wr_id: WRITE,
                op: SendOp::WriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                },
                sg_list: &[sge],
                signaled: true,
            })
            .map_err(|e| rdma("posting an RDMA WRITE WITH IMMEDIATE", &e));
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// Waits up to `timeout` for the successful completion of the write of
    /// [`Connection::post_write_imm`]. Any other completion, or none in
    /// time, is an error and marks the connection broken.
    pub fn wait_write(&mut self, timeout: Duration) -> Result<()> {
        let r = self
            .wait_op(
                WRITE,
                WcOpcode::RdmaWrite,
                "the RDMA WRITE WITH IMMEDIATE",
                timeout,
            )
            .map_err(|e| e.error);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// RTS->RTS with these remote access flags (fallback mode).
    fn set_access(&self, access: AccessFlags) -> Result<()> {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            qp_access_flags: AccessFlags::LOCAL_WRITE | access,
            ..QpAttr::default()
        };
        self.qp
            .modify(&attr, QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS)
            .map_err(|e| rdma("changing a queue pair's remote access", &e))
    }

    /// Waits for the successful completion of the send work request
    /// `wr_id`. Any other completion (its own failure, or a receive's
    /// flush) means the QP failed; the error says which status came first.
    fn wait_op(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        what: &str,
        timeout: Duration,
    ) -> std::result::Result<(), GrantError> {
        let deadline = Instant::now() + timeout;
        let mut wc = [WorkCompletion::EMPTY; 1];
        loop {
            match self.cq.poll(&mut wc) {
                Ok(0) => {}
                Ok(_)
                    if wc[0].wr_id == wr_id
                        && wc[0].status == WcStatus::Success
                        && wc[0].opcode == opcode =>
                {
                    return Ok(());
                }
                Ok(_) => {
                    return Err(GrantError {
                        error: Error::new(
                            crate::ErrorKind::RdmaError,
                            format!(
                                "{what} failed (completion status {:?}, vendor error {:#x})",
                                wc[0].status, wc[0].vendor_err
                            ),
                        ),
                        first_completion: Some(wc[0].status),
                    });
                }
                Err(e) => return Err(rdma("polling the completion queue", &e).into()),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    format!("{what}: the NIC did not complete it within {timeout:?}"),
                )
                .into());
            }
            self.cq
                .wait(left.min(Duration::from_millis(100)))
                .map_err(|e| rdma("waiting on the completion queue", &e))?;
        }
    }

    fn drain(&self) {
        let mut wc = [WorkCompletion::EMPTY; 8];
        while matches!(self.cq.poll(&mut wc), Ok(n) if n > 0) {}
    }

    /// The proof that a GET of `len` bytes granted under `key` landed: the
    /// receive completion of exactly one WRITE WITH IMMEDIATE, successful,
    /// carrying `key`, whose byte count, as this QP's NIC reports it, is
    /// `len` (`hipobj_proto::landed::Tally`); the window admits only the
    /// range, so that WRITE covered all of it. Polls without waiting until
    /// the CQ is empty: the server replies only after its WRITE completed,
    /// and an RC responder completes a receive before it acknowledges the
    /// WRITE that consumed it, so the completion is on the CQ before the
    /// reply can exist. Posts the consumed receives again.
    /// Any failure marks the connection broken.
    pub fn take_landed(&mut self, key: u32, len: u64) -> Result<()> {
        let r = self.take_landed_inner(key, len);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    fn take_landed_inner(&mut self, key: u32, len: u64) -> Result<()> {
        let mut tally = hipobj_proto::landed::Tally::new(key, len);
        let mut wc = [WorkCompletion::EMPTY; POLL_BATCH];
        let refused = |why: String| {
            Error::new(
                crate::ErrorKind::RdmaError,
                format!("the server reported success, but what landed does not prove it: {why}"),
            )
        };
        loop {
            let n = self
                .cq
                .poll(&mut wc)
                .map_err(|e| rdma("polling the completion queue", &e))?;
            for c in &wc[..n] {
                let imm = match c.imm_data {
                    Some(imm)
                        if c.wr_id == SENTINEL
                            && c.status == WcStatus::Success
                            && c.opcode == WcOpcode::RecvRdmaWithImm =>
                    {
                        imm
                    }
                    _ => {
                        return Err(Error::new(
                            crate::ErrorKind::RdmaError,
                            format!(
                                "the connection completed something other than the server's WRITE WITH IMMEDIATE (status {:?}, opcode {:?}, vendor error {:#x})",
                                c.status, c.opcode, c.vendor_err
                            ),
                        ));
                    }
                };
                self.posted = self.posted.saturating_sub(1);
                tally.add(imm, c.byte_len).map_err(|r| refused(r.to_string()))?;
            }
            if n < wc.len() {
                break;
            }
        }
        tally
            .finish()
            .map_err(|r| refused(format!("{r} of the {len} asked for")))?;
        self.post_receives()
    }

    /// Polls once without waiting for the completion of a WRITE WITH
    /// IMMEDIATE: `None` if the CQ is empty, its immediate value and byte
    /// count (the length of the WRITE WITH IMMEDIATE that consumed the
    /// receive) if a receive completed that way (the receive is then posted
    /// again, and nothing else may have completed). Any other completion is
    /// an error and marks the connection broken.
    pub fn take_write_imm_len(&mut self) -> Result<Option<(u32, u32)>> {
        let result = self.take_write_imm_inner();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn take_write_imm_inner(&mut self) -> Result<Option<(u32, u32)>> {
        let mut wc = [WorkCompletion::EMPTY; 1];
        let n = self
            .cq
            .poll(&mut wc)
            .map_err(|e| rdma("polling the completion queue", &e))?;
        if n == 0 {
            return Ok(None);
        }
        let c = wc[0];
        let imm = match c.imm_data {
            Some(imm)
                if c.wr_id == SENTINEL
                    && c.status == WcStatus::Success
                    && c.opcode == WcOpcode::RecvRdmaWithImm =>
            {
                imm
            }
            _ => {
                return Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    format!(
                        "the connection completed something other than the server's WRITE WITH IMMEDIATE (status {:?}, opcode {:?}, vendor error {:#x})",
                        c.status, c.opcode, c.vendor_err
                    ),
                ));
            }
        };
        self.posted = self.posted.saturating_sub(1);
        self.post_receives()?;
        self.check()?;
        Ok(Some((imm, c.byte_len)))
    }

    /// Checks, without waiting, that the QP has not gone to the error state.
    /// Any completion at all means it has, or that a peer sent something
    /// nobody asked for: outside a GET's proof, a receive
    /// completes only when flushed (or when a peer SENDs to us, or WRITEs
    /// with an immediate outside a transfer).
    pub fn check(&mut self) -> Result<()> {
        let mut wc = [WorkCompletion::EMPTY; 1];
        match self.cq.poll(&mut wc) {
            Ok(0) => Ok(()),
            Ok(_) => {
                self.broken = true;
                Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    format!(
                        "the connection failed during the transfer (completion status {:?}, vendor error {:#x})",
                        wc[0].status, wc[0].vendor_err
                    ),
                ))
            }
            Err(e) => {
                self.broken = true;
                Err(rdma("polling the completion queue", &e))
            }
        }
    }
}
