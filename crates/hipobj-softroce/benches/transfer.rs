//! Soft RoCE throughput between two processes at several loss rates, with
//! UDP GSO on and off, against loopback TCP between the same two processes
//! and the loopback UDP ceiling of this machine, all measured side by side
//! in one run and in the same way: each round moves the same bytes once
//! over UDP (4 KiB datagrams alone, and as GSO super-packets into a GRO
//! receiver), once over TCP each way, and once by WRITE and by READ on
//! every row, and the table reports the median of the rounds for each.
//!
//! TCP is timed as the RDMA operations are: "push" (beside WRITE) from the
//! parent's first byte written until the child, having read all `MIB` MiB
//! into its buffer, answers with one byte; "pull" (beside READ) from the
//! parent's one-byte request until it has read all of them.
//!
//! `cargo bench -p hipobj-softroce --bench transfer [-- MIB [ROUNDS [MTU]]]`
//! (64 MiB and 3 rounds by default; `cargo test --all-targets` runs it once
//! with 1 MiB and 1 round, to show it still works).
//!
//! The fault knobs of the soft NIC apply (`HIPOBJ_SOFTROCE_LOSS`, `_DUP`,
//! `_REORDER`, `_SEED`): with `HIPOBJ_SOFTROCE_LOSS` set, the table is that
//! loss rate beside lossless; unset, it is 0 %, 1 % and 10 %. Duplication and
//! reordering apply to every row but the lossless one. Both processes inject
//! the faults on everything they send (requests, responses and ACKs).
//! Each lossy row comes twice: with the packets that arrive after a loss
//! placed at once (the NIC's default), and with go-back-N alone, as IBA
//! describes and the kernel's rxe recovers (`placed no`), so the two are
//! compared in one run. `HIPOBJ_SOFTROCE_BUSY_POLL_US` applies to every
//! device of both processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, Mtu, QpAttr, QpAttrMask, QpInitAttr, QpState, QueuePair,
    SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_softroce::link::udp::{self, BATCH, GsoSender, RxBatch, Waker};
use hipobj_softroce::{FaultConfig, HostBuffer, SoftConfig, SoftVerbs};

const RW: AccessFlags = AccessFlags(1 | 2 | 4);

struct Node {
    _verbs: SoftVerbs,
    dev: Arc<dyn Device>,
    pd: Arc<dyn hipobj_platform::ProtectionDomain>,
    cq: Arc<dyn CompletionQueue>,
    qp: Box<dyn QueuePair>,
}

fn node(mtu: Mtu, faults: FaultConfig, gso: bool, place_ahead: bool) -> Node {
    let verbs = SoftVerbs::new(SoftConfig {
        mtu,
        faults,
        gso,
        place_ahead,
        busy_poll: busy_poll(),
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
    // The attributes hipObject itself uses: a local ACK timeout of
    // hipObject's own local ACK timeout and retry count (4.096 us x 2^14 =
    // 67 ms, 6 retries), so that the table shows what loss costs an
    // application, not a benchmark tuned around it.
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: mtu,
        dgid: gid,
        dest_qp_num: qpn,
        timeout: hipobj_platform::rc::ACK_TIMEOUT,
        retry_cnt: hipobj_platform::rc::RETRY_COUNT,
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

/// `HIPOBJ_SOFTROCE_BUSY_POLL_US`, for every device of both processes.
fn busy_poll() -> Duration {
    SoftConfig::from_env().expect("HIPOBJ_SOFTROCE_* knobs").busy_poll
}

/// A row: the faults, UDP GSO, and whether packets after a loss are placed
/// ahead (`SoftConfig::place_ahead`).
type Level = (FaultConfig, bool, bool);

/// The rows: lossless with UDP GSO off, then every loss rate with GSO on,
/// with the other fault knobs from the environment on the lossy rows; then
/// the lossy rows again with go-back-N alone (nothing placed ahead), as IBA
/// describes and the kernel's rxe recovers, beside them in the same run.
fn levels() -> Vec<Level> {
    let env = SoftConfig::from_env().expect("HIPOBJ_SOFTROCE_* knobs").faults;
    let losses = if std::env::var_os("HIPOBJ_SOFTROCE_LOSS").is_some() {
        vec![0.0, env.loss]
    } else {
        vec![0.0, 0.01, 0.1]
    };
    let mut rows = vec![(FaultConfig::NONE, false, true)];
    rows.extend(losses.into_iter().enumerate().map(|(i, loss)| {
        let faults = if loss == 0.0 {
            FaultConfig::NONE
        } else {
            FaultConfig {
                loss,
                seed: env.seed.wrapping_add(i as u64 + 1),
                ..env
            }
        };
        (faults, true, true)
    }));
    let gbn: Vec<Level> = rows
        .iter()
        .filter(|r| r.0.loss > 0.0)
        .map(|&(f, gso, _)| (f, gso, false))
        .collect();
    rows.extend(gbn);
    rows
}

/// The child's TCP side: one connection from the parent; `W` reads `len`
/// bytes into a buffer and answers one byte, `R` writes `len` bytes, `Q`
/// ends.
fn tcp_serve(listener: TcpListener, len: usize) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; len];
    let out: Vec<u8> = (0..len).map(|i| (i * 3) as u8).collect();
    let mut cmd = [0u8; 1];
    loop {
        s.read_exact(&mut cmd).unwrap();
        match cmd[0] {
            b'W' => {
                s.read_exact(&mut buf).unwrap();
                s.write_all(b"k").unwrap();
            }
            b'R' => s.write_all(&out).unwrap(),
            _ => return,
        }
    }
}

/// TCP push and pull of `data.len()` bytes to and from the child.
fn tcp_once(s: &mut TcpStream, data: &[u8], back: &mut [u8]) -> (Duration, Duration) {
    let t = Instant::now();
    s.write_all(b"W").unwrap();
    s.write_all(data).unwrap();
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).unwrap();
    let push = t.elapsed();
    let t = Instant::now();
    s.write_all(b"R").unwrap();
    s.read_exact(back).unwrap();
    (push, t.elapsed())
}

