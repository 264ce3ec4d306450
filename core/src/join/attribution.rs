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

use crate::input::json::quote_str;
use crate::join::aiperf::Completion;
use crate::join::figures::Records;
use crate::join::receipt::{DecisionSummary, RowsSummary, WorkerIndex};
use crate::join::Join;
use std::collections::BTreeMap;

/// One attributed record's parts, each from 0 to `prompt`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordParts {
    pub prompt: u64,
    pub cached: u64,
    pub workload: u64,
    pub boundary: u64,
    pub routing_paid_for_load: u64,
    pub routing_other: u64,
    pub elsewhere_lost: u64,
    pub elsewhere_gained: u64,
    pub phantom: u64,
    pub missed: u64,
}

impl RecordParts {
    /// Whether the router's picture of the serving worker's cache and the record
    /// disagree.
    pub fn drifts(&self) -> bool {
        self.phantom > 0 || self.missed > 0
    }
}

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

impl RecordParts {
    /// `prompt − cached` equals the parts, credits taken off (SPEC.md §14.7).
    fn add_up(&self) -> bool {
        let lost = i128::from(self.prompt) - i128::from(self.cached);
        let parts = i128::from(self.workload)
            + i128::from(self.boundary)
            + i128::from(self.routing_paid_for_load)
            + i128::from(self.routing_other)
            + i128::from(self.elsewhere_lost)
            - i128::from(self.elsewhere_gained)
            + i128::from(self.phantom)
            - i128::from(self.missed);
        lost == parts
    }
}

/// One serving worker's drift figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerDrift {
    pub worker: String,
    pub attributed: u64,
    pub phantom: u128,
    pub missed: u128,
    pub drifted: u64,
    pub drift_pm: u64,
}

/// The attribution of a run or a cohort (SPEC.md §14.7): counts, token sums and the
/// summed parts (exact; the document saturates them at `B`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub attributed: u64,
    pub unknown: u64,
    pub cached_over_prompt: u64,
    pub served_elsewhere: u64,
    pub served_outside_fleet: u64,
    pub served_unknown: u64,
    pub prompt_tokens: u128,
    pub cached_tokens: u128,
    pub lost_tokens: u128,
    pub workload: u128,
    pub boundary: u128,
    pub routing_paid_for_load: u128,
    pub routing_other: u128,
    pub elsewhere_lost: u128,
    pub elsewhere_gained: u128,
    pub phantom: u128,
    pub missed: u128,
    pub hidden: u64,
    pub drifted: u64,
    pub drift_pm: u64,
    pub elsewhere_pm: u64,
    pub workers: Vec<WorkerDrift>,
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

impl Attribution {
    fn add(&mut self, parts: &RecordParts) {
        self.attributed += 1;
        self.prompt_tokens += u128::from(parts.prompt);
        self.cached_tokens += u128::from(parts.cached);
        self.lost_tokens += u128::from(parts.prompt - parts.cached);
        self.workload += u128::from(parts.workload);
        self.boundary += u128::from(parts.boundary);
        self.routing_paid_for_load += u128::from(parts.routing_paid_for_load);
        self.routing_other += u128::from(parts.routing_other);
        self.elsewhere_lost += u128::from(parts.elsewhere_lost);
        self.elsewhere_gained += u128::from(parts.elsewhere_gained);
        self.phantom += u128::from(parts.phantom);
        self.missed += u128::from(parts.missed);
        self.drifted += u64::from(parts.drifts());
    }
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

/// The gates `join` was given, each a per-mille from 0 to 1000 (SPEC.md §14.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gates {
    pub max_drift_pm: Option<u64>,
    pub max_elsewhere_pm: Option<u64>,
}

/// One line for each figure above its gate, in SPEC.md §14.7's order, or the lines
/// saying a gate cannot be judged when nothing of the run is attributed. Names are
/// quoted as §2.2 quotes them; the caller escapes them for its terminal. Empty when
/// every gate passed.
pub fn gate_lines(join: &Join, gates: Gates) -> Vec<String> {
    let run = join.figures.attribution.as_ref();
    if run.is_none_or(|a| a.attributed == 0) {
        let mut lines = Vec::new();
        if gates.max_drift_pm.is_some() {
            lines.push(cannot_judge("--max-drift-pm", "drift"));
        }
        if gates.max_elsewhere_pm.is_some() {
            lines.push(cannot_judge("--max-elsewhere-pm", "served elsewhere"));
        }
        return lines;
    }
    let mut subjects: Vec<(String, &Attribution)> = Vec::new();
    if let Some(run) = run {
        subjects.push((format!("run {}", join.run.name()), run));
    }
    for cohort in join.figures.cohorts.iter().flatten() {
        if let Some(attribution) = &cohort.figures.attribution {
            let about = format!(
                "cohort {} {} {}",
                quote_str(&cohort.tenant),
                quote_str(&cohort.model),
                quote_str(&cohort.adapter)
            );
            subjects.push((about, attribution));
        }
    }
    let mut lines = Vec::new();
    if let Some(max) = gates.max_drift_pm {
        let above = |pm: u64, attributed: u64, about: &str| {
            (pm > max).then(|| {
                format!(
                    "kvroute join: drift {pm}‰ of {attributed} attributed records is above \
                     --max-drift-pm {max} ({about})"
                )
            })
        };
        for (about, a) in &subjects {
            lines.extend(above(a.drift_pm, a.attributed, about));
        }
        for w in run.map_or(&[][..], |a| &a.workers[..]) {
            let about = format!("worker {}", quote_str(&w.worker));
            lines.extend(above(w.drift_pm, w.attributed, &about));
        }
    }
    if let Some(max) = gates.max_elsewhere_pm {
        for (about, a) in &subjects {
            if a.elsewhere_pm > max {
                lines.push(format!(
                    "kvroute join: served elsewhere {}‰ of {} attributed records is above \
                     --max-elsewhere-pm {max} ({about})",
                    a.elsewhere_pm, a.attributed
                ));
            }
        }
    }
    lines
}

fn cannot_judge(option: &str, figure: &str) -> String {
    format!(
        "kvroute join: {option}: no completed record carries cached tokens, so {figure} \
         cannot be judged"
    )
}
