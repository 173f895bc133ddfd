//! What `hipobj bench` prints: the table of rows, the goals' summary
//! (also in the JSON), and the chart.

use serde_json::json;

use super::{Driver, Row};
use crate::s3::human;

/// What a sweep says about the goals (docs/performance.md), each a list
/// of JSON objects, also printed as text.
#[derive(Debug, Default)]
pub(super) struct Goals {
    /// Per (size, op, mode, driver): the peak throughput and the drop from
    /// it at the largest concurrency.
    scaling: Vec<serde_json::Value>,
    /// Per (size, op, driver, concurrency): RDMA's client application CPU
    /// per GiB over plain HTTP's.
    app_ratio: Vec<serde_json::Value>,
    /// The same for the server's own threads (the soft NIC's excluded).
    server_ratio: Vec<serde_json::Value>,
    /// Per (size, op, mode, driver): both sides' own CPU per transfer at
    /// the largest concurrency over that at the smallest.
    per_op: Vec<serde_json::Value>,
    /// Per (size, op, driver, concurrency): RDMA's throughput over plain
    /// HTTP's, and both p50 latencies.
    speed: Vec<serde_json::Value>,
}

impl Goals {
    /// Adds the lists to the JSON output.
    pub(super) fn add_to(self, out: &mut serde_json::Value) {
        out["scaling"] = self.scaling.into();
        out["app_cpu_rdma_over_http"] = self.app_ratio.into();
        out["server_cpu_rdma_over_http"] = self.server_ratio.into();
        out["cpu_per_op_by_concurrency"] = self.per_op.into();
        out["rdma_over_http"] = self.speed.into();
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// The rows that ran, grouped by a key, in first-seen order.
fn groups<'r, K: PartialEq + Copy>(ran: &[&'r Row], key: impl Fn(&Row) -> K) -> Vec<Vec<&'r Row>> {
    let mut keys: Vec<K> = Vec::new();
    for r in ran {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    keys.iter()
        .map(|k| ran.iter().copied().filter(|r| key(r) == *k).collect())
        .collect()
}

/// The goals' figures of a sweep.
pub(super) fn summary(rows: &[Row]) -> Goals {
    let ran: Vec<&Row> = rows
        .iter()
        .filter(|r| r.skipped.is_none() && r.done() > 0)
        .collect();
    let mut g = Goals::default();
    for line in groups(&ran, |r| (r.size, r.op, r.mode, r.driver)) {
        let (Some(peak), Some(first), Some(last)) = (
            line.iter().max_by(|a, b| a.mib_s().total_cmp(&b.mib_s())),
            line.iter().min_by_key(|x| x.concurrency),
            line.iter().max_by_key(|x| x.concurrency),
        ) else {
            continue;
        };
        let r = line[0];
        g.scaling.push(json!({
            "size": r.size, "op": r.op, "mode": r.mode, "driver": r.driver.name(),
            "peak_mib_per_s": peak.mib_s(), "peak_concurrency": peak.concurrency,
            "largest_concurrency": last.concurrency, "mib_per_s_there": last.mib_s(),
            "drop_from_peak": 1.0 - last.mib_s() / peak.mib_s().max(1e-12),
        }));
        if let (Some(a), Some(b)) = (first.own_ms_per_op(), last.own_ms_per_op())
            && last.concurrency > first.concurrency
        {
            g.per_op.push(json!({
                "size": r.size, "op": r.op, "mode": r.mode, "driver": r.driver.name(),
                "smallest_concurrency": first.concurrency, "largest_concurrency": last.concurrency,
                "own_cpu_ms_per_op_there": [a, b], "ratio": ratio(b, a),
            }));
        }
    }
    for r in ran.iter().filter(|r| r.mode == "rdma") {
        let Some(h) = ran.iter().find(|h| {
            h.mode == "http"
                && (h.size, h.op, h.driver, h.concurrency) == (r.size, r.op, r.driver, r.concurrency)
        }) else {
            continue;
        };
        let key =
            json!({"size": r.size, "op": r.op, "driver": r.driver.name(), "concurrency": r.concurrency});
        let with = |mut v: serde_json::Value, extra: serde_json::Value| {
            if let (Some(v), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                v.extend(e.clone());
            }
            v
        };
        let (a, b) = (r.per_gib(r.cpu.app()), h.per_gib(h.cpu.app()));
        g.app_ratio.push(with(
            key.clone(),
            json!({"rdma_app_cpu_seconds_per_gib": a, "http_app_cpu_seconds_per_gib": b, "ratio": ratio(a, b)}),
        ));
        if let (Some(rs), Some(hs)) = (r.server, h.server) {
            let (a, b) = (r.per_gib(rs.own()), h.per_gib(hs.own()));
            g.server_ratio.push(with(
                key.clone(),
                json!({"rdma_server_cpu_seconds_per_gib": a, "http_server_cpu_seconds_per_gib": b,
                       "rdma_server_nic_cpu_seconds_per_gib": r.per_gib(rs.of("nic")), "ratio": ratio(a, b)}),
            ));
        }
        g.speed.push(with(
            key,
            json!({"rdma_mib_per_s": r.mib_s(), "http_mib_per_s": h.mib_s(), "ratio": ratio(r.mib_s(), h.mib_s()),
                   "rdma_p50_ms": r.pct(0.5), "http_p50_ms": h.pct(0.5)}),
        ));
    }
    g
}

