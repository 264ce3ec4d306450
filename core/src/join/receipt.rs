//! What `join` reads of a receipt (SPEC.md §14.1): one run's decisions, each as its
//! request id, tick, chosen worker and the chosen row's `recomputed` and `work_milli`,
//! and its rows reduced by [`rows_summary`] to the few integers attribution reads
//! (§14.7); a decision's rows are held only while it is read. The receipt is streamed by [`crate::input::receipt`], in either layout, and every
//! other run, row and log is skipped as it is read, so memory follows the run's
//! decisions, not the receipt's size.
//!
//! In a canonical run object `decisions` comes before `policy` (members are sorted), so
//! there the run is picked by its place: runs are always in [`Policy::ALL`] order (§6),
//! and the picked run's own `policy` is checked once it is read. A JSON Lines line
//! names its policy, so there the run is picked by name.

use crate::input::receipt::{self as reader, Layout, Member, Place, ReceiptSink};
use crate::route::policy::{choosable_rows, Policy, RouteKind};
use crate::route::reason::{Reason, Reasons};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::btree_map::{BTreeMap, Entry};
use std::io::BufRead;

/// One decision as `join` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionSummary {
    pub request: String,
    pub tick: u64,
    /// The chosen worker and its row's figures, `None` for a rejected request.
    pub chosen: Option<ChosenRow>,
}

/// The chosen row of a routed decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenRow {
    pub worker: String,
    pub recomputed: u64,
    pub work_milli: u64,
    /// What attribution reads of every row of the decision (SPEC.md §14.7).
    pub rows: RowsSummary,
}

/// A routed decision's rows reduced to the few figures SPEC.md §14.7 reads, so that
/// memory follows the decisions, not decisions times workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowsSummary {
    /// The request's prompt tokens: the chosen row's `reuse + recomputed`.
    pub prompt: u64,
    /// The largest `reuse` of the eligible rows.
    pub best_eligible: u64,
    /// The largest `reuse` of the rows the run could choose.
    pub best_choosable: u64,
    /// The chosen row's `reuse`.
    pub predicted: u64,
    /// Whether the policy's load score made it pass over the best holder.
    pub traded_for_load: bool,
    /// Whether some eligible row's evidence was refused (`stale_view`, a boundary
    /// reason, ...), which the receipt cannot measure.
    pub evidence_refused: bool,
    /// `(worker index in [`ReceiptRun::workers`], reuse)` of each row with `reuse`
    /// above 0, by worker index.
    pub reuse_rows: Box<[(u32, u64)]>,
}

impl RowsSummary {
    /// The `reuse` of the row of worker `index`; 0 for a row not kept (none reused).
    pub fn reuse_of(&self, index: u32) -> u64 {
        self.reuse_rows
            .binary_search_by_key(&index, |&(i, _)| i)
            .map_or(0, |at| self.reuse_rows[at].1)
    }
}

/// The run read from a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRun {
    pub receipt_digest: String,
    /// The digest of the trace the receipt was replayed from, for `--trace` (§14.1).
    pub trace_digest: String,
    pub policy: Policy,
    /// Every run the receipt has, in its order, for the error naming them.
    pub policies: Vec<String>,
    pub decisions: Vec<DecisionSummary>,
    /// The run's workers, indexed as [`RowsSummary::reuse_rows`] names them.
    pub workers: WorkerIndex,
}

/// The workers met in the run's rows, each given the next index when first met.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerIndex {
    by_name: BTreeMap<String, u32>,
}

impl WorkerIndex {
    /// The index of `worker`, given one when it is first met.
    fn index(&mut self, worker: &str) -> u32 {
        if let Some(&index) = self.by_name.get(worker) {
            return index;
        }
        let index = self.by_name.len() as u32;
        self.by_name.insert(worker.to_owned(), index);
        index
    }

    /// The index of `worker` when the run has a row for it.
    pub fn get(&self, worker: &str) -> Option<u32> {
        self.by_name.get(worker).copied()
    }
}

