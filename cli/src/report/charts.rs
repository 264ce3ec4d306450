//! The report's SVG charts, drawn with plotters' SVG backend: the Pareto view of one
//! decision, the small per-metric bar charts and per-worker assigned work over time.
//!
//! Every candidate of a Pareto chart is exactly one circle of radius
//! [`CANDIDATE_MARKER_RADIUS_PX`], and nothing else in that chart uses that radius, so
//! the page's self-check (and a browser test) can count plotted candidates in the SVG.

use super::model::{DecisionDoc, RowDoc};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;

/// Radius of a candidate's marker; unique within a Pareto chart (see the module doc).
pub const CANDIDATE_MARKER_RADIUS_PX: u32 = 7;
const CHOSEN_RING_RADIUS_PX: u32 = 12;
const FAILURE_DOT_RADIUS_PX: u32 = 2;
const FAILURE_DOTS: usize = 10;

pub const PARETO_SIZE_PX: (u32, u32) = (640, 400);
const BAR_SIZE_PX: (u32, u32) = (200, 120);
const WORK_SIZE_PX: (u32, u32) = (640, 300);
/// The assigned-work legend's column, right of the plot, so it never covers a line.
const WORK_LEGEND_WIDTH_PX: u32 = 120;
/// A Pareto label line wraps after this many characters: the right margin holds about
/// 24 of an 11-pixel font past the rightmost point.
const LABEL_LINE_CHARS_MAX: usize = 22;
/// The most lines of co-located plain worker ids a Pareto label block shows; the rest
/// are counted ("and 45 more"), and the table below the chart lists every row.
const LABEL_PLAIN_LINES_MAX: usize = 3;
/// Width of one character of an 11-pixel sans-serif label, rounded up: the white box
/// behind a label, which keeps the front line from running through it.
const LABEL_CHAR_WIDTH_PX: i32 = 7;
const LABEL_LINE_HEIGHT_PX: i32 = 13;
/// The most points one worker's line gets in the assigned-work chart; longer runs are
/// sampled evenly (always keeping the last decision), which keeps a 12k-decision trace's
/// chart a few kilobytes.
const WORK_POINTS_MAX: usize = 240;
/// The most worker lines one assigned-work chart draws: the busiest ones.
pub const WORK_LINES_MAX: usize = 12;

const FRONT_COLOUR: RGBColor = RGBColor(0x1c, 0x6e, 0xc9);
const DOMINATED_COLOUR: RGBColor = RGBColor(0xd9, 0x48, 0x0f);
const FAILURE_COLOUR: RGBColor = RGBColor(0x49, 0x50, 0x57);
pub(super) const INK: RGBColor = RGBColor(0x21, 0x25, 0x29);
pub(super) const GRID: RGBColor = RGBColor(0xe9, 0xec, 0xef);

/// The colour of each policy, in receipt order; the page's CSS uses the same.
pub const POLICY_COLOURS: [RGBColor; 5] = [
    RGBColor(0x86, 0x8e, 0x96),
    RGBColor(0x74, 0xb8, 0x16),
    RGBColor(0xf5, 0x9f, 0x00),
    RGBColor(0x1c, 0x6e, 0xc9),
    RGBColor(0x84, 0x5e, 0xf7),
];

/// The worker colours of the assigned-work charts.
const WORKER_COLOURS: [RGBColor; WORK_LINES_MAX] = [
    RGBColor(0x1c, 0x6e, 0xc9),
    RGBColor(0xd9, 0x48, 0x0f),
    RGBColor(0x2f, 0x9e, 0x44),
    RGBColor(0x84, 0x5e, 0xf7),
    RGBColor(0xf5, 0x9f, 0x00),
    RGBColor(0x0c, 0x85, 0x99),
    RGBColor(0xe6, 0x49, 0x80),
    RGBColor(0x5c, 0x5f, 0x66),
    RGBColor(0x66, 0xa8, 0x0f),
    RGBColor(0x9c, 0x36, 0xb5),
    RGBColor(0xc9, 0x2a, 0x2a),
    RGBColor(0x10, 0x98, 0xad),
];

