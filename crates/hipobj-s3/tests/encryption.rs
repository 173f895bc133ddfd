//! Encrypted and versioned objects moved by RDMA: aws-sdk-s3 through
//! `RdmaS3Client` with `ObjectArgs`, against hipobj-server over https (SSE-C keys travel only
//! over TLS) with RDMA on the soft NIC. The server encrypts what it
//! RDMA-READs and decrypts what it RDMA-WRITEs; the bytes are exact, the
//! files on disk hold none of them, and a GET without the right SSE-C key
//! moves nothing.
#![allow(clippy::unwrap_used)]

#[path = "../../hipobj-server/tests/support/test_ca.rs"]
mod test_ca;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hipobj_s3::tls::{CaBundle, http_client};
use hipobj_s3::{CustomerKey, Encryption, ObjectArgs, RdmaS3Client, Span, completed_part};
use hipobj_server::config::{AccessKey, StorageConfig, VerbsBackend};
use hipobj_server::{Config, Server};
use test_ca::TestCa;

const AK: &str = "hipobj-s3-sse";
const SK: &str = "hipobj-s3-sse-secret";

/// Bytes no two 64-byte windows of which repeat, so that finding one in a
/// file means the file holds plaintext.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every file under `dir`, read.
fn all_files(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else {
            out.push(std::fs::read(&p).unwrap());
        }
    }
    out
}

fn holds(file: &[u8], data: &[u8]) -> bool {
    [0, data.len() / 2, data.len() - 64]
        .iter()
        .any(|&at| file.windows(64).any(|w| w == &data[at..at + 64]))
}

