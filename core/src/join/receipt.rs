//! What `join` reads of a receipt (SPEC.md §14.1): one run's decisions, each as its
//! request id, tick, chosen worker and the chosen row's `recomputed` and `work_milli`,
//! and its rows reduced by [`rows_summary`] to the few integers attribution reads
//! (§14.7). The receipt is streamed (a canonical receipt through one serde pass, a JSON
//! Lines receipt a line at a time); a decision's rows are held only while it is read,
//! and every other run and log is skipped, so memory follows the run's decisions, not
//! the receipt's size.
//!
//! In a canonical run object `decisions` comes before `policy` (members are sorted), so
//! the run is picked by its place: runs are always in [`Policy::ALL`] order (§6), and
//! the picked run's own `policy` is checked once it is read.

use crate::route::policy::{choosable_rows, Policy, RouteKind};
use crate::route::reason::{Reason, Reasons};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt;
use std::io::{BufRead, Read};

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

/// Reads `policy`'s run from a receipt, canonical or JSON Lines (told apart by the
/// first line's `format`).
pub fn read_run(receipt: impl BufRead, policy: Policy) -> Result<ReceiptRun, ReceiptError> {
    let mut receipt = receipt;
    let head = receipt
        .fill_buf()
        .map_err(|e| ReceiptError::NotAReceipt(format!("cannot read it: {e}")))?;
    // Named rather than left to the parser, which would only say it expected a value.
    if head.starts_with(b"\xEF\xBB\xBF") {
        return Err(ReceiptError::NotAReceipt(
            "the receipt starts with a UTF-8 byte order mark (EF BB BF), which JSON text \
             must not carry"
                .to_owned(),
        ));
    }
    // A JSON Lines receipt's first line is its own small object, which says so first.
    if head.starts_with(br#"{"format":"kvroute-receipt-stream/1""#) {
        read_lines(receipt, policy)
    } else {
        read_canonical(receipt, policy)
    }
}

fn not_a_receipt(e: impl fmt::Display) -> ReceiptError {
    ReceiptError::NotAReceipt(e.to_string())
}

fn read_canonical(receipt: impl Read, policy: Policy) -> Result<ReceiptRun, ReceiptError> {
    let wanted = Policy::ALL.iter().position(|&p| p == policy).unwrap_or(0);
    let mut de = serde_json::Deserializer::from_reader(receipt);
    let body = ReceiptSeed { wanted, policy }
        .deserialize(&mut de)
        .map_err(not_a_receipt)?;
    de.end().map_err(not_a_receipt)?;
    if body.format.as_deref() != Some(RECEIPT_FORMAT) {
        return Err(ReceiptError::NotAReceipt(format!(
            "its format is not {RECEIPT_FORMAT:?}"
        )));
    }
    let receipt_digest = body
        .receipt_digest
        .ok_or_else(|| ReceiptError::NotAReceipt("no receipt_digest".to_owned()))?;
    let trace_digest = body
        .trace_digest
        .ok_or_else(|| ReceiptError::NotAReceipt("no trace_digest".to_owned()))?;
    let (decisions, workers) = match body.picked {
        Some((picked_policy, decisions)) if picked_policy == policy.name() => decisions?,
        _ => return Err(ReceiptError::NoSuchRun(body.policies)),
    };
    if let Some((first, second)) = first_repeat(&decisions) {
        let at = |i: usize| format!("runs[{wanted}].decisions[{i}]");
        return Err(repeated_request(
            &format!("{}.request", at(second)),
            &decisions[second].request,
            &at(first),
        ));
    }
    Ok(ReceiptRun {
        receipt_digest,
        trace_digest,
        policy,
        policies: body.policies,
        decisions,
        workers,
    })
}

const RECEIPT_FORMAT: &str = "kvroute-receipt/1";

/// The members of a canonical receipt that `join` keeps.
#[derive(Default)]
struct ReceiptBody {
    format: Option<String>,
    receipt_digest: Option<String>,
    trace_digest: Option<String>,
    policies: Vec<String>,
    /// The run at the wanted place: its policy and decisions.
    picked: Option<(String, Result<Decisions, ReceiptError>)>,
}

/// A run's decisions and the index of the workers their rows name.
type Decisions = (Vec<DecisionSummary>, WorkerIndex);

struct ReceiptSeed {
    wanted: usize,
    policy: Policy,
}