/// The goals' figures as text.
pub(super) fn summary_text(g: &Goals) -> String {
    let mut out = String::new();
    let size = |v: &serde_json::Value| human(v["size"].as_u64().unwrap_or(0));
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let s = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    let share = |v: &serde_json::Value| {
        v["ratio"]
            .as_f64()
            .map_or_else(|| "n/a (nothing measurable)".to_owned(), |x| format!("{x:.2}x"))
    };
    if g.scaling
        .iter()
        .any(|v| v["largest_concurrency"] != v["peak_concurrency"])
    {
        out.push_str("\nThroughput at the largest concurrency against the peak:\n");
        for v in &g.scaling {
            out.push_str(&format!(
                "{:>9} {:>4} {:>5} {:>7}: peak {:.1} MiB/s at {}, {:.1} at {} ({:+.0}%)\n",
                size(v),
                s(v, "op"),
                s(v, "mode"),
                s(v, "driver"),
                f(v, "peak_mib_per_s"),
                v["peak_concurrency"],
                f(v, "mib_per_s_there"),
                v["largest_concurrency"],
                -100.0 * f(v, "drop_from_peak"),
            ));
        }
    }
    let ratios = [
        (
            &g.app_ratio,
            "Client application CPU per GiB, RDMA over plain HTTP:",
            "rdma_app_cpu_seconds_per_gib",
            "http_app_cpu_seconds_per_gib",
        ),
        (
            &g.server_ratio,
            "Server CPU per GiB without the soft NIC, RDMA over plain HTTP (goal: GET <= 0.2x, PUT <= 0.5x at 64 MiB):",
            "rdma_server_cpu_seconds_per_gib",
            "http_server_cpu_seconds_per_gib",
        ),
    ];
    for (list, title, a, b) in ratios {
        if list.is_empty() {
            continue;
        }
        out.push_str(&format!("\n{title}\n"));
        for v in list {
            out.push_str(&format!(
                "{:>9} {:>4} {:>7} x{:<4}: {:.3} / {:.3} s/GiB = {}\n",
                size(v),
                s(v, "op"),
                s(v, "driver"),
                v["concurrency"],
                f(v, a),
                f(v, b),
                share(v),
            ));
        }
    }
    if !g.per_op.is_empty() {
        out.push_str("\nCPU per transfer, client app + server without the soft NICs, largest concurrency over smallest (goal: <= 1.2x):\n");
        for v in &g.per_op {
            out.push_str(&format!(
                "{:>9} {:>4} {:>5} {:>7}: {:.3} ms at {}, {:.3} ms at {} = {}\n",
                size(v),
                s(v, "op"),
                s(v, "mode"),
                s(v, "driver"),
                v["own_cpu_ms_per_op_there"][0].as_f64().unwrap_or(0.0),
                v["smallest_concurrency"],
                v["own_cpu_ms_per_op_there"][1].as_f64().unwrap_or(0.0),
                v["largest_concurrency"],
                share(v),
            ));
        }
    }
    if !g.speed.is_empty() {
        out.push_str("\nRDMA over plain HTTP (goals: 64 MiB GET >= 1.0x; 4 KiB GET p50 RDMA <= HTTP):\n");
        for v in &g.speed {
            out.push_str(&format!(
                "{:>9} {:>4} {:>7} x{:<4}: {:.1} / {:.1} MiB/s = {}; p50 {:.3} / {:.3} ms\n",
                size(v),
                s(v, "op"),
                s(v, "driver"),
                v["concurrency"],
                f(v, "rdma_mib_per_s"),
                f(v, "http_mib_per_s"),
                share(v),
                f(v, "rdma_p50_ms"),
                f(v, "http_p50_ms"),
            ));
        }
    }
    out
}

