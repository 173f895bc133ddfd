//! The listings at scale (issue 40): a bucket of N keys under 1000
//! prefixes, then a 1000-key page, a 10-key page under a prefix, a full
//! walk, PUT and DELETE into the full bucket, and the memory the first
//! listing (which builds the index) takes per key. A bench command, not a
//! criterion bench: one fill is minutes, so each number is the median of
//! repeated calls on one fill. Only the store's S3 operations are used, so
//! the same file measures a release without the index.
//!
//! ```text
//! HIPOBJ_BENCH_KEYS=100000 HIPOBJ_BENCH_DIR=/work/bench \
//!     cargo bench -p hipobj-store --bench listing
//! ```
//!
//! The bucket is filled by writing the object files directly, as the
//! store writes them (a sealed template object with each key in its
//! metadata), which is far quicker than N PutObject calls; the folder is
//! removed at the end. Results: docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use hipobj_store::fs::{FsLimits, FsStore};
use s3s::dto;
use s3s::{S3, S3Request};

const PREFIXES: usize = 1000;

fn req<T>(input: T) -> S3Request<T> {
    S3Request {
        input,
        method: http::Method::GET,
        uri: http::Uri::from_static("/"),
        headers: http::HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: None,
        region: None,
        service: None,
        trailing_headers: None,
    }
}

fn key(i: usize) -> String {
    format!("p{:03}/obj-{i:08}", i % PREFIXES)
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

async fn put(s: &FsStore, k: &str, data: &'static [u8]) {
    let body = dto::StreamingBlob::from(s3s::Body::from(bytes::Bytes::from_static(data)));
    s.put_object(req(dto::PutObjectInput::builder()
        .bucket("bkt".into())
        .key(k.into())
        .content_length(Some(i64::try_from(data.len()).unwrap()))
        .body(Some(body))
        .build()
        .unwrap()))
        .await
        .unwrap();
}

async fn list(
    s: &FsStore,
    prefix: &str,
    max: i32,
    token: Option<String>,
    after: Option<String>,
) -> (usize, Option<String>) {
    let out = s
        .list_objects_v2(req(dto::ListObjectsV2Input::builder()
            .bucket("bkt".into())
            .prefix(Some(prefix.into()))
            .max_keys(Some(max))
            .continuation_token(token)
            .start_after(after)
            .build()
            .unwrap()))
        .await
        .unwrap()
        .output;
    (out.contents.map_or(0, |c| c.len()), out.next_continuation_token)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Writes N object files into `root/bkt` from the store's own template.
fn fill(root: &Path, n: usize, template: &[u8]) {
    let tail = template.len() - 8;
    let jlen = u32::from_le_bytes(template[tail..tail + 4].try_into().unwrap()) as usize;
    let (data, json) = template[..tail].split_at(tail - jlen);
    let json = std::str::from_utf8(json).unwrap();
    let dir = root.join("bkt");
    let threads = 4;
    std::thread::scope(|sc| {
        for t in 0..threads {
            let dir = &dir;
            sc.spawn(move || {
                for i in (t..n).step_by(threads) {
                    let k = key(i);
                    let j = json.replace("TEMPLATE", &k);
                    let mut f = Vec::with_capacity(data.len() + j.len() + 8);
                    f.extend_from_slice(data);
                    f.extend_from_slice(j.as_bytes());
                    f.extend_from_slice(&u32::try_from(j.len()).unwrap().to_le_bytes());
                    f.extend_from_slice(b"HOB1");
                    std::fs::write(dir.join(format!("o-{}", hex(&k))), f).unwrap();
                }
            });
        }
    });
}

fn main() {
    let n: usize = std::env::var("HIPOBJ_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let base =
        std::env::var("HIPOBJ_BENCH_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let root = tmp.path();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // No fsync: the numbers are the listing's and the index's, not the disk's.
    let limits = FsLimits {
        sync: false,
        ..FsLimits::default()
    };
    let s = FsStore::open(root, limits).unwrap();
    rt.block_on(async {
        s.create_bucket(req(dto::CreateBucketInput::builder()
            .bucket("bkt".into())
            .build()
            .unwrap()))
            .await
            .unwrap();
        put(&s, "TEMPLATE", b"0123456789abcdef").await;
    });
    let template = std::fs::read(root.join("bkt").join(format!("o-{}", hex("TEMPLATE")))).unwrap();
    std::fs::remove_file(root.join("bkt").join(format!("o-{}", hex("TEMPLATE")))).unwrap();
    let t = Instant::now();
    fill(root, n, &template);
    println!(
        "fill: {n} keys under {PREFIXES} prefixes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    drop(s);
    let bytes_on_disk = dir_bytes(root);

    // A fresh open: the first listing reads the folder (the index's build).
    let s = FsStore::open(
        root,
        FsLimits {
            sync: false,
            ..FsLimits::default()
        },
    )
    .unwrap();
    rt.block_on(async {
        let rss0 = rss_kib();
        let t = Instant::now();
        let (got, _) = list(&s, "", 1000, None, None).await;
        assert_eq!(got, 1000.min(n));
        let first = t.elapsed();
        let rss1 = rss_kib();
        println!("first listing after open (builds the index): {}", ms(first));
        println!(
            "resident memory added by it: {} KiB, {:.0} bytes per key",
            rss1.saturating_sub(rss0),
            (rss1.saturating_sub(rss0) * 1024) as f64 / n as f64
        );

        let mut v = Vec::new();
        for i in 0..9 {
            let t = Instant::now();
            let (got, _) = list(&s, "", 1000, None, Some(key(i * n / 9))).await;
            v.push(t.elapsed());
            assert!(got > 0);
        }
        println!("1000-key page (median of 9): {}", ms(median(v)));

        let mut v = Vec::new();
        for i in 0..31 {
            let prefix = format!("p{:03}/", (i * 37) % PREFIXES);
            let t = Instant::now();
            let (got, _) = list(&s, &prefix, 10, None, None).await;
            v.push(t.elapsed());
            assert_eq!(got, 10.min(n / PREFIXES));
        }
        println!("10-key page under a prefix (median of 31): {}", ms(median(v)));

        let t = Instant::now();
        let (mut total, mut token) = list(&s, "", 1000, None, None).await;
        while let Some(tk) = token {
            let (got, next) = list(&s, "", 1000, Some(tk), None).await;
            total += got;
            token = next;
        }
        assert_eq!(total, n);
        println!("full walk, pages of 1000: {:.1} s", t.elapsed().as_secs_f64());

        let ops = 1000;
        let t = Instant::now();
        for i in 0..ops {
            put(&s, &format!("p500/new-{i:05}"), b"0123456789abcdef").await;
        }
        println!(
            "PUT of 16 bytes into the full bucket (mean of {ops}): {}",
            ms(t.elapsed() / ops)
        );
        let t = Instant::now();
        for i in 0..ops {
            s.delete_object(req(dto::DeleteObjectInput::builder()
                .bucket("bkt".into())
                .key(format!("p500/new-{i:05}"))
                .build()
                .unwrap()))
                .await
                .unwrap();
        }
        println!(
            "DELETE in the full bucket (mean of {ops}): {}",
            ms(t.elapsed() / ops)
        );
    });
    println!(
        "data directory: {:.1} MiB on disk; the index adds none",
        bytes_on_disk as f64 / (1 << 20) as f64
    );
}

/// The bytes the files under `dir` take on disk (blocks).
fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(m) = e.metadata() else { continue };
        total += m.blocks() * 512;
        if m.is_dir() {
            total += dir_bytes(&e.path());
        }
    }
    total
}
