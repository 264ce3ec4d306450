//! What `join` reads of a receipt (SPEC.md §14.1): one run's decisions, each as its
//! request id, tick, chosen worker and the chosen row's `recomputed` and `work_milli`.
//! The receipt is streamed by [`crate::input::receipt`], in either layout, and every
//! other run, row and log is skipped as it is read, so memory follows the run's
//! decisions, not the receipt's size.
//!
//! In a canonical run object `decisions` comes before `policy` (members are sorted), so
//! there the run is picked by its place: runs are always in [`Policy::ALL`] order (§6),
//! and the picked run's own `policy` is checked once it is read. A JSON Lines line
//! names its policy, so there the run is picked by name.

use crate::input::receipt::{self as reader, Layout, Member, Place, ReceiptSink};
use crate::route::policy::Policy;
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

/// The sink that keeps one run's decision summaries.
struct PickedRun {
    policy: Policy,
    /// The run's place in a JSON receipt.
    place: usize,
    decisions: Vec<DecisionSummary>,
    /// Where each kept decision was read, for the error naming a repeated request id.
    places: Vec<Place>,
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
        self.decisions.push(decision.summary()?);
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
