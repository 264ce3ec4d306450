//! The selector check (SPEC.md §12 "The selector", §4.8): on generated traces with
//! `policy.dynamo_block_tokens` set to a power of two (where Dynamo's floating-point
//! costs are exact), every decision of kvroute's `dynamo_default` run is put to Dynamo's
//! own `DefaultWorkerSelector`, and the set of workers at Dynamo's minimum cost must be
//! the set of eligible rows at the run's minimum `cost_milli`.
//!
//! The traces are `kvroute-harness`'s generated ones (ties, loads, ineligible workers,
//! tenants and partial blocks are common there). A second test puts SPEC.md §4.8's
//! integer cost, written out here from the SPEC, to the same question on the
//! `cache_plus_load` run's rows, so the restatement is checked against Dynamo even
//! where core has no `dynamo_default` run yet.

use kvroute_harness::generators::TraceRecipe;
use kvroute_peers::selector::{minimum_cost_workers, SelectorRow};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Powers of two only: Dynamo divides by the block size in f64, exactly for these.
const BLOCK_SIZES: [u64; 7] = [1, 2, 16, 64, 256, 512, 1024];
const SEEDS: u64 = 400;

/// Seed `seed`'s trace with `policy.dynamo_block_tokens = b`, and its requests' prompt
/// lengths by id.
fn trace_for(seed: u64, b: Option<u64>) -> (Vec<u8>, BTreeMap<String, u64>) {
    let mut trace = TraceRecipe::from_seed(seed).build();
    if let Some(b) = b {
        trace["policy"]["dynamo_block_tokens"] = json!(b);
    }
    let prompts = trace["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "request")
        .map(|e| {
            let id = e["id"].as_str().expect("request id").to_string();
            (id, e["prompt_tokens"].as_u64().expect("prompt_tokens"))
        })
        .collect();
    (serde_json::to_vec(&trace).unwrap(), prompts)
}

fn number(row: &Value, member: &str) -> u64 {
    row[member]
        .as_u64()
        .unwrap_or_else(|| panic!("row member {member} is not an integer: {row}"))
}

/// A decision's eligible rows as the selector takes them (a row's position is its
/// worker's index in byte order of ids: every worker yields one row, in that order).
fn eligible_rows(decision: &Value) -> Vec<(SelectorRow, u64)> {
    decision["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .enumerate()
        .filter(|(_, row)| row["eligible"] == true)
        .map(|(w, row)| {
            let selector_row = SelectorRow {
                worker: w as u32,
                reuse: number(row, "reuse"),
                queued_prefill: number(row, "queued_prefill"),
                active_decode: number(row, "active_decode"),
            };
            (selector_row, number(row, "cost_milli"))
        })
        .collect()
}

/// The workers among `rows` at the smallest cost, ascending.
fn minimum_set(rows: &[(SelectorRow, u64)]) -> Vec<u32> {
    let Some(min) = rows.iter().map(|&(_, cost)| cost).min() else {
        return Vec::new();
    };
    rows.iter()
        .filter(|&&(_, cost)| cost == min)
        .map(|(row, _)| row.worker)
        .collect()
}

fn run<'r>(receipt: &'r Value, policy: &str) -> Option<&'r Value> {
    receipt["runs"]
        .as_array()?
        .iter()
        .find(|run| run["policy"] == policy)
}

/// What the comparison saw, so a test that checked nothing cannot pass.
#[derive(Default, Debug)]
struct Seen {
    decisions: u64,
    ties: u64,
    single: u64,
}

impl Seen {
    fn note(&mut self, set: &[u32]) {
        self.decisions += 1;
        match set.len() {
            0 => {}
            1 => self.single += 1,
            _ => self.ties += 1,
        }
    }

    fn assert_meaningful(&self) {
        assert!(
            self.decisions > 2_000,
            "too few decisions compared: {self:?}"
        );
        assert!(self.ties > 100, "too few ties compared: {self:?}");
        assert!(
            self.single > 100,
            "too few unique minima compared: {self:?}"
        );
    }
}

