//! RDMA transfers between two processes: the `hipobj-server` binary serving
//! RDMA, and this test as the client (the `hipobj` library, with a `Control`
//! that sends the real S3 request through aws-sdk-s3). Bytes and ETags
//! exact; ranges; multipart with parts over RDMA; 32 clients at once; a
//! server restart (every binding stale).
//!
//! It runs twice: on the soft RoCE NIC (each process on its own 127.x
//! address, bytes over loopback UDP), and on the kernel's rxe0 (ignored by
//! default: it runs inside the rxe VM, scripts/rxe-server-test.sh).
#![allow(clippy::unwrap_used)]

mod support;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use hipobj::{Client, Options};
use hipobj_platform::{NoGpu, Platform};
use support::rdma::{Op, S3Control};
use support::{md5_bytes, md5_hex, pattern};

const BUCKET: &str = "rdma-bucket";

struct ServerProc {
    child: Child,
    addr: std::net::SocketAddr,
}

fn is_soft(dev: &str) -> bool {
    dev == hipobj_softroce::DEFAULT_NAME
}

fn start_server(dev: &str, data: &std::path::Path, port: u16) -> ServerProc {
    let backend = if is_soft(dev) { "softroce" } else { "ibverbs" };
    let cfg = data.with_extension("toml");
    std::fs::write(
        &cfg,
        format!(
            "address = \"127.0.0.1:{port}\"\nmetrics_log_secs = 0\n\
             [[credentials]]\naccess_key = \"{}\"\nsecret_key = \"{}\"\n\
             [storage]\nkind = \"fs\"\ndata_dir = \"{}\"\n\
             [limits]\nfsync = false\nmin_part_size = 1048576\n\
             [rdma]\nenabled = true\ndevice = \"{dev}\"\nbackend = \"{backend}\"\nmax_transfer = 134217728\nchunk_size = 1048576\n",
            support::AK,
            support::SK,
            data.display()
        ),
    )
    .unwrap();
    let (child, addr) = support::spawn_server(&cfg, &[("HIPOBJ_LOG", "warn")]);
    ServerProc { child, addr }
}

