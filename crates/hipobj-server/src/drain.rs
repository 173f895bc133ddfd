//! What the `hipobj-server` command does on signals (docs/server.md,
//! "Health and drain"):
//!
//! * SIGHUP reloads the TLS certificate (when TLS is on) and the
//!   credentials file (when one is configured), reopens the access log
//!   file (when one is configured, for logrotate), and never ends the
//!   process;
//! * SIGTERM or SIGINT drains: `/.hipobj/ready` answers 503 at once, the
//!   listener keeps accepting for `drain_delay_secs` (so that a load
//!   balancer polling readiness stops sending), then closes; requests in
//!   flight finish within `shutdown_grace_secs`. A second SIGTERM or
//!   SIGINT during the delay ends the delay.

use std::future::Future;

use std::sync::Arc;

use crate::Handle;
use crate::logging::AccessFile;

/// SIGHUP's work: TLS and credentials read again and the access log file
/// reopened, each logged. No failure stops anything: the pair, the keys
/// and the file in service stay.
pub async fn reload(handle: &Handle, access: Option<&AccessFile>, why: &str) {
    if let Some(certs) = handle.tls().cloned() {
        let c = certs.clone();
        let done = tokio::task::spawn_blocking(move || c.reload()).await.ok();
        crate::front::tls::log_reload(why, &certs, done);
    }
    if handle.keys().file().is_some() {
        let keys = handle.keys().clone();
        if let Ok(done) = tokio::task::spawn_blocking(move || keys.reload()).await {
            crate::keys::log_reload(why, &done);
        }
    }
    if let Some(file) = access {
        match file.reopen() {
            Ok(()) => tracing::info!("{why}: access log reopened"),
            Err(e) => tracing::warn!("{why}: reopening the access log: {e}"),
        }
    }
    if handle.tls().is_none() && handle.keys().file().is_none() && access.is_none() {
        tracing::info!("{why}: nothing to reload (no TLS, no credentials file, no access log file)");
    }
}

/// Drains and stops `handle`: not ready from now on, the listener open
/// for the drain delay or until `cut` resolves, then [`Handle::shutdown`].
pub async fn drain(handle: Handle, cut: impl Future<Output = ()>) {
    handle.health().start_draining();
    let delay = handle.drain_delay();
    if !delay.is_zero() {
        tracing::info!(
            "draining: not ready; new connections are taken for {} s more",
            delay.as_secs()
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = cut => tracing::info!("drain delay cut short"),
        }
    }
    handle.shutdown().await;
}

/// The signals the command answers, installed before it says it listens
/// (so that a signal sent right after that line is never the default
/// action, which for SIGHUP ends the process).
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
    /// The access log file SIGHUP reopens.
    access: Option<Arc<AccessFile>>,
}

impl Signals {
    /// Installs the handlers (on the current tokio runtime); SIGHUP also
    /// reopens `access`.
    pub fn install(access: Option<Arc<AccessFile>>) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
                hup: signal(SignalKind::hangup())?,
                access,
            })
        }
        #[cfg(not(unix))]
        Ok(Self { access })
    }

    /// Serves until SIGTERM or SIGINT, reloading on SIGHUP, then drains
    /// `handle` and returns once it stopped.
    pub async fn serve(mut self, handle: Handle, stopping: impl FnOnce()) {
        #[cfg(unix)]
        {
            loop {
                tokio::select! {
                    _ = self.term.recv() => { tracing::info!("SIGTERM"); break; }
                    _ = self.int.recv() => { tracing::info!("SIGINT"); break; }
                    _ = self.hup.recv() => reload(&handle, self.access.as_deref(), "SIGHUP").await,
                }
            }
            stopping();
            let Self {
                mut term, mut int, ..
            } = self;
            let again = async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            };
            drain(handle, again).await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            stopping();
            drain(handle, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await;
        }
    }
}
