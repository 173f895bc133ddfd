//! The C examples (examples/c/put-object.c and get-object.c), built with
//! -Wall -Wextra -Werror against include/hipobj.h, libhipobj and libcurl,
//! run against this server on the soft RoCE NIC: libcurl signs each request
//! (CURLOPT_AWS_SIGV4) with the token from the hipObjOps_t callbacks, and the
//! bytes move by RDMA. Needs libcurl's headers (Debian: libcurl4-openssl-dev)
//! and the shared library (`cargo build -p hipobj-capi`, which
//! scripts/test.sh runs first). The same programs also run over https,
//! trusting a test CA through `AWS_CA_BUNDLE` (libcurl's CURLOPT_CAINFO).
#![allow(clippy::unwrap_used)]

mod support;
#[path = "support/test_ca.rs"]
mod test_ca;

use std::path::{Path, PathBuf};
use std::process::Command;

use hipobj_server::config::VerbsBackend;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The C programs of examples/c, built against the shared library under
/// its installed names in a scratch directory, and a server on the soft NIC.
struct CExamples {
    work: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
}

impl CExamples {
    /// Builds each of `progs` (examples/c/<prog>.c) with -Werror.
    fn build(progs: &[&str]) -> CExamples {
        assert!(
            Path::new("/usr/include/x86_64-linux-gnu/curl/curl.h").exists()
                || Path::new("/usr/include/curl/curl.h").exists(),
            "this test needs libcurl's headers (apt-get install libcurl4-openssl-dev)"
        );
        let profile = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let so = profile.join("libhipobj_capi.so");
        assert!(
            so.exists(),
            "{} is missing: run `cargo build -p hipobj-capi` first",
            so.display()
        );
        let work = tempfile::tempdir().unwrap();
        let libs = work.path();
        std::os::unix::fs::symlink(&so, libs.join("libhipobj.so")).unwrap();
        std::os::unix::fs::symlink(&so, libs.join("libhipobj.so.0")).unwrap();
        for prog in progs {
            run_ok(
                Command::new("cc")
                    .args([
                        "-std=c99",
                        "-D_DEFAULT_SOURCE",
                        "-Wall",
                        "-Wextra",
                        "-Werror",
                        "-pedantic",
                    ])
                    .arg("-I")
                    .arg(root().join("include"))
                    .arg(root().join(format!("examples/c/{prog}.c")))
                    .arg("-L")
                    .arg(libs)
                    .args(["-lhipobj", "-lcurl", "-o"])
                    .arg(libs.join(prog)),
            );
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        CExamples { work, rt }
    }

    /// The scratch directory: the programs, the library, the files.
    fn dir(&self) -> &Path {
        self.work.path()
    }

    /// A hipobj-server with RDMA on the soft NIC.
    fn server(&self) -> (hipobj_server::Handle, tempfile::TempDir) {
        self.server_with(|_| {})
    }

    /// The same, with `edit` applied to its config.
    fn server_with(
        &self,
        edit: impl FnOnce(&mut hipobj_server::Config),
    ) -> (hipobj_server::Handle, tempfile::TempDir) {
        self.rt.block_on(support::start(|c| {
            c.rdma.enabled = true;
            c.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
            c.rdma.backend = VerbsBackend::Softroce;
            edit(c);
        }))
    }

    /// A command for `prog`, with the library, the keys and the NIC set.
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(self.dir().join(prog));
        c.env("LD_LIBRARY_PATH", self.dir())
            .env("AWS_ACCESS_KEY_ID", support::AK)
            .env("AWS_SECRET_ACCESS_KEY", support::SK)
            .env("HIPOBJ_NIC", hipobj_softroce::DEFAULT_NAME);
        c
    }

