//! The socket and eventfd syscalls of the links, behind a safe API: every
//! pointer handed to the kernel is built here from borrowed Rust values
//! that outlive the call, and every fd is a [`BorrowedFd`] or an
//! [`OwnedFd`]. The links' logic (batching, GSO runs, which errors drop a
//! datagram) stays in [`super::udp`].
//!
//! With `mem::access`, the only module of the crate with unsafe code.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `setsockopt`/cmsg of the UDP level (Linux `udp.h`): the GSO segment
/// size of a send, and receive-side GRO.
pub(super) const UDP_SEGMENT: libc::c_int = 103;
pub(super) const UDP_GRO: libc::c_int = 104;

/// Control bytes per received message: room for a `UDP_GRO` cmsg.
const CMSG_ROOM: usize = 32;

const SOCKADDR_IN_LEN: libc::socklen_t = size_of::<libc::sockaddr_in>() as libc::socklen_t;

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

fn result(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt` of one `int` option.
pub(super) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live c_int of `len` bytes; the fd is open.
    result(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const v).cast(), len) })
}

/// Attaches a classic BPF filter that drops every datagram (`SO_ATTACH_FILTER`).
pub(super) fn attach_drop_all_filter(fd: BorrowedFd<'_>) -> io::Result<()> {
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
    // SAFETY: `prog` points at one live sock_filter; the kernel copies the
    // program during the call.
    result(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
}

/// A raw IPv4 socket for protocol UDP (`SOCK_RAW`, close-on-exec).
pub(super) fn raw_udp_socket() -> io::Result<OwnedFd> {
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
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bind` to an IPv4 address.
pub(super) fn bind(fd: BorrowedFd<'_>, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr(addr);
    // SAFETY: `sa` is a live sockaddr_in of the length passed.
    result(unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), SOCKADDR_IN_LEN) })
}

/// What `recvmmsg` reported of one datagram.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecvMeta {
    /// The bytes the datagram had (`msg_len`).
    pub len: usize,
    /// Whether it was longer than its slot (`MSG_TRUNC`).
    pub truncated: bool,
    /// Its sender.
    pub from: SocketAddrV4,
    /// The `UDP_GRO` segment size, 0 for a datagram received alone.
    pub gro_segment: usize,
}

/// Up to `N` datagrams without blocking (`recvmmsg` with `MSG_DONTWAIT`),
/// datagram `i` into `buf[i * slot..(i + 1) * slot]` and its description
/// into `meta[i]`; returns how many. `buf` must hold `N` slots. The OS
/// error is returned as is (EAGAIN when none is waiting).
pub(super) fn recv_mmsg<const N: usize>(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    slot: usize,
    meta: &mut [RecvMeta; N],
) -> io::Result<usize> {
    assert!(
        slot > 0 && buf.len() >= N * slot,
        "recv_mmsg: {N} slots of {slot} bytes do not fit"
    );
    // SAFETY: these are plain C structs; all-zero is valid for each.
    let mut names: [libc::sockaddr_in; N] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut iovs: [libc::iovec; N] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; N] = unsafe { zeroed() };
    // u64 words keep the control buffers aligned for cmsghdr.
    let mut control = [[0u64; CMSG_ROOM / 8]; N];
    for (i, chunk) in buf.chunks_exact_mut(slot).take(N).enumerate() {
        iovs[i].iov_base = chunk.as_mut_ptr().cast();
        iovs[i].iov_len = slot;
        let h = &mut msgs[i].msg_hdr;
        h.msg_name = (&raw mut names[i]).cast();
        h.msg_namelen = SOCKADDR_IN_LEN;
        h.msg_iov = &raw mut iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = control[i].as_mut_ptr().cast();
        h.msg_controllen = CMSG_ROOM;
    }
    // SAFETY: every msghdr points at a live sockaddr_in, a live iovec that
    // covers a distinct `slot`-byte piece of `buf` (N of them fit, as
    // asserted) and a live CMSG_ROOM-byte control buffer; all of them
    // outlive the call, and the kernel writes at most those bytes.
    let n = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            N as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    for i in 0..n {
        meta[i] = RecvMeta {
            len: msgs[i].msg_len as usize,
            truncated: msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from: from_sockaddr(&names[i]),
            gro_segment: gro_size(&msgs[i].msg_hdr),
        };
    }
    Ok(n)
}

