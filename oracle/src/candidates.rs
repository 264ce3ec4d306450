//! SPEC §4, candidates: one row per worker for a request, in byte order of worker id:
//! eligibility (§4.1), freshness and evidence gaps (§4.2), the reuse walk with the
//! tenant rule and boundary reasons (§4.3), load, work, after and cost (§4.4), the
//! overload cap and cold reserve of `cache_plus_load` (§4.5), dominance (§4.6), the
//! reason order (§4.7) and the Dynamo cost of `dynamo_default` (§4.8).

use crate::model::{EpochNumbering, Grant, Policy, Segment};
use crate::policy_kind::PolicyKind;
use crate::state::WorkerView;

/// The request members a row depends on.
pub struct Request<'t> {
    pub tenant: &'t str,
    pub model: &'t str,
    pub adapter: &'t str,
    pub prefix: &'t [Segment],
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
}

/// One candidate row (§6 `row`), plus the two exclusions of §4.5.
#[derive(Debug, Clone)]
pub struct Row {
    /// The worker's position in id order.
    pub worker: usize,
    pub eligible: bool,
    pub reasons: Vec<&'static str>,
    pub reuse: u64,
    pub recomputed: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub work_milli: u64,
    pub after_milli: u64,
    pub cost_milli: u64,
    /// Position (id order) of the smallest dominating worker id.
    pub dominated_by: Option<usize>,
    pub dominated_count: u64,
    pub overloaded: bool,
    pub cold_reserve: bool,
}

impl Row {
    /// In the front set of §4.6.
    pub fn in_front(&self) -> bool {
        self.eligible && !self.overloaded && !self.cold_reserve
    }
}

/// u128 → u64; the overflow rule (§1.4) keeps every figure within `B`, and a figure
/// that somehow did not fit saturates instead of panicking.
fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Two tenants share for `(model, adapter)`: equal, or one grant of exactly that model
/// and adapter lists both (§4.3; not transitive).
fn share(sharing: &[Grant], a: &str, b: &str, model: &str, adapter: &str) -> bool {
    a == b
        || sharing.iter().any(|g| {
            g.model == model
                && g.adapter == adapter
                && g.tenants.iter().any(|t| t == a)
                && g.tenants.iter().any(|t| t == b)
        })
}

/// The walk of §4.3 on one eligible, fresh worker: `(reuse, boundary reasons)` with
/// the reasons as flags `[tenant_mismatch, model_mismatch, adapter_mismatch]`.
fn walk(sharing: &[Grant], view: &WorkerView, request: &Request) -> (u128, [bool; 3]) {
    let mut reuse: u128 = 0;
    let mut boundary = [false; 3];
    for segment in request.prefix {
        let holders = view.holders(&segment.key);
        let mut r: u64 = 0;
        for ((tenant, model, adapter), tokens) in holders {
            let usable = model == request.model
                && adapter == request.adapter
                && share(
                    sharing,
                    tenant,
                    request.tenant,
                    request.model,
                    request.adapter,
                );
            if usable {
                r = r.max(*tokens);
            }
        }
        reuse += u128::from(r.min(segment.tokens));
        if r == 0 {
            for ((tenant, model, adapter), _) in holders {
                if model != request.model {
                    boundary[1] = true;
                } else if adapter != request.adapter {
                    boundary[2] = true;
                } else if !share(sharing, tenant, request.tenant, model, adapter) {
                    boundary[0] = true;
                }
            }
        }
        if r < segment.tokens {
            break;
        }
    }
    (reuse.min(u128::from(request.prompt_tokens)), boundary)
}

/// A row's figures before the cross-row parts (imbalance, cap, reserve, dominance).
struct Draft {
    eligible: bool,
    flags: [bool; 7],
    reuse: u128,
    recomputed: u128,
    work: u128,
    after: u128,
}

/// §4.1–§4.4 for one worker. `flags` are the first seven reasons of §4.7, in order.
fn draft(
    policy: &Policy,
    sharing: &[Grant],
    view: &WorkerView,
    request: &Request,
    t: u64,
) -> Draft {
    let served = view.model == request.model;
    let loaded = request.adapter == "base" || view.adapters.iter().any(|a| a == request.adapter);
    let eligible = served && loaded;
    let mut flags = [false; 7];
    flags[0] = !served;
    flags[1] = served && !loaded;
    let mut reuse = 0;
    if eligible {
        let age = t.saturating_sub(view.last_heard());
        flags[2] = policy.freshness_ticks.is_some_and(|f| age > f);
        flags[3] = policy.epochs == EpochNumbering::Sequential && view.has_gap();
        if !flags[2] && !flags[3] {
            let (walked, boundary) = walk(sharing, view, request);
            reuse = walked;
            flags[4..7].copy_from_slice(&boundary);
        }
    }
    let recomputed = u128::from(request.prompt_tokens) - reuse;
    let dw = u128::from(policy.decode_weight_milli);
    // The overflow rule keeps these far below 2^128; saturating so no input panics.
    let work = (1000 * u128::from(view.queued_prefill))
        .saturating_add(dw.saturating_mul(u128::from(view.active_decode)));
    let after = work
        .saturating_add(1000 * recomputed)
        .saturating_add(dw.saturating_mul(u128::from(request.decode_tokens)));
    Draft {
        eligible,
        flags,
        reuse,
        recomputed,
        work,
        after,
    }
}

