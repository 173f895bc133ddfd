//! Block checksums of stored bytes: what an object file's data (or a
//! part's) hashed to when it was written, one CRC-32C per block of
//! [`BLOCK`] bytes, so that every read can tell rotten bytes from good
//! ones and a ranged read checks only the blocks it touches.
//!
//! The sums cover the bytes as stored (ciphertext for an encrypted
//! object), and live in the object's metadata. Objects written before the
//! sums existed have none and are read as before, unchecked
//! (docs/server.md, "Checked reads").

use serde::{Deserialize, Serialize};

/// Bytes per block.
pub const BLOCK: u64 = 256 << 10;

fn crc(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// The sums of one object's stored bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSums {
    /// Bytes per block (every block but the last is whole).
    pub block: u64,
    /// Each block's CRC-32C, little-endian, base64 (standard alphabet).
    pub crc32c: String,
}

/// Why stored bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// A block's bytes differ from its sum.
    #[error("block {0} of the stored bytes disagrees with its checksum")]
    Block(u64),
    /// The sums do not describe the stored length (a damaged record).
    #[error("the block checksums do not describe {0} stored bytes")]
    Shape(u64),
}

impl BlockSums {
    fn sums(&self) -> Option<Vec<u32>> {
        let raw = base64_simd::STANDARD.decode_to_vec(self.crc32c.as_bytes()).ok()?;
        if raw.len() % 4 != 0 {
            return None;
        }
        Some(
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// A checker for `stored_len` bytes, or why these sums cannot be one.
    pub fn checker(&self, stored_len: u64) -> Result<Checker, Mismatch> {
        let sums = self.sums().ok_or(Mismatch::Shape(stored_len))?;
        if self.block == 0 || self.block > (64 << 20) || stored_len.div_ceil(self.block) != sums.len() as u64
        {
            return Err(Mismatch::Shape(stored_len));
        }
        Ok(Checker {
            block: self.block,
            len: stored_len,
            sums,
            label: String::new(),
        })
    }
}

/// Checks stored bytes against their block sums.
#[derive(Clone, Debug)]
pub struct Checker {
    block: u64,
    len: u64,
    sums: Vec<u32>,
    /// What the bytes are, for the log (an object's key).
    label: String,
}

impl Checker {
    /// Names the bytes in the log line of a mismatch.
    pub fn labelled(mut self, label: &str) -> Self {
        self.label = label.to_owned();
        self
    }

    /// Bytes per block.
    pub fn block(&self) -> u64 {
        self.block
    }

    /// The smallest run of whole blocks (the last one may be short: it
    /// ends the data) that holds `len` bytes at `start`: its start and
    /// length.
    pub fn covering(&self, start: u64, len: u64) -> (u64, u64) {
        let first = start / self.block * self.block;
        let end = start.saturating_add(len).min(self.len);
        let last = end.div_ceil(self.block).saturating_mul(self.block).min(self.len);
        (first, last.saturating_sub(first))
    }

    /// Checks `data`, the stored bytes at `at` (a block boundary), which
    /// are whole blocks or run to the end of the data.
    pub fn check(&self, at: u64, data: &[u8]) -> Result<(), Mismatch> {
        if !at.is_multiple_of(self.block) {
            return Err(Mismatch::Shape(self.len));
        }
        let first = at / self.block;
        for (index, chunk) in (first..).zip(data.chunks(usize::try_from(self.block).unwrap_or(usize::MAX))) {
            let off = index * self.block;
            let whole = chunk.len() as u64 == self.block || off + chunk.len() as u64 == self.len;
            let want = self.sums.get(usize::try_from(index).unwrap_or(usize::MAX));
            if !whole || want != Some(&crc(chunk)) {
                crate::damage::checksum_mismatch();
                tracing::error!(
                    object = %self.label,
                    block = index,
                    "stored bytes disagree with their checksum: the read fails"
                );
                return Err(Mismatch::Block(index));
            }
        }
        Ok(())
    }
}

/// Computes block sums as bytes are written, without copying them.
pub struct BlockHasher {
    sums: Vec<u8>,
    /// The block being filled, and how many of its bytes it has seen.
    digest: crc_fast::Digest,
    filled: u64,
}

impl Default for BlockHasher {
    fn default() -> Self {
        Self {
            sums: Vec::new(),
            digest: crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi),
            filled: 0,
        }
    }
}

impl std::fmt::Debug for BlockHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockHasher")
            .field("blocks", &(self.sums.len() / 4))
            .field("filled", &self.filled)
            .finish()
    }
}

