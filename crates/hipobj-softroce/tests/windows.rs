//! Type-2 memory windows through the Verbs objects, over real UDP between
//! two soft devices: what the library relies on when it fences a transfer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Node, RW, attrs, pair, pattern, sge, wait};
use hipobj_platform::{AccessFlags, BindMwWr, Mtu, QpState, SendOp, SendWr, WcOpcode, WcStatus};
use hipobj_softroce::{HostBuffer, SoftConfig};

const LONG: Duration = Duration::from_secs(60);

fn write(
    a: &Node,
    src: &HostBuffer,
    ms: &dyn hipobj_platform::MemoryRegion,
    addr: u64,
    rkey: u32,
    len: u32,
) -> WcStatus {
    let mut s = sge(src, ms);
    s.length = len;
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: addr,
            rkey,
        },
        sg_list: &[s],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    wait(&*a.scq, 1, LONG)[0].status
}

#[test]
fn a_window_fences_a_write_to_its_range_until_invalidated_over_udp() {
    let (a, b) = (Node::new(SoftConfig::default()), Node::new(SoftConfig::default()));
    assert!(b.dev.attr().unwrap().mw_type2);
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let src = HostBuffer::from_bytes(&pattern(8192, 9));
    let ms = a.reg(&src, RW);
    let dst = HostBuffer::new(8192);
    let md = b.reg(&dst, AccessFlags::MW_BIND | AccessFlags::LOCAL_WRITE);
    let mw = b.pd.alloc_mw().unwrap();
    let unbound = mw.rkey();
    let key =
        b.qp.bind_mw(&BindMwWr {
            wr_id: 5,
            mw: &*mw,
            mr: &*md,
            addr: dst.addr() + 4096,
            length: 4096,
            access: AccessFlags::REMOTE_WRITE,
            signaled: true,
            rkey: None,
        })
        .unwrap();
    assert_eq!(mw.rkey(), key);
    assert_ne!(key & 0xff, unbound & 0xff);
    let wc = wait(&*b.scq, 1, LONG);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (5, WcStatus::Success, WcOpcode::BindMw)
    );
    // Inside the window: lands exactly there.
    assert_eq!(
        write(&a, &src, &*ms, dst.addr() + 4096, key, 4096),
        WcStatus::Success
    );
    let got = dst.to_vec();
    assert!(got[..4096].iter().all(|&x| x == 0));
    assert_eq!(&got[4096..], &pattern(8192, 9)[..4096]);
    // Invalidate, then the same write with the old key is refused.
    b.qp.post_send(&SendWr {
        wr_id: 6,
        op: SendOp::LocalInv { rkey: key },
        sg_list: &[],
        signaled: true,
    })
    .unwrap();
    let wc = wait(&*b.scq, 1, LONG);
    assert_eq!(
        (wc[0].status, wc[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    let before = dst.to_vec();
    let src2 = HostBuffer::from_bytes(&[0xee; 4096]);
    let ms2 = a.reg(&src2, RW);
    assert_eq!(
        write(&a, &src2, &*ms2, dst.addr() + 4096, key, 4096),
        WcStatus::RemAccessErr
    );
    assert_eq!(dst.to_vec(), before);
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
}
