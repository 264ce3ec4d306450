//! One policy's run (SPEC §3.5: a clean replay from a fresh copy of the initial state)
//! and its metrics (§6.2). A [`Router`] takes the events one at a time in `(tick, seq)`
//! order and answers each with what the receipt records of it: a cache log entry, an
//! observation log entry or a decision. It keeps only the state SPEC defines: the
//! worker views of §3, the round-robin cursor of §5, and for the metrics the route
//! churn memory, the placements per worker and the latency proxies.

use std::collections::BTreeMap;

use crate::candidates::{rows, Request, Row};
use crate::model::{EpochNumbering, Event, EventKind, StaleRule, Trace};
use crate::policies::choose;
use crate::policy_kind::PolicyKind;
use crate::state::{apply_cache_event, observe, receive_epoch, CacheOutcome, WorkerView};

/// A cache log entry (§6); `worker` is the worker's position in id order.
#[derive(Debug, Clone, Copy)]
pub struct CacheLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub epoch: u64,
    pub op: &'static str,
    pub outcome: CacheOutcome,
}

/// An observation log entry (§6).
#[derive(Debug, Clone, Copy)]
pub struct ObservationLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub observed_tick: u64,
    pub outcome: &'static str,
}

/// A decision (§6); rows and `chosen` name workers by position in id order.
#[derive(Debug, Clone)]
pub struct Decision {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<usize>,
    pub route_kind: &'static str,
    pub tie_count: u64,
    pub margin_milli: u64,
    pub candidates: Vec<Row>,
}

/// What one event gave.
#[derive(Debug, Clone)]
pub enum Outcome {
    Cache(CacheLogEntry),
    Observation(ObservationLogEntry),
    Decision(Decision),
}

/// The metrics of §6.2; the later ones `Some` exactly when present.
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
    pub stale_mutation_rejections: Option<u64>,
    pub evidence_gaps: Option<u64>,
    pub evidence_gap_rows: Option<u64>,
    pub cold_reserve_exclusions: Option<u64>,
    pub cold_reserve_fallbacks: Option<u64>,
}

/// Adds to a metric that is present only off its member's default.
fn add(metric: &mut Option<u64>, amount: u64) {
    if let Some(total) = metric {
        *total = total.saturating_add(amount);
    }
}

/// The state of one policy's run between events.
pub struct Router<'t> {
    trace: &'t Trace,
    kind: PolicyKind,
    /// The workers in id order.
    views: Vec<WorkerView>,
    t_prev: u64,
    cursor: usize,
    /// §6.2 route churn: `(tenant, model, adapter, first key)` → worker position.
    churn: BTreeMap<(String, String, String, String), usize>,
    /// Per worker: Σ `after_milli − work_milli` of its placements.
    assigned: Vec<u128>,
    latencies: Vec<u128>,
    metrics: Metrics,
}

impl<'t> Router<'t> {
    /// A fresh run of `kind` over `trace`.
    pub fn new(trace: &'t Trace, kind: PolicyKind) -> Router<'t> {
        let mut views: Vec<WorkerView> = trace.workers.iter().map(WorkerView::initial).collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        let on = |yes: bool| yes.then_some(0);
        let p = &trace.policy;
        let metrics = Metrics {
            stale_mutation_rejections: on(p.stale_rule == StaleRule::KeyEpoch),
            evidence_gaps: on(p.epochs == EpochNumbering::Sequential),
            evidence_gap_rows: on(p.epochs == EpochNumbering::Sequential),
            cold_reserve_exclusions: on(p.cold_reserve_milli.is_some()),
            cold_reserve_fallbacks: on(p.cold_reserve_milli.is_some()),
            ..Metrics::default()
        };
        Router {
            trace,
            kind,
            assigned: vec![0; views.len()],
            views,
            t_prev: 0,
            cursor: 0,
            churn: BTreeMap::new(),
            latencies: Vec::new(),
            metrics,
        }
    }

    /// The worker ids in id order: what row positions refer to.
    pub fn worker_ids(&self) -> Vec<&str> {
        self.views.iter().map(|v| v.id.as_str()).collect()
    }

    /// Whether the worker at `position` (id order) has an evidence gap now (§3.6).
    pub fn has_gap(&self, position: usize) -> bool {
        self.views.get(position).is_some_and(WorkerView::has_gap)
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.views.binary_search_by(|v| v.id.as_str().cmp(id)).ok()
    }

    /// Drains every worker up to `event.tick` (§3.1), then processes the event.
    pub fn event(&mut self, event: &Event) -> Option<Outcome> {
        let dt = event.tick.saturating_sub(self.t_prev);
        for view in &mut self.views {
            view.drain(dt);
        }
        self.t_prev = event.tick;
        match &event.kind {
            EventKind::Store { worker, epoch, .. } => self.cache(event, worker, *epoch, "store"),
            EventKind::Evict { worker, epoch, .. } => self.cache(event, worker, *epoch, "evict"),
            EventKind::Clear { worker, epoch } => self.cache(event, worker, *epoch, "clear"),
            EventKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => {
                let position = self.position(worker)?;
                let view = &mut self.views[position];
                let applied = observe(view, *observed_tick, *queued_prefill, *active_decode);
                if !applied {
                    self.metrics.stale_observation_rejections += 1;
                }
                Some(Outcome::Observation(ObservationLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: position,
                    observed_tick: *observed_tick,
                    outcome: if applied {
                        "applied"
                    } else {
                        "stale_observation"
                    },
                }))
            }
            EventKind::Request { .. } => Some(Outcome::Decision(self.request(event))),
        }
    }

