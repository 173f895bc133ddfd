//! `hipobj bench`: GET and PUT throughput, latency and CPU time per GiB,
//! over RDMA and over plain HTTP against the same server, swept over how
//! many transfers are in flight and how they are driven.
//!
//! Two drivers:
//!
//! - `threads`: one OS thread per transfer in flight (named `bench-<n>`),
//!   each with its own buffer, each making blocking calls.
//! - `async`: one tokio task per transfer in flight on the session's
//!   two-worker runtime. Plain HTTP is asynchronous all the way down: the
//!   two workers carry every request. hipObject's transfers are blocking
//!   calls (`hipobj_s3` drives the SDK with `Handle::block_on` inside the
//!   transfer), so an asynchronous program can only hand each one to the
//!   runtime's blocking pool (`spawn_blocking`), as the crate's docs say;
//!   that is what the async RDMA rows measure: every RDMA transfer in flight
//!   still holds an OS thread, now a pooled one.
//!
//! CPU time is split by thread (see `cpu.rs`): the soft NIC's workers apart
//! from everything else, because a hardware NIC would not spend host CPU.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use hipobj::Registration;
use hipobj_s3::{RdmaS3Client, Span};
use serde_json::json;

use crate::cpu::{self, Split};
use crate::error::{CliError, CliResult};
use crate::s3::{self, Conn, S3Url, Session, human, parse_size};

/// How transfers are driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverArg {
    /// One OS thread per transfer in flight.
    Threads,
    /// One tokio task per transfer in flight (RDMA ones on the blocking pool).
    Async,
    /// Both, one after the other.
    Both,
}

/// Arguments of `hipobj bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// s3://bucket/prefix: objects are written under this prefix.
    url: String,
    /// Object sizes, comma-separated.
    #[arg(long, default_value = "4KiB,1MiB,64MiB", value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<u64>,
    /// Transfers in flight at once, comma-separated: each value is a row (1 to 1024).
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
    /// Also write a chart of throughput by concurrency to this SVG file.
    #[arg(long)]
    plot: Option<String>,
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
fn rdma_once(c: &RdmaS3Client, reg: &mut Registration<'static>, w: &Work, key: &str) -> Result<bool, String> {
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
            .map_err(|e| format!("PutObject: {}", DisplayErrorContext(e)))?;
        return Ok(false);
    }
    let out = s3
        .get_object()
        .bucket(&w.bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("GetObject: {}", DisplayErrorContext(e)))?;
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

/// Registered buffers, kept for the whole run and reused by every row of
/// their size. An RDMA transfer on the blocking pool needs a registration
/// it can own (`'static`), and a registration borrows its memory, so the
/// memory is leaked: it lives until the process exits.
#[derive(Default)]
struct Slots {
    free: HashMap<usize, Vec<Registration<'static>>>,
}

impl Slots {
    fn take(
        &mut self,
        client: &hipobj::Client,
        n: usize,
        count: usize,
    ) -> CliResult<Vec<Registration<'static>>> {
        let free = self.free.entry(n).or_default();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            match free.pop() {
                Some(r) => out.push(r),
                None => {
                    let mem: &'static mut [u8] = Box::leak(vec![0x5a; n].into_boxed_slice());
                    out.push(client.register(mem).map_err(|e| {
                        CliError::coded(e.kind(), format!("cannot register a benchmark buffer: {e}"))
                    })?);
                }
            }
        }
        Ok(out)
    }

    fn give_back(&mut self, n: usize, regs: Vec<Registration<'static>>) {
        self.free.entry(n).or_default().extend(regs);
    }
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