type ChartResult = Result<(), Box<dyn std::error::Error>>;

pub(super) fn render(
    size_px: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> ChartResult,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size_px).into_drawing_area();
        // Drawing into a String cannot fail for I/O reasons; a plotting error would be a
        // bug in the ranges computed here, and an empty chart is the honest outcome.
        let _ = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|_| draw(&root));
        let _ = root.present();
    }
    svg
}

/// A font of `size_px` as the browser draws it: plotters' SVG backend writes a text's
/// size divided by 1.24², so the size given to it is scaled up by as much.
pub(super) fn font(size_px: u32) -> TextStyle<'static> {
    ("sans-serif", size_px as f64 * 1.24 * 1.24)
        .into_font()
        .color(&INK)
}

/// Axis labels as whole numbers, shortened like the bar labels (`15M`, `250k`).
fn integer_label(value: &f64) -> String {
    compact(value.max(0.0).round() as u64)
}

/// Tokens from milli-tokens, for the axes.
fn tokens(milli: u64) -> f64 {
    milli as f64 / 1000.0
}

/// Where a failed row's dots go, in pixels from its point: a ring just outside the
/// marker's own radius, so a failed row that shares its point with a live one still
/// shows its dotted ring around it.
fn failure_ring() -> impl Iterator<Item = (i32, i32)> {
    let r = (CANDIDATE_MARKER_RADIUS_PX + FAILURE_DOT_RADIUS_PX) as f64;
    (0..FAILURE_DOTS).map(move |i| {
        let angle = i as f64 * std::f64::consts::TAU / FAILURE_DOTS as f64;
        (
            (r * angle.cos()).round() as i32,
            (r * angle.sin()).round() as i32,
        )
    })
}

/// Per point (reuse, after_milli): plain worker ids, then lines of their own.
type LabelBlock<'a> = (Vec<&'a str>, Vec<String>);

/// Rows at the same point share one label block, so co-located workers (every cold
/// worker of an idle fleet) read "w0, w1, w2" instead of overprinting. The chosen
/// worker and every row with a reason get a line of their own, the chosen one first.
fn label_blocks(decision: &DecisionDoc) -> BTreeMap<(u64, u64), LabelBlock<'_>> {
    let chosen = decision.chosen.as_deref();
    let mut labels: BTreeMap<(u64, u64), LabelBlock> = BTreeMap::new();
    for row in &decision.candidates {
        let entry = labels.entry((row.reuse, row.after_milli)).or_default();
        let is_chosen = Some(row.worker.as_str()) == chosen;
        if row.reasons.is_empty() && !is_chosen {
            entry.0.push(&row.worker);
            continue;
        }
        let mut line = row.worker.clone();
        if is_chosen {
            line.push_str(" (chosen)");
        }
        if !row.reasons.is_empty() {
            line.push_str(": ");
            line.push_str(&row.reasons.join(", "));
        }
        if is_chosen {
            entry.1.insert(0, line);
        } else {
            entry.1.push(line);
        }
    }
    labels
}

/// A label block's lines: each line of its own wrapped, then the plain ids wrapped to
/// at most `LABEL_PLAIN_LINES_MAX` lines (the rest counted).
fn label_lines((plain, reasoned): &LabelBlock<'_>) -> Vec<String> {
    let mut lines: Vec<String> = reasoned
        .iter()
        .flat_map(|line| wrap_label(&[line.as_str()], usize::MAX))
        .collect();
    lines.extend(wrap_label(plain, LABEL_PLAIN_LINES_MAX));
    lines
}

