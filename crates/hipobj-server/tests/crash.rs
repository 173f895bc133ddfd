//! Crashes in the middle of RDMA transfers, on the soft RoCE NIC, with the
//! `hipobj-server` binary as its own process:
//!
//! * `kill -9` of the server while GETs, PUTs and multipart UploadParts are
//!   moving bytes: every call in flight fails with a defined code, none
//!   reports a false success, a failed PUT leaves its buffer unchanged, a
//!   failed GET leaves in its range only the buffer's old bytes or the
//!   object's own bytes at their offsets and nothing lands after the call
//!   returns (docs/protocol.md §3); after a restart on the same data
//!   directory every object is whole (old or new content, never torn), the
//!   upload holds only whole parts, and the next transfers succeed;
//! * `kill -9` of a client process in the middle of a GET: the server's RDMA
//!   fails, it frees the binding (the `hipobj_rdma_bindings` gauge returns
//!   to 0 well before the idle timeout could do it) and serves others.
//!
//! Waits are bounded loops on observable state, never timed assertions.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use hipobj::{Client, ErrorKind, Options};
use hipobj_platform::{NoGpu, Platform};
use support::rdma::{Op, S3Control};
use support::{md5_hex, pattern};

const BUCKET: &str = "crash-bucket";
/// Set in the child process of `client_killed_mid_transfer_frees_its_binding`.
const CHILD_ENV: &str = "HIPOBJ_CRASH_TEST_CLIENT";

struct ServerProc {
    child: Child,
    addr: std::net::SocketAddr,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_server(data: &std::path::Path, port: u16) -> ServerProc {
    let cfg = data.with_extension("toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:{port}\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n\
             [limits]\nfsync = false\nmin_part_size = 1048576\n\
             [rdma]\nenabled = true\ndevice = \"softroce0\"\nbackend = \"softroce\"\n\
             max_transfer = 134217728\nchunk_size = 1048576\nidle_timeout_secs = 600\n",
            support::AK,
            support::SK,
            data.display()
        ),
    )
    .unwrap();
    let (child, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "error")]);
    ServerProc { child, addr }
}

/// SIGKILL: no handler runs, nothing is flushed or unbound.
fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn client() -> Client {
    let platform = Platform {
        verbs: Arc::new(hipobj_softroce::SoftVerbs::new(
            hipobj_softroce::SoftConfig::default(),
        )),
        gpu: Arc::new(NoGpu::new("a test on the soft NIC")),
        topology: Arc::new(hipobj_platform::NoTopology),
    };
    Client::builder(platform)
        .nic_hint(hipobj_softroce::DEFAULT_NAME)
        .options(Options {
            max_transfers: 16,
            ..Options::default()
        })
        .build()
        .unwrap()
}

fn metric(text: &str, name: &str) -> Option<i64> {
    support::metrics::value(text, name).map(|v| v as i64)
}

fn metrics(rt: &tokio::runtime::Runtime, addr: std::net::SocketAddr) -> String {
    rt.block_on(support::raw(
        addr,
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ))
    .1
}

fn http_get(rt: &tokio::runtime::Runtime, s3: &aws_sdk_s3::Client, key: &str) -> Result<Vec<u8>, String> {
    rt.block_on(async {
        match s3.get_object().bucket(BUCKET).key(key).send().await {
            Ok(o) => Ok(o.body.collect().await.unwrap().into_bytes().to_vec()),
            Err(e) => Err(support::code(&e)),
        }
    })
}

fn http_put(rt: &tokio::runtime::Runtime, s3: &aws_sdk_s3::Client, key: &str, data: Vec<u8>) {
    rt.block_on(
        s3.put_object()
            .bucket(BUCKET)
            .key(key)
            .body(ByteStream::from(data))
            .send(),
    )
    .unwrap();
}

/// The codes a transfer cut off by a dead server may end in: the S3 request
/// failed (no reply), or the RDMA connection broke.
fn defined_failure(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::S3Error | ErrorKind::RdmaError)
}

const UNWRITTEN: u8 = 0xee;
const GET_LEN: usize = 8 << 20;
const PUT_LEN: usize = 8 << 20;
const PART_LEN: usize = 4 << 20;

/// What one GET thread saw: successes, then the failed call's code and its
/// buffer as the call left it (still registered, to check later that
/// nothing lands after the call returned).
struct GetEnd<'a> {
    ok: usize,
    kind: ErrorKind,
    left: Vec<u8>,
    reg: hipobj::Registration<'a>,
}

