//! What `hipobj get` and `hipobj put` say, run as a person runs them
//! (issue 38, finding 7): one line naming the cause and the fix, never a
//! Rust `Debug` structure, for a dead port, a TLS port spoken to in plain
//! HTTP, and a wrong secret (the same line for get and put); `HIPOBJ_NIC`
//! chooses the NIC as `--nic-hint` does; a large transfer shows its
//! progress on a terminal and nothing when stderr is piped.
#![allow(clippy::unwrap_used, unsafe_code)]

#[path = "../../hipobj-server/tests/support/test_ca.rs"]
mod test_ca;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};

use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Handle, Server};

const AK: &str = "hipobj-cli-messages";
const SK: &str = "hipobj-cli-messages-secret";

struct Env {
    rt: tokio::runtime::Runtime,
    server: Option<Handle>,
    dir: tempfile::TempDir,
}

impl Env {
    /// hipobj-server with RDMA off, over TLS when `tls`.
    fn start(tls: bool) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut config = Config {
            address: "127.0.0.1:0".parse().unwrap(),
            credentials: vec![AccessKey {
                access_key: AK.into(),
                secret_key: SK.into(),
            }],
            storage: StorageConfig::Fs {
                data_dir: data.clone(),
            },
            metrics_log_secs: 0,
            shutdown_grace_secs: 1,
            ..Config::default()
        };
        // One key, and the bucket made on disk by hand: no owner records
        // (with them, a bucket that has none refuses every request).
        config.access.bucket_owners = false;
        config.limits.fsync = false;
        if tls {
            let ca = test_ca::TestCa::new("hipobj CLI messages CA");
            let files = ca.write_server(dir.path(), "server");
            config.tls.cert = Some(files.cert);
            config.tls.key = Some(files.key);
        }
        let server = rt.block_on(Server::start(config)).unwrap();
        std::fs::create_dir_all(data.join("bkt")).unwrap();
        Self {
            rt,
            server: Some(server),
            dir,
        }
    }

    /// The listener's `host:port`.
    fn addr(&self) -> String {
        let e = self.server.as_ref().unwrap().endpoint();
        e.split("://").nth(1).unwrap().to_owned()
    }

    fn cmd(&self, endpoint: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hipobj"));
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") || k.starts_with("HIPOBJ_") {
                c.env_remove(k);
            }
        }
        c.env("HOME", self.dir.path())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", AK)
            .env("AWS_SECRET_ACCESS_KEY", SK)
            .env("AWS_ENDPOINT_URL", endpoint);
        c
    }

    fn file(&self, name: &str, len: usize) -> String {
        let p = self.dir.path().join(name);
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7)).collect();
        std::fs::write(&p, data).unwrap();
        p.to_str().unwrap().to_owned()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.shutdown());
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one `hipobj: error:` line of a failed run, checked for Debug dumps.
fn error_line(o: &Output) -> String {
    assert!(!o.status.success(), "succeeded: {}", stderr(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("hipobj: error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    let line = lines[0].to_owned();
    for debug in ["DispatchFailure(", "ConnectorError", " { ", "Os {", "kind: "] {
        assert!(!line.contains(debug), "a Debug structure ({debug:?}) in: {line}");
    }
    line
}

#[test]
fn a_dead_port_says_the_connection_was_refused_and_what_to_check() {
    let env = Env::start(false);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let src = env.file("src", 1000);
    let out = env.dir.path().join("out");
    for args in [
        vec!["get", "s3://bkt/obj", out.to_str().unwrap()],
        vec!["put", &src, "s3://bkt/obj"],
        vec!["put", &src, "s3://bkt/obj", "--nic-hint", "softroce0"],
    ] {
        let line = error_line(&env.cmd(&dead).args(&args).output().unwrap());
        assert!(
            line.contains("refused the connection") && line.contains("check the endpoint URL"),
            "{args:?}: {line}"
        );
    }
}

#[test]
fn a_tls_port_spoken_to_in_plain_http_says_to_use_https() {
    let env = Env::start(true);
    let plain = format!("http://{}", env.addr());
    let src = env.file("src", 1000);
    let out = env.dir.path().join("out");
    for args in [
        vec!["get", "s3://bkt/obj", out.to_str().unwrap()],
        vec!["put", &src, "s3://bkt/obj"],
    ] {
        let line = error_line(&env.cmd(&plain).args(&args).output().unwrap());
        assert!(
            line.contains("did not answer in HTTP") && line.contains("https://"),
            "{args:?}: {line}"
        );
    }
}

#[test]
fn a_wrong_secret_reads_the_same_for_get_and_put() {
    let env = Env::start(false);
    let ep = format!("http://{}", env.addr());
    let src = env.file("src", 1000);
    let o = env.cmd(&ep).args(["put", &src, "s3://bkt/obj"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = env.dir.path().join("out");
    let get = error_line(
        &env.cmd(&ep)
            .env("AWS_SECRET_ACCESS_KEY", "wrong")
            .args(["get", "s3://bkt/obj", out.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let put = error_line(
        &env.cmd(&ep)
            .env("AWS_SECRET_ACCESS_KEY", "wrong")
            .args(["put", &src, "s3://bkt/obj"])
            .output()
            .unwrap(),
    );
    // With the soft NIC the put is a token request first: the same line.
    let put_rdma = error_line(
        &env.cmd(&ep)
            .env("AWS_SECRET_ACCESS_KEY", "wrong")
            .env("HIPOBJ_NIC", "softroce0")
            .args(["put", &src, "s3://bkt/obj"])
            .output()
            .unwrap(),
    );
    assert!(
        get.contains("refused the credentials for s3://bkt/obj") && get.contains("AWS_SECRET_ACCESS_KEY"),
        "{get}"
    );
    assert_eq!(get, put);
    assert_eq!(get, put_rdma);
}

#[test]
fn hipobj_nic_chooses_the_nic_as_nic_hint_does() {
    let env = Env::start(false);
    let ep = format!("http://{}", env.addr());
    let src = env.file("src", 1000);
    // No NIC named: no RDMA client, said once.
    let o = env.cmd(&ep).args(["put", &src, "s3://bkt/a"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no RDMA"), "{}", stderr(&o));
    // HIPOBJ_NIC names the soft NIC: an RDMA client, and this server (RDMA
    // off) declines the token, which is said instead.
    let o = env
        .cmd(&ep)
        .env("HIPOBJ_NIC", "softroce0")
        .args(["put", &src, "s3://bkt/b"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("no RDMA"), "{}", stderr(&o));
    assert!(stderr(&o).contains("plain HTTP"), "{}", stderr(&o));
    // `devices` says what init would choose with it.
    let o = env.cmd(&ep).arg("devices").output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("init would fail"));
    let o = env
        .cmd(&ep)
        .env("HIPOBJ_NIC", "softroce0")
        .arg("devices")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("init would choose, for no GPU: softroce0"), "{out}");
}

/// A pseudo-terminal: (the side the program writes, the side read here).
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut main, mut sub) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the two live ints; the
    // name, termios and size pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut main,
            &mut sub,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty failed");
    // SAFETY: both descriptors are open, and each is owned here alone.
    unsafe { (OwnedFd::from_raw_fd(sub), OwnedFd::from_raw_fd(main)) }
}

#[test]
fn a_large_transfer_shows_progress_on_a_terminal_and_nothing_when_piped() {
    let env = Env::start(false);
    let ep = format!("http://{}", env.addr());
    let src = env.file("big", 24 << 20);
    let args = ["put", src.as_str(), "s3://bkt/big", "--part-size", "8MiB"];

    let o = env.cmd(&ep).args(args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("ETA"), "progress on a pipe: {}", stderr(&o));

    let (sub, main) = pty();
    let mut child = env
        .cmd(&ep)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(sub))
        .spawn()
        .unwrap();
    // The terminal's output, read until the child exits (and with it the
    // last holder of the other side: the Command that had it is gone).
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(main);
        let mut all = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match f.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    let status = child.wait().unwrap();
    let shown = reader.join().unwrap();
    assert!(status.success(), "{shown}");
    assert!(
        shown.contains("put s3://bkt/big") && shown.contains("MiB") && shown.contains("ETA"),
        "no progress line on the terminal: {shown:?}"
    );
}
