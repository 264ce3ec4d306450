//! Which decisions are interesting, and which ones a large report keeps in detail.
//!
//! A decision is interesting when it shows a policy's character: it picked a dominated
//! row, escaped the overload cap, met another tenant's, model's or adapter's prefix,
//! met a stale view, won by a hair, or was rejected. The report keeps every decision of
//! a small trace; a large one keeps up to [`PER_KIND_MAX`] of each kind per policy plus
//! an evenly spaced sample, so the page stays small and says what it kept.

use super::model::DecisionDoc;

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
                .is_some_and(|row| row.dominated_by.is_some()),
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

/// Whether `index` is one of the `count` indexes spread evenly over `0..len` (each
/// `i * len / count` for `i < count`; all of them when `count >= len`): the smallest `i`
/// whose `i * len / count` reaches `index` is the only one that can hit it.
pub fn in_spread(len: usize, count: usize, index: usize) -> bool {
    let count = count.min(len) as u128;
    let (len, index) = (len as u128, index as u128);
    if count == 0 {
        return false;
    }
    let i = (index * count).div_ceil(len);
    i < count && i * len / count == index
}

/// What selection needs of a run besides its decisions: how many it has, and how many
/// of each kind (in [`KINDS`] order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub decisions: usize,
    pub kind_totals: [usize; KINDS.len()],
}

/// One decision's place in its run: its index, and for each kind it is, its ordinal
/// among the run's decisions of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ordinals {
    pub index: usize,
    pub of_kind: [Option<usize>; KINDS.len()],
}

impl Ordinals {
    /// The next decision's ordinals after those of `seen` (each kind's count so far),
    /// which it advances.
    pub fn next(index: usize, kinds: &[Kind], seen: &mut [usize; KINDS.len()]) -> Ordinals {
        let mut of_kind = [None; KINDS.len()];
        for (slot, kind) in KINDS.iter().enumerate() {
            if kinds.contains(kind) {
                of_kind[slot] = Some(seen[slot]);
                seen[slot] += 1;
            }
        }
        Ordinals { index, of_kind }
    }
}

impl RunCounts {
    /// Whether the run keeps every decision with this much detail.
    pub fn complete(&self, sample: usize, per_kind: usize) -> bool {
        self.decisions <= sample.saturating_add(per_kind)
    }

    /// Whether [`select`] keeps the decision at `at`: all of them when the run has at
    /// most `sample + per_kind`; otherwise the `sample` evenly spaced ones and up to
    /// `per_kind` of each kind, spread over the run.
    pub fn keeps(&self, sample: usize, per_kind: usize, at: &Ordinals) -> bool {
        self.complete(sample, per_kind)
            || in_spread(self.decisions, sample, at.index)
            || at
                .of_kind
                .iter()
                .zip(self.kind_totals)
                .any(|(ordinal, total)| {
                    ordinal.is_some_and(|ordinal| in_spread(total, per_kind, ordinal))
                })
    }

    /// Whether any of the page's detail `levels` (sample, per kind) keeps it: what a
    /// report holds of a run while it reads the receipt.
    pub fn kept_at_any(&self, levels: &[(usize, usize)], at: &Ordinals) -> bool {
        levels
            .iter()
            .any(|&(sample, per_kind)| self.keeps(sample, per_kind, at))
    }
}

/// The levels of detail (sample, per kind) the page tries in turn until it fits its
/// byte budget, from `sample` and [`PER_KIND_MAX`]: the sample halved to 0, then the
/// cap per kind halved to 0 (see [`super::page`]).
pub fn levels(sample: usize) -> Vec<(usize, usize)> {
    let mut levels = Vec::new();
    let (mut sample, mut per_kind) = (sample, PER_KIND_MAX);
    loop {
        levels.push((sample, per_kind));
        if per_kind == 0 {
            return levels;
        }
        if sample > 0 {
            sample /= 2;
        } else {
            per_kind /= 2;
        }
    }
}