/// The rows as a text table, one line each.
pub(super) fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>9} {:>4} {:>5} {:>7} {:>5} {:>5} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8}  note\n",
        "size",
        "op",
        "mode",
        "driver",
        "conc",
        "ops",
        "MiB/s",
        "p50 ms",
        "p99 ms",
        "app s/GiB",
        "NIC s/GiB",
        "srv s/GiB",
        "sNIC s/GiB",
        "ms/op"
    );
    let opt = |v: Option<f64>, width: usize, prec: usize| {
        v.map_or_else(|| format!("{:>width$}", "-"), |v| format!("{v:>width$.prec$}"))
    };
    for r in rows {
        let mut note = Vec::new();
        if let Some(why) = &r.skipped {
            note.push(format!("skipped: {why}"));
        }
        if r.declined > 0 {
            note.push(format!("{} declined: moved over HTTP", r.declined));
        }
        if r.errors > 0 {
            note.push(format!(
                "{} failed: {}",
                r.errors,
                r.first_error.as_deref().unwrap_or("?")
            ));
        }
        if let Some(c) = r.connections
            && r.concurrency > c
        {
            note.push(format!("{c} connections: the rest queue in the client"));
        }
        out.push_str(&format!(
            "{:>9} {:>4} {:>5} {:>7} {:>5} {:>5} {:>10.1} {:>9.2} {:>9.2} {:>10.3} {:>10.3} {} {} {}  {}\n",
            human(r.size),
            r.op,
            r.mode,
            r.driver.name(),
            r.concurrency,
            r.ops,
            r.mib_s(),
            r.pct(0.5),
            r.pct(0.99),
            r.per_gib(r.cpu.app()),
            r.per_gib(r.cpu.nic),
            opt(r.server.map(|s| r.per_gib(s.own())), 10, 3),
            opt(r.server.map(|s| r.per_gib(s.of("nic"))), 10, 3),
            opt(r.own_ms_per_op(), 8, 3),
            note.join("; ")
        ));
    }
    out.push_str(
        "app/NIC: this process's CPU (user+system, 10 ms resolution), NIC its soft NIC's workers (a \
         hardware NIC spends none), app every other thread; srv/sNIC: the server's own threads and its \
         soft NIC's, from its metrics (ns resolution); ms/op: app + srv CPU per transfer.\n",
    );
    out
}

/// A line chart of throughput (log scale) by concurrency, one line per
/// size, operation, mode and driver.
pub(super) fn svg(rows: &[Row], concs: &[usize]) -> String {
    let (w, h, left, bottom, top, right) = (860.0, 480.0, 70.0, 50.0, 30.0, 250.0);
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.skipped.is_none() && r.mib_s() > 0.0)
        .collect();
    let hi = measured
        .iter()
        .map(|r| r.mib_s())
        .fold(1.0, f64::max)
        .log10()
        .ceil();
    let lo = measured
        .iter()
        .map(|r| r.mib_s())
        .fold(f64::INFINITY, f64::min)
        .min(hi.powi(10))
        .log10()
        .floor()
        .min(hi - 1.0);
    let lo = if lo.is_finite() { lo } else { hi - 1.0 };
    let mut xs: Vec<usize> = concs.to_vec();
    xs.sort_unstable();
    xs.dedup();
    let x = |c: usize| {
        let i = xs.iter().position(|&v| v == c).unwrap_or(0);
        left + (w - left - right) * (i as f64 + 0.5) / xs.len().max(1) as f64
    };
    let y = |v: f64| h - bottom - (h - bottom - top) * (v.max(1e-9).log10() - lo) / (hi - lo).max(1e-9);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">hipobj bench: throughput (MiB/s, log scale) by transfers in flight</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        (w - right + left) / 2.0,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    let mut e = lo;
    while e <= hi {
        let v = 10f64.powf(e);
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><line x1=\"{left}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n",
            left - 6.0,
            y(v) + 4.0,
            if v >= 1.0 { format!("{v:.0}") } else { format!("{v}") },
            y(v),
            w - right,
            y(v)
        ));
        e += 1.0;
    }
    for &c in &xs {
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{c}</text>\n",
            x(c),
            h - bottom + 18.0
        ));
    }
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">transfers in flight</text>\n",
        (w - right + left) / 2.0,
        h - 8.0
    ));
    const COLORS: [&str; 10] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
        "#17becf",
    ];
    let mut series: Vec<(u64, &str, &str, Driver)> = Vec::new();
    for r in &measured {
        let k = (r.size, r.op, r.mode, r.driver);
        if !series.contains(&k) {
            series.push(k);
        }
    }
    for (n, (size, op, mode, driver)) in series.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        let dash = if *driver == Driver::Async {
            " stroke-dasharray=\"6 3\""
        } else {
            ""
        };
        let mut pts: Vec<(f64, f64)> = measured
            .iter()
            .filter(|r| (r.size, r.op, r.mode, r.driver) == (*size, *op, *mode, *driver))
            .map(|r| (x(r.concurrency), y(r.mib_s())))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let line: Vec<String> = pts.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            line.join(" ")
        ));
        for (px, py) in &pts {
            out.push_str(&format!(
                "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\" fill=\"{color}\"/>\n"
            ));
        }
        let ly = top + 16.0 * n as f64;
        out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"3\"{dash}/><text x=\"{}\" y=\"{}\">{} {op} {mode} {}</text>\n",
            w - right + 10.0,
            w - right + 35.0,
            w - right + 40.0,
            ly + 4.0,
            human(*size),
            driver.name()
        ));
    }
    out.push_str("</svg>\n");
    out
}
