//! The replay of SPEC.md §3–§6.2, written as plainly as possible: one run per policy
//! (four, and `dynamo_default` of §4.8 when `dynamo_block_tokens` is set), each from its
//! own fresh copy of the initial state; for every request every candidate
//! row is recomputed from scratch by linear scans over the workers and their cache
//! entries. All figures are computed in u128 and stored as u64 (the overflow rule of
//! §1.4 guarantees they fit in `B`; a conversion that somehow did not fit saturates
//! instead of panicking).

use std::cmp::Ordering;

use crate::model::{Entry, EpochNumbering, Event, EventKind, Segment, StaleRule, Trace};

/// The routing policies, in receipt order (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    RoundRobin,
    LeastLoad,
    LongestPrefix,
    CachePlusLoad,
    /// Dynamo's default selector in integers (§4.8); only with `dynamo_block_tokens`.
    DynamoDefault,
}

impl PolicyKind {
    /// The four policies every receipt has, in receipt order; also the only ones the
    /// closed loop compares (§7: `dynamo_block_tokens` is no closed-loop policy).
    pub const FOUR: [PolicyKind; 4] = [
        PolicyKind::RoundRobin,
        PolicyKind::LeastLoad,
        PolicyKind::LongestPrefix,
        PolicyKind::CachePlusLoad,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::LeastLoad => "least_load",
            PolicyKind::LongestPrefix => "longest_prefix",
            PolicyKind::CachePlusLoad => "cache_plus_load",
            PolicyKind::DynamoDefault => "dynamo_default",
        }
    }
}

/// The runs of a trace's receipt, in receipt order: the four, then `dynamo_default`
/// when `policy.dynamo_block_tokens` is set (§6).
pub fn receipt_policies(trace: &Trace) -> Vec<PolicyKind> {
    let mut policies = PolicyKind::FOUR.to_vec();
    if trace.policy.dynamo_block_tokens.is_some() {
        policies.push(PolicyKind::DynamoDefault);
    }
    policies
}

/// One candidate row of a decision (SPEC §4, §6).
#[derive(Debug, Clone)]
pub struct Row {
    pub worker: String,
    pub eligible: bool,
    pub reasons: Vec<&'static str>,
    pub reuse: u64,
    pub recomputed: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub work_milli: u64,
    pub after_milli: u64,
    pub cost_milli: u64,
    /// The smallest id among the rows that dominate this one (SPEC §4.6).
    pub dominated_by: Option<String>,
    /// How many rows dominate this one.
    pub dominated_count: u64,
    /// Removed by the overload cap (cache_plus_load only); not exported itself.
    pub excluded: bool,
    /// Reserved out by the cold reserve (cache_plus_load only, reason `cold_reserve`):
    /// chosen only when no other non-overloaded row is left (SPEC §4.5).
    pub reserved_out: bool,
}

#[derive(Debug, Clone)]
pub struct Decision {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<String>,
    pub route_kind: &'static str,
    pub tie_count: u64,
    pub margin_milli: u64,
    pub candidates: Vec<Row>,
}

#[derive(Debug, Clone)]
pub struct CacheLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: String,
    pub epoch: u64,
    pub op: &'static str,
    pub outcome: &'static str,
    /// Rejected mutations of the event; present only under `stale_rule: "key_epoch"`.
    pub stale_mutations: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ObservationLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: String,
    pub observed_tick: u64,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub routed: u64,
    pub rejected: u64,
    pub cache_hits: u64,
    pub reused_tokens: u64,
    pub recomputed_tokens: u64,
    pub route_churn: u64,
    pub load_skew_milli: u64,
    pub latency_proxy_mean_milli: u64,
    pub latency_proxy_p95_milli: u64,
    pub latency_proxy_max_milli: u64,
    pub stale_event_rejections: u64,
    pub stale_observation_rejections: u64,
    pub boundary_rejections: u64,
    pub overload_escapes: u64,
    pub dominated_choices: u64,
    // The metrics of the later policy members (SPEC §6.2): `Some` exactly when their
    // member is off its default, so a default trace's metrics object is unchanged.
    /// `key_epoch` only: Σ `stale_mutations` over the cache log.
    pub stale_mutation_rejections: Option<u64>,
    /// `sequential` only: times a worker went from no gap to a gap.
    pub evidence_gaps: Option<u64>,
    /// `sequential` only: `evidence_gap` reasons over all rows of all decisions.
    pub evidence_gap_rows: Option<u64>,
    /// `cold_reserve_milli` set only: `cold_reserve` reasons over all rows.
    pub cold_reserve_exclusions: Option<u64>,
    /// `cold_reserve_milli` set only: decisions chosen among reserved-out rows.
    pub cold_reserve_fallbacks: Option<u64>,
}

/// Adds to a metric that is present only off its member's default; absent stays absent.
fn add_to(metric: &mut Option<u64>, amount: u64) {
    if let Some(total) = metric {
        *total = total.saturating_add(amount);
    }
}

#[derive(Debug, Clone)]
pub struct Run {
    pub policy: PolicyKind,
    pub decisions: Vec<Decision>,
    pub cache_log: Vec<CacheLogEntry>,
    pub observation_log: Vec<ObservationLogEntry>,
    pub metrics: Metrics,
}

/// `(tenant, model, adapter, key)`: what a cache entry and a key epoch are kept under.
type NamespaceKey = (String, String, String, String);

