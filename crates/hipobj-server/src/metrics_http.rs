//! Serving the metrics (docs/server.md, "Metrics"): what one scrape
//! reads, who may read it (`metrics_token`), and the listener of their own
//! (`metrics_listen`), on which the S3 port's `/.hipobj/metrics` is off.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::{Metrics, Scrape};
use crate::rdma::Rdma;

/// What a scrape reads.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The RDMA engine, for the binding count.
    pub rdma: Option<Arc<Rdma>>,
    /// The hipobj-rc-v2 sessions.
    pub sessions: Option<Arc<hipobj_target::rc_v2::V2Sessions>>,
    /// The fs store's data directory, for its disk space.
    pub data_dir: Option<PathBuf>,
}

impl Source {
    /// The Prometheus text of everything, read now.
    pub(crate) async fn render(&self) -> String {
        let disk = match self.data_dir.clone() {
            Some(dir) => tokio::task::spawn_blocking(move || crate::metrics::disk_space(&dir))
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        let cpu = crate::cpu::read().await;
        self.metrics.render_scrape(Scrape {
            bindings: self.rdma.as_ref().map(|r| r.target().stats().bindings),
            v2: self
                .sessions
                .as_ref()
                .map(|s| (s.open_sessions(), s.staging_bytes())),
            disk,
            more: crate::cpu::entries(&cpu),
        })
    }
}

/// Who may read the metrics: anyone, or a request bearing the token.
#[derive(Clone, Debug, Default)]
pub(crate) struct Access {
    token: Option<Arc<str>>,
}

impl Access {
    /// `token` (`metrics_token`), when set, is required.
    pub(crate) fn new(token: Option<&str>) -> Self {
        Self {
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
        }
    }

    /// Whether `headers` carry `Authorization: Bearer <token>` (or no token
    /// is required). The comparison takes the same time wherever the
    /// first difference is.
    pub(crate) fn allows(&self, headers: &http::HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        aws_lc_rs::constant_time::verify_slices_are_equal(given.as_bytes(), token.as_bytes()).is_ok()
    }
}

/// The answer to a metrics request: the text, or `401` with nothing in it.
pub(crate) async fn answer(
    source: &Source,
    access: &Access,
    headers: &http::HeaderMap,
) -> http::Response<s3s::Body> {
    if !access.allows(headers) {
        let mut resp = http::Response::new(s3s::Body::empty());
        *resp.status_mut() = http::StatusCode::UNAUTHORIZED;
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        return resp;
    }
    let mut resp = http::Response::new(s3s::Body::from(source.render().await));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    resp
}

/// `404` with nothing in it.
fn not_found() -> http::Response<s3s::Body> {
    let mut resp = http::Response::new(s3s::Body::empty());
    *resp.status_mut() = http::StatusCode::NOT_FOUND;
    resp
}

/// Binds `addr` for the metrics listener.
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener, crate::Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| crate::Error::Io(format!("binding metrics_listen {addr}"), e))
}

async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    // A closed channel (every sender gone) also means stop.
    let _ = rx.wait_for(|s| *s).await;
}

/// Serves `GET /metrics` (and `/.hipobj/metrics`) on `listener` until
/// `stopped`; every other request is `404`.
pub(crate) async fn serve(
    listener: TcpListener,
    source: Source,
    access: Access,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = stop_requested(&mut stopped) => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("metrics listener: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (source, access) = (source.clone(), access.clone());
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let (source, access) = (source.clone(), access.clone());
            async move {
                let path = req.uri().path();
                let resp = if req.method() == http::Method::GET
                    && (path == "/metrics" || path == "/.hipobj/metrics")
                {
                    answer(&source, &access, req.headers()).await
                } else {
                    not_found()
                };
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(std::time::Duration::from_secs(10))
            .timer(hyper_util::rt::TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service);
        let mut stop = stopped.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, "metrics connection ended: {e}");
                },
                () = stop_requested(&mut stop) => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_opens() {
        let a = Access::new(Some("s3cret-token"));
        let mut h = http::HeaderMap::new();
        assert!(!a.allows(&h));
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer wrong"),
        );
        assert!(!a.allows(&h));
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer s3cret-token"),
        );
        assert!(a.allows(&h));
        assert!(Access::new(None).allows(&http::HeaderMap::new()));
    }
}
