//! The reference (SPEC.md §16.4, driver `kvroute`): a case's trace replayed by
//! kvroute's own engine, and the check that a case's expected answer is policy-neutral
//! (SPEC.md §16.2): for `choice`, the expected workers' rows dominate every other
//! eligible row in the `cache_plus_load` run (§4.6), tied workers' rows being equal;
//! for `overlap`, the figures are each row's whole blocks of reuse.

use super::case::{Answer, Case, Question, BLOCK_TOKENS};
use kvroute_core::route::CandidateRow;
use kvroute_core::route::{Decision, Run};
use kvroute_core::Policy;
use kvroute_core::Receipt;
use std::collections::BTreeMap;

/// What kvroute answers for a case.
#[derive(Debug, Clone)]
pub struct Reference {
    /// The answer to the case's question for its judged (last) request.
    pub answer: Answer,
    /// Where `cache_plus_load` placed each load request, in order.
    pub load_placements: Vec<String>,
}

/// Replays the case's trace and answers its question.
pub fn answer(case: &Case) -> Reference {
    let receipt = kvroute_core::replay::receipt(&case.trace);
    let (ids, run) = (&receipt.worker_ids, cache_plus_load(&receipt));
    let (judged, loads) = run
        .decisions
        .split_last()
        .expect("a case has a request (checked when loaded)");
    let name = |d: &Decision| d.chosen.map_or("rejected".to_string(), |w| ids[w].clone());
    let answer = match case.question {
        Question::Choice => Answer::Worker(name(judged)),
        Question::Overlap => Answer::Overlap(overlap(judged, ids)),
        Question::Refusal => Answer::Reported(refuses_block_size(case)),
    };
    Reference {
        answer,
        load_placements: loads.iter().map(name).collect(),
    }
}

/// The run the cases are judged by: `cache_plus_load`'s, which every receipt has.
fn cache_plus_load(receipt: &Receipt) -> &Run {
    receipt
        .runs
        .iter()
        .find(|r| r.policy == Policy::CachePlusLoad)
        .expect("every receipt has a cache_plus_load run")
}

/// Each worker's whole blocks of reuse.
fn overlap(decision: &Decision, ids: &[String]) -> BTreeMap<String, u64> {
    decision
        .candidates
        .iter()
        .map(|row| (ids[row.worker].clone(), row.reuse / BLOCK_TOKENS))
        .collect()
}

/// §13.4's `other block size` rule: a store whose block size is not the one the
/// importer was told is left out and counted, so kvroute reports every such worker.
fn refuses_block_size(case: &Case) -> bool {
    !case.wire.block_size.is_empty() && case.wire.block_size.values().all(|&b| b != BLOCK_TOKENS)
}

/// Whether the case's expectation is the policy-neutral answer of SPEC.md §16.2; the
/// reason when it is not.
pub fn check(case: &Case) -> Result<(), String> {
    let receipt = kvroute_core::replay::receipt(&case.trace);
    let (ids, run) = (&receipt.worker_ids, cache_plus_load(&receipt));
    let judged = run.decisions.last().expect("a case has a request");
    let index = |w: &str| ids.iter().position(|id| id == w);
    match (&case.question, &case.expect) {
        (Question::Choice, Answer::Worker(w)) => {
            let w = index(w).ok_or(format!("expect: no worker {w}"))?;
            dominates_the_rest(judged, &[w], ids)
        }
        (Question::Choice, Answer::AnyOf(set)) => {
            let set: Vec<usize> = set
                .iter()
                .map(|w| index(w).ok_or(format!("expect: no worker {w}")))
                .collect::<Result<_, _>>()?;
            dominates_the_rest(judged, &set, ids)
        }
        (Question::Overlap, Answer::Overlap(expected)) => {
            let found = overlap(judged, ids);
            (&found == expected).then_some(()).ok_or(format!(
                "expect: the trace's overlap is {}",
                Answer::Overlap(found).text()
            ))
        }
        (Question::Refusal, Answer::Reported(true)) => refuses_block_size(case)
            .then_some(())
            .ok_or("wire.block_size: a refusal case publishes another block size".into()),
        _ => Err("expect: not an answer to the case's question".into()),
    }
}

/// The rows of `set` are eligible, equal in reuse and `after_milli`, and each dominates
/// every other eligible row (SPEC.md §4.6).
fn dominates_the_rest(decision: &Decision, set: &[usize], ids: &[String]) -> Result<(), String> {
    let row = |w: usize| decision.candidates.iter().find(|r| r.worker == w);
    let rows: Vec<&CandidateRow> = set.iter().filter_map(|&w| row(w)).collect();
    if rows.len() != set.len() || rows.iter().any(|r| !r.eligible) {
        return Err("expect: an expected worker is not eligible".into());
    }
    let first = rows[0];
    if rows
        .iter()
        .any(|r| (r.reuse, r.after_milli) != (first.reuse, first.after_milli))
    {
        return Err("expect: the tied workers' rows are not equal".into());
    }
    for other in decision
        .candidates
        .iter()
        .filter(|r| r.eligible && !set.contains(&r.worker))
    {
        let no_worse = first.reuse >= other.reuse && first.after_milli <= other.after_milli;
        let better = first.reuse > other.reuse || first.after_milli < other.after_milli;
        if !(no_worse && better) {
            return Err(format!(
                "expect: {} does not dominate {} (reuse {} vs {}, after_milli {} vs {})",
                ids[first.worker],
                ids[other.worker],
                first.reuse,
                other.reuse,
                first.after_milli,
                other.after_milli
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::case::load_dir;
    use super::*;
    use std::path::Path;

    fn cases() -> Vec<Case> {
        load_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../peers/conformance/cases"),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn every_committed_case_is_policy_neutral() {
        for case in cases() {
            check(&case).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }

    #[test]
    fn kvroute_answers_every_case_as_expected() {
        for case in cases() {
            let reference = answer(&case);
            assert!(
                case.expect.admits(&reference.answer),
                "{}: {:?}",
                case.name,
                reference.answer
            );
            assert!(
                !case.defect.answer.admits(&reference.answer) || case.defect.answer == case.expect,
                "{}: the defect's answer is the expected one",
                case.name
            );
        }
    }

    #[test]
    fn a_worker_that_does_not_dominate_is_refused() {
        let mut case = cases()
            .into_iter()
            .find(|c| c.name == "longer_prefix_wins")
            .unwrap();
        case.expect = Answer::Worker("w1".into());
        let error = check(&case).unwrap_err();
        assert!(error.contains("does not dominate"), "{error}");
    }

    #[test]
    fn load_requests_go_where_their_prefix_is() {
        let case = cases()
            .into_iter()
            .find(|c| c.name == "load_decides_equal_holdings")
            .unwrap();
        assert_eq!(answer(&case).load_placements, ["w0", "w0"]);
    }
}