/// The router-side view of one worker (SPEC §3). `last_heard` is derived, not stored.
#[derive(Debug, Clone)]
struct WorkerState {
    id: String,
    model: String,
    adapters: Vec<String>,
    prefill_rate: u64,
    decode_rate: u64,
    queued_prefill: u64,
    active_decode: u64,
    last_epoch: u64,
    observed_tick: u64,
    last_cache_tick: Option<u64>,
    cache: Vec<Entry>,
    /// `key_epoch` only: the clear floor (starts at `workers[].epoch`); the initial cache
    /// is as of the floor.
    floor: u64,
    /// `key_epoch` only: per namespace-key, the epoch of the last applied mutation of
    /// that key; one whose key is not resident is a tombstone. Scanned linearly.
    key_epochs: Vec<(NamespaceKey, u64)>,
    /// `sequential` only: `H`, the largest epoch up to which every epoch was received.
    contiguous_epoch: u64,
    /// `sequential` only: `R`, the received epochs above `H` (no repeats).
    received_above: Vec<u64>,
}

impl WorkerState {
    /// `max(observed_tick, last_cache_tick)`, or `observed_tick` when no cache event
    /// was applied yet.
    fn last_heard(&self) -> u64 {
        match self.last_cache_tick {
            Some(tick) => self.observed_tick.max(tick),
            None => self.observed_tick,
        }
    }
}

/// The request members the candidate computation needs.
struct Request<'t> {
    id: &'t str,
    tenant: &'t str,
    model: &'t str,
    adapter: &'t str,
    prefix: &'t [Segment],
    prompt_tokens: u64,
    decode_tokens: u64,
}

/// u128 → u64; never expected to saturate (overflow rule), but must not panic.
fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Fresh initial state, workers in id (byte) order.
fn initial_state(trace: &Trace) -> Vec<WorkerState> {
    let mut workers: Vec<WorkerState> = trace
        .workers
        .iter()
        .map(|w| WorkerState {
            id: w.id.clone(),
            model: w.model.clone(),
            adapters: w.adapters.clone(),
            prefill_rate: w.prefill_rate,
            decode_rate: w.decode_rate,
            queued_prefill: w.queued_prefill,
            active_decode: w.active_decode,
            last_epoch: w.epoch,
            observed_tick: w.observed_tick,
            last_cache_tick: None,
            cache: w.cache.clone(),
            floor: w.epoch,
            key_epochs: Vec::new(),
            contiguous_epoch: w.epoch,
            received_above: Vec::new(),
        })
        .collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    workers
}

/// Events in ascending `(tick, seq)` order.
pub fn sorted_events(trace: &Trace) -> Vec<&Event> {
    let mut events: Vec<&Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    events
}

/// Runs every policy of the receipt, in receipt order.
pub fn replay_all(trace: &Trace) -> Vec<Run> {
    receipt_policies(trace)
        .into_iter()
        .map(|policy| run_policy(trace, policy))
        .collect()
}

/// Do two tenants share for this `(model, adapter)`? Equal, or listed together in one
/// grant of exactly that model and adapter (not transitive: one grant must hold both).
fn tenants_share(trace: &Trace, a: &str, b: &str, model: &str, adapter: &str) -> bool {
    if a == b {
        return true;
    }
    trace.sharing.iter().any(|grant| {
        grant.model == model
            && grant.adapter == adapter
            && grant.tenants.iter().any(|t| t == a)
            && grant.tenants.iter().any(|t| t == b)
    })
}

fn entry_usable(trace: &Trace, entry: &Entry, request: &Request) -> bool {
    entry.model == request.model
        && entry.adapter == request.adapter
        && tenants_share(
            trace,
            &entry.tenant,
            request.tenant,
            request.model,
            request.adapter,
        )
}

/// Figures of one row before the cross-row parts (imbalance, cap, dominance).
struct Draft {
    eligible: bool,
    model_not_served: bool,
    adapter_not_loaded: bool,
    stale_view: bool,
    evidence_gap: bool,
    tenant_mismatch: bool,
    model_mismatch: bool,
    adapter_mismatch: bool,
    reuse: u128,
    recomputed: u128,
    work_milli: u128,
    after_milli: u128,
}

/// Computes one worker's draft row from scratch (SPEC §4.1–§4.4).
fn draft_row(trace: &Trace, worker: &WorkerState, request: &Request, tick: u64) -> Draft {
    let model_served = worker.model == request.model;
    let adapter_loaded =
        request.adapter == "base" || worker.adapters.iter().any(|a| a == request.adapter);
    let eligible = model_served && adapter_loaded;

    let mut draft = Draft {
        eligible,
        model_not_served: !model_served,
        adapter_not_loaded: model_served && !adapter_loaded,
        stale_view: false,
        evidence_gap: false,
        tenant_mismatch: false,
        model_mismatch: false,
        adapter_mismatch: false,
        reuse: 0,
        recomputed: 0,
        work_milli: 0,
        after_milli: 0,
    };

    if eligible {
        // Freshness: age saturates at 0 when last_heard lies after the request tick.
        let age_ticks = tick.saturating_sub(worker.last_heard());
        let stale = match trace.policy.freshness_ticks {
            Some(window) => age_ticks > window,
            None => false,
        };
        // Evidence gap (§3.6, §4.2): under sequential epochs, a worker with an epoch
        // still missing is not trusted either. Both reasons may be listed together.
        let gap =
            trace.policy.epochs == EpochNumbering::Sequential && !worker.received_above.is_empty();
        if stale || gap {
            draft.stale_view = stale;
            draft.evidence_gap = gap;
        } else {
            let mut reuse: u128 = 0;
            for segment in request.prefix {
                let mut best: u64 = 0;
                for entry in &worker.cache {
                    if entry.key == segment.key && entry_usable(trace, entry, request) {
                        best = best.max(entry.tokens);
                    }
                }
                reuse += u128::from(best.min(segment.tokens));
                if best == 0 {
                    // Boundary reasons: resident entries under this key that are not
                    // usable, each named by its first difference (model, adapter, tenant).
                    for entry in &worker.cache {
                        if entry.key == segment.key
                            && entry.tokens > 0
                            && !entry_usable(trace, entry, request)
                        {
                            if entry.model != request.model {
                                draft.model_mismatch = true;
                            } else if entry.adapter != request.adapter {
                                draft.adapter_mismatch = true;
                            } else {
                                draft.tenant_mismatch = true;
                            }
                        }
                    }
                }
                if best < segment.tokens {
                    break;
                }
            }
            draft.reuse = reuse.min(u128::from(request.prompt_tokens));
        }
    }

    let prompt = u128::from(request.prompt_tokens);
    draft.recomputed = prompt.saturating_sub(draft.reuse);
    // The overflow rule (§1.4) keeps these far below 2^128; saturating anyway so
    // that no input can make the oracle panic.
    let decode_weight = u128::from(trace.policy.decode_weight_milli);
    draft.work_milli = (1000 * u128::from(worker.queued_prefill))
        .saturating_add(decode_weight.saturating_mul(u128::from(worker.active_decode)));
    draft.after_milli = draft
        .work_milli
        .saturating_add(draft.recomputed.saturating_mul(1000))
        .saturating_add(decode_weight.saturating_mul(u128::from(request.decode_tokens)));
    draft
}

