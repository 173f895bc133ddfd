//! The soft NIC against the Linux kernel's rxe, an RC implementation it did
//! not write. Ignored by default: `scripts/rxe-interop-test.sh` runs it in
//! the rxe VM, where the host's root namespace has `rxe1` on one end of a
//! veth pair (10.77.0.1) and a network namespace `soft` holds the other end
//! (10.77.0.2), where the soft NIC stands on its raw link.
//!
//! `soft_nic_and_rxe_interoperate` plays the rxe side and starts this same
//! binary in the `soft` namespace (`ip netns exec soft ... soft_side`) for
//! the soft side; the two exchange QP numbers, addresses and keys over the
//! child's stdin and stdout. Then each side in turn posts an RDMA WRITE, an
//! RDMA READ, a SEND and a WRITE with immediate to the other; every
//! completion and every byte is checked on both ends. Each end verifies the
//! other's ICRC: rxe drops a packet whose ICRC is wrong, and the raw link
//! checks rxe's against the headers that arrived. The script runs it a
//! second time with netem dropping 5 % of the packets each way on the veth:
//! the soft NIC places what follows a loss and asks rxe again for the gaps,
//! rxe recovers by go-back-N, and every byte must still arrive. The soft
//! NIC's own fault knobs (`HIPOBJ_SOFTROCE_LOSS`, ...) apply too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj_platform::{
    AccessFlags, CompletionQueue, Device, Gid, MemoryRegion, Mtu, ProtectionDomain, QpAttr, QpAttrMask,
    QpInitAttr, QpState, QueuePair, RecvWr, SendOp, SendWr, Sge, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use hipobj_softroce::{AddrChoice, HostBuffer, LinkKind, SoftConfig, SoftVerbs};

const LEN: usize = 64 << 10;
const RXE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const SOFT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const ALL: AccessFlags = AccessFlags(1 | 2 | 4);

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(9) as u8 ^ seed)
        .collect()
}

/// One end: a device, a QP, and five buffers.
struct End {
    _dev: Arc<dyn Device>,
    _pd: Arc<dyn ProtectionDomain>,
    scq: Arc<dyn CompletionQueue>,
    rcq: Arc<dyn CompletionQueue>,
    qp: Box<dyn QueuePair>,
    /// WRITE target, WRITE-with-immediate target, source (of what this end
    /// sends, and of the peer's READ), READ target, SEND target.
    bufs: [(HostBuffer, Box<dyn MemoryRegion>); 5],
}

const TGT: usize = 0;
const IMM_TGT: usize = 1;
const SRC: usize = 2;
const BACK: usize = 3;
const RECV: usize = 4;

/// What one end tells the other.
#[derive(Debug, Clone, Copy)]
struct Card {
    qpn: u32,
    /// (address, rkey) of TGT, IMM_TGT and SRC.
    mrs: [(u64, u32); 3],
}

impl Card {
    fn line(&self, who: &str) -> String {
        let m = self.mrs;
        format!(
            "@@{who} {} {} {} {} {} {} {}",
            self.qpn, m[0].0, m[0].1, m[1].0, m[1].1, m[2].0, m[2].1
        )
    }

    fn parse(line: &str) -> Card {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(v.len(), 7, "{line}");
        Card {
            qpn: v[0] as u32,
            mrs: [(v[1], v[2] as u32), (v[3], v[4] as u32), (v[5], v[6] as u32)],
        }
    }
}