#[test]
fn server_killed_mid_transfers_fails_every_call_and_restarts_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let port = free_port();
    let mut server = start_server(&data_dir, port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.handle().clone();
    let s3 = support::client_for(&format!("http://{}", server.addr), support::AK, support::SK);
    rt.block_on(s3.create_bucket().bucket(BUCKET).send()).unwrap();
    let gets: Vec<Vec<u8>> = (0..3).map(|i| pattern(GET_LEN, 10 + i as u8)).collect();
    for (i, g) in gets.iter().enumerate() {
        http_put(&rt, &s3, &format!("get-{i}"), g.clone());
    }
    // Each PUT thread alternates two contents of one key; "old" is there
    // first.
    let versions: Vec<[Vec<u8>; 2]> = (0..2)
        .map(|i| [pattern(PUT_LEN, 20 + i as u8), pattern(PUT_LEN, 30 + i as u8)])
        .collect();
    for (i, v) in versions.iter().enumerate() {
        http_put(&rt, &s3, &format!("put-{i}"), v[0].clone());
    }
    let up = rt
        .block_on(s3.create_multipart_upload().bucket(BUCKET).key("mp").send())
        .unwrap();
    let upload_id = up.upload_id().unwrap().to_owned();
    let c = client();
    let done = AtomicUsize::new(0);
    let mut get_bufs: Vec<Vec<u8>> = gets.iter().map(|_| vec![UNWRITTEN; GET_LEN]).collect();

    let (get_ends, put_ends, part_end) = std::thread::scope(|sc| {
        let get_threads: Vec<_> = get_bufs
            .iter_mut()
            .enumerate()
            .map(|(i, buf)| {
                let (h, s3, c, done, want) = (&h, &s3, &c, &done, &gets[i]);
                sc.spawn(move || {
                    let mut reg = c.register(std::mem::take(buf)).unwrap();
                    // Bounded: the kill comes after a few transfers.
                    for ok in 0..100_000 {
                        reg.fill(UNWRITTEN);
                        let mut ctl = S3Control::new(h, s3, BUCKET, Op::get(format!("get-{i}")));
                        match c.get(&mut reg, 0, GET_LEN, &mut ctl) {
                            Ok(()) => {
                                assert!(
                                    reg.to_vec() == want.as_slice(),
                                    "GET {i}: a success with wrong bytes"
                                );
                                done.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                return GetEnd {
                                    ok,
                                    kind: e.kind(),
                                    left: reg.to_vec(),
                                    reg,
                                };
                            }
                        }
                    }
                    panic!("GET {i}: the server never died");
                })
            })
            .collect();
        let put_threads: Vec<_> = (0..versions.len())
            .map(|i| {
                let (h, s3, c, done, v) = (&h, &s3, &c, &done, &versions[i]);
                sc.spawn(move || {
                    let mut last_ok = 0usize; // the version stored last
                    for round in 1..100_000usize {
                        let which = round % 2;
                        let mut src = v[which].clone();
                        let reg = c.register(std::mem::take(&mut src)).unwrap();
                        let mut ctl = S3Control::new(h, s3, BUCKET, Op::put(format!("put-{i}")));
                        let r = c.put(&reg, 0, PUT_LEN, &mut ctl);
                        assert!(
                            reg.to_vec() == v[which].as_slice(),
                            "PUT {i} changed its own buffer"
                        );
                        match r {
                            Ok(()) => {
                                let o = ctl.seen.last().unwrap();
                                assert_eq!(o.etag, Some(format!("\"{}\"", md5_hex(&v[which]))));
                                last_ok = which;
                                done.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => return (last_ok, which, e.kind()),
                        }
                    }
                    panic!("PUT {i}: the server never died");
                })
            })
            .collect();
        let part_thread = {
            let (h, s3, c, done, id) = (&h, &s3, &c, &done, &upload_id);
            sc.spawn(move || {
                let mut ok = Vec::new();
                for n in 1..10_000i32 {
                    let mut src = pattern(PART_LEN, n as u8);
                    let reg = c.register(std::mem::take(&mut src)).unwrap();
                    let mut ctl = S3Control::new(
                        h,
                        s3,
                        BUCKET,
                        Op::Part {
                            key: "mp".into(),
                            upload_id: id.clone(),
                            n,
                        },
                    );
                    match c.put(&reg, 0, PART_LEN, &mut ctl) {
                        Ok(()) => {
                            ok.push((n, ctl.seen.last().unwrap().etag.clone().unwrap()));
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => return (ok, n, e.kind()),
                    }
                }
                panic!("UploadPart: the server never died");
            })
        };
        // Let transfers run, then kill the server under them. Bounded:
        // 12 transfers of 4-8 MiB come long before 6,000 polls.
        let mut polls = 0;
        while done.load(Ordering::SeqCst) < 12 {
            polls += 1;
            assert!(polls < 6_000, "transfers do not progress");
            std::thread::sleep(Duration::from_millis(10));
        }
        kill9(&mut server.child);
        (
            get_threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>(),
            put_threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>(),
            part_thread.join().unwrap(),
        )
    });

    // Every call in flight failed with a defined code.
    for (i, g) in get_ends.iter().enumerate() {
        assert!(defined_failure(g.kind), "GET {i} ended in {:?}", g.kind);
        // What a failed GET leaves: in the range, only the old bytes or the
        // object's bytes at the same offsets.
        let stray = g
            .left
            .iter()
            .zip(&gets[i])
            .position(|(got, want)| *got != UNWRITTEN && got != want);
        assert_eq!(stray, None, "GET {i}: the failed call left foreign bytes");
        let landed = g.left.iter().filter(|b| **b != UNWRITTEN).count();
        println!(
            "GET {i}: {} whole, then {:?} with {landed} bytes landed",
            g.ok, g.kind
        );
    }
    for (i, (last_ok, failed, kind)) in put_ends.iter().enumerate() {
        assert!(defined_failure(*kind), "PUT {i} ended in {kind:?}");
        println!("PUT {i}: version {last_ok} stored last, version {failed} failed with {kind:?}");
    }
    let (ok_parts, failed_part, kind) = &part_end;
    assert!(defined_failure(*kind), "UploadPart ended in {kind:?}");
    println!(
        "UploadPart: {} whole, part {failed_part} failed with {kind:?}",
        ok_parts.len()
    );

    // Restart on the same data directory.
    let server = start_server(&data_dir, port);
    for (i, g) in gets.iter().enumerate() {
        assert!(
            http_get(&rt, &s3, &format!("get-{i}")).unwrap() == *g,
            "get-{i} changed"
        );
    }
    for (i, (last_ok, failed, _)) in put_ends.iter().enumerate() {
        let got = http_get(&rt, &s3, &format!("put-{i}")).unwrap();
        // The version stored last, or the one in flight if the server
        // committed it before it died: whole either way, never torn.
        assert!(
            got == versions[i][*last_ok] || got == versions[i][*failed],
            "put-{i} is torn or lost after the restart ({} bytes)",
            got.len()
        );
    }
    // The upload: every part that succeeded, whole; the one in flight
    // whole or absent; no object until completed.
    assert_eq!(http_get(&rt, &s3, "mp"), Err("NoSuchKey".into()));
    let listed = rt
        .block_on(
            s3.list_parts()
                .bucket(BUCKET)
                .key("mp")
                .upload_id(&upload_id)
                .send(),
        )
        .unwrap();
    let mut parts = Vec::new();
    for p in listed.parts() {
        let n = p.part_number().unwrap();
        let etag = p.e_tag().unwrap().to_owned();
        assert_eq!(
            etag,
            format!("\"{}\"", md5_hex(&pattern(PART_LEN, n as u8))),
            "part {n} is not whole"
        );
        assert!(
            ok_parts.iter().any(|(m, _)| *m == n) || n == *failed_part,
            "part {n} was never sent"
        );
        parts.push(CompletedPart::builder().part_number(n).e_tag(etag).build());
    }
    for (n, _) in ok_parts {
        assert!(
            listed.parts().iter().any(|p| p.part_number() == Some(*n)),
            "part {n} succeeded and is gone"
        );
    }
    rt.block_on(
        s3.complete_multipart_upload()
            .bucket(BUCKET)
            .key("mp")
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts.clone()))
                    .build(),
            )
            .send(),
    )
    .unwrap();
    let want: Vec<u8> = parts
        .iter()
        .flat_map(|p| pattern(PART_LEN, p.part_number().unwrap() as u8))
        .collect();
    assert!(
        http_get(&rt, &s3, "mp").unwrap() == want,
        "the completed upload differs"
    );

    // The next transfers on the same client succeed (stale bindings rebind).
    let mut dst = vec![UNWRITTEN; GET_LEN];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::get("get-0"));
    c.get(&mut reg, 0, GET_LEN, &mut ctl)
        .unwrap_or_else(|e| panic!("GET after restart: {e} {:?}", ctl.seen));
    assert!(reg.to_vec() == gets[0].as_slice());
    drop(reg);
    let fresh = pattern(PUT_LEN, 99);
    let mut src = fresh.clone();
    let reg = c.register(std::mem::take(&mut src)).unwrap();
    let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::put("put-0"));
    c.put(&reg, 0, PUT_LEN, &mut ctl)
        .unwrap_or_else(|e| panic!("PUT after restart: {e} {:?}", ctl.seen));
    drop(reg);
    assert!(http_get(&rt, &s3, "put-0").unwrap() == fresh);
    // Nothing landed in the failed GETs' buffers after their calls
    // returned, though they are still registered: their QPs left RTS when
    // the calls failed.
    for (i, g) in get_ends.iter().enumerate() {
        assert!(
            g.reg.to_vec() == g.left.as_slice(),
            "GET {i}: bytes landed after the call failed"
        );
    }
    drop(get_ends);
    let m = metrics(&rt, server.addr);
    assert_eq!(metric(&m, "hipobj_rdma_in_flight"), Some(0), "{m}");
    let mut server = server;
    kill9(&mut server.child);
}