/// The Dynamo cost of SPEC §4.8, in milli-units: Dynamo's block cost times `1000·b`.
/// Only whole blocks of `reuse` count as overlap, since Dynamo's indexer matches whole
/// blocks; the active decode is rounded up to the blocks it occupies.
fn dynamo_cost_milli(
    block_tokens: u64,
    reuse: u128,
    queued_prefill: u64,
    prompt_tokens: u64,
    active_decode: u64,
) -> u128 {
    // Validation keeps b at least 1; `max(1)` only so that no input can divide by zero.
    let block_tokens = u128::from(block_tokens.max(1));
    let overlap_tokens = block_tokens * (reuse / block_tokens);
    // Never below zero (overlap <= reuse <= prompt_tokens); saturating all the same.
    let prefill_tokens =
        (u128::from(queued_prefill) + u128::from(prompt_tokens)).saturating_sub(overlap_tokens);
    let decode_blocks = u128::from(active_decode).div_ceil(block_tokens);
    prefill_tokens.saturating_mul(1000).saturating_add(
        block_tokens
            .saturating_mul(decode_blocks)
            .saturating_mul(1000),
    )
}

/// All candidate rows of a request, in worker-id order (SPEC §4). The policy decides
/// two things only: the overload cap and cold reserve apply in `cache_plus_load` alone
/// (§4.5), and in `dynamo_default` `cost_milli` is the Dynamo cost (§4.8).
fn candidate_rows(
    trace: &Trace,
    workers: &[WorkerState],
    request: &Request,
    tick: u64,
    policy: PolicyKind,
) -> Vec<Row> {
    let cap_applies = policy == PolicyKind::CachePlusLoad;
    let dynamo_block_tokens = match policy {
        PolicyKind::DynamoDefault => trace.policy.dynamo_block_tokens,
        _ => None,
    };
    let drafts: Vec<Draft> = workers
        .iter()
        .map(|w| draft_row(trace, w, request, tick))
        .collect();

    // n and S over eligible rows (overloaded rows are still eligible rows).
    let eligible_count = drafts.iter().filter(|d| d.eligible).count() as u128;
    let after_sum: u128 = drafts
        .iter()
        .filter(|d| d.eligible)
        .map(|d| d.after_milli)
        .fold(0u128, |sum, after| sum.saturating_add(after));
    let penalty = u128::from(trace.policy.imbalance_penalty_milli);

    let cap_milli: Option<u128> = if cap_applies {
        trace.policy.max_queued_work.map(|c| 1000 * u128::from(c))
    } else {
        None
    };
    // The cold reserve (§4.5): rows with reuse may fill the cap only up to
    // `1000·C − R` (saturating at 0); it means nothing without a cap.
    let hit_threshold_milli: Option<u128> = match (cap_milli, trace.policy.cold_reserve_milli) {
        (Some(cap), Some(reserve)) => Some(cap.saturating_sub(u128::from(reserve))),
        _ => None,
    };

    let mut rows: Vec<Row> = Vec::with_capacity(drafts.len());
    for (worker, draft) in workers.iter().zip(drafts.iter()) {
        let cost_milli = match dynamo_block_tokens {
            // Every row, eligible or not (an ineligible row has reuse 0); no imbalance.
            Some(block_tokens) => dynamo_cost_milli(
                block_tokens,
                draft.reuse,
                worker.queued_prefill,
                request.prompt_tokens,
                worker.active_decode,
            ),
            None => {
                let imbalance = if eligible_count == 0 {
                    0
                } else {
                    let excess = eligible_count
                        .saturating_mul(draft.after_milli)
                        .saturating_sub(after_sum);
                    penalty.saturating_mul(excess) / (1000 * eligible_count)
                };
                draft
                    .recomputed
                    .saturating_mul(1000)
                    .saturating_add(draft.work_milli)
                    .saturating_add(imbalance)
            }
        };
        let excluded = match cap_milli {
            Some(cap) => draft.eligible && draft.after_milli > cap,
            None => false,
        };
        let reserved_out = match hit_threshold_milli {
            Some(threshold) => {
                draft.eligible && !excluded && draft.reuse > 0 && draft.after_milli > threshold
            }
            None => false,
        };

        // Reasons in the fixed order of SPEC §4.7.
        let mut reasons = Vec::new();
        if draft.model_not_served {
            reasons.push("model_not_served");
        }
        if draft.adapter_not_loaded {
            reasons.push("adapter_not_loaded");
        }
        if draft.stale_view {
            reasons.push("stale_view");
        }
        if draft.evidence_gap {
            reasons.push("evidence_gap");
        }
        if draft.tenant_mismatch {
            reasons.push("tenant_mismatch");
        }
        if draft.model_mismatch {
            reasons.push("model_mismatch");
        }
        if draft.adapter_mismatch {
            reasons.push("adapter_mismatch");
        }
        if excluded {
            reasons.push("overloaded");
        }
        if reserved_out {
            reasons.push("cold_reserve");
        }

        rows.push(Row {
            worker: worker.id.clone(),
            eligible: draft.eligible,
            reasons,
            reuse: to_u64(draft.reuse),
            recomputed: to_u64(draft.recomputed),
            queued_prefill: worker.queued_prefill,
            active_decode: worker.active_decode,
            work_milli: to_u64(draft.work_milli),
            after_milli: to_u64(draft.after_milli),
            cost_milli: to_u64(cost_milli),
            dominated_by: None,
            dominated_count: 0,
            excluded,
            reserved_out,
        });
    }

    // Dominance over the front set (eligible, neither overloaded nor reserved out): the
    // smallest dominating id and the number of dominators.
    let front: Vec<bool> = rows
        .iter()
        .map(|r| r.eligible && !r.excluded && !r.reserved_out)
        .collect();
    let mut dominated: Vec<(Option<String>, u64)> = Vec::with_capacity(rows.len());
    for (a, row_a) in rows.iter().enumerate() {
        let mut by: Option<String> = None;
        let mut count = 0u64;
        if front.get(a).copied().unwrap_or(false) {
            for (b, row_b) in rows.iter().enumerate() {
                if b == a || !front.get(b).copied().unwrap_or(false) {
                    continue;
                }
                let no_worse = row_b.reuse >= row_a.reuse && row_b.after_milli <= row_a.after_milli;
                let better = row_b.reuse > row_a.reuse || row_b.after_milli < row_a.after_milli;
                if no_worse && better {
                    // The smallest id in byte order, whatever order the rows are in.
                    if !matches!(&by, Some(id) if *id <= row_b.worker) {
                        by = Some(row_b.worker.clone());
                    }
                    count += 1;
                }
            }
        }
        dominated.push((by, count));
    }
    for (row, (by, count)) in rows.iter_mut().zip(dominated) {
        row.dominated_by = by;
        row.dominated_count = count;
    }
    rows
}

