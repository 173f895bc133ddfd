//! `hipobj bench --calibrate`: what this machine moves without hipObject,
//! measured in the same run as the rows so that their figures can be read
//! against it: one loopback TCP connection between two threads, and
//! memcpy within one thread.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Instant;

use serde_json::json;

/// Bytes moved by each measure, per round.
const BYTES: usize = 256 << 20;
/// Rounds of each; the best counts (the machine is shared).
const ROUNDS: usize = 3;

/// The machine's figures, in GiB/s (`None`: the measure could not run).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Calibration {
    /// 256 MiB over one loopback TCP connection, 1 MiB writes and reads.
    pub tcp_gib_s: Option<f64>,
    /// 256 MiB copied by `copy_from_slice` in 64 MiB pieces.
    pub memcpy_gib_s: Option<f64>,
}

impl Calibration {
    /// For `--json`.
    pub(super) fn json(&self) -> serde_json::Value {
        json!({
            "loopback_tcp_gib_per_s": self.tcp_gib_s,
            "memcpy_gib_per_s": self.memcpy_gib_s,
            "bytes": BYTES, "rounds": ROUNDS,
        })
    }

    /// One line for the table's head.
    pub(super) fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2} GiB/s"));
        format!(
            "machine: loopback TCP {}, memcpy {} (best of {ROUNDS} x {} MiB)",
            f(self.tcp_gib_s),
            f(self.memcpy_gib_s),
            BYTES >> 20
        )
    }
}

fn gib_s(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / secs.max(1e-9)
}

/// One round over loopback TCP: seconds from the first byte written to the
/// last byte read.
fn tcp_round() -> std::io::Result<f64> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = l.local_addr()?;
    let reader =
        std::thread::Builder::new()
            .name("calibrate-tcp".into())
            .spawn(move || -> std::io::Result<()> {
                let (mut s, _) = l.accept()?;
                let mut buf = vec![0u8; 1 << 20];
                let mut left = BYTES;
                while left > 0 {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    left = left.saturating_sub(n);
                }
                s.write_all(&[1])
            })?;
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let chunk = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    for _ in 0..BYTES / chunk.len() {
        s.write_all(&chunk)?;
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    let secs = t.elapsed().as_secs_f64();
    reader
        .join()
        .map_err(|_| std::io::Error::other("the reader panicked"))??;
    Ok(secs)
}

fn memcpy_round(src: &[u8], dst: &mut [u8]) -> f64 {
    let t = Instant::now();
    for _ in 0..BYTES / src.len() {
        dst.copy_from_slice(src);
        std::hint::black_box(&mut *dst);
    }
    t.elapsed().as_secs_f64()
}

/// Runs both measures.
pub(super) fn run() -> Calibration {
    let best = |v: Vec<f64>| v.into_iter().reduce(f64::min);
    let tcp: Vec<f64> = (0..ROUNDS).filter_map(|_| tcp_round().ok()).collect();
    let src = vec![0xa5u8; 64 << 20];
    let mut dst = vec![0u8; 64 << 20];
    let mem: Vec<f64> = (0..ROUNDS).map(|_| memcpy_round(&src, &mut dst)).collect();
    Calibration {
        tcp_gib_s: best(tcp).map(|s| gib_s(BYTES, s)),
        memcpy_gib_s: best(mem).map(|s| gib_s(BYTES, s)),
    }
}
