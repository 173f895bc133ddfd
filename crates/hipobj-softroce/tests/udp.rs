//! The RC rules again, now over real UDP between two devices in one process,
//! each on its own 127.x.y.z address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::time::Duration;

use common::{Node, RW, attrs, pair, pattern, sge, wait};
use hipobj_platform::{AccessFlags, Mtu, QpAttr, QpState, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};
use hipobj_softroce::wire::bth::{BthRepr, DEFAULT_PKEY};
use hipobj_softroce::wire::reth::RethRepr;
use hipobj_softroce::wire::{Headers, Opcode, PseudoHeader, ROCE_PORT};
use hipobj_softroce::{FaultConfig, HostBuffer, SoftConfig};

const LONG: Duration = Duration::from_secs(60);

fn node(mtu: Mtu, faults: FaultConfig) -> Node {
    Node::new(SoftConfig {
        mtu,
        faults,
        ..SoftConfig::default()
    })
}

/// WRITEs `len` bytes from a to b, READs them back, checks every byte.
fn round_trip(mtu: Mtu, loss: f64, len: usize) {
    let faults = FaultConfig::loss(loss, len as u64 + 1);
    let (a, b) = (node(mtu, faults), node(mtu, faults));
    assert_ne!(a.gid(), b.gid());
    pair(&a, &b, &attrs(mtu));
    write_and_read_back(&a, &b, len, &format!("mtu {mtu:?} loss {loss} len {len}"));
}

/// On a connected pair: WRITEs `len` bytes from a to b, READs them back,
/// checks every byte and that b saw no completion.
fn write_and_read_back(a: &Node, b: &Node, len: usize, label: &str) {
    let data = pattern(len, 3);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(len);
    let back = HostBuffer::new(len);
    let (ms, mb) = (a.reg(&src, RW), a.reg(&back, RW));
    let md = b.reg(&dst, RW);
    let write = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&write).unwrap();
    let read = SendWr {
        wr_id: 2,
        op: SendOp::Read {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&back, &*mb)],
        signaled: true,
    };
    a.qp.post_send(&read).unwrap();
    let wcs = wait(&*a.scq, 2, LONG);
    let what = format!("{label}: {wcs:?} {:?}", a.soft.counters());
    assert_eq!(wcs.len(), 2, "{what}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{what}");
    assert_eq!(
        (wcs[0].opcode, wcs[1].opcode),
        (WcOpcode::RdmaWrite, WcOpcode::RdmaRead)
    );
    assert!(dst.to_vec() == data, "{what}: WRITE bytes differ");
    assert!(back.to_vec() == data, "{what}: READ bytes differ");
    assert!(
        b.scq.poll(&mut [common::blank(); 4]).unwrap() == 0,
        "no responder completion"
    );
}

/// UDP GSO on send and GRO on receive carry a WRITE and a READ back: the
/// data packets arrive coalesced (counted in `rx_coalesced`), every one
/// verifies under the identification the kernel gave its segment (no bad
/// ICRC), and the bytes are right. With GSO off nothing is coalesced.
#[test]
fn gso_and_gro_carry_writes_and_reads() {
    for gso in [true, false] {
        for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
            let cfg = || SoftConfig {
                mtu,
                gso,
                ..SoftConfig::default()
            };
            let (a, b) = (Node::new(cfg()), Node::new(cfg()));
            pair(&a, &b, &attrs(mtu));
            let len = 1 << 20;
            let data = pattern(len, 9);
            let src = HostBuffer::from_bytes(&data);
            let dst = HostBuffer::new(len);
            let back = HostBuffer::new(len);
            let (ms, mb) = (a.reg(&src, RW), a.reg(&back, RW));
            let md = b.reg(&dst, RW);
            let wr = |wr_id, op, sg| SendWr {
                wr_id,
                op,
                sg_list: sg,
                signaled: true,
            };
            let (ssg, bsg) = ([sge(&src, &*ms)], [sge(&back, &*mb)]);
            let (addr, rkey) = (dst.addr(), md.rkey());
            a.qp.post_send(&wr(
                1,
                SendOp::Write {
                    remote_addr: addr,
                    rkey,
                },
                &ssg,
            ))
            .unwrap();
            a.qp.post_send(&wr(
                2,
                SendOp::Read {
                    remote_addr: addr,
                    rkey,
                },
                &bsg,
            ))
            .unwrap();
            let wcs = wait(&*a.scq, 2, LONG);
            let (ca, cb) = (a.soft.counters(), b.soft.counters());
            let what = format!("gso {gso} {mtu:?}: {wcs:?} {ca:?} {cb:?}");
            assert!(
                wcs.len() == 2 && wcs.iter().all(|w| w.status == WcStatus::Success),
                "{what}"
            );
            assert!(
                dst.to_vec() == data && back.to_vec() == data,
                "{what}: bytes differ"
            );
            assert_eq!((ca.malformed(), cb.malformed()), (0, 0), "{what}");
            if gso {
                assert!(cb.rx_coalesced > 0, "no WRITE packet arrived coalesced: {what}");
                assert!(ca.rx_coalesced > 0, "no READ response arrived coalesced: {what}");
            } else {
                assert_eq!((ca.rx_coalesced, cb.rx_coalesced), (0, 0), "{what}");
            }
        }
    }
}

