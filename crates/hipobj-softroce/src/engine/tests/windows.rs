//! Type-2 memory windows: each rule of `docs/soft-roce.md` on two engines.
//! Side B owns the memory and binds windows; side A plays the peer.

use super::*;
use crate::engine::MwBind;

const BIND_ONLY: AccessFlags = AccessFlags(16 | 1); // MW_BIND | LOCAL_WRITE
const WRITE: AccessFlags = AccessFlags::REMOTE_WRITE;
const READ: AccessFlags = AccessFlags::REMOTE_READ;

/// Memory on B registered for windows only, a window, and A's source.
struct Win {
    f: Fx,
    dst: HostBuffer,
    kd: u32,
    mw: u32,
    src: HostBuffer,
    ks: u32,
}

fn setup(len: usize) -> Win {
    let mut f = Fx::new();
    f.connect();
    let dst = HostBuffer::new(len);
    let kd = f.reg(B, &dst, BIND_ONLY);
    let pd = f.s[B].pd;
    let mw = f.e(B).alloc_mw(pd);
    let src = HostBuffer::from_bytes(&pattern(len, 3));
    let ks = f.reg(A, &src, RW);
    Win {
        f,
        dst,
        kd,
        mw,
        src,
        ks,
    }
}

impl Win {
    /// Posts a bind on B's QP (or `qpn`) and returns the new key.
    fn bind_on(&mut self, qpn: u32, wr_id: u64, off: u64, len: u64, access: AccessFlags) -> u32 {
        let b = MwBind {
            wr_id,
            mw_key: self.mw,
            mr_key: self.kd,
            addr: self.dst.addr() + off,
            length: len,
            access,
            signaled: true,
            rkey: None,
        };
        let key = self.f.bind_mw(B, qpn, &b).unwrap();
        self.mw = key;
        key
    }

    fn bind(&mut self, wr_id: u64, off: u64, len: u64, access: AccessFlags) -> u32 {
        let qpn = self.f.qpn(B);
        let key = self.bind_on(qpn, wr_id, off, len, access);
        let scq = self.f.s[B].scq.clone();
        let wcs = self.f.wait(&scq, 1);
        ok(&wcs[0], wr_id, WcOpcode::BindMw);
        key
    }

    fn invalidate(&mut self, wr_id: u64, key: u32) -> WorkCompletion {
        let qpn = self.f.qpn(B);
        let wr = SendWr {
            wr_id,
            op: SendOp::LocalInv { rkey: key },
            sg_list: &[],
            signaled: true,
        };
        self.f.post_send(B, qpn, &wr).unwrap();
        let scq = self.f.s[B].scq.clone();
        self.f.wait(&scq, 1)[0]
    }

    /// A writes `len` bytes of its source at `off` through `key` and returns
    /// the completion status.
    fn write(&mut self, key: u32, off: u64, len: u32) -> WcStatus {
        let op = SendOp::Write {
            remote_addr: self.dst.addr() + off,
            rkey: key,
        };
        let sge = Sge {
            addr: self.src.addr(),
            length: len,
            lkey: self.ks,
        };
        self.f.post(A, 7, op, sge);
        let scq = self.f.s[A].scq.clone();
        self.f.wait(&scq, 1)[0].status
    }

    /// A reads `len` bytes at `off` through `key` into its source buffer.
    fn read(&mut self, key: u32, off: u64, len: u32) -> WcStatus {
        let op = SendOp::Read {
            remote_addr: self.dst.addr() + off,
            rkey: key,
        };
        let sge = Sge {
            addr: self.src.addr(),
            length: len,
            lkey: self.ks,
        };
        self.f.post(A, 8, op, sge);
        let scq = self.f.s[A].scq.clone();
        self.f.wait(&scq, 1)[0].status
    }

    fn untouched(&self) -> bool {
        self.dst.to_vec().iter().all(|&b| b == 0)
    }

    /// A refused access: the requester sees REM_ACCESS_ERR, B's QP is in
    /// ERR, and B's memory is untouched.
    fn refused(&mut self, status: WcStatus) {
        assert_eq!(status, WcStatus::RemAccessErr);
        assert_eq!(self.f.state(B), QpState::Err);
        assert!(self.untouched());
    }

