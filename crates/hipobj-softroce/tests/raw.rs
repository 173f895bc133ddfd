//! The raw link: the soft NIC on a raw IPv4 socket, sending the IPv4 and
//! UDP headers it sealed under and checking every received ICRC against the
//! headers that actually arrived, as a RoCE NIC on an interface does. Needs
//! CAP_NET_RAW (root); without it each test says so and returns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use common::{Node, RW, attrs, pair, pattern, sge, wait};
use hipobj_platform::{Mtu, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};
use hipobj_softroce::link::udp::RawSocket;
use hipobj_softroce::wire::bth::{BthRepr, DEFAULT_PKEY};
use hipobj_softroce::wire::icrc::seal_over;
use hipobj_softroce::wire::reth::RethRepr;
use hipobj_softroce::wire::{Headers, Opcode, PseudoHeader, ROCE_PORT};
use hipobj_softroce::{HostBuffer, LinkKind, SoftConfig};

const LONG: Duration = Duration::from_secs(60);

/// Whether this process may open raw sockets; prints why not.
fn raw_allowed(test: &str) -> bool {
    match RawSocket::open(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0)) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("SKIPPED {test}: the raw link needs CAP_NET_RAW (run as root): {e}");
            false
        }
        Err(e) => panic!("raw socket: {e}"),
    }
}

fn node(link: LinkKind) -> Node {
    Node::new(SoftConfig {
        link,
        mtu: Mtu::Mtu4096,
        ..SoftConfig::default()
    })
}

/// From `a` to `b`: a 100 kB WRITE, READ back, a SEND and a WRITE with
/// immediate, every byte and completion checked.
fn exercise(a: &Node, b: &Node, seed: u8) {
    let len = 100_000;
    let src = HostBuffer::from_bytes(&pattern(len, seed));
    let back = HostBuffer::new(len);
    let dst = HostBuffer::new(len);
    let rbuf = HostBuffer::new(len);
    let (ms, mb) = (a.reg(&src, RW), a.reg(&back, RW));
    let (md, mr) = (b.reg(&dst, RW), b.reg(&rbuf, RW));
    let rdma = |wr_id, op| SendWr {
        wr_id,
        op,
        sg_list: &[],
        signaled: true,
    };
    let s = [sge(&src, &*ms)];
    let bk = [sge(&back, &*mb)];
    a.qp.post_send(&SendWr {
        sg_list: &s,
        ..rdma(
            1,
            SendOp::Write {
                remote_addr: dst.addr(),
                rkey: md.rkey(),
            },
        )
    })
    .unwrap();
    a.qp.post_send(&SendWr {
        sg_list: &bk,
        ..rdma(
            2,
            SendOp::Read {
                remote_addr: dst.addr(),
                rkey: md.rkey(),
            },
        )
    })
    .unwrap();
    let wcs = wait(&*a.scq, 2, LONG);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert!(dst.to_vec() == src.to_vec(), "WRITE bytes");
    assert!(back.to_vec() == src.to_vec(), "READ bytes");
    for id in [10, 11] {
        b.qp.post_recv(&RecvWr {
            wr_id: id,
            sg_list: &[sge(&rbuf, &*mr)],
        })
        .unwrap();
    }
    a.qp.post_send(&SendWr {
        sg_list: &s,
        ..rdma(3, SendOp::Send)
    })
    .unwrap();
    a.qp.post_send(&SendWr {
        sg_list: &s[..],
        ..rdma(
            4,
            SendOp::WriteWithImm {
                remote_addr: dst.addr(),
                rkey: md.rkey(),
                imm: 0xfeed,
            },
        )
    })
    .unwrap();
    let wcs = wait(&*b.rcq, 2, LONG);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, len as u32)
    );
    assert_eq!(
        (wcs[1].status, wcs[1].opcode, wcs[1].imm_data),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(0xfeed))
    );
    assert!(rbuf.to_vec() == src.to_vec(), "SEND bytes");
    assert_eq!(wait(&*a.scq, 2, LONG).len(), 2);
}

#[test]
fn two_raw_devices_write_read_send_and_write_with_imm() {
    if !raw_allowed("two_raw_devices_write_read_send_and_write_with_imm") {
        return;
    }
    let (a, b) = (node(LinkKind::Raw), node(LinkKind::Raw));
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    exercise(&a, &b, 1);
    exercise(&b, &a, 2);
    let (ca, cb) = (a.soft.counters(), b.soft.counters());
    assert_eq!((ca.malformed(), cb.malformed()), (0, 0), "{ca:?} {cb:?}");
}

