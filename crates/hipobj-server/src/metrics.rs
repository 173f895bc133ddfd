//! Counters of what the server did, served as Prometheus text at
//! `GET /.hipobj/metrics` and logged periodically (docs/server.md).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The server's counters. All are totals since start except `in_flight`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// HTTP requests received.
    pub http_requests: AtomicU64,
    /// Requests that carried `x-amz-rdma-token`.
    pub rdma_requests: AtomicU64,
    /// `409` replies: a client QP was bound.
    pub rdma_binds: AtomicU64,
    /// `501` replies: RDMA off or a transport not served.
    pub rdma_declines: AtomicU64,
    /// GETs served over RDMA (server WRITEs).
    pub rdma_gets: AtomicU64,
    /// PUTs and UploadParts served over RDMA (server READs).
    pub rdma_puts: AtomicU64,
    /// Bytes written into clients' memory.
    pub rdma_bytes_written: AtomicU64,
    /// Bytes read from clients' memory.
    pub rdma_bytes_read: AtomicU64,
    /// Token requests that ended in an S3 error (not counting 409 and 501).
    pub rdma_errors: AtomicU64,
    /// RDMA transfers running now.
    pub rdma_in_flight: AtomicI64,
    /// hipobj-rc-v2 sessions prepared.
    pub rdma_v2_sessions: AtomicU64,
    /// hipobj-rc-v2 control requests refused or failed (not counting 501).
    pub rdma_v2_errors: AtomicU64,
    /// Limits (docs/server.md, "Limits"): hipobj-rc-v2 requests answered
    /// 503 for want of a session or staging memory (the key's or the
    /// server's).
    pub rdma_v2_busy: AtomicU64,
    /// HTTP connections open now.
    pub http_connections: AtomicI64,
    /// Connections refused: their address held its share, none idle.
    pub http_connections_refused: AtomicU64,
    /// Idle connections closed to make room (an address at its share, or
    /// the server at its cap).
    pub http_connections_closed_for_room: AtomicU64,
    /// Request bodies cut for arriving slower than `http.body_min_rate`.
    pub http_bodies_too_slow: AtomicU64,
    /// Unsigned request bodies cut at `http.unauthenticated_body_limit`.
    pub http_unauthenticated_bodies_cut: AtomicU64,
    /// aws-chunked bodies refused for ending without the zero-length chunk.
    pub http_chunked_bodies_unterminated: AtomicU64,
    /// Chunked bodies without a length refused: longer than
    /// `http.unsized_body_limit`, or past `http.unsized_body_budget`.
    pub http_unsized_bodies_refused: AtomicU64,
}

