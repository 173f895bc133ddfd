//! Issue 41: one large transfer as many parts in flight, within the
//! server's limit. hipobj-server on the soft NIC with a 1 MiB transfer cap
//! (`rdma.max_transfer`); objects several times the cap go by GetObject and
//! PutObject of one buffer, and must arrive exact, every part by RDMA (the
//! server's own counters in `/.hipobj/metrics`). Some tests put an HTTP
//! proxy between client and server that sees every request, holds token
//! requests until two are in flight, and answers one part with an error.
#![allow(clippy::unwrap_used, dead_code)]

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hipobj_platform::{NoGpu, NoTopology, Platform};
use hipobj_s3::{Parallel, RdmaS3Client, Span};
use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_server::rdma::RdmaRules;
use hipobj_softroce::{SoftConfig, SoftVerbs};
use support::{Req, Resp, runtime, sdk, start};

const CAP: u64 = 1 << 20;
/// Four caps and a bit: five parts, the last short.
const SIZE: usize = (4 << 20) + 12_345;

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 11) as u8)
        .collect()
}

struct World {
    rt: tokio::runtime::Runtime,
    server: hipobj_server::Handle,
    _dir: tempfile::TempDir,
    server_ip: std::net::Ipv4Addr,
}

fn world() -> World {
    world_with(RdmaRules::Hipobj)
}

fn world_with(rules: RdmaRules) -> World {
    world_v2_staging(rules, hipobj_server::config::RdmaConfig::default().v2_staging_max)
}

fn world_v2_staging(rules: RdmaRules, v2_staging_max: usize) -> World {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut config = hipobj_server::Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: "AKTEST".into(),
            secret_key: "secret".into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        ..hipobj_server::Config::default()
    };
    config.limits.fsync = false;
    // Parts of one cap are below S3's 5 MiB minimum: allowed here.
    config.limits.min_part_size = 64 << 10;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    config.rdma.max_transfer = CAP;
    config.rdma.rules = rules;
    config.rdma.v2_staging_max = v2_staging_max;
    let server = rt.block_on(hipobj_server::Server::start(config)).unwrap();
    rt.block_on(sdk(&server.endpoint()).create_bucket().bucket("bkt").send())
        .unwrap();
    let server_ip = server
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    World {
        rt,
        server,
        _dir: dir,
        server_ip,
    }
}

fn hipobj_client(nic: &str, server_ip: std::net::Ipv4Addr) -> hipobj::Client {
    let platform = Platform {
        verbs: Arc::new(SoftVerbs::new(SoftConfig {
            name: nic.into(),
            ..SoftConfig::default()
        })),
        gpu: Arc::new(NoGpu::new("test")),
        topology: Arc::new(NoTopology),
    };
    hipobj::Client::builder(platform)
        .nic_hint(nic)
        .options(hipobj::Options {
            max_transfers: 8,
            allow_peer: hipobj::AllowPeer::Listed(vec![server_ip.into()]),
            ..hipobj::Options::default()
        })
        .build()
        .unwrap()
}

