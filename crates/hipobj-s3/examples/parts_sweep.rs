//! Measures one large GET and PUT through [`hipobj_s3::RdmaS3Client`] at
//! several parts in flight, side by side in one run: hipobj-server
//! in-process on the soft NIC (its default 1 GiB transfer limit), the
//! client on a soft NIC of its own, every part by RDMA (checked).
//!
//! ```text
//! cargo run -p hipobj-s3 --example parts_sweep -- [SIZE_MIB [PART_MIB [IN_FLIGHT,...]]]
//! ```
//!
//! Defaults: 1024 MiB, parts of 16 MiB, 1,2,4,8 in flight, and first a row
//! of the whole object as one transfer. Each row is one PUT then one GET of
//! the same object, timed by the wall clock; the bytes are compared once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use hipobj_platform::{NoGpu, NoTopology, Platform};
use hipobj_s3::{Parallel, RdmaS3Client, Span};
use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_softroce::{SoftConfig, SoftVerbs};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size_mib: usize = args.first().map_or(1024, |a| a.parse().expect("SIZE_MIB"));
    let part_mib: usize = args.get(1).map_or(16, |a| a.parse().expect("PART_MIB"));
    let flights: Vec<usize> = args.get(2).map_or(vec![1, 2, 4, 8], |a| {
        a.split(',').map(|n| n.parse().expect("IN_FLIGHT")).collect()
    });
    let size = size_mib << 20;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = hipobj_server::Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: "AKTEST".into(),
            secret_key: "secret".into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        ..hipobj_server::Config::default()
    };
    config.limits.fsync = false;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    let server = rt.block_on(hipobj_server::Server::start(config)).unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .endpoint_url(server.endpoint())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "AKTEST", "secret", None, None, "sweep",
            ))
            .force_path_style(true)
            .build(),
    );
    rt.block_on(s3.create_bucket().bucket("bkt").send()).unwrap();
    let server_ip = server
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    let platform = Platform {
        verbs: Arc::new(SoftVerbs::new(SoftConfig {
            name: "softroce-sweep".into(),
            ..SoftConfig::default()
        })),
        gpu: Arc::new(NoGpu::new("sweep")),
        topology: Arc::new(NoTopology),
    };
    let h = hipobj::Client::builder(platform)
        .nic_hint("softroce-sweep")
        .options(hipobj::Options {
            max_transfers: 16,
            allow_peer: hipobj::AllowPeer::Listed(vec![server_ip.into()]),
            ..hipobj::Options::default()
        })
        .build()
        .unwrap();
    let data: Vec<u8> = (0..size)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8)
        .collect();
    let src = h.register(data.clone()).unwrap();
    let mut dst = h.register(vec![0u8; size]).unwrap();

    let mut rows = vec![(
        "one transfer".to_owned(),
        Parallel {
            part_size: size,
            in_flight: 1,
        },
    )];
    for &k in &flights {
        rows.push((
            format!("{part_mib} MiB parts x{k}"),
            Parallel {
                part_size: part_mib << 20,
                in_flight: k,
            },
        ));
    }
    println!(
        "{size_mib} MiB object, soft NIC, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{:<22} {:>12} {:>12}", "split", "PUT MiB/s", "GET MiB/s");
    let mut checked = false;
    for (name, p) in rows {
        let c = RdmaS3Client::new(s3.clone(), h.clone(), rt.handle().clone()).parallel(p);
        let t0 = Instant::now();
        let put = c.put_object(&src, Span::whole(size), "bkt", "obj").unwrap();
        let put_s = t0.elapsed().as_secs_f64();
        assert!(put.rdma && put.bytes == size as u64, "{put:?}");
        let t0 = Instant::now();
        let got = c
            .get_object(&mut dst, Span::whole(size), "bkt", "obj", None)
            .unwrap();
        let get_s = t0.elapsed().as_secs_f64();
        assert!(got.rdma && got.bytes == size as u64, "{got:?}");
        if !checked {
            assert!(dst.to_vec() == data, "the bytes differ");
            checked = true;
        }
        println!(
            "{name:<22} {:>12.0} {:>12.0}",
            size_mib as f64 / put_s,
            size_mib as f64 / get_s
        );
    }
    drop((src, dst));
    rt.block_on(server.shutdown());
}
