//! The figures of a join (SPEC.md §14.2): counts of what matched and what did not, the
//! prediction figures over completed records, goodput under declared objectives and
//! the per-worker calibration. Pure functions of the run's decisions and the records;
//! ids are compared as bytes in sorted order, never through a hash map's order.

use crate::join::aiperf::Completion;
use crate::join::receipt::DecisionSummary;
pub use crate::join::records::Records;
use crate::output::json_text::milliseconds_text;
use std::collections::BTreeMap;

/// Latency objectives (`--slo`, SPEC.md §14.2) in whole microseconds, each optional:
/// `--slo` takes milliseconds with up to three decimals, so a microsecond is the finest
/// objective, and a record's figures are held to it exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slo {
    pub ttft_us: Option<u64>,
    pub tpot_us: Option<u64>,
}

impl Slo {
    /// The objectives declared as a person reads them, in milliseconds with the fewest
    /// decimals that say them exactly, `at_most` between name and value: `ttft <= 0.5 ms,
    /// tpot <= 50 ms` for the table (§14.3), `ttft ≤ 0.5 ms` on the report page (§14.6).
    pub fn objectives_text(&self, at_most: &str) -> String {
        let objective = |name: &str, us: Option<u64>| {
            us.map(|us| format!("{name} {at_most} {} ms", milliseconds_text(us)))
        };
        [
            objective("ttft", self.ttft_us),
            objective("tpot", self.tpot_us),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub decisions: u64,
    pub routed: u64,
    pub rejected: u64,
    pub completion_lines: u64,
    pub matched: u64,
    pub dropped: u64,
    pub rejected_served: u64,
    pub unrouted: u64,
    pub retried: u64,
    pub cancelled: u64,
    pub errors: u64,
    pub completed: u64,
    pub error_rate_pm: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goodput {
    pub good: u64,
    pub good_pm: u64,
    pub span_ns: u64,
    pub good_per_second_milli: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFigures {
    pub worker: String,
    pub completed: u64,
    pub ttft_mean_us: u64,
    pub tpot_mean_us: u64,
    pub predicted_mean_milli: u64,
    pub us_per_predicted_token: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinFigures {
    pub counts: Counts,
    pub ttft_rank_gamma_pm: Option<i64>,
    pub us_per_predicted_token: Option<u64>,
    pub goodput: Option<Goodput>,
    pub workers: Vec<WorkerFigures>,
    /// Per `(tenant, model, adapter)`, only with `--trace` (SPEC.md §14.2.1).
    pub cohorts: Option<Vec<CohortFigures>>,
    /// Why requests missed the cache, only when the records carry the figures
    /// (SPEC.md §14.7).
    pub attribution: Option<crate::join::attribution_sums::Attribution>,
}

/// One cohort's figures, computed as the run's over its decisions and their records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CohortFigures {
    pub tenant: String,
    pub model: String,
    pub adapter: String,
    pub figures: JoinFigures,
}

/// One completed record with its decision's figures.
struct Served<'a> {
    worker: &'a str,
    predicted_milli: u64,
    ttft_us: u64,
    tpot_us: u64,
}

/// Joins the run's decisions with the records (SPEC.md §14.2).
pub fn join(decisions: &[DecisionSummary], records: &Records, slo: Option<Slo>) -> JoinFigures {
    let mut counts = Counts {
        decisions: decisions.len() as u64,
        completion_lines: records.lines,
        retried: records.first.values().filter(|(_, seen)| *seen > 1).count() as u64,
        ..Counts::default()
    };
    let mut served = Vec::new();
    let mut matched_records = Vec::new();
    let mut decided_ids: Vec<&str> = Vec::with_capacity(decisions.len());
    for decision in decisions {
        decided_ids.push(&decision.request);
        let record = records.first.get(&decision.request).map(|(c, _)| c);
        let Some(chosen) = &decision.chosen else {
            counts.rejected += 1;
            counts.rejected_served += u64::from(record.is_some());
            continue;
        };
        counts.routed += 1;
        let Some(record) = record else {
            counts.dropped += 1;
            continue;
        };
        counts.matched += 1;
        matched_records.push(record);
        if record.cancelled {
            counts.cancelled += 1;
        } else if record.failed {
            counts.errors += 1;
        } else if let (Some(ttft_us), Some(tpot_us)) = (record.ttft_us, record.tpot_us) {
            counts.completed += 1;
            served.push(Served {
                worker: &chosen.worker,
                predicted_milli: chosen.work_milli + 1000 * chosen.recomputed,
                ttft_us,
                tpot_us,
            });
        }
    }
    decided_ids.sort_unstable();
    counts.unrouted = records
        .first
        .keys()
        .filter(|id| decided_ids.binary_search(&id.as_str()).is_err())
        .count() as u64
        + records.unrouted_without_id;
    counts.error_rate_pm = per_mille(counts.errors, counts.matched);
    let span_exact_ns = match records.span_when_matched_ns {
        Some(span) if counts.matched > 0 => span,
        Some(_) => 0,
        None => measured_span_ns(&matched_records),
    };
    JoinFigures {
        ttft_rank_gamma_pm: rank_gamma_pm(&served),
        us_per_predicted_token: us_per_predicted_token(served.iter()),
        goodput: slo.map(|slo| goodput(&served, span_exact_ns, counts.routed, slo)),
        workers: per_worker(&served),
        counts,
        cohorts: None,
        attribution: None,
    }
}

/// A figure as the document writes it: its exact value, or `B` when that would pass it
/// (SPEC.md §14.5).
fn saturated(value: u128) -> u64 {
    value.min(u128::from(crate::input::limits::JSON_INTEGER_MAX)) as u64
}

fn per_mille(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        (u128::from(part) * 1000 / u128::from(whole)) as u64
    }
}

fn us_per_predicted_token<'a>(served: impl Iterator<Item = &'a Served<'a>>) -> Option<u64> {
    let (ttft, predicted) = served.fold((0u128, 0u128), |(t, p), s| {
        (t + u128::from(s.ttft_us), p + u128::from(s.predicted_milli))
    });
    (predicted > 0).then(|| saturated(1000 * ttft / predicted))
}

/// Goodman and Kruskal's gamma of predicted work against TTFT, per mille, floored.
/// Concordant and discordant pairs are counted in O(n log n): sorted by prediction,
/// each record is compared with every record of a strictly smaller prediction through
/// a Fenwick tree over the TTFT ranks.
fn rank_gamma_pm(served: &[Served]) -> Option<i64> {
    let mut ttfts: Vec<u64> = served.iter().map(|s| s.ttft_us).collect();
    ttfts.sort_unstable();
    ttfts.dedup();
    let mut order: Vec<&Served> = served.iter().collect();
    order.sort_by_key(|s| s.predicted_milli);
    let mut tree = vec![0u64; ttfts.len() + 1];
    let (mut concordant, mut discordant) = (0u128, 0u128);
    let mut inserted = 0u64;
    let mut group_start = 0;
    while group_start < order.len() {
        // Records of one prediction are tied with each other: counted against the
        // smaller predictions only, then inserted together.
        let predicted = order[group_start].predicted_milli;
        let group_end = group_start
            + order[group_start..]
                .iter()
                .take_while(|s| s.predicted_milli == predicted)
                .count();
        for s in &order[group_start..group_end] {
            let rank = ttfts.binary_search(&s.ttft_us).unwrap_or(0);
            let below = prefix_sum(&tree, rank);
            let at_or_below = prefix_sum(&tree, rank + 1);
            concordant += u128::from(below);
            discordant += u128::from(inserted - at_or_below);
        }
        for s in &order[group_start..group_end] {
            let rank = ttfts.binary_search(&s.ttft_us).unwrap_or(0);
            let mut i = rank + 1;
            while i < tree.len() {
                tree[i] += 1;
                i += i & i.wrapping_neg();
            }
            inserted += 1;
        }
        group_start = group_end;
    }
    let pairs = concordant + discordant;
    if pairs == 0 {
        return None;
    }
    let difference = 1000 * (concordant as i128 - discordant as i128);
    Some(difference.div_euclid(pairs as i128) as i64)
}

/// How many inserted records have a TTFT rank below `rank`.
fn prefix_sum(tree: &[u64], rank: usize) -> u64 {
    let (mut i, mut sum) = (rank, 0);
    while i > 0 {
        sum += tree[i];
        i -= i & i.wrapping_neg();
    }
    sum
}

/// `max(end) − min(start)` over the matched records, records without a start or an
/// end left out of that side; 0 when either side has none or the difference is
/// negative (SPEC.md §14.2).
fn measured_span_ns(matched: &[&Completion]) -> u128 {
    let start = matched.iter().filter_map(|c| c.start_ns).min();
    let end = matched.iter().filter_map(|c| c.end_ns).max();
    match (start, end) {
        (Some(start), Some(end)) => u128::from(end.saturating_sub(start)),
        _ => 0,
    }
}

fn goodput(served: &[Served], span_exact_ns: u128, routed: u64, slo: Slo) -> Goodput {
    let within = |measured_us: u64, objective_us: Option<u64>| {
        objective_us.is_none_or(|objective_us| measured_us <= objective_us)
    };
    let good = served
        .iter()
        .filter(|s| within(s.ttft_us, slo.ttft_us) && within(s.tpot_us, slo.tpot_us))
        .count() as u64;
    // The rate is computed from the exact span; only the written figures saturate.
    let good_per_second_milli = (u128::from(good) * 1_000_000_000_000)
        .checked_div(span_exact_ns)
        .map_or(0, saturated);
    let span_ns = saturated(span_exact_ns);
    Goodput {
        good,
        good_pm: per_mille(good, routed),
        span_ns,
        good_per_second_milli,
    }
}

fn per_worker(served: &[Served]) -> Vec<WorkerFigures> {
    let mut by_worker: BTreeMap<&str, Vec<&Served>> = BTreeMap::new();
    for s in served {
        by_worker.entry(s.worker).or_default().push(s);
    }
    by_worker
        .into_iter()
        .map(|(worker, served)| {
            let n = served.len() as u128;
            let mean = |f: fn(&Served) -> u64| {
                (served.iter().map(|s| u128::from(f(s))).sum::<u128>() / n) as u64
            };
            WorkerFigures {
                worker: worker.to_owned(),
                completed: served.len() as u64,
                ttft_mean_us: mean(|s| s.ttft_us),
                tpot_mean_us: mean(|s| s.tpot_us),
                predicted_mean_milli: mean(|s| s.predicted_milli),
                us_per_predicted_token: us_per_predicted_token(served.into_iter()),
            }
        })
        .collect()
}
