//! Liveness and readiness (docs/server.md, "Health and drain").
//!
//! * `GET /.hipobj/live`: the process answers. Always `200 live`.
//! * `GET /.hipobj/ready` (and its old name `/.hipobj/health`, whose 200
//!   still says `ok`): `200 ready`
//!   when the server is not draining, its store answered a real request,
//!   and its RDMA device's port is up (when RDMA is on); else `503 not
//!   ready: draining|store|rdma`.
//!
//! Both are unauthenticated, so they say nothing but that one word: no
//! path, no back-end address, no error text (those go to the log, once
//! per change). And they cost little: the store and device are asked at
//! most once per [`CACHE_FOR`], however many strangers ask, and one probe
//! runs at a time, so `/.hipobj/ready` cannot multiply load on the back
//! end. Draining is read at every request, so it shows at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use s3s::{Body, S3, S3Request};

use crate::rdma::Rdma;

/// How long a probe's answer is reused.
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(1);

/// How long the store may take to answer a probe before it counts as not
/// answering.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The paths served here (bucket names cannot start with `.`, so none
/// hides a bucket).
pub(crate) const LIVE: &str = "/.hipobj/live";
/// Readiness.
pub(crate) const READY: &str = "/.hipobj/ready";
/// Readiness under the name it had before `/.hipobj/ready` existed.
pub(crate) const HEALTH: &str = "/.hipobj/health";

/// What the readiness probe asks.
#[derive(Clone)]
pub enum Probe {
    /// The fs store: list its data directory.
    Dir(PathBuf),
    /// An S3 back end: a ListBuckets of one bucket.
    Store(Arc<dyn S3>),
}

impl Probe {
    /// The probe for the configured store, `store` being the one opened.
    pub fn of(storage: &crate::config::StorageConfig, store: &Arc<dyn S3>) -> Self {
        match storage {
            crate::config::StorageConfig::Fs { data_dir } => Self::Dir(data_dir.clone()),
            crate::config::StorageConfig::S3(_) => Self::Store(store.clone()),
        }
    }
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dir(_) => f.write_str("Probe::Dir"),
            Self::Store(_) => f.write_str("Probe::Store"),
        }
    }
}

/// Why the server is not ready (what `/.hipobj/ready` says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Shutting down: the listener closes after the drain delay.
    Draining,
    /// The store did not answer (or answered with a server error).
    Store,
    /// The RDMA device's port is not up.
    Rdma,
}

impl NotReady {
    fn word(self) -> &'static str {
        match self {
            Self::Draining => "draining",
            Self::Store => "store",
            Self::Rdma => "rdma",
        }
    }
}

/// Readiness: the drain flag and the cached probe.
#[derive(Debug)]
pub struct Health {
    draining: AtomicBool,
    probe: Probe,
    rdma: Option<Arc<Rdma>>,
    /// The last probe: when, and its answer. The lock is held while a
    /// probe runs, so that one runs at a time.
    last: tokio::sync::Mutex<Option<(Instant, Result<(), NotReady>)>>,
}

impl Health {
    /// Readiness over `probe` and, when on, the RDMA device.
    pub fn new(probe: Probe, rdma: Option<Arc<Rdma>>) -> Arc<Self> {
        Arc::new(Self {
            draining: AtomicBool::new(false),
            probe,
            rdma,
            last: tokio::sync::Mutex::new(None),
        })
    }

    /// From now on the server is not ready (shutdown began).
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown began.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Whether the server is ready: draining first, then the probe's
    /// answer, at most [`CACHE_FOR`] old.
    pub async fn ready(&self) -> Result<(), NotReady> {
        if self.draining() {
            return Err(NotReady::Draining);
        }
        let answer = self.probed().await;
        // Draining may have begun while this caller waited for the probe.
        if self.draining() {
            return Err(NotReady::Draining);
        }
        answer
    }

