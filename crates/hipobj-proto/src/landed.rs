//! The GET proof of the binding protocol (docs/protocol.md §2): every RDMA
//! WRITE of a GET is a WRITE WITH IMMEDIATE whose immediate value names its
//! place in the transfer, so the client can count what its own NIC saw
//! land, and refuse a gap, an overlap, a repeat or a shortfall.
//!
//! A transfer of `len` bytes is cut in *granules* of [`granule`]`(len)`
//! bytes, a power of two fixed by the length alone, so nothing is
//! negotiated. A WRITE starts on a granule boundary, and every WRITE but
//! the one that ends the transfer covers whole granules. Its immediate value
//! is the token's key XOR its first granule's index ([`imm`]), so a
//! transfer takes at most [`max_writes`]`(len)` WRITEs, at most
//! [`MAX_WRITES`]: the client keeps that many receives posted.
//!
//! [`Tally`] is the client's side: fed the receive completions in the order
//! the NIC reported them (an RC responder executes a QP's requests in PSN
//! order), it accepts only WRITEs that tile `[0, len)` exactly, each
//! starting where the previous one ended.

/// The fewest bytes a granule has.
pub const MIN_GRANULE: u64 = 4096;

/// The most WRITEs one transfer may take, whatever its length (up to 4 GiB):
/// the receives a client keeps posted for a GET.
pub const MAX_WRITES: u32 = 1024;

/// The granule of a transfer of `len` bytes: the smallest power of two of at
/// least [`MIN_GRANULE`] bytes that cuts `len` into at most [`MAX_WRITES`]
/// pieces.
pub const fn granule(len: u64) -> u64 {
    let per_write = len.div_ceil(MAX_WRITES as u64);
    if per_write <= MIN_GRANULE {
        MIN_GRANULE
    } else {
        per_write.next_power_of_two()
    }
}

/// How many WRITEs a transfer of `len` bytes may take at most: one per
/// granule, and one (empty) for a transfer of zero bytes.
pub const fn max_writes(len: u64) -> u32 {
    let n = len.div_ceil(granule(len));
    if n == 0 { 1 } else { n as u32 }
}

/// The immediate value of the WRITE that starts at byte `offset` of a
/// transfer of `len` bytes granted under `key`: `key` XOR the offset's
/// granule index. `offset` must be on a granule boundary.
pub const fn imm(key: u32, len: u64, offset: u64) -> u32 {
    key ^ ((offset / granule(len)) as u32)
}

/// Why the completions do not prove a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A WRITE starts after the bytes proven so far end: the bytes between
    /// never landed.
    Gap {
        /// Bytes proven before it.
        proven: u64,
        /// Where it says it starts.
        starts: u64,
    },
    /// A WRITE starts before the bytes proven so far end: it repeats or
    /// overlaps bytes already counted (or its immediate names no place of
    /// this grant).
    Overlap {
        /// Bytes proven before it.
        proven: u64,
        /// Where it says it starts.
        starts: u64,
    },
    /// A WRITE of zero bytes in a transfer that is not empty.
    Empty {
        /// Bytes proven before it.
        proven: u64,
    },
    /// A WRITE runs past the transfer's end.
    Past {
        /// Where it starts.
        starts: u64,
        /// Its length.
        len: u64,
    },
    /// A WRITE came after the transfer was complete.
    Extra,
    /// Fewer bytes landed than the transfer asked for.
    Short {
        /// Bytes proven.
        proven: u64,
    },
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Gap { proven, starts } => write!(
                f,
                "a WRITE landed at byte {starts} while only bytes 0..{proven} had landed: the bytes between never did"
            ),
            Self::Overlap { proven, starts } => write!(
                f,
                "a WRITE landed at byte {starts}, inside the {proven} bytes already counted (a repeat, an overlap, or another grant's immediate)"
            ),
            Self::Empty { proven } => write!(
                f,
                "an empty WRITE WITH IMMEDIATE after {proven} bytes proves nothing"
            ),
            Self::Past { starts, len } => write!(
                f,
                "a WRITE of {len} bytes at byte {starts} runs past the transfer"
            ),
            Self::Extra => f.write_str("a WRITE WITH IMMEDIATE landed after the whole range had"),
            Self::Short { proven } => write!(f, "only {proven} bytes landed"),
        }
    }
}

/// The bytes of one GET proven so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    key: u32,
    len: u64,
    granule: u64,
    proven: u64,
    writes: u32,
}

