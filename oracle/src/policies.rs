//! SPEC §5, policies: which rows are choosable (with the two fallbacks of §4.5), each
//! policy's score and margin, ties by worker id, round robin's cursor, the route kind.

use std::cmp::Ordering;

use crate::candidates::Row;
use crate::model::Trace;
use crate::policy_kind::PolicyKind;

/// A receipt's runs in order: the four, then `dynamo_default` when set (§6).
pub fn receipt_policies(trace: &Trace) -> Vec<PolicyKind> {
    let mut kinds = PolicyKind::FOUR.to_vec();
    if trace.policy.dynamo_block_tokens.is_some() {
        kinds.push(PolicyKind::DynamoDefault);
    }
    kinds
}

/// The choice made for one request.
#[derive(Debug, Clone, Copy)]
pub struct Choice {
    /// Index of the chosen row (= worker position in id order), `None` when rejected.
    pub chosen: Option<usize>,
    pub route_kind: &'static str,
    pub tie_count: u64,
    pub margin_milli: u64,
    /// Chosen in the second stage of §4.5 (among reserved-out rows).
    pub cold_reserve_fallback: bool,
}

const REJECTED: Choice = Choice {
    chosen: None,
    route_kind: "rejected",
    tie_count: 0,
    margin_milli: 0,
    cold_reserve_fallback: false,
};

/// Better first; `Equal` is a tie on the score.
fn score(kind: PolicyKind, escape: bool, a: &Row, b: &Row) -> Ordering {
    match kind {
        PolicyKind::RoundRobin => Ordering::Equal,
        PolicyKind::LeastLoad => a.work_milli.cmp(&b.work_milli),
        PolicyKind::LongestPrefix => b.reuse.cmp(&a.reuse),
        PolicyKind::CachePlusLoad if escape => a.after_milli.cmp(&b.after_milli),
        PolicyKind::CachePlusLoad | PolicyKind::DynamoDefault => a.cost_milli.cmp(&b.cost_milli),
    }
}

/// The winner's margin over the runner-up (§5 table).
fn margin(kind: PolicyKind, escape: bool, win: &Row, ru: &Row) -> u64 {
    match kind {
        PolicyKind::RoundRobin => 0,
        PolicyKind::LeastLoad => ru.work_milli.saturating_sub(win.work_milli),
        PolicyKind::LongestPrefix => win.reuse.saturating_sub(ru.reuse).saturating_mul(1000),
        PolicyKind::CachePlusLoad if escape => ru.after_milli.saturating_sub(win.after_milli),
        PolicyKind::CachePlusLoad | PolicyKind::DynamoDefault => {
            ru.cost_milli.saturating_sub(win.cost_milli)
        }
    }
}

/// Round robin (§5): the first eligible row at or after the cursor, wrapping.
fn round_robin(rows: &[Row], cursor: &mut usize) -> Choice {
    let n = rows.len();
    for step in 0..n {
        let at = (*cursor + step) % n;
        if rows[at].eligible {
            *cursor = (at + 1) % n;
            return Choice {
                chosen: Some(at),
                route_kind: if rows[at].reuse > 0 { "hit" } else { "cold" },
                tie_count: 1,
                margin_milli: 0,
                cold_reserve_fallback: false,
            };
        }
    }
    REJECTED
}

/// §5: the choice of `kind` among `rows` (in id order).
pub fn choose(kind: PolicyKind, rows: &[Row], cursor: &mut usize) -> Choice {
    if !rows.iter().any(|r| r.eligible) {
        return REJECTED;
    }
    if kind == PolicyKind::RoundRobin {
        return round_robin(rows, cursor);
    }
    let pick =
        |keep: &dyn Fn(&Row) -> bool| -> Vec<&Row> { rows.iter().filter(|r| keep(r)).collect() };
    let mut choosable = pick(&|r| r.in_front());
    let mut fallback = false;
    let mut escape = false;
    if choosable.is_empty() {
        choosable = pick(&|r| r.eligible && !r.overloaded);
        fallback = !choosable.is_empty();
    }
    if choosable.is_empty() {
        choosable = pick(&|r| r.eligible);
        escape = true;
    }
    // Stable sort on rows in id order: equal scores stay in id order.
    choosable.sort_by(|a, b| score(kind, escape, a, b));
    let win = choosable[0];
    let tie_count = choosable
        .iter()
        .filter(|r| score(kind, escape, r, win) == Ordering::Equal)
        .count() as u64;
    let margin_milli = choosable
        .get(1)
        .map_or(0, |ru| margin(kind, escape, win, ru));
    let route_kind = if escape {
        "overload_escape"
    } else if win.reuse > 0 {
        "hit"
    } else {
        "cold"
    };
    Choice {
        chosen: Some(win.worker),
        route_kind,
        tie_count,
        margin_milli,
        cold_reserve_fallback: fallback,
    }
}