/// The child of `client_killed_mid_transfer_frees_its_binding`: GETs of a
/// large object in a loop until it is killed.
fn crash_client_child(endpoint: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.handle().clone();
    let s3 = support::client_for(endpoint, support::AK, support::SK);
    let c = client();
    let mut buf = vec![0u8; 64 << 20];
    let mut reg = c.register(std::mem::take(&mut buf)).unwrap();
    for i in 0..100_000 {
        let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::get("big"));
        c.get(&mut reg, 0, 64 << 20, &mut ctl).unwrap();
        if i == 0 {
            println!("child: transferring");
        }
    }
}

#[test]
fn client_killed_mid_transfer_frees_its_binding() {
    if let Ok(endpoint) = std::env::var(CHILD_ENV) {
        crash_client_child(&endpoint);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let mut server = start_server(&data_dir, free_port());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let endpoint = format!("http://{}", server.addr);
    let s3 = support::client_for(&endpoint, support::AK, support::SK);
    rt.block_on(s3.create_bucket().bucket(BUCKET).send()).unwrap();
    let big = pattern(64 << 20, 7);
    http_put(&rt, &s3, "big", big.clone());

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "client_killed_mid_transfer_frees_its_binding",
            "--nocapture",
        ])
        .env(CHILD_ENV, &endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("child: transferring") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child client ended early"
        );
    }
    // Kill it while the server is writing into it. Bounded: the child
    // loops on 64 MiB GETs, so a transfer is in flight at almost every poll.
    let mut polls = 0;
    loop {
        let m = metrics(&rt, server.addr);
        if metric(&m, "hipobj_rdma_in_flight").unwrap_or(0) > 0 {
            assert_eq!(metric(&m, "hipobj_rdma_bindings"), Some(1), "{m}");
            break;
        }
        polls += 1;
        assert!(polls < 10_000, "no transfer seen in flight: {m}");
    }
    kill9(&mut child);
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);

    // The server's RDMA to the dead QP fails and the binding goes, long
    // before the 600 s idle timeout could drop it; the fresh binding the
    // server made for the dead client's 409 never moves a byte, so it
    // lasts only 15 s. Bounded: 1,200 polls 50 ms apart.
    let mut m = String::new();
    for _ in 0..1_200 {
        m = metrics(&rt, server.addr);
        if metric(&m, "hipobj_rdma_bindings") == Some(0) && metric(&m, "hipobj_rdma_in_flight") == Some(0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        metric(&m, "hipobj_rdma_bindings"),
        Some(0),
        "the binding was not freed: {m}"
    );
    assert_eq!(metric(&m, "hipobj_rdma_in_flight"), Some(0), "{m}");

    // The server still serves others.
    let h = rt.handle().clone();
    let c = client();
    let mut dst = vec![0u8; 64 << 20];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::get("big"));
    c.get(&mut reg, 0, 64 << 20, &mut ctl)
        .unwrap_or_else(|e| panic!("GET after the client died: {e} {:?}", ctl.seen));
    assert!(reg.to_vec() == big.as_slice());
    drop(reg);
    kill9(&mut server.child);
}
