//! Per-run metrics (SPEC.md §6.2), accumulated decision by decision.

use crate::candidate::CandidateRow;
use crate::receipt::{CacheLogEntry, Decision, ObservationLogEntry, RouteKind};
use crate::state::{Outcome, WorkerState};
use crate::trace::Request;
use std::collections::BTreeMap;

/// The metrics of one run, as exported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
}

/// Accumulates a run's metrics while it replays.
pub struct MetricsRecorder {
    metrics: Metrics,
    /// Work assigned to each worker (milli), by worker index.
    assigned_milli: Vec<u128>,
    latency_proxies_milli: Vec<u64>,
    /// Where each first-segment namespace-key was last routed.
    last_route: BTreeMap<(String, String, String, String), usize>,
}

impl MetricsRecorder {
    pub fn new(worker_count: usize) -> Self {
        MetricsRecorder {
            metrics: Metrics::default(),
            assigned_milli: vec![0; worker_count],
            latency_proxies_milli: Vec::new(),
            last_route: BTreeMap::new(),
        }
    }

    /// Records one decision; `states` supplies the chosen worker's prefill rate.
    pub fn record_decision(
        &mut self,
        decision: &Decision,
        request: &Request,
        states: &[WorkerState],
    ) {
        let m = &mut self.metrics;
        m.boundary_rejections += decision
            .candidates
            .iter()
            .map(|r| r.reasons.boundary_count())
            .sum::<u64>();
        let Some(chosen) = decision.chosen else {
            m.rejected += 1;
            return;
        };
        let row: &CandidateRow = &decision.candidates[chosen];
        m.routed += 1;
        if row.reuse > 0 {
            m.cache_hits += 1;
        }
        if decision.route_kind == RouteKind::OverloadEscape {
            m.overload_escapes += 1;
        }
        if !row.dominated_by.is_empty() {
            m.dominated_choices += 1;
        }
        m.reused_tokens += row.reuse;
        m.recomputed_tokens += row.recomputed;
        self.assigned_milli[chosen] += (row.after_milli - row.work_milli) as u128;
        let latency = 1000 * (row.queued_prefill as u128 + row.recomputed as u128)
            / states[chosen].prefill_rate as u128;
        self.latency_proxies_milli.push(latency as u64);
        if let Some(first) = request.prefix.first() {
            let ns = &request.namespace;
            let key = (
                ns.tenant.clone(),
                ns.model.clone(),
                ns.adapter.clone(),
                first.key.clone(),
            );
            if let Some(previous) = self.last_route.insert(key, chosen) {
                if previous != chosen {
                    m.route_churn += 1;
                }
            }
        }
    }

    pub fn finish(
        mut self,
        cache_log: &[CacheLogEntry],
        observation_log: &[ObservationLogEntry],
    ) -> Metrics {
        let m = &mut self.metrics;
        m.stale_event_rejections = cache_log
            .iter()
            .filter(|e| e.outcome == Outcome::StaleEpoch)
            .count() as u64;
        m.stale_observation_rejections = observation_log
            .iter()
            .filter(|e| e.outcome == Outcome::StaleObservation)
            .count() as u64;
        let assigned_sum: u128 = self.assigned_milli.iter().sum();
        let assigned_max = self.assigned_milli.iter().copied().max().unwrap_or(0);
        let worker_count = self.assigned_milli.len() as u128;
        // Zero when nothing was assigned.
        m.load_skew_milli = (1000 * assigned_max * worker_count)
            .checked_div(assigned_sum)
            .unwrap_or(0) as u64;
        let latencies = &mut self.latency_proxies_milli;
        if !latencies.is_empty() {
            latencies.sort_unstable();
            let n = latencies.len();
            let sum: u128 = latencies.iter().map(|&l| l as u128).sum();
            m.latency_proxy_mean_milli = (sum / n as u128) as u64;
            m.latency_proxy_p95_milli = latencies[(95 * n).div_ceil(100) - 1];
            m.latency_proxy_max_milli = latencies[n - 1];
        }
        self.metrics
    }
}