/// The value of counter `name` in the server's `/.hipobj/metrics`.
fn metric(addr: SocketAddr, name: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

fn uploads_left(w: &World) -> usize {
    let out =
        w.rt.block_on(
            sdk(&w.server.endpoint())
                .list_multipart_uploads()
                .bucket("bkt")
                .send(),
        )
        .unwrap();
    out.uploads().len()
}

#[test]
fn a_get_and_a_put_several_times_the_cap_move_every_part_by_rdma() {
    let w = world();
    let h = hipobj_client("softroce-lg1", w.server_ip);
    let c = RdmaS3Client::new(sdk(&w.server.endpoint()), h.clone(), w.rt.handle().clone());
    let data = pattern(SIZE);
    let reg = h.register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(SIZE), "bkt", "big").unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!(t.bytes, SIZE as u64);
    assert_eq!(
        c.learned_limit(),
        Some(CAP),
        "the cap is learned from the refusal"
    );
    assert_eq!(uploads_left(&w), 0);
    drop(reg);

    // A fresh client: it learns the cap from the GET's own refusal.
    let c = RdmaS3Client::new(sdk(&w.server.endpoint()), h.clone(), w.rt.handle().clone());
    let mut reg = h.register(vec![0u8; SIZE]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "big", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!((t.bytes, t.object_size), (SIZE as u64, Some(SIZE as u64)));
    assert!(reg.to_vec() == data, "the bytes differ");
    drop(reg);

    // Every part by RDMA: the server READ the whole object for the PUT
    // and WROTE it for the GET (a probe may add its one byte), and
    // declined nothing.
    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_read_total"), SIZE as u64);
    let written = metric(addr, "hipobj_rdma_bytes_written_total");
    assert!((SIZE as u64..=SIZE as u64 + 1).contains(&written), "{written}");
    assert_eq!(metric(addr, "hipobj_rdma_puts_total"), 5);
    assert_eq!(metric(addr, "hipobj_rdma_declines_total"), 0);
    w.rt.block_on(w.server.shutdown());
}

/// The Ceph RGW fork's rules: a transfer over the cap is answered `413`
/// naming no limit, and a token request any of whose `x-amz-rdma-*`
/// headers is not signed is refused `403`. The client halves a refused
/// part until one passes, and every header it sends is signed, so every
/// part still moves by RDMA.
#[test]
fn under_the_ceph_rgw_rules_every_part_still_moves_by_rdma() {
    let w = world_with(RdmaRules::CephRgw);
    let h = hipobj_client("softroce-lg4", w.server_ip);
    let c = RdmaS3Client::new(sdk(&w.server.endpoint()), h.clone(), w.rt.handle().clone());
    let data = pattern(SIZE);
    let reg = h.register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(SIZE), "bkt", "big").unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    let learned = c.learned_limit().unwrap();
    assert!(learned <= CAP, "{learned}");
    assert_eq!(uploads_left(&w), 0);
    drop(reg);

    let c = RdmaS3Client::new(sdk(&w.server.endpoint()), h.clone(), w.rt.handle().clone());
    let mut reg = h.register(vec![0u8; SIZE]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "big", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert!(reg.to_vec() == data, "the bytes differ");

    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_read_total"), SIZE as u64);
    let written = metric(addr, "hipobj_rdma_bytes_written_total");
    assert!((SIZE as u64..=SIZE as u64 + 1).contains(&written), "{written}");
    assert_eq!(metric(addr, "hipobj_rdma_declines_total"), 0);
    w.rt.block_on(w.server.shutdown());
}

/// hipobj-rc-v2's `mp` extension: hipobj-server reached through a front
/// that declines the binding exchange (501 + unsupported), as a v2-only
/// server would, with a v2 staging limit of 1 MiB. A PutObject four times
/// that is refused whole (413); the server advertised `mp`, so the client
/// makes a multipart upload whose parts go by v2 too, every byte by RDMA.
/// Without `mp` the parts went over plain HTTP.
#[test]
fn over_hipobj_rc_v2_an_object_over_the_staging_limit_goes_as_parts_by_rdma() {
    let w = world_v2_staging(RdmaRules::Hipobj, CAP as usize);
    let to = w.server.addr();
    let front_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap();
    let front = start(&front_rt, move |req, _| {
        if req.token().is_some() && !req.target.starts_with(hipobj_proto::rc_v2::PATH_PREFIX) {
            return Resp::error(501, "NotImplemented")
                .header(hipobj_proto::REPLY_HEADER, "501")
                .header(
                    hipobj_proto::rc_v2::PROTOCOL_STATUS_HEADER,
                    hipobj_proto::rc_v2::PROTOCOL_STATUS_UNSUPPORTED,
                );
        }
        forward(to, req)
    });
    let h = hipobj_client("softroce-lg5", w.server_ip);
    let c = RdmaS3Client::new(sdk(&front.endpoint()), h.clone(), w.rt.handle().clone());
    let data = pattern(SIZE);
    let reg = h.register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(SIZE), "bkt", "v2-parts").unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!(c.protocol(), hipobj_s3::Protocol::RcV2);
    assert!(
        c.learned_limit().is_some_and(|l| l <= CAP),
        "{:?}",
        c.learned_limit()
    );
    assert_eq!(uploads_left(&w), 0);
    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_read_total"), SIZE as u64);
    assert!(metric(addr, "hipobj_rdma_puts_total") >= 5);
    let got = w.rt.block_on(async {
        let o = sdk(&w.server.endpoint())
            .get_object()
            .bucket("bkt")
            .key("v2-parts")
            .send()
            .await
            .unwrap();
        o.body.collect().await.unwrap().into_bytes()
    });
    assert!(got.as_ref() == data.as_slice(), "the stored bytes differ");
    // Each part was sent as a v2 PREPARE naming the upload and its number.
    let parts = front
        .requests()
        .iter()
        .filter(|r| r.target == hipobj_proto::rc_v2::PREPARE_PATH)
        .filter(|r| r.header(hipobj_proto::rc_v2::PART_NUMBER_HEADER).is_some())
        .count();
    assert!(parts >= 5, "{parts} part PREPAREs");
    w.rt.block_on(w.server.shutdown());
}

