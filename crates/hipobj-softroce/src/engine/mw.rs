//! Type-2 memory windows: allocation, and the bind and local-invalidate work
//! requests, executed in send-queue order.
//!
//! A bind or invalidate is posted on a QP's send queue like any other work
//! request, but moves no packets: it changes the window table. It executes
//! once every send work request posted before it has completed, and send
//! work requests posted after it wait until it has executed; so a WRITE or
//! READ posted after a bind sees the bind, and completions stay in posting
//! order. Nothing else is queued here: while no window operation is waiting,
//! posts go straight to the requester.
//!
//! The rules (IBA 10.6.7 and what rxe does): a type-2 window binds only when
//! free; the window, the region and the QP share one protection domain; the
//! region must allow `MW_BIND`; the range lies inside the region; a window
//! grants remote read and/or remote write only, and remote write needs the
//! region's local write. A failed bind completes with `MW_BIND_ERR`, a failed
//! invalidate with `LOC_QP_OP_ERR`, and either moves the QP to ERR. The key
//! of a bound window works only through the QP that bound it; destroying
//! that QP, deregistering the region or deallocating the window ends it.

use std::collections::VecDeque;

use hipobj_platform::{
    AccessFlags, QpState, SendOp, SendWr, Sge, VerbsError, VerbsErrorKind, WcOpcode, WcStatus,
};

use super::{Ctx, Engine, Time};
use crate::mem::table::Binding;

/// A bind as the verbs layer hands it over.
#[derive(Clone, Copy, Debug)]
pub struct MwBind {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Any key the window has had (its index is what counts).
    pub mw_key: u32,
    /// The region's key.
    pub mr_key: u32,
    /// First byte granted.
    pub addr: u64,
    /// Bytes granted.
    pub length: u64,
    /// Remote rights granted.
    pub access: AccessFlags,
    /// Whether a successful bind completes.
    pub signaled: bool,
    /// The key to bind under, if the caller chose it (same index).
    pub rkey: Option<u32>,
}

/// A send-queue entry waiting for the work requests posted before it.
#[derive(Debug)]
pub(crate) enum Pending {
    Bind {
        wr_id: u64,
        new_key: u32,
        binding: Binding,
        signaled: bool,
    },
    Inv {
        wr_id: u64,
        key: u32,
        signaled: bool,
    },
    Send {
        wr_id: u64,
        op: SendOp,
        sges: Vec<Sge>,
        signaled: bool,
    },
}

impl Pending {
    fn wr_id(&self) -> u64 {
        match self {
            Pending::Bind { wr_id, .. } | Pending::Inv { wr_id, .. } | Pending::Send { wr_id, .. } => *wr_id,
        }
    }

    fn opcode(&self) -> WcOpcode {
        match self {
            Pending::Bind { .. } => WcOpcode::BindMw,
            Pending::Inv { .. } => WcOpcode::LocalInv,
            Pending::Send { op, .. } => match op {
                SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
                SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
                SendOp::Read { .. } => WcOpcode::RdmaRead,
                SendOp::LocalInv { .. } => WcOpcode::LocalInv,
            },
        }
    }
}

impl Engine {
    /// Allocates an unbound type-2 window in protection domain `pd` and
    /// returns its key (which grants nothing until a bind).
    pub fn alloc_mw(&mut self, pd: u32) -> u32 {
        self.mrs.alloc_window(pd)
    }

    /// Deallocates the window that has (or had) `key`: it grants nothing
    /// from the moment this returns.
    pub fn dealloc_mw(&mut self, key: u32) -> bool {
        self.mrs.dealloc_window(key >> 8)
    }

    /// What the window with this key grants now, if it is bound (for tests
    /// and diagnostics).
    pub fn mw_binding(&self, key: u32) -> Option<Binding> {
        self.mrs.window_binding(key)
    }

    /// Posts a bind on QP `qpn` at `now` and returns the window's new key,
    /// which works once the bind has executed.
    pub fn bind_mw(&mut self, now: Time, qpn: u32, b: &MwBind) -> Result<u32, VerbsError> {
        let state = self.qp_state(qpn)?;
        let new_key = match self.mrs.next_window_key(b.mw_key >> 8, b.rkey) {
            Ok(k) => k,
            Err(e) => {
                return Err(VerbsError::new(
                    "ibv_post_send",
                    VerbsErrorKind::InvalidArgument,
                    e.to_string(),
                ));
            }
        };
        self.post_window_op(
            now,
            qpn,
            state,
            Pending::Bind {
                wr_id: b.wr_id,
                new_key,
                binding: Binding {
                    mr_key: b.mr_key,
                    qpn,
                    va: b.addr,
                    len: b.length,
                    access: b.access,
                },
                signaled: b.signaled,
            },
        )?;
        Ok(new_key)
    }

    /// Posts a send work request that must wait behind a window operation,
    /// or a local invalidate. Returns `false` if `wr` is neither (the caller
    /// posts it to the requester).
    pub(crate) fn post_send_ordered(
        &mut self,
        now: Time,
        qpn: u32,
        wr: &SendWr<'_>,
    ) -> Result<bool, VerbsError> {
        let waiting = self.mw_pending.get(&qpn).is_some_and(|q| !q.is_empty());
        let pending = match wr.op {
            SendOp::LocalInv { rkey } => Pending::Inv {
                wr_id: wr.wr_id,
                key: rkey,
                signaled: wr.signaled,
            },
            op if waiting => Pending::Send {
                wr_id: wr.wr_id,
                op,
                sges: wr.sg_list.to_vec(),
                signaled: wr.signaled,
            },
            _ => return Ok(false),
        };
        let state = self.qp_state(qpn)?;
        self.post_window_op(now, qpn, state, pending)?;
        Ok(true)
    }