/// The Pareto view of one decision: reusable prefix tokens against live work after
/// assignment, the front drawn as a line, the chosen worker ringed, dominated rows in
/// orange and failed evidence (ineligible, stale, overloaded) as dotted points labelled
/// with their reasons.
pub fn pareto_svg(decision: &DecisionDoc) -> String {
    render(PARETO_SIZE_PX, |root| {
        let rows = &decision.candidates;
        // An axis of at least 100 tokens, so a decision where nothing is reusable still
        // gets whole-number ticks.
        let reuse_max = rows.iter().map(|r| r.reuse).max().unwrap_or(0).max(100) as f64;
        let after_max = rows
            .iter()
            .map(|r| tokens(r.after_milli))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .margin_right(150)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(
                -reuse_max * 0.04..reuse_max * 1.08,
                -after_max * 0.04..after_max * 1.1,
            )?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .bold_line_style(GRID)
            .axis_style(INK)
            .x_desc("reusable prefix (tokens)")
            .y_desc("live work after assignment (tokens)")
            .label_style(font(11))
            .axis_desc_style(font(12))
            .x_labels(6)
            .y_labels(6)
            .x_label_formatter(&integer_label)
            .y_label_formatter(&integer_label)
            .draw()?;
        draw_candidates(&mut chart, decision)?;
        draw_labels(&mut chart, decision)
    })
}

/// The Pareto chart's axes: reusable prefix tokens across, live work after assignment
/// (tokens) up.
type ParetoChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Where a row sits on the Pareto chart.
fn pareto_point(row: &RowDoc) -> (f64, f64) {
    (row.reuse as f64, tokens(row.after_milli))
}

/// The front as a line, then every row's marker (failed evidence as dotted rings) and a
/// ring around the chosen worker.
fn draw_candidates(chart: &mut ParetoChart, decision: &DecisionDoc) -> ChartResult {
    let rows = &decision.candidates;
    let mut front: Vec<&RowDoc> = rows
        .iter()
        .filter(|r| r.in_front_set() && r.dominated_by.is_none())
        .collect();
    front.sort_by_key(|r| (r.reuse, r.after_milli));
    chart.draw_series(LineSeries::new(
        front.iter().map(|r| pareto_point(r)),
        FRONT_COLOUR.stroke_width(2),
    ))?;

    for row in rows.iter().filter(|r| r.is_failure()) {
        let (x, y) = pareto_point(row);
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, y))
                + Circle::new((0, 0), CANDIDATE_MARKER_RADIUS_PX, WHITE.filled()),
        ))?;
        chart.draw_series(failure_ring().map(|offset| {
            EmptyElement::at((x, y))
                + Circle::new(offset, FAILURE_DOT_RADIUS_PX, FAILURE_COLOUR.filled())
        }))?;
    }
    chart.draw_series(rows.iter().filter(|r| !r.is_failure()).map(|row| {
        let colour = if row.dominated_by.is_none() {
            FRONT_COLOUR
        } else {
            DOMINATED_COLOUR
        };
        EmptyElement::at(pareto_point(row))
            + Circle::new((0, 0), CANDIDATE_MARKER_RADIUS_PX, colour.filled())
    }))?;
    if let Some(chosen) = decision.chosen_row() {
        chart.draw_series(std::iter::once(
            EmptyElement::at(pareto_point(chosen))
                + Circle::new((0, 0), CHOSEN_RING_RADIUS_PX, INK.stroke_width(2)),
        ))?;
    }
    Ok(())
}

/// Each label block beside its point, every line on a white box.
fn draw_labels(chart: &mut ParetoChart, decision: &DecisionDoc) -> ChartResult {
    let labels = label_blocks(decision);
    for (&(reuse, after_milli), block) in &labels {
        let lines = label_lines(block);
        let at = (reuse as f64, tokens(after_milli));
        let top = |i: usize| -6 + LABEL_LINE_HEIGHT_PX * i as i32;
        // A white box under each line first: the front line and the grid pass
        // behind the label instead of through it.
        chart.draw_series(lines.iter().enumerate().map(|(i, line)| {
            let width = LABEL_CHAR_WIDTH_PX * line.chars().count() as i32;
            EmptyElement::at(at)
                + Rectangle::new(
                    [
                        (13, top(i) - 1),
                        (17 + width, top(i) + LABEL_LINE_HEIGHT_PX),
                    ],
                    WHITE.mix(0.85).filled(),
                )
        }))?;
        chart.draw_series(
            lines
                .into_iter()
                .enumerate()
                .map(|(i, line)| EmptyElement::at(at) + Text::new(line, (15, top(i)), font(11))),
        )?;
    }
    Ok(())
}

