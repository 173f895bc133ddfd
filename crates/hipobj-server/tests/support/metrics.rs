//! The server's metrics read as Prometheus reads them: the text is parsed
//! by the `prometheus-parse` crate, never by hand, so a test sees what a
//! scraper would (a line it could not parse is not there).

use std::net::SocketAddr;

use prometheus_parse::{Sample, Scrape, Value};

/// Parsed metrics.
pub(crate) struct Metrics(Scrape);

/// Parses a metrics text (a whole HTTP response's: its head is left out).
pub(crate) fn parse(text: &str) -> Metrics {
    let text = text.split_once("\r\n\r\n").map_or(text, |(_, body)| body);
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    Metrics(Scrape::parse(lines).unwrap_or_else(|e| panic!("{e}: {text}")))
}

/// `GET /.hipobj/metrics` of the server at `addr` (HTTP), as text.
pub(crate) async fn text(addr: SocketAddr) -> String {
    super::wire::metrics(addr).await
}

/// `GET /.hipobj/metrics` of the server at `addr` (HTTP), parsed.
pub(crate) async fn scrape(addr: SocketAddr) -> Metrics {
    parse(&text(addr).await)
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

impl Metrics {
    /// The samples of `name` (for a histogram, its base name).
    pub(crate) fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0.samples.iter().filter(move |s| s.metric == name)
    }

    /// The value of `name` whose labels include `labels` (`None`: no such
    /// series, or more than one).
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self
            .samples(name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
        let one = found.next()?;
        if found.next().is_some() {
            return None;
        }
        number(&one.value)
    }

    /// The sum of every series of `name` whose labels include `labels`.
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .filter_map(|s| number(&s.value))
            .sum()
    }

    /// Every sample.
    pub(crate) fn all(&self) -> &[Sample] {
        &self.0.samples
    }
}

/// The unlabelled value of `name` in `text` (`None`: not there).
pub(crate) fn value(text: &str, name: &str) -> Option<f64> {
    parse(text).value(name, &[])
}
