//! Counters of what the server did, served as Prometheus text at
//! `GET /.hipobj/metrics` (or on `metrics_listen`) and logged periodically
//! (docs/server.md, "Metrics").
//!
//! The text is written by the `prometheus-client` library. The counters
//! that the request path bumps directly stay plain atomics (the fields of
//! [`Metrics`]) and are handed to the encoder at each scrape, with the
//! figures read then (bindings, sessions, damage, CPU time, disk space);
//! requests by operation and status, their latency and the HTTP bytes are
//! the library's own families.
//!
//! Every label value is a `&'static str` chosen by the server (an S3
//! operation's name, a direction, a limit's name) or a status code: nothing
//! a client sends becomes a label, so no client can make the series count
//! grow.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of the metrics text (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Upper bounds of the latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The labels of `hipobj_s3_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    status: u16,
}

/// The label of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The server's counters. All are totals since start except `in_flight`
/// and `http_connections`.
#[derive(Debug)]
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
    /// Requests answered, by operation and status.
    requests: Family<RequestLabels, Counter>,
    /// Seconds from a request's head to its response's last byte, by
    /// operation.
    latency: Family<OperationLabel, Histogram, fn() -> Histogram>,
    /// HTTP body bytes received.
    http_bytes_in: Counter,
    /// HTTP body bytes sent.
    http_bytes_out: Counter,
    /// The warning lines of limits that acted (`crate::limit_log`).
    pub limit_log: crate::limit_log::LimitLog,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            http_requests: AtomicU64::default(),
            rdma_requests: AtomicU64::default(),
            rdma_binds: AtomicU64::default(),
            rdma_declines: AtomicU64::default(),
            rdma_gets: AtomicU64::default(),
            rdma_puts: AtomicU64::default(),
            rdma_bytes_written: AtomicU64::default(),
            rdma_bytes_read: AtomicU64::default(),
            rdma_errors: AtomicU64::default(),
            rdma_in_flight: AtomicI64::default(),
            rdma_v2_sessions: AtomicU64::default(),
            rdma_v2_errors: AtomicU64::default(),
            rdma_v2_busy: AtomicU64::default(),
            http_connections: AtomicI64::default(),
            http_connections_refused: AtomicU64::default(),
            http_connections_closed_for_room: AtomicU64::default(),
            http_bodies_too_slow: AtomicU64::default(),
            http_unauthenticated_bodies_cut: AtomicU64::default(),
            http_chunked_bodies_unterminated: AtomicU64::default(),
            http_unsized_bodies_refused: AtomicU64::default(),
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            http_bytes_in: Counter::default(),
            http_bytes_out: Counter::default(),
            limit_log: crate::limit_log::LimitLog::default(),
        }
    }
}

/// Adds one to a counter.
pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// A limit acted: adds one to its counter `c` and logs it, at most once
    /// per window (`crate::limit_log`); `limit` is its name in
    /// `hipobj_limits_hit_total`.
    pub fn limit_acted(&self, c: &AtomicU64, limit: &'static str, what: impl FnOnce() -> String) {
        inc(c);
        self.limit_log.acted(limit, what);
    }
}

/// A value read at scrape time.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    /// A count.
    Count(u64),
    /// A gauge's level.
    Level(i64),
    /// Seconds or another fraction.
    Real(f64),
}

/// One metric read at scrape time: its name (a counter's without the
/// `_total` the encoder adds), help, type and labelled values.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The name.
    pub name: &'static str,
    /// The help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub counter: bool,
    /// The values; a label pair list empty for an unlabelled metric.
    pub values: Vec<(Vec<(&'static str, &'static str)>, Value)>,
}

impl Entry {
    /// An unlabelled counter.
    pub fn counter(name: &'static str, help: &'static str, v: Value) -> Self {
        Self {
            name,
            help,
            counter: true,
            values: vec![(Vec::new(), v)],
        }
    }

    /// An unlabelled gauge.
    pub fn gauge(name: &'static str, help: &'static str, v: Value) -> Self {
        Self {
            name,
            help,
            counter: false,
            values: vec![(Vec::new(), v)],
        }
    }
}

