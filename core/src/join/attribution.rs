//! Why a request missed the cache (SPEC.md §14.7). For each completed record that says
//! how many prompt tokens were served from cache, the tokens that were not are divided
//! into parts that add up exactly: `workload` (no eligible worker's evidence held
//! them), `boundary` (only workers the run turned away held them), the two routing
//! parts (a choosable worker held them and the policy chose another, for load or not),
//! the two `elsewhere` parts (the request ran on a worker other than the chosen one,
//! holding less or, as a credit, more) and the two drift parts (`phantom`: the router
//! counted tokens on the serving worker that it did not serve; `missed`, a credit: it
//! served tokens the router did not count). The receipt side of each record is the
//! decision's [`RowsSummary`]; this module only combines it with the record, sums the
//! parts, and judges the drift gates.

use crate::join::aiperf::Completion;
pub use crate::join::attribution_sums::{Attribution, RecordParts, WorkerDrift};
use crate::join::receipt::{DecisionSummary, RowsSummary, WorkerIndex};
use crate::join::records::Records;
use std::collections::BTreeMap;

/// The parts of one record whose decision's rows are `rows`, whose cached figure is
/// `cached_figure` and whose serving row reused `served_reuse` (0 with no serving row).
pub fn record_parts(rows: &RowsSummary, cached_figure: u64, served_reuse: u64) -> RecordParts {
    let prompt = rows.prompt;
    let cached = cached_figure.min(prompt);
    let routing = rows.best_choosable.saturating_sub(rows.predicted);
    let (routing_paid_for_load, routing_other) = if rows.traded_for_load {
        (routing, 0)
    } else {
        (0, routing)
    };
    let parts = RecordParts {
        prompt,
        cached,
        workload: prompt.saturating_sub(rows.best_eligible),
        boundary: rows.best_eligible.saturating_sub(rows.best_choosable),
        routing_paid_for_load,
        routing_other,
        elsewhere_lost: rows.predicted.saturating_sub(served_reuse),
        elsewhere_gained: served_reuse.saturating_sub(rows.predicted),
        phantom: served_reuse.saturating_sub(cached),
        missed: cached.saturating_sub(served_reuse),
    };
    // A receipt replay wrote has `prompt >= best_eligible >= best_choosable >=
    // predicted`; `join` does not check receipts, so an edited one only clamps.
    let ordered = prompt >= rows.best_eligible
        && rows.best_eligible >= rows.best_choosable
        && rows.best_choosable >= rows.predicted;
    debug_assert!(!ordered || parts.add_up(), "{parts:?} of {rows:?}");
    parts
}

/// Whether the run's attribution is written at all: some matched record has a cached
/// figure or a serving worker (SPEC.md §14.3).
pub fn any_figure(decisions: &[DecisionSummary], records: &Records) -> bool {
    decisions
        .iter()
        .filter(|d| d.chosen.is_some())
        .filter_map(|d| records.record(&d.request))
        .any(|r| r.cached_tokens.is_some() || r.serving_worker.is_some())
}

/// Where an attributed record ran, as SPEC.md §14.7 reads it.
enum ServedOn<'a> {
    /// The record names no serving worker: taken to have run where it was routed.
    Unknown,
    /// The run's worker of this name and index.
    Fleet(&'a str, u32),
    /// A worker the run has no row for.
    Outside,
}

/// The attribution over `decisions` and their records.
pub fn attribute(
    decisions: &[DecisionSummary],
    records: &Records,
    workers: &WorkerIndex,
) -> Attribution {
    attribute_each(decisions, records, workers, |_, _, _| {})
}

/// [`attribute`], showing `each` every attributed record as it is summed: its decision,
/// the worker of its serving row (`None` outside the fleet) and its parts.
pub fn attribute_each(
    decisions: &[DecisionSummary],
    records: &Records,
    workers: &WorkerIndex,
    mut each: impl FnMut(&DecisionSummary, Option<&str>, &RecordParts),
) -> Attribution {
    let mut sums = Attribution::default();
    let mut by_worker: BTreeMap<&str, WorkerDrift> = BTreeMap::new();
    for decision in decisions {
        let (Some(chosen), Some(record)) = (&decision.chosen, records.record(&decision.request))
        else {
            continue;
        };
        if !completed(record) {
            continue;
        }
        let Some(cached_figure) = record.cached_tokens else {
            sums.unknown += 1;
            continue;
        };
        let served_on = match &record.serving_worker {
            None => ServedOn::Unknown,
            Some(worker) => match workers.get(worker) {
                Some(index) => ServedOn::Fleet(worker, index),
                None => ServedOn::Outside,
            },
        };
        let (serving_worker, served_reuse) = match served_on {
            ServedOn::Unknown => {
                sums.served_unknown += 1;
                (Some(chosen.worker.as_str()), chosen.rows.predicted)
            }
            ServedOn::Fleet(worker, index) => {
                sums.served_elsewhere += u64::from(worker != chosen.worker);
                (Some(worker), chosen.rows.reuse_of(index))
            }
            ServedOn::Outside => {
                sums.served_outside_fleet += 1;
                (None, 0)
            }
        };
        let parts = record_parts(&chosen.rows, cached_figure, served_reuse);
        sums.cached_over_prompt += u64::from(cached_figure > parts.prompt);
        sums.hidden += u64::from(parts.workload > 0 && chosen.rows.evidence_refused);
        sums.add(&parts);
        each(decision, serving_worker, &parts);
        if let Some(worker) = serving_worker {
            let entry = by_worker.entry(worker).or_insert_with(|| WorkerDrift {
                worker: worker.to_owned(),
                ..WorkerDrift::default()
            });
            entry.attributed += 1;
            entry.phantom += u128::from(parts.phantom);
            entry.missed += u128::from(parts.missed);
            entry.drifted += u64::from(parts.drifts());
        }
    }
    sums.drift_pm = per_mille(sums.drifted, sums.attributed);
    sums.elsewhere_pm = per_mille(
        sums.served_elsewhere + sums.served_outside_fleet,
        sums.attributed,
    );
    sums.workers = by_worker
        .into_values()
        .map(|w| WorkerDrift {
            drift_pm: per_mille(w.drifted, w.attributed),
            ..w
        })
        .collect();
    sums
}

/// A record §14.2 counts as `completed`.
fn completed(record: &Completion) -> bool {
    !record.cancelled && !record.failed && record.ttft_us.is_some() && record.tpot_us.is_some()
}

fn per_mille(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        (u128::from(part) * 1000 / u128::from(whole)) as u64
    }
}