impl End {
    fn new(dev: Arc<dyn Device>, seed: u8) -> End {
        let pd = dev.alloc_pd().unwrap();
        let scq = dev.create_cq(64).unwrap();
        let rcq = dev.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: scq.clone(),
                recv_cq: rcq.clone(),
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                sq_sig_all: false,
            })
            .unwrap();
        let bufs = [0, 1, 2, 3, 4].map(|i| {
            let b = if i == SRC {
                HostBuffer::from_bytes(&pattern(seed))
            } else {
                HostBuffer::new(LEN)
            };
            let mr = pd.reg_mr(b.region(), ALL).unwrap();
            (b, mr)
        });
        End {
            _dev: dev,
            _pd: pd,
            scq,
            rcq,
            qp,
            bufs,
        }
    }

    fn sge(&self, i: usize) -> Sge {
        Sge {
            addr: self.bufs[i].0.addr(),
            length: LEN as u32,
            lkey: self.bufs[i].1.lkey(),
        }
    }

    fn card(&self) -> Card {
        let m = |i: usize| (self.bufs[i].1.addr(), self.bufs[i].1.rkey());
        Card {
            qpn: self.qp.qp_num(),
            mrs: [m(TGT), m(IMM_TGT), m(SRC)],
        }
    }

    fn connect(&self, peer: &Card, dgid: Gid, sgid_index: u8, mtu: Mtu) {
        use QpAttrMask as M;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            port_num: 1,
            ..QpAttr::default()
        };
        self.qp
            .modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
            .unwrap();
        // Receives for the peer's SEND and WRITE with immediate (from INIT on).
        for wr_id in [100, 101] {
            self.qp
                .post_recv(&RecvWr {
                    wr_id,
                    sg_list: &[self.sge(RECV)],
                })
                .unwrap();
        }
        a.qp_state = QpState::Rtr;
        a.path_mtu = mtu;
        a.dest_qp_num = peer.qpn;
        a.rq_psn = 0x1000;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.dgid = dgid;
        a.sgid_index = sgid_index;
        self.qp
            .modify(
                &a,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            )
            .unwrap();
        a.qp_state = QpState::Rts;
        a.sq_psn = 0x1000;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        self.qp
            .modify(
                &a,
                M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
            )
            .unwrap();
    }

    /// Posts WRITE, READ, SEND and WRITE with immediate to `peer` and checks
    /// this end's completions and the READ's bytes.
    fn drive(&self, peer: &Card, peer_seed: u8, imm: u32, who: &str) {
        let ops = [
            SendOp::Write {
                remote_addr: peer.mrs[0].0,
                rkey: peer.mrs[0].1,
            },
            SendOp::Read {
                remote_addr: peer.mrs[2].0,
                rkey: peer.mrs[2].1,
            },
            SendOp::Send,
            SendOp::WriteWithImm {
                remote_addr: peer.mrs[1].0,
                rkey: peer.mrs[1].1,
                imm,
            },
        ];
        for (k, op) in ops.into_iter().enumerate() {
            let sg = if matches!(op, SendOp::Read { .. }) {
                self.sge(BACK)
            } else {
                self.sge(SRC)
            };
            self.qp
                .post_send(&SendWr {
                    wr_id: k as u64 + 1,
                    op,
                    sg_list: &[sg],
                    signaled: true,
                })
                .unwrap();
        }
        let wcs = completions(&*self.scq, 4, who);
        let got: Vec<(u64, WcStatus, WcOpcode)> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
        assert_eq!(
            got,
            vec![
                (1, WcStatus::Success, WcOpcode::RdmaWrite),
                (2, WcStatus::Success, WcOpcode::RdmaRead),
                (3, WcStatus::Success, WcOpcode::Send),
                (4, WcStatus::Success, WcOpcode::RdmaWrite),
            ],
            "{who}: requester completions"
        );
        assert!(
            self.bufs[BACK].0.to_vec() == pattern(peer_seed),
            "{who}: READ bytes"
        );
        eprintln!("{who}: WRITE, READ ({LEN} bytes checked), SEND, WRITE with immediate completed");
    }

    /// Checks what the peer's `drive` left here.
    fn received(&self, peer_seed: u8, imm: u32, who: &str) {
        let wcs = completions(&*self.rcq, 2, who);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
            (100, WcStatus::Success, WcOpcode::Recv, LEN as u32),
            "{who}: SEND completion"
        );
        assert_eq!(
            (wcs[1].wr_id, wcs[1].status, wcs[1].opcode, wcs[1].imm_data),
            (101, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(imm)),
            "{who}: WRITE with immediate completion"
        );
        let want = pattern(peer_seed);
        for (i, what) in [(TGT, "WRITE"), (IMM_TGT, "WRITE with immediate"), (RECV, "SEND")] {
            assert!(self.bufs[i].0.to_vec() == want, "{who}: {what} bytes");
        }
        eprintln!("{who}: received WRITE, SEND and WRITE with immediate ({LEN} bytes each checked)");
    }
}

fn completions(cq: &dyn CompletionQueue, n: usize, who: &str) -> Vec<WorkCompletion> {
    let end = Instant::now() + Duration::from_secs(60);
    let blank = WorkCompletion {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    };
    let mut out = Vec::new();
    let mut buf = [blank; 8];
    while out.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{who}: {} of {n} completions in 60 s: {out:?}",
            out.len()
        );
        cq.wait(left.min(Duration::from_millis(100))).unwrap();
        let k = cq.poll(&mut buf).unwrap();
        out.extend_from_slice(&buf[..k]);
    }
    out
}

const SOFT_SEED: u8 = 0x5a;
const RXE_SEED: u8 = 0xa5;
const SOFT_IMM: u32 = 0x50f7_0001;
const RXE_IMM: u32 = 0x0e8e_0002;

