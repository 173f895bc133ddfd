//! Both links over sockets, with batches: `recvmmsg` and
//! `sendmmsg` move up to [`BATCH`] datagrams per call, `ppoll` waits on the
//! socket and an `eventfd` with nanosecond timeouts. The UDP link also
//! sends runs of equal-size packets as one UDP GSO super-packet of up to
//! 64 KiB ([`GsoSender`]) and receives with UDP GRO, so one datagram of a
//! receive may hold many packets ([`RxBatch::segment_size`]).
//!
//! * the UDP link: a UDP socket at the device's address, port 4791
//!   ([`bind`]);
//! * the raw link: a raw IPv4 socket that sends and receives whole
//!   IPv4/UDP/BTH packets with the headers the NIC built or received
//!   ([`RawSocket`]; needs CAP_NET_RAW).
//!
//! The syscalls themselves, and every pointer handed to the kernel, are in
//! the private `link::sys`; this module holds no unsafe code.

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use super::sys::{self, Datagram, RecvMeta, UDP_GRO};
use crate::wire::PseudoHeader;
use crate::wire::icrc::{IP_UDP_LEN, SegmentDeltas};

/// Datagrams per syscall.
pub const BATCH: usize = 64;

/// Bytes per receive slot: one more than the largest packet rounded up, so
/// that a datagram longer than any packet is seen as too long.
pub const SLOT: usize = (IP_UDP_LEN + crate::wire::MAX_PACKET + 8).next_multiple_of(64);

/// Bytes per receive slot: the largest IPv4 packet, so that a GRO batch
/// (UDP link) or a GSO super-packet seen whole (raw link on loopback)
/// always fits.
pub const RX_SLOT: usize = 65536;

/// Most segments the kernel takes in one GSO send (`UDP_MAX_SEGMENTS`).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// Most UDP payload bytes of one GSO send: one IPv4 datagram's worth.
pub const GSO_MAX_BYTES: usize = 65535 - IP_UDP_LEN;

/// Socket buffer size asked for: enough for several windows of packets.
const SOCKET_BUFFER: i32 = 32 << 20;

/// Asks for [`SOCKET_BUFFER`] bytes of buffer: the `force` option (which
/// needs CAP_NET_ADMIN) first, else the `plain` one.
fn set_buffer(fd: BorrowedFd<'_>, force: libc::c_int, plain: libc::c_int) {
    if sys::set_int(fd, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
        // Without CAP_NET_ADMIN the kernel caps the plain option at
        // net.core.{r,w}mem_max; that is the best available.
        let _ = sys::set_int(fd, libc::SOL_SOCKET, plain, SOCKET_BUFFER);
    }
}

/// Makes the kernel send every datagram of `fd` with don't-fragment set and
/// IP identification 0, the header the ICRC is computed over
/// ([`crate::wire::PseudoHeader::ip_udp_header`]).
///
/// Linux numbers the datagrams of a socket with `IP_PMTUDISC_WANT` (the
/// default) from a hash of the addresses, because it may still fragment
/// them; with `IP_PMTUDISC_DO` it never fragments (a datagram over the path
/// MTU fails with EMSGSIZE), sets DF, and gives an unconnected socket's DF
/// datagrams identification 0 (`ip_select_ident_segs`). A *connected*
/// socket would get a per-socket counter instead, so the link never
/// connects its socket. `scripts/softroce-wire-check.sh` checks the result
/// on a capture of the loopback wire with scapy.
pub fn set_dont_fragment(fd: BorrowedFd<'_>) -> io::Result<()> {
    sys::set_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
}

/// Binds a UDP socket at `addr` with large buffers, don't-fragment and IP
/// identification 0 ([`set_dont_fragment`]). Fails with the OS error
/// (EADDRINUSE when another device holds the address).
pub fn bind(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(addr)?;
    let fd = sock.as_fd();
    set_dont_fragment(fd)?;
    // A kernel without UDP GRO (before 5.0) hands every datagram alone.
    let _ = sys::set_int(fd, libc::SOL_UDP, UDP_GRO, 1);
    set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    Ok(sock)
}

