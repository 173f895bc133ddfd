//! TLS on the listener (docs/server.md, "TLS"), with certificates from a CA
//! made for each test: aws-sdk-s3 and curl over https, HTTP/1.1 by ALPN,
//! plain HTTP refused on the TLS port, the certificate renewed without a
//! restart (by the API, by watching the files, by SIGHUP to the command),
//! a renewal that fails keeping the certificate in service, unusable
//! files refused at start, and a stalled handshake cut by the same timer
//! that cuts a stalled request head.
#![allow(clippy::unwrap_used)]

mod support;
#[path = "support/test_ca.rs"]
mod test_ca;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_s3::tls::{CaBundle, http_client};
use hipobj_server::{Config, Handle, Server};
use test_ca::{ServerFiles, TestCa};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// An aws-sdk-s3 client for `h` that trusts `ca` (None: the system's roots).
fn sdk(endpoint: &str, ca: Option<&str>) -> aws_sdk_s3::Client {
    let bundle = ca.map(|pem| CaBundle::from_pem(pem).unwrap());
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http_client(bundle.as_ref()).unwrap())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(support::AK, support::SK, None, None, "test"))
            .force_path_style(true)
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// A server serving `files`, with `edit` applied to its config.
async fn start_tls(files: &ServerFiles, edit: impl FnOnce(&mut Config)) -> (Handle, tempfile::TempDir) {
    support::start(|c| {
        c.tls.cert = Some(files.cert.clone());
        c.tls.key = Some(files.key.clone());
        c.tls.reload_check_secs = 0;
        edit(c);
    })
    .await
}

/// A TLS handshake with `addr` as a client that trusts `cas` and offers
/// `alpn`.
async fn handshake(addr: SocketAddr, cas: &[&str], alpn: &[&[u8]]) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in cas {
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// The certificate a handshake was given (DER).
fn served(s: &TlsStream<TcpStream>) -> Vec<u8> {
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// `GET /.hipobj/health` on an open connection, kept alive: the status.
async fn health(s: &mut TlsStream<TcpStream>) -> u16 {
    s.write_all(b"GET /.hipobj/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let text = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "the connection closed: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let t = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = t.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                break t;
            }
        }
    };
    text[9..12].parse().unwrap()
}

