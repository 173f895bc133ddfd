//! Shared pieces of the server's tests: a server on 127.0.0.1 with a
//! temporary data directory, an aws-sdk-s3 client for it, and raw HTTP.
#![allow(dead_code, clippy::unwrap_used)]

pub(crate) mod metrics;
pub(crate) mod rdma;
pub(crate) mod sigv4;
pub(crate) mod wire;

use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Handle, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) const AK: &str = "hipobj-test";

/// Starts the `hipobj-server` binary on `config` with extra environment
/// `env`, and waits for the "listening on ADDR" line it prints when ready.
pub(crate) fn spawn_server(
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, std::net::SocketAddr) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--config", config.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("server said {line:?}"))
        .parse()
        .unwrap();
    (child, addr)
}
pub(crate) const SK: &str = "hipobj-test-secret";

/// A config for tests: 127.0.0.1, a random port, one key, fs store in `dir`.
pub(crate) fn config(dir: &std::path::Path) -> Config {
    let mut c = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: AK.into(),
            secret_key: SK.into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.to_path_buf(),
        },
        metrics_log_secs: 0,
        shutdown_grace_secs: 5,
        ..Config::default()
    };
    c.limits.fsync = false;
    c
}

/// A server over a fresh temporary directory.
pub(crate) async fn start(edit: impl FnOnce(&mut Config)) -> (Handle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    edit(&mut c);
    (Server::start(c).await.unwrap(), dir)
}

/// The names ListBuckets shows to `c`'s key.
pub(crate) async fn bucket_names(c: &aws_sdk_s3::Client) -> Vec<String> {
    let r = c.list_buckets().send().await.unwrap();
    r.buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_owned))
        .collect()
}

/// An aws-sdk-s3 client for `endpoint` with the test key, no retries.
pub(crate) fn client_for(endpoint: &str, ak: &str, sk: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(ak, sk, None, None, "test"))
        .force_path_style(true)
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

pub(crate) fn client(h: &Handle) -> aws_sdk_s3::Client {
    client_for(&h.endpoint(), AK, SK)
}

/// The S3 error code of a failed call.
pub(crate) fn code<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> String
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    e.as_service_error()
        .and_then(|s| s.code())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("not a service error: {e:?}"))
}

/// Sends `req` as raw bytes and returns the status line's code and the
/// whole response text (for requests no SDK would send).
pub(crate) async fn raw(addr: std::net::SocketAddr, req: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// Deterministic bytes.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Hex MD5, as S3 ETags are.
pub(crate) fn md5_hex(data: &[u8]) -> String {
    use s3s::crypto::Checksum as _;
    let d = s3s::crypto::Md5::checksum(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn md5_bytes(data: &[u8]) -> [u8; 16] {
    use s3s::crypto::Checksum as _;
    s3s::crypto::Md5::checksum(data)
}

/// Every file under `dir`, recursively.
pub(crate) fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