/// Label lines of at most [`LABEL_LINE_CHARS_MAX`] characters from `parts` (worker ids,
/// or one "w3: stale_view, overloaded" line cut at its commas), at most `lines_max` of
/// them: when more would be needed, the last says how many parts are left out.
fn wrap_label(parts: &[&str], lines_max: usize) -> Vec<String> {
    let joined_len = |line: &[&str]| line.iter().map(|w| w.len() + 2).sum::<usize>() - 2;
    let words: Vec<&str> = parts.iter().flat_map(|p| p.split(", ")).collect();
    let mut lines: Vec<Vec<&str>> = Vec::new();
    for (i, &word) in words.iter().enumerate() {
        let full = lines_max <= lines.len();
        match lines.last_mut() {
            Some(line) if joined_len(line) + 2 + word.len() <= LABEL_LINE_CHARS_MAX => {
                line.push(word);
            }
            Some(last) if full => {
                // Make room on the last line for the count of the words left out.
                let mut more = words.len() - i;
                while last.len() > 1
                    && joined_len(last) + format!(" and {more} more").len() > LABEL_LINE_CHARS_MAX
                {
                    last.pop();
                    more += 1;
                }
                let count = format!(" and {more} more");
                let mut text: Vec<String> = lines.iter().map(|l| l.join(", ")).collect();
                if let Some(last) = text.last_mut() {
                    last.push_str(&count);
                }
                return text;
            }
            _ => lines.push(vec![word]),
        }
    }
    lines.iter().map(|l| l.join(", ")).collect()
}

/// One small bar chart: one bar per policy, its value printed above it and the
/// policy's initials below.
pub fn bar_svg(title: &str, values: &[u64]) -> String {
    // In receipt order; `Dyn` is `dynamo_default`, present only when the trace sets
    // `dynamo_block_tokens`.
    const INITIALS: [&str; 5] = ["RR", "LL", "LP", "C+L", "Dyn"];
    render(BAR_SIZE_PX, |root| {
        let value_max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(title, font(12))
            .margin(6)
            .build_cartesian_2d(0.0..values.len() as f64, -value_max * 0.2..value_max * 1.2)?;
        let centred = |vpos| font(10).pos(Pos::new(HPos::Center, vpos));
        chart.draw_series(values.iter().enumerate().map(|(i, &value)| {
            let colour = POLICY_COLOURS[i % POLICY_COLOURS.len()];
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, value as f64)],
                colour.filled(),
            )
        }))?;
        chart.draw_series(LineSeries::new(
            [(0.0, 0.0), (values.len() as f64, 0.0)],
            INK.stroke_width(1),
        ))?;
        chart.draw_series(values.iter().enumerate().map(|(i, &value)| {
            EmptyElement::at((i as f64 + 0.5, value as f64))
                + Text::new(compact(value), (0, -3), centred(VPos::Bottom))
        }))?;
        chart.draw_series((0..values.len()).map(|i| {
            Text::new(
                INITIALS.get(i).copied().unwrap_or(""),
                (i as f64 + 0.5, 0.0),
                centred(VPos::Top),
            )
        }))?;
        Ok(())
    })
}

/// `12.3M`, `45.6k` or the number itself: bar labels must fit above a 40-pixel bar.
pub fn compact(value: u64) -> String {
    match value {
        v if v >= 10_000_000 => format!("{:.0}M", v as f64 / 1e6),
        v if v >= 1_000_000 => format!("{:.1}M", v as f64 / 1e6),
        v if v >= 10_000 => format!("{:.0}k", v as f64 / 1e3),
        v => v.to_string(),
    }
}

/// Cumulative work assigned to each worker (`after_milli - work_milli` of each placement,
/// in tokens) against the decision number, where the hot worker's line climbs alone;
/// built a decision at a time, for a run that is read rather than held: each worker's
/// running total, and its line's points so far.
pub struct AssignedWork {
    index_of: std::collections::HashMap<String, usize>,
    totals_milli: Vec<u128>,
    lines: Vec<Vec<(f64, f64)>>,
    /// The run's decisions (counted before), and how many were added.
    decisions: usize,
    added: usize,
    stride: usize,
}

