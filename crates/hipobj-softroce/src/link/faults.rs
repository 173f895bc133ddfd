//! A fault injector: middleware that drops, duplicates and delays packets.
//!
//! It decides the fate of each packet from its own seeded xorshift generator,
//! so a run with a given seed is repeatable. The in-memory link turns
//! [`Fate::Delay`] into extra latency; the UDP worker holds the packet back
//! until after the next batch. Either way later packets overtake it, which is
//! what reordering means.

/// Fractions of packets to disturb, and the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Fraction of packets dropped (0.0..=1.0).
    pub loss: f64,
    /// Fraction of packets sent twice.
    pub dup: f64,
    /// Fraction of packets delayed so that later ones overtake them.
    pub reorder: f64,
    /// Seed of the generator (0 picks a fixed default).
    pub seed: u64,
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig = FaultConfig {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        seed: 0,
    };

    /// Drops `loss` of the packets.
    pub fn loss(loss: f64, seed: u64) -> Self {
        Self {
            loss,
            seed,
            ..Self::NONE
        }
    }

    /// Whether any fault is enabled.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0
    }
}

/// What happens to one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered once, in order.
    Deliver,
    /// Never delivered.
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Delivered after later packets.
    Delay,
}

/// Counts of what the injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Packets dropped.
    pub dropped: u64,
    /// Packets duplicated.
    pub duplicated: u64,
    /// Packets delayed.
    pub delayed: u64,
}

/// The injector.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    config: FaultConfig,
    state: u64,
    counts: FaultCounts,
}

impl FaultInjector {
    /// An injector with these fractions.
    pub fn new(config: FaultConfig) -> Self {
        let state = if config.seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            config.seed
        };
        Self {
            config,
            state,
            counts: FaultCounts::default(),
        }
    }

    /// The next number in [0, 1).
    fn next_unit(&mut self) -> f64 {
        // xorshift64*
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Decides the fate of the next packet.
    pub fn fate(&mut self) -> Fate {
        if !self.config.is_active() {
            return Fate::Deliver;
        }
        let u = self.next_unit();
        let c = &self.config;
        if u < c.loss {
            self.counts.dropped += 1;
            Fate::Drop
        } else if u < c.loss + c.dup {
            self.counts.duplicated += 1;
            Fate::Duplicate
        } else if u < c.loss + c.dup + c.reorder {
            self.counts.delayed += 1;
            Fate::Delay
        } else {
            Fate::Deliver
        }
    }

    /// What it has done so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_roughly_kept_and_repeatable() {
        let cfg = FaultConfig {
            loss: 0.1,
            dup: 0.05,
            reorder: 0.05,
            seed: 42,
        };
        let mut a = FaultInjector::new(cfg);
        let mut b = FaultInjector::new(cfg);
        let fates: Vec<Fate> = (0..100_000).map(|_| a.fate()).collect();
        assert!(fates.iter().zip((0..).map(|_| b.fate())).all(|(x, y)| *x == y));
        let c = a.counts();
        assert!((9_000..11_000).contains(&c.dropped), "{c:?}");
        assert!((4_000..6_000).contains(&c.duplicated), "{c:?}");
        assert!((4_000..6_000).contains(&c.delayed), "{c:?}");
        let mut none = FaultInjector::new(FaultConfig::NONE);
        assert!((0..1000).all(|_| none.fate() == Fate::Deliver));
    }
}
