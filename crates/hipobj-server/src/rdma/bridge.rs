//! Between the blocking RDMA mover (`hipobj_target::Target`, which runs on
//! a blocking thread) and the async object bodies of the store.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures::{Stream, StreamExt};
use s3s::dto::StreamingBlob;
use s3s::stream::{ByteStream, RemainingLength};
use tokio::sync::mpsc;

/// A GET's object body, read from a blocking thread in exactly the chunk
/// sizes the mover asks for.
pub(super) struct BlockingBody {
    rt: tokio::runtime::Handle,
    body: StreamingBlob,
    pending: Bytes,
}

impl BlockingBody {
    /// Wraps `body`; `rt` drives it.
    pub(super) fn new(rt: tokio::runtime::Handle, body: StreamingBlob) -> Self {
        Self {
            rt,
            body,
            pending: Bytes::new(),
        }
    }

    /// Fills all of `out` from the body; a body that ends early is an error.
    pub(super) fn fill(&mut self, out: &mut [u8]) -> io::Result<()> {
        let mut filled = 0;
        while filled < out.len() {
            if self.pending.is_empty() {
                match self.rt.block_on(self.body.next()) {
                    Some(Ok(b)) => self.pending = b,
                    Some(Err(e)) => return Err(io::Error::other(format!("reading the object failed: {e}"))),
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the object ended before its length",
                        ));
                    }
                }
                continue;
            }
            let n = self.pending.len().min(out.len() - filled);
            out[filled..filled + n].copy_from_slice(&self.pending[..n]);
            self.pending.advance(n);
            filled += n;
        }
        Ok(())
    }
}

/// Where a PUT's mover sends the chunks it read.
pub(super) type ChunkSender = mpsc::Sender<Bytes>;

/// A PUT's object body as the store sees it: the chunks the mover read,
/// exactly `len` bytes, or an error if the mover stops before that.
pub(super) struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    remaining: u64,
}

impl ChannelBody {
    /// A body of `len` bytes and the sender that feeds it; `depth` chunks
    /// may wait in between.
    pub(super) fn new(len: u64, depth: usize) -> (ChunkSender, Self) {
        let (tx, rx) = mpsc::channel(depth.max(1));
        (tx, Self { rx, remaining: len })
    }
}

impl Stream for ChannelBody {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(b)) => {
                let n = b.len() as u64;
                if n > self.remaining {
                    self.remaining = 0;
                    return Poll::Ready(Some(Err(io::Error::other(
                        "the RDMA transfer sent too many bytes",
                    ))));
                }
                self.remaining -= n;
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(None) => {
                // The mover stopped early: an error, so that the store
                // never takes the bytes so far for the whole object.
                self.remaining = 0;
                Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the RDMA transfer stopped before the token's length",
                ))))
            }
        }
    }
}

impl ByteStream for ChannelBody {
    fn remaining_length(&self) -> RemainingLength {
        usize::try_from(self.remaining)
            .map_or_else(|_| RemainingLength::unknown(), RemainingLength::new_exact)
    }
}

/// Turns the blocking send into the mover's drain callback result.
pub(super) fn send_chunk(tx: &ChunkSender, chunk: &[u8]) -> io::Result<()> {
    tx.blocking_send(Bytes::copy_from_slice(chunk))
        .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the store stopped reading the object"))
}

/// A store body for a [`ChannelBody`].
pub(super) fn blob(body: ChannelBody) -> StreamingBlob {
    StreamingBlob::new(ErrBoxed(body))
}

/// Adapts the error type to the one `StreamingBlob::new` takes.
struct ErrBoxed(ChannelBody);

impl Stream for ErrBoxed {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.0)
            .poll_next(cx)
            .map(|o| o.map(|r| r.map_err(|e| Box::new(e) as s3s::StdError)))
    }
}

impl ByteStream for ErrBoxed {
    fn remaining_length(&self) -> RemainingLength {
        self.0.remaining_length()
    }
}