/// The soft side, started by `soft_nic_and_rxe_interoperate` in the `soft`
/// namespace; does nothing unless HIPOBJ_INTEROP_ROLE=soft.
#[test]
#[ignore = "the soft half of soft_nic_and_rxe_interoperate"]
fn soft_side() {
    if std::env::var("HIPOBJ_INTEROP_ROLE").as_deref() != Ok("soft") {
        return;
    }
    // The fault knobs (HIPOBJ_SOFTROCE_LOSS, ...) apply to what the soft NIC
    // sends: its WRITE, SEND and READ requests to rxe, and its ACKs and
    // READ responses to rxe's requests.
    let faults = SoftConfig::from_env().expect("HIPOBJ_SOFTROCE_* knobs").faults;
    let verbs = SoftVerbs::new(SoftConfig {
        addr: AddrChoice::Fixed(SOFT_IP),
        link: LinkKind::Raw,
        mtu: Mtu::Mtu1024,
        faults,
        pcap: std::env::var_os("HIPOBJ_INTEROP_PCAP").map(Into::into),
        ..SoftConfig::default()
    });
    let dev = verbs.open_device(hipobj_softroce::DEFAULT_NAME).unwrap();
    let end = End::new(dev, SOFT_SEED);
    println!("{}", end.card().line("SOFT"));
    let mut lines = std::io::stdin().lock().lines();
    let mut next = || lines.next().expect("a line from the rxe side").unwrap();
    let rxe = Card::parse(&next());
    end.connect(&rxe, Gid::from_ipv4(RXE_IP), 0, Mtu::Mtu1024);
    println!("@@READY");
    end.drive(&rxe, RXE_SEED, SOFT_IMM, "soft -> rxe");
    println!("@@SOFT-DONE");
    assert_eq!(next(), "@@RXE-DONE");
    end.received(RXE_SEED, RXE_IMM, "soft, from rxe");
    let c = verbs.counters().unwrap();
    eprintln!("soft NIC counters: {c:?}");
    assert_eq!(c.malformed(), 0, "every packet from rxe parsed and verified");
    println!("@@OK");
}

#[test]
#[ignore = "needs rxe1 and the soft namespace: run by scripts/rxe-interop-test.sh in the rxe VM"]
fn soft_nic_and_rxe_interoperate() {
    use hipobj_ibverbs::{IbVerbs, SysfsTopology};
    let name = std::env::var("HIPOBJ_RXE_DEVICE").unwrap_or_else(|_| "rxe1".into());
    let verbs = IbVerbs::load().expect("libibverbs.so.1");
    let (dev, sel) = hipobj_platform::selection::select(&verbs, &SysfsTopology::system(), None, Some(&name))
        .expect("rxe selection");
    eprintln!("rxe side: {sel}");
    assert_eq!(sel.gid, Gid::from_ipv4(RXE_IP), "rxe1's RoCE v2 GID");
    let end = End::new(dev, RXE_SEED);

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", "soft"])
        .arg(&exe)
        .args([
            "--ignored",
            "--exact",
            "soft_side",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HIPOBJ_INTEROP_ROLE", "soft")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("ip netns exec soft");
    let mut to_soft = child.stdin.take().unwrap();
    let mut from_soft = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut expect = |prefix: &str| -> String {
        loop {
            let l = from_soft
                .next()
                .unwrap_or_else(|| panic!("the soft side ended before {prefix}"))
                .unwrap();
            // libtest prints "test soft_side ... " without a newline, so a
            // marker may follow it on the same line.
            if let Some(at) = l.find(prefix) {
                return l[at..].to_string();
            }
            if !l.trim().is_empty() {
                eprintln!("soft side: {l}");
            }
        }
    };
    let soft = Card::parse(&expect("@@SOFT "));
    end.connect(
        &soft,
        Gid::from_ipv4(SOFT_IP),
        u8::try_from(sel.gid_index).unwrap(),
        sel.mtu.min(Mtu::Mtu1024),
    );
    writeln!(to_soft, "{}", end.card().line("RXE")).unwrap();
    expect("@@READY");
    expect("@@SOFT-DONE");
    end.received(SOFT_SEED, SOFT_IMM, "rxe, from the soft NIC");
    end.drive(&soft, SOFT_SEED, RXE_IMM, "rxe -> soft");
    writeln!(to_soft, "@@RXE-DONE").unwrap();
    expect("@@OK");
    assert!(child.wait().unwrap().success(), "the soft side failed");
    eprintln!("INTEROP PASSED: soft NIC <-> rxe, both directions, WRITE, READ, SEND, WRITE with immediate");
}
