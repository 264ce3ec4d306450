//! What `kvroute report` keeps of a receipt: the aggregates its page shows and the
//! decisions some level of its detail can show, never the runs. The receipt is read
//! twice through core's streaming reader. A [`Census`] first counts each run's
//! decisions and each interesting kind, which the evenly spaced sample and the spread
//! of each kind need before they can choose; then a [`Gather`] keeps each run's
//! metrics and assigned-work series, the cohorts, the first rows of the logs, the
//! chosen rows of the shadow diff's two runs, and the decisions any of the page's
//! levels of detail keeps ([`select::levels`]), each dropped as soon as it is read
//! otherwise. A trace replayed in memory goes through the same two sinks ([`feed`]).

use super::charts::AssignedWork;
use super::diff::{self, ChosenDoc, Diff};
use super::model::{
    CacheLogDoc, DecisionDoc, ObservationLogDoc, RowDoc, RunDoc, TraceFacts, BOUNDARY_REASONS,
};
use super::select::{self, Kind, Ordinals, RunCounts, KINDS};
use super::shown::{shown_request_id, REQUEST_ID_SHOWN_MAX_BYTES};
use kvroute_core::input::{Member, Place, ReceiptSink};
use kvroute_core::route::Metrics;
use kvroute_core::Policy;
use serde::Serialize;
use std::collections::BTreeMap;

/// Rows of each log listed on the page; the page says how many there are in all.
pub const LOG_ROWS_MAX: usize = 300;

/// One run as the census found it.
#[derive(Debug, Clone, Default)]
pub struct RunCensus {
    pub policy: String,
    pub counts: RunCounts,
}

/// The first pass: each run's policy and counts, and the workers (the rows of the
/// receipt's first decision: every decision has one row per worker).
#[derive(Debug, Clone, Default)]
pub struct Census {
    pub runs: Vec<RunCensus>,
    pub worker_ids: Option<Vec<String>>,
}

impl Census {
    fn run(&mut self, run: usize) -> &mut RunCensus {
        while self.runs.len() <= run {
            self.runs.push(RunCensus::default());
        }
        &mut self.runs[run]
    }
}

/// Where [`Kind::CloseCall`] counts in [`KINDS`].
fn close_call_slot() -> usize {
    KINDS
        .iter()
        .position(|k| *k == Kind::CloseCall)
        .expect("a kind")
}

impl ReceiptSink for Census {
    // The element types of the second pass, so that any problem is named by the first.
    type Decision = DecisionDoc;
    type CacheLogEntry = CacheLogDoc;
    type ObservationLogEntry = ObservationLogDoc;
    type Metrics = Metrics;

    fn wants(&self, _: Member, _: usize, _: Option<&str>) -> bool {
        true
    }

    fn decision(&mut self, at: Place, decision: DecisionDoc) -> Result<(), String> {
        if self.worker_ids.is_none() {
            self.worker_ids = Some(
                decision
                    .candidates
                    .iter()
                    .map(|r| r.worker.clone())
                    .collect(),
            );
        }
        // A JSON run names its policy after its decisions: they are counted as any
        // policy's but round robin's, whose close calls `run_end` takes back.
        let counts = &mut self.run(at.run).counts;
        counts.decisions += 1;
        for (slot, kind) in KINDS.iter().enumerate() {
            counts.kind_totals[slot] += usize::from(kind.matches("", &decision));
        }
        Ok(())
    }

    fn run_end(&mut self, run: usize, policy: &str) -> Result<(), String> {
        let census = self.run(run);
        policy.clone_into(&mut census.policy);
        if policy == "round_robin" {
            census.counts.kind_totals[close_call_slot()] = 0;
        }
        Ok(())
    }
}

/// A decision kept for the page's detail, with its place among its run's decisions.
#[derive(Debug, Clone)]
pub struct Held {
    pub at: Ordinals,
    pub decision: DecisionDoc,
}

/// One run as the page shows it.
pub struct RunReport {
    pub policy: String,
    pub counts: RunCounts,
    pub metrics: Metrics,
    pub work_svg: String,
    /// In run order.
    pub held: Vec<Held>,
}

