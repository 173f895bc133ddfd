//! PUT an object and GET it back through registered memory.
//!
//! `roundtrip [--require-rdma] ENDPOINT BUCKET [NIC]`, with credentials in
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`. NIC defaults to `softroce0`.
//! With `--require-rdma` a server that does not speak RDMA fails the
//! transfer instead of getting the bytes over plain HTTP.

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_s3::{RdmaS3Client, Span};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (flags, rest): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.starts_with("--"));
    let require_rdma = match flags.as_slice() {
        [] => false,
        [f] if f == "--require-rdma" => true,
        _ => return Err("usage: roundtrip [--require-rdma] ENDPOINT BUCKET [NIC]".into()),
    };
    let mut args = rest.into_iter();
    let (Some(endpoint), Some(bucket)) = (args.next(), args.next()) else {
        return Err("usage: roundtrip [--require-rdma] ENDPOINT BUCKET [NIC]".into());
    };
    let nic = args.next().unwrap_or_else(|| "softroce0".into());
    let ak = std::env::var("AWS_ACCESS_KEY_ID")?;
    let sk = std::env::var("AWS_SECRET_ACCESS_KEY")?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(ak, sk, None, None, "env"))
            .force_path_style(true)
            .build(),
    );
    // Creating the bucket may fail because it exists; the PUT will tell.
    let _ = rt.block_on(s3.create_bucket().bucket(&bucket).send());

    let hipobj = hipobj::Client::builder(hipobj_system::platform())
        .nic_hint(nic)
        .build()?;
    let client = RdmaS3Client::new(s3, hipobj.clone(), rt.handle().clone()).fallback(!require_rdma);

    let len = 1 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let reg = hipobj.register(data.clone())?;
    let put = client.put_object(&reg, Span::whole(len), &bucket, "roundtrip")?;
    println!("PUT {} bytes, etag {:?}, rdma {}", put.bytes, put.etag, put.rdma);
    if let Some(why) = &put.declined {
        println!("  fell back: {why}");
    }
    drop(reg);

    let mut reg = hipobj.register(vec![0u8; len])?;
    let got = client.get_object(&mut reg, Span::whole(len), &bucket, "roundtrip", None)?;
    println!("GET {} bytes, etag {:?}, rdma {}", got.bytes, got.etag, got.rdma);
    let same = reg.to_vec() == data.as_slice();
    drop(reg);
    if !same {
        return Err("the bytes that came back differ".into());
    }
    println!("round trip OK");
    Ok(())
}
