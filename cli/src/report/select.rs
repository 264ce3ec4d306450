//! Which decisions are interesting, and which ones a large report keeps in detail.
//!
//! A decision is interesting when it shows a policy's character: it picked a dominated
//! row, escaped the overload cap, met another tenant's, model's or adapter's prefix,
//! met a stale view, won by a hair, or was rejected. The report keeps every decision of
//! a small trace; a large one keeps up to [`PER_KIND_MAX`] of each kind per policy plus
//! an evenly spaced sample, so the page stays small and says what it kept.

use super::model::{DecisionDoc, RunDoc};

/// The kinds, in the order the page offers their shortcuts.
pub const KINDS: [Kind; 6] = [
    Kind::Dominated,
    Kind::OverloadEscape,
    Kind::Boundary,
    Kind::Stale,
    Kind::CloseCall,
    Kind::Rejected,
];

/// A close call: the runner-up is within this much of the winner's score (one token of
/// cost), or ties it.
pub const CLOSE_CALL_MARGIN_MILLI: u64 = 1000;

/// Per policy and kind, the most decisions kept in detail.
pub const PER_KIND_MAX: usize = 25;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dominated,
    OverloadEscape,
    Boundary,
    Stale,
    CloseCall,
    Rejected,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dominated => "dominated",
            Kind::OverloadEscape => "overload_escape",
            Kind::Boundary => "boundary",
            Kind::Stale => "stale",
            Kind::CloseCall => "close_call",
            Kind::Rejected => "rejected",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Dominated => "dominated choice",
            Kind::OverloadEscape => "overload escape",
            Kind::Boundary => "boundary rejection",
            Kind::Stale => "stale view",
            Kind::CloseCall => "close call",
            Kind::Rejected => "rejected",
        }
    }

    pub fn matches(self, policy: &str, decision: &DecisionDoc) -> bool {
        match self {
            Kind::Dominated => decision
                .chosen_row()
                .is_some_and(|row| !row.dominated_by.is_empty()),
            Kind::OverloadEscape => decision.route_kind == "overload_escape",
            Kind::Boundary => decision.candidates.iter().any(|r| r.has_boundary_reason()),
            Kind::Stale => decision
                .candidates
                .iter()
                .any(|r| r.has_reason("stale_view")),
            // Round robin's margin is always 0 by definition (SPEC.md §5): not a contest.
            Kind::CloseCall => {
                policy != "round_robin"
                    && decision.chosen.is_some()
                    && decision.candidates.iter().filter(|r| r.eligible).count() > 1
                    && (decision.tie_count > 1 || decision.margin_milli < CLOSE_CALL_MARGIN_MILLI)
            }
            Kind::Rejected => decision.chosen.is_none(),
        }
    }
}

/// The kinds a decision is.
pub fn kinds_of(policy: &str, decision: &DecisionDoc) -> Vec<Kind> {
    KINDS
        .into_iter()
        .filter(|kind| kind.matches(policy, decision))
        .collect()
}

/// How many decisions of one kind a run has, and how many the page keeps.
#[derive(Debug, Clone, Copy)]
pub struct KindCount {
    pub kind: Kind,
    pub total: usize,
    pub kept: usize,
}

/// The decisions of one run kept in detail, as indexes in run order.
#[derive(Debug, Clone)]
pub struct Selection {
    pub kept: Vec<usize>,
    pub counts: Vec<KindCount>,
    /// Whether every decision is kept.
    pub complete: bool,
}

/// `count` indexes spread evenly over `0..len` (all of them when `count >= len`).
fn spread(len: usize, count: usize) -> impl Iterator<Item = usize> {
    let count = count.min(len);
    (0..count).map(move |i| i * len / count)
}

/// Keeps every decision when the run has at most `sample + PER_KIND_MAX` of them;
/// otherwise up to `PER_KIND_MAX` of each kind, spread over the run, plus `sample`
/// evenly spaced decisions.
pub fn select(run: &RunDoc, sample: usize) -> Selection {
    let decisions = &run.decisions;
    let of_kind: Vec<Vec<usize>> = KINDS
        .iter()
        .map(|&kind| {
            (0..decisions.len())
                .filter(|&i| kind.matches(&run.policy, &decisions[i]))
                .collect()
        })
        .collect();
    let complete = decisions.len() <= sample + PER_KIND_MAX;
    let mut kept: Vec<usize> = if complete {
        (0..decisions.len()).collect()
    } else {
        let mut kept: Vec<usize> = spread(decisions.len(), sample).collect();
        for indexes in &of_kind {
            kept.extend(spread(indexes.len(), PER_KIND_MAX).map(|i| indexes[i]));
        }
        kept
    };
    kept.sort_unstable();
    kept.dedup();
    let counts = KINDS
        .iter()
        .zip(&of_kind)
        .map(|(&kind, indexes)| KindCount {
            kind,
            total: indexes.len(),
            kept: indexes
                .iter()
                .filter(|i| kept.binary_search(i).is_ok())
                .count(),
        })
        .collect();
    Selection {
        kept,
        counts,
        complete,
    }
}
