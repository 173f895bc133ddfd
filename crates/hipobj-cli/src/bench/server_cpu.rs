//! The server's CPU time as `hipobj-server` reports it in
//! `/.hipobj/metrics` (`hipobj_server_cpu_seconds_total{role=...}`), read
//! by `hipobj bench` before and after each row.
//!
//! The metrics are read with one plain HTTP/1.1 GET over a TCP connection
//! of their own (a scrape has no body worth a client library, and it must
//! not share the S3 client's pool with the rows it measures).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The roles the server reports, in its order.
pub(super) const ROLES: [&str; 4] = ["s3", "rdma", "nic", "other"];

/// Seconds by role at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Reading {
    /// In [`ROLES`] order.
    pub by_role: [f64; 4],
}

impl Reading {
    /// What was spent from `self` to `later`, by role.
    pub(super) fn until(&self, later: &Reading) -> Reading {
        let mut d = Reading::default();
        for i in 0..ROLES.len() {
            d.by_role[i] = (later.by_role[i] - self.by_role[i]).max(0.0);
        }
        d
    }

    /// Seconds of one role.
    pub(super) fn of(&self, role: &str) -> f64 {
        ROLES
            .iter()
            .position(|r| *r == role)
            .map_or(0.0, |i| self.by_role[i])
    }

    /// Everything but the soft NIC's workers: what the server's own code
    /// spent (a hardware NIC would take the NIC's share off the host).
    pub(super) fn own(&self) -> f64 {
        self.of("s3") + self.of("rdma") + self.of("other")
    }
}

/// The CPU figures of a Prometheus text (read by the `prometheus-parse`
/// crate), or `None` when it has none (a server that does not report its
/// CPU time). A text the parser refuses has none.
pub(super) fn parse(text: &str) -> Option<Reading> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).ok()?;
    let mut r = Reading::default();
    let mut seen = false;
    for s in &scrape.samples {
        if s.metric != "hipobj_server_cpu_seconds_total" {
            continue;
        }
        let v = match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        let Some(i) = s
            .labels
            .get("role")
            .and_then(|role| ROLES.iter().position(|r| *r == role))
        else {
            continue;
        };
        if v.is_finite() && v >= 0.0 {
            r.by_role[i] = v;
            seen = true;
        }
    }
    seen.then_some(r)
}

/// Where the metrics of the server at `endpoint` (`http://host:port`) are.
pub(super) fn metrics_url(endpoint: &str) -> Option<String> {
    endpoint
        .trim_end_matches('/')
        .starts_with("http://")
        .then(|| format!("{}/.hipobj/metrics", endpoint.trim_end_matches('/')))
}

/// Reads `url` (`http://host:port/path`; no TLS) and parses its CPU lines.
pub(super) fn scrape(url: &str) -> Result<Reading, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// metrics URLs are read"))?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/"), |(h, _)| (h, &rest[h.len()..]));
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let limit = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("{url}: {e}"))?;
    s.set_read_timeout(Some(limit))
        .map_err(|e| format!("{url}: {e}"))?;
    // A server with `metrics_token` wants it as a bearer token.
    let auth = std::env::var("HIPOBJ_METRICS_TOKEN")
        .ok()
        .filter(|t| !t.is_empty() && !t.contains(['\r', '\n']))
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| format!("{url}: {e}"))?;
    let mut body = Vec::new();
    // The whole answer is a few KiB; more is not a metrics page.
    s.take(1 << 20)
        .read_to_end(&mut body)
        .map_err(|e| format!("{url}: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    let status = text.lines().next().unwrap_or("");
    if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
        return Err(format!("{url}: {status}"));
    }
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    parse(body).ok_or_else(|| format!("{url}: no hipobj_server_cpu_seconds_total in the metrics"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_lines_are_read_and_nothing_else() {
        let text = "# HELP hipobj_http_requests_total x\nhipobj_http_requests_total 7\n\
                    # TYPE hipobj_server_cpu_seconds_total counter\n\
                    hipobj_server_cpu_seconds_total{role=\"s3\"} 1.500000\n\
                    hipobj_server_cpu_seconds_total{role=\"rdma\"} 0.25\n\
                    hipobj_server_cpu_seconds_total{role=\"nic\"} 3\n\
                    hipobj_server_cpu_seconds_total{role=\"gpu\"} 9\n\
                    hipobj_server_cpu_seconds_total{role=\"other\"} NaN\n";
        let r = parse(text).expect("CPU lines");
        assert_eq!(r.by_role, [1.5, 0.25, 3.0, 0.0]);
        assert_eq!(r.own(), 1.75);
        assert_eq!(parse("hipobj_http_requests_total 7\n"), None);
        let later = Reading {
            by_role: [2.0, 0.25, 2.0, 1.0],
        };
        // A counter never goes down; a restarted server reads as nothing spent.
        assert_eq!(r.until(&later).by_role, [0.5, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn only_plain_http_endpoints_have_a_metrics_url() {
        assert_eq!(
            metrics_url("http://127.0.0.1:9000/").as_deref(),
            Some("http://127.0.0.1:9000/.hipobj/metrics")
        );
        assert_eq!(metrics_url("https://s3.example"), None);
        assert!(scrape("https://127.0.0.1:1/x").is_err());
    }
}