/// The raw link's sockets: a raw IPv4 socket for protocol UDP with
/// `IP_HDRINCL`, bound to the device's address, which sends whole packets
/// with the IPv4 and UDP headers the NIC built (the kernel fills in only
/// the IP checksum, and keeps identification 0 because DF is set) and
/// receives every UDP packet to the address with its headers as they
/// arrived; and a UDP socket on port 4791 of the address that receives
/// nothing (a filter drops every datagram) but holds the port, so that the
/// kernel neither answers RoCE packets with ICMP port unreachable nor lets
/// another device take the address.
#[derive(Debug)]
pub struct RawSocket {
    raw: OwnedFd,
    local: SocketAddrV4,
    _port: UdpSocket,
}

impl RawSocket {
    /// Opens the raw link at `local` (UDP port 4791 in practice). Fails
    /// with EPERM without CAP_NET_RAW, EADDRINUSE when the address and port
    /// are taken, EADDRNOTAVAIL when no interface has the address.
    pub fn open(local: SocketAddrV4) -> io::Result<Self> {
        let port = UdpSocket::bind(local)?;
        sys::attach_drop_all_filter(port.as_fd())?;
        let raw = sys::raw_udp_socket()?;
        sys::set_int(raw.as_fd(), libc::IPPROTO_IP, libc::IP_HDRINCL, 1)?;
        sys::bind(raw.as_fd(), SocketAddrV4::new(*local.ip(), 0))?;
        set_buffer(raw.as_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        set_buffer(raw.as_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        Ok(Self {
            raw,
            local,
            _port: port,
        })
    }

    /// The device's address and port.
    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    /// Sends each datagram (a RoCE packet from the BTH on) behind the IPv4
    /// and UDP headers the ICRC was computed over
    /// ([`PseudoHeader::ip_udp_header`] from this address to the item's).
    pub fn send(&self, items: &[(&[u8], SocketAddrV4)]) -> io::Result<()> {
        let local = self.local;
        let make =
            move |data: &[u8], dst: SocketAddrV4| PseudoHeader { src: local, dst }.ip_udp_header(data.len());
        send_batches(self.raw.as_fd(), items, Some(&make))
    }

    /// Sends whole IPv4 packets exactly as given (headers included; the
    /// kernel fills in the IP checksum, and an identification of 0 when DF
    /// is clear). For tests that play another sender.
    pub fn send_ip(&self, packets: &[(&[u8], Ipv4Addr)]) -> io::Result<()> {
        let items: Vec<(&[u8], SocketAddrV4)> = packets
            .iter()
            .map(|(p, ip)| (*p, SocketAddrV4::new(*ip, 0)))
            .collect();
        send_batches(self.raw.as_fd(), &items, None)
    }
}

impl AsRawFd for RawSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.raw.as_raw_fd()
    }
}

impl AsFd for RawSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.raw.as_fd()
    }
}

/// Receive slots for one batch.
#[derive(Debug)]
pub struct RxBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    segs: [usize; BATCH],
    from: [SocketAddrV4; BATCH],
}

impl Default for RxBatch {
    fn default() -> Self {
        Self {
            // Zeroed on demand by the allocator: pages the kernel never
            // writes into are never touched.
            buf: vec![0; RX_SLOT * BATCH],
            lens: [0; BATCH],
            segs: [0; BATCH],
            from: [SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); BATCH],
        }
    }
}

impl RxBatch {
    /// Datagram `i` of the last receive and its sender. A GRO batch holds
    /// several packets ([`RxBatch::segment_size`]).
    pub fn get(&self, i: usize) -> (&[u8], SocketAddrV4) {
        let start = i * RX_SLOT;
        (&self.buf[start..start + self.lens[i].min(RX_SLOT)], self.from[i])
    }

    /// The segment size of datagram `i` when the kernel coalesced several
    /// equal-size datagrams of one sender into it (UDP GRO): the packets
    /// are `get(i).0.chunks(size)`, the last one possibly shorter. `None`
    /// for a datagram received alone.
    pub fn segment_size(&self, i: usize) -> Option<usize> {
        Some(self.segs[i]).filter(|&s| s > 0)
    }

    /// Receives up to [`BATCH`] datagrams without blocking; returns how many
    /// (0 when none is waiting).
    pub fn recv(&mut self, sock: &impl AsFd) -> io::Result<usize> {
        let none = RecvMeta {
            len: 0,
            truncated: false,
            from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            gro_segment: 0,
        };
        let mut meta = [none; BATCH];
        let n = match sys::recv_mmsg(sock.as_fd(), &mut self.buf, RX_SLOT, &mut meta) {
            Ok(n) => n,
            Err(e) => {
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                    _ => Err(e),
                };
            }
        };
        for (i, m) in meta.iter().enumerate().take(n) {
            self.lens[i] = if m.truncated { RX_SLOT } else { m.len };
            self.from[i] = m.from;
            self.segs[i] = m.gro_segment;
        }
        Ok(n)
    }
}

