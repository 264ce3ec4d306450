//! The limits of SPEC.md §1.3 and §1.4, each written once: the profiles' maxima, the
//! integer-literal rule, the per-request token limit and the overflow bound.
//!
//! Trace validation and the Mooncake import both enforce these, in their own words
//! (a JSON path or an input line), so the rules live here and each reader only phrases
//! the error. Nothing here reads a trace: every check takes the figures it bounds.

/// How many error lines are kept and printed before the rest are only counted.
pub const ERROR_LINES_MAX: usize = 100;

/// The largest integer a trace or a receipt may carry: 2^53 - 1.
pub const JSON_INTEGER_MAX: u64 = (1 << 53) - 1;

/// The limits profile a trace declares (SPEC.md §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsProfile {
    Lab,
    Scale,
}

impl LimitsProfile {
    pub fn name(self) -> &'static str {
        match self {
            LimitsProfile::Lab => "lab",
            LimitsProfile::Scale => "scale",
        }
    }

    pub fn requests_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 64,
            LimitsProfile::Scale => 10_000_000,
        }
    }

    pub fn workers_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 8,
            LimitsProfile::Scale => 4_096,
        }
    }

    pub fn events_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 1_024,
            LimitsProfile::Scale => 20_000_000,
        }
    }

    pub fn tokens_per_request_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 8_192,
            LimitsProfile::Scale => 2_097_152,
        }
    }

    /// The request's `prompt_tokens + decode_tokens` when it is over this profile's
    /// per-request limit (so the caller can quote it), else `None`.
    pub fn tokens_over_limit(self, prompt_tokens: u64, decode_tokens: u64) -> Option<u128> {
        let tokens = u128::from(prompt_tokens) + u128::from(decode_tokens);
        (tokens > u128::from(self.tokens_per_request_max())).then_some(tokens)
    }
}

/// The integer-literal rule (SPEC.md §1.1): the value of a number literal from 0 to
/// 2^53 - 1, `None` for any other number. `serde_json` yields a `u64` only for literals
/// without fraction or exponent, so `5.0` and `1e3` are not integers here.
pub fn integer_literal(number: &serde_json::Number) -> Option<u64> {
    number.as_u64().filter(|&v| v <= JSON_INTEGER_MAX)
}

/// The figures the overflow bound of SPEC.md §1.4 is computed from, gathered while a
/// reader walks its input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostBound {
    /// The largest `queued_prefill` of any worker or load observation.
    pub queued_max: u128,
    /// The largest `active_decode` of any worker or load observation.
    pub active_max: u128,
    pub prompt_sum: u128,
    pub decode_sum: u128,
    pub prompt_max: u128,
}

impl CostBound {
    /// A load figure (initial or observed).
    pub fn add_load(&mut self, queued_prefill: u64, active_decode: u64) {
        self.queued_max = self.queued_max.max(u128::from(queued_prefill));
        self.active_max = self.active_max.max(u128::from(active_decode));
    }

    pub fn add_request(&mut self, prompt_tokens: u64, decode_tokens: u64) {
        self.prompt_sum += u128::from(prompt_tokens);
        self.decode_sum += u128::from(decode_tokens);
        self.prompt_max = self.prompt_max.max(u128::from(prompt_tokens));
    }

    /// Whether some figure could pass [`JSON_INTEGER_MAX`] under these policy weights.
    /// Products of two 53-bit figures fit in 128 bits, but the imbalance term multiplies
    /// a third factor in, so the bound saturates: a saturated bound is over the limit
    /// either way.
    pub fn exceeds_integer_max(
        &self,
        decode_weight_milli: u64,
        imbalance_penalty_milli: u64,
    ) -> bool {
        let work_bound = (1000 * (self.queued_max + self.prompt_sum)).saturating_add(
            u128::from(decode_weight_milli).saturating_mul(self.active_max + self.decode_sum),
        );
        let imbalance_bound = u128::from(imbalance_penalty_milli).saturating_mul(work_bound) / 1000;
        let cost_bound = (1000 * self.prompt_max)
            .saturating_add(work_bound)
            .saturating_add(imbalance_bound);
        cost_bound > u128::from(JSON_INTEGER_MAX)
    }
}
