//! The limits of SPEC.md §1.3 and §1.4, each written once: the profiles' maxima
//! (counts, and the work limits that bound what a replay costs, §1.5), the per-request
//! token limit and the overflow bound. The integer-literal rule reads literal text, so
//! it lives with the text, in [`crate::input::json`].
//!
//! Trace validation and the Mooncake import both enforce these, in their own words
//! (a JSON path or an input line), so the rules live here and each reader only phrases
//! the error. Nothing here reads a trace: every check takes the figures it bounds.

/// How many error lines are kept and printed before the rest are only counted.
pub const ERROR_LINES_MAX: usize = 100;

/// The largest integer a trace or a receipt may carry: 2^53 - 1.
pub const JSON_INTEGER_MAX: u64 = (1 << 53) - 1;

/// The longest string (between its quotes, escapes as written) or number literal a
/// trace may hold, in bytes, whatever its profile (SPEC.md §1.1): a valid trace needs
/// nothing near it, and it bounds what a reader holds for a stream whose string never
/// closes. The same figure as the Mooncake line cap, so no imported line can hold a
/// longer value.
pub const VALUE_BYTES_MAX: usize = 64 * 1024 * 1024;

// The profile itself is a field of the trace (`crate::input::trace`, which imports
// nothing); its figures live here.
pub use crate::input::trace::LimitsProfile;

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

    /// Keys in one event: a request's `prefix`, a store's `segments`, an evict's `keys`.
    /// `scale` equals its tokens per request, which every Mooncake import (segments of
    /// at least 1 token) stays within.
    pub fn keys_per_event_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 32,
            LimitsProfile::Scale => 2_097_152,
        }
    }

    /// A worker's `cache` array, and its resident entries at any point of the replay:
    /// what a request's walk can visit on that worker under one key.
    pub fn cache_entries_per_worker_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 256,
            LimitsProfile::Scale => 1_048_576,
        }
    }

    pub fn sharing_grants_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 8,
            LimitsProfile::Scale => 4_096,
        }
    }

    pub fn tenants_per_grant_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 8,
            LimitsProfile::Scale => 4_096,
        }
    }

    pub fn adapters_per_worker_max(self) -> u64 {
        match self {
            LimitsProfile::Lab => 8,
            LimitsProfile::Scale => 4_096,
        }
    }

    /// SPEC.md §1.5: the most entry operations one policy's replay of a valid trace of
    /// this profile can do, `W·C + E·max(K, C) + R·(W + K·W·C)`, from the trace's own
    /// counts (each at most the profile's).
    pub fn work_bound(self, workers: u64, events: u64, requests: u64) -> u128 {
        let (w, e, r) = (workers as u128, events as u128, requests as u128);
        let k = self.keys_per_event_max() as u128;
        let c = self.cache_entries_per_worker_max() as u128;
        w * c + e * k.max(c) + r * (w + k * w * c)
    }

    /// The request's `prompt_tokens + decode_tokens` when it is over this profile's
    /// per-request limit (so the caller can quote it), else `None`.
    pub fn tokens_over_limit(self, prompt_tokens: u64, decode_tokens: u64) -> Option<u128> {
        let tokens = u128::from(prompt_tokens) + u128::from(decode_tokens);
        (tokens > u128::from(self.tokens_per_request_max())).then_some(tokens)
    }
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

    /// Whether a `dynamo_default` cost (SPEC.md §4.8) or margin could pass
    /// [`JSON_INTEGER_MAX`] with blocks of `block_tokens`: `1000·Q + 1000·(A + b)`, since
    /// a row's prefill tokens are at most `Q` and its decode blocks hold fewer than
    /// `A + b` tokens.
    pub fn dynamo_exceeds_integer_max(&self, block_tokens: u64) -> bool {
        let queued_bound = self.queued_max + self.prompt_sum;
        let decode_bound = self.active_max + self.decode_sum + u128::from(block_tokens);
        let dynamo_bound = (1000 * queued_bound).saturating_add(1000 * decode_bound);
        dynamo_bound > u128::from(JSON_INTEGER_MAX)
    }
}
