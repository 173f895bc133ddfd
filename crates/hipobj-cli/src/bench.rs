//! `hipobj bench`: GET and PUT throughput, latency and the client's CPU
//! time per GiB, over RDMA and over plain HTTP against the same server.

use std::sync::Mutex;
use std::time::Instant;

use hipobj_s3::Span;
use serde_json::json;

use crate::error::{CliError, CliResult};
use crate::s3::{self, Conn, S3Url, Session, human, parse_size};

/// Arguments of `hipobj bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// s3://bucket/prefix: objects are written under this prefix.
    url: String,
    /// Object sizes, comma-separated.
    #[arg(long, default_value = "4KiB,1MiB,64MiB", value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<u64>,
    /// Transfers in flight at once (threads, each with its own registered buffer).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Transfers per size, operation and mode (default: about 256 MiB worth, 4 to 512).
    #[arg(long)]
    ops: Option<usize>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Also write a throughput chart to this SVG file.
    #[arg(long)]
    plot: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

/// One measured phase.
#[derive(Clone, Debug)]
struct Row {
    size: u64,
    op: &'static str,
    mode: &'static str,
    ops: usize,
    declined: usize,
    secs: f64,
    lat_ms: Vec<f64>,
    cpu_secs: f64,
}

impl Row {
    fn mib_s(&self) -> f64 {
        (self.size as f64 * self.ops as f64) / (1 << 20) as f64 / self.secs.max(1e-9)
    }
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat_ms.clone();
        v.sort_by(f64::total_cmp);
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v.get(i).copied().unwrap_or(0.0)
    }
    fn cpu_per_gib(&self) -> f64 {
        let gib = (self.size as f64 * self.ops as f64) / (1u64 << 30) as f64;
        self.cpu_secs / gib.max(1e-12)
    }
}

/// CPU seconds (user + system) of every thread of this process so far,
/// from /proc/self/stat (which counts threads that have exited too).
fn process_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    ticks as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    // sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on; getconf says so
    // without unsafe code.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Runs `ops` transfers of `size` on `conc` threads; returns the row.