/// The raw link puts on the wire exactly the header the UDP link's peer
/// assumes, and accepts what the kernel's UDP stack sends: the two links
/// interoperate both ways.
#[test]
fn a_raw_device_and_a_udp_device_talk_both_ways() {
    if !raw_allowed("a_raw_device_and_a_udp_device_talk_both_ways") {
        return;
    }
    let (a, b) = (node(LinkKind::Raw), node(LinkKind::Udp));
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    exercise(&a, &b, 3);
    exercise(&b, &a, 4);
    let (ca, cb) = (a.soft.counters(), b.soft.counters());
    assert_eq!((ca.drop_bad_icrc, cb.drop_bad_icrc), (0, 0), "{ca:?} {cb:?}");
    // The UDP device sent its WRITE and READ responses as GSO
    // super-packets, which the raw socket on loopback sees whole: the raw
    // device cut them where the kernel cuts them and checked each packet
    // under the identification its segment gets.
    assert!(ca.rx_coalesced > 0, "the raw device saw no super-packet: {ca:?}");
    assert_eq!((ca.drop_bad_ip, ca.malformed()), (0, 0), "{ca:?}");
}

/// What arrived decides: a WRITE sealed under a header with identification
/// 0x1234 (as another sender, such as the kernel's rxe, numbers its
/// packets) lands; the next one, sealed under identification 0 but sent with
/// 0x4321, is dropped as a bad ICRC and touches nothing.
#[test]
fn the_raw_link_checks_the_icrc_against_the_header_that_arrived() {
    if !raw_allowed("the_raw_link_checks_the_icrc_against_the_header_that_arrived") {
        return;
    }
    let (a, b) = (node(LinkKind::Udp), node(LinkKind::Raw));
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let dst = HostBuffer::new(16);
    let md = b.reg(&dst, RW);
    // Another sender on the loopback plays a's address (raw sockets may).
    let [_, x, y, z] = b.soft.ip().octets();
    let spoofer = RawSocket::open(SocketAddrV4::new(Ipv4Addr::new(127, x ^ 0x10, y, z), 0)).unwrap();
    let from = SocketAddrV4::new(a.soft.ip(), 50_000);
    let to = SocketAddrV4::new(b.soft.ip(), ROCE_PORT);
    let write = |psn: u32, va: u64, bytes: &[u8; 8], sealed_id: u16, sent_id: u16| {
        let h = Headers {
            bth: BthRepr {
                opcode: Opcode::WriteOnly,
                solicited: false,
                pad_count: 0,
                pkey: DEFAULT_PKEY,
                dest_qp: b.qp.qp_num(),
                ack_req: true,
                psn,
            },
            reth: Some(RethRepr {
                va,
                rkey: md.rkey(),
                dma_len: 8,
            }),
            aeth: None,
            imm: None,
        };
        let pseudo = PseudoHeader { src: from, dst: to };
        let mut d = vec![0; h.datagram_len(8)];
        h.emit(8, &pseudo, &mut d, |p| p.copy_from_slice(bytes)).unwrap();
        let mut hdr = pseudo.ip_udp_header(d.len());
        hdr[4..6].copy_from_slice(&sealed_id.to_be_bytes());
        seal_over(&hdr, &mut d);
        hdr[4..6].copy_from_slice(&sent_id.to_be_bytes());
        let mut pkt = hdr.to_vec();
        pkt.extend_from_slice(&d);
        pkt
    };
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let end = Instant::now() + Duration::from_secs(10);
        while !f() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(f(), "{what}: {:?}", b.soft.counters());
    };
    // a sends from PSN 0x200 (common::pair).
    let good = write(0x200, dst.addr(), b"ARRIVED!", 0x1234, 0x1234);
    spoofer.send_ip(&[(&good, *to.ip())]).unwrap();
    until("the WRITE under id 0x1234 lands", &|| {
        &dst.to_vec()[..8] == b"ARRIVED!"
    });
    let bad = write(0x201, dst.addr() + 8, b"REWRITE!", 0, 0x4321);
    spoofer.send_ip(&[(&bad, *to.ip())]).unwrap();
    until("the WRITE sent under another id is dropped", &|| {
        b.soft.counters().drop_bad_icrc == 1
    });
    assert_eq!(&dst.to_vec()[8..], &[0; 8]);
}