/// The `UDP_GRO` segment size in the control messages of a received
/// `msghdr`, 0 when there is none.
fn gro_size(h: &libc::msghdr) -> usize {
    let mut size = 0;
    // SAFETY: `h` is a msghdr the kernel just filled in: its control
    // pointer and the length the kernel set describe a live buffer of
    // cmsghdrs, which CMSG_FIRSTHDR/CMSG_NXTHDR walk without leaving it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        // SAFETY: `c` is non-null and points inside the control buffer.
        let cm = unsafe { &*c };
        if cm.cmsg_level == libc::SOL_UDP && cm.cmsg_type == UDP_GRO {
            let mut v = [0u8; 2];
            // SAFETY: a UDP_GRO cmsg carries a u16 after its header
            // (cmsg_len covers it); the data may be unaligned, so it is
            // copied out bytewise.
            unsafe { std::ptr::copy_nonoverlapping(libc::CMSG_DATA(c), v.as_mut_ptr(), 2) };
            size = usize::from(u16::from_ne_bytes(v));
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
    size
}

/// One datagram to send: its pieces in order, and for a UDP GSO
/// super-packet the size of the segments the kernel cuts it into.
#[derive(Debug)]
pub(super) struct Datagram<'a> {
    pub dst: SocketAddrV4,
    pub pieces: &'a [IoSlice<'a>],
    pub gso_segment: Option<u16>,
}

/// One `sendmmsg` of `datagrams`: how many the kernel took, or its error.
pub(super) fn send_mmsg(fd: BorrowedFd<'_>, datagrams: &[Datagram<'_>]) -> io::Result<usize> {
    let names: Vec<libc::sockaddr_in> = datagrams.iter().map(|d| sockaddr(d.dst)).collect();
    // u64 words keep the control buffers aligned for cmsghdr.
    let mut control = vec![[0u64; CMSG_ROOM / 8]; datagrams.len()];
    // SAFETY: plain C structs; all-zero is valid.
    let mut msgs: Vec<libc::mmsghdr> = datagrams.iter().map(|_| unsafe { zeroed() }).collect();
    for (j, d) in datagrams.iter().enumerate() {
        let h = &mut msgs[j].msg_hdr;
        h.msg_name = (&raw const names[j]).cast_mut().cast();
        h.msg_namelen = SOCKADDR_IN_LEN;
        // `IoSlice` is ABI-compatible with `iovec` on Unix (std documents
        // it); the kernel only reads the pieces.
        h.msg_iov = d.pieces.as_ptr().cast::<libc::iovec>().cast_mut();
        h.msg_iovlen = d.pieces.len();
        if let Some(size) = d.gso_segment {
            h.msg_control = control[j].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a length.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            // SAFETY: the control buffer is live, aligned and holds
            // CMSG_SPACE(2) bytes (at most CMSG_ROOM), so the first cmsghdr
            // and its 2 data bytes lie inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::copy_nonoverlapping(size.to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), 2);
            }
        }
    }
    let count = libc::c_uint::try_from(msgs.len()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: each msghdr points at a live sockaddr_in, iovecs over the live
    // slices `datagrams` borrows and, for a GSO datagram, a live control
    // buffer; the kernel only reads them during the call.
    let n = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), count, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub(super) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with counter 0.
    pub(super) fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Adds 1 to the counter; a full counter (EAGAIN) is left as it is.
    pub(super) fn add_one(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an open eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Reads the counter back to 0 (nothing when it already is).
    pub(super) fn clear(&self) {
        let mut v = MaybeUninit::<u64>::uninit();
        // SAFETY: reads at most 8 bytes into a live u64 from an open
        // non-blocking eventfd.
        unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    }

    /// The fd, to wait on.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

/// `ppoll` for input on `a` and `b` for up to `timeout` (`None`: none); the
/// OS error (EINTR included) as is.
pub(super) fn ppoll_two(a: BorrowedFd<'_>, b: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    let pollfd = |fd: BorrowedFd<'_>| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = [pollfd(a), pollfd(b)];
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
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
