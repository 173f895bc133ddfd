//! The real-verbs lane: the backend against a real verbs device, the soft
//! RoCE driver `rdma_rxe` of the Linux kernel. Ignored by default; it needs a
//! host with an `rxe0` (or `$HIPOBJ_RXE_DEVICE`) device, which
//! `scripts/rxe-vm.sh` provides inside a QEMU VM:
//!
//! ```text
//! cargo test -p hipobj-ibverbs --test rxe --no-run      # note the binary path
//! scripts/rxe-vm.sh /path/to/rxe-<hash> --ignored --test-threads=1
//! ```
//!
//! Between two RC QPs on the same device it checks the device list, the
//! port, the GID table against sysfs, selection, PD, MR, CQ, the QP state
//! transitions, and an RDMA WRITE, an RDMA READ and a SEND with immediate
//! data, byte for byte.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_ibverbs::{IbVerbs, SysfsTopology};
use hipobj_platform::selection::{self, Selection};
use hipobj_platform::vendor::{QpLimits, VendorProfile};
use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, GidKind, LinkLayer, MemRegion, NicTopology, PortState, QpAttr,
    QpAttrMask, QpInitAttr, QpState, QueuePair, RecvWr, SendOp, SendWr, Sge, Verbs, VerbsErrorKind, WcOpcode,
    WcStatus, WorkCompletion,
};

fn device_name() -> String {
    std::env::var("HIPOBJ_RXE_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

/// A buffer that lives for the rest of the test process, so that the device
/// may write it at any time (the `MemRegion` promise).
struct Buf {
    addr: usize,
    len: usize,
}

impl Buf {
    fn new(fill: impl Fn(usize) -> u8, len: usize) -> (Self, MemRegion) {
        let mem: &'static mut [u8] = Box::leak((0..len).map(fill).collect::<Vec<u8>>().into_boxed_slice());
        let buf = Self {
            addr: mem.as_ptr() as usize,
            len,
        };
        (buf, MemRegion::from_static(mem))
    }

    /// The bytes now, after the operation that wrote them has completed.
    fn snapshot(&self) -> Vec<u8> {
        (0..self.len)
            // SAFETY: the memory is leaked, so always allocated; the device
            // wrote it before the completion this is called after, and
            // nothing writes it concurrently. Volatile: the writer is not Rust.
            .map(|i| unsafe { std::ptr::read_volatile((self.addr + i) as *const u8) })
            .collect()
    }
}

fn pattern(seed: u8) -> impl Fn(usize) -> u8 {
    move |i| (i as u8).wrapping_mul(31).wrapping_add(seed)
}

fn one_completion(cq: &dyn CompletionQueue, what: &str) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = [WorkCompletion {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    }; 1];
    loop {
        if cq.poll(&mut out).expect("poll") == 1 {
            return out[0];
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no completion for {what} within 20 s");
        cq.wait(left).expect("wait");
    }
}

fn rc_qp(pd: &dyn hipobj_platform::ProtectionDomain, cq: &Arc<dyn CompletionQueue>) -> Box<dyn QueuePair> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    })
    .expect("create_qp")
}

fn connect(qp: &dyn QueuePair, peer_qpn: u32, sel: &Selection, dev: &dyn Device) {
    use QpAttrMask as M;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: access,
        port_num: sel.port,
        ..QpAttr::default()
    };
    qp.modify(&attr, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .expect("RESET -> INIT");
    assert_eq!(qp.state().expect("state"), QpState::Init);

    let limits = QpLimits::new(
        &dev.attr().expect("attr"),
        &dev.query_port(sel.port).expect("port"),
    );
    let profile = VendorProfile::for_vendor(sel.vendor_id);
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = sel.mtu;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 4;
    attr.min_rnr_timer = 12;
    attr.dgid = sel.gid;
    attr.sgid_index = u8::try_from(sel.gid_index).expect("small GID index");
    let rtr =
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    profile.adjust_rtr(&mut attr, rtr, &limits);
    qp.modify(&attr, rtr).expect("INIT -> RTR");
    assert_eq!(qp.state().expect("state"), QpState::Rtr);

    attr.qp_state = QpState::Rts;
    attr.sq_psn = 0;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 4;
    let rts = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    profile.adjust_rts(&mut attr, rts, &limits);
    qp.modify(&attr, rts).expect("RTR -> RTS");
    assert_eq!(qp.state().expect("state"), QpState::Rts);
}