/// Hands scrape-time entries to the encoder.
#[derive(Debug)]
struct Scraped(Vec<Entry>);

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for e in &self.0 {
            let kind = if e.counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            let mut m = encoder.encode_descriptor(e.name, e.help, None, kind)?;
            match e.values.as_slice() {
                [(labels, v)] if labels.is_empty() => encode_value(e.counter, *v, m)?,
                values => {
                    for (labels, v) in values {
                        encode_value(e.counter, *v, m.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_value(
    counter: bool,
    v: Value,
    m: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    match (counter, v) {
        (true, Value::Count(n)) => ConstCounter::new(n).encode(m),
        (true, Value::Level(n)) => ConstCounter::new(u64::try_from(n).unwrap_or(0)).encode(m),
        (true, Value::Real(x)) => ConstCounter::new(x).encode(m),
        (false, Value::Count(n)) => ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX)).encode(m),
        (false, Value::Level(n)) => ConstGauge::new(n).encode(m),
        (false, Value::Real(x)) => ConstGauge::new(x).encode(m),
    }
}

/// Encodes `entries` alone (what [`crate::cpu::render`] serves).
pub(crate) fn encode_entries(entries: Vec<Entry>) -> String {
    let mut r = Registry::default();
    r.register_collector(Box::new(Scraped(entries)));
    let mut s = String::new();
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut s, &r);
    s
}

/// What a scrape reads besides the counters.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Client QPs bound now, when RDMA is on.
    pub bindings: Option<usize>,
    /// hipobj-rc-v2 sessions open and staging bytes held, when RDMA is on.
    pub v2: Option<(usize, usize)>,
    /// The data directory's file system: bytes free to the server and its
    /// size (fs store).
    pub disk: Option<(u64, u64)>,
    /// More entries (the CPU time, `crate::cpu`).
    pub more: Vec<Entry>,
}

/// Bytes free to an unprivileged writer and the size of the file system
/// holding `dir`.
pub(crate) fn disk_space(dir: &std::path::Path) -> std::io::Result<(u64, u64)> {
    let s = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    let unit = if s.f_frsize > 0 { s.f_frsize } else { s.f_bsize };
    Ok((s.f_bavail.saturating_mul(unit), s.f_blocks.saturating_mul(unit)))
}

/// The S3 side's transfer direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Request bodies (from clients).
    In,
    /// Response bodies (to clients).
    Out,
}

impl Metrics {
    /// Counts one answered request: its operation (a name the server
    /// chose, never one a client sent), status and time taken.
    pub fn record_request(&self, operation: &'static str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels { operation, status })
            .inc();
        self.latency
            .get_or_create(&OperationLabel { operation })
            .observe(took.as_secs_f64());
    }

    /// Counts HTTP body bytes.
    pub fn add_http_bytes(&self, d: Direction, n: u64) {
        match d {
            Direction::In => self.http_bytes_in.inc_by(n),
            Direction::Out => self.http_bytes_out.inc_by(n),
        };
    }

    /// The counters' entries, in exposition order.
    fn entries(&self) -> Vec<Entry> {
        let mut entries = self.rdma_entries();
        entries.extend(self.http_entries());
        entries
    }