/// Orders two choosable rows by the policy's score, better first (ties: `Equal`).
fn compare_score(policy: PolicyKind, escape: bool, a: &Row, b: &Row) -> Ordering {
    match policy {
        PolicyKind::RoundRobin => Ordering::Equal,
        PolicyKind::LeastLoad => a.work_milli.cmp(&b.work_milli),
        PolicyKind::LongestPrefix => b.reuse.cmp(&a.reuse),
        PolicyKind::CachePlusLoad if escape => a.after_milli.cmp(&b.after_milli),
        PolicyKind::CachePlusLoad => a.cost_milli.cmp(&b.cost_milli),
        // The Dynamo cost is in `cost_milli`; no row is ever excluded, so no escape.
        PolicyKind::DynamoDefault => a.cost_milli.cmp(&b.cost_milli),
    }
}

/// Winner's advantage over the runner-up, in the policy's milli-units.
fn margin(policy: PolicyKind, escape: bool, winner: &Row, runner_up: &Row) -> u64 {
    match policy {
        PolicyKind::RoundRobin => 0,
        PolicyKind::LeastLoad => runner_up.work_milli.saturating_sub(winner.work_milli),
        PolicyKind::LongestPrefix => {
            to_u64(1000 * u128::from(winner.reuse.saturating_sub(runner_up.reuse)))
        }
        PolicyKind::CachePlusLoad if escape => {
            runner_up.after_milli.saturating_sub(winner.after_milli)
        }
        PolicyKind::CachePlusLoad => runner_up.cost_milli.saturating_sub(winner.cost_milli),
        PolicyKind::DynamoDefault => runner_up.cost_milli.saturating_sub(winner.cost_milli),
    }
}

/// The outcome of choosing among the rows.
struct Choice {
    chosen: Option<usize>,
    route_kind: &'static str,
    tie_count: u64,
    margin_milli: u64,
    /// Chosen in the second stage of §4.5: among reserved-out rows only.
    cold_reserve_fallback: bool,
}