/// The destination QP and PSN of a RoCE packet (BTH bytes 5..8 and 9..12),
/// `None` for anything shorter than a BTH.
fn qp_psn(data: &[u8]) -> Option<(u32, u32)> {
    let b = data.get(..crate::wire::bth::HEADER_LEN)?;
    Some((
        u32::from_be_bytes([0, b[5], b[6], b[7]]),
        u32::from_be_bytes([0, b[9], b[10], b[11]]),
    ))
}

/// Splits `items` into the runs one UDP GSO send can carry: consecutive
/// packets of one QP (same address, same destination QP, each PSN the one
/// after the last), all of the first one's size except the last, which may
/// be shorter, at most [`GSO_MAX_SEGMENTS`] of them and [`GSO_MAX_BYTES`]
/// in all. Everything else (an ACK between data packets, another peer or
/// QP, a longer packet) starts a run of its own; a run of one is sent as a
/// plain datagram.
///
/// Keeping a run to one QP's consecutive PSNs makes a super-packet seen
/// whole (by a raw socket, or in a capture of loopback) cut apart again
/// without knowing the segment size: the second packet starts where a BTH
/// to the same QP with the next PSN begins and the first one's ICRC
/// verifies ([`crate::wire::icrc::gso_segment_size`]).
pub fn gso_runs(items: &[(&[u8], SocketAddrV4)]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut at = 0;
    while at < items.len() {
        let (first, dst) = items[at];
        let size = first.len();
        let mut end = at + 1;
        let mut bytes = size;
        let mut last = qp_psn(first);
        while let Some((qp, psn)) = last {
            let Some(&(d, a)) = items.get(end) else { break };
            let next = qp_psn(d);
            if end - at >= GSO_MAX_SEGMENTS
                || a != dst
                || d.len() > size
                || bytes + d.len() > GSO_MAX_BYTES
                || next != Some((qp, crate::wire::psn::add(psn, 1)))
            {
                break;
            }
            bytes += d.len();
            end += 1;
            last = next;
            if d.len() < size {
                break; // a shorter one ends the run
            }
        }
        runs.push(at..end);
        at = end;
    }
    runs
}

/// `items` with each QP's packets together: a stable sort by address and
/// destination QP, so that every QP's packets keep their order (all RC
/// orders are per QP) while the packets of QPs that took turns at the
/// engine line up into runs GSO can carry.
pub fn group_by_qp<'a>(items: &[(&'a [u8], SocketAddrV4)]) -> Vec<(&'a [u8], SocketAddrV4)> {
    let mut v = items.to_vec();
    v.sort_by_key(|(d, a)| (u32::from(*a.ip()), a.port(), qp_psn(d).map(|q| q.0)));
    v
}

/// The UDP link's sender: runs of equal-size packets go out as UDP GSO
/// super-packets ([`gso_runs`]), the rest as before.
///
/// The engine seals every packet under IP identification 0, the header the
/// kernel gives a datagram of an unconnected DF socket. In a GSO send the
/// kernel gives the super-packet that identification and numbers the
/// segments it cuts from it 0, 1, 2, … (`inet_gso_segment`), so the ICRC of
/// segment `k` is rewritten for identification `k` on its way out (an iovec
/// of its own per ICRC, [`SegmentDeltas`]); the packet's bytes are neither
/// copied nor changed.
#[derive(Debug)]
pub struct GsoSender {
    deltas: SegmentDeltas,
    enabled: bool,
}

impl GsoSender {
    /// A sender that uses GSO when `enabled`.
    pub fn new(enabled: bool) -> Self {
        Self {
            deltas: SegmentDeltas::default(),
            enabled,
        }
    }