/// Why a receipt gave no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptError {
    /// Not §6's shape: the reason.
    NotAReceipt(String),
    /// The receipt has no such run: its runs.
    NoSuchRun(Vec<String>),
}

#[derive(Deserialize)]
struct Row {
    worker: String,
    eligible: bool,
    reasons: Vec<String>,
    reuse: u64,
    recomputed: u64,
    work_milli: u64,
    after_milli: u64,
    cost_milli: u64,
}

#[derive(Deserialize)]
struct Decision {
    request: String,
    tick: u64,
    chosen: Option<String>,
    route_kind: String,
    candidates: Vec<Row>,
}

impl Decision {
    fn summary(self, policy: Policy, workers: &mut WorkerIndex) -> Result<DecisionSummary, String> {
        let chosen = match self.chosen {
            None => None,
            Some(worker) => {
                let at = self
                    .candidates
                    .iter()
                    .position(|row| row.worker == worker)
                    .ok_or_else(|| {
                        format!(
                            "decision of request {}: the chosen worker {} has no row",
                            crate::input::json::quote_str(&self.request),
                            crate::input::json::quote_str(&worker)
                        )
                    })?;
                let escape = self.route_kind == RouteKind::OverloadEscape.name();
                let rows = rows_summary(policy, escape, at, &self.candidates, workers);
                let row = &self.candidates[at];
                Some(ChosenRow {
                    worker,
                    recomputed: row.recomputed,
                    work_milli: row.work_milli,
                    rows,
                })
            }
        };
        Ok(DecisionSummary {
            request: self.request,
            tick: self.tick,
            chosen,
        })
    }
}

/// A routed decision's rows as SPEC.md §14.7 reads them: `chosen` is the chosen row's
/// place, `overload_escape` whether the decision's `route_kind` says so. Which rows the
/// run could choose is the policy's own rule ([`choosable_rows`]).
fn rows_summary(
    policy: Policy,
    overload_escape: bool,
    chosen: usize,
    rows: &[Row],
    workers: &mut WorkerIndex,
) -> RowsSummary {
    let reasons: Vec<Reasons> = rows
        .iter()
        .map(|row| {
            let mut reasons = Reasons::default();
            // A name this build does not know cannot change which tier a row is in.
            row.reasons
                .iter()
                .filter_map(|name| Reason::from_name(name))
                .for_each(|reason| reasons.insert(reason));
            reasons
        })
        .collect();
    let choosable = choosable_rows(policy, &reasons);
    let best_of = |keep: &dyn Fn(usize) -> bool| {
        (0..rows.len())
            .filter(|&w| keep(w))
            .map(|w| rows[w].reuse)
            .max()
            .unwrap_or(0)
    };
    let best_eligible = best_of(&|w| rows[w].eligible);
    let best_choosable = best_of(&|w| choosable[w]);
    // The policy's load score (SPEC.md §14.7); round_robin and longest_prefix have none.
    let score = |row: &Row| match policy {
        _ if overload_escape => Some(row.after_milli),
        Policy::LeastLoad => Some(row.work_milli),
        Policy::CachePlusLoad | Policy::DynamoDefault => Some(row.cost_milli),
        Policy::RoundRobin | Policy::LongestPrefix => None,
    };
    let best_holder = (0..rows.len())
        .filter(|&w| choosable[w] && rows[w].reuse == best_choosable)
        .min_by(|&a, &b| rows[a].worker.as_bytes().cmp(rows[b].worker.as_bytes()));
    let traded_for_load = match (score(&rows[chosen]), best_holder.map(|h| score(&rows[h]))) {
        (Some(chosen_score), Some(Some(holder_score))) => chosen_score < holder_score,
        _ => false,
    };
    let evidence_refused = (0..rows.len())
        .any(|w| rows[w].eligible && reasons[w].intersects(Reasons::EVIDENCE_REFUSED));
    let mut reuse_rows: Vec<(u32, u64)> = rows
        .iter()
        .map(|row| (workers.index(&row.worker), row.reuse))
        .filter(|&(_, reuse)| reuse > 0)
        .collect();
    reuse_rows.sort_unstable();
    RowsSummary {
        prompt: rows[chosen].reuse.saturating_add(rows[chosen].recomputed),
        best_eligible,
        best_choosable,
        predicted: rows[chosen].reuse,
        traded_for_load,
        evidence_refused,
        reuse_rows: reuse_rows.into_boxed_slice(),
    }
}