/// SPEC §5. `cursor` is the round-robin position (only that policy moves it).
fn choose(policy: PolicyKind, rows: &[Row], cursor: &mut usize) -> Choice {
    let rejected = Choice {
        chosen: None,
        route_kind: "rejected",
        tie_count: 0,
        margin_milli: 0,
        cold_reserve_fallback: false,
    };
    if !rows.iter().any(|r| r.eligible) {
        return rejected;
    }

    if policy == PolicyKind::RoundRobin {
        let count = rows.len();
        for step in 0..count {
            let position = (*cursor + step) % count;
            if rows.get(position).map(|r| r.eligible).unwrap_or(false) {
                *cursor = (position + 1) % count;
                let hit = rows.get(position).map(|r| r.reuse > 0).unwrap_or(false);
                return Choice {
                    chosen: Some(position),
                    route_kind: if hit { "hit" } else { "cold" },
                    tie_count: 1,
                    margin_milli: 0,
                    cold_reserve_fallback: false,
                };
            }
        }
        return rejected;
    }

    // Choosable rows, in three stages (§4.5, §5): eligible and (cache_plus_load only)
    // neither overloaded nor reserved out; when that leaves none, the eligible rows that
    // are not overloaded (the reserved-out ones come back); when that leaves none
    // either, every eligible row, and the route is an escape.
    let mut choosable: Vec<usize> = (0..rows.len())
        .filter(|&i| {
            rows.get(i)
                .map(|r| r.eligible && !r.excluded && !r.reserved_out)
                .unwrap_or(false)
        })
        .collect();
    let mut cold_reserve_fallback = false;
    if choosable.is_empty() {
        choosable = (0..rows.len())
            .filter(|&i| {
                rows.get(i)
                    .map(|r| r.eligible && !r.excluded)
                    .unwrap_or(false)
            })
            .collect();
        cold_reserve_fallback = !choosable.is_empty();
    }
    let mut escape = false;
    if choosable.is_empty() {
        escape = true;
        choosable = (0..rows.len())
            .filter(|&i| rows.get(i).map(|r| r.eligible).unwrap_or(false))
            .collect();
    }

    // Score, then worker id (rows are already in id order, so compare ids anyway).
    let mut ordered: Vec<&Row> = choosable.iter().filter_map(|&i| rows.get(i)).collect();
    ordered
        .sort_by(|a, b| compare_score(policy, escape, a, b).then_with(|| a.worker.cmp(&b.worker)));
    let Some(winner) = ordered.first() else {
        return rejected;
    };
    let chosen = rows.iter().position(|r| r.worker == winner.worker);
    let tie_count = ordered
        .iter()
        .filter(|r| compare_score(policy, escape, r, winner) == Ordering::Equal)
        .count() as u64;
    let margin_milli = match ordered.get(1) {
        Some(runner_up) => margin(policy, escape, winner, runner_up),
        None => 0,
    };
    let route_kind = if escape {
        "overload_escape"
    } else if winner.reuse > 0 {
        "hit"
    } else {
        "cold"
    };
    Choice {
        chosen,
        route_kind,
        tie_count,
        margin_milli,
        cold_reserve_fallback,
    }
}

/// Subtracts what a worker drains in `dt` ticks (products saturate).
fn drain(worker: &mut WorkerState, dt: u64) {
    let prefill = worker.prefill_rate.saturating_mul(dt);
    worker.queued_prefill -= worker.queued_prefill.min(prefill);
    let decode = worker.decode_rate.saturating_mul(dt);
    worker.active_decode -= worker.active_decode.min(decode);
}

/// One whole run of one policy from a fresh state.
fn run_policy(trace: &Trace, policy: PolicyKind) -> Run {
    let mut state = RunState::new(trace, policy);
    for event in sorted_events(trace) {
        state.step(event);
    }
    state.finish()
}

/// The state of one policy's run between events, so that a caller (the closed loop of
/// SPEC §11) can feed events one at a time, in `(tick, seq)` order, and see each
/// decision as it is made. [`run_policy`] is exactly `new`, `step` per event, `finish`.
pub struct RunState<'t> {
    trace: &'t Trace,
    policy: PolicyKind,
    workers: Vec<WorkerState>,
    decisions: Vec<Decision>,
    cache_log: Vec<CacheLogEntry>,
    observation_log: Vec<ObservationLogEntry>,
    metrics: Metrics,
    previous_tick: u64,
    cursor: usize,
    // Route-churn memory: (tenant, model, adapter, first key) → last worker, scanned
    // linearly.
    churn_memory: Vec<((String, String, String, String), String)>,
    // Per worker (id order): Σ (after_milli − work_milli) of its placements.
    assigned_milli: Vec<u128>,
    latencies_milli: Vec<u128>,
}

impl<'t> RunState<'t> {
    /// A fresh initial state for one policy's run.
    pub fn new(trace: &'t Trace, policy: PolicyKind) -> Self {
        let workers = initial_state(trace);
        let worker_count = workers.len();
        let key_epoch = trace.policy.stale_rule == StaleRule::KeyEpoch;
        let sequential = trace.policy.epochs == EpochNumbering::Sequential;
        let reserve = trace.policy.cold_reserve_milli.is_some();
        let present = |on: bool| if on { Some(0) } else { None };
        let metrics = Metrics {
            stale_mutation_rejections: present(key_epoch),
            evidence_gaps: present(sequential),
            evidence_gap_rows: present(sequential),
            cold_reserve_exclusions: present(reserve),
            cold_reserve_fallbacks: present(reserve),
            ..Metrics::default()
        };
        RunState {
            trace,
            policy,
            workers,
            decisions: Vec::new(),
            cache_log: Vec::new(),
            observation_log: Vec::new(),
            metrics,
            previous_tick: 0,
            cursor: 0,
            churn_memory: Vec::new(),
            assigned_milli: vec![0; worker_count],
            latencies_milli: Vec::new(),
        }
    }

    /// The decisions made so far, in the order they were made.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Whether the worker at `index` (id order) has an evidence gap now (§3.6); always
    /// false under `epochs: "any"`, where no gap is tracked.
    pub fn has_evidence_gap(&self, index: usize) -> bool {
        self.workers
            .get(index)
            .map(|w| !w.received_above.is_empty())
            .unwrap_or(false)
    }