/// What a new connection is served, asked until `want` comes or 15 s pass.
async fn wait_for_cert(addr: SocketAddr, cas: &[&str], want: &[u8]) -> bool {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        if let Ok(s) = handshake(addr, cas, &[b"http/1.1"]).await
            && served(&s) == want
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_s3_to_sdk_and_curl_with_http11_by_alpn_and_no_plain_http() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj test CA");
    let files = ca.write_server(certs.path(), "server");
    let bundle = ca.write_bundle(&certs.path().join("ca.pem"));
    let (h, _dir) = start_tls(&files, |_| {}).await;
    let ep = h.endpoint();
    assert_eq!(ep, format!("https://{}", h.addr()));

    // aws-sdk-s3 trusting the CA: S3 over https.
    let s3 = sdk(&ep, Some(ca.pem()));
    s3.create_bucket().bucket("tls").send().await.unwrap();
    let data = support::pattern(300_000, 7);
    s3.put_object()
        .bucket("tls")
        .key("obj")
        .body(data.clone().into())
        .send()
        .await
        .unwrap();
    let back = s3.get_object().bucket("tls").key("obj").send().await.unwrap();
    assert!(back.body.collect().await.unwrap().into_bytes().as_ref() == data.as_slice());

    // curl --cacert, signing with --aws-sigv4: the same object.
    let url = format!("{ep}/tls/obj");
    let user = format!("{}:{}", support::AK, support::SK);
    let sig = [
        "--aws-sigv4",
        "aws:amz:us-east-1:s3",
        "--user",
        &user,
        "-H",
        "x-amz-content-sha256: UNSIGNED-PAYLOAD",
    ];
    let out = tokio::task::spawn_blocking({
        let (bundle, url) = (bundle.clone(), url.clone());
        let sig = sig.map(str::to_owned);
        move || {
            let mut a: Vec<&str> = vec!["--cacert", bundle.to_str().unwrap()];
            a.extend(sig.iter().map(String::as_str));
            a.extend(["-w", "\n%{http_version}", &url]);
            curl(&a)
        }
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (body, version) = out.stdout.split_at(out.stdout.len() - 4);
    assert!(body == data.as_slice(), "curl got other bytes");
    assert_eq!(version, b"\n1.1", "curl did not speak HTTP/1.1");

    // curl trusting another CA, or only the system's roots: refused (60:
    // the peer certificate cannot be authenticated).
    let other = TestCa::new("someone else's CA").write_bundle(&certs.path().join("other.pem"));
    for cacert in [Some(other.to_str().unwrap()), None] {
        let mut a = Vec::new();
        if let Some(c) = cacert {
            a.extend(["--cacert", c]);
        }
        a.extend(sig);
        a.push(&url);
        let a: Vec<String> = a.iter().map(|s| (*s).to_owned()).collect();
        let out =
            tokio::task::spawn_blocking(move || curl(&a.iter().map(String::as_str).collect::<Vec<_>>()))
                .await
                .unwrap();
        assert_eq!(
            out.status.code(),
            Some(60),
            "{cacert:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // ALPN: a client offering h2 and http/1.1 gets http/1.1; one that
    // speaks only h2 is refused; one that offers nothing is served.
    let s = handshake(h.addr(), &[ca.pem()], &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(served(&s), files.der);
    assert!(
        handshake(h.addr(), &[ca.pem()], &[b"h2"]).await.is_err(),
        "h2 alone was accepted"
    );
    let mut s = handshake(h.addr(), &[ca.pem()], &[]).await.unwrap();
    assert_eq!(health(&mut s).await, 200);

    // Plain HTTP on the TLS port: no HTTP answer, and nothing served.
    let before = h
        .metrics()
        .http_requests
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut tcp = TcpStream::connect(h.addr()).await.unwrap();
    tcp.write_all(b"GET /.hipobj/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(!out.starts_with(b"HTTP/"), "plain HTTP was answered: {out:?}");
    assert_eq!(
        h.metrics()
            .http_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        before
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_reaches_new_connections_and_open_ones_keep_theirs() {
    let certs = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (TestCa::new("first CA"), TestCa::new("second CA"));
    let first = ca1.write_server(certs.path(), "server");
    let second = ca2.write_server(certs.path(), "renewed");
    let (h, _dir) = start_tls(&first, |_| {}).await;
    let both = [ca1.pem(), ca2.pem()];
    let mut open = handshake(h.addr(), &both, &[b"http/1.1"]).await.unwrap();
    assert_eq!(served(&open), first.der);
    assert_eq!(health(&mut open).await, 200);

    second.install_over(&first);
    // Not watched (reload_check_secs = 0), not reloaded: still the first.
    let s = handshake(h.addr(), &both, &[]).await.unwrap();
    assert_eq!(served(&s), first.der, "served before a reload was asked for");
    h.reload_tls().unwrap();
    let s = handshake(h.addr(), &both, &[]).await.unwrap();
    assert_eq!(
        served(&s),
        second.der,
        "a new connection still gets the old certificate"
    );
    assert_eq!(h.tls().unwrap().chain()[0].as_ref(), second.der.as_slice());
    // The connection opened before keeps working.
    assert_eq!(health(&mut open).await, 200);
    // A client that trusts only the first CA is now refused, and says why;
    // one that trusts the second is served.
    let e = sdk(&h.endpoint(), Some(ca1.pem()))
        .list_buckets()
        .send()
        .await
        .unwrap_err();
    let e = hipobj_s3::Error::from_sdk("ListBuckets", &e);
    assert!(e.is_untrusted(), "{e}");
    sdk(&h.endpoint(), Some(ca2.pem()))
        .list_buckets()
        .send()
        .await
        .unwrap();
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_fails_keeps_the_certificate_in_service() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj test CA");
    let files = ca.write_server(certs.path(), "server");
    let other = ca.write_server(certs.path(), "other");
    let (h, _dir) = start_tls(&files, |_| {}).await;
    let key = std::fs::read(&files.key).unwrap();

    // Another certificate's key; a certificate file that is not one; no
    // files at all: each reload fails, says why, and changes nothing.
    std::fs::copy(&other.key, &files.key).unwrap();
    let e = h.reload_tls().unwrap_err().to_string();
    assert!(e.contains("do not make a certificate and its key"), "{e}");
    std::fs::write(&files.key, &key).unwrap();
    std::fs::write(
        &files.cert,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    assert!(h.reload_tls().is_err(), "a broken certificate was put in service");
    std::fs::remove_file(&files.cert).unwrap();
    let e = h.reload_tls().unwrap_err().to_string();
    assert!(e.contains("reading"), "{e}");
    let s = handshake(h.addr(), &[ca.pem()], &[]).await.unwrap();
    assert_eq!(served(&s), files.der);
    sdk(&h.endpoint(), Some(ca.pem()))
        .list_buckets()
        .send()
        .await
        .unwrap();
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_files_are_picked_up_without_a_signal() {
    let certs = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (TestCa::new("first CA"), TestCa::new("second CA"));
    let first = ca1.write_server(certs.path(), "server");
    let second = ca2.write_server(certs.path(), "renewed");
    let (h, _dir) = start_tls(&first, |c| c.tls.reload_check_secs = 1).await;
    let both = [ca1.pem(), ca2.pem()];
    assert_eq!(served(&handshake(h.addr(), &both, &[]).await.unwrap()), first.der);
    second.install_over(&first);
    assert!(
        wait_for_cert(h.addr(), &both, &second.der).await,
        "the renewed files were not served within 15 s"
    );
    h.shutdown().await;
}

#[test]
fn sighup_makes_the_server_command_reload_its_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (TestCa::new("first CA"), TestCa::new("second CA"));
    let first = ca1.write_server(certs.path(), "server");
    let second = ca2.write_server(certs.path(), "renewed");
    let config = certs.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n\
             [tls]\ncert = \"{}\"\nkey = \"{}\"\nreload_check_secs = 0\n",
            support::AK,
            support::SK,
            certs.path().join("data").display(),
            first.cert.display(),
            first.key.display()
        ),
    )
    .unwrap();
    let (mut child, addr) = support::spawn_server(&config, &[("HIPOBJ_LOG", "info")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let both = [ca1.pem(), ca2.pem()];
    let got = rt.block_on(handshake(addr, &both, &[])).unwrap();
    assert_eq!(served(&got), first.der);
    second.install_over(&first);
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    let renewed = rt.block_on(wait_for_cert(addr, &both, &second.der));
    let alive = child.try_wait().unwrap().is_none();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(alive, "SIGHUP stopped the server");
    assert!(renewed, "SIGHUP did not put the renewed certificate in service");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_tls_files_are_refused_at_start() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj test CA");
    let files = ca.write_server(certs.path(), "server");
    let other = ca.write_server(certs.path(), "other");
    let dir = tempfile::tempdir().unwrap();
    let start = |cert: &Path, key: &Path| {
        let mut c = support::config(dir.path());
        c.tls.cert = Some(cert.to_path_buf());
        c.tls.key = Some(key.to_path_buf());
        Server::start(c)
    };
    let e = start(&files.cert, &other.key).await.unwrap_err().to_string();
    assert!(e.contains("do not make a certificate and its key"), "{e}");
    let e = start(&files.key, &files.key).await.unwrap_err().to_string();
    assert!(e.contains("no CERTIFICATE"), "{e}");
    let e = start(&files.cert, &files.cert).await.unwrap_err().to_string();
    assert!(e.contains("private key"), "{e}");
    let e = start(&certs.path().join("nothing.crt"), &files.key)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("reading") && e.contains("nothing.crt"), "{e}");
    let mut half = support::config(dir.path());
    half.tls.cert = Some(files.cert.clone());
    let e = Server::start(half).await.unwrap_err().to_string();
    assert!(e.contains("tls.cert and tls.key go together"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_is_cut_and_frees_its_connection_slot() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj test CA");
    let files = ca.write_server(certs.path(), "server");
    let (h, _dir) = start_tls(&files, |c| {
        c.http.max_connections = 1;
        c.http.header_read_timeout_secs = 1;
        c.http.idle_timeout_secs = 60;
    })
    .await;
    // The first bytes of a TLS record, and then nothing: the one slot is
    // taken until the request-head timer cuts it.
    let mut stall = TcpStream::connect(h.addr()).await.unwrap();
    stall.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let t = Instant::now();
    let mut client = tokio::spawn({
        let pem = ca.pem().to_owned();
        let addr = h.addr();
        async move {
            let mut s = handshake(addr, &[&pem], &[]).await.unwrap();
            health(&mut s).await
        }
    });
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), stall.read(&mut buf))
        .await
        .expect("the stalled handshake was not cut within 10 s");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let status = tokio::time::timeout(Duration::from_secs(10), &mut client)
        .await
        .expect("the honest client was not served after the slot freed")
        .unwrap();
    assert_eq!(status, 200);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused_even_from_the_trusted_ca() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj test CA");
    let (cert, key, der) = ca.server_cert(&["gateway.example.invalid"]);
    let files = ServerFiles {
        cert: certs.path().join("other-name.crt"),
        key: certs.path().join("other-name.key"),
        der,
    };
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();
    let (h, _dir) = start_tls(&files, |_| {}).await;
    let e = sdk(&h.endpoint(), Some(ca.pem()))
        .list_buckets()
        .send()
        .await
        .unwrap_err();
    let e = hipobj_s3::Error::from_sdk("ListBuckets", &e);
    assert!(e.is_untrusted(), "{e}");
    assert!(
        e.to_string().contains("not valid for name") && e.to_string().contains("issued for"),
        "{e}"
    );
    assert_eq!(
        h.metrics()
            .http_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    h.shutdown().await;
}