impl<'de> DeserializeSeed<'de> for ReceiptSeed {
    type Value = ReceiptBody;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ReceiptBody, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReceiptSeed {
    type Value = ReceiptBody;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a receipt object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReceiptBody, A::Error> {
        let mut body = ReceiptBody::default();
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "format" => body.format = Some(map.next_value()?),
                "receipt_digest" => body.receipt_digest = Some(map.next_value()?),
                "trace_digest" => body.trace_digest = Some(map.next_value()?),
                "runs" => {
                    let runs = map.next_value_seed(RunsSeed {
                        wanted: self.wanted,
                        policy: self.policy,
                    })?;
                    body.policies = runs.0;
                    body.picked = runs.1;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(body)
    }
}

type Runs = (
    Vec<String>,
    Option<(String, Result<Decisions, ReceiptError>)>,
);

struct RunsSeed {
    wanted: usize,
    policy: Policy,
}

impl<'de> DeserializeSeed<'de> for RunsSeed {
    type Value = Runs;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Runs, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RunsSeed {
    type Value = Runs;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of runs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Runs, A::Error> {
        let mut policies = Vec::new();
        let mut picked = None;
        while let Some((policy, decisions)) = seq.next_element_seed(RunSeed {
            keep: (policies.len() == self.wanted).then_some(self.policy),
        })? {
            if let Some(decisions) = decisions {
                picked = Some((policy.clone(), decisions));
            }
            policies.push(policy);
        }
        Ok((policies, picked))
    }
}

/// One run: its policy, and its decisions when `keep` names the policy wanted.
struct RunSeed {
    keep: Option<Policy>,
}

type Run = (String, Option<Result<Decisions, ReceiptError>>);

impl<'de> DeserializeSeed<'de> for RunSeed {
    type Value = Run;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Run, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RunSeed {
    type Value = Run;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a run object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Run, A::Error> {
        let mut policy = None;
        let mut decisions = None;
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "policy" => policy = Some(map.next_value::<String>()?),
                "decisions" if self.keep.is_some() => {
                    let policy = self.keep.unwrap_or(Policy::CachePlusLoad);
                    let read = map.next_value_seed(DecisionsSeed { policy })?;
                    decisions = Some(read.map_err(ReceiptError::NotAReceipt));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let policy = policy.ok_or_else(|| serde::de::Error::missing_field("policy"))?;
        Ok((policy, decisions))
    }
}

/// A run's decisions, each reduced to its summary as it is read: a decision's rows
/// (one per worker) are held only while their own decision is.
struct DecisionsSeed {
    policy: Policy,
}

impl<'de> DeserializeSeed<'de> for DecisionsSeed {
    type Value = Result<Decisions, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DecisionsSeed {
    type Value = Result<Decisions, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of decisions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut summaries = Vec::new();
        let mut workers = WorkerIndex::default();
        let mut first_problem = None;
        while let Some(decision) = seq.next_element::<Decision>()? {
            // The rest is still read, so a later shape error is the parser's as before.
            if first_problem.is_none() {
                match decision.summary(self.policy, &mut workers) {
                    Ok(summary) => summaries.push(summary),
                    Err(problem) => first_problem = Some(problem),
                }
            }
        }
        Ok(match first_problem {
            Some(problem) => Err(problem),
            None => Ok((summaries, workers)),
        })
    }
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

/// The members of one JSON Lines receipt line that `join` reads (§6.4).
#[derive(Deserialize)]
struct StreamLine {
    format: Option<String>,
    receipt_format: Option<String>,
    policy: Option<String>,
    decisions: Option<Decision>,
    receipt_digest: Option<String>,
    trace_digest: Option<String>,
}

fn read_lines(receipt: impl BufRead, policy: Policy) -> Result<ReceiptRun, ReceiptError> {
    let mut policies: Vec<String> = Vec::new();
    let mut decisions = Vec::new();
    let mut workers = WorkerIndex::default();
    // The line of each kept decision, for the error naming a repeated request id.
    let mut decision_lines: Vec<usize> = Vec::new();
    let mut receipt_digest = None;
    let mut trace_digest = None;
    for (index, line) in receipt.lines().enumerate() {
        let line = line.map_err(|e| not_a_receipt(format!("cannot read it: {e}")))?;
        let at = |e: serde_json::Error| not_a_receipt(format!("line {}: {e}", index + 1));
        let line: StreamLine = serde_json::from_str(&line).map_err(at)?;
        if index == 0 && line.receipt_format.as_deref() != Some(RECEIPT_FORMAT) {
            return Err(not_a_receipt(format!(
                "line 1: its receipt_format is not {RECEIPT_FORMAT:?}"
            )));
        }
        if index == 0 {
            trace_digest = line.trace_digest.clone();
        }
        if line.format.is_some() && index > 0 {
            return Err(not_a_receipt(format!("line {}: a second head", index + 1)));
        }
        if let Some(name) = &line.policy {
            if policies.last() != Some(name) {
                policies.push(name.clone());
            }
            if let Some(decision) = line.decisions.filter(|_| name == policy.name()) {
                let summary = decision.summary(policy, &mut workers);
                decisions.push(summary.map_err(ReceiptError::NotAReceipt)?);
                decision_lines.push(index + 1);
            }
        }
        if line.receipt_digest.is_some() {
            receipt_digest = line.receipt_digest;
        }
    }
    let receipt_digest = receipt_digest
        .ok_or_else(|| not_a_receipt("no receipt_digest line: the receipt is cut short"))?;
    let trace_digest = trace_digest.ok_or_else(|| not_a_receipt("line 1: no trace_digest"))?;
    if !policies.iter().any(|p| p == policy.name()) {
        return Err(ReceiptError::NoSuchRun(policies));
    }
    if let Some((first, second)) = first_repeat(&decisions) {
        return Err(repeated_request(
            &format!("line {}: decisions.request", decision_lines[second]),
            &decisions[second].request,
            &format!("line {}", decision_lines[first]),
        ));
    }
    Ok(ReceiptRun {
        receipt_digest,
        trace_digest,
        policy,
        policies,
        decisions,
        workers,
    })
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
