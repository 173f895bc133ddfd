//! Owning handles for completion queues (each with its own completion
//! channel) and RC queue pairs, and the work requests posted on them.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use hipobj_platform::{VerbsError, VerbsErrorKind};

use super::context::{Context, Pd};
use super::memory::{Mr, Mw};
use super::{
    IBV_QP_STATE, IBV_QPT_RC, IBV_WR_BIND_MW, Zeroed, ibv_comp_channel, ibv_cq, ibv_mw_bind_info, ibv_qp,
    ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr, ibv_send_wr, ibv_send_wr_bind_mw,
    ibv_send_wr_bind_mw_tso, ibv_send_wr_rdma, ibv_sge, ibv_wc,
};
use crate::error::{check, errno, non_null, os_error, unsupported};

/// A completion queue and the completion channel it alone uses; both are
/// destroyed on drop (after every QP on the CQ, which holds it).
pub(crate) struct Cq {
    ctx: Arc<Context>,
    cq: NonNull<ibv_cq>,
    channel: NonNull<ibv_comp_channel>,
}

// SAFETY: see `Context`.
unsafe impl Send for Cq {}
// SAFETY: see `Context`.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        let fns = self.ctx.fns();
        // The owner acknowledges every event it reads at once (`take_event`),
        // so destroying the CQ cannot block on unacknowledged events.
        // SAFETY: every QP using this CQ holds an Arc to it, so none is left;
        // the channel is destroyed after the only CQ on it.
        unsafe {
            (fns.destroy_cq)(self.cq.as_ptr());
            (fns.destroy_comp_channel)(self.channel.as_ptr());
        }
    }
}