    /// Processes one event (drain, then the event itself). For a routed request, the
    /// index (in worker-id order) of the chosen worker; otherwise `None`.
    pub fn step(&mut self, event: &Event) -> Option<usize> {
        let trace = self.trace;
        let policy = self.policy;
        let RunState {
            workers,
            decisions,
            cache_log,
            observation_log,
            metrics,
            previous_tick,
            cursor,
            churn_memory,
            assigned_milli,
            latencies_milli,
            ..
        } = self;
        let mut routed_to = None;
        let dt = event.tick.saturating_sub(*previous_tick);
        for worker in workers.iter_mut() {
            drain(worker, dt);
        }
        *previous_tick = event.tick;

        match &event.kind {
            EventKind::Store { worker, epoch, .. }
            | EventKind::Evict { worker, epoch, .. }
            | EventKind::Clear { worker, epoch } => {
                let op = match &event.kind {
                    EventKind::Store { .. } => "store",
                    EventKind::Evict { .. } => "evict",
                    _ => "clear",
                };
                let rule = trace.policy.stale_rule;
                // Validation guarantees the worker exists; a missing one logs as a
                // rejected event rather than panicking.
                let mut outcome = "stale_epoch";
                let mut rejected_mutations = 0u64;
                if let Some(state) = workers.iter_mut().find(|w| &w.id == worker) {
                    (outcome, rejected_mutations) = apply_under_rule(rule, state, event);
                    if trace.policy.epochs == EpochNumbering::Sequential {
                        let resyncs = op == "clear" && outcome == "applied";
                        if track_received_epoch(state, *epoch, resyncs) {
                            add_to(&mut metrics.evidence_gaps, 1);
                        }
                    }
                }
                if outcome == "stale_epoch" || outcome == "stale_key_epoch" {
                    metrics.stale_event_rejections += 1;
                }
                add_to(&mut metrics.stale_mutation_rejections, rejected_mutations);
                cache_log.push(CacheLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: worker.clone(),
                    epoch: *epoch,
                    op,
                    outcome,
                    stale_mutations: if rule == StaleRule::KeyEpoch {
                        Some(rejected_mutations)
                    } else {
                        None
                    },
                });
            }
            EventKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => {
                let mut outcome = "stale_observation";
                if let Some(state) = workers.iter_mut().find(|w| &w.id == worker) {
                    if *observed_tick >= state.observed_tick {
                        outcome = "applied";
                        state.queued_prefill = *queued_prefill;
                        state.active_decode = *active_decode;
                        state.observed_tick = *observed_tick;
                    }
                }
                if outcome == "stale_observation" {
                    metrics.stale_observation_rejections += 1;
                }
                observation_log.push(ObservationLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: worker.clone(),
                    observed_tick: *observed_tick,
                    outcome,
                });
            }
            EventKind::Request {
                id,
                tenant,
                model,
                adapter,
                prefix,
                prompt_tokens,
                decode_tokens,
            } => {
                let request = Request {
                    id,
                    tenant,
                    model,
                    adapter,
                    prefix,
                    prompt_tokens: *prompt_tokens,
                    decode_tokens: *decode_tokens,
                };
                let rows = candidate_rows(trace, workers, &request, event.tick, policy);
                let choice = choose(policy, &rows, cursor);

                // Boundary, gap and reserve reasons count on every row, whatever was
                // chosen.
                for row in &rows {
                    metrics.boundary_rejections += row
                        .reasons
                        .iter()
                        .filter(|r| {
                            matches!(
                                **r,
                                "tenant_mismatch" | "model_mismatch" | "adapter_mismatch"
                            )
                        })
                        .count() as u64;
                    let count_of =
                        |reason: &str| row.reasons.iter().filter(|r| **r == reason).count() as u64;
                    add_to(&mut metrics.evidence_gap_rows, count_of("evidence_gap"));
                    add_to(
                        &mut metrics.cold_reserve_exclusions,
                        count_of("cold_reserve"),
                    );
                }

                let mut chosen_id = None;
                match choice.chosen.and_then(|i| rows.get(i).map(|r| (i, r))) {
                    None => metrics.rejected += 1,
                    Some((index, row)) => {
                        routed_to = Some(index);
                        chosen_id = Some(row.worker.clone());
                        metrics.routed += 1;
                        if row.reuse > 0 {
                            metrics.cache_hits += 1;
                        }
                        metrics.reused_tokens = metrics.reused_tokens.saturating_add(row.reuse);
                        metrics.recomputed_tokens =
                            metrics.recomputed_tokens.saturating_add(row.recomputed);
                        if choice.route_kind == "overload_escape" {
                            metrics.overload_escapes += 1;
                        }
                        if choice.cold_reserve_fallback {
                            add_to(&mut metrics.cold_reserve_fallbacks, 1);
                        }
                        if row.dominated_count > 0 {
                            metrics.dominated_choices += 1;
                        }
                        if let Some(state) = workers.get_mut(index) {
                            // Latency proxy, before placement.
                            let waiting =
                                u128::from(row.queued_prefill) + u128::from(row.recomputed);
                            latencies_milli
                                .push(1000 * waiting / u128::from(state.prefill_rate.max(1)));
                            // Placement changes load only.
                            state.queued_prefill =
                                state.queued_prefill.saturating_add(row.recomputed);
                            state.active_decode =
                                state.active_decode.saturating_add(*decode_tokens);
                        }
                        if let Some(total) = assigned_milli.get_mut(index) {
                            *total = total.saturating_add(u128::from(
                                row.after_milli.saturating_sub(row.work_milli),
                            ));
                        }
                        if let Some(first) = prefix.first() {
                            let namespace_key = (
                                tenant.clone(),
                                model.clone(),
                                adapter.clone(),
                                first.key.clone(),
                            );
                            match churn_memory.iter_mut().find(|(k, _)| *k == namespace_key) {
                                Some((_, last_worker)) => {
                                    if *last_worker != row.worker {
                                        metrics.route_churn += 1;
                                    }
                                    *last_worker = row.worker.clone();
                                }
                                None => churn_memory.push((namespace_key, row.worker.clone())),
                            }
                        }
                    }
                }

                decisions.push(Decision {
                    seq: event.seq,
                    tick: event.tick,
                    request: request.id.to_owned(),
                    chosen: chosen_id,
                    route_kind: choice.route_kind,
                    tie_count: choice.tie_count,
                    margin_milli: choice.margin_milli,
                    candidates: rows,
                });
            }
        }
        routed_to
    }

    /// Ends the run: the final metrics (load skew, latency proxies) and the logs.
    pub fn finish(self) -> Run {
        let RunState {
            policy,
            workers,
            decisions,
            cache_log,
            observation_log,
            mut metrics,
            assigned_milli,
            latencies_milli,
            ..
        } = self;

        // Load skew over all workers of the trace.
        let assigned_total: u128 = assigned_milli
            .iter()
            .fold(0u128, |sum, a| sum.saturating_add(*a));
        let assigned_max: u128 = assigned_milli.iter().copied().max().unwrap_or(0);
        // `checked_div` is None exactly when nothing was assigned: the skew is then 0.
        metrics.load_skew_milli = assigned_max
            .saturating_mul(1000)
            .saturating_mul(workers.len() as u128)
            .checked_div(assigned_total)
            .map(to_u64)
            .unwrap_or(0);

        // Latency proxies: floor mean, p95 = sorted[ceil(95·N/100) − 1], max.
        if !latencies_milli.is_empty() {
            let count = latencies_milli.len() as u128;
            let sum: u128 = latencies_milli
                .iter()
                .fold(0u128, |sum, l| sum.saturating_add(*l));
            metrics.latency_proxy_mean_milli = to_u64(sum / count);
            let mut sorted = latencies_milli.clone();
            sorted.sort();
            let rank = (95 * count).div_ceil(100);
            let p95 = usize::try_from(rank.saturating_sub(1))
                .ok()
                .and_then(|i| sorted.get(i).copied())
                .unwrap_or(0);
            metrics.latency_proxy_p95_milli = to_u64(p95);
            metrics.latency_proxy_max_milli = to_u64(sorted.last().copied().unwrap_or(0));
        }

        Run {
            policy,
            decisions,
            cache_log,
            observation_log,
            metrics,
        }
    }
}