#[test]
#[ignore = "needs an rxe device: run inside scripts/rxe-vm.sh"]
fn rxe_end_to_end() {
    let t0 = Instant::now();
    let name = device_name();
    let verbs = IbVerbs::load().expect("libibverbs.so.1");
    let names = verbs.device_names().expect("device list");
    eprintln!("devices: {names:?}");
    assert!(names.contains(&name), "{name} in {names:?}");

    // The topology and selection see the same device.
    let topo = SysfsTopology::system();
    let nics = topo.nics().expect("sysfs");
    let nic = nics.iter().find(|n| n.name == name).expect("rxe in sysfs");
    eprintln!("sysfs: {nic:?}");
    let (dev, sel) = selection::select(&verbs, &topo, None, Some(&name)).expect("selection");
    eprintln!("selected: {sel}");
    assert_eq!(sel.device, name);
    assert_eq!(sel.port, 1);
    assert_eq!(sel.gid_kind, GidKind::RoceV2);
    assert_eq!(
        sel.gid.to_string(),
        "::ffff:192.0.2.1",
        "the IPv4-mapped RoCE v2 GID"
    );

    // Device, port and GID table.
    let attr = dev.attr().expect("query_device");
    eprintln!("device attr: {attr:?}");
    assert!(attr.phys_port_cnt >= 1);
    let port = dev.query_port(1).expect("query_port");
    eprintln!("port 1: {port:?}");
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(sel.mtu, port.active_mtu, "selection takes the active MTU");
    for g in &nic.ports[0].gids {
        assert_eq!(
            dev.query_gid(1, g.index).expect("query_gid"),
            g.gid,
            "GID {}",
            g.index
        );
    }

    // PD, MRs, CQs, QPs.
    let pd = dev.alloc_pd().expect("alloc_pd");
    const LEN: usize = 4096;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (src, src_region) = Buf::new(pattern(7), LEN);
    let (dst, dst_region) = Buf::new(|_| 0, LEN);
    let (remote, remote_region) = Buf::new(pattern(99), LEN);
    let (back, back_region) = Buf::new(|_| 0, LEN);
    let src_mr = pd.reg_mr(src_region, access).expect("reg_mr");
    let dst_mr = pd.reg_mr(dst_region, access).expect("reg_mr");
    let remote_mr = pd.reg_mr(remote_region, access).expect("reg_mr");
    let back_mr = pd.reg_mr(back_region, access).expect("reg_mr");
    assert_eq!((src_mr.addr(), src_mr.len()), (src.addr as u64, LEN));

    // dma-buf registration is not supported by rxe; it must fail cleanly.
    if dev.supports_dmabuf() {
        let memfd = std::fs::File::open("/dev/null").expect("an fd");
        use std::os::fd::AsFd;
        let e = pd
            .reg_dmabuf_mr(memfd.as_fd(), 0, LEN, 0, access)
            .expect_err("rxe has no dma-buf import");
        eprintln!("reg_dmabuf_mr on rxe: {e}");
    }

    let cq_a = dev.create_cq(32).expect("create_cq");
    let cq_b = dev.create_cq(32).expect("create_cq");
    let qp_a = rc_qp(pd.as_ref(), &cq_a);
    let qp_b = rc_qp(pd.as_ref(), &cq_b);
    assert_eq!(qp_a.state().expect("state"), QpState::Reset);
    connect(qp_a.as_ref(), qp_b.qp_num(), &sel, dev.as_ref());
    connect(qp_b.as_ref(), qp_a.qp_num(), &sel, dev.as_ref());

    // RDMA WRITE: A's src into B's dst.
    qp_a.post_send(&SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: dst_mr.addr(),
            rkey: dst_mr.rkey(),
        },
        sg_list: &[Sge {
            addr: src_mr.addr(),
            length: LEN as u32,
            lkey: src_mr.lkey(),
        }],
        signaled: true,
    })
    .expect("post WRITE");
    let wc = one_completion(cq_a.as_ref(), "WRITE");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(wc.qp_num, qp_a.qp_num());
    assert_eq!(dst.snapshot(), src.snapshot(), "WRITE moved every byte");

    // RDMA READ: B's remote buffer into A's back buffer.
    qp_a.post_send(&SendWr {
        wr_id: 2,
        op: SendOp::Read {
            remote_addr: remote_mr.addr(),
            rkey: remote_mr.rkey(),
        },
        sg_list: &[Sge {
            addr: back_mr.addr(),
            length: LEN as u32,
            lkey: back_mr.lkey(),
        }],
        signaled: true,
    })
    .expect("post READ");
    let wc = one_completion(cq_a.as_ref(), "READ");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(wc.byte_len as usize, LEN);
    let expect: Vec<u8> = (0..LEN).map(pattern(99)).collect();
    assert_eq!(back.snapshot(), expect, "READ moved every byte");

    // SEND with immediate data, 64 bytes of src into the start of back.
    qp_b.post_recv(&RecvWr {
        wr_id: 3,
        sg_list: &[Sge {
            addr: remote_mr.addr(),
            length: 64,
            lkey: remote_mr.lkey(),
        }],
    })
    .expect("post_recv");
    qp_a.post_send(&SendWr {
        wr_id: 4,
        op: SendOp::SendWithImm { imm: 0x1234_5678 },
        sg_list: &[Sge {
            addr: src_mr.addr() + 64,
            length: 64,
            lkey: src_mr.lkey(),
        }],
        signaled: true,
    })
    .expect("post SEND");
    let wc = one_completion(cq_a.as_ref(), "SEND");
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success));
    let wc = one_completion(cq_b.as_ref(), "RECV");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (3, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!((wc.byte_len, wc.imm_data), (64, Some(0x1234_5678)));
    let expect_src: Vec<u8> = (64..128).map(pattern(7)).collect();
    assert_eq!(&remote.snapshot()[..64], &expect_src[..], "SEND payload");

    // A wait with nothing pending times out.
    let t = Instant::now();
    assert!(!cq_b.wait(Duration::from_millis(200)).expect("wait"));
    assert!(t.elapsed() >= Duration::from_millis(150));

    // Errors come back as errors: a QP cannot go RESET -> RTS.
    let qp_c = rc_qp(pd.as_ref(), &cq_a);
    let bad = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    let e = qp_c
        .modify(&bad, QpAttrMask::STATE)
        .expect_err("illegal transition");
    assert_eq!(e.kind, VerbsErrorKind::InvalidArgument, "{e}");

    // Children keep their parents: drop the device and PD handles first.
    drop(dev);
    drop(pd);
    qp_a.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .expect("to ERR after the device handle is gone");
    drop((qp_a, qp_b, qp_c, src_mr, dst_mr, remote_mr, back_mr, cq_a, cq_b));
    eprintln!("rxe end-to-end passed in {:?}", t0.elapsed());
}

