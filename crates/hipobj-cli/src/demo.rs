//! `hipobj demo`: the whole system on one machine with no set-up.
//!
//! It starts the RDMA-capable S3 server with its embedded filesystem store
//! on the soft RoCE NIC, then, as an application would, registers a buffer
//! with hipObject, PUTs an object from it (the server RDMA READs the
//! buffer), GETs it back into a second buffer (the server RDMA WRITEs it),
//! checks every byte, and prints what happened and how fast.

use std::time::Instant;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_s3::{RdmaS3Client, Span};

use crate::error::{CliError, CliResult};
use crate::s3::human;

/// Options of `hipobj demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Object size.
    #[arg(long, default_value = "64MiB", value_parser = crate::s3::parse_size)]
    size: u64,
    /// Times to repeat the PUT and the GET (the best time is reported).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

const KEY_ID: &str = "hipobj-demo";
const SECRET: &str = "hipobj-demo-secret";

fn fail(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::plain(format!("demo: {what}: {e}"))
}

fn rate(bytes: u64, secs: f64) -> String {
    format!("{:.0} MiB/s", bytes as f64 / (1 << 20) as f64 / secs.max(1e-9))
}

/// Runs the demo; fails when any byte differs or a step fails.
pub(crate) fn run(args: &Args) -> CliResult {
    let size = usize::try_from(args.size)
        .ok()
        .filter(|s| (1..=1 << 30).contains(s))
        .ok_or_else(|| CliError::plain("demo: --size must be 1 byte to 1 GiB"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| fail("cannot start the I/O runtime", e))?;
    let data = tempfile::tempdir().map_err(|e| fail("cannot create a data directory", e))?;

    println!("hipObject demo: GPU-direct S3 over RDMA, here on host memory and the soft RoCE NIC\n");
    let server = start_server(&rt, data.path(), args.size)?;
    let hipobj = init_client(&server)?;
    let client = s3_client(&rt, &server, &hipobj)?;

    let src: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    let dst = vec![0u8; size];
    let src_reg = hipobj
        .register(src)
        .map_err(|e| fail("cannot register the source buffer", e))?;
    let mut dst_reg = hipobj
        .register(dst)
        .map_err(|e| fail("cannot register the target buffer", e))?;
    println!("3. Registered two {} host buffers with the NIC", human(args.size));

    let best = round_trips(&client, &src_reg, &mut dst_reg, args)?;
    println!(
        "4. PUT {}: the server RDMA READ it from the registered buffer (ETag {})",
        human(args.size),
        best.etag.unwrap_or_default()
    );
    println!(
        "5. GET {}: the server RDMA WRITE it into the other buffer; all {} bytes match",
        human(args.size),
        args.size
    );
    println!(
        "\n   best of {}: PUT {:.1} ms ({}), GET {:.1} ms ({})",
        args.rounds.max(1),
        best.put * 1e3,
        rate(args.size, best.put),
        best.get * 1e3,
        rate(args.size, best.get)
    );
    println!("   server: {}", server.metrics().summary());
    drop(src_reg);
    drop(dst_reg);
    rt.block_on(server.shutdown());
    println!("\nverified: the object made the round trip over RDMA byte for byte");
    Ok(())
}

/// Step 1: hipobj-server on a filesystem store in `data`, with RDMA on the
/// soft NIC for objects up to `max_transfer` bytes.
fn start_server(
    rt: &tokio::runtime::Runtime,
    data: &std::path::Path,
    max_transfer: u64,
) -> CliResult<hipobj_server::Handle> {
    let mut cfg = hipobj_server::Config {
        address: ([127, 0, 0, 1], 0).into(),
        credentials: vec![hipobj_server::config::AccessKey {
            access_key: KEY_ID.into(),
            secret_key: SECRET.into(),
        }],
        storage: hipobj_server::config::StorageConfig::Fs {
            data_dir: data.to_path_buf(),
        },
        metrics_log_secs: 0,
        ..hipobj_server::Config::default()
    };
    cfg.limits.fsync = false;
    cfg.rdma.enabled = true;
    cfg.rdma.device = Some(hipobj_system::SOFTROCE_DEFAULT_NAME.into());
    cfg.rdma.backend = hipobj_server::config::VerbsBackend::Softroce;
    cfg.rdma.max_transfer = max_transfer.max(1);
    let server = rt
        .block_on(hipobj_server::Server::start(cfg))
        .map_err(|e| fail("the server did not start", e))?;
    let server_gid = server
        .rdma()
        .map(|r| r.target().selection().gid.to_string())
        .unwrap_or_default();
    println!(
        "1. Started hipobj-server at {} (filesystem store in {})",
        server.endpoint(),
        data.display()
    );
    println!(
        "   its RDMA side: soft RoCE device {} at GID {server_gid}",
        hipobj_system::SOFTROCE_DEFAULT_NAME
    );
    Ok(server)
}

/// Step 2: hipObject on the soft NIC, accepting the server's GID.
fn init_client(server: &hipobj_server::Handle) -> CliResult<hipobj::Client> {
    // The server's soft NIC has a loopback address of its own, not the
    // endpoint's: accept its GID as a multi-homed server's users would
    // (docs/protocol.md §8).
    let mut options = hipobj::Options::from_env();
    if let (hipobj::AllowPeer::Listed(extra), Some(ip)) = (
        &mut options.allow_peer,
        server.rdma().and_then(|r| r.target().selection().gid.to_ipv4()),
    ) {
        extra.push(ip.into());
    }
    let hipobj = hipobj::Client::builder(hipobj_system::platform())
        .nic_hint(hipobj_system::SOFTROCE_DEFAULT_NAME)
        .options(options)
        .build()
        .map_err(|e| fail("hipObject did not initialize", e))?;
    let dev = hipobj.instance().device();
    println!(
        "2. Initialized hipObject on {} (GID {}, MTU {} bytes, {} connections)",
        hipobj.instance().chosen().selection.device,
        dev.gid(),
        dev.mtu().bytes(),
        hipobj.instance().pool().size()
    );
    Ok(hipobj)
}

/// aws-sdk-s3 for the server, the bucket `demo`, and the RDMA client over
/// both (no plain-HTTP fallback: the demo is about RDMA).
fn s3_client(
    rt: &tokio::runtime::Runtime,
    server: &hipobj_server::Handle,
    hipobj: &hipobj::Client,
) -> CliResult<RdmaS3Client> {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(server.endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(KEY_ID, SECRET, None, None, "demo"))
        .force_path_style(true)
        .build();
    let s3 = aws_sdk_s3::Client::from_conf(conf);
    rt.block_on(s3.create_bucket().bucket("demo").send())
        .map_err(|e| {
            fail(
                "cannot create the bucket",
                hipobj_s3::Error::from_sdk("CreateBucket", &e),
            )
        })?;
    // The demo started this server itself: no probe before the first PUT.
    Ok(RdmaS3Client::new(s3, hipobj.clone(), rt.handle().clone())
        .fallback(false)
        .known_protocol(hipobj_s3::Protocol::Binding))
}

/// The best times of the rounds, and the last PUT's ETag.
struct Best {
    put: f64,
    get: f64,
    etag: Option<String>,
}

/// Steps 4 and 5, `args.rounds` times: PUT `src` by RDMA, GET it into
/// `dst` by RDMA, and compare the bytes.
fn round_trips(
    client: &RdmaS3Client,
    src: &hipobj::Registration<'static>,
    dst: &mut hipobj::Registration<'static>,
    args: &Args,
) -> CliResult<Best> {
    let size = src.len();
    let mut best = Best {
        put: f64::MAX,
        get: f64::MAX,
        etag: None,
    };
    for round in 0..args.rounds.max(1) {
        let t = Instant::now();
        let put = client
            .put_object(src, Span::whole(size), "demo", "object")
            .map_err(|e| fail("PUT failed", e))?;
        best.put = best.put.min(t.elapsed().as_secs_f64());
        if !put.rdma || put.bytes != args.size {
            return Err(fail(
                "PUT",
                format!("moved {} bytes, rdma {}", put.bytes, put.rdma),
            ));
        }
        best.etag = put.etag;
        dst.fill(0);
        let t = Instant::now();
        let get = client
            .get_object(dst, Span::whole(size), "demo", "object", None)
            .map_err(|e| fail("GET failed", e))?;
        best.get = best.get.min(t.elapsed().as_secs_f64());
        if !get.rdma || get.bytes != args.size {
            return Err(fail(
                "GET",
                format!("moved {} bytes, rdma {}", get.bytes, get.rdma),
            ));
        }
        let (got, sent) = (dst.to_vec(), src.to_vec());
        if got != sent {
            let at = got.iter().zip(&sent).position(|(a, b)| a != b).unwrap_or(0);
            return Err(fail(
                "verification",
                format!("round {round}: the bytes differ, first at offset {at}"),
            ));
        }
    }
    Ok(best)
}