#[test]
fn write_and_read_from_1_byte_to_64_mib_over_udp() {
    for len in [1, 4095, 4097, 1 << 20, 64 << 20] {
        round_trip(Mtu::Mtu4096, 0.0, len);
    }
}

#[test]
fn every_mtu_works_over_udp() {
    for mtu in [Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
        round_trip(mtu, 0.0, (3 << 20) + 7);
    }
}

#[test]
fn one_percent_loss_over_udp_delivers_exact_bytes() {
    round_trip(Mtu::Mtu4096, 0.01, 16 << 20);
    round_trip(Mtu::Mtu1024, 0.01, 1 << 20);
}

#[test]
fn ten_percent_loss_over_udp_delivers_exact_bytes() {
    round_trip(Mtu::Mtu4096, 0.1, 4 << 20);
    round_trip(Mtu::Mtu2048, 0.1, 12345);
}

#[test]
fn duplication_and_reordering_over_udp() {
    let faults = FaultConfig {
        loss: 0.01,
        dup: 0.05,
        reorder: 0.05,
        seed: 9,
    };
    let (a, b) = (node(Mtu::Mtu4096, faults), node(Mtu::Mtu4096, faults));
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let data = pattern(8 << 20, 1);
    let src = HostBuffer::from_bytes(&data);
    let dst = HostBuffer::new(data.len());
    let ms = a.reg(&src, RW);
    let md = b.reg(&dst, RW);
    let wr = SendWr {
        wr_id: 5,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
    assert!(dst.to_vec() == data);
}

#[test]
fn send_and_write_with_imm_complete_at_the_responder_over_udp() {
    let (a, b) = (
        node(Mtu::Mtu2048, FaultConfig::NONE),
        node(Mtu::Mtu2048, FaultConfig::NONE),
    );
    pair(&a, &b, &attrs(Mtu::Mtu2048));
    let src = HostBuffer::from_bytes(&pattern(5000, 7));
    let dst = HostBuffer::new(5000);
    let rbuf = HostBuffer::new(8192);
    let ms = a.reg(&src, RW);
    let (md, mr) = (b.reg(&dst, RW), b.reg(&rbuf, RW));
    for id in [10, 11] {
        b.qp.post_recv(&RecvWr {
            wr_id: id,
            sg_list: &[sge(&rbuf, &*mr)],
        })
        .unwrap();
    }
    let imm_write = SendWr {
        wr_id: 1,
        op: SendOp::WriteWithImm {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
            imm: 42,
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&imm_write).unwrap();
    let send = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&send).unwrap();
    let wcs = wait(&*b.rcq, 2, LONG);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (
            wcs[0].wr_id,
            wcs[0].status,
            wcs[0].opcode,
            wcs[0].byte_len,
            wcs[0].imm_data
        ),
        (10, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 5000, Some(42))
    );
    assert_eq!(
        (
            wcs[1].wr_id,
            wcs[1].status,
            wcs[1].opcode,
            wcs[1].byte_len,
            wcs[1].imm_data
        ),
        (11, WcStatus::Success, WcOpcode::Recv, 5000, None)
    );
    assert_eq!(wcs[0].qp_num, b.qp.qp_num());
    assert_eq!(dst.to_vec(), src.to_vec());
    assert_eq!(&rbuf.to_vec()[..5000], &src.to_vec()[..]);
}

