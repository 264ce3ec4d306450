//! NVIDIA Dynamo's default worker selector (`DefaultWorkerSelector` of
//! `dynamo-kv-router` 1.6.1, compiled under its `bench` feature) asked which workers it
//! finds cheapest, for the check of SPEC.md §12 "The selector" against the
//! `dynamo_default` run (§4.8).
//!
//! The selector returns one worker, breaks an exact tie at random and reports neither
//! its costs nor its ties, so what can be compared exactly with kvroute (which breaks a
//! tie by worker id) is the *set* of workers at Dynamo's minimum cost.
//! [`minimum_cost_workers`] gets that set from Dynamo's own answers, with no cost
//! formula of ours in between:
//! 1. asked over every row, Dynamo picks some `w*` at its minimum cost;
//! 2. asked over just `{w*, x}`, for every other row `x`, under two seeds whose
//!    tie-breaking draws are known to go opposite ways (found once on a constructed
//!    tie, [`tie_break_seeds`]): between two workers the pick depends on the seed only
//!    when their costs are equal, so the two answers differ exactly when `x` ties `w*`
//!    (and both answers `x` would mean `x` is cheaper than Dynamo's own minimum: a
//!    panic, not a silent result).
//!
//! Asking over a pair leaves each worker's cost as it is over the whole fleet: in the
//! default configuration the only term that reads other workers, the decay of the
//! overlap credit by the least-loaded worker's prefill backlog, is off
//! (`overlap_score_credit_decay` 0).

use dynamo_kv_router::protocols::{
    RoutingConstraints, WorkerConfigLike, WorkerId, WorkerWithDpRank,
};
use dynamo_kv_router::scheduling::{OverlapSignals, ScheduleMode};
use dynamo_kv_router::{
    DefaultWorkerSelector, KvRouterConfig, SchedulingRequest, WorkerLoadProjection,
    WorkerSelectionInput, WorkerSelector,
};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// The selector's worker type: Dynamo's own selection benchmark uses `"prefill"`; only
/// `"decode"` (without prefill tracking) changes the formula.
pub const WORKER_TYPE: &str = "prefill";

/// One eligible candidate row of a decision, in the figures SPEC.md §4.8 maps onto
/// Dynamo's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorRow {
    /// The worker's index in byte order of ids (Dynamo's `WorkerId`, `dp_rank` 0).
    pub worker: u32,
    pub reuse: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
}

/// A worker as Dynamo's selector needs to know it: one data-parallel rank, no taints,
/// no limits.
#[derive(Debug, Default)]
pub struct FleetWorker {
    taints: HashSet<String>,
}

impl WorkerConfigLike for FleetWorker {
    fn data_parallel_start_rank(&self) -> u32 {
        0
    }

    fn data_parallel_size(&self) -> u32 {
        1
    }

    fn max_num_batched_tokens(&self) -> Option<u64> {
        None
    }

    fn total_kv_blocks(&self) -> Option<u64> {
        None
    }

    fn taints(&self) -> &HashSet<String> {
        &self.taints
    }
}

/// Dynamo's default configuration at router temperature 0 (its default too, spelled
/// out because the check depends on it).
pub fn selector_config() -> KvRouterConfig {
    KvRouterConfig {
        router_temperature: 0.0,
        ..Default::default()
    }
}

/// A query-only scheduling request for `isl_tokens` prompt tokens with no overlap and
/// no loads yet, prefill tokens tracked (Dynamo's aggregated default), everything else
/// off.
pub fn scheduling_request(isl_tokens: usize) -> SchedulingRequest {
    SchedulingRequest {
        mode: ScheduleMode::QueryOnly { request_id: None },
        token_seq: None,
        isl_tokens,
        lora_name: None,
        expected_output_tokens: None,
        affinity_target: None,
        pinned_worker: None,
        allowed_worker_ids: None,
        routing_constraints: RoutingConstraints::default(),
        router_config_override: None,
        track_prefill_tokens: true,
        priority_jump: 0.0,
        strict_priority: 0,
        policy_class: None,
        session_context: None,
        overlap: OverlapSignals::default(),
        kv_transfer_candidates: None,
        retain_kv_transfer_chain: false,
        shared_cache_hits: None,
        worker_loads: FxHashMap::default(),
        resp_tx: None,
    }
}

/// Dynamo's worker for index `w`.
pub fn dynamo_worker(w: u32) -> WorkerWithDpRank {
    WorkerWithDpRank::from_worker_id(w as WorkerId)
}