/// Runs one row with one OS thread per transfer in flight. The threads
/// are started and their buffers made before the clock and the CPU sample
/// start, and they stay alive until the closing sample is taken, so each
/// one's CPU time is read from its own `stat`.
fn threads_row(
    session: &Session,
    client: Option<&RdmaS3Client>,
    regs: &mut [Registration<'static>],
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
                    let mut dst = vec![0u8; if reg.is_none() && w.op == "GET" { w.n } else { 0 }];
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
                                .block_on(http_once(&session.s3, w, &key, body, &mut dst)),
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

/// Runs one row as tokio tasks: HTTP ones on the runtime's workers, RDMA
/// ones each handing every transfer to the blocking pool.
fn async_row(
    session: &Session,
    client: Option<&RdmaS3Client>,
    regs: Vec<Registration<'static>>,
    w: &Work,
    bar: &indicatif::ProgressBar,
) -> (Tally, f64, Split, Vec<Registration<'static>>) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let w = Arc::new(w.clone());
    let body = Bytes::from(vec![0xa5u8; if client.is_none() { w.n } else { 0 }]);
    // The GET buffers are made before the clock starts.
    let mut dsts: Vec<Vec<u8>> = (0..w.conc)
        .map(|_| vec![0u8; if client.is_none() && w.op == "GET" { w.n } else { 0 }])
        .collect();
    let a = cpu::sample();
    let t0 = Instant::now();
    let back = session.rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        let mut regs = regs.into_iter();
        for _ in 0..w.conc {
            let (tally, next, w, bar) = (tally.clone(), next.clone(), w.clone(), bar.clone());
            match client {
                Some(c) => {
                    let Some(mut reg) = regs.next() else { break };
                    let c = c.clone();
                    set.spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= w.ops {
                                return Some(reg);
                            }
                            let t = Instant::now();
                            let (c2, w2) = (c.clone(), w.clone());
                            let job = tokio::task::spawn_blocking(move || {
                                let key = w2.key(i);
                                let r = rdma_once(&c2, &mut reg, &w2, &key);
                                (reg, r)
                            });
                            match job.await {
                                Ok((r, outcome)) => {
                                    reg = r;
                                    Tally::note(&tally, t, outcome);
                                }
                                Err(e) => {
                                    // The buffer went with the failed job.
                                    Tally::note(&tally, t, Err(format!("a transfer panicked: {e}")));
                                    return None;
                                }
                            }
                            bar.inc(1);
                        }
                    });
                }
                None => {
                    let s3 = session.s3.clone();
                    let body = body.clone();
                    let mut dst = dsts.pop().unwrap_or_default();
                    set.spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= w.ops {
                                return None;
                            }
                            let key = w.key(i);
                            let t = Instant::now();
                            let outcome = http_once(&s3, &w, &key, &body, &mut dst).await;
                            Tally::note(&tally, t, outcome);
                            bar.inc(1);
                        }
                    });
                }
            }
        }
        let mut back = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(Some(reg)) = r {
                back.push(reg);
            }
        }
        back
    });
    let secs = t0.elapsed().as_secs_f64();
    let b = cpu::sample();
    let tally = Arc::try_unwrap(tally)
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_else(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())));
    (tally, secs, cpu::split(&a, &b, cpu::ticks_per_second()), back)
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
pub fn run(args: &Args) -> CliResult {
    let url = S3Url::parse(&args.url, false)?;
    let limit = hipobj::Options::MAX_TRANSFERS_LIMIT as usize;
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
    let max_conc = args.concurrency.iter().copied().max().unwrap_or(1);
    let session = Session::open_with(&args.conn, Some(pool_options(max_conc)))?;
    session.warn_no_rdma();
    let client = session.rdma.as_ref().ok();
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
    let ops_for = |size: u64, conc: usize| {
        args.ops
            .unwrap_or_else(|| ((256u64 << 20) / size).clamp(4, 512) as usize)
            .max(conc)
    };
    let fits = |size: u64, conc: usize| size.saturating_mul(conc as u64) <= args.max_memory;
    let total: usize = args
        .sizes
        .iter()
        .flat_map(|&s| args.concurrency.iter().map(move |&c| (s, c)))
        .filter(|&(s, c)| fits(s, c))
        .map(|(s, c)| ops_for(s, c) * 2 * modes.len() * drivers.len())
        .sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut slots = Slots::default();
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let n = usize::try_from(size).map_err(|_| CliError::plain("size too large"))?;
        for &driver in &drivers {
            for &conc in &args.concurrency {
                for &rdma in &modes {
                    for op in ["PUT", "GET"] {
                        let mode = if rdma { "rdma" } else { "http" };
                        let mut row = Row {
                            size,
                            op,
                            mode,
                            driver,
                            concurrency: conc,
                            ops: ops_for(size, conc),
                            errors: 0,
                            first_error: None,
                            declined: 0,
                            secs: 0.0,
                            lat_ms: Vec::new(),
                            cpu: Split::default(),
                            connections: if rdma { connections } else { None },
                            skipped: None,
                        };
                        if !fits(size, conc) {
                            row.skipped = Some(format!(
                                "{conc} x {} is over --max-memory {}",
                                human(size),
                                human(args.max_memory)
                            ));
                            row.ops = 0;
                            rows.push(row);
                            continue;
                        }
                        bar.set_message(format!("{op} {} {mode} {} x{conc}", human(size), driver.name()));
                        let w = Work {
                            bucket: url.bucket.clone(),
                            prefix: url.key.clone(),
                            size,
                            n,
                            op,
                            ops: row.ops,
                            conc,
                        };
                        let c = client.filter(|_| rdma);
                        let regs = match c {
                            Some(c) => slots.take(c.hipobj(), n, conc)?,
                            None => Vec::new(),
                        };
                        let (tally, secs, split, regs) = match driver {
                            Driver::Threads => {
                                let mut regs = regs;
                                let (t, s, sp) = threads_row(&session, c, &mut regs, &w, &bar);
                                (t, s, sp, regs)
                            }
                            Driver::Async => async_row(&session, c, regs, &w, &bar),
                        };
                        slots.give_back(n, regs);
                        row.errors = row.ops.saturating_sub(tally.lat_ms.len());
                        row.first_error = tally.first_error;
                        row.declined = tally.declined;
                        row.lat_ms = tally.lat_ms;
                        row.secs = secs;
                        row.cpu = split;
                        rows.push(row);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    if args.json {
        let v: Vec<_> = rows.iter().map(Row::json).collect();
        println!("{:#}", json!({ "results": v }));
    } else {
        print!("{}", table(&rows));
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(&rows, &args.concurrency))
            .map_err(|e| CliError::plain(format!("cannot write {path}: {}", s3::io_reason(&e))))?;
    }
    Ok(())
}

/// The rows as a text table, one line each.
fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>9} {:>4} {:>5} {:>7} {:>5} {:>5} {:>10} {:>9} {:>9} {:>11} {:>11}  note\n",
        "size", "op", "mode", "driver", "conc", "ops", "MiB/s", "p50 ms", "p99 ms", "app s/GiB", "NIC s/GiB"
    );
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
            "{:>9} {:>4} {:>5} {:>7} {:>5} {:>5} {:>10.1} {:>9.2} {:>9.2} {:>11.3} {:>11.3}  {}\n",
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
            note.join("; ")
        ));
    }
    out.push_str(
        "CPU is user+system time at 10 ms resolution: NIC is the soft NIC's worker threads \
         (a hardware NIC spends none), app every other thread of this process.\n",
    );
    out
}

/// A line chart of throughput (log scale) by concurrency, one line per
/// size, operation, mode and driver.
fn svg(rows: &[Row], concs: &[usize]) -> String {
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
