//! A short soak: many client threads through the `hipobj-server` binary on
//! the soft RoCE NIC, small GETs and 1 MiB GETs and PUTs over RDMA, every
//! byte checked, no failure allowed; the server's RSS and open fds sampled
//! after a warm-up and at the end, and compared with a generous bound.
//!
//! Sizes come from the environment, so the same test is the long soak by
//! hand: `HIPOBJ_SOAK_SMALL` (small GETs, default 4,000),
//! `HIPOBJ_SOAK_LARGE` (1 MiB GET+PUT pairs, default 200),
//! `HIPOBJ_SOAK_THREADS` (default 8), `HIPOBJ_SOAK_LOSS` (the fraction of
//! packets each side's soft NIC drops when sending, default 0.01).
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hipobj::{Client, Control, ControlError, Options};
use hipobj_platform::{NoGpu, Platform};
use support::pattern;
use support::rdma::{Outcome, get, put};

const BUCKET: &str = "soak";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct S3Control<'a> {
    rt: &'a tokio::runtime::Handle,
    s3: &'a aws_sdk_s3::Client,
    key: String,
    is_put: bool,
    seen: Vec<Outcome>,
}

impl Control for S3Control<'_> {
    fn send_request(&mut self, token: &str) -> Result<(), ControlError> {
        let o = self.rt.block_on(async {
            if self.is_put {
                put(self.s3, BUCKET, &self.key, token, None).await
            } else {
                get(self.s3, BUCKET, &self.key, token, None).await
            }
        });
        self.seen.push(o);
        Ok(())
    }

    fn recv_reply(&mut self, reply: &mut [u8]) -> Result<usize, ControlError> {
        let o = self.seen.last().unwrap();
        let r = o
            .reply
            .as_deref()
            .ok_or_else(|| ControlError(format!("HTTP {} {:?}: no x-amz-rdma-reply", o.status, o.code)))?;
        reply[..r.len()].copy_from_slice(r.as_bytes());
        Ok(r.len())
    }
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
    let run = |small_left: &AtomicUsize, large_left: &AtomicUsize| {
        std::thread::scope(|sc| {
            for t in 0..threads {
                let (h, s3, c, smalls) = (&h, &s3, &c, &smalls);
                sc.spawn(move || {
                    let mut sbuf = vec![0u8; 4096];
                    let mut sreg = c.register(&mut sbuf).unwrap();
                    let mut lbuf = vec![0u8; 1 << 20];
                    let mut lreg = c.register(&mut lbuf).unwrap();
                    let mut n = 0usize;
                    loop {
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
                            let mut ctl = S3Control {
                                rt: h,
                                s3,
                                key: key.clone(),
                                is_put: true,
                                seen: Vec::new(),
                            };
                            c.put(&lreg, 0, 1 << 20, &mut ctl)
                                .unwrap_or_else(|e| panic!("PUT {key}: {e} {:?}", ctl.seen));
                            lreg.fill(0);
                            let mut ctl = S3Control {
                                rt: h,
                                s3,
                                key: key.clone(),
                                is_put: false,
                                seen: Vec::new(),
                            };
                            c.get(&mut lreg, 0, 1 << 20, &mut ctl)
                                .unwrap_or_else(|e| panic!("GET {key}: {e} {:?}", ctl.seen));
                            assert!(lreg.to_vec() == data.as_slice(), "GET {key}: bytes differ");
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
                        let mut ctl = S3Control {
                            rt: h,
                            s3,
                            key: format!("small-{i}"),
                            is_put: false,
                            seen: Vec::new(),
                        };
                        c.get(&mut sreg, 0, want.len(), &mut ctl)
                            .unwrap_or_else(|e| panic!("GET small-{i}: {e} {:?}", ctl.seen));
                        assert!(
                            &sreg.to_vec()[..want.len()] == want.as_slice(),
                            "small-{i}: bytes differ"
                        );
                        assert!(
                            sreg.to_vec()[want.len()..].iter().all(|b| *b == 0xee),
                            "small-{i}: bytes past the object written"
                        );
                    }
                });
            }
        });
    };
    // A tenth first as warm-up (pools, bindings, allocator), then sample,
    // then the rest, then sample again.
    let warm_small = AtomicUsize::new(small / 10);
    let warm_large = AtomicUsize::new(large / 10);
    run(&warm_small, &warm_large);
    let (rss0, fds0) = usage(pid);
    let t0 = std::time::Instant::now();
    run(&small_left, &large_left);
    let elapsed = t0.elapsed();
    let (rss1, fds1) = usage(pid);
    println!(
        "soak: {small} small GETs and {large} 1 MiB PUT+GET pairs, {threads} threads, loss {loss}: {elapsed:?}; \
         server RSS {rss0} -> {rss1} KiB, fds {fds0} -> {fds1}"
    );
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
