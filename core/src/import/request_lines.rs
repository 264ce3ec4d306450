//! What the formats of one request a line share (Mooncake, §10, and Qwen-Bailian,
//! §18), and Weka's sessions (§19) with them where a rule is the same: the fleet of
//! identical idle workers they create, the checks of a line's
//! numbers and block ids, the coverage of a prompt by its blocks, the limits of the
//! whole input and the refusal of an empty file. Each rule is written here once, so
//! the two formats cannot drift apart on a rule they share; what differs (the members
//! of a line, how a block is keyed) stays in each format's own file.

use crate::import::importer::{sources_as, ImportError, Importer, Problem, Source};
use crate::import::shared::{DEFAULT_DECODE_RATE, DEFAULT_PREFILL_RATE};
use crate::input::json::{quote_str, MemberName, Node};
use crate::input::limits::{CostBound, LimitsProfile, JSON_INTEGER_MAX};
use crate::input::trace::{fleet_worker_id, PolicyParams, Trace, WorkerSpec};
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

/// The limits profile every such import declares: real traces exceed the lab limits.
pub(crate) const PROFILE: LimitsProfile = LimitsProfile::Scale;

/// The imported trace without its events: the `scale` profile, `policy`, no sharing
/// and `workers` identical idle workers of `model` (SPEC.md §10.1).
pub(crate) fn fleet_head(workers: u32, model: &Arc<str>, policy: PolicyParams) -> Trace {
    let workers = (0..workers)
        .map(|index| {
            WorkerSpec::idle(
                fleet_worker_id(index, workers).into(),
                Arc::clone(model),
                Vec::new(),
                DEFAULT_PREFILL_RATE,
                DEFAULT_DECODE_RATE,
            )
        })
        .collect();
    Trace {
        limits: PROFILE,
        policy,
        sharing: Vec::new(),
        workers,
        events: Vec::new(),
    }
}

/// The problems of the options every such format takes (SPEC.md §10.2, no line).
pub(crate) fn fleet_option_reasons(
    block_tokens: u64,
    workers: u32,
    tenant: &str,
    model: &str,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if block_tokens == 0 {
        reasons.push("block_tokens: expected a positive integer, found 0".to_owned());
    }
    let workers_max = PROFILE.workers_max();
    if workers == 0 || u64::from(workers) > workers_max {
        reasons.push(format!(
            "workers: expected 1 to {workers_max} (the {} limit), found {workers}",
            PROFILE.name(),
        ));
    }
    if tenant.is_empty() {
        reasons.push("tenant: expected a non-empty string".to_owned());
    }
    if model.is_empty() {
        reasons.push("model: expected a non-empty string".to_owned());
    }
    reasons
}

/// Pushes `unknown field` for each member not in `fields` and `repeated field` for
/// each listed member given again, in document order.
pub(crate) fn unknown_and_repeated(
    members: &[(MemberName, Node)],
    fields: &[&str],
    reasons: &mut Vec<String>,
) {
    let mut seen = Vec::with_capacity(fields.len());
    for (name, _) in members {
        if !fields.contains(&&**name) {
            reasons.push(format!("unknown field {}", quote_str(name)));
        } else if seen.contains(&name) {
            reasons.push(format!("repeated field {}", quote_str(name)));
        } else {
            seen.push(name);
        }
    }
}

/// The tokens of each of `ids` blocks of a prompt the ids cover (checked by
/// [`request_checks`]): `block_tokens` each, the last the remainder.
pub(crate) fn block_tokens_each(
    prompt_tokens: u64,
    block_tokens: u64,
    ids: usize,
) -> impl Iterator<Item = u64> {
    let mut remaining_tokens = prompt_tokens;
    (0..ids).map(move |_| {
        let tokens = remaining_tokens.min(block_tokens);
        remaining_tokens -= tokens;
        tokens
    })
}

/// The one input of `importer`, refused when it is empty: an empty file and a file of
/// one blank line are both no trace (SPEC.md §10.2).
pub(crate) fn non_empty<'s>(
    importer: &dyn Importer,
    file: &Path,
    sources: Vec<Source<'s>>,
) -> Result<Source<'s>, ImportError> {
    let [mut lines] = sources_as(importer.command(), sources)?;
    match lines.fill_buf() {
        Ok([]) => {
            let reason = "no requests: the file is empty".to_owned();
            Err(ImportError::Rejected(vec![Problem::of_input(file, reason)]))
        }
        Ok(_) => Ok(lines),
        Err(e) => Err(importer.cannot_read(file, e)),
    }
}

/// A JSON integer literal from 0 to 2^53 - 1, as every trace integer must be.
pub(crate) fn integer(path: &str, node: &Node, reasons: &mut Vec<String>) -> Option<u64> {
    let value = node.integer();
    if value.is_none() {
        reasons.push(format!(
            "{path}: expected a non-negative integer, found {}",
            node.quoted()
        ));
    }
    value
}

