//! The GET proof of the binding protocol (docs/protocol.md §2): a GET's
//! bytes arrive as exactly one RDMA WRITE WITH IMMEDIATE, of the whole
//! range, whose immediate value is the token's key. The receive completion
//! at the client reports the bytes that WRITE placed (`byte_len`, its
//! NIC's own count); the window the token names admits only the range, so
//! a WRITE of the range's length can only have covered all of it, during
//! this call.
//!
//! Why one WRITE: a completion names no address. With several WRITEs the
//! client knows how many bytes each placed but not where, so a server could
//! write one place many times and claim every place, and the rest of the
//! buffer would keep what it held before (another object, another tenant's
//! data) while the counts added up. Nothing a server sends can name a place
//! the client can check: the immediate value is the server's word, and the
//! receive completion of a WRITE WITH IMMEDIATE carries neither the key nor
//! the address the WRITE used (so windows per piece would not tell the
//! pieces apart either). Only a WRITE as long as its window pins it.
//!
//! [`Tally`] is the client's side: fed the receive completions in the order
//! the NIC reported them, it accepts exactly one, carrying the key and
//! counting the whole range.

/// The most bytes one GET may move: one RDMA message's limit (IBA's 2^31
/// bytes, the largest `max_msg_sz` a device reports).
pub const MAX_LEN: u64 = 1 << 31;

/// The immediate value of a GET's WRITE granted under `key`.
pub const fn imm(key: u32) -> u32 {
    key
}

/// Why the completions do not prove a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The immediate value is not this grant's key (another grant's, or
    /// one the old rule gave a piece).
    NotThisGrant,
    /// A WRITE of fewer bytes than the range: the rest of the range was not
    /// written by it, and no other WRITE can prove where it landed.
    Piece {
        /// The bytes it placed.
        landed: u64,
        /// The range's length.
        len: u64,
    },
    /// A WRITE longer than the range (a NIC that honours the window
    /// cannot report one).
    Past {
        /// The bytes it placed.
        landed: u64,
        /// The range's length.
        len: u64,
    },
    /// A second WRITE WITH IMMEDIATE.
    Extra,
    /// No WRITE WITH IMMEDIATE landed.
    Missing,
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::NotThisGrant => {
                f.write_str("a WRITE WITH IMMEDIATE carried another grant's immediate value")
            }
            Self::Piece { landed, len } => write!(
                f,
                "a WRITE WITH IMMEDIATE placed {landed} of the {len} bytes: a GET is one WRITE of the whole range, and the bytes it did not cover may be stale"
            ),
            Self::Past { landed, len } => {
                write!(
                    f,
                    "a WRITE WITH IMMEDIATE placed {landed} bytes, more than the {len} of the range"
                )
            }
            Self::Extra => f.write_str("a second WRITE WITH IMMEDIATE landed: a GET is one WRITE"),
            Self::Missing => f.write_str("no WRITE WITH IMMEDIATE landed"),
        }
    }
}

/// What one GET's completions have proven so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    key: u32,
    len: u64,
    done: bool,
}

impl Tally {
    /// A GET of `len` bytes granted under `key`, nothing proven yet.
    pub const fn new(key: u32, len: u64) -> Self {
        Self {
            key,
            len,
            done: false,
        }
    }

    /// Counts one WRITE WITH IMMEDIATE's receive completion: its immediate
    /// value and the byte count its NIC reported (`byte_len`).
    pub fn add(&mut self, imm: u32, byte_len: u32) -> Result<(), Refusal> {
        if self.done {
            return Err(Refusal::Extra);
        }
        if imm != self.key {
            return Err(Refusal::NotThisGrant);
        }
        let landed = u64::from(byte_len);
        if landed < self.len {
            return Err(Refusal::Piece {
                landed,
                len: self.len,
            });
        }
        if landed > self.len {
            return Err(Refusal::Past {
                landed,
                len: self.len,
            });
        }
        self.done = true;
        Ok(())
    }

    /// Whether the range is proven.
    pub const fn complete(&self) -> bool {
        self.done
    }

    /// `Ok` when the range is proven, else why not.
    pub const fn finish(&self) -> Result<(), Refusal> {
        if self.done { Ok(()) } else { Err(Refusal::Missing) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_one_write_of_the_whole_range_with_the_key_proves_a_get() {
        let key = 0xabcd_ef12;
        let len = 3 * 4096 + 100;
        let mut t = Tally::new(key, len);
        assert_eq!(t.finish(), Err(Refusal::Missing));
        t.add(imm(key), len as u32).unwrap();
        assert!(t.complete());
        t.finish().unwrap();
        assert_eq!(t.add(imm(key), 1), Err(Refusal::Extra));

        // The pieces of the rule before this one, each counted right and
        // named by place, prove nothing: the first is refused.
        let mut t = Tally::new(key, len);
        assert_eq!(t.add(imm(key), 4096), Err(Refusal::Piece { landed: 4096, len }));
        let mut t = Tally::new(key, len);
        assert_eq!(t.add(key ^ 1, len as u32), Err(Refusal::NotThisGrant));
        let mut t = Tally::new(key, len);
        assert_eq!(
            t.add(key, len as u32 + 1),
            Err(Refusal::Past { landed: len + 1, len })
        );
        // The key alone on an empty WRITE moves nothing.
        let mut t = Tally::new(key, len);
        assert_eq!(t.add(key, 0), Err(Refusal::Piece { landed: 0, len }));
        // An empty transfer is one empty WRITE.
        let mut t = Tally::new(key, 0);
        t.add(imm(key), 0).unwrap();
        t.finish().unwrap();
    }

    #[test]
    fn the_largest_get_fits_a_byte_count() {
        assert!(u32::try_from(MAX_LEN).is_ok());
    }
}
