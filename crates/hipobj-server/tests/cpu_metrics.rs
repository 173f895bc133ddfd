//! The server's CPU time by role in `/.hipobj/metrics`, read from the
//! `hipobj-server` binary in a process of its own (so nothing of this test
//! is in its figures): plain HTTP transfers cost the `s3` role and nothing
//! in `rdma`; RDMA transfers cost `rdma` and the soft NIC's `nic`; and the
//! roles add up to the whole process's CPU time, so no thread is missed.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use hipobj::{Client, Options};
use hipobj_platform::{NoGpu, Platform};
use support::rdma::{Op, S3Control};

const BUCKET: &str = "cpu-bucket";

/// (s3, rdma, nic, other, the whole process) in seconds.
fn cpu(addr: std::net::SocketAddr) -> [f64; 5] {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let m = support::metrics::parse(&text);
    let get = |name: &str, labels: &[(&str, &str)]| -> f64 {
        m.value(name, labels)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in {text}"))
    };
    let value = |name: &str| get(name, &[]);
    let role = |r: &str| get("hipobj_server_cpu_seconds_total", &[("role", r)]);
    [
        role("s3"),
        role("rdma"),
        role("nic"),
        role("other"),
        value("hipobj_server_process_cpu_seconds_total"),
    ]
}

fn spent(a: [f64; 5], b: [f64; 5]) -> [f64; 5] {
    std::array::from_fn(|i| b[i] - a[i])
}

#[test]
fn cpu_time_by_role_follows_what_the_server_did() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:0\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n[limits]\nfsync = false\n\
             [rdma]\nenabled = true\ndevice = \"softroce0\"\nbackend = \"softroce\"\n",
            support::AK,
            support::SK,
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let (mut child, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "warn")]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s3 = support::client_for(&format!("http://{addr}"), support::AK, support::SK);
    rt.block_on(s3.create_bucket().bucket(BUCKET).send()).unwrap();
    let data = support::pattern(16 << 20, 3);

    // Plain HTTP: a 16 MiB PUT and GET, four times.
    let a = cpu(addr);
    for i in 0..4 {
        let key = format!("http-{i}");
        rt.block_on(
            s3.put_object()
                .bucket(BUCKET)
                .key(&key)
                .body(ByteStream::from(data.clone()))
                .send(),
        )
        .unwrap();
        let got = rt.block_on(async {
            let o = s3.get_object().bucket(BUCKET).key(&key).send().await.unwrap();
            o.body.collect().await.unwrap().into_bytes()
        });
        assert_eq!(got.len(), data.len());
    }
    let http = spent(a, cpu(addr));
    println!("plain HTTP, 4 x 16 MiB PUT + GET: (s3, rdma, nic, other, process) {http:?}");
    assert!(http[0] > 0.0, "plain HTTP is request and storage work: {http:?}");
    assert_eq!(http[1], 0.0, "no RDMA mover ran: {http:?}");

    // RDMA: the same 16 MiB PUT and GET, four times.
    let client = Client::builder(Platform {
        verbs: Arc::new(hipobj_softroce::SoftVerbs::new(
            hipobj_softroce::SoftConfig::default(),
        )),
        gpu: Arc::new(NoGpu::new("a test on the soft NIC")),
        topology: Arc::new(hipobj_platform::NoTopology),
    })
    .nic_hint("softroce0")
    .options(Options {
        max_transfers: 1,
        ..Options::default()
    })
    .build()
    .unwrap();
    let mut reg = client.register(data.clone()).unwrap();
    let h = rt.handle().clone();
    let a = cpu(addr);
    for i in 0..4 {
        let key = format!("rdma-{i}");
        let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::Put { key: key.clone() });
        client.put(&reg, 0, data.len(), &mut ctl).unwrap();
        let mut ctl = S3Control::new(&h, &s3, BUCKET, Op::Get { key, range: None });
        client.get(&mut reg, 0, data.len(), &mut ctl).unwrap();
    }
    let rdma = spent(a, cpu(addr));
    println!("RDMA, 4 x 16 MiB PUT + GET: (s3, rdma, nic, other, process) {rdma:?}");
    assert!(rdma[1] > 0.0, "the mover's time is counted as rdma: {rdma:?}");
    assert!(rdma[2] > 0.0, "the soft NIC's workers moved the bytes: {rdma:?}");
    assert!(reg.to_vec() == data);
    drop(reg);

    // Every thread is counted: the roles add up to the process's CPU time
    // (which is read in 10 ms ticks per thread, hence the slack).
    let all = cpu(addr);
    let roles: f64 = all[..4].iter().sum();
    assert!(
        (roles - all[4]).abs() <= 0.1 + 0.05 * all[4],
        "roles {roles} against the process's {}: {all:?}",
        all[4]
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
