//! The RC connect sequence, written once for both ends of a transfer: a QP
//! goes RESET -> INIT with the access rights its side grants, then INIT ->
//! RTR -> RTS towards one remote QP with the vendor profile applied
//! (docs/protocol.md §3 and §4). The client's connections and the target's
//! bindings both call these functions; only the numbers they pass differ.

use crate::vendor::{QpLimits, VendorProfile};
use crate::verbs::{AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, QueuePair, VerbsError};

/// The far end of an RC connection and the sequence numbers both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPath {
    /// Our port, numbered from 1.
    pub port: u8,
    /// Index of our GID in the port's table.
    pub sgid_index: u8,
    /// Path MTU (the vendor profile caps it at the port's active MTU).
    pub mtu: Mtu,
    /// The remote QP.
    pub dest_qpn: u32,
    /// The remote QP's GID.
    pub dgid: Gid,
    /// The first PSN we expect from the remote QP.
    pub rq_psn: u32,
    /// Our first PSN.
    pub sq_psn: u32,
    /// RDMA READs the remote QP may have outstanding at us.
    pub max_dest_rd_atomic: u8,
    /// RDMA READs we may have outstanding at the remote QP.
    pub max_rd_atomic: u8,
}

/// Which transition of the sequence failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RcStep {
    /// RESET -> INIT.
    Init,
    /// INIT -> RTR.
    Rtr,
    /// RTR -> RTS.
    Rts,
}

impl RcStep {
    /// What was being done, for error messages.
    pub fn doing(self) -> &'static str {
        match self {
            Self::Init => "moving a queue pair to INIT",
            Self::Rtr => "moving a queue pair to RTR",
            Self::Rts => "moving a queue pair to RTS",
        }
    }
}

/// Local ACK timeout exponent: 4.096 us * 2^14, about 67 ms per try.
pub const ACK_TIMEOUT: u8 = 14;
/// Transport retries before a work request fails with retry-exceeded: 7
/// tries of about 67 ms, under half a second. Not 7: IBA makes 7 a count
/// like any other, but the kernel's rxe (rxe_comp.c) takes a retry_cnt of 7
/// as "retry for ever", as verbs does for rnr_retry; a hipobj-server on rxe
/// then kept a stale binding's WRITE going for its whole completion timeout
/// (147 retries in the VM's interop lane) instead of giving up and
/// rebinding.
pub const RETRY_COUNT: u8 = 6;
/// RNR retries (7: retry for ever, as the verbs API defines).
pub const RNR_RETRY: u8 = 7;

/// RESET -> INIT on `port`, granting remote peers `access` (the target
/// grants nothing: its QPs only issue requests).
pub fn to_init(qp: &dyn QueuePair, port: u8, access: AccessFlags) -> Result<(), (RcStep, VerbsError)> {
    let attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: port,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    qp.modify(&attr, mask).map_err(|e| (RcStep::Init, e))
}

/// INIT -> RTR -> RTS towards `path`, each set of attributes adjusted by
/// `vendor` against `limits`.
pub fn to_rts(
    qp: &dyn QueuePair,
    path: &RcPath,
    vendor: VendorProfile,
    limits: &QpLimits,
) -> Result<(), (RcStep, VerbsError)> {
    use QpAttrMask as M;
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: path.mtu,
        dest_qp_num: path.dest_qpn,
        rq_psn: path.rq_psn & 0x00ff_ffff,
        max_dest_rd_atomic: path.max_dest_rd_atomic,
        min_rnr_timer: 12,
        dgid: path.dgid,
        sgid_index: path.sgid_index,
        hop_limit: 64,
        port_num: path.port,
        ..QpAttr::default()
    };
    let rtr_mask =
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    vendor.adjust_rtr(&mut rtr, rtr_mask, limits);
    qp.modify(&rtr, rtr_mask).map_err(|e| (RcStep::Rtr, e))?;
    let mut rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: path.sq_psn & 0x00ff_ffff,
        timeout: ACK_TIMEOUT,
        retry_cnt: RETRY_COUNT,
        rnr_retry: RNR_RETRY,
        max_rd_atomic: path.max_rd_atomic,
        ..QpAttr::default()
    };
    let rts_mask = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    vendor.adjust_rts(&mut rts, rts_mask, limits);
    qp.modify(&rts, rts_mask).map_err(|e| (RcStep::Rts, e))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::verbs::{RecvWr, SendWr};

    /// A QP that records each modify.
    #[derive(Debug, Default)]
    struct Recording(Mutex<Vec<(QpAttr, QpAttrMask)>>);

    impl QueuePair for Recording {
        fn qp_num(&self) -> u32 {
            2
        }
        fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((attr.clone(), mask));
            Ok(())
        }
        fn state(&self) -> Result<QpState, VerbsError> {
            Ok(QpState::Reset)
        }
        fn post_send(&self, _wr: &SendWr<'_>) -> Result<(), VerbsError> {
            Ok(())
        }
        fn post_recv(&self, _wr: &RecvWr<'_>) -> Result<(), VerbsError> {
            Ok(())
        }
    }

    /// The one sequence both sides call: INIT with the rights given (none,
    /// for the target), RTR and RTS with the vendor profile applied and the
    /// PSNs cut to 24 bits.
    #[test]
    fn the_sequence_applies_the_rights_and_the_vendor_profile() {
        let qp = Recording::default();
        to_init(&qp, 1, AccessFlags::default()).expect("init");
        let path = RcPath {
            port: 1,
            sgid_index: 3,
            mtu: Mtu::Mtu4096,
            dest_qpn: 0x1234,
            dgid: Gid([7; 16]),
            rq_psn: 0x0100_0005,
            sq_psn: 0xff12_3456,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 8,
        };
        let limits = QpLimits {
            active_mtu: Mtu::Mtu1024,
            max_qp_rd_atom: 4,
            max_qp_init_rd_atom: 2,
        };
        to_rts(&qp, &path, VendorProfile::Broadcom, &limits).expect("rts");
        let seen = qp.0.lock().unwrap_or_else(|e| e.into_inner());
        let [(init, init_mask), (rtr, _), (rts, _)] = seen.as_slice() else {
            panic!("{} modifies", seen.len())
        };
        assert_eq!(init.qp_state, QpState::Init);
        assert!(init_mask.contains(QpAttrMask::ACCESS_FLAGS));
        assert_eq!(init.qp_access_flags, AccessFlags::default(), "no remote access");
        assert_eq!(rtr.qp_state, QpState::Rtr);
        assert_eq!(rtr.path_mtu, Mtu::Mtu1024, "capped at the active MTU");
        assert_eq!(rtr.max_dest_rd_atomic, 2, "bnxt: both READ limits");
        assert_eq!((rtr.rq_psn, rtr.dest_qp_num, rtr.sgid_index), (5, 0x1234, 3));
        assert_eq!(rts.qp_state, QpState::Rts);
        assert_eq!(rts.sq_psn, 0x12_3456);
        assert_eq!(rts.max_rd_atomic, 2);
        assert_eq!((rts.timeout, rts.retry_cnt, rts.rnr_retry), (14, 6, 7));
    }
}
