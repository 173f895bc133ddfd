//! The socket syscalls of both links, with batches: `recvmmsg` and
//! `sendmmsg` move up to [`BATCH`] datagrams per call, `ppoll` waits on the
//! socket and an `eventfd` with nanosecond timeouts.
//!
//! * the UDP link: a UDP socket at the device's address, port 4791
//!   ([`bind`]);
//! * the raw link: a raw IPv4 socket that sends and receives whole
//!   IPv4/UDP/BTH packets with the headers the NIC built or received
//!   ([`RawSocket`]; needs CAP_NET_RAW).
//!
//! The only other module with unsafe code besides the memory access one.
#![allow(unsafe_code)]

use std::io;
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::wire::PseudoHeader;
use crate::wire::icrc::IP_UDP_LEN;

/// Datagrams per syscall.
pub const BATCH: usize = 64;

/// Bytes per receive slot: one more than the largest packet rounded up, so
/// that a datagram longer than any packet is seen as too long.
pub const SLOT: usize = (IP_UDP_LEN + crate::wire::MAX_PACKET + 8).next_multiple_of(64);

/// Socket buffer size asked for: enough for several windows of packets.
const SOCKET_BUFFER: i32 = 32 << 20;

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut s: libc::sockaddr_in = unsafe { zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
    s
}

fn from_sockaddr(s: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(s.sin_port),
    )
}

fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int) {
    let v: libc::c_int = SOCKET_BUFFER;
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    let p = (&raw const v).cast::<libc::c_void>();
    // SAFETY: `p` points at a live c_int of `len` bytes; the fd is open.
    let forced = unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, force, p, len) } == 0;
    if !forced {
        // Without CAP_NET_ADMIN the kernel caps the plain option at
        // net.core.{r,w}mem_max; that is the best available.
        // SAFETY: as above.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, plain, p, len) };
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
pub fn set_dont_fragment(fd: RawFd) -> io::Result<()> {
    let v: libc::c_int = libc::IP_PMTUDISC_DO;
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live c_int of `len` bytes; the fd is open.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&raw const v).cast(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds a UDP socket at `addr` with large buffers, don't-fragment and IP
/// identification 0 ([`set_dont_fragment`]). Fails with the OS error
/// (EADDRINUSE when another device holds the address).
pub fn bind(addr: SocketAddrV4) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(addr)?;
    let fd = sock.as_raw_fd();
    set_dont_fragment(fd)?;
    set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    Ok(sock)
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live c_int of `len` bytes; the fd is open.
    let r = unsafe { libc::setsockopt(fd, level, name, (&raw const v).cast(), len) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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
        let drop_all = [libc::sock_filter {
            code: 0x06, // BPF_RET | BPF_K: accept 0 bytes
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: drop_all.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at one live sock_filter; the kernel copies
        // the program during the call.
        let r = unsafe {
            libc::setsockopt(
                port.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&raw const prog).cast(),
                size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socket takes no pointers.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let raw = unsafe { OwnedFd::from_raw_fd(fd) };
        set_int(fd, libc::IPPROTO_IP, libc::IP_HDRINCL, 1)?;
        let sa = sockaddr(SocketAddrV4::new(*local.ip(), 0));
        // SAFETY: `sa` is a live sockaddr_in of the length passed.
        let r = unsafe {
            libc::bind(
                fd,
                (&raw const sa).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
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
        send_batches(self.raw.as_raw_fd(), items, Some(&make))
    }

    /// Sends whole IPv4 packets exactly as given (headers included; the
    /// kernel fills in the IP checksum, and an identification of 0 when DF
    /// is clear). For tests that play another sender.
    pub fn send_ip(&self, packets: &[(&[u8], Ipv4Addr)]) -> io::Result<()> {
        let items: Vec<(&[u8], SocketAddrV4)> = packets
            .iter()
            .map(|(p, ip)| (*p, SocketAddrV4::new(*ip, 0)))
            .collect();
        send_batches(self.raw.as_raw_fd(), &items, None)
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
    from: [SocketAddrV4; BATCH],
}

impl Default for RxBatch {
    fn default() -> Self {
        Self {
            buf: vec![0; SLOT * BATCH],
            lens: [0; BATCH],
            from: [SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); BATCH],
        }
    }
}

impl RxBatch {
    /// Datagram `i` of the last receive and its sender. A datagram longer
    /// than [`SLOT`] comes back cut to `SLOT` bytes.
    pub fn get(&self, i: usize) -> (&[u8], SocketAddrV4) {
        let start = i * SLOT;
        (&self.buf[start..start + self.lens[i].min(SLOT)], self.from[i])
    }

    /// Receives up to [`BATCH`] datagrams without blocking; returns how many
    /// (0 when none is waiting).
    pub fn recv(&mut self, sock: &impl AsRawFd) -> io::Result<usize> {
        // SAFETY: these are plain C structs; all-zero is valid for each.
        let mut names: [libc::sockaddr_in; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, chunk) in self.buf.chunks_exact_mut(SLOT).enumerate() {
            iovs[i].iov_base = chunk.as_mut_ptr().cast();
            iovs[i].iov_len = SLOT;
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&raw mut names[i]).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &raw mut iovs[i];
            h.msg_iovlen = 1;
        }
        // SAFETY: every msghdr points at a live sockaddr_in and a live iovec
        // that covers a distinct SLOT-byte piece of `self.buf`; all of them
        // outlive the call, and the kernel writes at most those bytes.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for i in 0..n {
            let truncated = msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = if truncated { SLOT } else { msgs[i].msg_len as usize };
            self.from[i] = from_sockaddr(&names[i]);
        }
        Ok(n)
    }
}

/// Sends `items` with as few `sendmmsg` calls as it takes. Datagrams the
/// kernel refuses (a full socket buffer, an unreachable address) are
/// dropped, as a NIC drops on a full wire; the RC layer retransmits.
pub fn send(sock: &UdpSocket, items: &[(&[u8], SocketAddrV4)]) -> io::Result<()> {
    send_batches(sock.as_raw_fd(), items, None)
}

/// Makes the IPv4 and UDP headers of a datagram to an address.
type HeaderFn<'a> = dyn Fn(&[u8], SocketAddrV4) -> [u8; IP_UDP_LEN] + 'a;

/// Sends `items`, each behind the header `headers(i)` makes when given
/// (the raw link: IPv4 and UDP headers in front of the datagram).
fn send_batches(
    fd: RawFd,
    items: &[(&[u8], SocketAddrV4)],
    headers: Option<&HeaderFn<'_>>,
) -> io::Result<()> {
    let mut at = 0;
    while at < items.len() {
        let chunk = &items[at..items.len().min(at + BATCH)];
        let names: [libc::sockaddr_in; BATCH] = std::array::from_fn(|i| {
            chunk.get(i).map_or_else(
                || sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
                // A raw socket takes the port from the header it is given.
                |c| {
                    sockaddr(if headers.is_some() {
                        SocketAddrV4::new(*c.1.ip(), 0)
                    } else {
                        c.1
                    })
                },
            )
        });
        let heads: [[u8; IP_UDP_LEN]; BATCH] = std::array::from_fn(|i| match (headers, chunk.get(i)) {
            (Some(make), Some((data, dst))) => make(data, *dst),
            _ => [0; IP_UDP_LEN],
        });
        // SAFETY: plain C structs; all-zero is valid.
        let mut iovs: [[libc::iovec; 2]; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, (data, _)) in chunk.iter().enumerate() {
            let mut n = 0;
            if headers.is_some() {
                iovs[i][0].iov_base = heads[i].as_ptr().cast_mut().cast();
                iovs[i][0].iov_len = IP_UDP_LEN;
                n = 1;
            }
            iovs[i][n].iov_base = data.as_ptr().cast_mut().cast();
            iovs[i][n].iov_len = data.len();
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&raw const names[i]).cast_mut().cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = iovs[i].as_mut_ptr();
            h.msg_iovlen = n + 1;
        }
        // SAFETY: each msghdr points at a live sockaddr_in and one or two
        // iovecs over live slices (`heads` and the items); the kernel only
        // reads them during the call.
        let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), chunk.len() as libc::c_uint, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // Drop the first datagram and go on with the rest.
                _ if e.raw_os_error().is_some_and(|c| {
                    [
                        libc::EAGAIN,
                        libc::ENOBUFS,
                        libc::ECONNREFUSED,
                        libc::EHOSTUNREACH,
                        libc::ENETUNREACH,
                        // Longer than the path MTU (DF is set): a port MTU
                        // above the interface's, which RoCE never fragments.
                        libc::EMSGSIZE,
                    ]
                    .contains(&c)
                }) =>
                {
                    at += 1
                }
                _ => return Err(e),
            }
        } else {
            at += (n as usize).max(1);
        }
    }
    Ok(())
}

/// An eventfd that wakes the worker out of [`wait`].
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Signals the waker (cheap; idempotent until drained).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an open eventfd. A full
        // counter (EAGAIN) means it is already signalled.
        unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Clears the signal.
    pub fn drain(&self) {
        let mut v = MaybeUninit::<u64>::uninit();
        // SAFETY: reads at most 8 bytes into a live u64 from an open
        // non-blocking eventfd.
        unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    }
}

/// Blocks until `sock` is readable, `waker` is signalled, or `timeout`
/// passes (`None`: no timeout).
pub fn wait(sock: &impl AsRawFd, waker: &Waker, timeout: Option<Duration>) -> io::Result<()> {
    let mut fds = [
        libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a live array of two pollfds; `tsp` is null or points
    // at a live timespec; no signal mask is passed.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_long_datagrams_are_cut() {
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
        assert_eq!(got[2].len(), SLOT);
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