/// A stale-evidence row of the logs' table.
#[derive(Debug, Clone, Serialize)]
pub struct StaleRow {
    pub log: &'static str,
    pub seq: u64,
    pub tick: u64,
    pub worker: String,
    pub evidence: String,
}

/// A boundary row: a candidate row with another tenant's, model's or adapter's prefix.
#[derive(Debug, Clone, Serialize)]
pub struct BoundaryRow {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub worker: String,
    pub reasons: String,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct CohortRow {
    pub model: String,
    pub adapter: String,
    pub policy: String,
    pub requests: u64,
    pub routed: u64,
    pub hits: u64,
    pub reused: u64,
    pub recomputed: u64,
    pub latency_mean_milli: u64,
}

/// Everything the page shows of a receipt.
pub struct ReportModel {
    /// Where the receipt came from, as the page names it.
    pub source: String,
    pub trace_digest: String,
    pub receipt_digest: String,
    pub worker_ids: Vec<String>,
    pub runs: Vec<RunReport>,
    /// How many request ids of the first run the page shows cut.
    pub request_ids_cut: usize,
    /// The first run's stale-evidence rows (both logs, by tick then seq) and boundary
    /// rows, cut to [`LOG_ROWS_MAX`], with how many there are.
    pub stale_rows: Vec<StaleRow>,
    pub stale_total: usize,
    pub boundary_rows: Vec<BoundaryRow>,
    pub boundary_total: usize,
    /// Metrics by cohort, when there is a trace whose requests the receipt's match.
    pub cohorts: Option<Vec<CohortRow>>,
    /// A trace was given but no request id of the receipt is in it.
    pub cohorts_unmatched: bool,
    pub shadow: Result<Diff, String>,
    /// The Completions panel (SPEC.md §14.6), when `--completions` was given.
    pub completions: Option<super::completions::CompletionsView>,
}

/// The per-run state of the second pass.
struct RunGather {
    counts: RunCounts,
    metrics: Metrics,
    work: AssignedWork,
    held: Vec<Held>,
    /// How many decisions of each kind were read so far.
    seen: [usize; KINDS.len()],
    decisions: usize,
}

/// Per cohort and run: its row and its routed decisions' latency sum.
type Cohorts = BTreeMap<(String, String, usize), (CohortRow, u128)>;

/// The second pass (see the module doc).
pub struct Gather<'a> {
    census: &'a Census,
    facts: Option<&'a TraceFacts>,
    levels: Vec<(usize, usize)>,
    worker_ids: Vec<String>,
    shadow: (Policy, Policy),
    /// The first run of the shadow diff's baseline and candidate policies.
    shadow_runs: [Option<usize>; 2],
    chosen: [Vec<ChosenDoc>; 2],
    runs: Vec<RunGather>,
    /// Keyed by tick, seq, log (cache first) and order read: the page's order.
    stale: BTreeMap<(u64, u64, u8, usize), StaleRow>,
    stale_total: usize,
    boundary_rows: Vec<BoundaryRow>,
    boundary_total: usize,
    request_ids_cut: usize,
    cohorts: Cohorts,
    any_decision: bool,
    any_matched: bool,
}