#[test]
fn reset_responder_ends_in_retry_exceeded_over_udp() {
    let (a, b) = (
        node(Mtu::Mtu4096, FaultConfig::NONE),
        node(Mtu::Mtu4096, FaultConfig::NONE),
    );
    let attr = QpAttr {
        timeout: 8,
        ..attrs(Mtu::Mtu4096)
    };
    a.init(&attr);
    a.connect(&attr, b.gid(), b.qp.qp_num(), 0, 0);
    let src = HostBuffer::new(64);
    let dst = HostBuffer::new(64);
    let ms = a.reg(&src, RW);
    let md = b.reg(&dst, RW);
    let wr = SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    let t = std::time::Instant::now();
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::RetryExcErr));
    // 8 tries of 4.096 us x 2^8 each.
    assert!(
        t.elapsed() >= Duration::from_micros(8 * 1048),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(b.soft.counters().drop_qp_state, 8);
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
}

#[test]
fn rkey_violation_naks_and_moves_the_responder_to_err_over_udp() {
    let (a, b) = (
        node(Mtu::Mtu4096, FaultConfig::NONE),
        node(Mtu::Mtu4096, FaultConfig::NONE),
    );
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let src = HostBuffer::from_bytes(&[9; 100]);
    let dst = HostBuffer::new(100);
    let ms = a.reg(&src, RW);
    let md = b.reg(&dst, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let wr = SendWr {
        wr_id: 4,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (4, WcStatus::RemAccessErr));
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    assert_eq!(dst.to_vec(), vec![0; 100]);
}

#[test]
fn no_receive_ends_in_rnr_retry_exceeded_over_udp() {
    let (a, b) = (
        node(Mtu::Mtu4096, FaultConfig::NONE),
        node(Mtu::Mtu4096, FaultConfig::NONE),
    );
    let attr = hipobj_platform::QpAttr {
        rnr_retry: 1,
        ..attrs(Mtu::Mtu4096)
    };
    pair(&a, &b, &attr);
    let src = HostBuffer::from_bytes(b"hello");
    let ms = a.reg(&src, RW);
    let wr = SendWr {
        wr_id: 6,
        op: SendOp::Send,
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (6, WcStatus::RnrRetryExcErr));
    assert_eq!(b.soft.counters().naks_rnr, 2);
}

#[test]
fn bad_datagrams_from_a_raw_socket_are_dropped_and_counted() {
    let (a, b) = (
        node(Mtu::Mtu4096, FaultConfig::NONE),
        node(Mtu::Mtu4096, FaultConfig::NONE),
    );
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let dst = HostBuffer::new(64);
    let md = b.reg(&dst, RW);
    let target = SocketAddrV4::new(b.soft.ip(), ROCE_PORT);
    // A socket on a's address family but another port: the ICRC covers the
    // source, so build datagrams for exactly this sender.
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let std::net::SocketAddr::V4(from) = raw.local_addr().unwrap() else {
        panic!("v4")
    };
    let pseudo = PseudoHeader {
        src: from,
        dst: target,
    };
    let h = Headers {
        bth: BthRepr {
            opcode: Opcode::WriteOnly,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: b.qp.qp_num(),
            ack_req: true,
            psn: 0x100,
        },
        reth: Some(RethRepr {
            va: dst.addr(),
            rkey: md.rkey(),
            dma_len: 8,
        }),
        aeth: None,
        imm: None,
    };
    let mut good = vec![0; h.datagram_len(8)];
    h.emit(8, &pseudo, &mut good, |p| p.copy_from_slice(b"INTRUDER"))
        .unwrap();
    let truncated = &good[..10];
    let mut bad_icrc = good.clone();
    bad_icrc[30] ^= 0xff;
    let mut bad_opcode = good.clone();
    bad_opcode[0] = 0x13;
    pseudo.seal(&mut bad_opcode);
    let oversized = vec![0u8; 9000];
    for d in [truncated, &bad_icrc[..], &bad_opcode[..], &oversized[..]] {
        raw.send_to(d, target).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.soft.counters().malformed() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = b.soft.counters();
    assert_eq!(
        (
            c.drop_truncated,
            c.drop_bad_icrc,
            c.drop_bad_opcode,
            c.drop_oversized
        ),
        (1, 1, 1, 1),
        "{c:?}"
    );
    assert_eq!(dst.to_vec(), vec![0; 64], "no bad datagram touched memory");
    // The worker survived: a real transfer still works.
    let src = HostBuffer::from_bytes(&[5; 64]);
    let ms = a.reg(&src, RW);
    let wr = SendWr {
        wr_id: 8,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(dst.to_vec(), vec![5; 64]);
}

#[test]
fn the_pcap_tap_records_both_directions() {
    let path = std::env::temp_dir().join(format!("softroce-tap-{}.pcap", std::process::id()));
    let a = Node::new(SoftConfig {
        pcap: Some(path.clone()),
        ..SoftConfig::default()
    });
    let b = node(Mtu::Mtu4096, FaultConfig::NONE);
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let src = HostBuffer::from_bytes(&pattern(10_000, 1));
    let dst = HostBuffer::new(10_000);
    let ms = a.reg(&src, RW);
    let md = b.reg(&dst, RW);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    assert_eq!(wait(&*a.scq, 1, LONG)[0].status, WcStatus::Success);
    drop((a, ms));
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    // 3 WRITE packets out, at least one ACK in.
    let mut at = 24;
    let mut records = 0;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11]]) as usize;
        assert_eq!(bytes[at + 16], 0x45, "an IPv4 header opens every record");
        at += 16 + len;
        records += 1;
    }
    assert_eq!(at, bytes.len());
    assert!(records >= 4, "{records}");
}

