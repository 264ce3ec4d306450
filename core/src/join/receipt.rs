//! What `join` reads of a receipt (SPEC.md §14.1): one run's decisions, each as its
//! request id, tick, chosen worker and the chosen row's `recomputed` and `work_milli`.
//! The receipt is streamed (a canonical receipt through one serde pass, a JSON Lines
//! receipt a line at a time) and every other run, row and log is skipped as it is read,
//! so memory follows the run's decisions, not the receipt's size.
//!
//! In a canonical run object `decisions` comes before `policy` (members are sorted), so
//! the run is picked by its place: runs are always in [`Policy::ALL`] order (§6), and
//! the picked run's own `policy` is checked once it is read.

use crate::route::policy::Policy;
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
    recomputed: u64,
    work_milli: u64,
}

#[derive(Deserialize)]
struct Decision {
    request: String,
    tick: u64,
    chosen: Option<String>,
    candidates: Vec<Row>,
}

impl Decision {
    fn summary(self) -> Result<DecisionSummary, String> {
        let chosen = match self.chosen {
            None => None,
            Some(worker) => {
                let row = self
                    .candidates
                    .into_iter()
                    .find(|row| row.worker == worker)
                    .ok_or_else(|| {
                        format!(
                            "decision of request {}: the chosen worker {} has no row",
                            crate::input::json::quote_str(&self.request),
                            crate::input::json::quote_str(&worker)
                        )
                    })?;
                Some(ChosenRow {
                    worker,
                    recomputed: row.recomputed,
                    work_milli: row.work_milli,
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
    let body = ReceiptSeed { wanted }
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
    let decisions = match body.picked {
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
    picked: Option<(String, Result<Vec<DecisionSummary>, ReceiptError>)>,
}

struct ReceiptSeed {
    wanted: usize,
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
    Option<(String, Result<Vec<DecisionSummary>, ReceiptError>)>,
);

struct RunsSeed {
    wanted: usize,
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
            keep: policies.len() == self.wanted,
        })? {
            if let Some(decisions) = decisions {
                picked = Some((policy.clone(), decisions));
            }
            policies.push(policy);
        }
        Ok((policies, picked))
    }
}

/// One run: its policy, and its decisions when `keep`.
struct RunSeed {
    keep: bool,
}

type Run = (String, Option<Result<Vec<DecisionSummary>, ReceiptError>>);

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
                "decisions" if self.keep => {
                    let read: Vec<Decision> = map.next_value()?;
                    let summaries: Result<Vec<DecisionSummary>, String> =
                        read.into_iter().map(Decision::summary).collect();
                    decisions = Some(summaries.map_err(ReceiptError::NotAReceipt));
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
                decisions.push(decision.summary().map_err(ReceiptError::NotAReceipt)?);
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