/// Dynamo's load projection of a worker with `queued_prefill` prefill tokens waiting and
/// `active_decode` decode tokens outstanding (SPEC.md §4.8: `active_decode_blocks` is
/// `ceil(active_decode / b)`; the request's own new blocks, the same for every worker
/// without active sequences, are left out as kvroute leaves them out).
pub fn load_projection(queued_prefill: u64, active_decode: u64, b: u64) -> WorkerLoadProjection {
    WorkerLoadProjection {
        active_prefill_tokens: queued_prefill as usize,
        active_decode_blocks: active_decode.div_ceil(b) as usize,
        ..Default::default()
    }
}

fn block_size(block_tokens: u64) -> Result<u32, String> {
    match u32::try_from(block_tokens) {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(format!(
            "block size {block_tokens}: Dynamo's block size is a u32 of at least 1"
        )),
    }
}

/// Dynamo's pick among `workers` for `request`, with a selector seeded by `seed` (so a
/// tie is broken by the seed's first draw).
fn pick(
    workers: &HashMap<WorkerId, FleetWorker>,
    request: &SchedulingRequest,
    b: u32,
    seed: u64,
) -> WorkerId {
    let selector = DefaultWorkerSelector::new_seeded(Some(selector_config()), WORKER_TYPE, seed);
    let result = selector
        .select_worker(WorkerSelectionInput::configured(
            workers,
            request,
            request.eligibility(),
            b,
        ))
        .unwrap_or_else(|e| panic!("Dynamo's selector refused a non-empty fleet: {e:?}"));
    result.worker.worker_id
}

/// Two seeds whose first tie-breaking draws go opposite ways: on an exact tie between
/// two workers the first picks the lower id and the second the higher. Found once by
/// asking Dynamo about two identical workers.
pub fn tie_break_seeds() -> (u64, u64) {
    static SEEDS: OnceLock<(u64, u64)> = OnceLock::new();
    *SEEDS.get_or_init(|| {
        let workers: HashMap<WorkerId, FleetWorker> =
            [(0, FleetWorker::default()), (1, FleetWorker::default())].into();
        let request = scheduling_request(64);
        let (mut lower, mut higher) = (None, None);
        for seed in 0..1024 {
            match pick(&workers, &request, 16, seed) {
                0 => lower = lower.or(Some(seed)),
                _ => higher = higher.or(Some(seed)),
            }
            if let (Some(lower), Some(higher)) = (lower, higher) {
                return (lower, higher);
            }
        }
        panic!("Dynamo's selector broke a tie the same way under 1,024 seeds");
    })
}

