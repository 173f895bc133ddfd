//! TLS on the S3 listener (docs/server.md, "TLS"): rustls with the aws-lc
//! provider, HTTP/1.1 by ALPN, a certificate chain and its key from PEM
//! files, swapped for new connections without a restart.
//!
//! * [`Certs`] is the certificate resolver: it holds the pair as one
//!   `Arc<CertifiedKey>` and swaps it whole on [`Certs::reload`], so a
//!   handshake sees either the old pair or the new one, never a mix.
//!   Connections already open keep the certificate they were opened with.
//!   A reload that fails (a missing file, a key that does not match the
//!   certificate, a file caught half-written) keeps the pair in service.
//! * [`Stream`] is what the connection code serves: the socket as it is, or
//!   TLS over it. The handshake runs inside the first read or write, so the
//!   connection's timers (`conn::Guarded`, which sits under the TLS layer)
//!   cover it: a client that stops halfway through its ClientHello is cut
//!   at `header_read_timeout_secs`, one that never sends a byte at
//!   `idle_timeout_secs`, as on plain HTTP.
//!
//! The RDMA side is unchanged under TLS: tokens and replies travel in the
//! same headers, now inside TLS, and the peer address a token is checked
//! against is still the TCP peer's.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::TlsConfig;

/// Why a certificate and key could not be put in service.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

/// The served certificate chain and key, replaceable while the server runs.
#[derive(Debug)]
pub struct Certs {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' modification times when they were last read (loaded or
    /// not), so that a watcher reads them again only after they change.
    seen: Mutex<Option<Stamp>>,
}

/// What tells a watcher that the files changed.
type Stamp = (Option<SystemTime>, Option<SystemTime>);

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

/// Reads a PEM certificate chain (leaf first) and its PEM private key, and
/// checks that the key is the certificate's.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| TlsError(format!("reading {}: {e}", p.display())));
    let cert_pem = read(cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{}: not a PEM certificate chain: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(TlsError(format!(
            "{}: no CERTIFICATE block in the file",
            cert.display()
        )));
    }
    let key_pem = read(key)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| TlsError(format!("{}: no usable PEM private key: {e}", key.display())))?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| {
        TlsError(format!(
            "{} and {} do not make a certificate and its key: {e}",
            cert.display(),
            key.display()
        ))
    })
}

impl Certs {
    /// Loads the pair; fails when either file is unusable.
    pub fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let seen = stamp(cert, key);
        let pair = load_pair(cert, key, &provider)?;
        Ok(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new(Some(seen)),
        })
    }

    /// Reads both files again and serves the new pair to the connections
    /// that open from now on. On an error the pair in service stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let seen = stamp(&self.cert_path, &self.key_path);
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(seen);
        let pair = load_pair(&self.cert_path, &self.key_path, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(pair);
        Ok(())
    }

    /// Reloads when either file changed since it was last read: `None`
    /// when nothing changed, else what the reload did.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        let now = stamp(&self.cert_path, &self.key_path);
        if *self.seen.lock().unwrap_or_else(PoisonError::into_inner) == Some(now) {
            return None;
        }
        Some(self.reload())
    }

    /// The chain in service (leaf first), as DER.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cert
            .clone()
    }

    /// The certificate file.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The listener's TLS side: the acceptor and the certificates it serves.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    certs: Arc<Certs>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// TLS as `config` says, or `None` for plain HTTP (neither file set).
    pub fn from_config(config: &TlsConfig) -> Result<Option<Self>, TlsError> {
        let (cert, key) = match (&config.cert, &config.key) {
            (Some(c), Some(k)) => (c, k),
            (None, None) => return Ok(None),
            _ => {
                return Err(TlsError(
                    "tls.cert and tls.key go together: set both or neither".into(),
                ));
            }
        };
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certs = Arc::new(Certs::load(cert, key, provider.clone())?);
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("protocol versions: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        // HTTP/1.1 only (no HTTP/2 on this listener): a client that offers
        // ALPN must be able to speak it.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            certs,
        }))
    }

    /// The certificates, for reloading.
    pub fn certs(&self) -> &Arc<Certs> {
        &self.certs
    }
}

