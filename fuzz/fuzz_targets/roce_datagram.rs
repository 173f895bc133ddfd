//! Arbitrary datagrams into the soft NIC's RC engine, with a QP in RTS and a
//! memory region it may write and read. Each input is used twice: as it is
//! (almost always dropped by the ICRC check) and with a correct ICRC sealed
//! on, so the fuzzer explores the RC rules behind the check. The engine must
//! never panic, and must answer by transmitting without panicking either.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use hipobj_platform::{AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState};
use hipobj_softroce::HostBuffer;
use hipobj_softroce::engine::{Cq, Engine, EngineConfig, QpConfig, Time};
use hipobj_softroce::wire::PseudoHeader;
use libfuzzer_sys::fuzz_target;

const LOCAL: Ipv4Addr = Ipv4Addr::new(127, 70, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(127, 70, 0, 2);

fn engine(mem: &HostBuffer) -> Engine {
    let mut e = Engine::new(EngineConfig::new(LOCAL));
    let pd = e.alloc_pd();
    let _ = e.reg_mr(
        pd,
        mem.region(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let cq = Arc::new(Cq::new(64));
    let Ok(qpn) = e.create_qp(QpConfig {
        pd,
        send_cq: cq.clone(),
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    }) else {
        return e;
    };
    use QpAttrMask as M;
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..QpAttr::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x20,
        rq_psn: 0,
        dgid: Gid::from_ipv4(PEER),
        ..QpAttr::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    let _ = e.modify_qp(Time::ZERO, qpn, &init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
    let _ = e.modify_qp(
        Time::ZERO,
        qpn,
        &rtr,
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
    );
    let _ = e.modify_qp(
        Time::ZERO,
        qpn,
        &rts,
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
    );
    e
}

fuzz_target!(|data: &[u8]| {
    // One buffer for the whole run: HostBuffer memory is never freed.
    static MEM: std::sync::OnceLock<HostBuffer> = std::sync::OnceLock::new();
    let mem = MEM.get_or_init(|| HostBuffer::new(8192));
    let mut e = engine(mem);
    let from = SocketAddrV4::new(PEER, 4791);
    e.handle_datagram(Time::from_nanos(1), from, data);
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&[0; 4]);
    PseudoHeader {
        src: from,
        dst: SocketAddrV4::new(LOCAL, 4791),
    }
    .seal(&mut sealed);
    e.handle_datagram(Time::from_nanos(2), from, &sealed);
    // The raw link's entry: the input as a whole IPv4 packet, and the sealed
    // datagram behind the headers it was sealed under.
    e.handle_ipv4(Time::from_nanos(2), data);
    let pseudo = PseudoHeader {
        src: from,
        dst: SocketAddrV4::new(LOCAL, 4791),
    };
    let mut ip = pseudo.ip_udp_header(sealed.len()).to_vec();
    ip.extend_from_slice(&sealed);
    e.handle_ipv4(Time::from_nanos(2), &ip);
    let mut out = vec![0u8; 9000];
    for i in 0..8 {
        if e.poll_transmit(Time::from_nanos(3 + i), &mut out).is_none() {
            break;
        }
    }
    e.handle_timeout(Time::from_nanos(10_000_000_000));
});
