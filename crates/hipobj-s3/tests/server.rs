//! RdmaS3Client against the real hipobj-server, in-process on 127.0.0.1.
//! With RDMA off the server declines every token with 501, and every call
//! must fall back to HTTP, say so, and move the right bytes. (Transfers that
//! move bytes by RDMA need the soft NIC on both ends.)
#![allow(clippy::unwrap_used)]

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_platform::fake::FakePlatform;
use hipobj_s3::{RdmaS3Client, Span, completed_part};
use hipobj_server::config::{AccessKey, StorageConfig};
use hipobj_server::{Config, Server};

const AK: &str = "hipobj-s3-test";
const SK: &str = "hipobj-s3-secret";

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn rdma_off_declines_and_everything_falls_back_with_the_right_bytes() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: AK.into(),
            secret_key: SK.into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: dir.path().to_path_buf(),
        },
        metrics_log_secs: 0,
        shutdown_grace_secs: 2,
        ..Config::default()
    };
    config.limits.fsync = false;
    let handle = rt.block_on(Server::start(config)).unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(handle.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(AK, SK, None, None, "test"))
            .force_path_style(true)
            .build(),
    );
    rt.block_on(s3.create_bucket().bucket("bkt").send()).unwrap();
    let p = FakePlatform::host_only();
    let h = hipobj::Client::builder(p.platform())
        .nic_hint("fake0")
        .build()
        .unwrap();
    let c = RdmaS3Client::new(s3.clone(), h, rt.handle().clone());

    let data = pattern(12 << 20);
    let mut buf = data.clone();
    let reg = c.hipobj().register(std::mem::take(&mut buf)).unwrap();
    let t = c.put_object(&reg, Span::whole(1 << 20), "bkt", "one").unwrap();
    assert!(!t.rdma && t.declined.as_deref().unwrap().contains("501"), "{t:?}");
    assert_eq!(t.bytes, 1 << 20);

    // Multipart: two parts through the same registration.
    let up = rt
        .block_on(s3.create_multipart_upload().bucket("bkt").key("mp").send())
        .unwrap();
    let id = up.upload_id().unwrap();
    let a = c
        .upload_part(
            &reg,
            Span {
                offset: 0,
                len: 6 << 20,
            },
            "bkt",
            "mp",
            id,
            1,
        )
        .unwrap();
    let b = c
        .upload_part(
            &reg,
            Span {
                offset: 6 << 20,
                len: 6 << 20,
            },
            "bkt",
            "mp",
            id,
            2,
        )
        .unwrap();
    assert!(a.declined.is_some() && b.declined.is_some());
    let done = aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .parts(completed_part(1, a.etag))
        .parts(completed_part(2, b.etag))
        .build();
    rt.block_on(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("mp")
            .upload_id(id)
            .multipart_upload(done)
            .send(),
    )
    .unwrap();
    drop(reg);

    let mut out = vec![0u8; 12 << 20];
    let mut reg = c.hipobj().register(std::mem::take(&mut out)).unwrap();
    let t = c
        .get_object(&mut reg, Span::whole(12 << 20), "bkt", "mp", None)
        .unwrap();
    assert!(!t.rdma && t.declined.is_some());
    assert_eq!(t.bytes, 12 << 20);
    assert_eq!(reg.to_vec(), &data[..]);
    let t = c
        .get_object(
            &mut reg,
            Span {
                offset: 100,
                len: 1000,
            },
            "bkt",
            "one",
            Some("bytes=10-19"),
        )
        .unwrap();
    assert_eq!((t.bytes, t.object_size, t.status), (10, Some(1 << 20), 206));
    assert_eq!(&reg.to_vec()[100..110], &data[10..20]);

    // A missing key is an S3 error with its code, not a fallback.
    let e = c
        .get_object(&mut reg, Span::whole(16), "bkt", "missing", None)
        .unwrap_err();
    assert_eq!(e.s3_code(), Some("NoSuchKey"), "{e}");
    drop(reg);
    rt.block_on(handle.shutdown());
}
