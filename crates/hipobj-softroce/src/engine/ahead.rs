//! Packets taken ahead of the PSN a QP waits for.
//!
//! RC asks a responder to execute messages in order, and a requester to see
//! a READ's responses in order, but where each packet's bytes go is known
//! from its PSN alone once the message has begun: a WRITE's middle packet
//! lands at the message's address plus its distance from the First packet,
//! a READ response at its distance from the request's first PSN. So a
//! packet that arrives after a loss can be placed at once and remembered;
//! when the missing one comes, the PSN the QP waits for moves past
//! everything remembered in one step, and nothing behind the loss has to
//! cross the link again. [`Ahead`] is that memory: which PSNs past the
//! expected one have been placed.

use std::collections::VecDeque;

/// The most PSNs past the expected one that are remembered: 16 MiB of
/// 4096-byte packets, far more than any window this NIC keeps in flight.
pub(crate) const AHEAD_MAX: u32 = 4096;

/// PSNs placed ahead of the expected one, as offsets from it (offset 1 is
/// the PSN after the expected one; offset 0, the expected PSN itself, is
/// never held).
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// `bits[i]` holds offset `i + 1`.
    bits: VecDeque<bool>,
    held: u32,
}

impl Ahead {
    /// Forgets everything (the message or the QP ended).
    pub(super) fn clear(&mut self) {
        self.bits.clear();
        self.held = 0;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// How many offsets are held.
    pub(super) fn held(&self) -> u32 {
        self.held
    }

    /// Whether offset `off` is held.
    pub(super) fn has(&self, off: u32) -> bool {
        off >= 1 && self.bits.get(off as usize - 1).copied().unwrap_or(false)
    }

    /// Holds offset `off`; false if it is 0, beyond [`AHEAD_MAX`] or held
    /// already.
    pub(super) fn hold(&mut self, off: u32) -> bool {
        if off == 0 || off > AHEAD_MAX || self.has(off) {
            return false;
        }
        let i = off as usize - 1;
        if self.bits.len() <= i {
            self.bits.resize(i + 1, false);
        }
        self.bits[i] = true;
        self.held += 1;
        true
    }

    /// The expected PSN moved `n` forward: offsets shift down by `n`, and
    /// offsets up to `n` are forgotten (the caller moves past held offsets
    /// only together with the packet before them, see [`Ahead::run`], so
    /// the new expected PSN is never one held). Returns how many held
    /// offsets were passed.
    pub(super) fn shift(&mut self, n: u32) -> u32 {
        let n = n as usize;
        if n == 0 {
            return 0;
        }
        if n > self.bits.len() {
            let gone = self.held;
            self.clear();
            return gone;
        }
        let gone = self.bits.drain(..n).filter(|&b| b).count() as u32;
        self.held -= gone;
        if self.held == 0 {
            self.bits.clear();
        }
        gone
    }

    /// Held offsets in a row from 1: how far the expected PSN moves past
    /// them once it is itself received.
    pub(super) fn run(&self) -> u32 {
        self.bits.iter().take_while(|&&b| b).count() as u32
    }

    /// The missing offsets in a row from 0 (at least 1: offset 0 is never
    /// held).
    pub(super) fn first_hole(&self) -> u32 {
        1 + self.bits.iter().take_while(|&&b| !b).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_shifts_and_runs() {
        let mut a = Ahead::default();
        assert!(a.is_empty());
        assert_eq!(a.first_hole(), 1);
        assert!(!a.hold(0));
        assert!(a.hold(2));
        assert!(a.hold(3));
        assert!(!a.hold(3));
        assert!(a.hold(6));
        assert!(!a.hold(AHEAD_MAX + 1));
        assert!(a.has(2) && a.has(3) && a.has(6) && !a.has(1) && !a.has(4));
        // Offsets 0, 1, 4 and 5 are missing: the first gap is 0 and 1.
        assert_eq!(a.run(), 0);
        assert_eq!(a.first_hole(), 2);
        // The expected PSN arrives: it moves by one, to old offset 1.
        a.shift(1);
        assert!(a.has(1) && a.has(2) && a.has(5) && !a.has(3));
        assert_eq!(a.run(), 2);
        assert_eq!(a.first_hole(), 1);
        // Old offset 1 arrives: the expected PSN moves past it and the run
        // of two held after it.
        let run = a.run();
        a.shift(1 + run);
        assert_eq!(a.run(), 0);
        assert!(a.has(2) && !a.has(1));
        assert_eq!(a.first_hole(), 2);
        assert_eq!(a.shift(3), 1);
        assert!(a.is_empty());
        assert!(a.hold(1));
        a.shift(100);
        assert!(a.is_empty());
    }
}
