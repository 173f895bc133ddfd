//! A short soak: many client threads through the `hipobj-server` binary on
//! the soft RoCE NIC, small GETs and 1 MiB GETs and PUTs over RDMA, every
//! byte checked, no failure allowed; the server's and the client's RSS and
//! open fds sampled after a warm-up, during the run and at the end, and the
//! server's compared with a generous bound.
//!
//! Sizes come from the environment, so the same test is the long soak by
//! hand: `HIPOBJ_SOAK_SMALL` (small GETs, default 4,000),
//! `HIPOBJ_SOAK_LARGE` (1 MiB GET+PUT pairs, default 200),
//! `HIPOBJ_SOAK_THREADS` (default 8), `HIPOBJ_SOAK_LOSS` (the fraction of
//! packets each side's soft NIC drops when sending, default 0.01),
//! `HIPOBJ_SOAK_SAMPLE_SECS` (how often a progress line with both
//! processes' RSS and fds is printed, default 60), `HIPOBJ_SOAK_SECS` (a
//! time budget: when it runs out no new transfer starts, and the report
//! says exactly how many ran; default none, everything runs).
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj::{Client, Options};
use hipobj_platform::{NoGpu, Platform};
use support::pattern;
use support::rdma::{Op, S3Control};

const BUCKET: &str = "soak";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start_server(data: &std::path::Path, loss: f64) -> (Child, std::net::SocketAddr) {
    let cfg = data.with_extension("toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n\
             [limits]\nfsync = false\n\
             [rdma]\nenabled = true\ndevice = \"softroce0\"\nbackend = \"softroce\"\n",
            support::AK,
            support::SK,
            data.display()
        ),
    )
    .unwrap();
    let (child, addr) = support::spawn_server(
        &cfg,
        &[
            ("HIPOBJ_LOG", "error"),
            ("HIPOBJ_SOFTROCE_LOSS", &loss.to_string()),
        ],
    );
    (child, addr)
}

/// One sample taken during the measured phase.
struct Sample {
    secs: u64,
    small: usize,
    large: usize,
    server_rss: u64,
    server_fds: usize,
    client_rss: u64,
    client_fds: usize,
}

impl Sample {
    fn take(secs: u64, small: &AtomicUsize, large: &AtomicUsize, server: u32, client: u32) -> Self {
        let (server_rss, server_fds) = usage(server);
        let (client_rss, client_fds) = usage(client);
        Self {
            secs,
            small: small.load(Ordering::SeqCst),
            large: large.load(Ordering::SeqCst),
            server_rss,
            server_fds,
            client_rss,
            client_fds,
        }
    }
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>6} s: {} small GETs, {} 1 MiB pairs; server RSS {} KiB, {} fds; client RSS {} KiB, {} fds",
            self.secs,
            self.small,
            self.large,
            self.server_rss,
            self.server_fds,
            self.client_rss,
            self.client_fds
        )
    }
}

/// (RSS in KiB, open fds) of a process, from /proc.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    (rss, fds)
}

