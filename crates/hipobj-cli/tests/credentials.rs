//! The CLI's credentials come from the AWS SDK's default chain
//! (hipobj_s3::credentials), the container credentials endpoint included:
//! with nothing else set, `hipobj put` and `get` sign with the keys a
//! container endpoint double on 127.0.0.1 hands out.
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

#[test]
fn put_and_get_sign_with_container_credentials() {
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
    let endpoint = server.endpoint();
    let (creds_url, asked) = container_endpoint();

    let home = tempfile::tempdir().unwrap();
    let hipobj = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hipobj"));
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") || k.starts_with("HIPOBJ_") {
                c.env_remove(k);
            }
        }
        // Nothing but the container endpoint: an empty HOME, no
        // environment keys, no instance metadata.
        c.env("HOME", home.path())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &creds_url)
            .env("AWS_ENDPOINT_URL", &endpoint)
            .args(args);
        c.output().unwrap()
    };
    let src = home.path().join("src.bin");
    let back = home.path().join("back.bin");
    std::fs::write(&src, b"signed with a container's credentials").unwrap();
    let o = hipobj(&["put", src.to_str().unwrap(), "s3://bkt/obj"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = hipobj(&["get", "s3://bkt/obj", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap());
    assert!(asked.load(Ordering::SeqCst) >= 2);
    rt.block_on(server.shutdown());
}
