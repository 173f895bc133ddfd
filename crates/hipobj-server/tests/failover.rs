//! Scale-out: three `hipobj-server` gateways (separate processes, RDMA on
//! the soft NIC) in front of one S3 back end, clients spread across them,
//! and one gateway killed with SIGKILL while RDMA transfers run through it.
//!
//! The clients are `hipobj_s3::FailoverClient`s over one `hipobj::Client`.
//! What must hold:
//!
//! - every call ends in success: a call that was in flight on the killed
//!   gateway, or that finds it gone, fails there with a connection error
//!   (`Error::is_unreachable`) and is sent again to the next gateway, which
//!   binds afresh (a `409` round) and serves it;
//! - no try on the two live gateways ever fails;
//! - no object is lost or torn: after a client's PUT is acknowledged, its
//!   own key reads back as exactly those bytes (through any gateway); keys
//!   that every client writes read back as exactly one of the versions
//!   written; a final sweep reads every key over plain HTTP through both
//!   surviving gateways and directly from the back end, and the back end
//!   lists exactly the keys written, each of the one size written.
//!
//! The back end is a fourth `hipobj-server` (filesystem store, no RDMA) in
//! `failover_over_hipobj_fs`, which runs with every `cargo test`; and
//! moto in `failover_over_moto`, ignored unless `HIPOBJ_MOTO_ENDPOINT`
//! names a running moto server (`scripts/s3-clients.sh` starts one and runs
//! it); and SeaweedFS, a real distributed store, in `failover_over_seaweedfs`,
//! ignored unless `HIPOBJ_SEAWEEDFS_ENDPOINT` names its S3 API
//! (`scripts/seaweedfs.sh` starts a cluster and runs it).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::{NoGpu, Platform};
use hipobj_s3::{FailoverClient, RdmaS3Client, RetryPolicy, Span};

const BUCKET: &str = "scaleout";
/// Bytes per object: big enough that a transfer spans many work requests.
const LEN: usize = 768 << 10;
const CLIENTS: usize = 6;
const GATEWAYS: usize = 3;
/// The gateway that is killed.
const VICTIM: usize = 1;
/// Rounds every client completes after the kill.
const AFTER: usize = 3;
const BACKEND_AK: &str = "backend-key";
const BACKEND_SK: &str = "backend-secret";

struct Proc {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Proc {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(cfg_path: &std::path::Path, text: String) -> Proc {
    std::fs::write(cfg_path, text).unwrap();
    let (child, addr) = support::spawn_server(cfg_path, &[("HIPOBJ_LOG", "warn")]);
    Proc { child, addr }
}

/// A hipobj-server over a filesystem store, the gateways' back end.
fn fs_backend(dir: &std::path::Path) -> Proc {
    spawn(
        &dir.join("backend.toml"),
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{BACKEND_AK}\"\nsecret_key = \"{BACKEND_SK}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[limits]\nfsync = false\n",
            dir.join("backend-data").display()
        ),
    )
}

/// A gateway: S3 back end at `backend`, RDMA on the soft NIC.
fn gateway(dir: &std::path::Path, n: usize, backend: &str, bak: &str, bsk: &str) -> Proc {
    spawn(
        &dir.join(format!("gateway-{n}.toml")),
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\nshutdown_grace_secs = 1\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"s3\"\nendpoint = \"{backend}\"\naccess_key = \"{bak}\"\nsecret_key = \"{bsk}\"\n\
             [rdma]\nenabled = true\ndevice = \"{}\"\nbackend = \"softroce\"\nchunk_size = 65536\n",
            support::AK,
            support::SK,
            hipobj_softroce::DEFAULT_NAME,
        ),
    )
}

/// The object a client writes: `LEN` bytes that name their writer and round.
fn version(writer: usize, round: usize) -> Vec<u8> {
    let mut v = support::pattern(LEN, (writer * 37 + round) as u8);
    v[..16].copy_from_slice(&(((writer as u64) << 32) | round as u64).to_le_bytes().repeat(2));
    v
}