    /// The object's bytes, read back over plain HTTP.
    fn read_back(&self, s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<u8> {
        self.rt
            .block_on(async {
                s3.get_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .unwrap()
                    .body
                    .collect()
                    .await
            })
            .unwrap()
            .into_bytes()
            .to_vec()
    }
}

#[test]
fn the_c_examples_put_and_get_over_rdma() {
    let ex = CExamples::build(&["put-object", "get-object"]);
    let libs = ex.dir();
    let rt = &ex.rt;
    let (h, _dir) = ex.server();
    let s3 = support::client(&h);
    rt.block_on(s3.create_bucket().bucket("cbucket").send()).unwrap();

    let data = support::pattern(3 << 20, 42);
    let src = libs.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    let out = run_ok(
        ex.cmd("put-object")
            .arg(h.endpoint())
            .args(["cbucket", "from-c"])
            .arg(&src),
    );
    assert!(out.contains("PUT 3145728 bytes over RDMA: HTTP 200"), "{out}");
    // What the C program stored, read back over plain HTTP.
    assert!(
        ex.read_back(&s3, "cbucket", "from-c") == data,
        "the object differs from the file"
    );

    let dst = libs.join("out.bin");
    let out = run_ok(
        ex.cmd("get-object")
            .arg(h.endpoint())
            .args(["cbucket", "from-c", "3145728"])
            .arg(&dst),
    );
    assert!(out.contains("GET 3145728 bytes over RDMA: HTTP 200"), "{out}");
    assert!(
        std::fs::read(&dst).unwrap() == data,
        "the downloaded file differs"
    );
    let rdma = h.rdma().unwrap().target().stats();
    assert_eq!(rdma.transfers, 2, "both moved by RDMA");
    // Asking for more than the object holds is not a success: the server
    // counts 3 MiB of the 4 MiB asked for, and hipObjGet says S3 error.
    let out = ex
        .cmd("get-object")
        .arg(h.endpoint())
        .args(["cbucket", "from-c", "4194304"])
        .arg(libs.join("short.bin"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a short GET succeeded");
    assert!(
        err.contains("S3 error") && err.contains("moved 3145728 of 4194304 bytes"),
        "{err}"
    );
    rt.block_on(h.shutdown());
}

/// examples/c/rc-v2-object.c: a C program that drives hipobj-rc-v2 with the
/// hipObjRcV2* calls and libcurl (PREPARE, READY and CANCEL as SigV4-signed
/// POSTs), against this server on the soft NIC: a PUT and a GET with the
/// bytes compared (also over plain HTTP), the server's refusals reported,
/// and a session abandoned after PREPARE cancelled on the server.
#[test]
fn the_c_rc_v2_example_puts_and_gets_over_hipobj_rc_v2() {
    let ex = CExamples::build(&["rc-v2-object"]);
    let libs = ex.dir();
    let rt = &ex.rt;
    let (h, _dir) = ex.server();
    let s3 = support::client(&h);
    rt.block_on(s3.create_bucket().bucket("v2bucket").send()).unwrap();
    let v2 = h.v2_sessions().unwrap().clone();
    let cmd = || {
        let mut c = ex.cmd("rc-v2-object");
        c.env_remove("RCV2_GIVE_UP");
        c
    };

    // A key that needs percent-encoding in x-amz-rdma-target.
    let key = "dir/a key+more";
    let size = (5 << 20) + 123;
    let data = support::pattern(size, 9);
    let src = libs.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    let out = run_ok(cmd().args(["put", &h.endpoint(), "v2bucket", key]).arg(&src));
    assert!(
        out.contains(&format!("PUT {size} bytes over hipobj-rc-v2")),
        "{out}"
    );
    assert!(
        ex.read_back(&s3, "v2bucket", key) == data,
        "the object the C program stored differs from the file"
    );

    let dst = libs.join("out.bin");
    let out = run_ok(
        cmd()
            .args(["get", &h.endpoint(), "v2bucket", key, &size.to_string()])
            .arg(&dst),
    );
    assert!(
        out.contains(&format!("GET {size} bytes over hipobj-rc-v2")),
        "{out}"
    );
    assert!(
        std::fs::read(&dst).unwrap() == data,
        "the downloaded file differs"
    );
    let rdma = h.rdma().unwrap().target().stats();
    assert_eq!(rdma.transfers, 0, "nothing went by the binding exchange");
    assert_eq!(v2.open_sessions(), 0);
    // Told to try the binding exchange first, the program stays with it on
    // a server that accepts it.
    let out = run_ok(
        cmd()
            .env("RCV2_TRY_BINDING", "1")
            .args(["get", &h.endpoint(), "v2bucket", key, &size.to_string()])
            .arg(libs.join("bound.bin")),
    );
    assert!(
        out.contains(&format!("GET {size} bytes over the binding exchange")),
        "{out}"
    );
    assert!(std::fs::read(libs.join("bound.bin")).unwrap() == data);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 1);

    // The server's refusals of PREPARE reach the program as S3 errors.
    for (what, k, n, want) in [
        ("a missing object", "nothing-here", size, "(HTTP 404)"),
        ("more than the object holds", key, size + 1, "(HTTP 416)"),
    ] {
        let out = cmd()
            .args(["get", &h.endpoint(), "v2bucket", k, &n.to_string()])
            .arg(libs.join("x.bin"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: the GET succeeded");
        assert!(
            err.contains("PREPARE: S3 error") && err.contains(want),
            "{what}: {err}"
        );
        assert!(!err.contains("CANCEL"), "{what}: no session, no CANCEL: {err}");
    }

    // Abandoned after PREPARE: the program sends the CANCEL hipObject says
    // is owed, and the server's session is gone at once (its reaper would
    // take 10 s).
    let out = cmd()
        .env("RCV2_GIVE_UP", "after-prepare")
        .args(["get", &h.endpoint(), "v2bucket", key, &size.to_string()])
        .arg(libs.join("y.bin"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("CANCEL sent: HTTP 204"), "{err}");
    assert_eq!(v2.open_sessions(), 0, "the CANCEL did not end the session");
    rt.block_on(h.shutdown());
}

/// The three C programs against the server over https: trusting the test
/// CA through AWS_CA_BUNDLE they PUT and GET by RDMA (the binding exchange
/// and hipobj-rc-v2) exactly as over http; trusting another CA, libcurl
/// refuses the server and nothing moves.
#[test]
fn the_c_examples_run_over_https_with_the_ca_bundle_and_refuse_another_ca() {
    let ex = CExamples::build(&["put-object", "get-object", "rc-v2-object"]);
    let libs = ex.dir();
    let rt = &ex.rt;
    let ca = test_ca::TestCa::new("C examples test CA");
    let files = ca.write_server(libs, "server");
    let bundle = ca.write_bundle(&libs.join("ca.pem"));
    let other = test_ca::TestCa::new("someone else's CA").write_bundle(&libs.join("other.pem"));
    let (h, _dir) = ex.server_with(|c| {
        c.tls.cert = Some(files.cert.clone());
        c.tls.key = Some(files.key.clone());
    });
    let ep = h.endpoint();
    assert!(ep.starts_with("https://"), "{ep}");
    let ca_bundle = hipobj_s3::tls::CaBundle::from_file(&bundle).unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .http_client(hipobj_s3::tls::http_client(Some(&ca_bundle)).unwrap())
            .endpoint_url(&ep)
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                support::AK,
                support::SK,
                None,
                None,
                "test",
            ))
            .force_path_style(true)
            .build(),
    );
    rt.block_on(s3.create_bucket().bucket("tlsbucket").send())
        .unwrap();
    let data = support::pattern((2 << 20) + 5, 17);
    let src = libs.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    let n = data.len().to_string();

    let out = run_ok(
        ex.cmd("put-object")
            .env("AWS_CA_BUNDLE", &bundle)
            .args([&ep, "tlsbucket", "bound"])
            .arg(&src),
    );
    assert!(
        out.contains(&format!("PUT {n} bytes over RDMA: HTTP 200")),
        "{out}"
    );
    let out = run_ok(
        ex.cmd("get-object")
            .env("AWS_CA_BUNDLE", &bundle)
            .args([&ep, "tlsbucket", "bound", &n])
            .arg(libs.join("bound.bin")),
    );
    assert!(
        out.contains(&format!("GET {n} bytes over RDMA: HTTP 200")),
        "{out}"
    );
    assert!(std::fs::read(libs.join("bound.bin")).unwrap() == data);
    let out = run_ok(
        ex.cmd("rc-v2-object")
            .env_remove("RCV2_GIVE_UP")
            .env("AWS_CA_BUNDLE", &bundle)
            .args(["put", &ep, "tlsbucket", "v2"])
            .arg(&src),
    );
    assert!(out.contains(&format!("PUT {n} bytes over hipobj-rc-v2")), "{out}");
    let out = run_ok(
        ex.cmd("rc-v2-object")
            .env_remove("RCV2_GIVE_UP")
            .env("AWS_CA_BUNDLE", &bundle)
            .args(["get", &ep, "tlsbucket", "v2", &n])
            .arg(libs.join("v2.bin")),
    );
    assert!(out.contains(&format!("GET {n} bytes over hipobj-rc-v2")), "{out}");
    assert!(std::fs::read(libs.join("v2.bin")).unwrap() == data);
    assert!(ex.read_back(&s3, "tlsbucket", "v2") == data);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2);

    // Another CA: libcurl refuses the certificate; nothing reaches the
    // server, nothing is stored.
    let requests = h
        .metrics()
        .http_requests
        .load(std::sync::atomic::Ordering::Relaxed);
    let out = ex
        .cmd("put-object")
        .env("AWS_CA_BUNDLE", &other)
        .args([&ep, "tlsbucket", "refused"])
        .arg(&src)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a PUT to an untrusted server succeeded");
    assert!(err.contains("request failed: SSL peer certificate"), "{err}");
    assert_eq!(
        h.metrics()
            .http_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        requests
    );
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 2);
    rt.block_on(h.shutdown());
}