/// Two connected RC QPs on one device, each with its own CQ: A plays the
/// peer that writes and reads, B owns the memory and binds windows.
struct Pair {
    cq_a: Arc<dyn CompletionQueue>,
    qp_a: Box<dyn QueuePair>,
    cq_b: Arc<dyn CompletionQueue>,
    qp_b: Box<dyn QueuePair>,
}

fn pair(pd: &dyn hipobj_platform::ProtectionDomain, dev: &dyn Device, sel: &Selection) -> Pair {
    let cq_a = dev.create_cq(32).expect("create_cq");
    let cq_b = dev.create_cq(32).expect("create_cq");
    let qp_a = rc_qp(pd, &cq_a);
    let qp_b = rc_qp(pd, &cq_b);
    connect(qp_a.as_ref(), qp_b.qp_num(), sel, dev);
    connect(qp_b.as_ref(), qp_a.qp_num(), sel, dev);
    Pair {
        cq_a,
        qp_a,
        cq_b,
        qp_b,
    }
}

/// Posts one WRITE or READ of `len` bytes from A and returns its completion.
fn one_sided(p: &Pair, op: SendOp, local: &dyn hipobj_platform::MemoryRegion, len: u32) -> WorkCompletion {
    p.qp_a
        .post_send(&SendWr {
            wr_id: 20,
            op,
            sg_list: &[Sge {
                addr: local.addr(),
                length: len,
                lkey: local.lkey(),
            }],
            signaled: true,
        })
        .expect("post");
    one_completion(p.cq_a.as_ref(), "WRITE/READ")
}