/// A front that declines the binding exchange (501 + unsupported), as a
/// v2-only server does, and forwards the rest to the server at `to`. With
/// `hold`, each PREPARE answered 200 is held until a later one is (or
/// 2 s pass), and `most` keeps the most v2 sessions the server had open at
/// once, read off the server's own table as each PREPARE is answered.
struct V2Front {
    double: support::Double,
    most: Arc<Mutex<usize>>,
    _rt: tokio::runtime::Runtime,
}

fn v2_front(w: &World, hold: bool) -> V2Front {
    let to = w.server.addr();
    let sessions = w.server.v2_sessions().cloned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(12)
        .enable_all()
        .build()
        .unwrap();
    let most = Arc::new(Mutex::new(0usize));
    let m2 = most.clone();
    let answered = Arc::new((Mutex::new(0usize), Condvar::new()));
    let double = start(&rt, move |req, _| {
        if req.token().is_some() && !req.target.starts_with(hipobj_proto::rc_v2::PATH_PREFIX) {
            return Resp::error(501, "NotImplemented")
                .header(hipobj_proto::REPLY_HEADER, "501")
                .header(
                    hipobj_proto::rc_v2::PROTOCOL_STATUS_HEADER,
                    hipobj_proto::rc_v2::PROTOCOL_STATUS_UNSUPPORTED,
                );
        }
        let resp = forward(to, req);
        if hold && req.target == hipobj_proto::rc_v2::PREPARE_PATH && resp.status == 200 {
            if let Some(s) = &sessions {
                let mut m = m2.lock().unwrap();
                *m = (*m).max(s.open_sessions());
            }
            let (lock, cv) = &*answered;
            let mut n = lock.lock().unwrap();
            *n += 1;
            let mine = *n;
            cv.notify_all();
            let _ = cv
                .wait_timeout_while(n, Duration::from_secs(2), |n| *n == mine)
                .unwrap();
        }
        resp
    });
    V2Front {
        double,
        most,
        _rt: rt,
    }
}