/// Wraps an accepted socket for the connection code: TLS over it when
/// `tls` is set (the handshake runs in the first read or write), else the
/// socket as it is.
pub fn stream<IO>(io: IO, tls: Option<&Tls>) -> Stream<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tls {
        None => Stream(State::Plain(io)),
        Some(t) => Stream(State::Accepting(Box::new(t.acceptor.accept(io)))),
    }
}

/// A connection's byte stream: plain, or TLS (see [`stream`]).
#[derive(Debug)]
pub struct Stream<IO>(State<IO>);

enum State<IO> {
    Plain(IO),
    Accepting(Box<tokio_rustls::Accept<IO>>),
    Tls(Box<tokio_rustls::server::TlsStream<IO>>),
    /// The handshake failed; every later call fails too.
    Failed,
}

impl<IO> std::fmt::Debug for State<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Plain(_) => "Plain",
            State::Accepting(_) => "Accepting",
            State::Tls(_) => "Tls",
            State::Failed => "Failed",
        })
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Stream<IO> {
    /// Drives the handshake, if one is under way, to its end.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let State::Accepting(accept) = &mut self.0 {
            match Pin::new(accept.as_mut()).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(s)) => self.0 = State::Tls(Box::new(s)),
                Poll::Ready(Err(e)) => {
                    self.0 = State::Failed;
                    return Poll::Ready(Err(e));
                }
            }
        }
        match self.0 {
            State::Failed => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the TLS handshake failed",
            ))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = std::task::ready!(this.poll_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match &mut this.0 {
            State::Plain(io) => Pin::new(io).poll_read(cx, buf),
            State::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            State::Accepting(_) | State::Failed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = std::task::ready!(this.poll_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match &mut this.0 {
            State::Plain(io) => Pin::new(io).poll_write(cx, data),
            State::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
            State::Accepting(_) | State::Failed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = std::task::ready!(this.poll_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match &mut this.0 {
            State::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            State::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            State::Accepting(_) | State::Failed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.0 {
            State::Plain(io) => io.is_write_vectored(),
            State::Tls(s) => s.is_write_vectored(),
            State::Accepting(_) | State::Failed => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            State::Plain(io) => Pin::new(io).poll_flush(cx),
            State::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            State::Accepting(_) | State::Failed => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            State::Plain(io) => Pin::new(io).poll_shutdown(cx),
            // Sends close_notify, then shuts the socket's write side.
            State::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            State::Accepting(_) | State::Failed => Poll::Ready(Ok(())),
        }
    }
}

/// Reloads `certs` whenever its files change, looking every `every`, until
/// `stopped` says stop. A reload that fails is logged and the pair in
/// service stays; the files are read again after their next change.
pub async fn watch(
    certs: Arc<Certs>,
    every: std::time::Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop_requested(&mut stopped) => break,
            _ = tick.tick() => {
                let c = certs.clone();
                let done = tokio::task::spawn_blocking(move || c.reload_if_changed()).await;
                log_reload("the files changed", &certs, done.ok().flatten());
            }
        }
    }
}

async fn stop_requested(rx: &mut tokio::sync::watch::Receiver<bool>) {
    // A closed channel (the server gone) also means stop.
    let _ = rx.wait_for(|s| *s).await;
}

/// Logs what a reload did (`None`: nothing to do).
pub fn log_reload(why: &str, certs: &Certs, done: Option<Result<(), TlsError>>) {
    match done {
        None => {}
        Some(Ok(())) => tracing::info!(
            cert = %certs.cert_path().display(),
            "{why}: TLS certificate reloaded; new connections get it"
        ),
        Some(Err(e)) => tracing::warn!("{why}: {e}; the certificate in service stays"),
    }
}