    /// Whether GSO is (still) in use: a kernel that refuses a GSO send
    /// (no UDP_SEGMENT, or no checksum offload on the route) turns it off
    /// for good, and that send goes out packet by packet.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Sends `items` from `sock`, as [`send`] does, with each QP's packets
    /// together ([`group_by_qp`]).
    pub fn send(&mut self, sock: &UdpSocket, items: &[(&[u8], SocketAddrV4)]) -> io::Result<()> {
        if !self.enabled {
            return send(sock, items);
        }
        let grouped = group_by_qp(items);
        let items = grouped.as_slice();
        let runs = gso_runs(items);
        // Each datagram goes out as two pieces: its bytes up to the ICRC,
        // and the ICRC for the identification its segment will carry (its
        // own for a datagram sent alone or segment 0).
        let mut icrcs = vec![[0u8; 4]; items.len()];
        for run in &runs {
            for (k, i) in run.clone().enumerate() {
                icrcs[i] = self.deltas.icrc_for(k as u16, items[i].0);
            }
        }
        let mut pieces: Vec<IoSlice<'_>> = Vec::with_capacity(2 * items.len());
        for (i, (data, _)) in items.iter().enumerate() {
            let body = if data.len() < 4 {
                data.len()
            } else {
                data.len() - 4
            };
            pieces.push(IoSlice::new(&data[..body]));
            pieces.push(IoSlice::new(&icrcs[i][..data.len() - body]));
        }
        let msgs: Vec<Datagram<'_>> = runs
            .iter()
            .map(|run| Datagram {
                dst: items[run.start].1,
                pieces: &pieces[2 * run.start..2 * run.end],
                gso_segment: (run.len() > 1).then(|| items[run.start].0.len() as u16),
            })
            .collect();
        let mut at = 0;
        while at < msgs.len() {
            let count = (msgs.len() - at).min(1024);
            let e = match sys::send_mmsg(sock.as_fd(), &msgs[at..at + count]) {
                Ok(n) => {
                    at += n.max(1);
                    continue;
                }
                Err(e) => e,
            };
            let code = e.raw_os_error().unwrap_or(0);
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let run = runs[at].clone();
            if run.len() > 1 && [libc::EIO, libc::EINVAL, libc::ENOPROTOOPT, libc::EOPNOTSUPP].contains(&code)
            {
                // The kernel takes no GSO here: this run goes out packet
                // by packet under the identification-0 ICRCs the engine
                // sealed, and so does everything after.
                self.enabled = false;
                send(sock, &items[run])?;
                at += 1;
                send(sock, &items[runs.get(at).map_or(items.len(), |r| r.start)..])?;
                return Ok(());
            }
            if DROPPABLE.contains(&code) {
                at += 1; // drop the run, as a NIC drops on a full wire
            } else {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Send errors that drop the datagram and go on with the rest.
const DROPPABLE: [i32; 6] = [
    libc::EAGAIN,
    libc::ENOBUFS,
    libc::ECONNREFUSED,
    libc::EHOSTUNREACH,
    libc::ENETUNREACH,
    // Longer than the path MTU (DF is set): a port MTU above the
    // interface's, which RoCE never fragments.
    libc::EMSGSIZE,
];

/// Sends `items` with as few `sendmmsg` calls as it takes. Datagrams the
/// kernel refuses (a full socket buffer, an unreachable address) are
/// dropped, as a NIC drops on a full wire; the RC layer retransmits.
pub fn send(sock: &UdpSocket, items: &[(&[u8], SocketAddrV4)]) -> io::Result<()> {
    send_batches(sock.as_fd(), items, None)
}

/// Makes the IPv4 and UDP headers of a datagram to an address.
type HeaderFn<'a> = dyn Fn(&[u8], SocketAddrV4) -> [u8; IP_UDP_LEN] + 'a;

/// Sends `items`, each behind the header `headers(i)` makes when given
/// (the raw link: IPv4 and UDP headers in front of the datagram).
fn send_batches(
    fd: BorrowedFd<'_>,
    items: &[(&[u8], SocketAddrV4)],
    headers: Option<&HeaderFn<'_>>,
) -> io::Result<()> {
    let mut at = 0;
    while at < items.len() {
        let chunk = &items[at..items.len().min(at + BATCH)];
        let heads: Vec<[u8; IP_UDP_LEN]> = chunk
            .iter()
            .map(|(data, dst)| headers.map_or([0; IP_UDP_LEN], |make| make(data, *dst)))
            .collect();
        let pieces: Vec<[IoSlice<'_>; 2]> = chunk
            .iter()
            .zip(&heads)
            .map(|((data, _), head)| [IoSlice::new(head), IoSlice::new(data)])
            .collect();
        let msgs: Vec<Datagram<'_>> = chunk
            .iter()
            .zip(&pieces)
            .map(|((_, dst), pair)| Datagram {
                // A raw socket takes the port from the header it is given.
                dst: if headers.is_some() {
                    SocketAddrV4::new(*dst.ip(), 0)
                } else {
                    *dst
                },
                pieces: if headers.is_some() { pair } else { &pair[1..] },
                gso_segment: None,
            })
            .collect();
        match sys::send_mmsg(fd, &msgs) {
            Ok(n) => at += n.max(1),
            Err(e) => match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // Drop the first datagram and go on with the rest.
                _ if e.raw_os_error().is_some_and(|c| DROPPABLE.contains(&c)) => at += 1,
                _ => return Err(e),
            },
        }
    }
    Ok(())
}

/// An eventfd that wakes the worker out of [`wait`].
#[derive(Debug)]
pub struct Waker {
    fd: sys::EventFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: sys::EventFd::new()?,
        })
    }

    /// Signals the waker (cheap; idempotent until drained). A full counter
    /// means it is already signalled.
    pub fn wake(&self) {
        self.fd.add_one();
    }

    /// Clears the signal.
    pub fn drain(&self) {
        self.fd.clear();
    }
}

/// Blocks until `sock` is readable, `waker` is signalled, or `timeout`
/// passes (`None`: no timeout).
pub fn wait(sock: &impl AsFd, waker: &Waker, timeout: Option<Duration>) -> io::Result<()> {
    match sys::ppoll_two(sock.as_fd(), waker.fd.fd(), timeout) {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_long_datagrams_arrive_whole() {
        let a = bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0)).expect("bind");
        let b = bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0)).expect("bind");
        let Ok(std::net::SocketAddr::V4(to)) = b.local_addr() else {
            panic!("v4")
        };
        let big = vec![7u8; SLOT + 100];
        let items: Vec<(&[u8], SocketAddrV4)> = vec![(b"one", to), (b"two", to), (&big, to)];
        send(&a, &items).expect("send");
        let waker = Waker::new().expect("eventfd");
        let mut rx = RxBatch::default();
        let mut got = Vec::new();
        for _ in 0..100 {
            wait(&b, &waker, Some(Duration::from_millis(50))).expect("poll");
            let n = rx.recv(&b).expect("recv");
            got.extend((0..n).map(|i| rx.get(i).0.to_vec()));
            if got.len() == 3 {
                break;
            }
        }
        assert_eq!(got[0], b"one");
        assert_eq!(got[1], b"two");
        // Longer than any packet, but whole: the engine refuses it as
        // oversized, instead of a cut copy looking like a packet.
        assert_eq!(got[2], big);
        assert_eq!(rx.segment_size(2), None, "sent alone, not a GRO batch");
        assert_eq!(
            rx.get(0).1,
            a.local_addr()
                .map(|a| match a {
                    std::net::SocketAddr::V4(v) => v,
                    std::net::SocketAddr::V6(_) => to,
                })
                .expect("addr")
        );
    }

    /// A RoCE-looking packet of `len` bytes (a multiple of 4, at least 16)
    /// to QP `qp` with PSN `psn`, sealed under identification 0 from `src`
    /// to `dst` as the engine seals.
    fn packet(len: usize, qp: u32, psn: u32, src: SocketAddrV4, dst: SocketAddrV4) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 13 + psn as usize) as u8).collect();
        p[0] = 0x07; // WRITE Middle
        p[1] = 0x40;
        p[2..4].copy_from_slice(&[0xff, 0xff]);
        p[4] = 0;
        p[5..8].copy_from_slice(&qp.to_be_bytes()[1..]);
        p[8] = 0;
        p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        PseudoHeader { src, dst }.seal(&mut p);
        p
    }

    fn v4(s: &UdpSocket) -> SocketAddrV4 {
        match s.local_addr().expect("addr") {
            std::net::SocketAddr::V4(v) => v,
            std::net::SocketAddr::V6(_) => panic!("v4"),
        }
    }

    #[test]
    fn gso_runs_take_one_qps_consecutive_equal_packets_and_a_short_last() {
        let a = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791);
        let b = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 4791);
        let runs = |v: &[Vec<u8>], to: &[SocketAddrV4]| {
            let items: Vec<(&[u8], SocketAddrV4)> = v
                .iter()
                .zip(to.iter().cycle())
                .map(|(p, t)| (p.as_slice(), *t))
                .collect();
            gso_runs(&items)
        };
        let full = |n: u32| -> Vec<Vec<u8>> { (0..n).map(|i| packet(4112, 0x11, 100 + i, a, b)).collect() };
        // 15 packets of 4112 bytes fill 61,680 of 65,507 bytes; a 16th
        // would not fit.
        assert_eq!(runs(&full(20), &[b]), vec![0..15, 15..20]);
        // A shorter last packet ends a run; the next one starts anew.
        let mut v = full(3);
        v.push(packet(1000, 0x11, 103, a, b));
        v.push(packet(4112, 0x11, 104, a, b));
        assert_eq!(runs(&v, &[b]), vec![0..4, 4..5]);
        // A longer packet (the RETH of a first packet) cannot follow.
        let v = vec![packet(4112, 0x11, 1, a, b), packet(4128, 0x11, 2, a, b)];
        assert_eq!(runs(&v, &[b]), vec![0..1, 1..2]);
        // Another peer, another QP, a PSN out of sequence (an ACK of the
        // other direction), a wrap of the PSN.
        let v = full(4);
        assert_eq!(runs(&v, &[b, b, a, a]), vec![0..2, 2..4]);
        let v = vec![
            packet(64, 0x11, 1, a, b),
            packet(64, 0x12, 2, a, b),
            packet(64, 0x12, 3, a, b),
        ];
        assert_eq!(runs(&v, &[b]), vec![0..1, 1..3]);
        let v = vec![packet(64, 0x11, 1, a, b), packet(20, 0x11, 7, a, b)];
        assert_eq!(runs(&v, &[b]), vec![0..1, 1..2]);
        let v = vec![packet(64, 0x11, 0xff_ffff, a, b), packet(64, 0x11, 0, a, b)];
        assert_eq!(runs(&v, &[b]), vec![0..2]);
        // At most 64 segments, however small.
        let v: Vec<Vec<u8>> = (0..70).map(|i| packet(32, 0x11, i, a, b)).collect();
        assert_eq!(runs(&v, &[b]), vec![0..64, 64..70]);
        // Nothing that is not a BTH joins anything.
        let v = vec![b"tiny".to_vec(), b"tiny".to_vec()];
        assert_eq!(runs(&v, &[b]), vec![0..1, 1..2]);
        assert!(gso_runs(&[]).is_empty());
    }

    /// Packets of QPs that took turns line up per QP, each QP's in its
    /// order, and form runs.
    #[test]
    fn turns_of_several_qps_are_grouped_per_qp_in_order() {
        let a = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791);
        let b = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 4791);
        let p: Vec<Vec<u8>> = vec![
            packet(64, 0x12, 1, a, b),
            packet(64, 0x11, 7, a, b),
            packet(20, 0x12, 9, a, b), // an ACK to QP 0x12, after its data
            packet(64, 0x12, 2, a, b),
            packet(64, 0x11, 8, a, b),
        ];
        let items: Vec<(&[u8], SocketAddrV4)> = p.iter().map(|x| (x.as_slice(), b)).collect();
        let g = group_by_qp(&items);
        let order: Vec<(u32, u32)> = g.iter().map(|(d, _)| qp_psn(d).expect("bth")).collect();
        assert_eq!(order, vec![(0x11, 7), (0x11, 8), (0x12, 1), (0x12, 9), (0x12, 2)]);
        assert_eq!(gso_runs(&g), vec![0..2, 2..3, 3..4, 4..5]);
    }

    /// Sends `packets` (to `to`) through a GSO sender and returns what a
    /// receiver gets: each datagram with its GRO segment size.
    fn gso_round_trip(
        packets: &[Vec<u8>],
        from: &UdpSocket,
        to: &UdpSocket,
        want: usize,
    ) -> Vec<(Vec<u8>, Option<usize>)> {
        let dst = v4(to);
        let items: Vec<(&[u8], SocketAddrV4)> = packets.iter().map(|p| (p.as_slice(), dst)).collect();
        let mut tx = GsoSender::new(true);
        tx.send(from, &items).expect("send");
        assert!(tx.enabled(), "the kernel took the GSO sends");
        let waker = Waker::new().expect("eventfd");
        let mut rx = RxBatch::default();
        let mut got = Vec::new();
        let mut bytes = 0;
        for _ in 0..200 {
            wait(to, &waker, Some(Duration::from_millis(20))).expect("poll");
            let n = rx.recv(to).expect("recv");
            for i in 0..n {
                bytes += rx.get(i).0.len();
                got.push((rx.get(i).0.to_vec(), rx.segment_size(i)));
            }
            if bytes >= want {
                break;
            }
        }
        got
    }

    /// One GSO send of 15 full packets and a short last reaches a GRO
    /// receiver as one datagram with the segment size, and each packet in
    /// it carries the ICRC of the identification the kernel gave its
    /// segment; a receiver without GRO gets the same packets one by one.
    #[test]
    fn a_gso_send_arrives_as_one_gro_batch_with_per_segment_icrcs() {
        let lo = |last| SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, last), 0);
        let tx = bind(lo(1)).expect("bind");
        let rx = bind(lo(1)).expect("bind");
        let (src, dst) = (v4(&tx), v4(&rx));
        let mut packets: Vec<Vec<u8>> = (0..14).map(|i| packet(4112, 0x21, 500 + i, src, dst)).collect();
        packets.push(packet(1044, 0x21, 514, src, dst));
        let total: usize = packets.iter().map(Vec::len).sum();
        let got = gso_round_trip(&packets, &tx, &rx, total);
        assert_eq!(got.len(), 1, "one datagram");
        let (data, size) = &got[0];
        assert_eq!(*size, Some(4112));
        let segs: Vec<&[u8]> = data.chunks(4112).collect();
        assert_eq!(segs.len(), 15);
        let pseudo = PseudoHeader { src, dst };
        for (k, seg) in segs.iter().enumerate() {
            let hdr = pseudo.ip_udp_header_with_id(seg.len(), k as u16);
            assert!(
                crate::wire::icrc::verify_over(&hdr, seg),
                "segment {k} under identification {k}"
            );
            assert_eq!(
                &seg[..seg.len() - 4],
                &packets[k][..seg.len() - 4],
                "bytes of {k}"
            );
            if k > 0 {
                assert!(!pseudo.verify(seg), "segment {k} does not verify under 0");
            }
        }
        assert!(pseudo.verify(segs[0]));

        // The same to a plain socket without GRO: the kernel segments.
        let plain = UdpSocket::bind(lo(1)).expect("bind");
        let pdst = v4(&plain);
        let packets: Vec<Vec<u8>> = (0..3).map(|i| packet(4112, 0x21, 9 + i, src, pdst)).collect();
        let got = gso_round_trip(&packets, &tx, &plain, 3 * 4112);
        assert_eq!(got.len(), 3, "three datagrams");
        let pseudo = PseudoHeader { src, dst: pdst };
        for (k, (seg, size)) in got.iter().enumerate() {
            assert_eq!(*size, None);
            let hdr = pseudo.ip_udp_header_with_id(seg.len(), k as u16);
            assert!(crate::wire::icrc::verify_over(&hdr, seg), "segment {k}");
        }
    }

    /// Packets that cannot form a run go out alone with the ICRC the engine
    /// sealed; the GSO sender and the plain one put the same bytes on the
    /// wire for them.
    #[test]
    fn unbatchable_packets_leave_unchanged() {
        let lo = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0);
        let tx = bind(lo).expect("bind");
        let rx = bind(lo).expect("bind");
        let (src, dst) = (v4(&tx), v4(&rx));
        let packets = vec![
            packet(4112, 0x21, 1, src, dst),
            packet(4128, 0x21, 2, src, dst),
            packet(20, 0x21, 77, src, dst),
            packet(4112, 0x22, 3, src, dst),
        ];
        let got = gso_round_trip(&packets, &tx, &rx, 4128 + 4112 + 20 + 4112);
        let got: Vec<Vec<u8>> = got
            .into_iter()
            .map(|(d, s)| {
                assert_eq!(s, None);
                d
            })
            .collect();
        assert_eq!(got, packets);
    }

    #[test]
    fn waker_interrupts_wait() {
        let s = bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0)).expect("bind");
        let w = Waker::new().expect("eventfd");
        w.wake();
        let t = std::time::Instant::now();
        wait(&s, &w, Some(Duration::from_secs(5))).expect("poll");
        assert!(t.elapsed() < Duration::from_secs(1));
        w.drain();
        let t = std::time::Instant::now();
        wait(&s, &w, Some(Duration::from_millis(30))).expect("poll");
        assert!(t.elapsed() >= Duration::from_millis(25));
    }
}