/// The decisions kept of a run whose decisions at `ordinals` (in run order) are the
/// candidates: indexes into `ordinals`, and the count of each kind.
pub fn select_from(
    counts: &RunCounts,
    ordinals: &[Ordinals],
    sample: usize,
    per_kind: usize,
) -> Selection {
    let kept: Vec<usize> = (0..ordinals.len())
        .filter(|&i| counts.keeps(sample, per_kind, &ordinals[i]))
        .collect();
    let counts_of_kind = KINDS
        .iter()
        .enumerate()
        .map(|(slot, &kind)| KindCount {
            kind,
            total: counts.kind_totals[slot],
            kept: kept
                .iter()
                .filter(|&&i| ordinals[i].of_kind[slot].is_some())
                .count(),
        })
        .collect();
    Selection {
        kept,
        counts: counts_of_kind,
        complete: counts.complete(sample, per_kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{DecisionDoc, RowDoc, RunDoc};
    use kvroute_core::route::Metrics;

    /// `count` indexes spread evenly over `0..len` (all of them when `count >= len`).
    fn spread(len: usize, count: usize) -> impl Iterator<Item = usize> {
        let count = count.min(len);
        (0..count).map(move |i| i * len / count)
    }

    /// Keeps every decision when the run has at most `sample + per_kind` of them;
    /// otherwise up to `per_kind` of each kind, spread over the run, plus `sample` evenly
    /// spaced decisions. The page passes [`PER_KIND_MAX`] unless its byte budget needs less.
    fn select(run: &RunDoc, sample: usize, per_kind: usize) -> Selection {
        let mut counts = RunCounts {
            decisions: run.decisions.len(),
            ..RunCounts::default()
        };
        let ordinals: Vec<Ordinals> = run
            .decisions
            .iter()
            .enumerate()
            .map(|(i, d)| Ordinals::next(i, &kinds_of(&run.policy, d), &mut counts.kind_totals))
            .collect();
        select_from(&counts, &ordinals, sample, per_kind)
    }

    fn row(worker: &str, reasons: &[&str], dominated_by: &[&str]) -> RowDoc {
        RowDoc {
            worker: worker.into(),
            eligible: !reasons.contains(&"model_not_served"),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            reuse: 0,
            recomputed: 10,
            queued_prefill: 0,
            active_decode: 0,
            work_milli: 0,
            after_milli: 10_000,
            cost_milli: 10_000,
            dominated_by: dominated_by.first().map(|r| r.to_string()),
            dominated_count: dominated_by.len() as u64,
        }
    }

    fn decision(seq: u64, rows: Vec<RowDoc>, margin_milli: u64) -> DecisionDoc {
        DecisionDoc {
            seq,
            tick: seq,
            request: format!("r{seq}"),
            chosen: Some("w0".into()),
            route_kind: "cold".into(),
            tie_count: 1,
            margin_milli,
            candidates: rows,
        }
    }

    fn run(decisions: Vec<DecisionDoc>) -> RunDoc {
        let metrics: Metrics = serde_json::from_value(serde_json::json!({
            "routed": 0, "rejected": 0, "cache_hits": 0, "reused_tokens": 0,
            "recomputed_tokens": 0, "route_churn": 0, "load_skew_milli": 0,
            "latency_proxy_mean_milli": 0, "latency_proxy_p95_milli": 0,
            "latency_proxy_max_milli": 0, "stale_event_rejections": 0,
            "stale_observation_rejections": 0, "boundary_rejections": 0,
            "overload_escapes": 0, "dominated_choices": 0
        }))
        .unwrap();
        RunDoc {
            policy: "least_load".into(),
            decisions,
            cache_log: vec![],
            observation_log: vec![],
            metrics,
        }
    }

    #[test]
    fn kinds_follow_the_rows() {
        let dominated = decision(1, vec![row("w0", &[], &["w1"]), row("w1", &[], &[])], 5000);
        assert_eq!(kinds_of("least_load", &dominated), vec![Kind::Dominated]);
        let stale = decision(
            2,
            vec![row("w0", &["stale_view"], &[]), row("w1", &[], &[])],
            0,
        );
        assert_eq!(
            kinds_of("least_load", &stale),
            vec![Kind::Stale, Kind::CloseCall]
        );
        // Round robin's margin is always 0: never a close call.
        assert_eq!(kinds_of("round_robin", &stale), vec![Kind::Stale]);
        let boundary = decision(3, vec![row("w0", &["tenant_mismatch"], &[])], 0);
        assert_eq!(kinds_of("least_load", &boundary), vec![Kind::Boundary]);
    }

    #[test]
    fn a_long_run_keeps_the_sample_and_a_capped_spread_of_each_kind() {
        let plain = || vec![row("w0", &[], &[]), row("w1", &[], &[])];
        let decisions: Vec<DecisionDoc> = (0..1000)
            .map(|i| {
                if i % 10 == 3 {
                    decision(i, vec![row("w0", &[], &["w1"]), row("w1", &[], &[])], 5000)
                } else {
                    decision(i, plain(), 5000)
                }
            })
            .collect();
        let selection = select(&run(decisions), 10, PER_KIND_MAX);
        assert!(!selection.complete);
        let dominated = selection.counts[0];
        assert_eq!((dominated.total, dominated.kept), (100, PER_KIND_MAX));
        // The kept dominated choices are spread over the run, not its first quarter.
        let last_kept = *selection.kept.iter().rev().find(|&&i| i % 10 == 3).unwrap();
        assert!(last_kept > 900, "{last_kept}");
        assert!(selection.kept.len() <= 10 + PER_KIND_MAX);
        assert!(selection.kept.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn in_spread_is_membership_of_the_spread() {
        for len in 0..60 {
            for count in 0..70 {
                let spread: Vec<usize> = spread(len, count).collect();
                for index in 0..len + 2 {
                    assert_eq!(
                        in_spread(len, count, index),
                        spread.contains(&index),
                        "len {len} count {count} index {index}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_levels_halve_the_sample_then_the_cap_per_kind() {
        assert_eq!(
            levels(5),
            [
                (5, 25),
                (2, 25),
                (1, 25),
                (0, 25),
                (0, 12),
                (0, 6),
                (0, 3),
                (0, 1),
                (0, 0)
            ]
        );
    }

    #[test]
    fn a_short_run_is_kept_whole() {
        let decisions = (0..20)
            .map(|i| decision(i, vec![row("w0", &[], &[])], 5000))
            .collect();
        let selection = select(&run(decisions), 10, PER_KIND_MAX);
        assert!(selection.complete);
        assert_eq!(selection.kept, (0..20).collect::<Vec<_>>());
    }
}