    /// §3.2 and §3.6 for one cache event.
    fn cache(
        &mut self,
        event: &Event,
        worker: &str,
        epoch: u64,
        op: &'static str,
    ) -> Option<Outcome> {
        let position = self.position(worker)?;
        let policy = &self.trace.policy;
        let view = &mut self.views[position];
        let outcome = apply_cache_event(view, policy.stale_rule, &event.kind, epoch, event.tick);
        if policy.epochs == EpochNumbering::Sequential {
            let resyncs = op == "clear" && outcome.outcome == "applied";
            if receive_epoch(view, epoch, resyncs) {
                add(&mut self.metrics.evidence_gaps, 1);
            }
        }
        if outcome.dropped_whole() {
            self.metrics.stale_event_rejections += 1;
        }
        add(
            &mut self.metrics.stale_mutation_rejections,
            outcome.stale_mutations,
        );
        Some(Outcome::Cache(CacheLogEntry {
            seq: event.seq,
            tick: event.tick,
            worker: position,
            epoch,
            op,
            outcome,
        }))
    }

    /// §4 and §5 for one request, then the placement of §3.4.
    fn request(&mut self, event: &Event) -> Decision {
        let EventKind::Request {
            id,
            tenant,
            model,
            adapter,
            prefix,
            prompt_tokens,
            decode_tokens,
        } = &event.kind
        else {
            unreachable!("request() is called for request events only")
        };
        let request = Request {
            tenant,
            model,
            adapter,
            prefix,
            prompt_tokens: *prompt_tokens,
            decode_tokens: *decode_tokens,
        };
        let trace = self.trace;
        let candidates = rows(
            &trace.policy,
            &trace.sharing,
            &self.views,
            &request,
            event.tick,
            self.kind,
        );
        let choice = choose(self.kind, &candidates, &mut self.cursor);
        self.count_reasons(&candidates);
        match choice.chosen {
            None => self.metrics.rejected += 1,
            Some(w) => {
                self.place(&candidates[w], *decode_tokens);
                if choice.route_kind == "overload_escape" {
                    self.metrics.overload_escapes += 1;
                }
                if choice.cold_reserve_fallback {
                    add(&mut self.metrics.cold_reserve_fallbacks, 1);
                }
                if let Some(first) = prefix.first() {
                    let name = (
                        tenant.clone(),
                        model.clone(),
                        adapter.clone(),
                        first.key.clone(),
                    );
                    if let Some(last) = self.churn.insert(name, w) {
                        if last != w {
                            self.metrics.route_churn += 1;
                        }
                    }
                }
            }
        }
        Decision {
            seq: event.seq,
            tick: event.tick,
            request: id.clone(),
            chosen: choice.chosen,
            route_kind: choice.route_kind,
            tie_count: choice.tie_count,
            margin_milli: choice.margin_milli,
            candidates,
        }
    }

    /// The reason counts of §6.2, over every row of a decision.
    fn count_reasons(&mut self, candidates: &[Row]) {
        for row in candidates {
            for reason in &row.reasons {
                match *reason {
                    "tenant_mismatch" | "model_mismatch" | "adapter_mismatch" => {
                        self.metrics.boundary_rejections += 1
                    }
                    "evidence_gap" => add(&mut self.metrics.evidence_gap_rows, 1),
                    "cold_reserve" => add(&mut self.metrics.cold_reserve_exclusions, 1),
                    _ => {}
                }
            }
        }
    }

    /// A routed request: its metrics, the latency proxy, then the placement (§3.4).
    fn place(&mut self, row: &Row, decode_tokens: u64) {
        let m = &mut self.metrics;
        m.routed += 1;
        if row.reuse > 0 {
            m.cache_hits += 1;
        }
        m.reused_tokens = m.reused_tokens.saturating_add(row.reuse);
        m.recomputed_tokens = m.recomputed_tokens.saturating_add(row.recomputed);
        if row.dominated_count > 0 {
            m.dominated_choices += 1;
        }
        let view = &mut self.views[row.worker];
        let waiting = u128::from(row.queued_prefill) + u128::from(row.recomputed);
        self.latencies
            .push(1000 * waiting / u128::from(view.prefill_rate.max(1)));
        view.queued_prefill = view.queued_prefill.saturating_add(row.recomputed);
        view.active_decode = view.active_decode.saturating_add(decode_tokens);
        let placed = u128::from(row.after_milli.saturating_sub(row.work_milli));
        self.assigned[row.worker] = self.assigned[row.worker].saturating_add(placed);
    }

    /// The metrics of the run so far, with load skew and latency figures (§6.2).
    pub fn metrics(&self) -> Metrics {
        let mut m = self.metrics.clone();
        let total = self
            .assigned
            .iter()
            .fold(0u128, |s, a| s.saturating_add(*a));
        let max = self.assigned.iter().copied().max().unwrap_or(0);
        let skew = max
            .saturating_mul(1000)
            .saturating_mul(self.views.len() as u128);
        m.load_skew_milli = skew.checked_div(total).map_or(0, to_u64);
        if !self.latencies.is_empty() {
            let n = self.latencies.len() as u128;
            let sum = self
                .latencies
                .iter()
                .fold(0u128, |s, l| s.saturating_add(*l));
            m.latency_proxy_mean_milli = to_u64(sum / n);
            let mut sorted = self.latencies.clone();
            sorted.sort_unstable();
            let rank = (95 * n).div_ceil(100).saturating_sub(1);
            m.latency_proxy_p95_milli = to_u64(sorted[usize::try_from(rank).unwrap_or(0)]);
            m.latency_proxy_max_milli = to_u64(sorted[sorted.len() - 1]);
        }
        m
    }
}

fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Events in ascending `(tick, seq)` order (§3.1).
pub fn in_order(trace: &Trace) -> Vec<&Event> {
    let mut events: Vec<&Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    events
}
