//! The ETag's MD5 over one 64 MiB body: the server's (AWS-LC's assembler)
//! beside s3s's (RustCrypto's portable `md-5`), in one run. Every PUT,
//! plain or by RDMA, pays this per byte (docs/performance.md, issue 29).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use s3s::crypto::Checksum as _;

/// Hands `body` over in 1 MiB chunks, as the store's body stream does.
fn in_chunks(body: &[u8], mut update: impl FnMut(&[u8])) {
    for chunk in body.chunks(1 << 20) {
        update(chunk);
    }
}

fn md5(c: &mut Criterion) {
    let body: Vec<u8> = (0..64u32 << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
    let mut g = c.benchmark_group("md5_64mib");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(10);
    g.bench_function("aws_lc", |b| {
        b.iter(|| {
            let mut m = hipobj_store::md5::Md5::new();
            in_chunks(&body, |c| m.update(c));
            m.finalize()
        })
    });
    g.bench_function("rustcrypto_md5", |b| {
        b.iter(|| {
            let mut m = s3s::crypto::Md5::new();
            in_chunks(&body, |c| m.update(c));
            m.finalize()
        })
    });
    g.finish();
}

criterion_group!(benches, md5);
criterion_main!(benches);