    /// The probe's answer, at most [`CACHE_FOR`] old; one probe at a time.
    async fn probed(&self) -> Result<(), NotReady> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = *last
            && at.elapsed() < CACHE_FOR
        {
            return answer;
        }
        let answer = self.probe().await;
        if last.map(|(_, a)| a) != Some(answer) {
            match answer {
                Ok(()) => tracing::info!("ready"),
                Err(why) => tracing::warn!("not ready: {}", why.word()),
            }
        }
        *last = Some((Instant::now(), answer));
        answer
    }

    /// Asks the store, then the device.
    async fn probe(&self) -> Result<(), NotReady> {
        let store = match &self.probe {
            Probe::Dir(dir) => {
                let dir = dir.clone();
                let read = tokio::task::spawn_blocking(move || {
                    std::fs::read_dir(&dir).and_then(|mut d| d.next().transpose().map(drop))
                });
                match tokio::time::timeout(PROBE_TIMEOUT, read).await {
                    Ok(Ok(Ok(()))) => Ok(()),
                    Ok(Ok(Err(e))) => {
                        tracing::debug!("readiness: the data directory does not read: {e}");
                        Err(NotReady::Store)
                    }
                    Ok(Err(_)) | Err(_) => Err(NotReady::Store),
                }
            }
            Probe::Store(store) => {
                let input = s3s::dto::ListBucketsInput {
                    max_buckets: Some(1),
                    ..Default::default()
                };
                let req = S3Request {
                    input,
                    method: http::Method::GET,
                    uri: http::Uri::from_static("/"),
                    headers: http::HeaderMap::new(),
                    extensions: http::Extensions::new(),
                    credentials: None,
                    region: None,
                    service: None,
                    trailing_headers: None,
                };
                match tokio::time::timeout(PROBE_TIMEOUT, store.list_buckets(req)).await {
                    Ok(Ok(_)) => Ok(()),
                    // The back end answered, and refused: it is up (its
                    // answer to this gateway's key is a configuration
                    // matter that every request shows).
                    Ok(Err(e))
                        if e.status_code()
                            .or_else(|| e.code().status_code())
                            .is_some_and(|s| !s.is_server_error()) =>
                    {
                        Ok(())
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(code = e.code().as_str(), "readiness: the S3 back end failed");
                        Err(NotReady::Store)
                    }
                    Err(_) => Err(NotReady::Store),
                }
            }
        };
        store?;
        if let Some(r) = &self.rdma {
            let target = r.target().clone();
            let up = tokio::task::spawn_blocking(move || target.port_active()).await;
            match up {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return Err(NotReady::Rdma),
                Ok(Err(e)) => {
                    tracing::debug!("readiness: querying the RDMA port failed: {e}");
                    return Err(NotReady::Rdma);
                }
                Err(_) => return Err(NotReady::Rdma),
            }
        }
        Ok(())
    }

    /// The answer to a request for one of this module's paths, or `None`
    /// for any other request.
    pub async fn answer<B>(&self, req: &http::Request<B>) -> Option<http::Response<Body>> {
        if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
            return None;
        }
        let (status, text) = match req.uri().path() {
            LIVE => (http::StatusCode::OK, "live\n".to_owned()),
            READY | HEALTH => match self.ready().await {
                // The old path keeps its old word.
                Ok(()) if req.uri().path() == HEALTH => (http::StatusCode::OK, "ok\n".to_owned()),
                Ok(()) => (http::StatusCode::OK, "ready\n".to_owned()),
                Err(why) => (
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {}\n", why.word()),
                ),
            },
            _ => return None,
        };
        let len = text.len();
        let body = if req.method() == http::Method::HEAD {
            Body::empty()
        } else {
            Body::from(text)
        };
        let mut resp = http::Response::new(body);
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
        h.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
        h.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-store"),
        );
        Some(resp)
    }

    /// A response while draining carries `Connection: close`, so that a
    /// client on a kept-alive connection opens its next one (to another
    /// server, once the load balancer has noticed) before the listener
    /// closes.
    pub fn mark<B>(&self, resp: &mut http::Response<B>) {
        if self.draining() {
            resp.headers_mut()
                .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_data_dir_that_went_away_is_not_ready_and_draining_shows_at_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap_or_else(|e| panic!("{e}"));
        let h = Health::new(Probe::Dir(data.clone()), None);
        assert_eq!(h.ready().await, Ok(()));
        std::fs::remove_dir(&data).unwrap_or_else(|e| panic!("{e}"));
        // Cached for a while, then asked again.
        *h.last.lock().await = None;
        assert_eq!(h.ready().await, Err(NotReady::Store));
        std::fs::create_dir(&data).unwrap_or_else(|e| panic!("{e}"));
        *h.last.lock().await = None;
        assert_eq!(h.ready().await, Ok(()));
        h.start_draining();
        assert_eq!(h.ready().await, Err(NotReady::Draining));
        let req = http::Request::get(READY)
            .body(())
            .unwrap_or_else(|e| panic!("{e}"));
        let resp = h.answer(&req).await.unwrap_or_else(|| panic!("not answered"));
        assert_eq!(resp.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        let other = http::Request::get("/.hipobj/readyx")
            .body(())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(h.answer(&other).await.is_none());
    }
}
