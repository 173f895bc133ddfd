//! Writes a pcap capture of one soft RoCE device exchanging every RC
//! operation with another: SEND, SEND with immediate, WRITE, WRITE with
//! immediate, a multi-packet READ, and a WRITE refused with a remote access
//! NAK. MTU 1024 so that messages span First/Middle/Last packets.
//!
//! `cargo run -p hipobj-softroce --example capture -- out.pcap`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Mtu, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr,
    SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_softroce::{HostBuffer, SoftConfig, SoftVerbs};

const RW: AccessFlags = AccessFlags(1 | 2 | 4);

struct Node {
    _v: SoftVerbs,
    dev: Arc<dyn Device>,
    pd: Arc<dyn hipobj_platform::ProtectionDomain>,
    cq: Arc<dyn CompletionQueue>,
    qp: Box<dyn QueuePair>,
}

fn node(pcap: Option<std::path::PathBuf>) -> Node {
    let v = SoftVerbs::new(SoftConfig {
        mtu: Mtu::Mtu1024,
        pcap,
        ..SoftConfig::default()
    });
    let dev = v.open_device("softroce0").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: true,
        })
        .unwrap();
    Node {
        _v: v,
        dev,
        pd,
        cq,
        qp,
    }
}

fn connect(n: &Node, peer: &Node) {
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: Mtu::Mtu1024,
        dgid: peer.dev.query_gid(1, 0).unwrap(),
        dest_qp_num: peer.qp.qp_num(),
        timeout: 12,
        ..QpAttr::default()
    };
    n.qp.modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    a.qp_state = QpState::Rtr;
    let rtr =
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    n.qp.modify(&a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    let rts = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    n.qp.modify(&a, rts).unwrap();
}

fn wait_one(cq: &dyn CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    }];
    for _ in 0..100 {
        cq.wait(Duration::from_millis(100)).unwrap();
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
    }
    panic!("no completion");
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "softroce.pcap".into());
    let a = node(Some(path.clone().into()));
    let b = node(None);
    connect(&a, &b);
    connect(&b, &a);
    let src = HostBuffer::from_bytes(&(0..3000u32).map(|i| i as u8).collect::<Vec<_>>());
    let dst = HostBuffer::new(3000);
    let rbuf = HostBuffer::new(4096);
    let ms = a.pd.reg_mr(src.region(), RW).unwrap();
    let md = b.pd.reg_mr(dst.region(), RW).unwrap();
    let mr = b.pd.reg_mr(rbuf.region(), RW).unwrap();
    let ro = b.pd.reg_mr(dst.region(), AccessFlags::REMOTE_READ).unwrap();
    let sg = Sge {
        addr: src.addr(),
        length: 3000,
        lkey: ms.lkey(),
    };
    let rsg = Sge {
        addr: rbuf.addr(),
        length: 4096,
        lkey: mr.lkey(),
    };
    let ops = [
        SendOp::Send,
        SendOp::SendWithImm { imm: 0x1234 },
        SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        SendOp::WriteWithImm {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
            imm: 0x5678,
        },
        SendOp::Read {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        // Refused: this MR grants no REMOTE_WRITE, so the responder NAKs.
        SendOp::Write {
            remote_addr: dst.addr(),
            rkey: ro.rkey(),
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        if matches!(
            op,
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::WriteWithImm { .. }
        ) {
            b.qp.post_recv(&RecvWr {
                wr_id: i as u64,
                sg_list: &[rsg],
            })
            .unwrap();
        }
        a.qp.post_send(&SendWr {
            wr_id: i as u64,
            op,
            sg_list: &[sg],
            signaled: true,
        })
        .unwrap();
        let wc = wait_one(&*a.cq);
        println!("{op:?}: {:?}", wc.status);
    }
    drop((ms, md, mr, ro));
    drop(a);
    println!("wrote {path}");
}
