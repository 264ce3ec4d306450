//! Per-run metrics (SPEC.md §6.2), accumulated decision by decision.

use crate::input::trace::{EpochsMode, PolicyParams, StaleRule};
use crate::route::candidate::{Choice, Rows};
use crate::route::compiled::{KeyId, NsId, Req};
use crate::route::reason::{Reason, Reasons};
use crate::route::state::{CacheOutcome, Outcome, WorkerState};
use rustc_hash::FxHashMap;

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
    /// The metrics below exist only when their policy member is off its default
    /// (SPEC.md §6.2), so a default trace's metrics object is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_mutation_rejections: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_gaps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_gap_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_reserve_exclusions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_reserve_fallbacks: Option<u64>,
}

impl Metrics {
    /// Routed requests with reuse, per mille of routed requests (`hit_pm` of SPEC.md
    /// §11); 0 when nothing was routed.
    pub fn hits_per_mille(&self) -> u64 {
        (1000 * self.cache_hits)
            .checked_div(self.routed)
            .unwrap_or(0)
    }

    /// Every exported member with its value, in canonical (byte) order of the names:
    /// the fifteen of contract version 1 and whichever optional ones are present.
    pub fn members(&self) -> Vec<(&'static str, u64)> {
        let mut members = vec![
            ("boundary_rejections", self.boundary_rejections),
            ("cache_hits", self.cache_hits),
            ("dominated_choices", self.dominated_choices),
            ("latency_proxy_max_milli", self.latency_proxy_max_milli),
            ("latency_proxy_mean_milli", self.latency_proxy_mean_milli),
            ("latency_proxy_p95_milli", self.latency_proxy_p95_milli),
            ("load_skew_milli", self.load_skew_milli),
            ("overload_escapes", self.overload_escapes),
            ("recomputed_tokens", self.recomputed_tokens),
            ("rejected", self.rejected),
            ("reused_tokens", self.reused_tokens),
            ("route_churn", self.route_churn),
            ("routed", self.routed),
            ("stale_event_rejections", self.stale_event_rejections),
            (
                "stale_observation_rejections",
                self.stale_observation_rejections,
            ),
        ];
        let optional = [
            ("stale_mutation_rejections", self.stale_mutation_rejections),
            ("evidence_gaps", self.evidence_gaps),
            ("evidence_gap_rows", self.evidence_gap_rows),
            ("cold_reserve_exclusions", self.cold_reserve_exclusions),
            ("cold_reserve_fallbacks", self.cold_reserve_fallbacks),
        ];
        members.extend(optional.into_iter().filter_map(|(n, v)| v.map(|v| (n, v))));
        members.sort_unstable_by_key(|&(name, _)| name);
        members
    }
}

/// Accumulates a run's metrics while it replays.
pub struct MetricsRecorder {
    metrics: Metrics,
    /// Work assigned to each worker (milli), by worker index.
    assigned_milli: Vec<u128>,
    latency_proxies_milli: Vec<u64>,
    /// Where each first segment (namespace and key) was last routed. Lookups only, so
    /// the map's order never shows; Fx rather than SipHash, since the keys are the
    /// trace's own small integers and the map is touched once per routed decision.
    last_route: FxHashMap<(NsId, KeyId), usize>,
}

impl MetricsRecorder {
    pub fn new(worker_count: usize, params: &PolicyParams) -> Self {
        let present = |on: bool| on.then_some(0);
        let key_rule = params.stale_rule == StaleRule::KeyEpoch;
        let sequential = params.epochs == EpochsMode::Sequential;
        let reserve = params.cold_reserve_milli.is_some();
        MetricsRecorder {
            metrics: Metrics {
                stale_mutation_rejections: present(key_rule),
                evidence_gaps: present(sequential),
                evidence_gap_rows: present(sequential),
                cold_reserve_exclusions: present(reserve),
                cold_reserve_fallbacks: present(reserve),
                ..Metrics::default()
            },
            assigned_milli: vec![0; worker_count],
            latency_proxies_milli: Vec::new(),
            last_route: FxHashMap::default(),
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
        // Boundary reasons are rare: one OR over the rows says whether there are any
        // to count.
        let all_reasons = rows
            .reasons
            .iter()
            .fold(Reasons::default(), |all, &r| all.union(r));
        if all_reasons.boundary_count() > 0 {
            m.boundary_rejections += rows.reasons.iter().map(|r| r.boundary_count()).sum::<u64>();
        }
        let count = |reason: Reason| rows.reasons.iter().filter(|r| r.contains(reason)).count();
        if let Some(gap_rows) = &mut m.evidence_gap_rows {
            *gap_rows += count(Reason::EvidenceGap) as u64;
        }
        if let Some(exclusions) = &mut m.cold_reserve_exclusions {
            *exclusions += count(Reason::ColdReserve) as u64;
        }
        if choice.reserve_fallback {
            if let Some(fallbacks) = &mut m.cold_reserve_fallbacks {
                *fallbacks += 1;
            }
        }
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
        let dominated = match choice.chosen_dominated {
            Some(known) => {
                // Debug builds (every test) check the policy's shortcut against the
                // test of every row.
                debug_assert_eq!(known, rows.is_dominated(chosen), "row {chosen}");
                known
            }
            None => rows.is_dominated(chosen),
        };
        if dominated {
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
            Outcome::Applied | Outcome::PartlyStaleKeyEpoch => {}
            Outcome::StaleEpoch | Outcome::StaleKeyEpoch => {
                self.metrics.stale_event_rejections += 1
            }
            Outcome::StaleObservation => self.metrics.stale_observation_rejections += 1,
        }
    }

    /// Records a cache event's outcome, rejected mutations and gap (SPEC.md §6.2).
    pub fn record_cache_outcome(&mut self, outcome: &CacheOutcome) {
        self.record_outcome(outcome.outcome);
        if let Some(stale) = &mut self.metrics.stale_mutation_rejections {
            *stale += outcome.stale_mutations;
        }
        if let (Some(gaps), true) = (&mut self.metrics.evidence_gaps, outcome.gap_opened) {
            *gaps += 1;
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
            let n = latencies.len();
            let sum: u128 = latencies.iter().map(|&l| l as u128).sum();
            m.latency_proxy_mean_milli = (sum / n as u128) as u64;
            m.latency_proxy_max_milli = latencies.iter().copied().max().unwrap_or(0);
            // The p95 is the sorted list's element at that rank; selecting it costs
            // O(n) where sorting the list cost O(n log n), 6% of a small fleet's run.
            let (_, &mut p95, _) = latencies.select_nth_unstable((95 * n).div_ceil(100) - 1);
            m.latency_proxy_p95_milli = p95;
        }
        self.metrics
    }
}
