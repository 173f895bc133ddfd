//! `hipobj bench`: GET and PUT throughput, latency and CPU time per GiB,
//! over RDMA and over plain HTTP against the same server, swept over how
//! many transfers are in flight and how they are driven.
//!
//! Two drivers:
//!
//! - `threads`: one OS thread per transfer in flight (named `bench-<n>`),
//!   each with its own buffer, each making blocking calls.
//! - `async`: plain HTTP as one tokio task per transfer in flight on the
//!   session's two-worker runtime, asynchronous all the way down: the two
//!   workers carry every request, no thread per transfer. hipObject's
//!   transfers are blocking calls (`hipobj_s3` drives the SDK with
//!   `Handle::block_on` inside the transfer, and the library waits for its
//!   completions), so an asynchronous program can only hand each one to a
//!   pool of blocking threads and await it, as `spawn_blocking` does; the
//!   async RDMA rows do that: one future per transfer in flight, all polled
//!   by one thread, each sending its transfers to a pool of blocking
//!   threads (`bench-pool-<n>`) and awaiting the answer. Every RDMA transfer
//!   in flight still holds an OS thread.
//!
//! CPU time is split by thread (see `cpu.rs`): the soft NIC's workers apart
//! from everything else, because a hardware NIC would not spend host CPU.
//! The server's CPU time, split the same way by the server itself, is read
//! from its metrics before and after each row (`server_cpu.rs`).
//!
//! A row in which any transfer failed makes the command fail, after the
//! results are printed, with the first failure's reason.

mod calibrate;
mod report;
mod server_cpu;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use hipobj::Registration;
use hipobj_s3::{RdmaS3Client, Span};
use serde_json::json;

use self::report::{summary, summary_text, svg, table};
use crate::cpu::{self, Split};
use crate::error::{CliError, CliResult};
use crate::s3::{self, Conn, S3Url, Session, human, parse_size};

/// How transfers are driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DriverArg {
    /// One OS thread per transfer in flight.
    Threads,
    /// One tokio task per transfer in flight (RDMA ones on the blocking pool).
    Async,
    /// Both, one after the other.
    Both,
}

/// Arguments of `hipobj bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// s3://bucket/prefix: objects are written under this prefix.
    url: String,
    /// Object sizes, comma-separated.
    #[arg(long, default_value = "4KiB,1MiB,64MiB", value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<u64>,
    /// Transfers in flight at once, comma-separated: each value is a row (1 to
    /// 256, the most buffers hipObject registers at once).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// How the transfers are driven: threads, async or both.
    #[arg(long, value_enum, default_value_t = DriverArg::Threads)]
    driver: DriverArg,
    /// Transfers per row (default: about 256 MiB worth, 4 to 512; never
    /// fewer than the concurrency).
    #[arg(long)]
    ops: Option<usize>,
    /// Most buffer memory one row may use (size times concurrency); larger
    /// rows are reported as skipped.
    #[arg(long, default_value = "4GiB", value_parser = parse_size)]
    max_memory: u64,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON results to this file (whatever `--json` says).
    #[arg(long)]
    json_file: Option<String>,
    /// Also write a chart of throughput by concurrency to this SVG file.
    #[arg(long)]
    plot: Option<String>,
    /// Where the server's CPU time is read before and after each row
    /// (`hipobj_server_cpu_seconds_total`): default the endpoint's
    /// `/.hipobj/metrics` when it is http://; `none` not to read it.
    #[arg(long)]
    server_metrics: Option<String>,
    /// Measure the machine first: loopback TCP and memcpy bandwidth.
    #[arg(long)]
    calibrate: bool,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Driver {
    Threads,
    Async,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Threads => "threads",
            Driver::Async => "async",
        }
    }
}