#[test]
fn devices_are_found_by_name_and_show_their_gid() {
    use hipobj_platform::Verbs;
    let v = hipobj_softroce::SoftVerbs::new(SoftConfig::default());
    assert_eq!(v.backend(), "softroce");
    assert_eq!(v.device_names().unwrap(), vec!["softroce0".to_string()]);
    assert!(v.open_device("mlx5_0").is_err());
    let d = v.open_device("softroce0").unwrap();
    let d2 = v.open_device("softroce0").unwrap();
    let gid = d.query_gid(1, 0).unwrap();
    assert_eq!(gid, d2.query_gid(1, 0).unwrap(), "one device, one address");
    let ip = gid.to_ipv4().unwrap();
    assert_eq!(ip.octets()[0], 127);
    assert_ne!(ip, std::net::Ipv4Addr::LOCALHOST);
    let port = d.query_port(1).unwrap();
    assert_eq!(port.gid_tbl_len, 1);
    assert_eq!(port.link_layer, hipobj_platform::LinkLayer::Ethernet);
    assert!(d.query_gid(1, 1).is_err());
}

/// The attacker's test: another local address seals a WRITE with the PSN
/// the responder expects, a valid rkey and address, and sends it at the
/// connected QP. An RC responder takes packets only from its peer, so
/// memory is untouched, the drop is counted, and the real WRITE with that
/// PSN still lands (it would otherwise be taken as a duplicate and complete
/// with success over the intruder's bytes).
#[test]
fn a_sealed_write_from_a_foreign_address_changes_nothing_and_is_counted() {
    let (a, b) = (
        node(Mtu::Mtu4096, FaultConfig::NONE),
        node(Mtu::Mtu4096, FaultConfig::NONE),
    );
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    let dst = HostBuffer::new(64);
    let md = b.reg(&dst, RW);
    let target = SocketAddrV4::new(b.soft.ip(), ROCE_PORT);
    // Another 127/8 address than a's, from the RoCE port itself, so that
    // only the source address gives it away.
    let [_, x, y, z] = a.soft.ip().octets();
    let intruder_ip = std::net::Ipv4Addr::new(127, x ^ 0x20, y, z);
    let intruder = UdpSocket::bind(SocketAddrV4::new(intruder_ip, ROCE_PORT))
        .or_else(|_| UdpSocket::bind(SocketAddrV4::new(intruder_ip, 0)))
        .unwrap();
    let std::net::SocketAddr::V4(from) = intruder.local_addr().unwrap() else {
        panic!("v4")
    };
    assert_ne!(from.ip(), &a.soft.ip());
    let pseudo = PseudoHeader {
        src: from,
        dst: target,
    };
    // a sends from PSN 0x200 (common::pair): the PSN b expects next.
    let h = Headers {
        bth: BthRepr {
            opcode: Opcode::WriteOnly,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: b.qp.qp_num(),
            ack_req: true,
            psn: 0x200,
        },
        reth: Some(RethRepr {
            va: dst.addr(),
            rkey: md.rkey(),
            dma_len: 8,
        }),
        aeth: None,
        imm: None,
    };
    let mut forged = vec![0; h.datagram_len(8)];
    h.emit(8, &pseudo, &mut forged, |p| p.copy_from_slice(b"INTRUDER"))
        .unwrap();
    let before = b.soft.counters().rx_datagrams;
    intruder.send_to(&forged, target).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.soft.counters().rx_datagrams == before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = b.soft.counters();
    assert_eq!(c.rx_datagrams, before + 1, "the forged WRITE arrived");
    assert_eq!(dst.to_vec(), vec![0; 64], "the forged WRITE touched memory");
    assert_eq!(c.drop_foreign_source, 1, "{c:?}");
    assert_eq!(c.malformed(), 0, "it was well formed: {c:?}");

    let real = pattern(64, 9);
    let src = HostBuffer::from_bytes(&real);
    let ms = a.reg(&src, RW);
    let wr = SendWr {
        wr_id: 8,
        op: SendOp::Write {
            remote_addr: dst.addr(),
            rkey: md.rkey(),
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    a.qp.post_send(&wr).unwrap();
    let wcs = wait(&*a.scq, 1, LONG);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(dst.to_vec(), real, "the real WRITE landed");
    let c = b.soft.counters();
    assert_eq!((c.duplicates, c.drop_foreign_source), (0, 1), "{c:?}");
}

/// A profiler (and `hipobj bench`'s CPU split) tells the soft NIC's CPU from
/// the application's by the worker thread's name; the kernel keeps 15 bytes
/// of it, so the prefix must come first whatever the device is called.
#[test]
fn the_worker_thread_is_named_by_a_prefix_that_survives_truncation() {
    use hipobj_platform::Verbs;
    let name = "a-device-name-longer-than-fifteen-bytes";
    let v = hipobj_softroce::SoftVerbs::new(SoftConfig {
        name: name.into(),
        ..SoftConfig::default()
    });
    let comms = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .map(|c| c.trim_end().to_owned())
            .collect()
    };
    let prefix = hipobj_softroce::WORKER_THREAD_PREFIX;
    // Other tests run devices of their own names meanwhile: look for this one's.
    let want: String = format!("{prefix}{name}").chars().take(15).collect();
    assert!(!comms().contains(&want));
    let d = v.open_device(name).unwrap();
    // The new thread names itself as it starts: give it the time to.
    let mut named = Vec::new();
    for _ in 0..1000 {
        named = comms().into_iter().filter(|c| c.starts_with(prefix)).collect();
        if named.contains(&want) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        named.contains(&want),
        "no worker named {want:?} among {named:?} of {:?}",
        comms()
    );
    drop(d);
    drop(v);
}

/// CPU time (user and system, in clock ticks) of this process's threads
/// named `name`.
fn thread_ticks(name: &str) -> u64 {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // After the command name's closing parenthesis: state is field 3,
        // utime field 14 and stime field 15.
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    ticks
}

/// With busy polling the workers move data as without, and once nothing
/// has moved for the polling time they sleep: two idle workers polling for
/// 20 ms after their last packet use (nearly) no CPU over the next 400 ms.
#[test]
fn busy_polling_moves_data_and_then_sleeps() {
    let config = SoftConfig {
        name: "bpoll".into(),
        busy_poll: Duration::from_millis(20),
        ..SoftConfig::default()
    };
    let (a, b) = (Node::new(config.clone()), Node::new(config));
    pair(&a, &b, &attrs(Mtu::Mtu4096));
    write_and_read_back(&a, &b, 8 << 20, "busy polling 20 ms");
    std::thread::sleep(Duration::from_millis(100));
    let before = thread_ticks("nic:bpoll");
    std::thread::sleep(Duration::from_millis(400));
    let used = thread_ticks("nic:bpoll") - before;
    // Polling through the 400 ms would be 80 ticks (two threads, 100 Hz).
    assert!(used <= 8, "idle workers used {used} ticks in 400 ms");
}
