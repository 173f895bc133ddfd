//! Soft RoCE throughput between two processes against the loopback UDP
//! ceiling of this machine, measured in the same run with the same datagram
//! size.
//!
//! `cargo bench -p hipobj-softroce --bench transfer [-- MIB [REPS [MTU]]]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, Mtu, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair,
    SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_softroce::link::udp::{self, BATCH, RxBatch, Waker};
use hipobj_softroce::{HostBuffer, SoftConfig, SoftVerbs};

const RW: AccessFlags = AccessFlags(1 | 2 | 4);

struct Node {
    _verbs: SoftVerbs,
    dev: Arc<dyn Device>,
    pd: Arc<dyn hipobj_platform::ProtectionDomain>,
    cq: Arc<dyn CompletionQueue>,
    qp: Box<dyn QueuePair>,
}

fn node(mtu: Mtu) -> Node {
    let verbs = SoftVerbs::new(SoftConfig {
        mtu,
        ..SoftConfig::default()
    });
    let dev = verbs.open_device("softroce0").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 1,
            max_recv_sge: 1,
            sq_sig_all: true,
        })
        .unwrap();
    Node {
        _verbs: verbs,
        dev,
        pd,
        cq,
        qp,
    }
}

fn connect(n: &Node, mtu: Mtu, gid: Gid, qpn: u32) {
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: mtu,
        dgid: gid,
        dest_qp_num: qpn,
        timeout: 10,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
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

fn line(r: &mut impl BufRead, prefix: &str) -> Vec<String> {
    let mut s = String::new();
    loop {
        s.clear();
        assert!(r.read_line(&mut s).unwrap() > 0, "peer closed before {prefix}");
        if let Some(at) = s.find(prefix) {
            return s[at + prefix.len()..]
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
    }
}

fn peer(len: usize, mtu: Mtu) {
    let n = node(mtu);
    let buf = HostBuffer::new(len);
    let mr = n.pd.reg_mr(buf.region(), RW).unwrap();
    let ip = n.dev.query_gid(1, 0).unwrap().to_ipv4().unwrap();
    println!("PEER {ip} {} {} {}", n.qp.qp_num(), mr.rkey(), buf.addr());
    let mut stdin = BufReader::new(std::io::stdin());
    let p = line(&mut stdin, "PARENT ");
    connect(
        &n,
        mtu,
        Gid::from_ipv4(p[0].parse().unwrap()),
        p[1].parse().unwrap(),
    );
    println!("READY");
    line(&mut stdin, "BYE");
}

fn blank() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    }
}

fn run_one(n: &Node, op: SendOp, sge: Sge) -> Duration {
    let t = Instant::now();
    n.qp.post_send(&SendWr {
        wr_id: 1,
        op,
        sg_list: &[sge],
        signaled: true,
    })
    .unwrap();
    let mut wc = [blank()];
    loop {
        n.cq.wait(Duration::from_secs(30)).unwrap();
        if n.cq.poll(&mut wc).unwrap() == 1 {
            break;
        }
    }
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    t.elapsed()
}

