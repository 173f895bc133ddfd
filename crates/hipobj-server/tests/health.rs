//! Readiness and drain, as a load balancer sees them (issue 39, finding
//! 2): the `hipobj-server` binary, `/.hipobj/ready` polled while its S3
//! back end dies and comes back, and while it drains on SIGTERM with a GET
//! and a PUT in flight.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

use support::wire::read_response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What one look at `/.hipobj/ready` found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// A status and its body.
    Answer(u16, String),
    /// The connection was refused: the listener is closed.
    Refused,
}

async fn look(addr: SocketAddr, path: &str) -> Seen {
    let mut s = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Seen::Refused,
        Err(e) => panic!("connecting: {e}"),
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut s, &mut Vec::new()))
        .await
        .unwrap();
    match r {
        Ok(r) => Seen::Answer(r.status, String::from_utf8_lossy(&r.body).into_owned()),
        // Taken into the listen backlog just before the listener closed,
        // and reset with it: the listener is gone.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Seen::Refused
        }
        Err(e) => panic!("reading: {e}"),
    }
}

/// Polls `path` every few ms until `until` says stop; returns the last look.
async fn poll_until(addr: SocketAddr, path: &str, until: impl Fn(&Seen) -> bool) -> Seen {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = look(addr, path).await;
        if until(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{path} stayed {s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("server.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn credentials() -> String {
    format!(
        "[[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n",
        support::AK,
        support::SK
    )
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_goes_false_while_the_s3_back_end_is_down_and_true_when_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let back = hipobj_server::Server::start(support::config(&dir.path().join("back")))
        .await
        .unwrap();
    let back_addr = back.addr();
    let cfg = write_config(
        dir.path(),
        &format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n{}\n[storage]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key = \"{}\"\nsecret_key = \"{}\"\n",
            credentials(),
            back.endpoint(),
            support::AK,
            support::SK
        ),
    );
    let (mut gw, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "warn")]);

    let ready = poll_until(addr, "/.hipobj/ready", |s| matches!(s, Seen::Answer(200, _))).await;
    assert_eq!(ready, Seen::Answer(200, "ready\n".into()));
    assert_eq!(
        look(addr, "/.hipobj/health").await,
        Seen::Answer(200, "ok\n".into())
    );
    assert_eq!(
        look(addr, "/.hipobj/live").await,
        Seen::Answer(200, "live\n".into())
    );

    // The back end dies: S3 calls through the gateway fail, and readiness
    // says so (where `/.hipobj/health` used to answer `200 ok`).
    back.shutdown().await;
    let s3 = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
    let e = s3.list_buckets().send().await.unwrap_err();
    assert_eq!(support::code(&e), "ServiceUnavailable");
    let down = poll_until(addr, "/.hipobj/ready", |s| !matches!(s, Seen::Answer(200, _))).await;
    assert_eq!(down, Seen::Answer(503, "not ready: store\n".into()));
    // The old path answers as readiness does (where it said `200 ok`).
    assert_eq!(look(addr, "/.hipobj/health").await, down);
    // Liveness: the process answers.
    assert_eq!(
        look(addr, "/.hipobj/live").await,
        Seen::Answer(200, "live\n".into())
    );
    // Nothing of the back end leaks to the stranger asking.
    if let Seen::Answer(_, body) = &down {
        assert!(!body.contains(&back_addr.port().to_string()), "{body}");
    }

    // The back end is back on its address: ready again.
    let mut again = support::config(&dir.path().join("back"));
    again.address = back_addr;
    let back = hipobj_server::Server::start(again).await.unwrap();
    let up = poll_until(addr, "/.hipobj/ready", |s| matches!(s, Seen::Answer(200, _))).await;
    assert_eq!(up, Seen::Answer(200, "ready\n".into()));
    s3.list_buckets().send().await.unwrap();

    signal(&gw, "-TERM");
    assert!(wait_exit(&mut gw).success());
    back.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_goes_false_while_the_rdma_port_does_not_answer() {
    use hipobj_platform::fake::{FakeDeviceSpec, FakeTopology, FakeVerbs, Fault, Faults};
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let provider = hipobj_server::rdma::VerbsProvider {
        verbs: std::sync::Arc::new(FakeVerbs::new(vec![FakeDeviceSpec::default()], faults.clone())),
        topology: std::sync::Arc::new(FakeTopology::new(Vec::new(), faults.clone())),
    };
    let mut c = support::config(dir.path());
    c.rdma.enabled = true;
    c.rdma.device = Some("fake0".into());
    let h = hipobj_server::Server::start_with(c, Some(provider))
        .await
        .unwrap();
    let addr = h.addr();
    let up = poll_until(addr, "/.hipobj/ready", |s| matches!(s, Seen::Answer(200, _))).await;
    assert_eq!(up, Seen::Answer(200, "ready\n".into()));
    // The device stops answering for its port.
    faults.set("query_port", Fault::Fail);
    let down = poll_until(addr, "/.hipobj/ready", |s| !matches!(s, Seen::Answer(200, _))).await;
    assert_eq!(down, Seen::Answer(503, "not ready: rdma\n".into()));
    assert_eq!(
        look(addr, "/.hipobj/live").await,
        Seen::Answer(200, "live\n".into())
    );
    faults.clear();
    poll_until(addr, "/.hipobj/ready", |s| matches!(s, Seen::Answer(200, _))).await;
    h.shutdown().await;
}

/// A signed request head for `method path` with an unsigned payload of
/// `len` bytes.
fn signed_head(addr: SocketAddr, method: &str, path: &str, len: usize) -> String {
    let host = addr.to_string();
    let signed = support::sigv4::sign(
        method,
        path,
        &host,
        "UNSIGNED-PAYLOAD",
        &[],
        (support::AK, support::SK),
    );
    signed.head(method, path, &[("content-length", len.to_string())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_is_seen_by_a_polling_load_balancer_and_requests_in_flight_finish() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = write_config(
        dir.path(),
        &format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\ndrain_delay_secs = 3\nshutdown_grace_secs = 60\n{}\n[storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[limits]\nfsync = false\n",
            credentials(),
            data.display()
        ),
    );
    let (mut child, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "warn")]);
    let s3 = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
    s3.create_bucket().bucket("drain").send().await.unwrap();
    let big = support::pattern(32 << 20, 7);
    s3.put_object()
        .bucket("drain")
        .key("big")
        .body(big.clone().into())
        .send()
        .await
        .unwrap();

    // A GET in flight: the head and the first bytes read, the rest not yet.
    let mut get = TcpStream::connect(addr).await.unwrap();
    get.write_all(signed_head(addr, "GET", "/drain/big", 0).as_bytes())
        .await
        .unwrap();
    let mut got = vec![0u8; 4096];
    let mut first = 0;
    while first < got.len() {
        let n = get.read(&mut got[first..]).await.unwrap();
        assert!(n > 0);
        first += n;
    }
    // A PUT in flight: its head and half its body sent.
    let put_body = support::pattern(1 << 20, 9);
    let mut put = TcpStream::connect(addr).await.unwrap();
    put.write_all(signed_head(addr, "PUT", "/drain/late", put_body.len()).as_bytes())
        .await
        .unwrap();
    put.write_all(&put_body[..put_body.len() / 2]).await.unwrap();

    // The load balancer polls readiness every few ms until the listener
    // is gone.
    let (saw_ready, mut lb_ready) = tokio::sync::watch::channel(false);
    let lb = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            let s = look(addr, "/.hipobj/ready").await;
            let done = s == Seen::Refused;
            if matches!(s, Seen::Answer(200, _)) {
                let _ = saw_ready.send(true);
            }
            if seen.last() != Some(&s) {
                seen.push(s);
            }
            if done {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    // SIGTERM once the load balancer has seen the server ready.
    tokio::time::timeout(Duration::from_secs(30), lb_ready.wait_for(|r| *r))
        .await
        .unwrap()
        .unwrap();
    signal(&child, "-TERM");
    let seen = tokio::time::timeout(Duration::from_secs(60), lb)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen,
        [
            Seen::Answer(200, "ready\n".into()),
            Seen::Answer(503, "not ready: draining\n".into()),
            Seen::Refused
        ],
        "the load balancer's view"
    );
    // The listener is closed; the requests begun before SIGTERM finish.
    put.write_all(&put_body[put_body.len() / 2..]).await.unwrap();
    let r = read_response(&mut put, &mut Vec::new()).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut rest = Vec::new();
    get.read_to_end(&mut rest).await.unwrap();
    got.extend_from_slice(&rest);
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..head_end])
    );
    assert!(got[head_end..] == big[..], "the GET's bytes differ");
    assert!(wait_exit(&mut child).success(), "exit status 0 after a drain");

    // The PUT that finished during the drain is stored.
    let (mut child, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "warn")]);
    let s3 = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
    let o = s3.get_object().bucket("drain").key("late").send().await.unwrap();
    let stored = o.body.collect().await.unwrap().into_bytes();
    assert!(stored[..] == put_body[..], "the PUT's bytes differ");
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
}