    /// A second RTS QP on B, in B's PD, pointed at A's QP (it never sends).
    fn extra_qp(&mut self) -> u32 {
        let pd = self.f.s[B].pd;
        let scq = self.f.s[B].scq.clone();
        let rcq = self.f.s[B].rcq.clone();
        let qpn = self
            .f
            .e(B)
            .create_qp(QpConfig {
                pd,
                send_cq: scq,
                recv_cq: rcq,
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .unwrap();
        let attr = QpAttr {
            dest_qp_num: self.f.qpn(A),
            dgid: Gid::from_ipv4(ip(A)),
            ..self.f.attr.clone()
        };
        self.f.bring_up(B, qpn, &attr);
        qpn
    }
}

#[test]
fn a_bound_window_grants_write_and_read_and_the_bind_completes_on_the_send_cq() {
    let mut w = setup(4096);
    let first = w.mw;
    let key = w.bind(1, 0, 4096, WRITE | READ);
    assert_eq!(key >> 8, first >> 8, "the window keeps its index");
    assert_ne!(key, first);
    assert_eq!(w.write(key, 0, 4096), WcStatus::Success);
    assert_eq!(w.dst.to_vec(), pattern(4096, 3));
    // Read it back over a zeroed source.
    w.src = HostBuffer::new(4096);
    w.ks = w.f.reg(A, &w.src, RW);
    assert_eq!(w.read(key, 0, 4096), WcStatus::Success);
    assert_eq!(w.src.to_vec(), pattern(4096, 3));
    let b = w.f.e(B).mw_binding(key).unwrap();
    assert_eq!((b.va, b.len, b.access), (w.dst.addr(), 4096, WRITE | READ));
}

#[test]
fn a_bind_only_registration_gives_a_peer_nothing_by_its_own_key() {
    let mut w = setup(4096);
    let _key = w.bind(1, 0, 4096, WRITE | READ);
    let kd = w.kd;
    let s = w.write(kd, 0, 64);
    w.refused(s);
    let mut w = setup(4096);
    let kd = w.kd;
    let s = w.read(kd, 0, 64);
    w.refused(s);
}

#[test]
fn an_unbound_windows_first_key_grants_nothing() {
    let mut w = setup(4096);
    let key = w.mw;
    let s = w.write(key, 0, 64);
    w.refused(s);
}

#[test]
fn a_write_outside_the_window_naks_and_touches_nothing() {
    // Window over [1024, 2048) of a 4096-byte registration.
    for (off, len) in [(0u64, 64u32), (1000, 64), (2000, 64), (2048, 1), (1024, 1025)] {
        let mut w = setup(4096);
        let key = w.bind(1, 1024, 1024, WRITE);
        let s = w.write(key, off, len);
        w.refused(s);
    }
    // Inside it works, exactly there.
    let mut w = setup(4096);
    let key = w.bind(1, 1024, 1024, WRITE);
    assert_eq!(w.write(key, 1024, 1024), WcStatus::Success);
    let got = w.dst.to_vec();
    assert!(got[..1024].iter().chain(&got[2048..]).all(|&b| b == 0));
    assert_eq!(&got[1024..2048], &pattern(1024, 3)[..]);
}

#[test]
fn a_window_grants_only_its_rights() {
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, READ);
    let s = w.write(key, 0, 64);
    w.refused(s);
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, WRITE);
    let s = w.read(key, 0, 64);
    assert_eq!(s, WcStatus::RemAccessErr);
    assert_eq!(w.f.state(B), QpState::Err);
}

#[test]
fn local_invalidate_ends_access_and_completes_on_the_send_cq() {
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, WRITE);
    let wc = w.invalidate(2, key);
    ok(&wc, 2, WcOpcode::LocalInv);
    assert_eq!(w.f.e(B).mw_binding(key), None);
    let s = w.write(key, 0, 64);
    w.refused(s);
}

#[test]
fn each_bind_rotates_the_key_byte_and_old_keys_stop_working() {
    let mut w = setup(4096);
    let first = w.mw;
    let mut prev = first;
    let mut bytes = std::collections::HashSet::new();
    for i in 0..200u64 {
        let key = w.bind(10 + i, 0, 4096, WRITE);
        assert_eq!(key >> 8, first >> 8, "the index stays");
        assert_ne!(key & 0xff, prev & 0xff, "the key byte changes");
        bytes.insert(key & 0xff);
        ok(&w.invalidate(1000 + i, key), 1000 + i, WcOpcode::LocalInv);
        prev = key;
    }
    assert!(bytes.len() > 100, "key bytes are spread: {}", bytes.len());
    let old = prev;
    let new = w.bind(5000, 0, 4096, WRITE);
    assert_ne!(old, new);
    let s = w.write(old, 0, 64);
    w.refused(s);
}