/// The gauge `name` of a server's metrics, or None if it cannot be read.
async fn gauge(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    support::metrics::value(&out, name).map(|v| v as u64)
}

/// Everything the clients saw.
#[derive(Default)]
struct Record {
    /// Tries that failed, with the endpoint and the error's text.
    failures: Vec<(usize, usize, bool, String)>,
    /// Calls served, by endpoint.
    served: [usize; GATEWAYS],
    /// Calls that failed over and were served elsewhere.
    failed_over: usize,
}

#[test]
fn failover_over_hipobj_fs() {
    let dir = tempfile::tempdir().unwrap();
    let backend = fs_backend(dir.path());
    scenario(dir.path(), &backend.url(), BACKEND_AK, BACKEND_SK, true);
}

#[test]
#[ignore = "needs moto: HIPOBJ_MOTO_ENDPOINT=http://127.0.0.1:PORT (scripts/s3-clients.sh runs it)"]
fn failover_over_moto() {
    let endpoint = std::env::var("HIPOBJ_MOTO_ENDPOINT").expect("HIPOBJ_MOTO_ENDPOINT names a moto server");
    let dir = tempfile::tempdir().unwrap();
    // moto is not safe for concurrent PUTs of one key (one PUT closes the
    // buffer another is still hashing: HTTP 500), so over moto every key
    // has one writer.
    scenario(dir.path(), &endpoint, "moto", "moto", false);
}

#[test]
#[ignore = "needs SeaweedFS: HIPOBJ_SEAWEEDFS_ENDPOINT and HIPOBJ_SEAWEEDFS_KEYS=KEY:SECRET (scripts/seaweedfs.sh runs it)"]
fn failover_over_seaweedfs() {
    let endpoint = std::env::var("HIPOBJ_SEAWEEDFS_ENDPOINT")
        .expect("HIPOBJ_SEAWEEDFS_ENDPOINT names SeaweedFS's S3 API");
    let keys = std::env::var("HIPOBJ_SEAWEEDFS_KEYS").expect("HIPOBJ_SEAWEEDFS_KEYS is KEY:SECRET");
    let (ak, sk) = keys.split_once(':').expect("HIPOBJ_SEAWEEDFS_KEYS is KEY:SECRET");
    let dir = tempfile::tempdir().unwrap();
    // SeaweedFS takes concurrent PUTs of one key (the last one wins), so the
    // shared keys are written by every client, as over the fs store.
    scenario(dir.path(), &endpoint, ak, sk, true);
}

