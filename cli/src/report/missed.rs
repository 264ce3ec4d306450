//! The Completions panel's **Why it missed** view (SPEC.md §14.6): the join's
//! attribution (§14.7) summed per group — the run, each cohort, each serving worker and
//! the records served outside the fleet — as a table and a stacked bar chart, and the
//! drifted records of each serving worker per bucket of decision ticks. The run's and
//! the cohorts' sums are the join's own; a serving worker's are summed here from the
//! join's attributed records, which is what lets every part be shown per worker.

use super::missed_charts;
use super::shown::shown_request_id;
use kvroute_core::join::JoinFigures;
use kvroute_core::join::{AttributedRecord, Attribution, RecordParts};
use serde::Serialize;
use std::collections::BTreeMap;

/// The parts in SPEC.md §14.7's order; the credits are [`CREDITS`].
pub const PART_NAMES: [&str; 8] = [
    "workload",
    "boundary",
    "routing_paid_for_load",
    "routing_other",
    "elsewhere_lost",
    "elsewhere_gained",
    "phantom",
    "missed",
];
/// Indexes in [`PART_NAMES`] of the parts taken off, not added.
pub const CREDITS: [usize; 2] = [5, 7];
/// The most serving workers the parts chart and the drift grid each draw.
pub const WORKERS_DRAWN_MAX: usize = 24;
/// The most buckets of decision ticks the drift grid has.
pub const DRIFT_BUCKETS_MAX: u64 = 24;
/// The group of the records whose serving worker the run has no row for.
pub const OUTSIDE_FLEET: &str = "outside the fleet";

/// A group's sums over its attributed records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSums {
    pub attributed: u64,
    pub prompt_tokens: u128,
    pub cached_tokens: u128,
    pub lost_tokens: u128,
    /// In [`PART_NAMES`] order.
    pub parts: [u128; 8],
    pub drifted: u64,
    pub drift_pm: u64,
}

impl GroupSums {
    fn of_attribution(a: &Attribution) -> GroupSums {
        GroupSums {
            attributed: a.attributed,
            prompt_tokens: a.prompt_tokens,
            cached_tokens: a.cached_tokens,
            lost_tokens: a.lost_tokens,
            parts: [
                a.workload,
                a.boundary,
                a.routing_paid_for_load,
                a.routing_other,
                a.elsewhere_lost,
                a.elsewhere_gained,
                a.phantom,
                a.missed,
            ],
            drifted: a.drifted,
            drift_pm: a.drift_pm,
        }
    }

    fn add(&mut self, p: &RecordParts) {
        self.attributed += 1;
        self.prompt_tokens += u128::from(p.prompt);
        self.cached_tokens += u128::from(p.cached);
        self.lost_tokens += u128::from(p.prompt - p.cached);
        let parts = [
            p.workload,
            p.boundary,
            p.routing_paid_for_load,
            p.routing_other,
            p.elsewhere_lost,
            p.elsewhere_gained,
            p.phantom,
            p.missed,
        ];
        for (sum, part) in self.parts.iter_mut().zip(parts) {
            *sum += u128::from(part);
        }
        self.drifted += u64::from(p.drifts());
        self.drift_pm = (u128::from(self.drifted) * 1000 / u128::from(self.attributed)) as u64;
    }
}

/// What a group is, for the page's styling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    Run,
    Cohort,
    Worker,
    Outside,
}

/// One row of the parts table and one bar of the chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// As the page shows it: ids cut as every id on the page is.
    pub name: String,
    pub kind: GroupKind,
    pub sums: GroupSums,
}

/// Drifted records per serving worker per bucket of decision ticks (SPEC.md §14.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftGrid {
    pub t_first: u64,
    /// Ticks per bucket.
    pub width: u64,
    /// Each drawn worker's name and drifted records per bucket.
    pub rows: Vec<(String, Vec<u64>)>,
    /// Workers with a drifted record that are not drawn.
    pub more: usize,
    /// Every attributed record per bucket.
    pub attributed: Vec<u64>,
}