#[test]
fn soak_small_and_1mib_transfers_on_the_soft_nic() {
    let small = env_or("HIPOBJ_SOAK_SMALL", 4_000);
    let large = env_or("HIPOBJ_SOAK_LARGE", 200);
    let threads = env_or("HIPOBJ_SOAK_THREADS", 8).max(1);
    // A time budget for the measured phase (the long soak by hand): when
    // it runs out, no thread starts another transfer, and the report says
    // how many ran. Unset (CI): everything runs.
    let budget = std::env::var("HIPOBJ_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs);
    let sample_secs = env_or("HIPOBJ_SOAK_SAMPLE_SECS", 60) as u64;
    let loss: f64 = std::env::var("HIPOBJ_SOAK_LOSS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.01);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) = start_server(&dir.path().join("data"), loss);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.handle().clone();
    let s3 = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
    rt.block_on(s3.create_bucket().bucket(BUCKET).send()).unwrap();
    // Small objects of 1 B to 4 KiB, put over HTTP.
    let smalls: Vec<Vec<u8>> = (0..16).map(|i| pattern(1 + i * 271, i as u8)).collect();
    for (i, o) in smalls.iter().enumerate() {
        rt.block_on(
            s3.put_object()
                .bucket(BUCKET)
                .key(format!("small-{i}"))
                .body(o.clone().into())
                .send(),
        )
        .unwrap();
    }
    let mut soft = hipobj_softroce::SoftConfig::default();
    soft.faults.loss = loss;
    let c = Client::builder(Platform {
        verbs: Arc::new(hipobj_softroce::SoftVerbs::new(soft)),
        gpu: Arc::new(NoGpu::new("a test on the soft NIC")),
        topology: Arc::new(hipobj_platform::NoTopology),
    })
    .nic_hint(hipobj_softroce::DEFAULT_NAME)
    .options(Options {
        max_transfers: threads as u32,
        ..Options::default()
    })
    .build()
    .unwrap();

    let small_left = AtomicUsize::new(small);
    let large_left = AtomicUsize::new(large);
    let pid = server.id();
    let me = std::process::id();
    // Transfers completed and checked in the current phase.
    let small_done = AtomicUsize::new(0);
    let large_done = AtomicUsize::new(0);
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let run = |small_left: &AtomicUsize, large_left: &AtomicUsize, deadline: Option<Instant>, log: bool| {
        small_done.store(0, Ordering::SeqCst);
        large_done.store(0, Ordering::SeqCst);
        let t0 = Instant::now();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            // The sampler: server and client RSS and fds, every `sample_secs`.
            let (stop, small_done, large_done, samples) = (&stop, &small_done, &large_done, &samples);
            sc.spawn(move || {
                let mut next = sample_secs;
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(200));
                    let secs = t0.elapsed().as_secs();
                    if !log || secs < next {
                        continue;
                    }
                    next = secs + sample_secs;
                    let s = Sample::take(secs, small_done, large_done, pid, me);
                    println!("soak: {s}");
                    samples.lock().unwrap().push(s);
                }
            });
            let mut workers = Vec::new();
            for t in 0..threads {
                let (h, s3, c, smalls, failures) = (&h, &s3, &c, &smalls, &failures);
                workers.push(sc.spawn(move || {
                    // A failed call is recorded and the soak goes on, so one
                    // run counts every failure; the test fails at the end.
                    let fail = |what: String| {
                        println!("soak: FAILURE {what}");
                        failures.lock().unwrap().push(what);
                    };
                    let mut sbuf = vec![0u8; 4096];
                    let mut sreg = c.register(std::mem::take(&mut sbuf)).unwrap();
                    let mut lbuf = vec![0u8; 1 << 20];
                    let mut lreg = c.register(std::mem::take(&mut lbuf)).unwrap();
                    let mut n = 0usize;
                    loop {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return;
                        }
                        n += 1;
                        let take_large = n.is_multiple_of(16);
                        if take_large
                            && large_left
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                                .is_ok()
                        {
                            // PUT 1 MiB from this buffer, GET it back into it.
                            let key = format!("large-{t}");
                            let data = pattern(1 << 20, n as u8);
                            lreg.write_from(0, &data).expect("fits");
                            let mut ctl = S3Control::new(h, s3, BUCKET, Op::put(key.clone()));
                            if let Err(e) = c.put(&lreg, 0, 1 << 20, &mut ctl) {
                                fail(format!("PUT {key}: {e} {:?}", ctl.seen));
                                continue;
                            }
                            lreg.fill(0);
                            let mut ctl = S3Control::new(h, s3, BUCKET, Op::get(key.clone()));
                            if let Err(e) = c.get(&mut lreg, 0, 1 << 20, &mut ctl) {
                                fail(format!("GET {key}: {e} {:?}", ctl.seen));
                                continue;
                            }
                            if lreg.to_vec() != data.as_slice() {
                                fail(format!("FALSE SUCCESS: GET {key}: bytes differ"));
                                continue;
                            }
                            large_done.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        if small_left
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                            .is_err()
                        {
                            if large_left.load(Ordering::SeqCst) == 0 {
                                return;
                            }
                            continue;
                        }
                        let i = (n + t) % smalls.len();
                        let want = &smalls[i];
                        sreg.fill(0xee);
                        let mut ctl = S3Control::new(h, s3, BUCKET, Op::get(format!("small-{i}")));
                        if let Err(e) = c.get(&mut sreg, 0, want.len(), &mut ctl) {
                            fail(format!("GET small-{i}: {e} {:?}", ctl.seen));
                            continue;
                        }
                        let got = sreg.to_vec();
                        if &got[..want.len()] != want.as_slice() {
                            fail(format!("FALSE SUCCESS: GET small-{i}: bytes differ"));
                            continue;
                        }
                        if !got[want.len()..].iter().all(|b| *b == 0xee) {
                            fail(format!("GET small-{i}: bytes past the object written"));
                            continue;
                        }
                        small_done.fetch_add(1, Ordering::SeqCst);
                    }
                }));
            }
            for w in workers {
                // A worker's panic (a failed transfer) fails the test.
                if let Err(p) = w.join() {
                    stop.store(true, Ordering::SeqCst);
                    std::panic::resume_unwind(p);
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
    };
    // A tenth first (at most 10,000 small GETs and 200 pairs) as warm-up
    // (pools, bindings, allocator), then sample, then the rest (up to the
    // time budget, if one is set), then sample again.
    let (warm_small, warm_large) = ((small / 10).min(10_000), (large / 10).min(200));
    let warm = (AtomicUsize::new(warm_small), AtomicUsize::new(warm_large));
    run(&warm.0, &warm.1, None, false);
    let (rss0, fds0) = usage(pid);
    let (crss0, cfds0) = usage(me);
    let t0 = Instant::now();
    run(&small_left, &large_left, budget.map(|b| t0 + b), true);
    let elapsed = t0.elapsed();
    let (rss1, fds1) = usage(pid);
    let (crss1, cfds1) = usage(me);
    let (ran_small, ran_large) = (
        small_done.load(Ordering::SeqCst),
        large_done.load(Ordering::SeqCst),
    );
    let samples = samples.into_inner().unwrap();
    let peak = |f: fn(&Sample) -> u64, first: u64, last: u64| {
        samples.iter().map(f).chain([first, last]).max().unwrap_or(last)
    };
    println!(
        "soak: {ran_small} of {small} small GETs and {ran_large} of {large} 1 MiB PUT+GET pairs \
         (after a warm-up of {} and {}), {threads} threads, loss {loss}: {elapsed:?}, every byte checked, {} failures; \
         server RSS {rss0} -> {rss1} KiB (peak {}), fds {fds0} -> {fds1} (peak {}); \
         client RSS {crss0} -> {crss1} KiB (peak {}), fds {cfds0} -> {cfds1} (peak {}); {} samples",
        warm_small,
        warm_large,
        failures.lock().unwrap().len(),
        peak(|s| s.server_rss, rss0, rss1),
        peak(|s| s.server_fds as u64, fds0 as u64, fds1 as u64),
        peak(|s| s.client_rss, crss0, crss1),
        peak(|s| s.client_fds as u64, cfds0 as u64, cfds1 as u64),
        samples.len(),
    );
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} transfers failed: {failures:#?}",
        failures.len()
    );
    if budget.is_none() {
        assert_eq!((ran_small, ran_large), (small, large), "not every transfer ran");
    }
    // Generous: the allocator may keep what it grew, but a leak per
    // transfer would pass these after this many transfers.
    assert!(
        rss1 <= rss0 + 64 * 1024,
        "server RSS grew from {rss0} to {rss1} KiB"
    );
    assert!(fds1 <= fds0 + 16, "server fds grew from {fds0} to {fds1}");
    server.kill().unwrap();
    server.wait().unwrap();
}