/// Applies one cache event to its worker under the trace's stale rule (SPEC §3.2).
/// Returns the cache log outcome and the number of rejected mutations (counted under
/// `key_epoch` only; `0` otherwise).
fn apply_under_rule(
    rule: StaleRule,
    state: &mut WorkerState,
    event: &Event,
) -> (&'static str, u64) {
    let Some(epoch) = cache_event_epoch(&event.kind) else {
        return ("applied", 0);
    };
    match rule {
        StaleRule::WorkerEpoch => {
            if epoch > state.last_epoch {
                state.last_epoch = epoch;
                state.last_cache_tick = Some(event.tick);
                apply_cache_event(state, &event.kind);
                ("applied", 0)
            } else {
                // Nothing changes, not even last_heard.
                ("stale_epoch", 0)
            }
        }
        StaleRule::ArrivalOrder => {
            state.last_cache_tick = Some(event.tick);
            apply_cache_event(state, &event.kind);
            ("applied", 0)
        }
        StaleRule::KeyEpoch => {
            let (outcome, rejected) = apply_key_epoch(state, &event.kind, epoch);
            if outcome != "stale_key_epoch" {
                state.last_cache_tick = Some(event.tick);
            }
            (outcome, rejected)
        }
    }
}

fn cache_event_epoch(kind: &EventKind) -> Option<u64> {
    match kind {
        EventKind::Store { epoch, .. }
        | EventKind::Evict { epoch, .. }
        | EventKind::Clear { epoch, .. } => Some(*epoch),
        EventKind::Load { .. } | EventKind::Request { .. } => None,
    }
}

/// The key epoch of a namespace-key, `None` when it has none (it then counts as the
/// floor).
fn key_epoch_of(key_epochs: &[(NamespaceKey, u64)], name: &NamespaceKey) -> Option<u64> {
    key_epochs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, epoch)| *epoch)
}

fn set_key_epoch(key_epochs: &mut Vec<(NamespaceKey, u64)>, name: NamespaceKey, epoch: u64) {
    match key_epochs.iter_mut().find(|(k, _)| *k == name) {
        Some((_, existing)) => *existing = epoch,
        None => key_epochs.push((name, epoch)),
    }
}

fn namespace_key(tenant: &str, model: &str, adapter: &str, key: &str) -> NamespaceKey {
    (
        tenant.to_owned(),
        model.to_owned(),
        adapter.to_owned(),
        key.to_owned(),
    )
}

/// The outcome of an event with mutations under `key_epoch`, from its counts.
fn key_epoch_outcome(accepted: u64, rejected: u64) -> &'static str {
    if rejected == 0 {
        "applied"
    } else if accepted == 0 {
        "stale_key_epoch"
    } else {
        "partly_stale_key_epoch"
    }
}