impl<'a> Gather<'a> {
    /// The second pass over the receipt `census` counted, for a page whose detail
    /// starts at `sample` and whose shadow diff compares `shadow`.
    pub fn new(
        census: &'a Census,
        facts: Option<&'a TraceFacts>,
        sample: usize,
        shadow: (Policy, Policy),
    ) -> Gather<'a> {
        let worker_ids = census.worker_ids.clone().unwrap_or_default();
        let first_of = |policy: Policy| census.runs.iter().position(|r| r.policy == policy.name());
        let runs = census
            .runs
            .iter()
            .map(|run| RunGather {
                counts: run.counts,
                metrics: Metrics::default(),
                work: AssignedWork::new(&worker_ids, run.counts.decisions),
                held: Vec::new(),
                seen: [0; KINDS.len()],
                decisions: 0,
            })
            .collect();
        Gather {
            census,
            facts,
            levels: select::levels(sample),
            shadow,
            shadow_runs: [first_of(shadow.0), first_of(shadow.1)],
            chosen: [Vec::new(), Vec::new()],
            worker_ids,
            runs,
            stale: BTreeMap::new(),
            stale_total: 0,
            boundary_rows: Vec::new(),
            boundary_total: 0,
            request_ids_cut: 0,
            cohorts: BTreeMap::new(),
            any_decision: false,
            any_matched: false,
        }
    }

    fn stale_row(&mut self, key: (u64, u64, u8, usize), row: StaleRow) {
        self.stale_total += 1;
        self.stale.insert(key, row);
        if self.stale.len() > LOG_ROWS_MAX {
            self.stale.pop_last();
        }
    }

    /// The first run's boundary rows and cut request ids.
    fn first_run_rows(&mut self, decision: &DecisionDoc) {
        self.request_ids_cut += usize::from(decision.request.len() > REQUEST_ID_SHOWN_MAX_BYTES);
        for row in decision
            .candidates
            .iter()
            .filter(|r| r.has_boundary_reason())
        {
            self.boundary_total += 1;
            if self.boundary_rows.len() < LOG_ROWS_MAX {
                self.boundary_rows.push(BoundaryRow {
                    seq: decision.seq,
                    tick: decision.tick,
                    request: shown_request_id(&decision.request),
                    worker: row.worker.clone(),
                    reasons: boundary_reasons(row),
                });
            }
        }
    }

    fn cohort(&mut self, run: usize, decision: &DecisionDoc) {
        let Some(facts) = self.facts else {
            return;
        };
        let cohort = facts.cohort_of_request.get(&decision.request);
        self.any_decision = true;
        self.any_matched |= cohort.is_some();
        let (model, adapter) = cohort.cloned().unwrap_or_default();
        let policy = self.census.runs.get(run).map_or("", |r| r.policy.as_str());
        let (row, latency_sum) = self
            .cohorts
            .entry((model.clone(), adapter.clone(), run))
            .or_insert_with(|| {
                let row = CohortRow {
                    model,
                    adapter,
                    policy: policy.to_owned(),
                    ..CohortRow::default()
                };
                (row, 0)
            });
        row.requests += 1;
        if let Some(chosen) = decision.chosen_row() {
            row.routed += 1;
            row.hits += u64::from(chosen.reuse > 0);
            row.reused += chosen.reuse;
            row.recomputed += chosen.recomputed;
            *latency_sum += facts.latency_proxy_milli(decision).unwrap_or(0) as u128;
        }
    }

    /// What the page shows.
    pub fn finish(
        self,
        source: String,
        trace_digest: String,
        receipt_digest: String,
    ) -> ReportModel {
        let (baseline, candidate) = (self.shadow.0.name(), self.shadow.1.name());
        let shadow = match self.shadow_runs {
            [Some(_), Some(_)] => diff::diff_chosen(
                (baseline, &self.chosen[0]),
                (candidate, &self.chosen[1]),
                self.facts,
            ),
            _ => Err(format!(
                "the receipt has no {baseline} or no {candidate} run"
            )),
        };
        let cohorts_unmatched = self.facts.is_some() && self.any_decision && !self.any_matched;
        let cohorts = (self.facts.is_some() && !cohorts_unmatched).then(|| {
            self.cohorts
                .into_values()
                .map(|(mut row, latency_sum)| {
                    row.latency_mean_milli =
                        latency_sum.checked_div(row.routed as u128).unwrap_or(0) as u64;
                    row
                })
                .collect()
        });
        let worker_ids = self.worker_ids;
        let runs = self
            .runs
            .into_iter()
            .zip(&self.census.runs)
            .map(|(run, census)| RunReport {
                policy: census.policy.clone(),
                counts: run.counts,
                metrics: run.metrics,
                work_svg: run.work.svg(&census.policy, &worker_ids),
                held: run.held,
            })
            .collect();
        ReportModel {
            source,
            trace_digest,
            receipt_digest,
            worker_ids,
            runs,
            request_ids_cut: self.request_ids_cut,
            stale_rows: self.stale.into_values().collect(),
            stale_total: self.stale_total,
            boundary_rows: self.boundary_rows,
            boundary_total: self.boundary_total,
            cohorts,
            cohorts_unmatched,
            shadow,
            completions: None,
        }
    }
}