impl AssignedWork {
    /// The chart of a run of `decisions` decisions over the workers `worker_ids`.
    pub fn new(worker_ids: &[String], decisions: usize) -> AssignedWork {
        AssignedWork {
            index_of: worker_ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect(),
            totals_milli: vec![0u128; worker_ids.len()],
            lines: vec![vec![(0.0, 0.0)]; worker_ids.len()],
            decisions,
            added: 0,
            stride: decisions.div_ceil(WORK_POINTS_MAX).max(1),
        }
    }

    /// The run's next decision.
    pub fn add(&mut self, decision: &DecisionDoc) {
        if let Some(row) = decision.chosen_row() {
            if let Some(&w) = self.index_of.get(row.worker.as_str()) {
                self.totals_milli[w] += (row.after_milli - row.work_milli) as u128;
            }
        }
        self.added += 1;
        let n = self.added;
        if n.is_multiple_of(self.stride) || n == self.decisions {
            for (w, line) in self.lines.iter_mut().enumerate() {
                line.push((n as f64, self.totals_milli[w] as f64 / 1000.0));
            }
        }
    }

    /// The chart, titled `policy`.
    pub fn svg(&self, policy: &str, worker_ids: &[String]) -> String {
        let (totals_milli, lines) = (&self.totals_milli, &self.lines);
        let decisions = self.decisions;
        let mut busiest: Vec<usize> = (0..worker_ids.len()).collect();
        busiest.sort_by_key(|&w| std::cmp::Reverse(totals_milli[w]));
        busiest.truncate(WORK_LINES_MAX);
        busiest.sort_unstable();
        let sum_milli: u128 = totals_milli.iter().sum();
        render(WORK_SIZE_PX, |root| {
            let y_max = totals_milli.iter().copied().max().unwrap_or(0) as f64 / 1000.0;
            let root = root.titled(policy, font(13))?;
            let (plot_area, legend_area) =
                root.split_horizontally(WORK_SIZE_PX.0 - WORK_LEGEND_WIDTH_PX);
            let mut chart = ChartBuilder::on(&plot_area)
                .margin(8)
                // Room for the tick labels and, below them, the axis name.
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d(0.0..decisions.max(1) as f64, 0.0..y_max.max(1.0) * 1.05)?;
            chart
                .configure_mesh()
                .max_light_lines(0)
                .bold_line_style(GRID)
                .axis_style(INK)
                .x_desc("decision")
                .y_desc("assigned work (tokens)")
                .label_style(font(10))
                .axis_desc_style(font(11))
                .x_labels(6)
                .y_labels(5)
                .x_label_formatter(&integer_label)
                .y_label_formatter(&integer_label)
                .draw()?;
            for (slot, &w) in busiest.iter().enumerate() {
                let colour = WORKER_COLOURS[slot % WORKER_COLOURS.len()];
                let share_pm = (1000 * totals_milli[w]).checked_div(sum_milli).unwrap_or(0);
                chart.draw_series(LineSeries::new(
                    lines[w].iter().copied(),
                    colour.stroke_width(2),
                ))?;
                // The legend has its own column right of the plot: inside, it covered the
                // lines of the busiest workers, which climb to the top left.
                let y = 12 + 16 * slot as i32;
                legend_area.draw(&PathElement::new(
                    vec![(4, y), (18, y)],
                    colour.stroke_width(2),
                ))?;
                let id: String = worker_ids[w].chars().take(10).collect();
                legend_area.draw(&Text::new(
                    format!("{id} {}.{}%", share_pm / 10, share_pm % 10),
                    (22, y - 6),
                    font(10),
                ))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::RunDoc;

    /// Cumulative work assigned to each worker (`after_milli - work_milli` of each placement,
    /// in tokens) against the decision number: the hot worker's line climbs alone.
    fn assigned_work_svg(run: &RunDoc, worker_ids: &[String]) -> String {
        let mut work = AssignedWork::new(worker_ids, run.decisions.len());
        for decision in &run.decisions {
            work.add(decision);
        }
        work.svg(&run.policy, worker_ids)
    }

    fn row(worker: &str, eligible: bool, reasons: &[&str], reuse: u64, after_milli: u64) -> RowDoc {
        RowDoc {
            worker: worker.into(),
            eligible,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            reuse,
            recomputed: 0,
            queued_prefill: 0,
            active_decode: 0,
            work_milli: 0,
            after_milli,
            cost_milli: after_milli,
            dominated_by: None,
            dominated_count: 0,
        }
    }

    #[test]
    fn every_candidate_is_one_marker_and_failures_are_labelled() {
        let decision = DecisionDoc {
            seq: 7,
            tick: 1,
            request: "r".into(),
            chosen: Some("w1".into()),
            route_kind: "hit".into(),
            tie_count: 1,
            margin_milli: 0,
            candidates: vec![
                row("w0", false, &["adapter_not_loaded"], 0, 9000),
                row("w1", true, &[], 512, 4000),
                row("w2", true, &["stale_view"], 0, 4000),
                // Co-located with w2: one label block, two markers.
                row("w3", true, &[], 0, 4000),
            ],
        };
        let svg = pareto_svg(&decision);
        let marker = format!(r#"r="{CANDIDATE_MARKER_RADIUS_PX}""#);
        assert_eq!(svg.matches(&marker).count(), 4);
        assert!(svg.contains("w0: adapter_not_loaded"));
        assert!(svg.contains("w2: stale_view"));
        assert!(svg.contains("w1 (chosen)"));
        // The chosen ring, and the dotted rings of the two failed rows.
        assert_eq!(
            svg.matches(&format!(r#"r="{CHOSEN_RING_RADIUS_PX}""#))
                .count(),
            1
        );
        assert_eq!(
            svg.matches(&format!(r#"r="{FAILURE_DOT_RADIUS_PX}""#))
                .count(),
            2 * FAILURE_DOTS
        );
    }

    /// Every `<text>` of an SVG: its x, its y and what it says.
    fn texts(svg: &str) -> Vec<(f64, f64, String)> {
        svg.split("<text ")
            .skip(1)
            .map(|text| {
                let attr = |name: &str| -> f64 {
                    let start = text.find(&format!(r#"{name}=""#)).unwrap() + name.len() + 2;
                    text[start..start + text[start..].find('"').unwrap()]
                        .parse()
                        .unwrap()
                };
                let body = &text[text.find('>').unwrap() + 1..text.find("</text>").unwrap()];
                (attr("x"), attr("y"), body.trim().to_owned())
            })
            .collect()
    }

    fn decision_of(rows: Vec<RowDoc>, chosen: &str) -> DecisionDoc {
        DecisionDoc {
            seq: 1,
            tick: 0,
            request: "r".into(),
            chosen: Some(chosen.into()),
            route_kind: "cold".into(),
            tie_count: rows.len() as u64,
            margin_milli: 0,
            candidates: rows,
        }
    }

    /// 64 idle workers at one point (a plain list of their ids would run off the SVG
    /// and hide most of them): the label wraps within the right margin and counts
    /// what it leaves out; the table under the chart lists every row.
    #[test]
    fn sixty_four_co_located_workers_get_a_wrapped_counted_label() {
        let rows = (0..64)
            .map(|i| row(&format!("w{i:02}"), true, &[], 0, 7000))
            .collect();
        let svg = pareto_svg(&decision_of(rows, "w00"));
        let labels: Vec<String> = texts(&svg)
            .into_iter()
            .map(|(_, _, text)| text)
            .filter(|text| text.starts_with('w'))
            .collect();
        assert_eq!(
            labels,
            [
                "w00 (chosen)",
                "w01, w02, w03, w04",
                "w05, w06, w07, w08",
                "w09, w10 and 53 more"
            ]
        );
    }

    /// Each label line sits on a white box, so the front line passes behind it (issue
    /// 25: the front ran through "w2 (chosen)" in the lab's cache_plus_load seq 7).
    #[test]
    fn every_pareto_label_line_has_a_box_under_it() {
        let rows = vec![
            row("w0", true, &[], 2048, 2_824_000),
            row("w1", true, &[], 0, 5_456_000),
            row("w2", true, &[], 0, 2_728_000),
            row("w3", true, &[], 0, 2_728_000),
        ];
        let svg = pareto_svg(&decision_of(rows, "w2"));
        // w0, w1, "w2 (chosen)" and w3 under it.
        let boxes = svg.matches(r##"opacity="0.85" fill="#FFFFFF""##).count();
        assert_eq!(boxes, 4, "{svg}");
        let drawn_after_the_front =
            svg.find("<polyline").unwrap() < svg.find(r#"opacity="0.85""#).unwrap();
        assert!(drawn_after_the_front);
    }

    /// The legend has its own column right of the plot (inside the plot it would
    /// cover the busiest workers' lines), and the axis name is clear of the tick labels.
    #[test]
    fn the_work_legend_is_beside_the_plot_and_the_axis_name_below_the_ticks() {
        let rows = || {
            (0..3)
                .map(|i| row(&format!("w{i}"), true, &[], 0, 1000))
                .collect()
        };
        let run = RunDoc {
            policy: "least_load".into(),
            decisions: (0..30)
                .map(|i| decision_of(rows(), &format!("w{}", i % 3)))
                .collect(),
            cache_log: vec![],
            observation_log: vec![],
            metrics: serde_json::from_value(serde_json::json!({
                "routed": 0, "rejected": 0, "cache_hits": 0, "reused_tokens": 0,
                "recomputed_tokens": 0, "route_churn": 0, "load_skew_milli": 0,
                "latency_proxy_mean_milli": 0, "latency_proxy_p95_milli": 0,
                "latency_proxy_max_milli": 0, "stale_event_rejections": 0,
                "stale_observation_rejections": 0, "boundary_rejections": 0,
                "overload_escapes": 0, "dominated_choices": 0
            }))
            .unwrap(),
        };
        let ids: Vec<String> = (0..3).map(|i| format!("w{i}")).collect();
        let texts = texts(&assigned_work_svg(&run, &ids));
        let legend: Vec<&(f64, f64, String)> =
            texts.iter().filter(|(_, _, t)| t.ends_with('%')).collect();
        assert_eq!(legend.len(), 3);
        let plot_right = (WORK_SIZE_PX.0 - WORK_LEGEND_WIDTH_PX) as f64;
        assert!(
            legend.iter().all(|(x, _, _)| *x >= plot_right),
            "{legend:?}"
        );
        let (_, name_y, _) = texts.iter().find(|(_, _, t)| t == "decision").unwrap();
        let (_, tick_y, _) = texts.iter().find(|(_, _, t)| t == "30").unwrap();
        // The tick labels (12.4 px from their top) and the name (13.6 px above its
        // baseline) need 26 px; 30 leaves a gap.
        assert!(name_y - tick_y >= 30.0, "name {name_y}, ticks {tick_y}");
    }

    #[test]
    fn co_located_ids_wrap_and_the_rest_are_counted() {
        let ids: Vec<String> = (1..64).map(|i| format!("w{i:02}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let lines = wrap_label(&ids, LABEL_PLAIN_LINES_MAX);
        // Five ids of 3 characters a line ("w01, w02, w03, w04, w05" is 23 > 22: four).
        assert_eq!(
            lines,
            [
                "w01, w02, w03, w04",
                "w05, w06, w07, w08",
                "w09, w10 and 53 more"
            ]
        );
        assert!(lines.iter().all(|l| l.len() <= LABEL_LINE_CHARS_MAX));
        assert_eq!(wrap_label(&["w0", "w1", "w2"], 3), ["w0, w1, w2"]);
        assert_eq!(
            wrap_label(&["w3 (chosen): stale_view, overloaded"], usize::MAX),
            ["w3 (chosen): stale_view", "overloaded"]
        );
    }

    #[test]
    fn compact_numbers_fit_a_bar() {
        assert_eq!(compact(9999), "9999");
        assert_eq!(compact(52_000), "52k");
        assert_eq!(compact(2_476_437), "2.5M");
        assert_eq!(compact(137_674_462), "138M");
    }
}