/// Adds one to a counter.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// A copy of the counters, in exposition order.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, i64)> {
        let g = |c: &AtomicU64| i64::try_from(c.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        vec![
            (
                "hipobj_http_requests_total",
                "HTTP requests received",
                g(&self.http_requests),
            ),
            (
                "hipobj_rdma_requests_total",
                "requests carrying x-amz-rdma-token",
                g(&self.rdma_requests),
            ),
            (
                "hipobj_rdma_binds_total",
                "409 replies (client QP bound)",
                g(&self.rdma_binds),
            ),
            (
                "hipobj_rdma_declines_total",
                "501 replies (RDMA declined)",
                g(&self.rdma_declines),
            ),
            (
                "hipobj_rdma_gets_total",
                "GETs served over RDMA",
                g(&self.rdma_gets),
            ),
            (
                "hipobj_rdma_puts_total",
                "PUTs and UploadParts served over RDMA",
                g(&self.rdma_puts),
            ),
            (
                "hipobj_rdma_bytes_written_total",
                "bytes written into client memory",
                g(&self.rdma_bytes_written),
            ),
            (
                "hipobj_rdma_bytes_read_total",
                "bytes read from client memory",
                g(&self.rdma_bytes_read),
            ),
            (
                "hipobj_rdma_errors_total",
                "token requests that failed",
                g(&self.rdma_errors),
            ),
            (
                "hipobj_rdma_v2_sessions_total",
                "hipobj-rc-v2 sessions prepared",
                g(&self.rdma_v2_sessions),
            ),
            (
                "hipobj_rdma_v2_errors_total",
                "hipobj-rc-v2 control requests that failed",
                g(&self.rdma_v2_errors),
            ),
            (
                "hipobj_rdma_in_flight",
                "RDMA transfers running",
                self.rdma_in_flight.load(Ordering::Relaxed),
            ),
            (
                "hipobj_rdma_v2_busy_total",
                "hipobj-rc-v2 requests answered 503 (session or staging quota)",
                g(&self.rdma_v2_busy),
            ),
            (
                "hipobj_http_connections",
                "HTTP connections open",
                self.http_connections.load(Ordering::Relaxed),
            ),
            (
                "hipobj_http_connections_refused_total",
                "connections refused: their address held its share",
                g(&self.http_connections_refused),
            ),
            (
                "hipobj_http_connections_closed_for_room_total",
                "idle connections closed to make room",
                g(&self.http_connections_closed_for_room),
            ),
            (
                "hipobj_http_bodies_too_slow_total",
                "request bodies cut below http.body_min_rate",
                g(&self.http_bodies_too_slow),
            ),
            (
                "hipobj_http_unauthenticated_bodies_cut_total",
                "unsigned request bodies cut at http.unauthenticated_body_limit",
                g(&self.http_unauthenticated_bodies_cut),
            ),
            (
                "hipobj_http_chunked_bodies_unterminated_total",
                "aws-chunked bodies refused without their final chunk",
                g(&self.http_chunked_bodies_unterminated),
            ),
            (
                "hipobj_http_unsized_bodies_refused_total",
                "chunked bodies without a length refused at http.unsized_body_limit or http.unsized_body_budget",
                g(&self.http_unsized_bodies_refused),
            ),
        ]
    }

    /// The Prometheus text exposition.
    pub fn render(&self, bindings: Option<usize>) -> String {
        self.render_with(bindings, None)
    }

    /// The Prometheus text exposition, with the hipobj-rc-v2 gauges
    /// (sessions open, staging bytes held) when RDMA is on.
    pub fn render_with(&self, bindings: Option<usize>, v2: Option<(usize, usize)>) -> String {
        let mut s = String::new();
        let mut all = self.snapshot();
        if let Some(b) = bindings {
            all.push((
                "hipobj_rdma_bindings",
                "client QPs bound now",
                i64::try_from(b).unwrap_or(i64::MAX),
            ));
        }
        if let Some((sessions, staging)) = v2 {
            let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
            all.push((
                "hipobj_rdma_v2_open_sessions",
                "hipobj-rc-v2 sessions open now",
                n(sessions),
            ));
            all.push((
                "hipobj_rdma_v2_staging_bytes",
                "hipobj-rc-v2 staging bytes held now",
                n(staging),
            ));
        }
        let damage = hipobj_store::damage::counts();
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        all.extend([
            (
                "hipobj_store_listing_skipped_total",
                "damaged objects left out of listings (each fails only its own reads)",
                n(damage.skipped_in_listings),
            ),
            (
                "hipobj_store_checksum_mismatches_total",
                "reads refused because stored bytes disagree with their checksum",
                n(damage.checksum_mismatches),
            ),
            (
                "hipobj_store_metadata_refusals_total",
                "requests refused because a bucket's owner record or setting is missing or damaged",
                n(damage.metadata_refusals),
            ),
        ]);
        for (name, help, v) in all {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        }
        s
    }

    /// One log line of the RDMA counters.
    pub fn summary(&self) -> String {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "requests={} rdma: gets={} puts={} bytes_written={} bytes_read={} binds={} declines={} errors={} v2_sessions={} v2_errors={} in_flight={}",
            l(&self.http_requests),
            l(&self.rdma_gets),
            l(&self.rdma_puts),
            l(&self.rdma_bytes_written),
            l(&self.rdma_bytes_read),
            l(&self.rdma_binds),
            l(&self.rdma_declines),
            l(&self.rdma_errors),
            l(&self.rdma_v2_sessions),
            l(&self.rdma_v2_errors),
            self.rdma_in_flight.load(Ordering::Relaxed)
        )
    }
}