impl Tally {
    /// A GET of `len` bytes granted under `key`, nothing proven yet.
    pub const fn new(key: u32, len: u64) -> Self {
        Self {
            key,
            len,
            granule: granule(len),
            proven: 0,
            writes: 0,
        }
    }

    /// Counts one WRITE WITH IMMEDIATE's receive completion: its immediate
    /// value and the byte count its NIC reported (`byte_len`).
    pub fn add(&mut self, imm: u32, byte_len: u32) -> Result<(), Refusal> {
        let len = u64::from(byte_len);
        let done = self.writes > 0 && self.proven == self.len;
        if done {
            return Err(Refusal::Extra);
        }
        let starts = u64::from(imm ^ self.key) * self.granule;
        if starts > self.proven {
            return Err(Refusal::Gap {
                proven: self.proven,
                starts,
            });
        }
        if starts < self.proven {
            return Err(Refusal::Overlap {
                proven: self.proven,
                starts,
            });
        }
        if len == 0 && self.len != 0 {
            return Err(Refusal::Empty { proven: self.proven });
        }
        if starts + len > self.len {
            return Err(Refusal::Past { starts, len });
        }
        self.proven += len;
        self.writes += 1;
        Ok(())
    }

    /// Bytes proven so far.
    pub const fn proven(&self) -> u64 {
        self.proven
    }

    /// Whether the range is tiled exactly.
    pub const fn complete(&self) -> bool {
        self.writes > 0 && self.proven == self.len
    }

    /// `Ok` when the range is tiled exactly, else why not.
    pub const fn finish(&self) -> Result<(), Refusal> {
        if self.complete() {
            Ok(())
        } else {
            Err(Refusal::Short { proven: self.proven })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn granules_bound_the_writes() {
        assert_eq!(granule(0), MIN_GRANULE);
        assert_eq!(granule(4096), 4096);
        assert_eq!(granule(4 << 20), 4096);
        assert_eq!(granule((4 << 20) + 1), 8192);
        assert_eq!(granule(4 << 30), 4 << 20);
        for len in [
            0u64,
            1,
            4095,
            4096,
            4097,
            4 << 20,
            (4 << 20) + 1,
            1 << 30,
            4 << 30,
        ] {
            assert!(max_writes(len) <= MAX_WRITES, "{len}");
            assert!(granule(len).is_power_of_two());
        }
        assert_eq!(max_writes(0), 1);
        assert_eq!(max_writes(1), 1);
        assert_eq!(max_writes(64 << 10), 16);
    }

    #[test]
    fn a_tally_takes_an_exact_tiling_only() {
        let key = 0xabcd_ef12;
        let len = 3 * 4096 + 100;
        let ok = [(0, 8192), (8192, 4096), (12288, 100)];
        let mut t = Tally::new(key, len);
        for (off, n) in ok {
            t.add(imm(key, len, off), n).unwrap();
        }
        assert!(t.complete());
        assert_eq!(t.add(imm(key, len, 0), 1), Err(Refusal::Extra));

        let mut t = Tally::new(key, len);
        t.add(imm(key, len, 0), 4096).unwrap();
        assert!(matches!(
            t.add(imm(key, len, 8192), 4096),
            Err(Refusal::Gap { .. })
        ));
        assert!(matches!(
            t.add(imm(key, len, 0), 4096),
            Err(Refusal::Overlap { .. })
        ));
        assert!(matches!(
            t.add(imm(key, len, 4096), 0),
            Err(Refusal::Empty { .. })
        ));
        assert!(matches!(
            t.add(imm(key, len, 4096), 9000),
            Err(Refusal::Past { .. })
        ));
        assert_eq!(t.finish(), Err(Refusal::Short { proven: 4096 }));
        // A zero-length write with the key alone proves nothing.
        let mut t = Tally::new(key, len);
        assert!(t.add(key, 0).is_err());
        // Another grant's immediate names no place of this one.
        let mut t = Tally::new(key, len);
        assert!(t.add(imm(key ^ 0x100, len, 0), 4096).is_err());
        // An empty transfer is one empty write.
        let mut t = Tally::new(key, 0);
        assert_eq!(t.finish(), Err(Refusal::Short { proven: 0 }));
        t.add(imm(key, 0, 0), 0).unwrap();
        t.finish().unwrap();
    }
}