impl Cq {
    /// `ibv_create_comp_channel`, made non-blocking, then `ibv_create_cq`
    /// of `cqe` entries on it.
    pub(crate) fn create(ctx: &Arc<Context>, cqe: c_int) -> Result<Self, VerbsError> {
        let fns = ctx.fns();
        // SAFETY: the context is open.
        let channel = non_null("ibv_create_comp_channel", unsafe {
            (fns.create_comp_channel)(ctx.as_ptr())
        })?;
        // SAFETY: `channel` is live; its fd is owned by libibverbs and stays
        // open until ibv_destroy_comp_channel. Making it non-blocking means a
        // second waiter that loses the race for an event gets EAGAIN rather
        // than blocking in ibv_get_cq_event.
        unsafe {
            let fd = (*channel.as_ptr()).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        // SAFETY: the context and the channel are live.
        let cq = unsafe { (fns.create_cq)(ctx.as_ptr(), cqe, ptr::null_mut(), channel.as_ptr(), 0) };
        let Some(cq) = NonNull::new(cq) else {
            let e = errno();
            // SAFETY: the channel is live and no CQ uses it.
            unsafe { (fns.destroy_comp_channel)(channel.as_ptr()) };
            return Err(os_error("ibv_create_cq", e));
        };
        Ok(Self {
            ctx: ctx.clone(),
            cq,
            channel,
        })
    }

    /// The inline `ibv_poll_cq` of verbs.h: up to `wcs.len()` completions
    /// into `wcs`, their count returned.
    pub(crate) fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize, VerbsError> {
        let Some(poll) = self.ctx.ops().poll_cq else {
            return Err(unsupported("ibv_poll_cq", "the provider has no poll_cq"));
        };
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        // SAFETY: the CQ is live and `wcs` has room for `n` completions.
        let got = unsafe { poll(self.cq.as_ptr(), n, wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(os_error("ibv_poll_cq", if got == -1 { errno() } else { -got }));
        }
        Ok(usize::try_from(got).unwrap_or(0))
    }

    /// The inline `ibv_req_notify_cq` of verbs.h, for any completion.
    pub(crate) fn req_notify(&self) -> Result<(), VerbsError> {
        let Some(arm) = self.ctx.ops().req_notify_cq else {
            return Err(unsupported(
                "ibv_req_notify_cq",
                "the provider has no req_notify_cq",
            ));
        };
        // SAFETY: the CQ is live.
        check("ibv_req_notify_cq", unsafe { arm(self.cq.as_ptr(), 0) })
    }

    /// One `poll(2)` of the completion channel's fd for up to `ms`
    /// milliseconds: whether it became readable. An error carries poll's
    /// errno (EINTR included).
    pub(crate) fn poll_channel(&self, ms: c_int) -> Result<bool, VerbsError> {
        // SAFETY: the channel is live; its fd stays open while it is.
        let fd = unsafe { (*self.channel.as_ptr()).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        match rc {
            0 => Ok(false),
            r if r > 0 => Ok(true),
            _ => Err(os_error("poll", errno())),
        }
    }

    /// Reads and acknowledges one pending completion event, if any.
    pub(crate) fn take_event(&self) {
        let fns = self.ctx.fns();
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; the out-pointers are valid.
        let rc = unsafe { (fns.get_cq_event)(self.channel.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc == 0 && !cq.is_null() {
            // SAFETY: `cq` is the CQ the event was for (ours: one CQ per channel).
            unsafe { (fns.ack_cq_events)(cq, 1) };
        }
    }
}

/// A send work request: one of the `IBV_WR_*` opcodes other than a bind,
/// over `sges`.
pub(crate) struct SendRequest<'a> {
    pub wr_id: u64,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data` (network byte order) or `invalidate_rkey`.
    pub imm_data: u32,
    /// `wr.rdma`, for the RDMA opcodes.
    pub rdma: Option<ibv_send_wr_rdma>,
    pub sges: &'a [ibv_sge],
}

/// A type-2 memory-window bind: `mw` to `[addr, addr + length)` of `mr`
/// under the key `rkey`, granting `access`.
pub(crate) struct BindRequest<'a> {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub mw: &'a Mw,
    pub mr: &'a Mr,
    pub rkey: u32,
    pub addr: u64,
    pub length: u64,
    pub access: c_uint,
}

/// An RC queue pair, destroyed on drop (before its PD and CQs, which it
/// holds).
pub(crate) struct Qp {
    pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    qp: NonNull<ibv_qp>,
    qp_num: u32,
}

// SAFETY: see `Context`.
unsafe impl Send for Qp {}
// SAFETY: see `Context`.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the QP is live and destroyed once, before its PD and CQs
        // (fields are dropped after this).
        unsafe { (self.pd.context().fns().destroy_qp)(self.qp.as_ptr()) };
    }
}

fn sge_count(op: &'static str, n: usize) -> Result<c_int, VerbsError> {
    c_int::try_from(n).map_err(|_| VerbsError::new(op, VerbsErrorKind::InvalidArgument, "too many SGEs"))
}

/// The SGE array as verbs.h wants it: NULL when empty. The provider only
/// reads it, so a shared slice may be handed over as `*mut`.
fn sge_ptr(sges: &[ibv_sge]) -> *mut ibv_sge {
    if sges.is_empty() {
        ptr::null_mut()
    } else {
        sges.as_ptr().cast_mut()
    }
}

impl Qp {
    /// `ibv_create_qp` of an RC QP on `pd` with the given capacities.
    pub(crate) fn create_rc(
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        cap: ibv_qp_cap,
        sq_sig_all: bool,
    ) -> Result<Self, VerbsError> {
        // A provider takes a CQ for one of its own: another device's would
        // be read as the wrong structure.
        if !Arc::ptr_eq(&send_cq.ctx, pd.context()) || !Arc::ptr_eq(&recv_cq.ctx, pd.context()) {
            return Err(VerbsError::new(
                "ibv_create_qp",
                VerbsErrorKind::InvalidArgument,
                "the completion queue does not belong to this device",
            ));
        }
        let mut attr = ibv_qp_init_attr::zeroed();
        attr.send_cq = send_cq.cq.as_ptr();
        attr.recv_cq = recv_cq.cq.as_ptr();
        attr.cap = cap;
        attr.qp_type = IBV_QPT_RC;
        attr.sq_sig_all = c_int::from(sq_sig_all);
        // SAFETY: the PD and both CQs are live (held below for the QP's life).
        let qp = non_null("ibv_create_qp", unsafe {
            (pd.context().fns().create_qp)(pd.as_ptr(), &mut attr)
        })?;
        // SAFETY: `qp` was just created and is live.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        Ok(Self {
            pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            qp,
            qp_num,
        })
    }

    /// `ibv_qp.qp_num`.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify(&self, attr: &ibv_qp_attr, mask: c_int) -> Result<(), VerbsError> {
        let mut raw = *attr;
        // SAFETY: the QP is live and `raw` is a complete ibv_qp_attr.
        check("ibv_modify_qp", unsafe {
            (self.pd.context().fns().modify_qp)(self.qp.as_ptr(), &mut raw, mask)
        })
    }

    /// `ibv_query_qp` of `IBV_QP_STATE`: the raw state code.
    pub(crate) fn query_state(&self) -> Result<c_uint, VerbsError> {
        let mut attr = ibv_qp_attr::default();
        let mut init = ibv_qp_init_attr::zeroed();
        // SAFETY: the QP is live; both out-structures are writable.
        check("ibv_query_qp", unsafe {
            (self.pd.context().fns().query_qp)(self.qp.as_ptr(), &mut attr, IBV_QP_STATE, &mut init)
        })?;
        Ok(attr.qp_state)
    }

    /// Whether the provider has `post_send` (else posting gives Unsupported).
    pub(crate) fn can_post_send(&self) -> bool {
        self.pd.context().ops().post_send.is_some()
    }

    fn post_send_raw(&self, raw: &mut ibv_send_wr) -> Result<(), VerbsError> {
        let Some(post) = self.pd.context().ops().post_send else {
            return Err(unsupported("ibv_post_send", "the provider has no post_send"));
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live; `raw` is one request (`next` is NULL) whose
        // SGE array, window and MR the caller's borrows keep alive across the
        // call (the provider copies the request into its queue). The NIC
        // accesses only memory the SGEs' lkeys were registered over.
        check("ibv_post_send", unsafe { post(self.qp.as_ptr(), raw, &mut bad) })
    }

    /// The inline `ibv_post_send` of verbs.h, for one request.
    pub(crate) fn post_send(&self, wr: &SendRequest<'_>) -> Result<(), VerbsError> {
        if !self.can_post_send() {
            return Err(unsupported("ibv_post_send", "the provider has no post_send"));
        }
        let mut raw = ibv_send_wr::zeroed();
        raw.wr_id = wr.wr_id;
        raw.sg_list = sge_ptr(wr.sges);
        raw.num_sge = sge_count("ibv_post_send", wr.sges.len())?;
        raw.opcode = wr.opcode;
        raw.send_flags = wr.send_flags;
        raw.imm_data = wr.imm_data;
        if let Some(rdma) = wr.rdma {
            raw.wr.rdma = rdma;
        }
        self.post_send_raw(&mut raw)
    }

    /// A type-2 window bind posted with `ibv_post_send`; once posted, the
    /// window's `ibv_mw.rkey` becomes `rkey` (see `Mw::set_rkey`). The
    /// window and the region must belong to this QP's context.
    pub(crate) fn post_bind(&self, wr: &BindRequest<'_>) -> Result<(), VerbsError> {
        let ctx = self.pd.context();
        if !Arc::ptr_eq(wr.mw.pd().context(), ctx) || !Arc::ptr_eq(wr.mr.pd().context(), ctx) {
            return Err(VerbsError::new(
                "ibv_post_send",
                VerbsErrorKind::InvalidArgument,
                "the window or region belongs to another device context",
            ));
        }
        let mut raw = ibv_send_wr::zeroed();
        raw.wr_id = wr.wr_id;
        raw.opcode = IBV_WR_BIND_MW;
        raw.send_flags = wr.send_flags;
        raw.bind_mw_tso = ibv_send_wr_bind_mw_tso {
            bind_mw: ibv_send_wr_bind_mw {
                mw: wr.mw.as_ptr(),
                rkey: wr.rkey,
                bind_info: ibv_mw_bind_info {
                    mr: wr.mr.as_ptr(),
                    addr: wr.addr,
                    length: wr.length,
                    mw_access_flags: wr.access,
                },
            },
        };
        let bind = wr.mw.lock_bind();
        self.post_send_raw(&mut raw)?;
        wr.mw.set_rkey(&bind, wr.rkey);
        Ok(())
    }

    /// The inline `ibv_post_recv` of verbs.h, for one request over `sges`.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[ibv_sge]) -> Result<(), VerbsError> {
        let Some(post) = self.pd.context().ops().post_recv else {
            return Err(unsupported("ibv_post_recv", "the provider has no post_recv"));
        };
        let mut raw = ibv_recv_wr::zeroed();
        raw.wr_id = wr_id;
        raw.sg_list = sge_ptr(sges);
        raw.num_sge = sge_count("ibv_post_recv", sges.len())?;
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: as for `post_send_raw`.
        check("ibv_post_recv", unsafe {
            post(self.qp.as_ptr(), &mut raw, &mut bad)
        })
    }
}
