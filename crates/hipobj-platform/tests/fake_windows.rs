//! The fake platform's memory windows record what core tests assert on.
#![cfg(feature = "fake")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hipobj_platform::fake::{FakeDeviceSpec, FakeMwEnd, FakeVerbs, Faults};
use hipobj_platform::{
    AccessFlags, BindMwWr, MemRegion, QpAttr, QpAttrMask, QpInitAttr, QpState, SendOp, SendWr, Verbs,
    WcOpcode, WcStatus, WorkCompletion,
};

fn to_rts(qp: &dyn hipobj_platform::QueuePair) {
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    qp.modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    a.qp_state = QpState::Rtr;
    qp.modify(
        &a,
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
    )
    .unwrap();
    a.qp_state = QpState::Rts;
    qp.modify(
        &a,
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

#[test]
fn fake_windows_record_binds_rights_ranges_and_how_they_ended() {
    let verbs = FakeVerbs::new(
        vec![FakeDeviceSpec {
            mw_type2: true,
            ..FakeDeviceSpec::default()
        }],
        Faults::default(),
    );
    let dev = verbs.open_device("fake0").unwrap();
    assert!(dev.attr().unwrap().mw_type2);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: false,
        })
        .unwrap();
    let region = MemRegion::from_static(Box::leak(vec![0u8; 8192].into_boxed_slice()));
    let mr = pd
        .reg_mr(region, AccessFlags::MW_BIND | AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mw = pd.alloc_mw().unwrap();
    assert_eq!(verbs.live().mws, 1);
    let bind = |access, addr, length| BindMwWr {
        wr_id: 1,
        mw: &*mw,
        mr: &*mr,
        addr,
        length,
        access,
        signaled: true,
        rkey: None,
    };
    // Not in RTS: refused.
    assert!(
        qp.bind_mw(&bind(AccessFlags::REMOTE_WRITE, mr.addr(), 10))
            .is_err()
    );
    to_rts(&*qp);
    let key = qp
        .bind_mw(&bind(AccessFlags::REMOTE_WRITE, mr.addr() + 100, 4096))
        .unwrap();
    assert_eq!(mw.rkey(), key);
    let b = verbs.mw_bind(key).unwrap();
    assert_eq!(
        (b.qpn, b.mr_rkey, b.addr, b.len, b.access, b.ended),
        (
            qp.qp_num(),
            mr.rkey(),
            mr.addr() + 100,
            4096,
            AccessFlags::REMOTE_WRITE,
            None
        )
    );
    let mut wcs = [WorkCompletion::EMPTY; 4];
    assert_eq!(cq.poll(&mut wcs).unwrap(), 1);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::BindMw, WcStatus::Success)
    );
    qp.post_send(&SendWr {
        wr_id: 2,
        op: SendOp::LocalInv { rkey: key },
        sg_list: &[],
        signaled: true,
    })
    .unwrap();
    assert_eq!(cq.poll(&mut wcs).unwrap(), 1);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    assert_eq!(verbs.mw_bind(key).unwrap().ended, Some(FakeMwEnd::Invalidated));
    // A new bind has a new key; destroying the QP ends it.
    let key2 = qp
        .bind_mw(&bind(AccessFlags::REMOTE_READ, mr.addr(), 8192))
        .unwrap();
    assert_ne!(key2 & 0xff, key & 0xff);
    assert_eq!(verbs.live_mw_binds().len(), 1);
    drop(qp);
    assert_eq!(verbs.mw_bind(key2).unwrap().ended, Some(FakeMwEnd::QpDestroyed));
    assert!(verbs.live_mw_binds().is_empty());
    drop(mw);
    assert_eq!(verbs.live().mws, 0);
    // A device without windows says so and refuses them.
    let plain = FakeVerbs::new(
        vec![FakeDeviceSpec {
            mw_type2: false,
            ..FakeDeviceSpec::default()
        }],
        Faults::default(),
    );
    let dev = plain.open_device("fake0").unwrap();
    assert!(!dev.attr().unwrap().mw_type2);
    assert!(dev.alloc_pd().unwrap().alloc_mw().is_err());
}

/// An armed peer write arrives the moment the QP reaches RTS, not before;
/// an armed break flushes the posted receive then.
#[test]
fn armed_peer_events_happen_when_the_qp_reaches_rts() {
    use hipobj_platform::RecvWr;
    let verbs = FakeVerbs::new(vec![FakeDeviceSpec::default()], Faults::default());
    let dev = verbs.open_device("fake0").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let attr = || QpInitAttr {
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    };
    let recv = RecvWr {
        wr_id: 7,
        sg_list: &[],
    };
    let mut wc = [WorkCompletion::EMPTY; 2];
    let init = |qp: &dyn hipobj_platform::QueuePair| {
        let a = QpAttr {
            qp_state: QpState::Init,
            ..QpAttr::default()
        };
        use QpAttrMask as M;
        qp.modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
            .unwrap();
    };

    let qp = pd.create_qp(&attr()).unwrap();
    assert!(verbs.arm_write_with_imm(qp.qp_num(), 0xc0de, 64));
    assert!(!verbs.arm_write_with_imm(0xdead, 1, 1), "no such QP");
    init(qp.as_ref());
    qp.post_recv(&recv).unwrap();
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "nothing before RTS");
    to_rts(qp.as_ref());
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(
        (
            wc[0].wr_id,
            wc[0].status,
            wc[0].opcode,
            wc[0].imm_data,
            wc[0].byte_len
        ),
        (7, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(0xc0de), 64)
    );

    let qp = pd.create_qp(&attr()).unwrap();
    assert!(verbs.arm_break(qp.qp_num()));
    init(qp.as_ref());
    qp.post_recv(&recv).unwrap();
    to_rts(qp.as_ref());
    assert_eq!(verbs.qp_state(qp.qp_num()), Some(QpState::Err));
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::WrFlushErr));
}