    fn post_window_op(&mut self, now: Time, qpn: u32, state: QpState, op: Pending) -> Result<(), VerbsError> {
        match state {
            QpState::Rts | QpState::Err => {}
            _ => {
                return Err(VerbsError::new(
                    "ibv_post_send",
                    VerbsErrorKind::InvalidArgument,
                    "QP is not in RTS",
                ));
            }
        }
        let queue = self.mw_pending.entry(qpn).or_default();
        if queue.len() >= self.config.max_qp_wr as usize {
            return Err(VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::OutOfResources,
                "send queue full",
            ));
        }
        queue.push_back(op);
        self.run_window_ops(now, qpn);
        Ok(())
    }

    /// Executes the waiting window operations of QP `qpn` that may run now:
    /// those whose predecessors have all completed. In ERR every waiting
    /// entry flushes, in order.
    pub(crate) fn run_window_ops(&mut self, now: Time, qpn: u32) {
        // An operation that completes may let the send queue behind it go.
        if self.mw_pending.contains_key(&qpn) {
            self.wake(qpn);
        }
        loop {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                self.mw_pending.remove(&qpn);
                return;
            };
            let Some(queue) = self.mw_pending.get_mut(&qpn) else {
                return;
            };
            if qp.state == QpState::Err {
                for p in queue.drain(..) {
                    let wc = qp.send_wc(p.wr_id(), p.opcode(), WcStatus::WrFlushErr, 0);
                    qp.push_send(&mut self.counters, wc);
                }
                self.mw_pending.remove(&qpn);
                return;
            }
            if qp.state != QpState::Rts || !qp.req.sq.is_empty() {
                return;
            }
            let Some(op) = queue.pop_front() else {
                self.mw_pending.remove(&qpn);
                return;
            };
            let sig_all = qp.sq_sig_all;
            match op {
                Pending::Bind {
                    wr_id,
                    new_key,
                    binding,
                    signaled,
                } => {
                    let r = self.mrs.bind_window(new_key, qp.pd, binding);
                    finish(
                        qp,
                        &mut self.counters,
                        wr_id,
                        WcOpcode::BindMw,
                        r.is_ok(),
                        signaled || sig_all,
                        WcStatus::MwBindErr,
                    );
                }
                Pending::Inv { wr_id, key, signaled } => {
                    let r = self.mrs.invalidate_window(key, qpn);
                    finish(
                        qp,
                        &mut self.counters,
                        wr_id,
                        WcOpcode::LocalInv,
                        r.is_ok(),
                        signaled || sig_all,
                        WcStatus::LocQpOpErr,
                    );
                }
                Pending::Send {
                    wr_id,
                    op,
                    sges,
                    signaled,
                } => {
                    let wr = SendWr {
                        wr_id,
                        op,
                        sg_list: &sges,
                        signaled,
                    };
                    let mut ctx = Ctx {
                        now,
                        mrs: &self.mrs,
                        counters: &mut self.counters,
                        config: &self.config,
                    };
                    if qp.post_send(&mut ctx, &wr).is_err() {
                        // Checked like any post; what fails here fails the QP.
                        let wc = qp.send_wc(wr_id, WcOpcode::Send, WcStatus::LocQpOpErr, 0);
                        qp.push_send(&mut self.counters, wc);
                        qp.enter_error(&mut self.counters, None);
                    }
                }
            }
        }
    }

    /// Drops the window state of a destroyed or reset QP: waiting entries
    /// vanish without completions; a destroyed QP's windows are unbound.
    pub(crate) fn forget_window_ops(&mut self, qpn: u32, destroyed: bool) {
        self.mw_pending.remove(&qpn);
        if destroyed {
            self.mrs.unbind_qp(qpn);
        }
    }

    /// Runs the window operations of every QP that has some waiting.
    pub(crate) fn run_all_window_ops(&mut self, now: Time) {
        if self.mw_pending.is_empty() {
            return;
        }
        let qpns: Vec<u32> = self.mw_pending.keys().copied().collect();
        for qpn in qpns {
            self.run_window_ops(now, qpn);
        }
    }
}

/// Completes an executed window operation: a success if asked to, a failure
/// always, and a failure moves the QP to ERR.
fn finish(
    qp: &mut super::qp::Qp,
    counters: &mut super::Counters,
    wr_id: u64,
    opcode: WcOpcode,
    ok: bool,
    signaled: bool,
    err: WcStatus,
) {
    if ok {
        if signaled {
            let wc = qp.send_wc(wr_id, opcode, WcStatus::Success, 0);
            qp.push_send(counters, wc);
        }
    } else {
        let wc = qp.send_wc(wr_id, opcode, err, 0);
        qp.push_send(counters, wc);
        qp.enter_error(counters, None);
    }
}

/// `VecDeque` of waiting entries, per QP.
pub(crate) type PendingQueue = VecDeque<Pending>;