/// One measured (or skipped) row.
#[derive(Clone, Debug)]
struct Row {
    size: u64,
    op: &'static str,
    mode: &'static str,
    driver: Driver,
    concurrency: usize,
    /// Transfers asked for.
    ops: usize,
    /// Transfers that failed (not counted in the throughput).
    errors: usize,
    first_error: Option<String>,
    declined: usize,
    secs: f64,
    lat_ms: Vec<f64>,
    cpu: Split,
    /// RDMA rows: the client's connections (transfers beyond wait for one).
    connections: Option<usize>,
    skipped: Option<String>,
    /// The server's CPU seconds in the row, by role, when it reports them.
    server: Option<server_cpu::Reading>,
}

impl Row {
    fn done(&self) -> usize {
        self.ops.saturating_sub(self.errors)
    }
    fn gib(&self) -> f64 {
        (self.size as f64 * self.done() as f64) / (1u64 << 30) as f64
    }
    fn mib_s(&self) -> f64 {
        if self.skipped.is_some() {
            return 0.0;
        }
        (self.size as f64 * self.done() as f64) / (1 << 20) as f64 / self.secs.max(1e-9)
    }
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat_ms.clone();
        v.sort_by(f64::total_cmp);
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v.get(i).copied().unwrap_or(0.0)
    }
    fn per_gib(&self, secs: f64) -> f64 {
        secs / self.gib().max(1e-12)
    }
    /// Milliseconds of CPU per completed transfer.
    fn ms_per_op(&self, secs: f64) -> f64 {
        1e3 * secs / self.done().max(1) as f64
    }
    /// The CPU both sides' own code spent per transfer, in ms: the client's
    /// application threads and the server's threads, the soft NICs' workers
    /// excluded on both.
    fn own_ms_per_op(&self) -> Option<f64> {
        self.server.map(|s| self.ms_per_op(self.cpu.app() + s.own()))
    }

    fn json(&self) -> serde_json::Value {
        let c = &self.cpu;
        json!({
            "size": self.size, "op": self.op, "mode": self.mode, "driver": self.driver.name(),
            "concurrency": self.concurrency, "ops": self.ops, "completed": self.done(),
            "declined": self.declined, "errors": self.errors, "first_error": self.first_error,
            "skipped": self.skipped, "client_connections": self.connections,
            "seconds": self.secs, "mib_per_s": self.mib_s(),
            "latency_ms": {"p50": self.pct(0.5), "p99": self.pct(0.99)},
            "cpu_seconds": c.total, "cpu_seconds_per_gib": self.per_gib(c.total),
            "app_cpu_seconds": c.app(), "app_cpu_seconds_per_gib": self.per_gib(c.app()),
            "nic_cpu_seconds": c.nic, "nic_cpu_seconds_per_gib": self.per_gib(c.nic),
            "cpu_seconds_by_thread": {
                "bench": c.bench, "runtime": c.runtime, "other": c.other,
                "exited": c.exited, "nic": c.nic,
            },
            "server_cpu_seconds": self.server.map(|s| json!({
                "s3": s.of("s3"), "rdma": s.of("rdma"), "nic": s.of("nic"), "other": s.of("other"),
            })),
            "server_cpu_seconds_per_gib": self.server.map(|s| self.per_gib(s.own())),
            "server_nic_cpu_seconds_per_gib": self.server.map(|s| self.per_gib(s.of("nic"))),
            "server_cpu_ms_per_op": self.server.map(|s| self.ms_per_op(s.own())),
            "own_cpu_ms_per_op": self.own_ms_per_op(),
        })
    }
}

/// What every transfer of a row shares.
#[derive(Default)]
struct Tally {
    lat_ms: Vec<f64>,
    declined: usize,
    errors: usize,
    first_error: Option<String>,
}

impl Tally {
    fn note(m: &Mutex<Self>, started: Instant, outcome: Result<bool, String>) {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let mut t = m.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(declined) => {
                t.lat_ms.push(ms);
                t.declined += usize::from(declined);
            }
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert(e);
            }
        }
    }
}