/// The `key_epoch` rule (SPEC §3.2) for an event of epoch `epoch`: a clear against the
/// floor; a store or evict key by key, each distinct key judged once against the state
/// before the event. Returns the outcome and the rejected mutations.
fn apply_key_epoch(state: &mut WorkerState, kind: &EventKind, epoch: u64) -> (&'static str, u64) {
    match kind {
        EventKind::Clear { .. } => {
            if epoch <= state.floor {
                return ("stale_key_epoch", 1);
            }
            // Keep only what the worker did after the clear (key epoch above it);
            // entries without a key epoch are as of the old floor, so they go too.
            let key_epochs = &state.key_epochs;
            state.cache.retain(|entry| {
                let name = namespace_key(&entry.tenant, &entry.model, &entry.adapter, &entry.key);
                matches!(key_epoch_of(key_epochs, &name), Some(k) if k > epoch)
            });
            state.key_epochs.retain(|(_, k)| *k > epoch);
            state.floor = epoch;
            ("applied", 0)
        }
        EventKind::Store {
            tenant,
            model,
            adapter,
            segments,
            ..
        } => {
            if segments.is_empty() {
                return mutationless(state, epoch);
            }
            let names: Vec<NamespaceKey> = segments
                .iter()
                .map(|s| namespace_key(tenant, model, adapter, &s.key))
                .collect();
            // Judged before any change, so repeats of a key share one judgement.
            let accepted: Vec<bool> = names
                .iter()
                .map(|name| key_accepted(state, name, epoch))
                .collect();
            for (segment, ok) in segments.iter().zip(&accepted) {
                if *ok {
                    set_entry(state, tenant, model, adapter, &segment.key, segment.tokens);
                }
            }
            finish_key_mutations(state, names, &accepted, epoch)
        }
        EventKind::Evict {
            tenant,
            model,
            adapter,
            keys,
            ..
        } => {
            if keys.is_empty() {
                return mutationless(state, epoch);
            }
            let names: Vec<NamespaceKey> = keys
                .iter()
                .map(|key| namespace_key(tenant, model, adapter, key))
                .collect();
            let accepted: Vec<bool> = names
                .iter()
                .map(|name| key_accepted(state, name, epoch))
                .collect();
            for (key, ok) in keys.iter().zip(&accepted) {
                if *ok {
                    remove_entry(state, tenant, model, adapter, key);
                }
            }
            finish_key_mutations(state, names, &accepted, epoch)
        }
        EventKind::Load { .. } | EventKind::Request { .. } => ("applied", 0),
    }
}

/// A store without segments or an evict without keys: accepted iff above the floor,
/// and it changes nothing else (a rejected one counts 0 mutations).
fn mutationless(state: &WorkerState, epoch: u64) -> (&'static str, u64) {
    if epoch > state.floor {
        ("applied", 0)
    } else {
        ("stale_key_epoch", 0)
    }
}

/// Accepted iff `epoch > floor` and `epoch >` the key's epoch (absent: the floor).
fn key_accepted(state: &WorkerState, name: &NamespaceKey, epoch: u64) -> bool {
    let key_epoch = key_epoch_of(&state.key_epochs, name).unwrap_or(state.floor);
    epoch > state.floor && epoch > key_epoch
}

/// Stamps every accepted key with the event's epoch (an evicted key keeps it as a
/// tombstone) and counts the mutations.
fn finish_key_mutations(
    state: &mut WorkerState,
    names: Vec<NamespaceKey>,
    accepted: &[bool],
    epoch: u64,
) -> (&'static str, u64) {
    let mut accepted_count = 0u64;
    let mut rejected_count = 0u64;
    for (name, ok) in names.into_iter().zip(accepted) {
        if *ok {
            accepted_count += 1;
            set_key_epoch(&mut state.key_epochs, name, epoch);
        } else {
            rejected_count += 1;
        }
    }
    (
        key_epoch_outcome(accepted_count, rejected_count),
        rejected_count,
    )
}

/// Sequential epochs (SPEC §3.6): records the arrival of `epoch` at its worker, whatever
/// the stale rule did with the event; `resyncs` for a clear the rule applied. Returns
/// whether the worker went from no gap to a gap.
fn track_received_epoch(state: &mut WorkerState, epoch: u64, resyncs: bool) -> bool {
    let had_gap = !state.received_above.is_empty();
    // 1. A new epoch above H joins R; one at or below H, or already in R, is a repeat.
    if epoch > state.contiguous_epoch && !state.received_above.contains(&epoch) {
        state.received_above.push(epoch);
    }
    // 2. An applied clear resyncs: what came before it no longer matters.
    if resyncs {
        state.contiguous_epoch = state.contiguous_epoch.max(epoch);
        let contiguous = state.contiguous_epoch;
        state.received_above.retain(|e| *e > contiguous);
    }
    // 3. Drain R while it holds the next epoch.
    while let Some(position) = state
        .received_above
        .iter()
        .position(|e| Some(*e) == state.contiguous_epoch.checked_add(1))
    {
        state.received_above.remove(position);
        state.contiguous_epoch += 1;
    }
    !had_gap && !state.received_above.is_empty()
}

/// Sets one entry's tokens (a store's segment), adding the entry when absent.
fn set_entry(
    state: &mut WorkerState,
    tenant: &str,
    model: &str,
    adapter: &str,
    key: &str,
    tokens: u64,
) {
    let existing = state
        .cache
        .iter_mut()
        .find(|e| e.tenant == tenant && e.model == model && e.adapter == adapter && e.key == key);
    match existing {
        Some(entry) => entry.tokens = tokens,
        None => state.cache.push(Entry {
            tenant: tenant.to_owned(),
            model: model.to_owned(),
            adapter: adapter.to_owned(),
            key: key.to_owned(),
            tokens,
        }),
    }
}

/// Removes one entry (an evict's key); an absent one is ignored.
fn remove_entry(state: &mut WorkerState, tenant: &str, model: &str, adapter: &str, key: &str) {
    state.cache.retain(|e| {
        !(e.tenant == tenant && e.model == model && e.adapter == adapter && e.key == key)
    });
}

/// The cache change of a cache event applied whole (SPEC §3.2: `worker_epoch`,
/// `arrival_order`).
fn apply_cache_event(state: &mut WorkerState, kind: &EventKind) {
    match kind {
        EventKind::Store {
            tenant,
            model,
            adapter,
            segments,
            ..
        } => {
            // In segment order, so a repeated key's last segment wins.
            for segment in segments {
                set_entry(state, tenant, model, adapter, &segment.key, segment.tokens);
            }
        }
        EventKind::Evict {
            tenant,
            model,
            adapter,
            keys,
            ..
        } => {
            for key in keys {
                remove_entry(state, tenant, model, adapter, key);
            }
        }
        EventKind::Clear { .. } => state.cache.clear(),
        EventKind::Load { .. } | EventKind::Request { .. } => {}
    }
}