/// Issue 41 over hipobj-rc-v2: a GET of an object four times the server's
/// v2 staging limit, from a front that declines the binding exchange. The
/// server refuses the whole range at PREPARE (413, as it does a PUT: one
/// session's WRITE WITH IMMEDIATE must count every byte), and the client
/// moves the object as ranged v2 GETs within the limit it learned, every
/// byte written by RDMA. The limit stays learned for the endpoint: a
/// second GET meets no refusal.
#[test]
fn over_hipobj_rc_v2_a_get_over_the_staging_limit_goes_as_ranged_gets_by_rdma() {
    let w = world_v2_staging(RdmaRules::Hipobj, CAP as usize);
    let data = pattern(SIZE);
    w.rt.block_on(
        sdk(&w.server.endpoint())
            .put_object()
            .bucket("bkt")
            .key("v2-big")
            .body(data.clone().into())
            .send(),
    )
    .unwrap();
    let front = v2_front(&w, false);
    let h = hipobj_client("softroce-lg6", w.server_ip);
    let c = RdmaS3Client::new(sdk(&front.double.endpoint()), h.clone(), w.rt.handle().clone());
    let mut reg = h.register(vec![0u8; SIZE]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "v2-big", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none(), "{t:?}");
    assert_eq!((t.bytes, t.object_size), (SIZE as u64, Some(SIZE as u64)));
    assert!(reg.to_vec() == data, "the bytes differ");
    assert_eq!(c.protocol(), hipobj_s3::Protocol::RcV2);
    assert!(
        c.learned_limit().is_some_and(|l| l <= CAP),
        "{:?}",
        c.learned_limit()
    );
    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_written_total"), SIZE as u64);
    let refusals = metric(addr, "hipobj_rdma_v2_errors_total");

    // Again, by a clone: straight to ranges within the limit.
    reg.fill(0);
    let t = c
        .clone()
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "v2-big", None)
        .unwrap();
    assert!(t.rdma && t.bytes == SIZE as u64, "{t:?}");
    assert!(reg.to_vec() == data, "the bytes differ the second time");
    assert_eq!(
        metric(addr, "hipobj_rdma_v2_errors_total"),
        refusals,
        "refused again"
    );
    assert_eq!(metric(addr, "hipobj_rdma_bytes_written_total"), 2 * SIZE as u64);
    w.rt.block_on(w.server.shutdown());
}

/// Issue 41 over hipobj-rc-v2: the `mp` parts of a PUT and the ranges of
/// a GET go `in_flight` at a time, each a session of its own, into the one
/// registration. The front holds each PREPARE's answer until another is
/// answered, and reads the server's open sessions as each is: more than
/// one at once in each call (one at a time, each answer is held alone and
/// the count stays 1). Every byte by RDMA, exact.
#[test]
fn over_hipobj_rc_v2_parts_and_ranges_go_in_flight_each_a_session_of_its_own() {
    let w = world_v2_staging(RdmaRules::Hipobj, CAP as usize);
    let front = v2_front(&w, true);
    let h = hipobj_client("softroce-lg7", w.server_ip);
    let c = RdmaS3Client::new(sdk(&front.double.endpoint()), h.clone(), w.rt.handle().clone()).parallel(
        Parallel {
            part_size: CAP as usize,
            in_flight: 4,
        },
    );
    let data = pattern(SIZE);
    let reg = h.register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(SIZE), "bkt", "v2-flight").unwrap();
    assert!(t.rdma && t.declined.is_none() && t.bytes == SIZE as u64, "{t:?}");
    drop(reg);
    assert_eq!(uploads_left(&w), 0);
    let most_put = std::mem::take(&mut *front.most.lock().unwrap());
    assert!(
        most_put >= 2,
        "the PUT's parts went one session at a time ({most_put})"
    );

    let mut reg = h.register(vec![0u8; SIZE]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "v2-flight", None)
        .unwrap();
    assert!(t.rdma && t.declined.is_none() && t.bytes == SIZE as u64, "{t:?}");
    assert!(reg.to_vec() == data, "the bytes differ");
    let most_get = *front.most.lock().unwrap();
    assert!(
        most_get >= 2,
        "the GET's ranges went one session at a time ({most_get})"
    );

    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_read_total"), SIZE as u64);
    assert_eq!(metric(addr, "hipobj_rdma_bytes_written_total"), SIZE as u64);
    assert_eq!(metric(addr, "hipobj_rdma_declines_total"), 0);
    let stored = w.rt.block_on(async {
        let o = sdk(&w.server.endpoint())
            .get_object()
            .bucket("bkt")
            .key("v2-flight")
            .send()
            .await
            .unwrap();
        o.body.collect().await.unwrap().into_bytes()
    });
    assert!(stored.as_ref() == data.as_slice(), "the stored bytes differ");
    w.rt.block_on(w.server.shutdown());
}