/// One row's fixed inputs.
#[derive(Clone)]
struct Work {
    bucket: String,
    prefix: String,
    size: u64,
    n: usize,
    op: &'static str,
    ops: usize,
    conc: usize,
}

impl Work {
    /// Transfer `i` uses object `i mod concurrency`, so that the PUTs of a
    /// row write every object its GETs read.
    fn key(&self, i: usize) -> String {
        format!("{}hipobj-bench-{}-{}", self.prefix, self.size, i % self.conc)
    }
}

/// One RDMA transfer; `Ok(true)` when the server declined RDMA and the bytes
/// moved over HTTP.
fn rdma_once(c: &RdmaS3Client, reg: &mut Registration<'_>, w: &Work, key: &str) -> Result<bool, String> {
    let t = if w.op == "PUT" {
        c.put_object(reg, Span::whole(w.n), &w.bucket, key)
    } else {
        c.get_object(reg, Span::whole(w.n), &w.bucket, key, None)
    };
    t.map(|t| t.declined.is_some()).map_err(|e| e.to_string())
}

/// One plain HTTP transfer: a PUT of `body`, or a GET into `dst`.
async fn http_once(
    s3: &aws_sdk_s3::Client,
    w: &Work,
    key: &str,
    body: &Bytes,
    dst: &mut [u8],
) -> Result<bool, String> {
    if w.op == "PUT" {
        s3.put_object()
            .bucket(&w.bucket)
            .key(key)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .map_err(|e| hipobj_s3::Error::from_sdk("PutObject", &e).to_string())?;
        return Ok(false);
    }
    let out = s3
        .get_object()
        .bucket(&w.bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| hipobj_s3::Error::from_sdk("GetObject", &e).to_string())?;
    let mut body = out.body;
    let mut at = 0usize;
    while let Some(c) = body.next().await {
        let c = c.map_err(|e| format!("reading the object failed: {e}"))?;
        let slot = dst
            .get_mut(at..at + c.len())
            .ok_or("the server sent more bytes than asked for")?;
        slot.copy_from_slice(&c);
        at += c.len();
    }
    if at != w.n {
        return Err(format!("got {at} bytes of {}", w.n));
    }
    Ok(false)
}

/// Where the benchmark threads of a row meet the thread that measures it.
#[derive(Default)]
struct Gate {
    /// (arrivals so far, the stage the measuring thread has opened).
    state: Mutex<(usize, u32)>,
    cv: std::sync::Condvar,
}

