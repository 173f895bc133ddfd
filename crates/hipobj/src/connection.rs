//! An RC connection: one queue pair and the completion queue it reports to.
//!
//! The client's QPs only ever respond: the server WRITEs into (GET) or READs
//! from (PUT) the client's memory. Each connection keeps one empty receive
//! posted. A GET's last WRITE carries an immediate value, which consumes that
//! receive: its completion is the client's proof that the server's WRITEs
//! reached this QP ([`Connection::take_write_proof`]), and the receive is
//! posted again. Otherwise a receive completion means the QP went to the
//! error state (it flushes the receive), which a non-blocking poll notices.
//!
//! What a server may touch is fenced per transfer ([`Grant`]): on a device
//! with type-2 memory windows, the connection's window is bound over exactly
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
}

/// The `wr_id` of the sentinel receive.
const SENTINEL: u64 = 0x6869_706f_626a_0001;
/// The `wr_id` of window binds.
const BIND: u64 = 0x6869_706f_626a_0002;
/// The `wr_id` of local invalidates.
const INVALIDATE: u64 = 0x6869_706f_626a_0003;
/// The `wr_id` of hipobj-rc-v2's PUT write.
const WRITE: u64 = 0x6869_706f_626a_0004;
/// How long a window bind or invalidate may take to complete.
const WINDOW_TIMEOUT: Duration = Duration::from_secs(10);

/// A key byte other than `not`, hard to guess: SipHash under the process's
/// random keys (std's `RandomState`) over a counter.
fn fresh_key_byte(not: u8) -> u8 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(std::collections::hash_map::RandomState::new);
    loop {
        let mut h = state.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let b = h.finish() as u8;
        if b != not {
            return b;
        }
    }
}

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
        let cq = device
            .device()
            .create_cq(16)
            .map_err(|e| rdma("creating a completion queue", &e))?;
        let qp = device
            .pd()
            .create_qp(&QpInitAttr {
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .map_err(|e| rdma("creating a queue pair", &e))?;
        let mw = if device.windows() {
            Some(
                device
                    .pd()
                    .alloc_mw()
                    .map_err(|e| rdma("allocating a memory window", &e))?,
            )
        } else {
            None
        };
        let conn = Self {
            qp,
            mw,
            cq,
            device,
            peer: None,
            broken: false,
            found_dead: false,
            open: None,
        };
        conn.to_init()?;
        Ok(conn)
    }

    fn to_init(&self) -> Result<()> {
        // With windows the window's rights are what a peer gets (and the QP's
        // flags must allow them); without, the QP grants nothing until a
        // transfer opens the one right it needs.
        let access = if self.mw.is_some() {
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
        self.post_sentinel()
    }

    fn post_sentinel(&self) -> Result<()> {
        self.qp
            .post_recv(&RecvWr {
                wr_id: SENTINEL,
                sg_list: &[],
            })
            .map_err(|e| rdma("posting the sentinel receive", &e))
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
            // Nothing granted survives the move to another server. A QP the
            // server's failed RDMA left in ERR cannot invalidate (the work
            // request flushes), and a reset keeps the QP and its number, so
            // the window could outlive the rebind: it goes instead, which
            // ends every key it had, and a fresh one takes its place.
            if self.close_grant().is_err() {
                self.replace_window()?;
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
            self.drain();
            self.to_init()?;
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
    /// ERR, which flushed the sentinel) goes back to INIT and forgets its
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
                self.drain();
                self.to_init()
            });
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    /// The key a token for `mr_rkey`'s registration carries: in window mode
    /// a fresh key of this connection's window (bound under it by
    /// [`Connection::open_grant`]); else the registration's own key.
    pub fn next_rkey(&self, mr_rkey: u32) -> u32 {
        match &self.mw {
            Some(mw) => {
                let k = mw.rkey();
                (k & !0xff) | u32::from(fresh_key_byte(k as u8))
            }
            None => mr_rkey,
        }
    }

    /// Whether a grant under `rkey` can be bound on this connection's
    /// window (the key names this window); always true without one.
    pub fn window_takes(&self, rkey: u32) -> bool {
        self.mw.as_ref().is_none_or(|mw| mw.rkey() >> 8 == rkey >> 8)
    }

    /// Whether this connection fences with a memory window.
    pub fn has_window(&self) -> bool {
        self.mw.is_some()
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
            (None, _) => {
                self.set_access(g.access)?;
                self.open = Some((g.rkey, g.access));
                Ok(())
            }
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
    pub fn close_grant(&mut self) -> Result<()> {
        let Some((key, _)) = self.open.take() else {
            return Ok(());
        };
        let r = if self.mw.is_some() {
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

    /// Deallocates the window (its keys find nothing from then on) and
    /// allocates a new one.
    fn replace_window(&mut self) -> Result<()> {
        if self.mw.take().is_some() {
            let mw = self
                .device
                .pd()
                .alloc_mw()
                .map_err(|e| rdma("allocating a memory window", &e))?;
            self.mw = Some(mw);
        }
        Ok(())
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
    /// `wr_id`. Any other completion (its own failure, or the sentinel's
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

    /// The proof that a GET's bytes reached this QP: the completion of the
    /// sentinel receive consumed by the server's RDMA WRITE WITH IMMEDIATE,
    /// successful, with the immediate value `imm` (the token's rkey).
    /// Polls without waiting: the server replies only after its WRITE
    /// completed, and RC ordering puts our receive completion on the CQ
    /// before the reply can arrive, so an empty CQ means no proof. Reposts
    /// the receive, then checks that nothing else completed. Any failure
    /// marks the connection broken.
    pub fn take_write_proof(&mut self, imm: u32) -> Result<()> {
        match self.take_write_imm()? {
            Some(got) if got == imm => Ok(()),
            Some(got) => {
                self.broken = true;
                Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    format!(
                        "the server's WRITE WITH IMMEDIATE carried {got:#x}, not this transfer's key {imm:#x}"
                    ),
                ))
            }
            None => {
                self.broken = true;
                Err(Error::new(
                    crate::ErrorKind::RdmaError,
                    "the server reported success, but no RDMA WRITE WITH IMMEDIATE reached the connection: nothing proves that the bytes moved",
                ))
            }
        }
    }

    /// Polls once without waiting for the completion of a WRITE WITH
    /// IMMEDIATE: `None` if the CQ is empty, its immediate value if the
    /// sentinel receive completed that way (the receive is then posted
    /// again, and nothing else may have completed). Any other completion is
    /// an error and marks the connection broken.
    pub fn take_write_imm(&mut self) -> Result<Option<u32>> {
        self.take_write_imm_len().map(|o| o.map(|(imm, _)| imm))
    }

    /// [`Connection::take_write_imm`] with the completion's byte count: the
    /// length of the WRITE WITH IMMEDIATE that consumed the receive.
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
        self.post_sentinel()?;
        self.check()?;
        Ok(Some((imm, c.byte_len)))
    }

    /// Checks, without waiting, that the QP has not gone to the error state.
    /// Any completion at all means it has, or that a peer sent something
    /// nobody asked for: outside a GET's proof, the sentinel receive
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
