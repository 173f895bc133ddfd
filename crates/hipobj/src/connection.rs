//! An RC connection: one queue pair and the completion queue it reports to.
//!
//! The client's QPs only ever respond: the server WRITEs into (GET) or READs
//! from (PUT) the client's memory. Each connection keeps one empty receive
//! posted. A GET's last WRITE carries an immediate value, which consumes that
//! receive: its completion is the client's proof that the server's WRITEs
//! reached this QP ([`Connection::take_write_proof`]), and the receive is
//! posted again. Otherwise a completion means the QP went to the error state
//! (it flushes the receive), which a non-blocking poll notices.

use std::sync::Arc;

use hipobj_platform::rc::{self, RcPath};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Gid, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr, WcOpcode,
    WcStatus, WorkCompletion,
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

/// A queue pair, its completion queue, and whom it is bound to.
#[derive(Debug)]
pub struct Connection {
    // Field order is drop order: the QP goes before its CQ.
    qp: Box<dyn QueuePair>,
    cq: Arc<dyn CompletionQueue>,
    device: Arc<RdmaDevice>,
    peer: Option<Peer>,
    broken: bool,
}

/// The `wr_id` of the sentinel receive.
const SENTINEL: u64 = 0x6869_706f_626a_0001;

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
        let conn = Self {
            qp,
            cq,
            device,
            peer: None,
            broken: false,
        };
        conn.to_init()?;
        Ok(conn)
    }

    fn to_init(&self) -> Result<()> {
        let attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: self.device.port(),
            qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
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
        let result = self.connect_inner(peer, psn);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn connect_inner(&mut self, peer: Peer, psn: u32) -> Result<()> {
        if self.peer.is_some() {
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
            sq_psn: 0,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 1,
        };
        rc::to_rts(self.qp.as_ref(), &path, d.vendor(), d.limits())
            .map_err(|(step, e)| rdma(step.doing(), &e))?;
        self.peer = Some(peer);
        Ok(())
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
        let result = self.take_write_imm_inner();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn take_write_imm_inner(&mut self) -> Result<Option<u32>> {
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
        Ok(Some(imm))
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
