//! The CLI's credentials come from the AWS SDK's default chain
//! (hipobj_s3::credentials), the container credentials endpoint included:
//! with nothing else set, `hipobj put` and `get` sign with the keys a
//! container endpoint double on 127.0.0.1 hands out; `--profile` wins over
//! keys in the environment, as in the AWS CLI.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Server};

const AK: &str = "hipobj-cli-creds";
const SK: &str = "hipobj-cli-creds-secret";

/// A container credentials endpoint: answers every GET with `AK`/`SK`, a
/// session token and an expiry an hour away; counts the requests.
fn container_endpoint() -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/creds", l.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let n = asked.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            // The request line and headers, up to the blank line.
            while r.read_line(&mut line).is_ok_and(|k| k > 2) {
                line.clear();
            }
            n.fetch_add(1, Ordering::SeqCst);
            let body = format!(
                r#"{{"AccessKeyId":"{AK}","SecretAccessKey":"{SK}","Token":"container-token","Expiration":"2099-01-01T00:00:00Z"}}"#
            );
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, asked)
}

/// hipobj-server on 127.0.0.1 with the one key `AK`/`SK` and a bucket `bkt`.
struct Served {
    rt: tokio::runtime::Runtime,
    server: Option<hipobj_server::Handle>,
    _data: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Served {
    fn start() -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let data = tempfile::tempdir().unwrap();
        let mut config = Config {
            address: "127.0.0.1:0".parse().unwrap(),
            credentials: vec![AccessKey {
                access_key: AK.into(),
                secret_key: SK.into(),
            }],
            storage: StorageConfig::Fs {
                data_dir: data.path().to_path_buf(),
            },
            metrics_log_secs: 0,
            shutdown_grace_secs: 2,
            ..Config::default()
        };
        config.access.bucket_owners = false;
        config.limits.fsync = false;
        let server = rt.block_on(Server::start(config)).unwrap();
        std::fs::create_dir(data.path().join("bkt")).unwrap();
        Self {
            rt,
            server: Some(server),
            _data: data,
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// `hipobj` with no AWS settings but the endpoint, an empty HOME of its
    /// own and no instance metadata service; `env` adds to that.
    fn hipobj(&self, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hipobj"));
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") || k.starts_with("HIPOBJ_") {
                c.env_remove(k);
            }
        }
        c.env("HOME", self.home.path())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_ENDPOINT_URL", self.server.as_ref().unwrap().endpoint())
            .envs(env.iter().copied())
            .args(args);
        c.output().unwrap()
    }

    /// PUT a file and GET it back with `env`; asserts both succeed and the
    /// bytes match.
    fn round_trip(&self, env: &[(&str, &str)], extra: &[&str]) {
        let src = self.home.path().join("src.bin");
        let back = self.home.path().join("back.bin");
        std::fs::write(&src, b"signed with the chain's credentials").unwrap();
        let put: Vec<&str> = ["put", src.to_str().unwrap(), "s3://bkt/obj"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let o = self.hipobj(env, &put);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let get: Vec<&str> = ["get", "s3://bkt/obj", back.to_str().unwrap()]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let o = self.hipobj(env, &get);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.shutdown());
        }
    }
}

#[test]
fn put_and_get_sign_with_container_credentials() {
    let s = Served::start();
    let (creds_url, asked) = container_endpoint();
    s.round_trip(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", &creds_url)], &[]);
    assert!(asked.load(Ordering::SeqCst) >= 2);
}

#[test]
fn a_named_profile_wins_over_keys_in_the_environment() {
    let s = Served::start();
    let aws = s.home.path().join(".aws");
    std::fs::create_dir(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!("[hipobj]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n"),
    )
    .unwrap();
    let wrong = [
        ("AWS_ACCESS_KEY_ID", "wrong-key"),
        ("AWS_SECRET_ACCESS_KEY", "wrong-secret"),
    ];
    s.round_trip(&wrong, &["--profile", "hipobj"]);
    // Without the flag the environment's keys are used, and refused.
    let o = s.hipobj(
        &wrong,
        &["get", "s3://bkt/obj", s.home.path().join("x").to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refused the credentials"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