/// The child process: a TCP listener, and one device per row, each with a
/// registered buffer, all waiting for the parent.
fn peer(len: usize, mtu: Mtu) {
    let mut stdin = BufReader::new(std::io::stdin());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("TCP {}", listener.local_addr().unwrap().port());
    let tcp = std::thread::spawn(move || tcp_serve(listener, len));
    let mut keep = Vec::new();
    for (i, (faults, gso, place)) in levels().into_iter().enumerate() {
        // The child's fault stream differs from the parent's.
        let faults = FaultConfig {
            seed: faults.seed.wrapping_mul(31).wrapping_add(7),
            ..faults
        };
        let n = node(mtu, faults, gso, place);
        let buf = HostBuffer::new(len);
        let mr = n.pd.reg_mr(buf.region(), RW).unwrap();
        let ip = n.dev.query_gid(1, 0).unwrap().to_ipv4().unwrap();
        println!("PEER {i} {ip} {} {} {}", n.qp.qp_num(), mr.rkey(), buf.addr());
        let p = line(&mut stdin, "PARENT ");
        connect(
            &n,
            mtu,
            Gid::from_ipv4(p[0].parse().unwrap()),
            p[1].parse().unwrap(),
        );
        keep.push((n, buf, mr));
    }
    println!("READY");
    line(&mut stdin, "BYE");
    tcp.join().unwrap();
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
        n.cq.wait(Duration::from_secs(600)).unwrap();
        if n.cq.poll(&mut wc).unwrap() == 1 {
            break;
        }
    }
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    t.elapsed()
}