fn boundary_reasons(row: &RowDoc) -> String {
    row.reasons
        .iter()
        .filter(|r| BOUNDARY_REASONS.contains(&r.as_str()))
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

impl ReceiptSink for Gather<'_> {
    type Decision = DecisionDoc;
    type CacheLogEntry = CacheLogDoc;
    type ObservationLogEntry = ObservationLogDoc;
    type Metrics = Metrics;

    fn wants(&self, member: Member, run: usize, _: Option<&str>) -> bool {
        // Both logs are the same in every run (routing touches neither the cache
        // events nor the observations), so the first run's are the page's.
        match member {
            Member::CacheLog | Member::ObservationLog => run == 0,
            Member::Decisions | Member::Metrics => true,
        }
    }

    fn decision(&mut self, at: Place, decision: DecisionDoc) -> Result<(), String> {
        let run = at.run;
        let Some(policy) = self.census.runs.get(run).map(|r| r.policy.as_str()) else {
            return Ok(());
        };
        if run == 0 {
            self.first_run_rows(&decision);
        }
        self.cohort(run, &decision);
        for (side, shadow_run) in self.shadow_runs.into_iter().enumerate() {
            if shadow_run == Some(run) {
                self.chosen[side].push(ChosenDoc::of(&decision));
            }
        }
        let levels = &self.levels;
        let Some(gather) = self.runs.get_mut(run) else {
            return Ok(());
        };
        gather.work.add(&decision);
        let kinds = select::kinds_of(policy, &decision);
        let ordinals = Ordinals::next(gather.decisions, &kinds, &mut gather.seen);
        gather.decisions += 1;
        if gather.counts.kept_at_any(levels, &ordinals) {
            gather.held.push(Held {
                at: ordinals,
                decision,
            });
        }
        Ok(())
    }

    fn cache_log(&mut self, at: Place, e: CacheLogDoc) -> Result<(), String> {
        if e.outcome != "applied" {
            let row = StaleRow {
                log: "cache",
                seq: e.seq,
                tick: e.tick,
                evidence: format!("{} at epoch {}: {}", e.op, e.epoch, e.outcome),
                worker: e.worker,
            };
            self.stale_row((row.tick, row.seq, 0, at.index), row);
        }
        Ok(())
    }

    fn observation_log(&mut self, at: Place, e: ObservationLogDoc) -> Result<(), String> {
        if e.outcome != "applied" {
            let row = StaleRow {
                log: "load",
                seq: e.seq,
                tick: e.tick,
                evidence: format!("observed at tick {}: {}", e.observed_tick, e.outcome),
                worker: e.worker,
            };
            self.stale_row((row.tick, row.seq, 1, at.index), row);
        }
        Ok(())
    }

    fn metrics(&mut self, run: usize, metrics: Metrics) -> Result<(), String> {
        if let Some(gather) = self.runs.get_mut(run) {
            gather.metrics = metrics;
        }
        Ok(())
    }
}

/// Hands runs held in memory (a replayed trace's) to a sink, element by element, in a
/// JSON receipt's order.
pub fn feed<S>(runs: &[RunDoc], sink: &mut S) -> Result<(), String>
where
    S: ReceiptSink<
        Decision = DecisionDoc,
        CacheLogEntry = CacheLogDoc,
        ObservationLogEntry = ObservationLogDoc,
        Metrics = Metrics,
    >,
{
    let place = |run, index| Place {
        run,
        index,
        line: None,
    };
    for (r, run) in runs.iter().enumerate() {
        if sink.wants(Member::CacheLog, r, None) {
            for (i, entry) in run.cache_log.iter().enumerate() {
                sink.cache_log(place(r, i), entry.clone())?;
            }
        }
        if sink.wants(Member::Decisions, r, None) {
            for (i, decision) in run.decisions.iter().enumerate() {
                sink.decision(place(r, i), decision.clone())?;
            }
        }
        if sink.wants(Member::Metrics, r, None) {
            sink.metrics(r, run.metrics.clone())?;
        }
        if sink.wants(Member::ObservationLog, r, None) {
            for (i, entry) in run.observation_log.iter().enumerate() {
                sink.observation_log(place(r, i), entry.clone())?;
            }
        }
        sink.run_end(r, &run.policy)?;
    }
    Ok(())
}