fn stop_server(mut s: ServerProc) {
    assert!(
        Command::new("kill")
            .args(["-TERM", &s.child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            assert!(st.success(), "the server exited with {st}");
            return;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(dev: &str, max_transfers: u32) -> Client {
    let platform = if is_soft(dev) {
        Platform {
            verbs: Arc::new(hipobj_softroce::SoftVerbs::new(
                hipobj_softroce::SoftConfig::default(),
            )),
            gpu: Arc::new(NoGpu::new("a test on the soft NIC")),
            topology: Arc::new(hipobj_platform::NoTopology),
        }
    } else {
        Platform {
            verbs: Arc::new(hipobj_ibverbs::IbVerbs::load().unwrap()),
            gpu: Arc::new(NoGpu::new("the rxe VM has no GPU")),
            topology: Arc::new(hipobj_ibverbs::SysfsTopology::system()),
        }
    };
    Client::builder(platform)
        .nic_hint(dev)
        .options(Options {
            max_transfers,
            ..Options::default()
        })
        .build()
        .unwrap()
}

/// PUT `data` under `key` over RDMA and GET it back into a fresh buffer;
/// checks bytes, the ETag, the reply forms and the byte counts.
fn put_get(rt: &tokio::runtime::Handle, s3: &aws_sdk_s3::Client, c: &Client, key: &str, data: &[u8]) {
    let mut src = data.to_vec();
    let reg = c.register(std::mem::take(&mut src)).unwrap();
    let mut ctl = S3Control::new(rt, s3, BUCKET, Op::Put { key: key.into() });
    c.put(&reg, 0, data.len(), &mut ctl)
        .unwrap_or_else(|e| panic!("PUT {key}: {e} {:?}", ctl.seen));
    let o = ctl.last();
    assert_eq!(o.status, 200, "{o:?}");
    assert_eq!(o.bytes, Some(data.len() as u64));
    assert_eq!(
        o.etag.as_deref(),
        Some(format!("\"{}\"", md5_hex(data)).as_str()),
        "PUT {key}"
    );
    assert!(matches!(
        o.parsed(),
        hipobj_proto::Reply::Done { status: 200, .. }
    ));
    drop(reg);

    let mut dst = vec![0u8; data.len()];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(
        rt,
        s3,
        BUCKET,
        Op::Get {
            key: key.into(),
            range: None,
        },
    );
    c.get(&mut reg, 0, data.len(), &mut ctl)
        .unwrap_or_else(|e| panic!("GET {key}: {e} {:?}", ctl.seen));
    let o = ctl.last();
    assert_eq!(
        (o.status, o.bytes, o.content_length.as_deref()),
        (200, Some(data.len() as u64), Some("0"))
    );
    assert!(reg.to_vec() == data, "GET {key}: bytes differ");
}

#[test]
fn rdma_between_two_processes_on_the_soft_nic() {
    scenario(hipobj_softroce::DEFAULT_NAME, 64 << 20);
}

#[test]
#[ignore = "needs an rxe device: run inside scripts/rxe-vm.sh (scripts/rxe-server-test.sh does)"]
fn rdma_between_two_processes_on_rxe() {
    let dev = std::env::var("HIPOBJ_RXE_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let big: usize = std::env::var("HIPOBJ_RXE_BIG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20);
    scenario(&dev, big);
}

fn scenario(dev: &str, big: usize) {
    let dev = dev.to_owned();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = start_server(&dev, &data_dir, port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.handle().clone();
    let s3 = support::client_for(&format!("http://{}", server.addr), support::AK, support::SK);
    rt.block_on(s3.create_bucket().bucket(BUCKET).send()).unwrap();
    let c = client(&dev, 32);
    let t0 = Instant::now();

    // 0 B goes over plain HTTP (a token cannot describe 0 bytes).
    rt.block_on(
        s3.put_object()
            .bucket(BUCKET)
            .key("zero")
            .body(ByteStream::from_static(b""))
            .send(),
    )
    .unwrap();
    let got = rt
        .block_on(s3.get_object().bucket(BUCKET).key("zero").send())
        .unwrap();
    assert_eq!(got.content_length(), Some(0));

    for (key, len) in [("one", 1usize), ("4k", 4096), ("mib", 1 << 20), ("big", big)] {
        let t = Instant::now();
        put_get(&h, &s3, &c, key, &pattern(len, len as u8));
        println!("{dev}: PUT+GET {len} bytes in {:?}", t.elapsed());
    }

    // A ranged GET: the range lands at the token's address, reply 206.
    let whole = pattern(1 << 20, 0);
    let mut dst = vec![0u8; 1000];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(
        &h,
        &s3,
        BUCKET,
        Op::Get {
            key: "mib".into(),
            range: Some("bytes=5000-5999".into()),
        },
    );
    c.get(&mut reg, 0, 1000, &mut ctl).unwrap();
    let o = ctl.last();
    assert_eq!((o.status, o.bytes), (206, Some(1000)), "{o:?}");
    assert!(matches!(
        o.parsed(),
        hipobj_proto::Reply::Done {
            status: 206,
            bytes: 1000,
            ..
        }
    ));
    assert!(reg.to_vec() == whole[5000..6000]);
    drop(reg);
    // A range of the big object over several chunks (1 MiB each, 4 in
    // flight), starting and ending mid-chunk: every byte, 206, and the
    // proof the library requires before it returns.
    let big_data = pattern(big, big as u8);
    let (from, len) = (777usize, ((5 << 20) + 12345).min(big - 778));
    let mut dst = vec![0u8; len];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(
        &h,
        &s3,
        BUCKET,
        Op::Get {
            key: "big".into(),
            range: Some(format!("bytes={from}-{}", from + len - 1)),
        },
    );
    c.get(&mut reg, 0, len, &mut ctl)
        .unwrap_or_else(|e| panic!("ranged GET of big: {e} {:?}", ctl.seen));
    let o = ctl.last();
    assert_eq!((o.status, o.bytes), (206, Some(len as u64)), "{o:?}");
    assert!(
        reg.to_vec() == big_data[from..from + len],
        "ranged GET of big: bytes differ"
    );
    drop(reg);
    let mut dst = vec![0u8; 1000];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    // A buffer smaller than the object: refused, nothing written.
    reg.fill(0xAA);
    let mut ctl = S3Control::new(
        &h,
        &s3,
        BUCKET,
        Op::Get {
            key: "mib".into(),
            range: None,
        },
    );
    assert!(c.get(&mut reg, 0, 1000, &mut ctl).is_err());
    assert_eq!(ctl.last().code.as_deref(), Some("RDMABufferTooSmall"));
    assert!(
        reg.to_vec().iter().all(|b| *b == 0xAA),
        "a refused GET wrote into the buffer"
    );
    drop(reg);

    // Multipart: three parts over RDMA, completed over HTTP.
    let parts = [pattern(1 << 20, 1), pattern(1 << 20, 2), pattern(100_000, 3)];
    let up = rt
        .block_on(s3.create_multipart_upload().bucket(BUCKET).key("mp").send())
        .unwrap();
    let id = up.upload_id().unwrap().to_owned();
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let mut src = p.clone();
        let reg = c.register(std::mem::take(&mut src)).unwrap();
        let mut ctl = S3Control::new(
            &h,
            &s3,
            BUCKET,
            Op::Part {
                key: "mp".into(),
                upload_id: id.clone(),
                n,
            },
        );
        c.put(&reg, 0, p.len(), &mut ctl).unwrap();
        let etag = ctl.last().etag.clone().unwrap();
        assert_eq!(etag, format!("\"{}\"", md5_hex(p)));
        done.push(CompletedPart::builder().part_number(n).e_tag(etag).build());
    }
    let r = rt
        .block_on(
            s3.complete_multipart_upload()
                .bucket(BUCKET)
                .key("mp")
                .upload_id(&id)
                .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(done)).build())
                .send(),
        )
        .unwrap();
    let cat: Vec<u8> = parts.iter().flat_map(|p| md5_bytes(p)).collect();
    assert_eq!(r.e_tag(), Some(format!("\"{}-3\"", md5_hex(&cat)).as_str()));
    let all = parts.concat();
    let mut dst = vec![0u8; all.len()];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(
        &h,
        &s3,
        BUCKET,
        Op::Get {
            key: "mp".into(),
            range: None,
        },
    );
    c.get(&mut reg, 0, all.len(), &mut ctl).unwrap();
    assert!(reg.to_vec() == all.as_slice());
    drop(reg);

    // 32 clients at once, each its own object.
    let t = Instant::now();
    std::thread::scope(|sc| {
        for i in 0..32u8 {
            let (h, s3, c) = (&h, &s3, &c);
            sc.spawn(move || put_get(h, s3, c, &format!("par-{i}"), &pattern(256 << 10, i)));
        }
    });
    println!("{dev}: 32 concurrent PUT+GET of 256 KiB in {:?}", t.elapsed());

    // Server restart: every binding the client holds is now stale; each
    // QP gets a 409, rebinds, and the transfer succeeds.
    stop_server(server);
    let server = start_server(&dev, &data_dir, port);
    let mut dst = vec![0u8; 1 << 20];
    let mut reg = c.register(std::mem::take(&mut dst)).unwrap();
    let mut ctl = S3Control::new(
        &h,
        &s3,
        BUCKET,
        Op::Get {
            key: "mib".into(),
            range: None,
        },
    );
    c.get(&mut reg, 0, 1 << 20, &mut ctl).unwrap();
    assert_eq!(
        ctl.seen.first().map(|o| o.status),
        Some(409),
        "a stale binding rebinds: {:?}",
        ctl.seen
    );
    assert!(reg.to_vec() == whole.as_slice());
    drop(reg);

    let (_, metrics) = rt.block_on(support::raw(
        server.addr,
        "GET /.hipobj/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    println!("{metrics}");
    assert_eq!(
        support::metrics::value(&metrics, "hipobj_rdma_gets_total"),
        Some(1.0),
        "{metrics}"
    );
    stop_server(server);
    println!("{dev}: all done in {:?}", t0.elapsed());
}