#[test]
#[ignore = "needs an rxe device: run inside scripts/rxe-vm.sh"]
fn rxe_memory_windows_fence_writes_and_reads() {
    use hipobj_platform::BindMwWr;
    let name = device_name();
    let verbs = IbVerbs::load().expect("libibverbs.so.1");
    let topo = SysfsTopology::system();
    let (dev, sel) = selection::select(&verbs, &topo, None, Some(&name)).expect("selection");
    let attr = dev.attr().expect("query_device");
    assert!(attr.mw_type2, "rxe reports type-2 memory windows: {attr:?}");
    let pd = dev.alloc_pd().expect("alloc_pd");
    const LEN: usize = 8192;
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (_src, src_region) = Buf::new(pattern(5), LEN);
    let (back, back_region) = Buf::new(|_| 0, LEN);
    let (dst, dst_region) = Buf::new(|_| 0, LEN);
    let src_mr = pd.reg_mr(src_region, rw).expect("reg_mr");
    let back_mr = pd.reg_mr(back_region, rw).expect("reg_mr");
    let dst_mr = pd
        .reg_mr(dst_region, AccessFlags::MW_BIND | AccessFlags::LOCAL_WRITE)
        .expect("reg_mr with MW_BIND only");
    let mw = pd.alloc_mw().expect("ibv_alloc_mw");
    let write = |rkey, off: u64| SendOp::Write {
        remote_addr: dst_mr.addr() + off,
        rkey,
    };

    // A window over [1024, 5120) with remote write and read, bound on B's QP.
    let p = pair(pd.as_ref(), dev.as_ref(), &sel);
    let unbound = mw.rkey();
    let key1 = p
        .qp_b
        .bind_mw(&BindMwWr {
            wr_id: 10,
            mw: mw.as_ref(),
            mr: dst_mr.as_ref(),
            addr: dst_mr.addr() + 1024,
            length: 4096,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            signaled: true,
            rkey: None,
        })
        .expect("post bind");
    assert_ne!(key1 & 0xff, unbound & 0xff);
    let wc = one_completion(p.cq_b.as_ref(), "BIND_MW");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (10, WcStatus::Success, WcOpcode::BindMw)
    );
    let wc = one_sided(&p, write(key1, 1024), src_mr.as_ref(), 4096);
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
    let got = dst.snapshot();
    let expect: Vec<u8> = (0..4096).map(pattern(5)).collect();
    assert_eq!(&got[1024..5120], &expect[..], "window-bound WRITE landed");
    assert!(got[..1024].iter().chain(&got[5120..]).all(|&b| b == 0));
    let wc = one_sided(
        &p,
        SendOp::Read {
            remote_addr: dst_mr.addr() + 1024,
            rkey: key1,
        },
        back_mr.as_ref(),
        4096,
    );
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(&back.snapshot()[..4096], &expect[..], "window-bound READ");

    // Local invalidate, then a late WRITE with the old key fails.
    p.qp_b
        .post_send(&SendWr {
            wr_id: 11,
            op: SendOp::LocalInv { rkey: key1 },
            sg_list: &[],
            signaled: true,
        })
        .expect("post LOCAL_INV");
    let wc = one_completion(p.cq_b.as_ref(), "LOCAL_INV");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (11, WcStatus::Success, WcOpcode::LocalInv)
    );
    let before = dst.snapshot();
    let (_ff, ff_region) = Buf::new(|_| 0xff, LEN);
    let ff_mr = pd.reg_mr(ff_region, rw).expect("reg_mr");
    let wc = one_sided(&p, write(key1, 1024), ff_mr.as_ref(), 64);
    assert_eq!(
        wc.status,
        WcStatus::RemAccessErr,
        "late WRITE after invalidate: {wc:?}"
    );
    assert_eq!(dst.snapshot(), before, "nothing landed");
    eprintln!("late WRITE after LOCAL_INV: {:?}", wc.status);
    drop(p);

    // Rebound with a new key on a new connection: the old key is useless.
    let p = pair(pd.as_ref(), dev.as_ref(), &sel);
    let key2 = p
        .qp_b
        .bind_mw(&BindMwWr {
            wr_id: 12,
            mw: mw.as_ref(),
            mr: dst_mr.as_ref(),
            addr: dst_mr.addr(),
            length: LEN as u64,
            access: AccessFlags::REMOTE_WRITE,
            signaled: true,
            rkey: None,
        })
        .expect("post rebind");
    assert_ne!(key2, key1);
    let wc = one_completion(p.cq_b.as_ref(), "BIND_MW again");
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::BindMw));
    let wc = one_sided(&p, write(key1, 1024), ff_mr.as_ref(), 64);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "old key after rebind: {wc:?}");
    assert_eq!(dst.snapshot(), before);
    eprintln!("WRITE with the old key after a rebind: {:?}", wc.status);
    drop(p);

    // The MR's own key on an MW_BIND-only registration grants nothing.
    let p = pair(pd.as_ref(), dev.as_ref(), &sel);
    let wc = one_sided(&p, write(dst_mr.rkey(), 0), ff_mr.as_ref(), 64);
    assert_eq!(
        wc.status,
        WcStatus::RemAccessErr,
        "MR key of a bind-only MR: {wc:?}"
    );
    assert_eq!(dst.snapshot(), before);
    eprintln!("WRITE through the MR key of an MW_BIND-only MR: {:?}", wc.status);
    drop(p);
    // The window goes before the MR (rxe refuses to deregister an MR with
    // bound windows).
    drop(mw);
    drop((dst_mr, src_mr, back_mr, ff_mr, pd, dev));
}