/// Receiver goodput of one sender thread blasting `size`-byte datagrams with
/// sendmmsg at one receiver draining with recvmmsg, over `secs`.
fn udp_ceiling(size: usize, secs: f64) -> f64 {
    let rx_addr = SocketAddrV4::new(Ipv4Addr::new(127, 33, 0, 1), 0);
    let rx = udp::bind(rx_addr).unwrap();
    let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else {
        unreachable!()
    };
    let tx = udp::bind(SocketAddrV4::new(Ipv4Addr::new(127, 33, 0, 2), 0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let payload = vec![0xabu8; size];
        let items: Vec<(&[u8], SocketAddrV4)> = (0..BATCH).map(|_| (payload.as_slice(), to)).collect();
        while !s2.load(Ordering::Relaxed) {
            let _ = udp::send(&tx, &items);
        }
    });
    let waker = Waker::new().unwrap();
    let mut batch = RxBatch::default();
    let mut bytes = 0usize;
    let start = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    while start.elapsed() < dur {
        let k = batch.recv(&rx).unwrap();
        if k == 0 {
            udp::wait(&rx, &waker, Some(Duration::from_millis(10))).unwrap();
        }
        bytes += (0..k).map(|i| batch.get(i).0.len()).sum::<usize>();
    }
    let el = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    bytes as f64 / el
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let mtu = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .and_then(Mtu::from_bytes)
        .unwrap_or(Mtu::Mtu4096);
    let len = mib << 20;
    if std::env::var_os("SOFTROCE_BENCH_PEER").is_some() {
        return peer(len, mtu);
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([mib.to_string(), reps.to_string(), mtu.bytes().to_string()])
        .env("SOFTROCE_BENCH_PEER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let p = line(&mut from, "PEER ");
    let (qpn, rkey, addr): (u32, u32, u64) = (
        p[1].parse().unwrap(),
        p[2].parse().unwrap(),
        p[3].parse().unwrap(),
    );
    let n = node(mtu);
    connect(&n, mtu, Gid::from_ipv4(p[0].parse().unwrap()), qpn);
    let ip = n.dev.query_gid(1, 0).unwrap().to_ipv4().unwrap();
    writeln!(to, "PARENT {ip} {}", n.qp.qp_num()).unwrap();
    line(&mut from, "READY");

    let src = HostBuffer::new(len);
    src.write(0, &(0..len).map(|i| i as u8).collect::<Vec<_>>());
    let dst = HostBuffer::new(len);
    let (ms, md) = (
        n.pd.reg_mr(src.region(), RW).unwrap(),
        n.pd.reg_mr(dst.region(), RW).unwrap(),
    );
    let sge = |b: &HostBuffer, k: u32| Sge {
        addr: b.addr(),
        length: len as u32,
        lkey: k,
    };
    let best = |op: SendOp, s: Sge| (0..reps).map(|_| run_one(&n, op, s)).min().unwrap_or_default();
    let w = best(
        SendOp::Write {
            remote_addr: addr,
            rkey,
        },
        sge(&src, ms.lkey()),
    );
    let r = best(
        SendOp::Read {
            remote_addr: addr,
            rkey,
        },
        sge(&dst, md.lkey()),
    );
    assert!(dst.to_vec() == src.to_vec(), "READ brought back other bytes");
    writeln!(to, "BYE").unwrap();
    child.wait().unwrap();

    let datagram = 12 + mtu.bytes() + 4;
    let ceiling = udp_ceiling(datagram, 1.0);
    let gbs = |d: Duration| len as f64 / d.as_secs_f64() / 1e9;
    println!(
        "soft RoCE between two processes, MTU {}, {mib} MiB per transfer, best of {reps}",
        mtu.bytes()
    );
    println!("  WRITE {:8.3} GB/s  ({:.1} ms)", gbs(w), w.as_secs_f64() * 1e3);
    println!("  READ  {:8.3} GB/s  ({:.1} ms)", gbs(r), r.as_secs_f64() * 1e3);
    println!("loopback UDP ceiling, {datagram}-byte datagrams, sendmmsg/recvmmsg, one thread each way:");
    println!("  UDP   {:8.3} GB/s", ceiling / 1e9);
    if let Some(c) = n._verbs.counters() {
        println!(
            "requester: {} datagrams out, {} retransmitted, {} timeouts, {} rewinds",
            c.tx_datagrams, c.retransmits, c.timeouts, c.rewinds
        );
    }
    let probe = vec![1u8; 1 << 20];
    let t = Instant::now();
    let mut x = 0;
    for _ in 0..64 {
        x ^= hipobj_softroce::wire::icrc::crc32(&probe);
    }
    let crc_rate = (64 << 20) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("ICRC (CRC-32 through crc32fast) on one core: {crc_rate:.2} GB/s ({x:x})");
    println!(
        "ratio   WRITE/UDP {:.2}   READ/UDP {:.2}",
        gbs(w) * 1e9 / ceiling,
        gbs(r) * 1e9 / ceiling
    );
}