#[test]
fn encrypted_objects_move_by_rdma_byte_exact_and_rest_as_ciphertext() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("hipobj-s3 sse test CA");
    let files = ca.write_server(dir.path(), "server");
    let data_dir = dir.path().join("data");
    let mut config = Config {
        address: "127.0.0.1:0".parse().unwrap(),
        credentials: vec![AccessKey {
            access_key: AK.into(),
            secret_key: SK.into(),
        }],
        storage: StorageConfig::Fs {
            data_dir: data_dir.clone(),
        },
        metrics_log_secs: 0,
        shutdown_grace_secs: 2,
        ..Config::default()
    };
    config.limits.fsync = false;
    config.limits.min_part_size = 1 << 20;
    config.rdma.enabled = true;
    config.rdma.device = Some(hipobj_softroce::DEFAULT_NAME.into());
    config.rdma.backend = VerbsBackend::Softroce;
    config.tls.cert = Some(files.cert);
    config.tls.key = Some(files.key);
    let h = rt.block_on(Server::start(config)).unwrap();
    let bundle = CaBundle::from_file(ca.write_bundle(&dir.path().join("ca.pem"))).unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http_client(Some(&bundle)).unwrap())
            .endpoint_url(h.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(AK, SK, None, None, "test"))
            .force_path_style(true)
            .build(),
    );
    rt.block_on(s3.create_bucket().bucket("sse").send()).unwrap();
    let server_ip = h
        .rdma()
        .and_then(|r| r.target().selection().gid.to_ipv4())
        .unwrap();
    let hipobj = hipobj::Client::builder(hipobj_system::platform())
        .nic_hint(hipobj_softroce::DEFAULT_NAME)
        .options(hipobj::Options {
            allow_peer: hipobj::AllowPeer::Listed(vec![server_ip.into()]),
            ..hipobj::Options::default()
        })
        .build()
        .unwrap();
    let plain = RdmaS3Client::new(s3.clone(), hipobj.clone(), rt.handle().clone()).fallback(false);
    let with = |encryption: Encryption| {
        plain.clone().object_args(ObjectArgs {
            version_id: None,
            encryption,
        })
    };
    let key_a = CustomerKey::new([0xa5; 32]);
    let sse_c = with(Encryption::Customer(key_a.clone()));
    let wrong = with(Encryption::Customer(CustomerKey::new([0x5a; 32])));
    let sse_s3 = with(Encryption::S3);

    // SSE-C: PUT and GET by RDMA, the whole object and a range.
    let data = pattern(3 << 20, 1);
    let reg = hipobj.register(data.clone()).unwrap();
    let put = sse_c
        .put_object(&reg, Span::whole(data.len()), "sse", "c")
        .unwrap();
    assert!(put.rdma && put.bytes == data.len() as u64, "{put:?}");
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
    let got = sse_c
        .get_object(&mut reg, Span::whole(data.len()), "sse", "c", None)
        .unwrap();
    assert!(got.rdma && got.bytes == data.len() as u64, "{got:?}");
    assert!(reg.to_vec() == data, "SSE-C: the bytes that came back differ");
    let mut reg = hipobj.register(vec![0u8; 100_000]).unwrap();
    let got = sse_c
        .get_object(
            &mut reg,
            Span::whole(100_000),
            "sse",
            "c",
            Some("bytes=70000-169999"),
        )
        .unwrap();
    assert!(got.rdma && got.bytes == 100_000, "{got:?}");
    assert!(reg.to_vec() == data[70_000..170_000], "SSE-C range: wrong bytes");

    // Without the key, or with another one: refused, nothing lands.
    for (what, c) in [("no key", &plain), ("another key", &wrong)] {
        let mut reg = hipobj.register(vec![0u8; data.len()]).unwrap();
        let e = c
            .get_object(&mut reg, Span::whole(data.len()), "sse", "c", None)
            .unwrap_err();
        assert!(e.to_string().contains("400"), "{what}: {e}");
        assert!(reg.to_vec().iter().all(|b| *b == 0), "{what}: bytes landed");
    }

    // SSE-S3: PUT by RDMA, GET by RDMA with nothing to name.
    let data_s3 = pattern(2 << 20, 2);
    let reg = hipobj.register(data_s3.clone()).unwrap();
    let put = sse_s3
        .put_object(&reg, Span::whole(data_s3.len()), "sse", "s3")
        .unwrap();
    assert!(put.rdma, "{put:?}");
    drop(reg);
    let mut reg = hipobj.register(vec![0u8; data_s3.len()]).unwrap();
    let got = plain
        .get_object(&mut reg, Span::whole(data_s3.len()), "sse", "s3", None)
        .unwrap();
    assert!(got.rdma && reg.to_vec() == data_s3, "SSE-S3: {got:?}");
    let head = rt
        .block_on(s3.head_object().bucket("sse").key("s3").send())
        .unwrap();
    assert_eq!(head.server_side_encryption().map(|s| s.as_str()), Some("AES256"));

    // A multipart SSE-C upload whose parts go by RDMA.
    let big = pattern(5 << 20, 3);
    let (alg, k, md5) = ("AES256", key_b64(&[0xa5; 32]), key_md5(&[0xa5; 32]));
    let up = rt
        .block_on(
            s3.create_multipart_upload()
                .bucket("sse")
                .key("mp")
                .sse_customer_algorithm(alg)
                .sse_customer_key(&k)
                .sse_customer_key_md5(&md5)
                .send(),
        )
        .unwrap();
    let id = up.upload_id().unwrap();
    let reg = hipobj.register(big.clone()).unwrap();
    let cut = 3 << 20;
    let a = sse_c
        .upload_part(&reg, Span { offset: 0, len: cut }, "sse", "mp", id, 1)
        .unwrap();
    let b = sse_c
        .upload_part(
            &reg,
            Span {
                offset: cut,
                len: big.len() - cut,
            },
            "sse",
            "mp",
            id,
            2,
        )
        .unwrap();
    assert!(a.rdma && b.rdma, "{a:?} {b:?}");
    drop(reg);
    rt.block_on(
        s3.complete_multipart_upload()
            .bucket("sse")
            .key("mp")
            .upload_id(id)
            .sse_customer_algorithm(alg)
            .sse_customer_key(&k)
            .sse_customer_key_md5(&md5)
            .multipart_upload(
                aws_sdk_s3::types::CompletedMultipartUpload::builder()
                    .parts(completed_part(1, a.etag))
                    .parts(completed_part(2, b.etag))
                    .build(),
            )
            .send(),
    )
    .unwrap();
    let mut reg = hipobj.register(vec![0u8; big.len()]).unwrap();
    let got = sse_c
        .get_object(&mut reg, Span::whole(big.len()), "sse", "mp", None)
        .unwrap();
    assert!(got.rdma && reg.to_vec() == big, "SSE-C multipart: {got:?}");
    drop(reg);
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 8);

    // A versioned bucket: two SSE-C versions of one key PUT by RDMA, each
    // read back by RDMA by its version id, byte-exact.
    rt.block_on(
        s3.put_bucket_versioning()
            .bucket("sse")
            .versioning_configuration(
                aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send(),
    )
    .unwrap();
    let first = pattern(1 << 20, 4);
    let second = pattern((1 << 20) + 17, 5);
    let mut ids = Vec::new();
    for d in [&first, &second] {
        let reg = hipobj.register(d.clone()).unwrap();
        let put = sse_c.put_object(&reg, Span::whole(d.len()), "sse", "v").unwrap();
        assert!(put.rdma, "{put:?}");
        let head = rt
            .block_on(
                s3.head_object()
                    .bucket("sse")
                    .key("v")
                    .sse_customer_algorithm(alg)
                    .sse_customer_key(&k)
                    .sse_customer_key_md5(&md5)
                    .send(),
            )
            .unwrap();
        ids.push(head.version_id().unwrap().to_owned());
    }
    assert_ne!(ids[0], ids[1]);
    for (id, d) in ids.iter().zip([&first, &second]) {
        let c = plain.clone().object_args(ObjectArgs {
            version_id: Some(id.clone()),
            encryption: Encryption::Customer(key_a.clone()),
        });
        let mut reg = hipobj.register(vec![0u8; d.len()]).unwrap();
        let got = c
            .get_object(&mut reg, Span::whole(d.len()), "sse", "v", None)
            .unwrap();
        assert!(got.rdma && got.bytes == d.len() as u64, "{got:?}");
        assert!(reg.to_vec() == *d, "version {id}: wrong bytes");
    }
    assert_eq!(h.rdma().unwrap().target().stats().transfers, 12);

    // Every byte at rest is ciphertext: no file of the data directory
    // holds a window of any object's bytes.
    let stored = all_files(&data_dir);
    assert!(
        stored.iter().any(|f| f.len() > data.len()),
        "the objects are not on disk"
    );
    for (what, d) in [
        ("SSE-C", &data),
        ("SSE-S3", &data_s3),
        ("multipart", &big),
        ("first version", &first),
        ("second version", &second),
    ] {
        assert!(!stored.iter().any(|f| holds(f, d)), "{what}: plaintext on disk");
    }
    rt.block_on(h.shutdown());
}

fn key_b64(k: &[u8; 32]) -> String {
    base64_simd::STANDARD.encode_to_string(k)
}

fn key_md5(k: &[u8; 32]) -> String {
    use md5::Digest as _;
    base64_simd::STANDARD.encode_to_string(md5::Md5::digest(k))
}
