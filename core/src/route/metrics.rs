//! Per-run metrics (SPEC.md §6.2), accumulated decision by decision.

use crate::route::candidate::Rows;
use crate::route::compiled::{KeyId, NsId, Req};
use crate::route::policy::Choice;
use crate::route::state::{Outcome, WorkerState};
use std::collections::HashMap;

/// The metrics of one run, as exported.
/// The field names are the receipt's member names (SPEC.md §6.2), so a receipt's
/// `metrics` object reads back into this type (the report does).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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

impl Metrics {
    /// Routed requests with reuse, per mille of routed requests (`hit_pm` of SPEC.md
    /// §11); 0 when nothing was routed.
    pub fn hits_per_mille(&self) -> u64 {
        (1000 * self.cache_hits)
            .checked_div(self.routed)
            .unwrap_or(0)
    }
}

/// Accumulates a run's metrics while it replays.
pub struct MetricsRecorder {
    metrics: Metrics,
    /// Work assigned to each worker (milli), by worker index.
    assigned_milli: Vec<u128>,
    latency_proxies_milli: Vec<u64>,
    /// Where each first segment (namespace and key) was last routed. Lookups only.
    last_route: HashMap<(NsId, KeyId), usize>,
}

impl MetricsRecorder {
    pub fn new(worker_count: usize) -> Self {
        MetricsRecorder {
            metrics: Metrics::default(),
            assigned_milli: vec![0; worker_count],
            latency_proxies_milli: Vec::new(),
            last_route: HashMap::new(),
        }
    }

    /// Records one decision; `workers` supplies the chosen worker's prefill rate.
    pub fn record_decision(
        &mut self,
        choice: &Choice,
        rows: &Rows,
        request: &Req,
        workers: &[WorkerState],
    ) {
        let m = &mut self.metrics;
        m.boundary_rejections += rows.reasons.iter().map(|r| r.boundary_count()).sum::<u64>();
        let Some(chosen) = choice.chosen else {
            m.rejected += 1;
            return;
        };
        m.routed += 1;
        if rows.reuse[chosen] > 0 {
            m.cache_hits += 1;
        }
        if choice.overload_escape {
            m.overload_escapes += 1;
        }
        if rows.is_dominated(chosen) {
            m.dominated_choices += 1;
        }
        m.reused_tokens += rows.reuse[chosen];
        m.recomputed_tokens += rows.recomputed[chosen];
        self.assigned_milli[chosen] += (rows.after_milli[chosen] - rows.work_milli[chosen]) as u128;
        let latency = 1000
            * (rows.queued_prefill[chosen] as u128 + rows.recomputed[chosen] as u128)
            / workers[chosen].prefill_rate as u128;
        self.latency_proxies_milli.push(latency as u64);
        if let Some(first) = request.prefix.first() {
            if let Some(previous) = self.last_route.insert((request.ns, first.key), chosen) {
                if previous != chosen {
                    m.route_churn += 1;
                }
            }
        }
    }

    /// Records a cache event's or observation's outcome.
    pub fn record_outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Applied => {}
            Outcome::StaleEpoch => self.metrics.stale_event_rejections += 1,
            Outcome::StaleObservation => self.metrics.stale_observation_rejections += 1,
        }
    }

    pub fn finish(mut self) -> Metrics {
        let m = &mut self.metrics;
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