/// `hash_ids`: an array of such integers, or `None` after a reason for each bad entry.
pub(crate) fn hash_ids(node: &Node, reasons: &mut Vec<String>) -> Option<Vec<u64>> {
    let Node::Array(items) = node else {
        reasons.push(format!(
            "hash_ids: expected an array, found {}",
            node.quoted()
        ));
        return None;
    };
    let mut ids = Vec::with_capacity(items.len());
    let mut all_ok = true;
    for (i, item) in items.iter().enumerate() {
        match integer(&format!("hash_ids[{i}]"), item, reasons) {
            Some(id) => ids.push(id),
            None => all_ok = false,
        }
    }
    all_ok.then_some(ids)
}

/// Pushes a reason when the hash ids do not cover the prompt exactly (every block full
/// except the last, which holds 1 to `block_tokens` tokens) or the request is over the
/// per-request token limit; true when the request is good.
pub(crate) fn request_checks(
    prompt_tokens: u64,
    decode_tokens: u64,
    hash_ids: &[u64],
    block_tokens: u64,
    reasons: &mut Vec<String>,
) -> bool {
    let mut good = true;
    let ids = hash_ids.len() as u128;
    let full_blocks_tokens = u128::from(block_tokens) * ids.saturating_sub(1);
    let prompt = u128::from(prompt_tokens);
    let covered = if ids == 0 {
        prompt == 0
    } else {
        full_blocks_tokens < prompt && prompt <= full_blocks_tokens + u128::from(block_tokens)
    };
    if !covered {
        let ids_needed = prompt_tokens.div_ceil(block_tokens);
        let plural = if ids_needed == 1 { "" } else { "s" };
        reasons.push(format!(
            "hash_ids: input_length {prompt_tokens} at {block_tokens} tokens a block needs \
             {ids_needed} id{plural}, found {ids}"
        ));
        good = false;
    }
    if let Some(tokens) = PROFILE.tokens_over_limit(prompt_tokens, decode_tokens) {
        reasons.push(format!(
            "{tokens} tokens (input_length + output_length) exceed the {} limit of {}",
            PROFILE.name(),
            PROFILE.tokens_per_request_max()
        ));
        good = false;
    }
    good
}

/// Running figures for the whole-input limits.
#[derive(Default)]
pub(crate) struct Totals {
    /// Every line counts, good or bad: each would have been one request event.
    pub(crate) requests: u64,
    /// Workers start idle and there are no load events, so only requests add to it.
    pub(crate) bound: CostBound,
}

impl Totals {
    pub(crate) fn add(&mut self, prompt_tokens: u64, decode_tokens: u64) {
        self.bound.add_request(prompt_tokens, decode_tokens);
    }
}

/// The request-count limit and the overflow bound of SPEC.md §1.4 for the trace the
/// import would produce. Every event is a request, so the event limit (twice the request
/// limit) cannot be reached first.
/// `unit` names what a user would import fewer of (`lines`, `sessions`).
pub(crate) fn whole_input_reasons(
    requests: u64,
    bound: &CostBound,
    dynamo_block_tokens: Option<u64>,
    unit: &str,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if requests > PROFILE.requests_max() {
        reasons.push(format!(
            "{} requests exceed the {} limit of {}",
            requests,
            PROFILE.name(),
            PROFILE.requests_max()
        ));
    }
    let policy = PolicyParams::default();
    // The dynamo_default run's bound (§1.4) too, which is the larger of the two only
    // when the block is longer than the longest prompt.
    let dynamo_over = dynamo_block_tokens
        .is_some_and(|block_tokens| bound.dynamo_exceeds_integer_max(block_tokens));
    let (prompt_sum, decode_sum) = (bound.prompt_sum, bound.decode_sum);
    if bound.exceeds_integer_max(policy.decode_weight_milli, policy.imbalance_penalty_milli) {
        reasons.push(format!(
            "figures could overflow: {prompt_sum} prompt and {decode_sum} decode tokens in \
             all put the cost bound over {JSON_INTEGER_MAX}; import fewer {unit}"
        ));
    } else if let (true, Some(block_tokens)) = (dynamo_over, dynamo_block_tokens) {
        // The input fits; the block is what is too large (every decode is rounded up to
        // whole blocks), so name the block and the largest one this input allows.
        let block_tokens_max =
            (u128::from(JSON_INTEGER_MAX) / 1000).saturating_sub(prompt_sum + decode_sum);
        reasons.push(format!(
            "dynamo_block_tokens: {block_tokens} puts the dynamo_default cost bound over \
             {JSON_INTEGER_MAX} (1000 per token of {prompt_sum} prompt and {decode_sum} \
             decode tokens in all, plus one block); these {unit} allow at most \
             {block_tokens_max}"
        ));
    }
    reasons
}

/// [`whole_input_reasons`] for a file of request lines.
pub(crate) fn whole_input_errors(totals: &Totals, dynamo_block_tokens: Option<u64>) -> Vec<String> {
    whole_input_reasons(totals.requests, &totals.bound, dynamo_block_tokens, "lines")
}
