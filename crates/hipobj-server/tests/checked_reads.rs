//! Rotten bytes are never served as good ones: an object file with one
//! flipped byte, a zeroed block or a cut end fails every read path that
//! touches the damage (plain GET, ranged GET, CopyObject, UploadPartCopy)
//! with an error, never a 200 with the wrong bytes; reads that touch only
//! good blocks still answer; listings still answer; `hipobj-server scrub`
//! names the object. (The RDMA GET over the soft NIC is in
//! crates/hipobj-cli/tests/cli.rs, through the `hipobj` CLI.)
#![allow(clippy::unwrap_used)]

mod support;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;
use support::{client, code, pattern, start};

const BLOCK: usize = 256 << 10;

/// The file that holds `key` in bucket `bucket` of data directory `dir`.
fn object_file(dir: &std::path::Path, bucket: &str, key: &str) -> std::path::PathBuf {
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    dir.join(bucket).join(format!("o-{hex}"))
}

fn damage(file: &std::path::Path, how: &str, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    match how {
        "flip" => bytes[at] ^= 0x01,
        "zero" => bytes[at..at + BLOCK].fill(0),
        _ => unreachable!(),
    }
    std::fs::write(file, bytes).unwrap();
}

/// The whole body of a GET, or the error that stopped it (a failed call,
/// or a body cut short).
async fn get(c: &aws_sdk_s3::Client, key: &str, range: Option<&str>) -> Result<Vec<u8>, String> {
    let r = c
        .get_object()
        .bucket("rot")
        .key(key)
        .set_range(range.map(str::to_owned))
        .send()
        .await
        .map_err(|e| code(&e))?;
    r.body
        .collect()
        .await
        .map(|b| b.into_bytes().to_vec())
        .map_err(|e| format!("the body was cut: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_read_path_refuses_rotten_bytes_and_good_blocks_still_read() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("rot").send().await.unwrap();
    let big = pattern(3 * BLOCK + 1000, 7);
    let small = pattern(5000, 9);
    for (key, body, sum) in [
        ("flipped", &big, None),
        ("zeroed", &big, None),
        ("small", &small, Some(ChecksumAlgorithm::Crc32)),
        ("truncated", &big, None),
    ] {
        c.put_object()
            .bucket("rot")
            .key(key)
            .set_checksum_algorithm(sum)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap();
    }
    let data = dir.path();
    damage(&object_file(data, "rot", "flipped"), "flip", 2 * BLOCK + 17);
    damage(&object_file(data, "rot", "zeroed"), "zero", BLOCK);
    damage(&object_file(data, "rot", "small"), "flip", 100);
    {
        let f = object_file(data, "rot", "truncated");
        let len = std::fs::metadata(&f).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        file.set_len(len - 3000).unwrap();
    }

    // A small object's damage is a clean 500 before any byte.
    assert_eq!(get(&c, "small", None).await, Err("InternalError".into()));
    // The whole object: an error, never a 200 with all its bytes.
    for key in ["flipped", "zeroed", "truncated"] {
        let got = get(&c, key, None).await;
        assert!(got.is_err(), "{key}: a whole GET of a damaged object succeeded");
    }
    // Ranged reads: those that touch a bad block fail, those that do not
    // return the right bytes.
    let bad_flip = format!("bytes={}-{}", 2 * BLOCK + 10, 2 * BLOCK + 20);
    assert!(get(&c, "flipped", Some(&bad_flip)).await.is_err());
    let good = format!("bytes=10-{}", BLOCK + 99);
    assert_eq!(
        get(&c, "flipped", Some(&good)).await.unwrap(),
        &big[10..BLOCK + 100]
    );
    let bad_zero = format!("bytes={}-{}", BLOCK - 5, BLOCK + 5);
    assert!(get(&c, "zeroed", Some(&bad_zero)).await.is_err());
    assert_eq!(
        get(&c, "zeroed", Some(&format!("bytes={}-", 2 * BLOCK)))
            .await
            .unwrap(),
        &big[2 * BLOCK..]
    );

    // A copy of rotten bytes fails and makes nothing.
    for key in ["flipped", "small", "zeroed"] {
        let e = c
            .copy_object()
            .bucket("rot")
            .key(format!("copy-of-{key}"))
            .copy_source(format!("rot/{key}"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&e), "InternalError", "{key}");
        let missing = c
            .head_object()
            .bucket("rot")
            .key(format!("copy-of-{key}"))
            .send()
            .await;
        assert!(missing.is_err(), "a copy of {key} exists");
    }
    // And so does a part copied from them.
    let up = c
        .create_multipart_upload()
        .bucket("rot")
        .key("assembled")
        .send()
        .await
        .unwrap();
    let e = c
        .upload_part_copy()
        .bucket("rot")
        .key("assembled")
        .upload_id(up.upload_id().unwrap())
        .part_number(1)
        .copy_source("rot/flipped")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InternalError");

    // Listings still answer, and name the objects whose files still read
    // as objects (the truncated one's trailer is gone).
    let keys: Vec<String> = c
        .list_objects_v2()
        .bucket("rot")
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect();
    assert_eq!(keys, ["flipped", "small", "zeroed"]);
    h.shutdown().await;

    // The scrub names each damaged object, and exits 1.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["scrub", "--data-dir", data.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for key in ["\"flipped\"", "\"zeroed\"", "\"small\""] {
        assert!(
            text.lines().any(|l| l.contains(key) && l.contains("disagree")),
            "scrub did not name {key}: {text}"
        );
    }
    assert!(
        text.lines().any(|l| l.contains("does not read back")),
        "scrub did not name the truncated file: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn objects_without_block_checksums_still_read() {
    let (h, dir) = start(|_| {}).await;
    let c = client(&h);
    c.create_bucket().bucket("rot").send().await.unwrap();
    let body = pattern(BLOCK + 10, 3);
    c.put_object()
        .bucket("rot")
        .key("old")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    // Rewrite the file as a release before block checksums wrote it: the
    // same data and metadata, without the `blocks` field.
    drop_block_sums(dir.path(), "old");
    assert_eq!(get(&c, "old", None).await.unwrap(), body);
    assert_eq!(get(&c, "old", Some("bytes=5-9")).await.unwrap(), &body[5..10]);
    h.shutdown().await;
}

/// Rewrites the object file of `key` as a release before block checksums
/// wrote it (no `blocks` in its metadata), so that its own reads go
/// unchecked.
fn drop_block_sums(dir: &std::path::Path, key: &str) {
    let f = object_file(dir, "rot", key);
    let bytes = std::fs::read(&f).unwrap();
    let n = bytes.len();
    let jlen = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    let mut meta: serde_json::Value = serde_json::from_slice(&bytes[n - 8 - jlen..n - 8]).unwrap();
    assert!(meta.as_object_mut().unwrap().remove("blocks").is_some());
    let json = serde_json::to_vec(&meta).unwrap();
    let mut old = bytes[..n - 8 - jlen].to_vec();
    old.extend_from_slice(&json);
    old.extend_from_slice(&(json.len() as u32).to_le_bytes());
    old.extend_from_slice(b"HOB1");
    std::fs::write(&f, old).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_checks_the_checksum_its_s3_back_end_returns() {
    // The back end: an fs store whose object has a CRC32 but no block
    // sums, and one byte flipped, so it serves the damage with its
    // checksum header as any S3 server with bad bytes would.
    let (back, dir) = start(|_| {}).await;
    let b = client(&back);
    b.create_bucket().bucket("rot").send().await.unwrap();
    let body = pattern(100_000, 5);
    b.put_object()
        .bucket("rot")
        .key("k")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    let (gw, _unused) = start(|c| {
        c.storage = hipobj_server::config::StorageConfig::S3(hipobj_server::config::RemoteConfig {
            endpoint: back.endpoint(),
            region: "us-east-1".into(),
            access_key: support::AK.into(),
            secret_key: support::SK.into(),
            path_style: true,
        });
    })
    .await;
    let g = client(&gw);
    // Good bytes pass, and a client that did not ask for checksums gets
    // none it did not ask for.
    let r = g.get_object().bucket("rot").key("k").send().await.unwrap();
    assert!(r.checksum_crc32().is_none());
    assert_eq!(r.body.collect().await.unwrap().into_bytes().as_ref(), &body[..]);
    drop_block_sums(dir.path(), "k");
    let f = object_file(dir.path(), "rot", "k");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[4321] ^= 0x08;
    std::fs::write(&f, bytes).unwrap();
    // The back end alone serves the damage (it has nothing to check it by).
    assert!(get(&b, "k", None).await.is_ok());
    // Through the gateway, the read fails.
    assert!(
        get(&g, "k", None).await.is_err(),
        "the gateway passed on bytes its back end's checksum refuses"
    );
    gw.shutdown().await;
    back.shutdown().await;
}