#[allow(clippy::too_many_lines)]
fn scenario(dir: &std::path::Path, backend: &str, bak: &str, bsk: &str, with_shared: bool) {
    let t0 = Instant::now();
    let mut gateways: Vec<Option<Proc>> = (0..GATEWAYS)
        .map(|n| Some(gateway(dir, n, backend, bak, bsk)))
        .collect();
    let addrs: Vec<_> = gateways.iter().map(|g| g.as_ref().unwrap().addr).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s3s: Vec<_> = addrs
        .iter()
        .map(|a| support::client_for(&format!("http://{a}"), support::AK, support::SK))
        .collect();
    let back = support::client_for(backend, bak, bsk);
    rt.block_on(s3s[0].create_bucket().bucket(BUCKET).send()).unwrap();

    let hipobj = hipobj::Client::builder(Platform {
        verbs: Arc::new(hipobj_softroce::SoftVerbs::new(
            hipobj_softroce::SoftConfig::default(),
        )),
        gpu: Arc::new(NoGpu::new("a test on the soft NIC")),
        topology: Arc::new(hipobj_platform::NoTopology),
    })
    .nic_hint(hipobj_softroce::DEFAULT_NAME)
    .options(hipobj::Options {
        max_transfers: 16,
        // The gateways' soft NICs have loopback addresses of their own
        // (the HTTP endpoints are 127.0.0.1): this test is about failover,
        // not about which server a reply may name (docs/protocol.md §8).
        allow_peer: hipobj::AllowPeer::Any,
        ..hipobj::Options::default()
    })
    .build()
    .unwrap();
    let endpoints: Vec<_> = s3s
        .iter()
        .map(|s| RdmaS3Client::new(s.clone(), hipobj.clone(), rt.handle().clone()).fallback(false))
        .collect();
    let failover = FailoverClient::new(endpoints).unwrap().policy(RetryPolicy {
        attempts: None,
        backoff: Duration::from_millis(20),
    });

    // Versions every client may have written to each shared key (noted
    // before the PUT is sent: a failed PUT may still have landed).
    let shared: Mutex<BTreeMap<String, BTreeSet<(usize, usize)>>> = Mutex::default();
    // The version each client's own key holds, once acknowledged.
    let own: Mutex<BTreeMap<usize, (usize, usize)>> = Mutex::default();
    let record = Mutex::new(Record::default());
    let rounds: Vec<AtomicUsize> = (0..CLIENTS).map(|_| AtomicUsize::new(0)).collect();
    let stop = AtomicBool::new(false);
    let killed = AtomicBool::new(false);

    let note = |client: usize, served: &hipobj_s3::Served<hipobj_s3::Transfer>| {
        let mut r = record.lock().unwrap();
        r.served[served.endpoint] += 1;
        if !served.failed.is_empty() {
            r.failed_over += 1;
        }
        for (at, e) in &served.failed {
            r.failures.push((client, *at, e.is_unreachable(), e.to_string()));
        }
    };

    std::thread::scope(|sc| {
        // Whatever ends this scope early, the clients stop with it.
        let _guard = StopOnPanic(&stop);
        for c in 0..CLIENTS {
            let (failover, shared, own, rounds, stop, note, hipobj) =
                (&failover, &shared, &own, &rounds, &stop, &note, &hipobj);
            sc.spawn(move || {
                let _guard = StopOnPanic(stop);
                let fo = failover.clone().starting_at(c % GATEWAYS);
                let mut src = vec![0u8; LEN];
                let mut dst = vec![0u8; LEN];
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Own key: PUT, then GET: exactly these bytes.
                    let v = version(c, round);
                    let okey = format!("own-{c}");
                    {
                        src.copy_from_slice(&v);
                        let reg = hipobj.register(std::mem::take(&mut src)).unwrap();
                        let s = fo
                            .put_object(&reg, Span::whole(LEN), BUCKET, &okey)
                            .unwrap_or_else(|e| panic!("client {c} PUT {okey}: {e}"));
                        assert_eq!(
                            s.value.etag.as_deref(),
                            Some(format!("\"{}\"", support::md5_hex(&v)).as_str())
                        );
                        assert!(s.value.rdma && s.value.bytes == LEN as u64);
                        note(c, &s);
                        src = reg.into_inner();
                    }
                    own.lock().unwrap().insert(c, (c, round));
                    {
                        let mut reg = hipobj.register(std::mem::take(&mut dst)).unwrap();
                        reg.fill(0);
                        let s = fo
                            .get_object(&mut reg, Span::whole(LEN), BUCKET, &okey, None)
                            .unwrap_or_else(|e| panic!("client {c} GET {okey}: {e}"));
                        assert!(s.value.rdma && s.value.bytes == LEN as u64);
                        assert!(
                            reg.to_vec() == v,
                            "client {c}: {okey} is not round {round}'s bytes"
                        );
                        note(c, &s);
                        dst = reg.into_inner();
                    }
                    round += 1;
                    rounds[c].store(round, Ordering::Relaxed);
                    if !with_shared {
                        continue;
                    }
                    // A shared key: one of the versions anyone wrote.
                    let round = round - 1;
                    let skey = format!("shared-{}", round % 2);
                    let v = version(c, 1000 + round);
                    shared
                        .lock()
                        .unwrap()
                        .entry(skey.clone())
                        .or_default()
                        .insert((c, 1000 + round));
                    {
                        src.copy_from_slice(&v);
                        let reg = hipobj.register(std::mem::take(&mut src)).unwrap();
                        let s = fo
                            .put_object(&reg, Span::whole(LEN), BUCKET, &skey)
                            .unwrap_or_else(|e| panic!("client {c} PUT {skey}: {e}"));
                        note(c, &s);
                        src = reg.into_inner();
                    }
                    {
                        let mut reg = hipobj.register(std::mem::take(&mut dst)).unwrap();
                        let s = fo
                            .get_object(&mut reg, Span::whole(LEN), BUCKET, &skey, None)
                            .unwrap_or_else(|e| panic!("client {c} GET {skey}: {e}"));
                        note(c, &s);
                        let got = reg.into_inner();
                        let ok = shared.lock().unwrap()[&skey]
                            .iter()
                            .any(|&(w, r)| got == version(w, r));
                        assert!(ok, "client {c}: {skey} is none of the versions written");
                        dst = got;
                    }
                }
            });
        }

        // Let every client get going, then kill the victim while an RDMA
        // transfer is running through it.
        let deadline = Instant::now() + Duration::from_secs(120);
        while rounds.iter().any(|r| r.load(Ordering::Relaxed) < 1) {
            assert!(!stop.load(Ordering::Relaxed), "a client failed");
            assert!(Instant::now() < deadline, "the clients did not get going");
            std::thread::sleep(Duration::from_millis(10));
        }
        let victim = addrs[VICTIM];
        loop {
            assert!(!stop.load(Ordering::Relaxed), "a client failed");
            assert!(
                Instant::now() < deadline,
                "no transfer was ever seen in flight on the victim"
            );
            if rt.block_on(gauge(victim, "hipobj_rdma_in_flight")).unwrap_or(0) > 0 {
                break;
            }
        }
        let mut g = gateways[VICTIM].take().unwrap();
        g.child.kill().unwrap(); // SIGKILL
        let st = g.child.wait().unwrap();
        killed.store(true, Ordering::Relaxed);
        let at_kill: Vec<usize> = rounds.iter().map(|r| r.load(Ordering::Relaxed)).collect();
        println!("killed gateway {VICTIM} ({st}) with transfers in flight; rounds so far {at_kill:?}");
        while rounds
            .iter()
            .zip(&at_kill)
            .any(|(r, k)| r.load(Ordering::Relaxed) < k + AFTER)
        {
            assert!(!stop.load(Ordering::Relaxed), "a client failed");
            assert!(
                Instant::now() < deadline + Duration::from_secs(120),
                "the clients did not carry on after the kill"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(killed.load(Ordering::Relaxed));

    let r = record.into_inner().unwrap();
    println!(
        "served per gateway {:?}, {} calls failed over, {} failed tries",
        r.served,
        r.failed_over,
        r.failures.len()
    );
    for f in &r.failures {
        println!("  client {} at gateway {}: unreachable={} {}", f.0, f.1, f.2, f.3);
    }
    // Every client that started on the victim found it gone; every failed
    // try was on the victim, and a connection error.
    assert!(r.failed_over >= 1, "no call failed over");
    for c in (0..CLIENTS).filter(|c| c % GATEWAYS == VICTIM) {
        assert!(
            r.failures.iter().any(|f| f.0 == c),
            "client {c} started on the killed gateway and never failed over"
        );
    }
    for (c, at, unreachable, text) in &r.failures {
        assert_eq!(*at, VICTIM, "client {c}: a live gateway failed: {text}");
        assert!(*unreachable, "client {c}: not a connection error: {text}");
    }

    // The sweep: every key through both live gateways over plain HTTP and
    // straight from the back end.
    let own = own.into_inner().unwrap();
    let shared = shared.into_inner().unwrap();
    let live: Vec<&aws_sdk_s3::Client> = s3s
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != VICTIM)
        .map(|(_, s)| s)
        .collect();
    let readers: Vec<&aws_sdk_s3::Client> = live.into_iter().chain([&back]).collect();
    rt.block_on(async {
        for s in &readers {
            for (c, &(w, round)) in &own {
                let got = read(s, &format!("own-{c}")).await;
                assert!(
                    got == version(w, round),
                    "own-{c} is not its last acknowledged version"
                );
            }
            for (key, versions) in &shared {
                let got = read(s, key).await;
                assert!(
                    versions.iter().any(|&(w, r)| got == version(w, r)),
                    "{key} is none of the versions written"
                );
            }
        }
        let list = back.list_objects_v2().bucket(BUCKET).send().await.unwrap();
        let listed: BTreeSet<(String, i64)> = list
            .contents()
            .iter()
            .map(|o| (o.key().unwrap().to_owned(), o.size().unwrap()))
            .collect();
        let want: BTreeSet<(String, i64)> = own
            .keys()
            .map(|c| format!("own-{c}"))
            .chain(shared.keys().cloned())
            .map(|k| (k, LEN as i64))
            .collect();
        assert_eq!(
            listed, want,
            "the back end holds other keys or sizes than were written"
        );
    });
    println!("failover: all checks passed in {:?}", t0.elapsed());
    drop(gateways);
}

/// Stops every client when the thread holding it panics, so that a failed
/// assertion ends the test instead of leaving the others running.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

async fn read(s: &aws_sdk_s3::Client, key: &str) -> Vec<u8> {
    let o = s.get_object().bucket(BUCKET).key(key).send().await.unwrap();
    o.body.collect().await.unwrap().into_bytes().to_vec()
}

/// A gateway whose store cannot be reached answers `503`, which failover
/// clients take to another gateway; s3s-aws alone said `500`, which they
/// (rightly) return as the request's own failure. The store's own errors
/// still pass through as they are.
#[test]
fn a_gateway_whose_store_does_not_answer_says_503() {
    use hipobj_server::config::RemoteConfig;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = rt
        .block_on(hipobj_server::Server::start(support::config(
            &dir.path().join("store"),
        )))
        .unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let gateway_to = |endpoint: String| {
        let mut c = support::config(&dir.path().join("unused"));
        c.storage = hipobj_server::config::StorageConfig::S3(RemoteConfig {
            endpoint,
            region: "us-east-1".into(),
            access_key: support::AK.into(),
            secret_key: support::SK.into(),
            path_style: true,
        });
        rt.block_on(hipobj_server::Server::start(c)).unwrap()
    };
    let (cut_off, linked) = (gateway_to(dead), gateway_to(store.endpoint()));
    let (a, b) = (support::client(&cut_off), support::client(&linked));
    rt.block_on(b.create_bucket().bucket(BUCKET).send()).unwrap();

    let e = rt
        .block_on(a.head_object().bucket(BUCKET).key("k").send())
        .unwrap_err();
    assert_eq!(status(&e), Some(503), "{e:?}");
    let e = rt
        .block_on(a.get_object().bucket(BUCKET).key("k").send())
        .unwrap_err();
    assert_eq!(status(&e), Some(503), "{e:?}");
    assert_eq!(support::code(&e), "ServiceUnavailable");
    let e = rt
        .block_on(
            a.put_object()
                .bucket(BUCKET)
                .key("k")
                .body(b"x".to_vec().into())
                .send(),
        )
        .unwrap_err();
    assert_eq!(status(&e), Some(503), "{e:?}");

    // Through the gateway whose store answers: its 404 stays a 404.
    let e = rt
        .block_on(b.get_object().bucket(BUCKET).key("missing").send())
        .unwrap_err();
    assert_eq!(status(&e), Some(404), "{e:?}");
    assert_eq!(support::code(&e), "NoSuchKey");
    for s in [cut_off, linked, store] {
        rt.block_on(s.shutdown());
    }
}

fn status<E>(e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}