/// §4.8: `1000·prefill_tokens + 1000·b·decode_blocks`.
fn dynamo_cost(b: u64, reuse: u128, view: &WorkerView, prompt_tokens: u64) -> u128 {
    let b = u128::from(b.max(1));
    let overlap = b * (reuse / b);
    let prefill =
        (u128::from(view.queued_prefill) + u128::from(prompt_tokens)).saturating_sub(overlap);
    let decode_blocks = u128::from(view.active_decode).div_ceil(b);
    1000 * prefill + 1000 * b * decode_blocks
}

const REASONS: [&str; 7] = [
    "model_not_served",
    "adapter_not_loaded",
    "stale_view",
    "evidence_gap",
    "tenant_mismatch",
    "model_mismatch",
    "adapter_mismatch",
];

/// Every row of a request at tick `t` under `kind`, in worker-id order (§4).
pub fn rows(
    policy: &Policy,
    sharing: &[Grant],
    views: &[WorkerView],
    request: &Request,
    t: u64,
    kind: PolicyKind,
) -> Vec<Row> {
    let drafts: Vec<Draft> = views
        .iter()
        .map(|v| draft(policy, sharing, v, request, t))
        .collect();
    let n = drafts.iter().filter(|d| d.eligible).count() as u128;
    let s: u128 = drafts
        .iter()
        .filter(|d| d.eligible)
        .fold(0u128, |sum, d| sum.saturating_add(d.after));
    let ip = u128::from(policy.imbalance_penalty_milli);
    let cap = match kind {
        PolicyKind::CachePlusLoad => policy.max_queued_work.map(|c| 1000 * u128::from(c)),
        _ => None,
    };
    let threshold = cap.and_then(|c| {
        policy
            .cold_reserve_milli
            .map(|r| c.saturating_sub(u128::from(r)))
    });
    let mut rows = Vec::with_capacity(views.len());
    for (worker, (view, d)) in views.iter().zip(&drafts).enumerate() {
        let cost = match (kind, policy.dynamo_block_tokens) {
            (PolicyKind::DynamoDefault, Some(b)) => {
                dynamo_cost(b, d.reuse, view, request.prompt_tokens)
            }
            _ => {
                let imbalance = if n == 0 {
                    0
                } else {
                    ip.saturating_mul(n.saturating_mul(d.after).saturating_sub(s)) / (1000 * n)
                };
                (1000 * d.recomputed)
                    .saturating_add(d.work)
                    .saturating_add(imbalance)
            }
        };
        let overloaded = d.eligible && cap.is_some_and(|c| d.after > c);
        let cold_reserve =
            d.eligible && !overloaded && d.reuse > 0 && threshold.is_some_and(|h| d.after > h);
        let mut reasons: Vec<&'static str> = REASONS
            .iter()
            .zip(d.flags)
            .filter(|(_, on)| *on)
            .map(|(r, _)| *r)
            .collect();
        if overloaded {
            reasons.push("overloaded");
        }
        if cold_reserve {
            reasons.push("cold_reserve");
        }
        rows.push(Row {
            worker,
            eligible: d.eligible,
            reasons,
            reuse: to_u64(d.reuse),
            recomputed: to_u64(d.recomputed),
            queued_prefill: view.queued_prefill,
            active_decode: view.active_decode,
            work_milli: to_u64(d.work),
            after_milli: to_u64(d.after),
            cost_milli: to_u64(cost),
            dominated_by: None,
            dominated_count: 0,
            overloaded,
            cold_reserve,
        });
    }
    dominance(&mut rows);
    rows
}

/// §4.6 over the front set. Rows are in id order, so the first dominator found is the
/// one with the smallest id.
fn dominance(rows: &mut [Row]) {
    for a in 0..rows.len() {
        if !rows[a].in_front() {
            continue;
        }
        let (mut by, mut count) = (None, 0u64);
        for b in 0..rows.len() {
            let (ra, rb) = (&rows[a], &rows[b]);
            if b == a || !rb.in_front() {
                continue;
            }
            let no_worse = rb.reuse >= ra.reuse && rb.after_milli <= ra.after_milli;
            let better = rb.reuse > ra.reuse || rb.after_milli < ra.after_milli;
            if no_worse && better {
                by = by.or(Some(b));
                count += 1;
            }
        }
        rows[a].dominated_by = by;
        rows[a].dominated_count = count;
    }
}