/// A proxy in front of the server: it forwards each request, holds each
/// token request until a second one is in flight (or 2 s pass), and
/// answers the first request that `fail` picks with `answer` instead.
struct Proxy {
    double: support::Double,
    /// Most token requests seen in flight at once.
    most: Arc<Mutex<usize>>,
    _rt: tokio::runtime::Runtime,
}

fn proxy(to: SocketAddr, fail: impl Fn(&Req) -> bool + Send + Sync + 'static, answer: Resp) -> Proxy {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(12)
        .enable_all()
        .build()
        .unwrap();
    let flight = Arc::new((Mutex::new(0usize), Condvar::new()));
    let most = Arc::new(Mutex::new(0usize));
    let failed = Arc::new(Mutex::new(false));
    let m2 = most.clone();
    let double = start(&rt, move |req, _| {
        if req.token().is_none() {
            return forward(to, req);
        }
        {
            let mut f = failed.lock().unwrap();
            if !*f && fail(req) {
                *f = true;
                return answer.clone();
            }
        }
        let (lock, cv) = &*flight;
        let mut n = lock.lock().unwrap();
        *n += 1;
        {
            let mut m = m2.lock().unwrap();
            *m = (*m).max(*n);
        }
        cv.notify_all();
        let (g, _) = cv
            .wait_timeout_while(n, Duration::from_secs(2), |n| *n < 2)
            .unwrap();
        drop(g);
        let resp = forward(to, req);
        *lock.lock().unwrap() -= 1;
        resp
    });
    Proxy {
        double,
        most,
        _rt: rt,
    }
}