/// The sink that keeps one run's decision summaries.
struct PickedRun {
    policy: Policy,
    /// The run's place in a JSON receipt.
    place: usize,
    decisions: Vec<DecisionSummary>,
    /// Where each kept decision was read, for the error naming a repeated request id.
    places: Vec<Place>,
    workers: WorkerIndex,
}

impl PickedRun {
    fn picks(&self, run: usize, policy: Option<&str>) -> bool {
        policy.map_or(run == self.place, |name| name == self.policy.name())
    }
}

impl ReceiptSink for PickedRun {
    type Decision = Decision;
    type CacheLogEntry = IgnoredAny;
    type ObservationLogEntry = IgnoredAny;
    type Metrics = IgnoredAny;

    fn wants(&self, member: Member, run: usize, policy: Option<&str>) -> bool {
        member == Member::Decisions && self.picks(run, policy)
    }

    fn decision(&mut self, place: Place, decision: Decision) -> Result<(), String> {
        self.decisions
            .push(decision.summary(self.policy, &mut self.workers)?);
        self.places.push(place);
        Ok(())
    }

    fn run_end(&mut self, run: usize, policy: &str) -> Result<(), String> {
        // A JSON receipt's run at the place of another policy: not this one.
        if run == self.place
            && policy != self.policy.name()
            && self.places.iter().all(|at| at.line.is_none())
        {
            self.decisions.clear();
            self.places.clear();
            self.workers = WorkerIndex::default();
        }
        Ok(())
    }
}

/// Reads `policy`'s run from a receipt, canonical or JSON Lines (told apart by the
/// first line's `format`).
pub fn read_run(receipt: impl BufRead, policy: Policy) -> Result<ReceiptRun, ReceiptError> {
    let mut picked = PickedRun {
        policy,
        place: Policy::ALL.iter().position(|&p| p == policy).unwrap_or(0),
        decisions: Vec::new(),
        places: Vec::new(),
        workers: WorkerIndex::default(),
    };
    let outline = reader::read(receipt, &mut picked).map_err(ReceiptError::NotAReceipt)?;
    let found = match outline.layout {
        Layout::Json => outline.policies.get(picked.place).map(String::as_str),
        Layout::JsonLines => outline
            .policies
            .iter()
            .map(String::as_str)
            .find(|p| *p == policy.name()),
    };
    if found != Some(policy.name()) {
        return Err(ReceiptError::NoSuchRun(outline.policies));
    }
    if let Some((first, second)) = first_repeat(&picked.decisions) {
        let name = |at: &Place| match at.line {
            Some(line) => format!("line {line}"),
            None => format!("runs[{}].decisions[{}]", at.run, at.index),
        };
        let (first_at, second_at) = (&picked.places[first], &picked.places[second]);
        let path = match second_at.line {
            Some(line) => format!("line {line}: decisions.request"),
            None => format!("{}.request", name(second_at)),
        };
        return Err(repeated_request(
            &path,
            &picked.decisions[second].request,
            &name(first_at),
        ));
    }
    Ok(ReceiptRun {
        receipt_digest: outline.receipt_digest,
        trace_digest: outline.trace_digest,
        policy,
        policies: outline.policies,
        decisions: picked.decisions,
        workers: picked.workers,
    })
}