/// How long one receiver draining with recvmmsg takes to receive `len`
/// bytes of `size`-byte datagrams that one sender thread blasts at it with
/// sendmmsg (timed from the first datagram, as a transfer is timed from its
/// post; datagrams the kernel drops when the receiver falls behind are lost
/// to it, as they would be to the NIC).
fn udp_once(size: usize, len: usize, gso: bool) -> Duration {
    let rx_addr = SocketAddrV4::new(Ipv4Addr::new(127, 33, 0, 1), 0);
    let rx = udp::bind(rx_addr).unwrap();
    let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else {
        unreachable!()
    };
    let tx = udp::bind(SocketAddrV4::new(Ipv4Addr::new(127, 33, 0, 2), 0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        // Packets of one QP with consecutive PSNs, so that GSO takes them
        // in runs as it takes a WRITE's.
        let payloads: Vec<Vec<u8>> = (0..BATCH)
            .map(|i| {
                let mut p = vec![0xabu8; size];
                p[5..8].copy_from_slice(&[0, 0, 0x11]);
                p[9..12].copy_from_slice(&(i as u32).to_be_bytes()[1..]);
                p
            })
            .collect();
        let items: Vec<(&[u8], SocketAddrV4)> = payloads.iter().map(|p| (p.as_slice(), to)).collect();
        let mut gso = GsoSender::new(gso);
        while !s2.load(Ordering::Relaxed) {
            let _ = gso.send(&tx, &items);
        }
    });
    let waker = Waker::new().unwrap();
    let mut batch = RxBatch::default();
    let mut bytes = 0usize;
    let mut start = None;
    while bytes < len {
        let k = batch.recv(&rx).unwrap();
        if k == 0 {
            udp::wait(&rx, &waker, Some(Duration::from_millis(10))).unwrap();
            continue;
        }
        start.get_or_insert_with(Instant::now);
        bytes += (0..k).map(|i| batch.get(i).0.len()).sum::<usize>();
    }
    let el = start.map(|s| s.elapsed()).unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    el
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// CRC-32 (the ICRC's polynomial, through crc32fast) over 16 MiB of distinct
/// data in packet-sized pieces, each result kept, on one core.
fn crc_rate() -> f64 {
    let data: Vec<u8> = (0..16usize << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let t = Instant::now();
    let mut acc = 0u32;
    for chunk in std::hint::black_box(&data).chunks(4096) {
        acc = acc.rotate_left(1) ^ std::hint::black_box(hipobj_softroce::wire::icrc::crc32(chunk));
    }
    std::hint::black_box(acc);
    data.len() as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
    // without it, and then one small round shows that it still runs.
    let bench = std::env::args().any(|a| a == "--bench");
    let (mib_default, rounds_default) = if bench { (64, 3) } else { (1, 1) };
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(mib_default);
    let rounds: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(rounds_default)
        .max(1);
    let mtu = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .and_then(Mtu::from_bytes)
        .unwrap_or(Mtu::Mtu4096);
    let len = mib << 20;
    if std::env::var_os("SOFTROCE_BENCH_PEER").is_some() {
        return peer(len, mtu);
    }
    let levels = levels();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([mib.to_string(), rounds.to_string(), mtu.bytes().to_string()])
        .env("SOFTROCE_BENCH_PEER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let tcp_port: u16 = line(&mut from, "TCP ")[0].parse().unwrap();
    let mut pairs = Vec::new();
    for (faults, gso, place) in &levels {
        let p = line(&mut from, "PEER ");
        let (qpn, rkey, addr): (u32, u32, u64) = (
            p[2].parse().unwrap(),
            p[3].parse().unwrap(),
            p[4].parse().unwrap(),
        );
        let n = node(mtu, *faults, *gso, *place);
        connect(&n, mtu, Gid::from_ipv4(p[1].parse().unwrap()), qpn);
        let ip = n.dev.query_gid(1, 0).unwrap().to_ipv4().unwrap();
        writeln!(to, "PARENT {ip} {}", n.qp.qp_num()).unwrap();
        pairs.push((n, rkey, addr));
    }
    line(&mut from, "READY");
    let mut tcp = TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let tcp_data: Vec<u8> = (0..len).map(|i| (i * 5) as u8).collect();
    let mut tcp_back = vec![0u8; len];
    // Once untimed: the child's buffer and ours are touched and the
    // connection is past slow start, as the NICs' buffers are registered.
    tcp_once(&mut tcp, &tcp_data, &mut tcp_back);

    let src = HostBuffer::new(len);
    src.write(0, &(0..len).map(|i| (i * 7 + i / 4093) as u8).collect::<Vec<_>>());
    let dst = HostBuffer::new(len);
    let sge = |b: &HostBuffer, k: u32| Sge {
        addr: b.addr(),
        length: len as u32,
        lkey: k,
    };
    let mrs: Vec<_> = pairs
        .iter()
        .map(|(n, _, _)| {
            (
                n.pd.reg_mr(src.region(), RW).unwrap(),
                n.pd.reg_mr(dst.region(), RW).unwrap(),
            )
        })
        .collect();
    let keys: Vec<(u32, u32)> = mrs.iter().map(|(s, d)| (s.lkey(), d.lkey())).collect();
    let datagram = 12 + mtu.bytes() + 4;
    let mut udp_t = Vec::new();
    let mut gso_t = Vec::new();
    let (mut push_t, mut pull_t) = (Vec::new(), Vec::new());
    let mut w_t = vec![Vec::new(); levels.len()];
    let mut r_t = vec![Vec::new(); levels.len()];
    for _ in 0..rounds {
        udp_t.push(udp_once(datagram, len, false));
        gso_t.push(udp_once(datagram, len, true));
        let (push, pull) = tcp_once(&mut tcp, &tcp_data, &mut tcp_back);
        push_t.push(push);
        pull_t.push(pull);
        for (i, (n, rkey, addr)) in pairs.iter().enumerate() {
            let (ks, kd) = keys[i];
            w_t[i].push(run_one(
                n,
                SendOp::Write {
                    remote_addr: *addr,
                    rkey: *rkey,
                },
                sge(&src, ks),
            ));
            dst.write(0, &[0; 4096]);
            r_t[i].push(run_one(
                n,
                SendOp::Read {
                    remote_addr: *addr,
                    rkey: *rkey,
                },
                sge(&dst, kd),
            ));
            assert!(dst.to_vec() == src.to_vec(), "READ brought back other bytes");
        }
    }
    tcp.write_all(b"Q").unwrap();
    writeln!(to, "BYE").unwrap();
    child.wait().unwrap();

    let gbs = |d: Duration| len as f64 / d.as_secs_f64().max(1e-9) / 1e9;
    let udp = gbs(median(&mut udp_t));
    let udp_gso = gbs(median(&mut gso_t));
    let (push, pull) = (gbs(median(&mut push_t)), gbs(median(&mut pull_t)));
    println!(
        "soft RoCE between two processes, MTU {}, {mib} MiB per transfer, median of {rounds} rounds \
         (each round: the UDP ceilings, TCP each way, then WRITE and READ on every row), \
         workers busy-poll {} us",
        mtu.bytes(),
        busy_poll().as_micros()
    );
    println!(
        "loopback TCP between the two processes: push {push:.3} GB/s (beside WRITE), pull {pull:.3} GB/s (beside READ)"
    );
    println!(
        "loopback UDP ceiling, {datagram}-byte datagrams, one thread each way: {udp:.3} GB/s alone (sendmmsg/recvmmsg), \
         {udp_gso:.3} GB/s as GSO super-packets into a GRO receiver"
    );
    println!(
        "{:>6} {:>4} {:>6} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>8} {:>6}",
        "loss",
        "GSO",
        "placed",
        "WRITE GB/s",
        "READ GB/s",
        "WRITE/0%",
        "READ/0%",
        "WRITE/TCP",
        "READ/TCP",
        "WRITE/UDP",
        "READ/UDP",
        "retransmits",
        "timeouts",
        "rewinds",
        "rto"
    );
    // The lossless row with GSO is the reference of the loss rows.
    let (w0, r0) = (gbs(median(&mut w_t[1])), gbs(median(&mut r_t[1])));
    for (i, (n, _, _)) in pairs.iter().enumerate() {
        let (w, r) = (gbs(median(&mut w_t[i])), gbs(median(&mut r_t[i])));
        let c = n._verbs.counters().unwrap_or_default();
        let ceiling = if levels[i].1 { udp_gso } else { udp };
        println!(
            "{:>5.1}% {:>4} {:>6} {w:>10.3} {r:>10.3} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11} {:>9} {:>8} {:>6}",
            levels[i].0.loss * 100.0,
            if levels[i].1 { "on" } else { "off" },
            if levels[i].2 { "yes" } else { "no" },
            w / w0,
            r / r0,
            w / push,
            r / pull,
            w / ceiling,
            r / ceiling,
            c.retransmits,
            c.timeouts,
            c.rewinds,
            c.rto_rewinds
        );
    }
    println!("(WRITE/UDP and READ/UDP: against the UDP ceiling of the same GSO setting)");
    println!(
        "(placed: packets after a loss placed ahead, as this NIC does by default; no: dropped and sent again by go-back-N, as IBA and rxe do)"
    );
    println!(
        "(retransmits, local ACK timeouts, go-back-N rewinds, round-trip timer rewinds: this process's requester, all rounds)"
    );
    println!(
        "CRC-32 (the ICRC, crc32fast) over 16 MiB of distinct 4 KiB pieces, one core: {:.2} GB/s",
        crc_rate()
    );
}