/// Sends `req` to `to` over a connection of its own and reads the answer.
fn forward(to: SocketAddr, req: &Req) -> Resp {
    let mut s = std::net::TcpStream::connect(to).unwrap();
    let mut head = format!("{} {} HTTP/1.1\r\n", req.method, req.target);
    for (k, v) in &req.headers {
        if k != "connection" {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("connection: close\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&req.body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let text = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let mut resp = Resp::new(status);
    let (mut chunked, mut length) = (false, 0usize);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
        match k.as_str() {
            "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
            "content-length" => length = v.parse().unwrap_or(0),
            "connection" => {}
            _ => resp = resp.header(&k, v),
        }
    }
    let mut body = raw[end + 4..].to_vec();
    if chunked {
        body = dechunk(&body);
    }
    if req.method == "HEAD" {
        // The double sends no body to a HEAD, only its length.
        body = vec![0; length];
    }
    resp.body(body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&b[..eol]).into_owned();
        let n = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

fn part_number(req: &Req) -> Option<u32> {
    req.target
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("partNumber="))
        .and_then(|n| n.parse().ok())
}

#[test]
fn a_part_answered_slow_down_is_sent_again_with_a_fresh_token_and_parts_overlap() {
    let w = world();
    let h = hipobj_client("softroce-lg2", w.server_ip);
    // The third part of the PUT, and the range of the GET's third part,
    // are answered 503 SlowDown once each (one proxy for each call).
    let third_range = format!("bytes={}-{}", 2 * CAP, 3 * CAP - 1);
    let put_proxy = proxy(
        w.server.addr(),
        |r| part_number(r) == Some(3),
        Resp::error(503, "SlowDown"),
    );
    let c = RdmaS3Client::new(
        sdk(&put_proxy.double.endpoint()),
        h.clone(),
        w.rt.handle().clone(),
    )
    .parallel(Parallel {
        part_size: CAP as usize,
        in_flight: 4,
    });
    let data = pattern(SIZE);
    let reg = h.register(data.clone()).unwrap();
    let t = c.put_object(&reg, Span::whole(SIZE), "bkt", "big").unwrap();
    assert!(t.rdma && t.bytes == SIZE as u64, "{t:?}");
    drop(reg);
    let tokens: Vec<String> = put_proxy
        .double
        .requests()
        .iter()
        .filter(|r| part_number(r) == Some(3) && r.token().is_some())
        .map(|r| r.token().unwrap().to_owned())
        .collect();
    assert!(tokens.len() >= 2, "part 3 was not sent again: {tokens:?}");
    assert_ne!(tokens[0], tokens[tokens.len() - 1], "the retry reused the token");
    assert!(
        *put_proxy.most.lock().unwrap() >= 2,
        "no two parts were in flight at once"
    );

    let r2 = third_range.clone();
    let get_proxy = proxy(
        w.server.addr(),
        move |r| r.header("range") == Some(r2.as_str()),
        Resp::error(503, "SlowDown"),
    );
    let c = RdmaS3Client::new(
        sdk(&get_proxy.double.endpoint()),
        h.clone(),
        w.rt.handle().clone(),
    )
    .parallel(Parallel {
        part_size: CAP as usize,
        in_flight: 4,
    });
    let mut reg = h.register(vec![0u8; SIZE]).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(SIZE), "bkt", "big", None)
        .unwrap();
    assert!(t.rdma && t.bytes == SIZE as u64, "{t:?}");
    assert!(reg.to_vec() == data, "the bytes differ");
    drop(reg);
    let third = get_proxy
        .double
        .requests()
        .iter()
        .filter(|r| r.header("range") == Some(third_range.as_str()) && r.token().is_some())
        .count();
    assert!(third >= 2, "the third range was not sent again");
    assert!(
        *get_proxy.most.lock().unwrap() >= 2,
        "no two parts were in flight at once"
    );
    let addr = w.server.addr();
    assert_eq!(metric(addr, "hipobj_rdma_bytes_read_total"), SIZE as u64);
    assert_eq!(metric(addr, "hipobj_rdma_declines_total"), 0);
    w.rt.block_on(w.server.shutdown());
}

#[test]
fn an_upload_whose_part_fails_is_aborted_and_the_call_fails() {
    let w = world();
    let h = hipobj_client("softroce-lg3", w.server_ip);
    let p = proxy(
        w.server.addr(),
        |r| part_number(r) == Some(4),
        Resp::error(500, "InternalError"),
    );
    let c =
        RdmaS3Client::new(sdk(&p.double.endpoint()), h.clone(), w.rt.handle().clone()).parallel(Parallel {
            part_size: CAP as usize,
            in_flight: 2,
        });
    let reg = h.register(pattern(SIZE)).unwrap();
    let e = c
        .put_object(&reg, Span::whole(SIZE), "bkt", "doomed")
        .unwrap_err();
    assert_eq!(
        (e.status(), e.s3_code()),
        (Some(500), Some("InternalError")),
        "{e}"
    );
    drop(reg);
    assert!(
        p.double
            .requests()
            .iter()
            .any(|r| r.method == "DELETE" && r.target.contains("uploadId=")),
        "no AbortMultipartUpload was sent"
    );
    assert_eq!(uploads_left(&w), 0, "the upload's parts were left behind");
    let missing =
        w.rt.block_on(
            sdk(&w.server.endpoint())
                .head_object()
                .bucket("bkt")
                .key("doomed")
                .send(),
        )
        .is_err();
    assert!(missing, "a failed upload left an object");
    w.rt.block_on(w.server.shutdown());
}
