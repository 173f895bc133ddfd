//! What the server does to every TCP connection it accepts: socket options
//! (`TCP_NODELAY`, keep-alive), and the timeouts that keep a slow or idle
//! client from holding a connection slot forever (docs/server.md,
//! "Connections").
//!
//! [`Guarded`] wraps the socket that hyper reads and writes. It knows
//! whether a request is being served (the service marks that through
//! [`ConnState`]) and closes the connection, with an I/O error that ends
//! hyper's connection task, when:
//!
//! * the first byte of a request arrived but the request head is not
//!   complete `header_read_timeout` later (a client sending its headers a
//!   byte at a time);
//! * no request is in flight and nothing was read or written for
//!   `idle_timeout` (an idle keep-alive connection, or one that never sent
//!   a byte);
//! * a write of the response has made no progress for `idle_timeout` (a
//!   client that stopped reading).
//!
//! While a request is being served (the handler runs, an RDMA transfer
//! included) nothing times out here: the request body has its own timer
//! (`crate::front::body`), and the handler has its own limits.
//!
//! A connection can also be closed from outside ([`ConnState::close`]): the
//! per-address shares (`crate::front::shares`) close idle connections to make room,
//! and a body that broke a limit closes its connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::config::HttpConfig;

/// Sets the options every accepted socket gets: `TCP_NODELAY` (a small
/// response written in two pieces must not wait for the client's delayed
/// ACK) and TCP keep-alive (a peer that vanished is noticed).
pub(crate) fn tune(stream: &TcpStream, http: &HttpConfig) -> io::Result<()> {
    stream.set_nodelay(true)?;
    if http.tcp_keepalive_secs > 0 {
        let idle = Duration::from_secs(http.tcp_keepalive_secs);
        let ka = socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval(Duration::from_secs(10).min(idle));
        socket2::SockRef::from(stream).set_tcp_keepalive(&ka)?;
    }
    Ok(())
}

/// Whether the connection a request came on is TLS, in its extensions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transport {
    /// The connection is TLS.
    pub tls: bool,
}

/// The connection a request came on, in its extensions: what a body that
/// breaks a limit closes.
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle(pub Arc<ConnState>);

/// What the service and the socket wrapper share about one connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    origin: Instant,
    /// Requests being served now (HTTP/1.1: zero or one).
    in_flight: AtomicUsize,
    /// Milliseconds since `origin` of the last read, write or request end.
    last_ms: AtomicU64,
    /// Milliseconds since `origin` (plus one) at which the first byte of a
    /// request head arrived; 0 while none is arriving.
    head_ms: AtomicU64,
    /// The reader that found a request in flight and armed no timer: woken
    /// when the request ends, so that its next poll arms the idle timer.
    /// Every pending read registers here, so that [`ConnState::close`]
    /// reaches it.
    reader: AtomicWaker,
    /// The writer waiting for the client, woken by [`ConnState::close`].
    writer: AtomicWaker,
    /// Set by [`ConnState::close`]: every read and write fails from now on.
    closed: AtomicBool,
}

impl ConnState {
    /// A fresh connection.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            head_ms: AtomicU64::new(0),
            reader: AtomicWaker::new(),
            writer: AtomicWaker::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// Closes the connection: its pending and later reads and writes fail,
    /// which ends hyper's connection task.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.reader.wake();
        self.writer.wake();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether no request is being served; an idle connection may be
    /// closed to make room for another.
    pub(crate) fn is_between_requests(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }

    /// When what the connection is doing now began: the first byte of a
    /// request head still arriving, or else its last activity. The
    /// earliest is the first to close for room.
    pub(crate) fn waiting_since(&self) -> Instant {
        match self.head_ms.load(Ordering::Relaxed) {
            0 => self.at(self.last_ms.load(Ordering::Relaxed)),
            h => self.at(h - 1),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Marks a request as being served until the guard drops.
    pub(crate) fn serving(self: &Arc<Self>) -> Serving {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_ms.store(0, Ordering::Relaxed);
        Serving(self.clone())
    }

    fn at(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }
}

/// A request in flight on a connection (see [`ConnState::serving`]).
#[derive(Debug)]
pub(crate) struct Serving(Arc<ConnState>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
        self.0.reader.wake();
    }
}

/// A socket with the timeouts of the module documentation.
#[derive(Debug)]
pub(crate) struct Guarded<IO> {
    io: IO,
    state: Arc<ConnState>,
    header_read: Duration,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Guarded<IO> {
    /// Wraps `io`; `state` is the one the connection's service marks.
    pub(crate) fn new(io: IO, state: Arc<ConnState>, http: &HttpConfig) -> Self {
        Self {
            io,
            state,
            header_read: Duration::from_secs(http.header_read_timeout_secs.max(1)),
            idle: Duration::from_secs(http.idle_timeout_secs.max(1)),
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// When a read that is pending gives up, if it ever does.
    fn read_deadline(&self) -> Option<(Instant, &'static str)> {
        let s = &self.state;
        if s.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let head = s.head_ms.load(Ordering::Relaxed);
        if head > 0 {
            return Some((
                s.at(head - 1) + self.header_read,
                "request head not complete in time",
            ));
        }
        Some((s.at(s.last_ms.load(Ordering::Relaxed)) + self.idle, "idle"))
    }

    /// Polls the timer towards `deadline`: an error once it has passed.
    fn expired(&mut self, cx: &mut Context<'_>, deadline: Instant, why: &'static str) -> Poll<io::Error> {
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, why)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.state.is_closed() {
            return Poll::Ready(Err(closed()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let s = &this.state;
                    s.touch();
                    if s.in_flight.load(Ordering::Relaxed) == 0 && s.head_ms.load(Ordering::Relaxed) == 0 {
                        s.head_ms.store(s.now_ms() + 1, Ordering::Relaxed);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.read_deadline() {
                Some((deadline, why)) => {
                    this.state.reader.register(cx.waker());
                    if this.state.is_closed() {
                        return Poll::Ready(Err(closed()));
                    }
                    match this.expired(cx, deadline, why) {
                        Poll::Ready(e) => Poll::Ready(Err(e)),
                        Poll::Pending => Poll::Pending,
                    }
                }
                None => {
                    // No deadline while a request is served; the request's
                    // end wakes this read, whose next poll arms the timer
                    // (else an idle keep-alive connection could stay open).
                    this.state.reader.register(cx.waker());
                    if this.read_deadline().is_some() || this.state.is_closed() {
                        cx.waker().wake_by_ref();
                    }
                    Poll::Pending
                }
            },
            other => other,
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.state.is_closed() {
            return Poll::Ready(Err(closed()));
        }
        match Pin::new(&mut this.io).poll_write(cx, data) {
            Poll::Ready(r) => {
                this.state.touch();
                Poll::Ready(r)
            }
            Poll::Pending => this.write_stalled(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.state.is_closed() {
            return Poll::Ready(Err(closed()));
        }
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.state.touch();
                Poll::Ready(r)
            }
            Poll::Pending => this.write_stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO> Guarded<IO> {
    /// A write that cannot proceed: the client is not reading. Gives up
    /// `idle` after the last progress.
    fn write_stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        self.state.writer.register(cx.waker());
        if self.state.is_closed() {
            return Poll::Ready(Err(closed()));
        }
        let deadline = self.state.at(self.state.last_ms.load(Ordering::Relaxed)) + self.idle;
        match self.expired(cx, deadline, "the client stopped reading") {
            Poll::Ready(e) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "closed by the server's limits")
}