/// The groups in the table's order: the run, the cohorts, the serving workers in id
/// byte order and, when any record ran outside the fleet, that group last.
pub fn groups(figures: &JoinFigures, records: &[AttributedRecord]) -> Option<Vec<Group>> {
    let run = figures.attribution.as_ref()?;
    let mut groups = vec![Group {
        name: "run".to_owned(),
        kind: GroupKind::Run,
        sums: GroupSums::of_attribution(run),
    }];
    for cohort in figures.cohorts.iter().flatten() {
        if let Some(a) = &cohort.figures.attribution {
            let name = [&cohort.tenant, &cohort.model, &cohort.adapter]
                .map(|id| shown_request_id(id))
                .join(" / ");
            groups.push(Group {
                name,
                kind: GroupKind::Cohort,
                sums: GroupSums::of_attribution(a),
            });
        }
    }
    let mut by_worker: BTreeMap<&str, GroupSums> = BTreeMap::new();
    let mut outside = GroupSums::default();
    for record in records {
        match &record.serving_worker {
            Some(worker) => by_worker.entry(worker).or_default().add(&record.parts),
            None => outside.add(&record.parts),
        }
    }
    groups.extend(by_worker.into_iter().map(|(worker, sums)| Group {
        name: shown_request_id(worker),
        kind: GroupKind::Worker,
        sums,
    }));
    if outside.attributed > 0 {
        groups.push(Group {
            name: OUTSIDE_FLEET.to_owned(),
            kind: GroupKind::Outside,
            sums: outside,
        });
    }
    Some(groups)
}

/// The bucket rule of SPEC.md §14.6: `(t_first, width, buckets)` over the records'
/// decision ticks, `None` without a record.
pub fn buckets(records: &[AttributedRecord]) -> Option<(u64, u64, usize)> {
    let t_first = records.iter().map(|r| r.tick).min()?;
    let t_last = records.iter().map(|r| r.tick).max()?;
    let span = u128::from(t_last - t_first) + 1;
    let width = span.div_ceil(u128::from(DRIFT_BUCKETS_MAX)).max(1) as u64;
    let buckets = ((t_last - t_first) / width + 1) as usize;
    Some((t_first, width, buckets))
}

/// The drift grid, `None` when no attributed record drifted.
pub fn drift_grid(records: &[AttributedRecord]) -> Option<DriftGrid> {
    let (t_first, width, buckets) = buckets(records)?;
    let bucket = |tick: u64| ((tick - t_first) / width) as usize;
    let mut attributed = vec![0u64; buckets];
    // `None` (outside the fleet) sorts first in a map; it is moved last below.
    let mut drifted: BTreeMap<Option<&str>, Vec<u64>> = BTreeMap::new();
    for record in records {
        attributed[bucket(record.tick)] += 1;
        if record.parts.drifts() {
            let row = drifted
                .entry(record.serving_worker.as_deref())
                .or_insert_with(|| vec![0; buckets]);
            row[bucket(record.tick)] += 1;
        }
    }
    if drifted.is_empty() {
        return None;
    }
    let mut rows: Vec<(Option<&str>, Vec<u64>)> = drifted.into_iter().collect();
    let outside_first = usize::from(rows[0].0.is_none());
    rows.rotate_left(outside_first);
    let total = |row: &[u64]| row.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    // The most drifted first, ties in the table's order; then drawn in the table's order.
    order.sort_by_key(|&i| (std::cmp::Reverse(total(&rows[i].1)), i));
    order.truncate(WORKERS_DRAWN_MAX);
    order.sort_unstable();
    let more = rows.len() - order.len();
    let rows = order
        .into_iter()
        .map(|i| {
            let name = rows[i].0.map_or(OUTSIDE_FLEET.to_owned(), shown_request_id);
            (name, std::mem::take(&mut rows[i].1))
        })
        .collect();
    Some(DriftGrid {
        t_first,
        width,
        rows,
        more,
        attributed,
    })
}

/// One row of the parts table, every figure as the page writes it.
#[derive(Debug, Clone, Serialize)]
pub struct PartsRow {
    pub group: String,
    pub kind: GroupKind,
    /// `attributed`, `prompt_tokens`, `cached_tokens`, `lost_tokens`, the eight parts
    /// (credits with a leading `−`), `drifted`, `drift_pm`.
    pub figures: Vec<String>,
}

impl PartsRow {
    fn of(group: &Group) -> PartsRow {
        let s = &group.sums;
        let mut figures = vec![
            s.attributed.to_string(),
            s.prompt_tokens.to_string(),
            s.cached_tokens.to_string(),
            s.lost_tokens.to_string(),
        ];
        figures.extend(s.parts.iter().enumerate().map(|(i, &part)| {
            if CREDITS.contains(&i) && part > 0 {
                format!("−{part}")
            } else {
                part.to_string()
            }
        }));
        figures.push(s.drifted.to_string());
        figures.push(s.drift_pm.to_string());
        PartsRow {
            group: group.name.clone(),
            kind: group.kind,
            figures,
        }
    }
}