impl Gate {
    /// A benchmark thread arrives and waits for `stage` to open.
    fn arrive(&self, stage: u32) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        while s.1 < stage {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The measuring thread waits for `count` arrivals in all.
    fn wait_for(&self, count: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < count {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The measuring thread opens `stage`.
    fn open(&self, stage: u32) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = stage;
        self.cv.notify_all();
    }
}

/// A plain HTTP GET's destination of `n` bytes, written now so that its
/// pages are faulted before the row's clock and CPU sample start, as an
/// RDMA row's registered buffers are. (`vec![0u8; n]` would come from
/// calloc untouched, and at 256 in flight the row would pay for 256 fresh
/// buffers' page faults inside its window.)
fn get_buffer(n: usize) -> Vec<u8> {
    vec![0xa5; n]
}

/// Runs one row with one OS thread per transfer in flight. The threads
/// are started and their buffers made before the clock and the CPU sample
/// start, and they stay alive until the closing sample is taken, so each
/// one's CPU time is read from its own `stat`.
fn threads_row(
    session: &Session,
    client: Option<&RdmaS3Client>,
    regs: &mut [Registration<'_>],
    w: &Work,
    bar: &indicatif::ProgressBar,
) -> (Tally, f64, Split) {
    let tally = Mutex::new(Tally::default());
    let next = AtomicUsize::new(0);
    let gate = Gate::default();
    let body = Bytes::from(vec![0xa5u8; if client.is_none() { w.n } else { 0 }]);
    let mut regs = regs.iter_mut();
    let (secs, split) = std::thread::scope(|sc| {
        let mut started = 0;
        for i in 0..w.conc {
            let reg = if client.is_some() { regs.next() } else { None };
            let (tally, next, gate, body) = (&tally, &next, &gate, &body);
            let spawned = std::thread::Builder::new()
                .name(format!("{}{i}", cpu::BENCH_THREAD_PREFIX))
                .spawn_scoped(sc, move || {
                    let mut dst = get_buffer(if reg.is_none() && w.op == "GET" { w.n } else { 0 });
                    let mut reg = reg;
                    gate.arrive(1);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= w.ops {
                            break;
                        }
                        let key = w.key(i);
                        let t = Instant::now();
                        let outcome = match (client, reg.as_mut()) {
                            (Some(c), Some(r)) => rdma_once(c, r, w, &key),
                            _ => session
                                .rt
                                .block_on(http_once(session.s3_client(), w, &key, body, &mut dst)),
                        };
                        Tally::note(tally, t, outcome);
                        bar.inc(1);
                    }
                    gate.arrive(2);
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => {
                    // The threads that did start run nothing (every transfer
                    // of the row counts as failed, with this reason).
                    next.store(w.ops, Ordering::Relaxed);
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    t.first_error
                        .get_or_insert(format!("cannot start thread {i}: {e}"));
                    break;
                }
            }
        }
        gate.wait_for(started);
        let a = cpu::sample();
        let t0 = Instant::now();
        gate.open(1);
        gate.wait_for(2 * started);
        let secs = t0.elapsed().as_secs_f64();
        let b = cpu::sample();
        gate.open(2);
        (secs, cpu::split(&a, &b, cpu::ticks_per_second()))
    });
    (tally.into_inner().unwrap_or_else(|e| e.into_inner()), secs, split)
}

/// One RDMA transfer handed from a task to the blocking pool, with the
/// buffer it runs on and where to send the buffer back with the outcome.
struct Job<'r, 'b> {
    index: usize,
    reg: &'r mut Registration<'b>,
    done: futures::channel::oneshot::Sender<(&'r mut Registration<'b>, Result<bool, String>)>,
}

/// Runs one row as asynchronous tasks. HTTP: tokio tasks on the runtime's
/// two workers, nothing else. RDMA: one future per transfer in flight, all
/// polled by this thread, each handing its transfers to a pool of blocking
/// threads (`bench-pool-<n>`, as many as transfers in flight: each blocking
/// call needs one) and awaiting the result, which is what
/// `spawn_blocking` would do; a pool of our own lets the futures lend their
/// buffers for the length of the call instead of giving them away.
fn async_row<'b>(
    session: &Session,
    client: Option<&RdmaS3Client>,
    regs: &mut [Registration<'b>],
    w: &Work,
    bar: &indicatif::ProgressBar,
) -> (Tally, f64, Split) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let (secs, split) = match client {
        Some(c) => {
            let (tx, rx) = std::sync::mpsc::channel::<Job<'_, 'b>>();
            let rx = Mutex::new(rx);
            std::thread::scope(|sc| {
                for i in 0..w.conc {
                    let rx = &rx;
                    let spawned = std::thread::Builder::new()
                        .name(format!("{}pool-{i}", cpu::BENCH_THREAD_PREFIX))
                        .spawn_scoped(sc, move || {
                            loop {
                                let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                                let Ok(job) = job else { return };
                                let key = w.key(job.index);
                                let outcome = rdma_once(c, job.reg, w, &key);
                                // The task may have gone; then so has its buffer's use.
                                let _ = job.done.send((job.reg, outcome));
                            }
                        });
                    if let Err(e) = spawned {
                        next.store(w.ops, Ordering::Relaxed);
                        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                        t.first_error
                            .get_or_insert(format!("cannot start thread {i}: {e}"));
                        break;
                    }
                }
                let a = cpu::sample();
                let t0 = Instant::now();
                let tasks = regs.iter_mut().map(|reg| {
                    let (tally, next, tx) = (&tally, &next, tx.clone());
                    async move {
                        let mut reg = reg;
                        loop {
                            let index = next.fetch_add(1, Ordering::Relaxed);
                            if index >= w.ops {
                                return;
                            }
                            let t = Instant::now();
                            let (done, wait) = futures::channel::oneshot::channel();
                            if tx.send(Job { index, reg, done }).is_err() {
                                return;
                            }
                            match wait.await {
                                Ok((r, outcome)) => {
                                    reg = r;
                                    Tally::note(tally, t, outcome);
                                    bar.inc(1);
                                }
                                Err(_) => {
                                    Tally::note(tally, t, Err("a transfer's thread ended".into()));
                                    return;
                                }
                            }
                        }
                    }
                });
                session.rt.block_on(futures::future::join_all(tasks));
                let secs = t0.elapsed().as_secs_f64();
                let b = cpu::sample();
                drop(tx);
                (secs, cpu::split(&a, &b, cpu::ticks_per_second()))
            })
        }
        None => {
            let w = Arc::new(w.clone());
            let body = Bytes::from(vec![0xa5u8; w.n]);
            // The GET buffers are made before the clock starts.
            let mut dsts: Vec<Vec<u8>> = (0..w.conc)
                .map(|_| get_buffer(if w.op == "GET" { w.n } else { 0 }))
                .collect();
            let a = cpu::sample();
            let t0 = Instant::now();
            session.rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..w.conc {
                    let (tally, next, w, bar) = (tally.clone(), next.clone(), w.clone(), bar.clone());
                    let (s3, body) = (session.s3_client().clone(), body.clone());
                    let mut dst = dsts.pop().unwrap_or_default();
                    set.spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= w.ops {
                                return;
                            }
                            let key = w.key(i);
                            let t = Instant::now();
                            let outcome = http_once(&s3, &w, &key, &body, &mut dst).await;
                            Tally::note(&tally, t, outcome);
                            bar.inc(1);
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            });
            let secs = t0.elapsed().as_secs_f64();
            let b = cpu::sample();
            (secs, cpu::split(&a, &b, cpu::ticks_per_second()))
        }
    };
    let tally = Arc::try_unwrap(tally)
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_else(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())));
    (tally, secs, split)
}