/// The workers at Dynamo's minimum cost among `rows` (a decision's eligible rows) for a
/// prompt of `prompt_tokens` tokens in blocks of `block_tokens`, in ascending order;
/// empty when `rows` is. Dynamo is given, per SPEC.md §12, `overlap_blocks =
/// floor(reuse / b)`, `active_prefill_tokens = queued_prefill`, `active_decode_blocks =
/// ceil(active_decode / b)` and `isl_tokens = prompt_tokens`.
pub fn minimum_cost_workers(
    rows: &[SelectorRow],
    prompt_tokens: u64,
    block_tokens: u64,
) -> Result<Vec<u32>, String> {
    let b = block_size(block_tokens)?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut request = scheduling_request(prompt_tokens as usize);
    for row in rows {
        let worker = dynamo_worker(row.worker);
        let overlap_blocks = row.reuse / block_tokens;
        if overlap_blocks > 0 {
            request
                .overlap
                .effective_overlap_blocks
                .insert(worker, overlap_blocks as f64);
        }
        request.worker_loads.insert(
            worker,
            load_projection(row.queued_prefill, row.active_decode, block_tokens),
        );
    }
    let (lower_seed, higher_seed) = tie_break_seeds();
    let fleet: HashMap<WorkerId, FleetWorker> = rows
        .iter()
        .map(|r| (r.worker as WorkerId, FleetWorker::default()))
        .collect();
    let cheapest = pick(&fleet, &request, b, lower_seed);
    let mut set = vec![cheapest as u32];
    for row in rows {
        let x = row.worker as WorkerId;
        if x == cheapest {
            continue;
        }
        let pair: HashMap<WorkerId, FleetWorker> = [
            (cheapest, FleetWorker::default()),
            (x, FleetWorker::default()),
        ]
        .into();
        let picks = (
            pick(&pair, &request, b, lower_seed),
            pick(&pair, &request, b, higher_seed),
        );
        if picks.0 != picks.1 {
            set.push(x as u32);
        } else if picks.0 == x {
            panic!(
                "Dynamo prefers worker {x} to worker {cheapest}, its own pick of the \
                 cheapest over the whole fleet"
            );
        }
    }
    set.sort_unstable();
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC.md §8's decision as §4.8's worked example states it: `w0` reuses 1024 of a
    /// 1200-token prompt behind 1000 queued prefill tokens; `w1` reuses nothing and has
    /// nothing queued (`w2` is ineligible, so not a row).
    fn worked_example_rows() -> Vec<SelectorRow> {
        vec![
            SelectorRow {
                worker: 0,
                reuse: 1024,
                queued_prefill: 1000,
                active_decode: 0,
            },
            SelectorRow {
                worker: 1,
                reuse: 0,
                queued_prefill: 0,
                active_decode: 0,
            },
        ]
    }

    #[test]
    fn the_worked_example_at_512_token_blocks_is_w0_alone() {
        // Dynamo: w0 (1000 + 1200) / 512 − 2 = 2.296875 blocks, w1 1200 / 512 = 2.34375.
        assert_eq!(
            minimum_cost_workers(&worked_example_rows(), 1200, 512),
            Ok(vec![0])
        );
    }

    #[test]
    fn the_worked_example_at_1000_token_blocks_is_a_tie_only_in_integers() {
        // SPEC.md §4.8 in integers: w0 1000 + 1200 − 1000 = 1200 prefill tokens, w1 1200:
        // a tie, {w0, w1}. Dynamo in f64: w0 2200 / 1000 − 1 = 1.2000000000000002
        // blocks (2.2 is not exact), w1 1200 / 1000 = 1.2, so w1 alone. A block size
        // that is not a power of two can split a tie; hence the check's powers of two.
        assert_eq!(2200f64 / 1000f64 - 1.0, 1.2000000000000002);
        assert_eq!(
            minimum_cost_workers(&worked_example_rows(), 1200, 1000),
            Ok(vec![1])
        );
        // The same tie at a power of two Dynamo keeps: b = 1024, w0 reuses one whole
        // block behind 1024 queued tokens, w1 nothing: 2224 / 1024 − 1 = 1200 / 1024.
        let mut rows = worked_example_rows();
        rows[0].queued_prefill = 1024;
        assert_eq!(minimum_cost_workers(&rows, 1200, 1024), Ok(vec![0, 1]));
    }

    #[test]
    fn the_tie_break_seeds_go_opposite_ways() {
        let (lower, higher) = tie_break_seeds();
        assert_ne!(lower, higher);
        let workers: HashMap<WorkerId, FleetWorker> =
            [(3, FleetWorker::default()), (7, FleetWorker::default())].into();
        let request = scheduling_request(100);
        assert_eq!(pick(&workers, &request, 16, lower), 3);
        assert_eq!(pick(&workers, &request, 16, higher), 7);
    }

    #[test]
    fn decode_blocks_and_ties_among_many() {
        // Block size 4, prompt 8 tokens: every worker's prefill is (queued + 8) / 4
        // minus its whole reused blocks, plus ceil(active_decode / 4).
        let row = |worker, reuse, queued_prefill, active_decode| SelectorRow {
            worker,
            reuse,
            queued_prefill,
            active_decode,
        };
        let rows = [
            row(0, 0, 0, 1), // 2 + 1 = 3
            row(1, 7, 0, 0), // 2 − 1 = 1
            row(2, 4, 0, 0), // 2 − 1 = 1
            row(3, 0, 4, 0), // 3
            row(4, 8, 0, 4), // 2 − 2 + 1 = 1
            row(5, 8, 0, 5), // 2 − 2 + 2 = 2
        ];
        assert_eq!(minimum_cost_workers(&rows, 8, 4), Ok(vec![1, 2, 4]));
        // Reordered rows, the same set.
        let mut reversed = rows;
        reversed.reverse();
        assert_eq!(minimum_cost_workers(&reversed, 8, 4), Ok(vec![1, 2, 4]));
    }

    #[test]
    fn no_rows_no_workers_and_a_block_size_beyond_u32_is_an_error() {
        assert_eq!(minimum_cost_workers(&[], 8, 4), Ok(vec![]));
        let rows = worked_example_rows();
        assert!(minimum_cost_workers(&rows, 1200, 1 << 32)
            .unwrap_err()
            .contains("u32"));
        assert!(minimum_cost_workers(&rows, 1200, 0).is_err());
    }
}