/// The first decision whose request id an earlier decision of the run already has, as
/// (the earlier one's index, its index). A run routes each request of its trace once
/// (SPEC.md §14.1), so a repeat is a receipt that was edited or spliced: joined, its
/// one completion would match each of the decisions.
fn first_repeat(decisions: &[DecisionSummary]) -> Option<(usize, usize)> {
    let mut first_of_request: BTreeMap<&str, usize> = BTreeMap::new();
    decisions.iter().enumerate().find_map(|(i, decision)| {
        match first_of_request.entry(decision.request.as_str()) {
            Entry::Occupied(first) => Some((*first.get(), i)),
            Entry::Vacant(slot) => {
                slot.insert(i);
                None
            }
        }
    })
}

fn repeated_request(path: &str, request: &str, first: &str) -> ReceiptError {
    ReceiptError::NotAReceipt(format!(
        "{path}: repeated request id {}, first at {first}: a run's request ids are unique",
        crate::input::json::quote_str(request)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::compiled::Compiled;
    use crate::{parse_trace, replay, LAB_TRACE_JSON};

    /// The lab receipt, canonical, with cache_plus_load's decision 5 given decision 2's
    /// request id.
    fn canonical_with_a_repeat() -> Vec<u8> {
        let receipt = crate::replay_bytes(LAB_TRACE_JSON.as_bytes()).unwrap();
        let mut receipt: serde_json::Value = serde_json::from_slice(&receipt).unwrap();
        let decisions = &mut receipt["runs"][3]["decisions"];
        decisions[5]["request"] = decisions[2]["request"].clone();
        serde_json::to_vec(&receipt).unwrap()
    }

    /// The lab receipt as JSON Lines, with the same repeat.
    fn lines_with_a_repeat() -> (String, usize, usize) {
        let trace = parse_trace(LAB_TRACE_JSON.as_bytes()).unwrap();
        let digest = crate::output::canonical::trace_digest(&trace);
        let mut bytes = Vec::new();
        replay::write_jsonl(&Compiled::new(&trace), &digest, &mut bytes).unwrap();
        let mut lines: Vec<String> = String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let of_run: Vec<usize> = (0..lines.len())
            .filter(|&i| {
                lines[i].starts_with(r#"{"decisions":"#)
                    && lines[i].ends_with(r#""policy":"cache_plus_load"}"#)
            })
            .collect();
        let request = |line: &str| -> String {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            line["decisions"]["request"].as_str().unwrap().to_owned()
        };
        let (first, second) = (of_run[2], of_run[5]);
        let (wanted, other) = (request(&lines[first]), request(&lines[second]));
        lines[second] = lines[second].replace(
            &format!(r#""request":"{other}""#),
            &format!(r#""request":"{wanted}""#),
        );
        (lines.join("\n") + "\n", first + 1, second + 1)
    }

    #[test]
    fn a_run_that_repeats_a_request_id_is_not_a_receipt() {
        let receipt = canonical_with_a_repeat();
        let error = read_run(&receipt[..], Policy::CachePlusLoad).unwrap_err();
        let ReceiptError::NotAReceipt(reason) = error else {
            panic!("{error:?}")
        };
        assert!(
            reason.starts_with("runs[3].decisions[5].request: repeated request id \"")
                && reason
                    .ends_with("first at runs[3].decisions[2]: a run's request ids are unique"),
            "{reason}"
        );
        // The other runs are not read, and theirs are unique.
        assert!(read_run(&receipt[..], Policy::LeastLoad).is_ok());

        let (lines, first, second) = lines_with_a_repeat();
        let error = read_run(lines.as_bytes(), Policy::CachePlusLoad).unwrap_err();
        let ReceiptError::NotAReceipt(reason) = error else {
            panic!("{error:?}")
        };
        assert!(
            reason.starts_with(&format!(
                "line {second}: decisions.request: repeated request id"
            )) && reason.contains(&format!("first at line {first}:")),
            "{reason}"
        );
    }
}