    /// The RDMA layer's entries.
    fn rdma_entries(&self) -> Vec<Entry> {
        let c = |c: &AtomicU64| Value::Count(c.load(Ordering::Relaxed));
        let g = |c: &AtomicI64| Value::Level(c.load(Ordering::Relaxed));
        vec![
            Entry::counter(
                "hipobj_http_requests",
                "HTTP requests received",
                c(&self.http_requests),
            ),
            Entry::counter(
                "hipobj_rdma_requests",
                "requests carrying x-amz-rdma-token",
                c(&self.rdma_requests),
            ),
            Entry::counter(
                "hipobj_rdma_binds",
                "409 replies (client QP bound)",
                c(&self.rdma_binds),
            ),
            Entry::counter(
                "hipobj_rdma_declines",
                "501 replies (RDMA declined)",
                c(&self.rdma_declines),
            ),
            Entry::counter("hipobj_rdma_gets", "GETs served over RDMA", c(&self.rdma_gets)),
            Entry::counter(
                "hipobj_rdma_puts",
                "PUTs and UploadParts served over RDMA",
                c(&self.rdma_puts),
            ),
            Entry::counter(
                "hipobj_rdma_bytes_written",
                "bytes written into client memory",
                c(&self.rdma_bytes_written),
            ),
            Entry::counter(
                "hipobj_rdma_bytes_read",
                "bytes read from client memory",
                c(&self.rdma_bytes_read),
            ),
            Entry {
                name: "hipobj_rdma_bytes",
                help: "bytes moved over RDMA: in (read from client memory), out (written into it)",
                counter: true,
                values: vec![
                    (vec![("direction", "in")], c(&self.rdma_bytes_read)),
                    (vec![("direction", "out")], c(&self.rdma_bytes_written)),
                ],
            },
            Entry::counter(
                "hipobj_rdma_errors",
                "token requests that failed",
                c(&self.rdma_errors),
            ),
            Entry::counter(
                "hipobj_rdma_v2_sessions",
                "hipobj-rc-v2 sessions prepared",
                c(&self.rdma_v2_sessions),
            ),
            Entry::counter(
                "hipobj_rdma_v2_errors",
                "hipobj-rc-v2 control requests that failed",
                c(&self.rdma_v2_errors),
            ),
            Entry::gauge(
                "hipobj_rdma_in_flight",
                "RDMA transfers running",
                g(&self.rdma_in_flight),
            ),
            Entry::counter(
                "hipobj_rdma_v2_busy",
                "hipobj-rc-v2 requests answered 503 (session or staging quota)",
                c(&self.rdma_v2_busy),
            ),
        ]
    }

    /// The HTTP front's entries, and the limits that acted.
    fn http_entries(&self) -> Vec<Entry> {
        let c = |c: &AtomicU64| Value::Count(c.load(Ordering::Relaxed));
        let g = |c: &AtomicI64| Value::Level(c.load(Ordering::Relaxed));
        vec![
            Entry::gauge(
                "hipobj_http_connections",
                "HTTP connections open",
                g(&self.http_connections),
            ),
            Entry::counter(
                "hipobj_http_connections_refused",
                "connections refused: their address held its share",
                c(&self.http_connections_refused),
            ),
            Entry::counter(
                "hipobj_http_connections_closed_for_room",
                "idle connections closed to make room",
                c(&self.http_connections_closed_for_room),
            ),
            Entry::counter(
                "hipobj_http_bodies_too_slow",
                "request bodies cut below http.body_min_rate",
                c(&self.http_bodies_too_slow),
            ),
            Entry::counter(
                "hipobj_http_unauthenticated_bodies_cut",
                "unsigned request bodies cut at http.unauthenticated_body_limit",
                c(&self.http_unauthenticated_bodies_cut),
            ),
            Entry::counter(
                "hipobj_http_chunked_bodies_unterminated",
                "aws-chunked bodies refused without their final chunk",
                c(&self.http_chunked_bodies_unterminated),
            ),
            Entry::counter(
                "hipobj_http_unsized_bodies_refused",
                "chunked bodies without a length refused at http.unsized_body_limit or http.unsized_body_budget",
                c(&self.http_unsized_bodies_refused),
            ),
            Entry {
                name: "hipobj_limits_hit",
                help: "times a limit acted, by limit (docs/server.md, \"Limits\")",
                counter: true,
                values: vec![
                    (
                        vec![("limit", "max_connections_per_address")],
                        c(&self.http_connections_refused),
                    ),
                    (
                        vec![("limit", "connection_closed_for_room")],
                        c(&self.http_connections_closed_for_room),
                    ),
                    (vec![("limit", "body_min_rate")], c(&self.http_bodies_too_slow)),
                    (
                        vec![("limit", "unauthenticated_body_limit")],
                        c(&self.http_unauthenticated_bodies_cut),
                    ),
                    (
                        vec![("limit", "chunked_body_unterminated")],
                        c(&self.http_chunked_bodies_unterminated),
                    ),
                    (
                        vec![("limit", "unsized_body")],
                        c(&self.http_unsized_bodies_refused),
                    ),
                    (vec![("limit", "rdma_v2_quota")], c(&self.rdma_v2_busy)),
                ],
            },
        ]
    }

