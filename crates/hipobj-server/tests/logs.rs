//! The `hipobj-server` binary's logs as an operator ships them (issue 39,
//! finding 3): no colour codes in a redirected stderr, a start line
//! without Rust `Debug`, `--print-config` as TOML the server reads back,
//! JSON lines, an access log line per request in a file of its own (with
//! the request id the client saw, reopened on SIGHUP), and not one secret
//! in any line, whatever the requests carry.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use hipobj_server::Config;
use support::{AK, SK, raw};

/// Starts the binary on `config` with `args`, stderr into `stderr`, and
/// returns it and its address.
fn spawn(config: &Path, args: &[&str], stderr: &Path, env: &[(&str, &str)]) -> (Child, std::net::SocketAddr) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("HIPOBJ_LOG")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(stderr).unwrap()))
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| {
            panic!(
                "server said {line:?}: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            )
        })
        .parse()
        .unwrap();
    (child, addr)
}

/// Stops the server. (Its exit status is not looked at: the binary prints
/// its address before it watches SIGTERM, so a SIGTERM right after that
/// can end it by the default action; lifecycle.rs checks the exit.)
fn stop(mut child: Child) {
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    child.wait().unwrap();
}

fn config_file(dir: &Path, more: &str) -> std::path::PathBuf {
    let path = dir.join("server.toml");
    std::fs::write(
        &path,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n{more}\n\
             [[credentials]]\naccess_key = \"{AK}\"\nsecret_key = \"{SK}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[limits]\nfsync = false\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    path
}

/// Runs the binary with stderr in a file, asks for its health, stops it,
/// and returns what it logged and its data directory.
fn run_with_stderr_in_a_file() -> (String, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(dir.path(), "");
    let err = dir.path().join("stderr");
    let (child, addr) = spawn(&cfg, &[], &err, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, _) = rt.block_on(raw(
        addr,
        "GET /.hipobj/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(status, 200);
    stop(child);
    let log = std::fs::read_to_string(&err).unwrap();
    (log, dir.path().join("data"), dir)
}

/// stderr sent to a file (as systemd, docker or `2>log` do) carries no
/// terminal colour codes.
#[test]
fn a_redirected_stderr_has_no_colour_codes() {
    let (log, _, _dir) = run_with_stderr_in_a_file();
    assert!(!log.is_empty());
    assert!(!log.contains('\u{1b}'), "colour codes in a file: {log:?}");
}

/// The start line names the store in words, not as Rust `Debug`.
#[test]
fn the_start_line_names_the_store_in_words() {
    let (log, data, _dir) = run_with_stderr_in_a_file();
    let start = log
        .lines()
        .find(|l| l.contains("hipobj-server listening"))
        .unwrap_or_else(|| panic!("no start line in {log}"));
    assert!(!start.contains("Fs {") && !start.contains("data_dir:"), "{start}");
    assert!(
        start.contains(&format!("storage=fs:{}", data.display())),
        "{start}"
    );
}

/// `--print-config` prints TOML that the server reads back as the same
/// configuration, with every secret replaced.
#[test]
fn print_config_is_toml_that_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(
        dir.path(),
        "anonymous = false\n[http]\nmax_connections = 77\n[rdma]\ndevice = \"rxe9\"\nmax_transfer = 4096",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .arg("--config")
        .arg(&cfg)
        .arg("--print-config")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains(SK), "{text}");
    let back = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut expected = Config::from_file(&cfg).unwrap();
    expected.credentials[0].secret_key = "<redacted>".into();
    let v = |c: &Config| toml::Value::try_from(c).unwrap();
    assert_eq!(v(&back), v(&expected), "{text}");
    assert_eq!(back.http.max_connections, 77);
}

/// The secrets the requests below carry.
struct Secrets {
    items: Vec<(&'static str, String)>,
}

impl Secrets {
    fn add(&mut self, what: &'static str, s: impl Into<String>) {
        let s = s.into();
        assert!(s.len() >= 8, "{what}: {s}");
        self.items.push((what, s));
    }

    fn assert_absent(&self, name: &str, text: &str) {
        for (what, s) in &self.items {
            assert!(
                !text.contains(s.as_str()),
                "{name} holds the {what} {s:?}:\n{text}"
            );
        }
    }
}

/// Every kind of secret a request can carry (the secret key and SigV4
/// signatures, a presigned URL's signature, an SSE-C customer key, an
/// RDMA token, the metrics token), with every server log on at TRACE and
/// as JSON: no line holds one. The access log goes to its own file, one
/// JSON line per request with the id the response carried, and SIGHUP
/// reopens it after a rotation.
#[test]
fn no_log_line_holds_a_secret_and_the_access_log_has_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let access = dir.path().join("access.log");
    let metrics_token = "metrics-token-0123456789";
    let cfg = config_file(
        dir.path(),
        &format!(
            "access_log = \"{}\"\nmetrics_token = \"{metrics_token}\"\n\
             [encryption]\nsse_c_over_http = true",
            access.display()
        ),
    );
    let err = dir.path().join("stderr");
    let (child, addr) = spawn(&cfg, &["--log-format", "json"], &err, &[("HIPOBJ_LOG", "trace")]);
    let endpoint = format!("http://{addr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut secrets = Secrets { items: Vec::new() };
    secrets.add("secret key", SK);
    secrets.add("metrics token", metrics_token);
    let mut ids = Vec::new();
    rt.block_on(async {
        let s3 = support::client_for(&endpoint, AK, SK);
        s3.create_bucket().bucket("logged").send().await.unwrap();
        // SSE-C: the customer's key travels in a header.
        let key = "c".repeat(32);
        let key_b64 = base64_simd::STANDARD.encode_to_string(key.as_bytes());
        let key_md5 = base64_simd::STANDARD.encode_to_string(support::md5_bytes(key.as_bytes()));
        secrets.add("SSE-C key", key_b64.clone());
        secrets.add("SSE-C key (raw)", key.clone());
        let put = s3
            .put_object()
            .bucket("logged")
            .key("sse-c")
            .body(ByteStream::from_static(b"encrypted"))
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key_b64)
            .sse_customer_key_md5(&key_md5)
            .send()
            .await
            .unwrap();
        drop(put);
        s3.put_object()
            .bucket("logged")
            .key("plain")
            .body(ByteStream::from_static(b"plain"))
            .send()
            .await
            .unwrap();
        // A request signed by hand, so its signature is known; then the
        // same with a wrong secret (the server computes the right one).
        let host = addr.to_string();
        for secret in [SK, "not-the-secret-key"] {
            let signed = support::sigv4::sign(
                "GET",
                "/logged/sse-c",
                &host,
                "UNSIGNED-PAYLOAD",
                &[],
                (AK, secret),
            );
            secrets.add("SigV4 signature", signed.signature.clone());
            let head = signed.head("GET", "/logged/sse-c", &[("connection", "close".into())]);
            let (status, text) = raw(addr, &head).await;
            assert!(status == 400 || status == 403, "{text}");
            ids.push(request_id(&text));
        }
        // A presigned GET.
        let p = s3
            .get_object()
            .bucket("logged")
            .key("sse-c")
            .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
            .await
            .unwrap();
        let uri: http::Uri = p.uri().parse().unwrap();
        let target = uri.path_and_query().unwrap().as_str().to_owned();
        let sig = target
            .split(['?', '&'])
            .find_map(|kv| kv.strip_prefix("X-Amz-Signature="))
            .unwrap()
            .to_owned();
        secrets.add("presigned URL signature", sig);
        let (_, text) = raw(
            addr,
            &format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        ids.push(request_id(&text));
        // An RDMA token (not a valid one, and RDMA is off here).
        let token = "rdma-token-SECRET-abcdef0123456789";
        secrets.add("RDMA token", token);
        let signed = support::sigv4::sign(
            "GET",
            "/logged/plain",
            &host,
            "UNSIGNED-PAYLOAD",
            &[("x-amz-rdma-token", token.into())],
            (AK, SK),
        );
        secrets.add("SigV4 signature", signed.signature.clone());
        let (_, text) = raw(
            addr,
            &signed.head("GET", "/logged/plain", &[("connection", "close".into())]),
        )
        .await;
        ids.push(request_id(&text));
        // The metrics with a wrong token and with the right one.
        for t in ["wrong-token-abcdefgh", metrics_token] {
            let (_, text) = raw(
                addr,
                &format!(
                    "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nConnection: close\r\n\r\n"
                ),
            )
            .await;
            ids.push(request_id(&text));
        }
    });
    // A rotation: the file is moved away, SIGHUP, and the next line goes
    // to a new file at the configured path.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&access, &rotated).unwrap();
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    let mut after = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        rt.block_on(raw(
            addr,
            "GET /.hipobj/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ));
        after = std::fs::read_to_string(&access).unwrap_or_default();
        if after.contains("Health") {
            break;
        }
    }
    stop(child);
    assert!(after.contains("Health"), "nothing after the reopen: {after:?}");

    let log = std::fs::read_to_string(&err).unwrap();
    let lines = std::fs::read_to_string(&rotated).unwrap();
    secrets.assert_absent("the server log", &log);
    secrets.assert_absent("the access log", &lines);
    secrets.assert_absent("the reopened access log", &after);
    for l in log.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}"));
        assert_ne!(
            v["target"], "hipobj_access",
            "an access line in the server log, with access_log set: {l}"
        );
    }
    // (A line of a request answered just before the rotation may land in
    // either file.)
    let both = format!("{lines}{after}");
    let access_lines: Vec<serde_json::Value> = both
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    for id in &ids {
        let line = access_lines
            .iter()
            .find(|v| v["fields"]["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no access line with request id {id}: {both}"));
        let f = &line["fields"];
        for field in [
            "remote",
            "access_key",
            "method",
            "bucket",
            "key",
            "status",
            "bytes_in",
            "bytes_out",
            "duration_ms",
            "transport",
        ] {
            assert!(!f[field].is_null(), "no {field} in {line}");
        }
        assert!(line["timestamp"].is_string(), "{line}");
    }
    let put = access_lines
        .iter()
        .find(|v| v["fields"]["operation"] == "PutObject")
        .unwrap_or_else(|| panic!("no PutObject line: {both}"));
    assert_eq!(put["fields"]["access_key"], AK);
    assert_eq!(put["fields"]["bucket"], "logged");
    assert_eq!(put["fields"]["key"], "sse-c");
    assert_eq!(put["fields"]["status"], 200);
    assert_eq!(put["fields"]["transport"], "http");
    assert!(put["fields"]["bytes_in"].as_u64().unwrap() >= 9, "{put}");
    let rdma = access_lines
        .iter()
        .find(|v| v["fields"]["transport"] == "rdma")
        .unwrap_or_else(|| panic!("no RDMA line: {both}"));
    // (Refused: the token is not one; what matters is that it is not logged.)
    assert!(rdma["fields"]["status"].as_u64().unwrap() >= 400, "{rdma}");
}

/// The `x-amz-request-id` of a raw response.
fn request_id(response: &str) -> String {
    response
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-amz-request-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no request id in {response}"))
}
