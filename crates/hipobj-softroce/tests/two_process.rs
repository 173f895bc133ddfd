//! Two OS processes, real bytes: this test binary runs itself again as the
//! peer (`HIPOBJ_SOFTROCE_TEST_PEER=1`). Each process opens `softroce0` on an
//! address derived from its own pid; they swap GID, QPN, rkey and address
//! over the child's stdin/stdout, then the parent WRITEs into the child's
//! registered memory and READs it back, and the child checks its bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Node, RW, attrs, pattern, sge, wait};
use hipobj_platform::{Gid, Mtu, SendOp, SendWr, WcStatus};
use hipobj_softroce::wire::icrc::crc32;
use hipobj_softroce::{HostBuffer, SoftConfig};

const PEER_ENV: &str = "HIPOBJ_SOFTROCE_TEST_PEER";
const LEN: usize = 8 << 20;

fn line(r: &mut impl BufRead, prefix: &str) -> Vec<String> {
    let mut s = String::new();
    loop {
        s.clear();
        assert!(r.read_line(&mut s).unwrap() > 0, "peer closed before {prefix}");
        // The test harness may print "test peer_process ... " first.
        if let Some(at) = s.find(prefix) {
            return s[at + prefix.len()..]
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
    }
}

/// The child's side. Does nothing unless run as the peer.
#[test]
fn peer_process() {
    if std::env::var_os(PEER_ENV).is_none() {
        return;
    }
    let node = Node::new(SoftConfig::from_env().unwrap());
    let buf = HostBuffer::new(LEN);
    let mr = node.reg(&buf, RW);
    let ip = node.gid().to_ipv4().unwrap();
    println!(
        "PEER {ip} {} {} {} {LEN}",
        node.qp.qp_num(),
        mr.rkey(),
        buf.addr()
    );
    let mut stdin = BufReader::new(std::io::stdin());
    let parent = line(&mut stdin, "PARENT ");
    let gid = Gid::from_ipv4(parent[0].parse::<Ipv4Addr>().unwrap());
    let qpn: u32 = parent[1].parse().unwrap();
    let attr = attrs(Mtu::Mtu4096);
    node.init(&attr);
    node.connect(&attr, gid, qpn, 0x300, 0x400);
    println!("READY");
    let want: u32 = line(&mut stdin, "CHECK ")[0].parse().unwrap();
    let got = crc32(&buf.to_vec());
    println!("VERDICT {}", if got == want { "GOOD" } else { "DIFFERENT" });
    // No completion at this responder for one-sided operations.
    let mut wc = [common::blank(); 4];
    println!(
        "COMPLETIONS {}",
        node.scq.poll(&mut wc).unwrap() + node.rcq.poll(&mut wc).unwrap()
    );
    line(&mut stdin, "BYE");
}

#[test]
fn write_and_read_across_two_processes() {
    if std::env::var_os(PEER_ENV).is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, "1")
        .env_remove("HIPOBJ_SOFTROCE_ADDR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let peer = line(&mut from_child, "PEER ");
    let peer_gid = Gid::from_ipv4(peer[0].parse::<Ipv4Addr>().unwrap());
    let (qpn, rkey, addr, len): (u32, u32, u64, usize) = (
        peer[1].parse().unwrap(),
        peer[2].parse().unwrap(),
        peer[3].parse().unwrap(),
        peer[4].parse().unwrap(),
    );
    let node = Node::new(SoftConfig::default());
    assert_ne!(node.gid(), peer_gid, "each process has its own address");
    let attr = attrs(Mtu::Mtu4096);
    node.init(&attr);
    node.connect(&attr, peer_gid, qpn, 0x400, 0x300);
    let ip = node.gid().to_ipv4().unwrap();
    writeln!(to_child, "PARENT {ip} {}", node.qp.qp_num()).unwrap();
    line(&mut from_child, "READY");

    let data = pattern(len, 0x5a);
    let src = HostBuffer::from_bytes(&data);
    let back = HostBuffer::new(len);
    let (ms, mb) = (node.reg(&src, RW), node.reg(&back, RW));
    let write = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: addr,
            rkey,
        },
        sg_list: &[sge(&src, &*ms)],
        signaled: true,
    };
    node.qp.post_send(&write).unwrap();
    let read = SendWr {
        wr_id: 2,
        op: SendOp::Read {
            remote_addr: addr,
            rkey,
        },
        sg_list: &[sge(&back, &*mb)],
        signaled: true,
    };
    node.qp.post_send(&read).unwrap();
    let wcs = wait(&*node.scq, 2, Duration::from_secs(60));
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert!(back.to_vec() == data, "READ brought back other bytes");
    writeln!(to_child, "CHECK {}", crc32(&data)).unwrap();
    assert_eq!(
        line(&mut from_child, "VERDICT "),
        vec!["GOOD".to_string()],
        "the child's memory holds the bytes written"
    );
    assert_eq!(line(&mut from_child, "COMPLETIONS "), vec!["0".to_string()]);
    writeln!(to_child, "BYE").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "peer exited with {status}");
}