#[test]
fn dynamos_minimum_cost_set_is_the_dynamo_default_runs_minimum_cost_rows() {
    let mut seen = Seen::default();
    for seed in 0..SEEDS {
        let b = BLOCK_SIZES[(seed % BLOCK_SIZES.len() as u64) as usize];
        let (trace, prompts) = trace_for(seed, Some(b));
        let receipt = kvroute_core::replay_bytes(&trace).unwrap_or_else(|e| {
            panic!(
                "no dynamo_default run: kvroute rejected seed {seed}'s trace with \
                 policy.dynamo_block_tokens = {b}: {}",
                e.errors.join("; ")
            )
        });
        let receipt: Value = serde_json::from_slice(&receipt).expect("receipt JSON");
        let run = run(&receipt, "dynamo_default").unwrap_or_else(|| {
            let policies: Vec<&Value> = receipt["runs"]
                .as_array()
                .map(|runs| runs.iter().map(|r| &r["policy"]).collect())
                .unwrap_or_default();
            panic!(
                "no dynamo_default run in seed {seed}'s receipt (policy.dynamo_block_tokens \
                 = {b}); its runs: {policies:?}"
            )
        });
        for decision in run["decisions"].as_array().expect("decisions") {
            let request = decision["request"].as_str().expect("request id");
            let rows = eligible_rows(decision);
            let kvroute = minimum_set(&rows);
            let selector_rows: Vec<SelectorRow> = rows.iter().map(|&(r, _)| r).collect();
            let dynamo = minimum_cost_workers(&selector_rows, prompts[request], b)
                .expect("a power-of-two block size");
            let context = format!(
                "seed {seed}, b = {b}, request {request}: Dynamo's minimum-cost workers \
                 {dynamo:?}, the dynamo_default run's {kvroute:?} (worker indexes in byte \
                 order of ids); decision {decision}"
            );
            assert_eq!(dynamo, kvroute, "{context}");
            // The run's own account of the same set (SPEC.md §5): its size is the tie
            // count and the chosen worker its smallest id.
            if let Some(&first) = kvroute.first() {
                assert_eq!(decision["tie_count"], json!(kvroute.len()), "{context}");
                let chosen = &decision["candidates"][first as usize]["worker"];
                assert_eq!(&decision["chosen"], chosen, "{context}");
            }
            seen.note(&dynamo);
        }
    }
    seen.assert_meaningful();
}

/// SPEC.md §4.8's `cost_milli`, from the SPEC: Dynamo's cost times `1000·b`.
fn spec_dynamo_cost_milli(row: &SelectorRow, prompt_tokens: u64, b: u64) -> u64 {
    let overlap_tokens = b * (row.reuse / b);
    let prefill_tokens = row.queued_prefill + prompt_tokens - overlap_tokens;
    let decode_blocks = row.active_decode.div_ceil(b);
    1000 * prefill_tokens + 1000 * b * decode_blocks
}

#[test]
fn spec_integer_cost_picks_dynamos_minimum_cost_set_on_generated_rows() {
    let mut seen = Seen::default();
    for seed in 0..SEEDS {
        let (trace, prompts) = trace_for(seed, None);
        let receipt = kvroute_core::replay_bytes(&trace).expect("a generated trace is valid");
        let receipt: Value = serde_json::from_slice(&receipt).expect("receipt JSON");
        let run = run(&receipt, "cache_plus_load").expect("a cache_plus_load run");
        for decision in run["decisions"].as_array().expect("decisions") {
            let request = decision["request"].as_str().expect("request id");
            let prompt_tokens = prompts[request];
            let selector_rows: Vec<SelectorRow> =
                eligible_rows(decision).iter().map(|&(r, _)| r).collect();
            for b in BLOCK_SIZES {
                let spec_rows: Vec<(SelectorRow, u64)> = selector_rows
                    .iter()
                    .map(|r| (*r, spec_dynamo_cost_milli(r, prompt_tokens, b)))
                    .collect();
                let spec = minimum_set(&spec_rows);
                let dynamo = minimum_cost_workers(&selector_rows, prompt_tokens, b)
                    .expect("a power-of-two block size");
                assert_eq!(
                    dynamo, spec,
                    "seed {seed}, b = {b}, request {request}, rows {selector_rows:?}, \
                     prompt {prompt_tokens}"
                );
                seen.note(&dynamo);
            }
        }
    }
    seen.assert_meaningful();
}