#[allow(clippy::too_many_arguments)]
fn phase(
    session: &Session,
    url: &S3Url,
    size: u64,
    op: &'static str,
    rdma: bool,
    ops: usize,
    conc: usize,
    bar: &indicatif::ProgressBar,
) -> CliResult<Row> {
    let lat = Mutex::new(Vec::with_capacity(ops));
    let declined = Mutex::new(0usize);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let n = usize::try_from(size).map_err(|_| CliError::plain("size too large"))?;
    std::thread::scope(|sc| -> CliResult {
        let mut handles = Vec::new();
        for w in 0..conc {
            let (lat, declined, next) = (&lat, &declined, &next);
            handles.push(sc.spawn(move || -> CliResult {
                let key = S3Url {
                    bucket: url.bucket.clone(),
                    key: format!("{}hipobj-bench-{size}-{w}", url.key),
                };
                let mut buf = vec![(w as u8).wrapping_add(1); n];
                let client = session.rdma.as_ref().ok().filter(|_| rdma);
                let mut reg = match client {
                    Some(c) => Some(c.client.register(&mut buf)?),
                    None => None,
                };
                let mut local = vec![0u8; if reg.is_none() { n } else { 0 }];
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < ops {
                    let t = Instant::now();
                    match (client, reg.as_mut(), op) {
                        (Some(c), Some(r), "PUT") => {
                            let t = session
                                .rdma_call(c, |g| g.put_object(r, Span::whole(n), &key.bucket, &key.key))?;
                            *declined.lock().unwrap_or_else(|e| e.into_inner()) +=
                                usize::from(t.declined.is_some());
                        }
                        (Some(c), Some(r), _) => {
                            let t = session.rdma_call(c, |g| {
                                g.get_object(r, Span::whole(n), &key.bucket, &key.key, None)
                            })?;
                            *declined.lock().unwrap_or_else(|e| e.into_inner()) +=
                                usize::from(t.declined.is_some());
                        }
                        (_, _, "PUT") => {
                            s3::plain_put(session, &key, &local, None)?;
                        }
                        _ => {
                            s3::plain_get(session, &key, None, &mut local)?;
                        }
                    }
                    lat.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(t.elapsed().as_secs_f64() * 1e3);
                    bar.inc(1);
                }
                Ok(())
            }));
        }
        for h in handles {
            h.join()
                .map_err(|_| CliError::plain("a benchmark thread panicked"))??;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(Row {
        size,
        op,
        mode: if rdma { "rdma" } else { "http" },
        ops,
        declined: declined.into_inner().unwrap_or_else(|e| e.into_inner()),
        secs,
        lat_ms: lat.into_inner().unwrap_or_else(|e| e.into_inner()),
        cpu_secs: process_cpu() - cpu0,
    })
}

/// Runs the benchmark.
pub fn run(args: &Args) -> CliResult {
    let url = S3Url::parse(&args.url, false)?;
    if args.concurrency == 0 || args.concurrency > 256 {
        return Err(CliError::plain("--concurrency must be 1 to 256"));
    }
    for &s in &args.sizes {
        if s == 0 || s > s3::MAX_PART {
            return Err(CliError::coded(
                hipobj::ErrorKind::SizeTooLarge,
                format!("benchmark sizes must be 1 byte to 4 GiB, not {}", human(s)),
            ));
        }
    }
    let session = Session::open(&args.conn)?;
    session.warn_no_rdma();
    let modes: Vec<bool> = if session.rdma.is_ok() {
        vec![true, false]
    } else {
        vec![false]
    };
    let ops_for = |size: u64| {
        args.ops
            .unwrap_or_else(|| ((256u64 << 20) / size).clamp(4, 512) as usize)
            .max(args.concurrency)
    };
    let total: usize = args.sizes.iter().map(|&s| ops_for(s) * 2 * modes.len()).sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    for &size in &args.sizes {
        for &rdma in &modes {
            for op in ["PUT", "GET"] {
                bar.set_message(format!(
                    "{op} {} {}",
                    human(size),
                    if rdma { "rdma" } else { "http" }
                ));
                rows.push(phase(
                    &session,
                    &url,
                    size,
                    op,
                    rdma,
                    ops_for(size),
                    args.concurrency,
                    &bar,
                )?);
            }
        }
    }
    bar.finish_and_clear();
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "size": r.size, "op": r.op, "mode": r.mode, "ops": r.ops, "declined": r.declined,
                    "concurrency": args.concurrency, "seconds": r.secs, "mib_per_s": r.mib_s(),
                    "latency_ms": {"p50": r.pct(0.5), "p99": r.pct(0.99)},
                    "cpu_seconds": r.cpu_secs, "cpu_seconds_per_gib": r.cpu_per_gib(),
                })
            })
            .collect();
        println!("{:#}", json!({ "results": v }));
    } else {
        println!(
            "{:>9} {:>4} {:>5} {:>5} {:>10} {:>9} {:>9} {:>12}  note",
            "size", "op", "mode", "ops", "MiB/s", "p50 ms", "p99 ms", "CPU s/GiB"
        );
        for r in &rows {
            let note = if r.declined > 0 {
                format!("{} declined: moved over HTTP", r.declined)
            } else {
                String::new()
            };
            println!(
                "{:>9} {:>4} {:>5} {:>5} {:>10.1} {:>9.2} {:>9.2} {:>12.3}  {note}",
                human(r.size),
                r.op,
                r.mode,
                r.ops,
                r.mib_s(),
                r.pct(0.5),
                r.pct(0.99),
                r.cpu_per_gib()
            );
        }
        println!("CPU is this process's user+system time (all its threads), at 10 ms resolution.");
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(&rows, &args.sizes))
            .map_err(|e| CliError::plain(format!("cannot write {path}: {}", s3::io_reason(&e))))?;
    }
    Ok(())
}

/// A line chart of throughput by size, one line per operation and mode.
fn svg(rows: &[Row], sizes: &[u64]) -> String {
    let (w, h, left, bottom, top, right) = (720.0, 420.0, 70.0, 50.0, 30.0, 170.0);
    let max = rows.iter().map(Row::mib_s).fold(1.0, f64::max) * 1.1;
    let x = |i: usize| left + (w - left - right) * (i as f64 + 0.5) / sizes.len().max(1) as f64;
    let y = |v: f64| h - bottom - (h - bottom - top) * v / max;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">hipobj bench: throughput (MiB/s) by object size</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        (w - right + left) / 2.0,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text><line x1=\"{left}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n",
            left - 6.0, y(v) + 4.0, y(v), w - right, y(v)
        ));
    }
    for (i, s) in sizes.iter().enumerate() {
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            x(i),
            h - bottom + 18.0,
            human(*s)
        ));
    }
    let series = [
        ("GET", "rdma", "#1f77b4"),
        ("GET", "http", "#aec7e8"),
        ("PUT", "rdma", "#d62728"),
        ("PUT", "http", "#ff9896"),
    ];
    for (n, (op, mode, color)) in series.iter().enumerate() {
        let pts: Vec<String> = sizes
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                rows.iter()
                    .find(|r| r.size == *s && r.op == *op && r.mode == *mode)
                    .map(|r| format!("{:.1},{:.1}", x(i), y(r.mib_s())))
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        ));
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            out.push_str(&format!(
                "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{color}\"/>\n"
            ));
        }
        let ly = top + 20.0 * n as f64;
        out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{op} {mode}</text>\n",
            w - right + 15.0, w - right + 40.0, w - right + 46.0, ly + 4.0
        ));
    }
    out.push_str("</svg>\n");
    out
}