#[test]
fn a_window_works_only_through_the_qp_that_bound_it() {
    let mut w = setup(4096);
    let other = w.extra_qp();
    let key = w.bind_on(other, 1, 0, 4096, WRITE);
    let scq = w.f.s[B].scq.clone();
    ok(&w.f.wait(&scq, 1)[0], 1, WcOpcode::BindMw);
    assert_eq!(w.f.e(B).mw_binding(key).map(|b| b.qpn), Some(other));
    // A's QP is connected to B's first QP, not to the one that bound it.
    let s = w.write(key, 0, 64);
    w.refused(s);
}

#[test]
fn destroying_the_binding_qp_deregistering_or_deallocating_ends_the_window() {
    // The QP that bound it is destroyed.
    let mut w = setup(4096);
    let other = w.extra_qp();
    let key = w.bind_on(other, 1, 0, 4096, WRITE);
    let scq = w.f.s[B].scq.clone();
    w.f.wait(&scq, 1);
    assert!(w.f.e(B).mw_binding(key).is_some());
    assert!(w.f.e(B).destroy_qp(other));
    assert_eq!(w.f.e(B).mw_binding(key), None);
    // The region is deregistered.
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, WRITE);
    let kd = w.kd;
    assert!(w.f.e(B).dereg_mr(kd));
    assert_eq!(w.f.e(B).mw_binding(key), None);
    let s = w.write(key, 0, 64);
    w.refused(s);
    // The window is deallocated.
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, WRITE);
    assert!(w.f.e(B).dealloc_mw(key));
    let s = w.write(key, 0, 64);
    w.refused(s);
}

/// Posts a bind that must fail and checks MW_BIND_ERR and B's QP in ERR.
fn bind_fails(w: &mut Win, off: u64, len: u64, access: AccessFlags) {
    let qpn = w.f.qpn(B);
    let key = w.bind_on(qpn, 9, off, len, access);
    let scq = w.f.s[B].scq.clone();
    let wcs = w.f.wait(&scq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::MwBindErr), "{wcs:?}");
    assert_eq!(w.f.state(B), QpState::Err);
    assert_eq!(w.f.e(B).mw_binding(key), None);
}

#[test]
fn bad_binds_complete_with_mw_bind_err_and_grant_nothing() {
    // Outside the region.
    let mut w = setup(4096);
    bind_fails(&mut w, 4000, 200, WRITE);
    // A region without MW_BIND.
    let mut w = setup(4096);
    w.kd = w.f.reg(B, &w.dst, RW);
    bind_fails(&mut w, 0, 64, READ);
    // Remote write over a region without local write.
    let mut w = setup(4096);
    w.kd = w.f.reg(B, &w.dst, AccessFlags::MW_BIND);
    bind_fails(&mut w, 0, 64, WRITE);
    // Rights a window cannot grant.
    let mut w = setup(4096);
    bind_fails(&mut w, 0, 64, AccessFlags::REMOTE_ATOMIC);
    // A window bound already (a type-2 window binds only when free).
    let mut w = setup(4096);
    w.bind(1, 0, 64, WRITE);
    bind_fails(&mut w, 0, 64, WRITE);
    // A region of another protection domain.
    let mut w = setup(4096);
    let other = w.f.e(B).alloc_pd();
    w.kd = w.f.e(B).reg_mr(other, w.dst.region(), BIND_ONLY).unwrap();
    bind_fails(&mut w, 0, 64, WRITE);
}

#[test]
fn invalidating_a_key_this_qp_did_not_bind_fails_with_loc_qp_op_err() {
    let mut w = setup(4096);
    let key = w.bind(1, 0, 4096, WRITE);
    let wc = w.invalidate(2, key ^ 1);
    assert_eq!((wc.status, wc.opcode), (WcStatus::LocQpOpErr, WcOpcode::LocalInv));
    assert_eq!(w.f.state(B), QpState::Err);
}

