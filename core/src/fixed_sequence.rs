//! A fixed pseudo-random sequence for core's unit tests: the same steps on every run,
//! without a dependency (core has no dev-dependencies). Tests that need many varied
//! cases (a churn of cache mutations, lists of scores) draw them from here.

/// A linear congruential generator (Knuth's MMIX constants), read from its high bits.
pub struct FixedSequence(u64);

impl FixedSequence {
    pub fn new(seed: u64) -> Self {
        FixedSequence(seed)
    }

    /// The next number below `bound` (which must be above 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}