/// The client's connection pool: `HIPOBJ_MAX_TRANSFERS` when set, else
/// enough for the largest concurrency (at least the library's default).
fn pool_options(max_conc: usize) -> hipobj::Options {
    let mut o = hipobj::Options::from_env();
    if std::env::var_os("HIPOBJ_MAX_TRANSFERS").is_none() {
        let want = u32::try_from(max_conc).unwrap_or(hipobj::Options::MAX_TRANSFERS_LIMIT);
        o.max_transfers = want.clamp(
            hipobj::Options::DEFAULT_MAX_TRANSFERS,
            hipobj::Options::MAX_TRANSFERS_LIMIT,
        );
    }
    o
}

/// Runs the benchmark.
pub(crate) fn run(args: &Args) -> CliResult {
    let url = S3Url::parse(&args.url, false)?;
    check_args(args)?;
    let metrics = metrics_url(args);
    let calibration = args.calibrate.then(calibrate::run);
    let max_conc = args.concurrency.iter().copied().max().unwrap_or(1);
    let session = Session::open_with(&args.conn, Some(pool_options(max_conc)))?;
    session.warn_no_rdma();
    // One gateway is measured: the first given (a failover in the middle of
    // a row would mix two servers' figures).
    let client = session.rdma.as_ref().ok().and_then(|r| r.gateways.endpoint(0));
    let connections = client.map(|c| c.hipobj().instance().pool().size());
    let modes: Vec<bool> = if client.is_some() {
        vec![true, false]
    } else {
        vec![false]
    };
    let drivers = match args.driver {
        DriverArg::Threads => vec![Driver::Threads],
        DriverArg::Async => vec![Driver::Async],
        DriverArg::Both => vec![Driver::Threads, Driver::Async],
    };
    let total: usize = args
        .sizes
        .iter()
        .flat_map(|&s| args.concurrency.iter().map(move |&c| (s, c)))
        .filter(|&(s, c)| fits(args, s, c))
        .map(|(s, c)| ops_for(args, s, c) * 2 * modes.len() * drivers.len())
        .sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let bench = Bench {
        session: &session,
        url: &url,
        metrics: metrics.as_deref(),
        bar: &bar,
    };
    let mut rows = Vec::new();
    for &size in &args.sizes {
        for &driver in &drivers {
            for &concurrency in &args.concurrency {
                for &rdma in &modes {
                    for op in ["PUT", "GET"] {
                        let row = Row {
                            size,
                            op,
                            mode: if rdma { "rdma" } else { "http" },
                            driver,
                            concurrency,
                            ops: ops_for(args, size, concurrency),
                            errors: 0,
                            first_error: None,
                            declined: 0,
                            secs: 0.0,
                            lat_ms: Vec::new(),
                            cpu: Split::default(),
                            connections: if rdma { connections } else { None },
                            skipped: None,
                            server: None,
                        };
                        if fits(args, size, concurrency) {
                            rows.push(bench.measure(row, client.filter(|_| rdma))?);
                        } else {
                            rows.push(Row {
                                skipped: Some(format!(
                                    "{concurrency} x {} is over --max-memory {}",
                                    human(size),
                                    human(args.max_memory)
                                )),
                                ops: 0,
                                ..row
                            });
                        }
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    report(args, &rows, calibration)?;
    first_failure(&rows)
}

/// The checks of the sizes and concurrencies asked for.
fn check_args(args: &Args) -> CliResult {
    // Each RDMA transfer in flight has a registered buffer of its own.
    let limit = hipobj::MAX_BUFFERS;
    if args.concurrency.is_empty() || args.concurrency.iter().any(|&c| c == 0 || c > limit) {
        return Err(CliError::plain(format!(
            "--concurrency values must be 1 to {limit}"
        )));
    }
    for &s in &args.sizes {
        if s == 0 || s > s3::MAX_PART {
            return Err(CliError::coded(
                hipobj::ErrorKind::SizeTooLarge,
                format!("benchmark sizes must be 1 byte to 4 GiB, not {}", human(s)),
            ));
        }
    }
    Ok(())
}

/// Where the server's CPU figures are read: `--server-metrics`, or the
/// first endpoint's /metrics; none for `--server-metrics none`.
fn metrics_url(args: &Args) -> Option<String> {
    match args.server_metrics.as_deref() {
        Some("none") => None,
        Some(u) => Some(u.to_owned()),
        None => args
            .conn
            .endpoint_url
            .first()
            .and_then(|e| server_cpu::metrics_url(e)),
    }
}

/// Transfers in a row of `size` bytes at `conc` in flight: `--ops`, or
/// about 256 MiB worth (4 to 512), and at least one per transfer in flight.
fn ops_for(args: &Args, size: u64, conc: usize) -> usize {
    args.ops
        .unwrap_or_else(|| ((256u64 << 20) / size).clamp(4, 512) as usize)
        .max(conc)
}

/// Whether `conc` buffers of `size` bytes fit in `--max-memory`.
fn fits(args: &Args, size: u64, conc: usize) -> bool {
    size.saturating_mul(conc as u64) <= args.max_memory
}

/// What every row of one run shares.
struct Bench<'a> {
    session: &'a Session,
    url: &'a S3Url,
    metrics: Option<&'a str>,
    bar: &'a indicatif::ProgressBar,
}

impl Bench<'_> {
    /// Runs `row`'s transfers, through `client` by RDMA or, without one,
    /// over plain HTTP, and fills in what they measured.
    fn measure(&self, mut row: Row, client: Option<&RdmaS3Client>) -> CliResult<Row> {
        let (size, op, conc) = (row.size, row.op, row.concurrency);
        let n = usize::try_from(size).map_err(|_| CliError::plain("size too large"))?;
        self.bar.set_message(format!(
            "{op} {} {} {} x{conc}",
            human(size),
            row.mode,
            row.driver.name()
        ));
        let w = Work {
            bucket: self.url.bucket.clone(),
            prefix: self.url.key.clone(),
            size,
            n,
            op,
            ops: row.ops,
            conc,
        };
        // The buffers are registered before the row's clock starts.
        let mut regs = Vec::new();
        if let Some(c) = client {
            for _ in 0..conc {
                regs.push(c.hipobj().register(vec![0x5a; n]).map_err(|e| {
                    CliError::coded(e.kind(), format!("cannot register a benchmark buffer: {e}"))
                })?);
            }
        }
        let before = server_reading(self.metrics, self.bar);
        let (tally, secs, split) = match row.driver {
            Driver::Threads => threads_row(self.session, client, &mut regs, &w, self.bar),
            Driver::Async => async_row(self.session, client, &mut regs, &w, self.bar),
        };
        let after = server_reading(self.metrics, self.bar);
        row.server = before.zip(after).map(|(a, b)| a.until(&b));
        drop(regs);
        row.errors = row.ops.saturating_sub(tally.lat_ms.len());
        row.first_error = tally.first_error;
        row.declined = tally.declined;
        row.lat_ms = tally.lat_ms;
        row.secs = secs;
        row.cpu = split;
        Ok(row)
    }
}

/// Prints the table and the goals (or the JSON), and writes the files asked
/// for.
fn report(args: &Args, rows: &[Row], calibration: Option<calibrate::Calibration>) -> CliResult {
    let goals = summary(rows);
    let text = summary_text(&goals);
    let v: Vec<_> = rows.iter().map(Row::json).collect();
    let mut out = json!({ "results": v, "calibration": calibration.as_ref().map(|c| c.json()) });
    goals.add_to(&mut out);
    if let Some(path) = &args.json_file {
        std::fs::write(path, format!("{out:#}\n"))
            .map_err(|e| CliError::plain(format!("cannot write {path}: {}", s3::io_reason(&e))))?;
    }
    if args.json {
        println!("{out:#}");
    } else {
        if let Some(c) = &calibration {
            println!("{}", c.text());
        }
        print!("{}", table(rows));
        print!("{text}");
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(rows, &args.concurrency))
            .map_err(|e| CliError::plain(format!("cannot write {path}: {}", s3::io_reason(&e))))?;
    }
    Ok(())
}

/// The server's CPU reading now, or `None` (said once on the progress bar's
/// line) when it cannot be had.
fn server_reading(url: Option<&str>, bar: &indicatif::ProgressBar) -> Option<server_cpu::Reading> {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let url = url?;
    server_cpu::scrape(url)
        .map_err(|e| WARNED.call_once(|| bar.println(format!("hipobj: no server CPU figures: {e}"))))
        .ok()
}

/// The command's outcome: an error naming the first failed transfer when
/// any transfer of any row failed (the figures of such a row describe
/// fewer transfers than it was asked for).
fn first_failure(rows: &[Row]) -> CliResult {
    let failed: usize = rows.iter().map(|r| r.errors).sum();
    let asked: usize = rows.iter().map(|r| r.ops).sum();
    let Some(r) = rows.iter().find(|r| r.errors > 0) else {
        return Ok(());
    };
    Err(CliError::plain(format!(
        "{failed} of {asked} transfers failed; the first in the {} {} {} row ({} x{}): {}",
        human(r.size),
        r.op,
        r.mode,
        r.driver.name(),
        r.concurrency,
        r.first_error.as_deref().unwrap_or("no reason given")
    )))
}