impl BlockHasher {
    /// Hashes the next stored bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = usize::try_from(BLOCK - self.filled).unwrap_or(usize::MAX);
            let take = room.min(data.len());
            if take == room && self.filled == 0 {
                // A whole block in one piece: one call.
                self.push(crc(&data[..take]));
            } else {
                self.digest.update(&data[..take]);
                self.filled += take as u64;
                if self.filled == BLOCK {
                    let sum = self.digest.finalize_reset();
                    self.push(u32::try_from(sum).unwrap_or(0));
                }
            }
            data = &data[take..];
        }
    }

    fn push(&mut self, sum: u32) {
        self.sums.extend_from_slice(&sum.to_le_bytes());
        self.filled = 0;
    }

    /// The sums of everything hashed.
    pub fn finish(&mut self) -> BlockSums {
        if self.filled > 0 {
            let sum = self.digest.finalize_reset();
            self.push(u32::try_from(sum).unwrap_or(0));
        }
        BlockSums {
            block: BLOCK,
            crc32c: base64_simd::STANDARD.encode_to_string(&self.sums),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn sums_of_any_split_agree_and_check() {
        let d = data(3 * BLOCK as usize + 1234);
        let mut one = BlockHasher::default();
        one.update(&d);
        let mut split = BlockHasher::default();
        for c in d.chunks(77_777) {
            split.update(c);
        }
        let sums = one.finish();
        assert_eq!(sums, split.finish());
        let c = sums.checker(d.len() as u64).expect("a checker");
        c.check(0, &d).expect("the bytes as written");
        c.check(2 * BLOCK, &d[2 * BLOCK as usize..])
            .expect("the last blocks");
    }

    #[test]
    fn a_flipped_byte_names_its_block() {
        let mut d = data(2 * BLOCK as usize + 10);
        let mut h = BlockHasher::default();
        h.update(&d);
        let c = h.finish().checker(d.len() as u64).expect("a checker");
        d[BLOCK as usize + 5] ^= 1;
        assert_eq!(c.check(0, &d), Err(Mismatch::Block(1)));
        c.check(0, &d[..BLOCK as usize]).expect("block 0 is untouched");
        assert_eq!(c.check(BLOCK, &d[BLOCK as usize..]), Err(Mismatch::Block(1)));
    }

    #[test]
    fn a_short_block_that_does_not_end_the_data_is_refused() {
        let d = data(2 * BLOCK as usize);
        let mut h = BlockHasher::default();
        h.update(&d);
        let c = h.finish().checker(d.len() as u64).expect("a checker");
        assert!(c.check(0, &d[..100]).is_err());
        assert!(c.check(5, &d[5..]).is_err());
    }

    #[test]
    fn covering_rounds_out_to_blocks_and_the_end() {
        let c = BlockSums {
            block: BLOCK,
            crc32c: base64_simd::STANDARD.encode_to_string([0u8; 12]),
        }
        .checker(2 * BLOCK + 10)
        .expect("a checker");
        assert_eq!(c.covering(0, 1), (0, BLOCK));
        assert_eq!(c.covering(BLOCK + 3, 10), (BLOCK, BLOCK));
        assert_eq!(c.covering(BLOCK - 1, 2), (0, 2 * BLOCK));
        assert_eq!(c.covering(2 * BLOCK + 1, 5), (2 * BLOCK, 10));
        assert_eq!(c.covering(0, 2 * BLOCK + 10), (0, 2 * BLOCK + 10));
    }

    #[test]
    fn sums_that_do_not_fit_the_length_are_refused() {
        let mut h = BlockHasher::default();
        h.update(&data(1000));
        let s = h.finish();
        assert!(s.checker(1000).is_ok());
        assert!(s.checker(BLOCK + 1).is_err());
        let bad = BlockSums {
            block: BLOCK,
            crc32c: "not base64!".into(),
        };
        assert!(bad.checker(10).is_err());
    }
}