    /// The Prometheus text exposition of the counters alone, with the
    /// binding count when given (what a scrape serves is
    /// [`Metrics::render_scrape`]'s).
    pub fn render(&self, bindings: Option<usize>) -> String {
        self.render_scrape(Scrape {
            bindings,
            ..Scrape::default()
        })
    }

    /// The Prometheus text exposition of the counters and what `scrape`
    /// read.
    pub fn render_scrape(&self, scrape: Scrape) -> String {
        let n = |v: usize| Value::Count(u64::try_from(v).unwrap_or(u64::MAX));
        let mut all = self.entries();
        if let Some(b) = scrape.bindings {
            all.push(Entry::gauge("hipobj_rdma_bindings", "client QPs bound now", n(b)));
        }
        if let Some((sessions, staging)) = scrape.v2 {
            all.push(Entry::gauge(
                "hipobj_rdma_v2_open_sessions",
                "hipobj-rc-v2 sessions open now",
                n(sessions),
            ));
            all.push(Entry::gauge(
                "hipobj_rdma_v2_staging_bytes",
                "hipobj-rc-v2 staging bytes held now",
                n(staging),
            ));
        }
        let damage = hipobj_store::damage::counts();
        all.extend([
            Entry::counter(
                "hipobj_store_listing_skipped",
                "damaged objects left out of listings (each fails only its own reads)",
                Value::Count(damage.skipped_in_listings),
            ),
            Entry::counter(
                "hipobj_store_checksum_mismatches",
                "reads refused because stored bytes disagree with their checksum",
                Value::Count(damage.checksum_mismatches),
            ),
            Entry::counter(
                "hipobj_store_metadata_refusals",
                "requests refused because a bucket's owner record or setting is missing or damaged",
                Value::Count(damage.metadata_refusals),
            ),
        ]);
        if let Some((free, size)) = scrape.disk {
            all.push(Entry::gauge(
                "hipobj_store_disk_free_bytes",
                "bytes free to the server on the data directory's file system",
                Value::Count(free),
            ));
            all.push(Entry::gauge(
                "hipobj_store_disk_size_bytes",
                "size of the data directory's file system in bytes",
                Value::Count(size),
            ));
        }
        all.push(Entry {
            name: "hipobj_http_bytes",
            help: "HTTP body bytes: in (request bodies), out (response bodies)",
            counter: true,
            values: vec![
                (vec![("direction", "in")], Value::Count(self.http_bytes_in.get())),
                (
                    vec![("direction", "out")],
                    Value::Count(self.http_bytes_out.get()),
                ),
            ],
        });
        all.extend(scrape.more);
        let mut r = Registry::default();
        r.register_collector(Box::new(Scraped(all)));
        r.register(
            "hipobj_s3_requests",
            "S3 requests answered, by operation and status",
            self.requests.clone(),
        );
        r.register(
            "hipobj_s3_request_duration_seconds",
            "time from a request's head to its response's last byte, by operation",
            self.latency.clone(),
        );
        let mut s = String::new();
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut s, &r);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_operation_and_status() {
        let m = Metrics::default();
        inc(&m.http_requests);
        m.record_request("GetObject", 200, Duration::from_millis(3));
        m.record_request("GetObject", 404, Duration::from_millis(1));
        m.add_http_bytes(Direction::Out, 10);
        let text = m.render_scrape(Scrape {
            disk: Some((5, 9)),
            ..Scrape::default()
        });
        println!("{text}");
        for line in [
            "hipobj_http_requests_total 1\n",
            "hipobj_s3_requests_total{operation=\"GetObject\",status=\"200\"} 1\n",
            "hipobj_s3_requests_total{operation=\"GetObject\",status=\"404\"} 1\n",
            "hipobj_s3_request_duration_seconds_count{operation=\"GetObject\"} 2\n",
            "hipobj_http_bytes_total{direction=\"out\"} 10\n",
            "hipobj_store_disk_free_bytes 5\n",
            "# TYPE hipobj_http_connections gauge\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