/// What the template shows of the view.
#[derive(Debug, Clone, Serialize)]
pub struct MissedView {
    pub completed: u64,
    pub attributed: u64,
    pub unknown: u64,
    pub hidden: u64,
    pub served_elsewhere: u64,
    pub served_outside_fleet: u64,
    pub served_unknown: u64,
    pub cached_over_prompt: u64,
    pub rows: Vec<PartsRow>,
    pub parts_svg: String,
    pub drift_svg: Option<String>,
    /// `t_first` and ticks per bucket, when any record is attributed.
    pub drift_first_tick: Option<u64>,
    pub drift_ticks_per_bucket: Option<u64>,
}

/// The view of a join with an attribution, `None` without one.
pub fn view(figures: &JoinFigures, records: &[AttributedRecord]) -> Option<MissedView> {
    let run = figures.attribution.as_ref()?;
    let groups = groups(figures, records)?;
    let buckets = buckets(records);
    Some(MissedView {
        completed: figures.counts.completed,
        attributed: run.attributed,
        unknown: run.unknown,
        hidden: run.hidden,
        served_elsewhere: run.served_elsewhere,
        served_outside_fleet: run.served_outside_fleet,
        served_unknown: run.served_unknown,
        cached_over_prompt: run.cached_over_prompt,
        rows: groups.iter().map(PartsRow::of).collect(),
        parts_svg: missed_charts::parts_svg(&groups),
        drift_svg: drift_grid(records).map(|grid| missed_charts::drift_svg(&grid)),
        drift_first_tick: buckets.map(|(t_first, _, _)| t_first),
        drift_ticks_per_bucket: buckets.map(|(_, width, _)| width),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_core::join::{join_with_records, JoinOptions, TraceCohorts};
    use kvroute_core::Policy;

    const SPEC_TRACE: &str = include_str!("../../../fixtures/spec_example/trace.json");

    fn record(tick: u64, worker: Option<&str>, phantom: u64) -> AttributedRecord {
        AttributedRecord {
            tick,
            serving_worker: worker.map(str::to_owned),
            parts: RecordParts {
                prompt: 100,
                cached: 100 - phantom,
                phantom,
                ..RecordParts::default()
            },
        }
    }

    fn ticks(ticks: &[u64]) -> Vec<AttributedRecord> {
        ticks.iter().map(|&t| record(t, Some("w0"), 0)).collect()
    }

    #[test]
    fn buckets_are_at_most_24_of_a_whole_number_of_ticks() {
        assert_eq!(buckets(&[]), None);
        // One tick: one bucket of one tick.
        assert_eq!(buckets(&ticks(&[7, 7])), Some((7, 1, 1)));
        // 24 ticks fit 24 buckets of one; a 25th makes them two ticks wide.
        assert_eq!(buckets(&ticks(&[10, 33])), Some((10, 1, 24)));
        assert_eq!(buckets(&ticks(&[10, 34])), Some((10, 2, 13)));
        // Ticks 0 to 99: ceil(100 / 24) = 5 ticks a bucket, floor(99 / 5) + 1 = 20.
        assert_eq!(buckets(&ticks(&[99, 0, 50])), Some((0, 5, 20)));
        assert_eq!(buckets(&ticks(&[0, u64::MAX])).map(|b| b.2), Some(24));
    }

    #[test]
    fn the_drift_grid_counts_drifted_records_per_worker_and_bucket() {
        let records = vec![
            record(0, Some("w1"), 5),
            record(0, Some("w0"), 0),
            record(99, Some("w1"), 5),
            record(12, None, 3),
            record(14, Some("w0"), 1),
        ];
        let grid = drift_grid(&records).expect("records drift");
        assert_eq!((grid.t_first, grid.width, grid.more), (0, 5, 0));
        let mut w0 = vec![0; 20];
        w0[2] = 1;
        let mut w1 = vec![0; 20];
        (w1[0], w1[19]) = (1, 1);
        let mut outside = vec![0; 20];
        outside[2] = 1;
        assert_eq!(
            grid.rows,
            vec![
                ("w0".to_owned(), w0),
                ("w1".to_owned(), w1),
                (OUTSIDE_FLEET.to_owned(), outside)
            ]
        );
        let mut attributed = vec![0; 20];
        (attributed[0], attributed[2], attributed[19]) = (2, 2, 1);
        assert_eq!(grid.attributed, attributed);
        assert_eq!(drift_grid(&ticks(&[1, 2])), None, "nothing drifted");
    }

    #[test]
    fn the_most_drifted_workers_are_drawn_and_the_rest_counted() {
        let names: Vec<String> = (0..30).map(|i| format!("w{i:02}")).collect();
        // Worker i drifts i + 1 times, so w00 to w05 are the six left out.
        let records: Vec<AttributedRecord> = names
            .iter()
            .enumerate()
            .flat_map(|(i, name)| (0..=i).map(move |_| record(3, Some(name), 1)))
            .collect();
        let grid = drift_grid(&records).unwrap();
        assert_eq!(grid.more, 6);
        assert_eq!(grid.rows.len(), WORKERS_DRAWN_MAX);
        assert_eq!(grid.rows[0], ("w06".to_owned(), vec![7]));
    }

    fn spec_view(completions: &str, run: Policy) -> (MissedView, Vec<Group>) {
        let receipt = kvroute_core::replay_bytes(SPEC_TRACE.as_bytes()).unwrap();
        let trace = kvroute_core::parse_trace(SPEC_TRACE.as_bytes()).unwrap();
        let options = JoinOptions {
            run: Some(run),
            trace: Some(Ok(TraceCohorts::of(&trace, None))),
            ..JoinOptions::default()
        };
        let (joined, records) =
            join_with_records(&receipt[..], completions.as_bytes(), &options).unwrap();
        let groups = groups(&joined.figures, &records).unwrap();
        (view(&joined.figures, &records).unwrap(), groups)
    }

    fn figures(row: &PartsRow) -> Vec<&str> {
        row.figures.iter().map(String::as_str).collect()
    }

    /// SPEC.md §14.7's worked example: `cache_plus_load` chose `w0` (reuse 1024 of a
    /// 1200-token prompt), the record says 512 were cached: `176 + 512 = 1200 − 512`.
    #[test]
    fn the_worked_example_is_one_row_each_for_the_run_its_cohort_and_w0() {
        let line = r#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":10,"avg_itl_ms":1,"cached_tokens":512}}"#;
        let (view, groups) = spec_view(line, Policy::CachePlusLoad);
        let expected = [
            "1", "1200", "512", "688", "176", "0", "0", "0", "0", "0", "512", "0", "1", "1000",
        ];
        let names: Vec<&str> = view.rows.iter().map(|r| r.group.as_str()).collect();
        assert_eq!(names, ["run", "acme / m1 / base", "w0"]);
        for row in &view.rows {
            assert_eq!(figures(row), expected, "{}", row.group);
        }
        // `hidden`: workload 176, and the eligible `w1` lists `tenant_mismatch`.
        assert_eq!(
            (view.attributed, view.served_unknown, view.hidden),
            (1, 1, 1)
        );
        assert_eq!(
            (view.drift_first_tick, view.drift_ticks_per_bucket),
            (Some(1), Some(1))
        );
        assert!(view.drift_svg.is_some());
        assert_eq!(groups[2].kind, GroupKind::Worker);
    }

    /// The same record served by `prefill_worker_id` 7, which is no worker of the run:
    /// `176 + 1024 − 512 = 688`, shown as `outside the fleet` with the credit signed.
    #[test]
    fn the_worked_example_served_outside_the_fleet_signs_its_credit() {
        let line = r#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":10,"avg_itl_ms":1,"cached_tokens":512,"worker":{"prefill_worker_id":7}}}"#;
        let (view, _) = spec_view(line, Policy::CachePlusLoad);
        let outside = view.rows.last().unwrap();
        assert_eq!(outside.group, OUTSIDE_FLEET);
        assert_eq!(
            figures(outside),
            [
                "1", "1200", "512", "688", "176", "0", "0", "0", "1024", "0", "0", "−512", "1",
                "1000"
            ]
        );
        assert_eq!(
            view.rows.len(),
            3,
            "run, cohort, outside: no worker of the run"
        );
        assert_eq!(view.served_outside_fleet, 1);
    }

    /// `least_load` chose `w1` for its load: 1024 tokens paid for load, 176 workload of
    /// which `w1`'s tenant mismatch makes the record `hidden`; nothing drifted.
    #[test]
    fn the_worked_example_least_load_paid_for_load_and_did_not_drift() {
        let line = r#"{"metadata":{"x_request_id":"r1","request_start_ns":1},"metrics":{"time_to_first_token":{"value":10,"unit":"ms"},"inter_token_latency":{"value":1,"unit":"ms"},"usage_prompt_cache_read_tokens":{"value":0,"unit":"tokens"}}}"#;
        let (view, _) = spec_view(line, Policy::LeastLoad);
        assert_eq!(
            figures(&view.rows[0]),
            ["1", "1200", "0", "1200", "176", "0", "1024", "0", "0", "0", "0", "0", "0", "0"]
        );
        assert_eq!(view.rows[2].group, "w1");
        assert_eq!(view.hidden, 1);
        assert_eq!(view.drift_svg, None);
    }
}