#[test]
fn window_operations_execute_in_send_queue_order() {
    let mut w = setup(1 << 20);
    // B writes 1 MiB to A, then binds: the bind waits for the WRITE.
    let big = HostBuffer::from_bytes(&pattern(1 << 20, 5));
    let kb = w.f.reg(B, &big, RW);
    let sink = HostBuffer::new(1 << 20);
    let kk = w.f.reg(A, &sink, RW);
    w.f.post(B, 100, write_op(&sink, kk), sge(&big, kb));
    let qpn = w.f.qpn(B);
    let key = w.bind_on(qpn, 101, 0, 4096, WRITE);
    assert_eq!(w.f.e(B).mw_binding(key), None, "not before the WRITE completed");
    // A WRITE posted after the bind waits for it too.
    w.f.post(B, 102, write_op(&sink, kk), sge(&big, kb));
    let scq = w.f.s[B].scq.clone();
    let wcs = w.f.wait(&scq, 3);
    let order: Vec<(u64, WcOpcode, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(
        order,
        vec![
            (100, WcOpcode::RdmaWrite, WcStatus::Success),
            (101, WcOpcode::BindMw, WcStatus::Success),
            (102, WcOpcode::RdmaWrite, WcStatus::Success),
        ]
    );
    assert!(w.f.e(B).mw_binding(key).is_some());
    assert_eq!(sink.to_vec(), pattern(1 << 20, 5));
}

#[test]
fn window_operations_flush_in_err() {
    let mut w = setup(4096);
    w.f.modify(B, QpState::Err, QpAttrMask::STATE).unwrap();
    let qpn = w.f.qpn(B);
    let key = w.bind_on(qpn, 1, 0, 64, WRITE);
    let scq = w.f.s[B].scq.clone();
    let wcs = w.f.wait(&scq, 1);
    assert_eq!(
        (wcs[0].status, wcs[0].opcode),
        (WcStatus::WrFlushErr, WcOpcode::BindMw)
    );
    assert_eq!(w.f.e(B).mw_binding(key), None);
    // A bind in a state before RTS is refused at post time.
    let mut f = Fx::new();
    let pd = f.s[B].pd;
    let mw = f.e(B).alloc_mw(pd);
    let buf = HostBuffer::new(64);
    let kd = f.reg(B, &buf, BIND_ONLY);
    let qpn = f.qpn(B);
    let b = MwBind {
        wr_id: 1,
        mw_key: mw,
        mr_key: kd,
        addr: buf.addr(),
        length: 64,
        access: WRITE,
        signaled: true,
        rkey: None,
    };
    assert!(f.bind_mw(B, qpn, &b).is_err());
}

#[test]
fn a_caller_may_choose_the_key_of_a_bind_within_its_window() {
    let mut w = setup(4096);
    let chosen = (w.mw & !0xff) | u32::from((w.mw as u8).wrapping_add(77));
    let qpn = w.f.qpn(B);
    let b = MwBind {
        wr_id: 1,
        mw_key: w.mw,
        mr_key: w.kd,
        addr: w.dst.addr(),
        length: 4096,
        access: WRITE,
        signaled: true,
        rkey: Some(chosen),
    };
    assert_eq!(w.f.bind_mw(B, qpn, &b).unwrap(), chosen);
    let scq = w.f.s[B].scq.clone();
    ok(&w.f.wait(&scq, 1)[0], 1, WcOpcode::BindMw);
    assert_eq!(w.write(chosen, 0, 64), WcStatus::Success);
    // A key of another index is refused at post time.
    let other = MwBind {
        rkey: Some(chosen ^ 0x100),
        ..b
    };
    assert!(w.f.bind_mw(B, qpn, &other).is_err());
}

/// Issue 15's broken idle connection. A's READ through B's window completes;
/// B invalidates the window (hipObject does so before a PUT returns); then
/// the same READ request arrives again, as a requester sends it after a
/// retransmission timeout that fired while the responses were merely late.
/// A duplicate READ is executed again, with its key checked again (as the
/// kernel's rxe does, `rxe_recheck_mr`): the window no longer grants it, so
/// B NAKs it and its QP goes to ERR, flushing the receive it had posted. The
/// QP is idle by then; its next user finds it dead.
#[test]
fn a_duplicate_read_after_the_window_was_invalidated_breaks_the_idle_responder() {
    let mut w = setup(4096);
    let sentinel = Sge {
        addr: w.dst.addr(),
        length: 0,
        lkey: w.kd,
    };
    w.f.recv(B, 42, sentinel);
    let key = w.bind(1, 0, 4096, READ);
    assert_eq!(w.read(key, 0, 4096), WcStatus::Success);
    ok(&w.invalidate(2, key), 2, WcOpcode::LocalInv);
    assert_eq!(w.f.state(B), QpState::Rts, "idle and healthy");

    let reth = RethRepr {
        va: w.dst.addr(),
        rkey: key,
        dma_len: 4096,
    };
    let again = request(&w.f, Opcode::ReadRequest, 0, Some(reth), &[]);
    let now = w.f.net.now();
    w.f.e(B).handle_datagram(now, addr(A), &again);
    assert_eq!(w.f.e(B).counters().duplicates, 1);
    assert_eq!(w.f.e(B).counters().naks_fatal, 1);
    assert_eq!(w.f.state(B), QpState::Err);
    let rcq = w.f.s[B].rcq.clone();
    let flushed = w.f.wait(&rcq, 1);
    assert_eq!((flushed[0].wr_id, flushed[0].status), (42, WcStatus::WrFlushErr));
}
