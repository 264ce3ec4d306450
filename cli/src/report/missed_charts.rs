//! The two SVG charts of the Why it missed view (SPEC.md §14.6), drawn in pixels with
//! plotters: the parts of each group as a horizontal stacked bar (losses right of 0,
//! credits left of it as outlined boxes, the net lost share ticked), and the drift grid
//! (drifted records per serving worker per bucket of decision ticks). Every label is
//! cut to a width the chart leaves for it, so nothing runs past the SVG's edge.

use super::charts::{compact, font, render, GRID, INK};
use super::missed::{DriftGrid, Group, GroupKind, CREDITS, PART_NAMES, WORKERS_DRAWN_MAX};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const CHART_WIDTH_PX: u32 = 900;
/// Group and worker names end here, right-aligned.
const LABEL_RIGHT_PX: i32 = 200;
/// A name's characters at most: about 7 pixels each of an 11-pixel font fill 200 px.
const LABEL_CHARS_MAX: usize = 26;
const PLOT_LEFT_PX: i32 = 212;
const PLOT_RIGHT_PX: i32 = 828;
/// The lost share's text, right of the bars.
const SHARE_LEFT_PX: i32 = 838;
const LEGEND_HEIGHT_PX: i32 = 46;
const LEGEND_LEFT_PX: i32 = 12;
const BAR_ROW_PX: i32 = 22;
const BAR_HEIGHT_PX: i32 = 14;
const AXIS_HEIGHT_PX: i32 = 48;
const GRID_ROW_PX: i32 = 20;
/// A drift cell is at most this wide, so a few buckets still read as a grid.
const CELL_WIDTH_MAX_PX: i32 = 60;
/// Width of a character of a 10- or 11-pixel label, rounded up, to space labels.
const CHAR_WIDTH_PX: i32 = 7;

/// The parts' colours, in [`PART_NAMES`] order; the credits are drawn outlined.
pub const PART_COLOURS: [RGBColor; 8] = [
    RGBColor(0x86, 0x8e, 0x96),
    RGBColor(0xf5, 0x9f, 0x00),
    RGBColor(0x1c, 0x6e, 0xc9),
    RGBColor(0x84, 0x5e, 0xf7),
    RGBColor(0xd9, 0x48, 0x0f),
    RGBColor(0x2f, 0x9e, 0x44),
    RGBColor(0xc9, 0x2a, 0x2a),
    RGBColor(0x0c, 0x85, 0x99),
];
const DRIFT_COLOUR: RGBColor = RGBColor(0xc9, 0x2a, 0x2a);
const COUNT_COLOUR: RGBColor = RGBColor(0x86, 0x8e, 0x96);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// `name` cut to [`LABEL_CHARS_MAX`] characters, an ellipsis marking the cut.
pub fn label(name: &str) -> String {
    if name.chars().count() <= LABEL_CHARS_MAX {
        return name.to_owned();
    }
    let kept: String = name.chars().take(LABEL_CHARS_MAX - 1).collect();
    format!("{kept}…")
}

/// `part / whole` as a fraction, for drawing only (the table has the exact figures).
fn share(part: u128, whole: u128) -> f64 {
    part as f64 / whole as f64
}

/// A per mille as `57.3%`.
fn percent_text(part: u128, whole: u128) -> String {
    let pm = (part * 1000).checked_div(whole).unwrap_or(0);
    format!("{}.{}%", pm / 10, pm % 10)
}

/// The groups the chart draws: every group with prompt tokens, at most
/// [`WORKERS_DRAWN_MAX`] serving ones (the most lost tokens, ties in table order), and
/// how many serving groups with prompt tokens are left out.
fn drawn(groups: &[Group]) -> (Vec<&Group>, usize) {
    let with_prompt: Vec<&Group> = groups.iter().filter(|g| g.sums.prompt_tokens > 0).collect();
    let serving = |g: &Group| matches!(g.kind, GroupKind::Worker | GroupKind::Outside);
    let mut order: Vec<usize> = (0..with_prompt.len())
        .filter(|&i| serving(with_prompt[i]))
        .collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(with_prompt[i].sums.lost_tokens), i));
    let more = order.len().saturating_sub(WORKERS_DRAWN_MAX);
    order.truncate(WORKERS_DRAWN_MAX);
    let kept = (0..with_prompt.len())
        .filter(|i| !serving(with_prompt[*i]) || order.contains(i))
        .map(|i| with_prompt[i])
        .collect();
    (kept, more)
}

/// Each drawn group's losses and credits as shares of its prompt tokens.
fn extents(groups: &[&Group]) -> (f64, f64) {
    let mut credit_max: f64 = 0.0;
    let mut loss_max: f64 = 0.0;
    for g in groups {
        let s = &g.sums;
        let (credit, loss) = (0..8).fold((0, 0), |(c, l), i| {
            if CREDITS.contains(&i) {
                (c + s.parts[i], l)
            } else {
                (c, l + s.parts[i])
            }
        });
        credit_max = credit_max.max(share(credit, s.prompt_tokens));
        loss_max = loss_max.max(share(loss, s.prompt_tokens));
    }
    (credit_max, loss_max.max(0.01))
}

/// The pixel of a share on the axis from `-left` to `right`.
fn pixel(value: f64, (left, right): (f64, f64)) -> i32 {
    let span = (PLOT_RIGHT_PX - PLOT_LEFT_PX) as f64;
    PLOT_LEFT_PX + ((value + left) / (left + right) * span).round() as i32
}

/// The parts chart of `groups` (SPEC.md §14.6, 3).
pub fn parts_svg(groups: &[Group]) -> String {
    let (drawn, more) = drawn(groups);
    let rows = drawn.len().max(1) as i32;
    let height =
        LEGEND_HEIGHT_PX + rows * BAR_ROW_PX + AXIS_HEIGHT_PX + if more > 0 { 16 } else { 0 };
    let axis = extents(&drawn);
    render((CHART_WIDTH_PX, height as u32), |root| {
        parts_legend(root)?;
        let bars_bottom = LEGEND_HEIGHT_PX + rows * BAR_ROW_PX;
        parts_axis(root, axis, bars_bottom)?;
        for (row, group) in drawn.iter().enumerate() {
            let top = LEGEND_HEIGHT_PX + row as i32 * BAR_ROW_PX + (BAR_ROW_PX - BAR_HEIGHT_PX) / 2;
            parts_bar(root, group, axis, top)?;
        }
        if more > 0 {
            root.draw(&Text::new(
                format!("and {more} more serving workers: every one is in the table"),
                (PLOT_LEFT_PX, bars_bottom + AXIS_HEIGHT_PX),
                font(11),
            ))?;
        }
        Ok(())
    })
}

fn parts_legend(root: &Area) -> Drawn {
    let mut x = LEGEND_LEFT_PX;
    let mut y = 10;
    // The losses on the first line, the credits on a line of their own.
    let losses = (0..PART_NAMES.len()).filter(|i| !CREDITS.contains(i));
    for i in losses.chain(CREDITS) {
        let name = PART_NAMES[i];
        let credit = CREDITS.contains(&i);
        if i == CREDITS[0] {
            (x, y) = (LEGEND_LEFT_PX, 30);
        }
        let colour = PART_COLOURS[i];
        let swatch = [(x, y - 5), (x + 14, y + 5)];
        if credit {
            root.draw(&Rectangle::new(swatch, colour.stroke_width(2)))?;
        } else {
            root.draw(&Rectangle::new(swatch, colour.filled()))?;
        }
        let text = if credit {
            format!("{name} (credit, left of 0)")
        } else {
            name.to_owned()
        };
        root.draw(&Text::new(
            text.clone(),
            (x + 19, y),
            font(11).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        x += 19 + CHAR_WIDTH_PX * text.len() as i32 + 14;
    }
    root.draw(&PathElement::new(
        vec![(x, 23), (x, 37)],
        INK.stroke_width(2),
    ))?;
    root.draw(&Text::new(
        "lost_tokens share",
        (x + 6, 30),
        font(11).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    Ok(())
}

/// Grid lines and tick labels every step of a share, and the axis name.
fn parts_axis(root: &Area, axis: (f64, f64), bars_bottom: i32) -> Drawn {
    let span = axis.0 + axis.1;
    let step = [0.05, 0.1, 0.2, 0.25, 0.5, 1.0]
        .into_iter()
        .find(|step| span / step <= 8.0)
        .unwrap_or(1.0);
    let first = -(axis.0 / step).floor() as i64;
    let last = (axis.1 / step).floor() as i64;
    for k in first..=last {
        let value = k as f64 * step;
        let x = pixel(value, axis);
        let colour = if k == 0 { INK } else { GRID };
        root.draw(&PathElement::new(
            vec![(x, LEGEND_HEIGHT_PX - 4), (x, bars_bottom)],
            colour.stroke_width(1),
        ))?;
        let sign = if k < 0 { "−" } else { "" };
        root.draw(&Text::new(
            format!("{sign}{}%", (value.abs() * 100.0).round() as u64),
            (x, bars_bottom + 4),
            font(10).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    root.draw(&Text::new(
        "share of the group's prompt tokens (credits left of 0)",
        ((PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2, bars_bottom + 22),
        font(11).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    Ok(())
}

fn parts_bar(root: &Area, group: &Group, axis: (f64, f64), top: i32) -> Drawn {
    let s = &group.sums;
    let middle = top + BAR_HEIGHT_PX / 2;
    root.draw(&Text::new(
        label(&group.name),
        (LABEL_RIGHT_PX, middle),
        font(11).pos(Pos::new(HPos::Right, VPos::Center)),
    ))?;
    let (mut right, mut left) = (0.0, 0.0);
    for (i, &part) in s.parts.iter().enumerate() {
        let width = share(part, s.prompt_tokens);
        if width == 0.0 {
            continue;
        }
        let colour = PART_COLOURS[i];
        if CREDITS.contains(&i) {
            let corners = [
                (pixel(-left - width, axis), top + 1),
                (pixel(-left, axis), top + BAR_HEIGHT_PX - 1),
            ];
            root.draw(&Rectangle::new(corners, colour.stroke_width(2)))?;
            left += width;
        } else {
            let corners = [
                (pixel(right, axis), top),
                (pixel(right + width, axis), top + BAR_HEIGHT_PX),
            ];
            root.draw(&Rectangle::new(corners, colour.filled()))?;
            right += width;
        }
    }
    let net = pixel(share(s.lost_tokens, s.prompt_tokens), axis);
    root.draw(&PathElement::new(
        vec![(net, top - 3), (net, top + BAR_HEIGHT_PX + 3)],
        INK.stroke_width(2),
    ))?;
    root.draw(&Text::new(
        percent_text(s.lost_tokens, s.prompt_tokens),
        (SHARE_LEFT_PX, middle),
        font(11).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    Ok(())
}

/// `colour` at `strength` (0 to 1) over white.
fn shade(colour: RGBColor, strength: f64) -> RGBColor {
    let mix = |c: u8| (255.0 - (255.0 - c as f64) * strength).round() as u8;
    RGBColor(mix(colour.0), mix(colour.1), mix(colour.2))
}

/// The drift grid (SPEC.md §14.6, 4).
pub fn drift_svg(grid: &DriftGrid) -> String {
    let buckets = grid.attributed.len().max(1) as i32;
    let cell = ((PLOT_RIGHT_PX - PLOT_LEFT_PX) / buckets).min(CELL_WIDTH_MAX_PX);
    let rows = grid.rows.len() as i32 + 1;
    let top = 8;
    let grid_bottom = top + rows * GRID_ROW_PX;
    let height = grid_bottom + AXIS_HEIGHT_PX + if grid.more > 0 { 16 } else { 0 };
    render((CHART_WIDTH_PX, height as u32), |root| {
        let drift_max = grid
            .rows
            .iter()
            .flat_map(|(_, r)| r)
            .copied()
            .max()
            .unwrap_or(1);
        for (i, (name, counts)) in grid.rows.iter().enumerate() {
            let y = top + i as i32 * GRID_ROW_PX;
            grid_row(
                root,
                &label(name),
                counts,
                (DRIFT_COLOUR, drift_max),
                (y, cell),
            )?;
        }
        let attributed_max = grid.attributed.iter().copied().max().unwrap_or(1);
        let y = top + grid.rows.len() as i32 * GRID_ROW_PX;
        grid_row(
            root,
            "attributed",
            &grid.attributed,
            (COUNT_COLOUR, attributed_max),
            (y, cell),
        )?;
        bucket_labels(root, grid, cell, grid_bottom)?;
        if grid.more > 0 {
            root.draw(&Text::new(
                format!(
                    "and {} more serving workers with drifted records",
                    grid.more
                ),
                (PLOT_LEFT_PX, grid_bottom + AXIS_HEIGHT_PX),
                font(11),
            ))?;
        }
        Ok(())
    })
}

/// One row of cells at `y`, each shaded by its count against `max` and holding it.
fn grid_row(
    root: &Area,
    name: &str,
    counts: &[u64],
    (colour, max): (RGBColor, u64),
    (y, cell): (i32, i32),
) -> Drawn {
    root.draw(&Text::new(
        name.to_owned(),
        (LABEL_RIGHT_PX, y + GRID_ROW_PX / 2),
        font(11).pos(Pos::new(HPos::Right, VPos::Center)),
    ))?;
    for (b, &count) in counts.iter().enumerate() {
        let x = PLOT_LEFT_PX + b as i32 * cell;
        let strength = count as f64 / max.max(1) as f64;
        let corners = [(x, y), (x + cell - 1, y + GRID_ROW_PX - 1)];
        root.draw(&Rectangle::new(corners, shade(colour, strength).filled()))?;
        root.draw(&Rectangle::new(corners, GRID.stroke_width(1)))?;
        if count > 0 {
            let ink = if strength > 0.6 { WHITE } else { INK };
            root.draw(&Text::new(
                compact(count),
                (x + cell / 2, y + GRID_ROW_PX / 2),
                font(10)
                    .color(&ink)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
    }
    Ok(())
}

/// Each bucket's first tick under its column (every k-th when they would touch), and
/// the axis name.
fn bucket_labels(root: &Area, grid: &DriftGrid, cell: i32, grid_bottom: i32) -> Drawn {
    let buckets = grid.attributed.len() as u64;
    let last_start = grid.t_first + (buckets - 1) * grid.width;
    let widest = CHAR_WIDTH_PX * compact(last_start).len() as i32 + 6;
    let every = (widest + cell - 1) / cell;
    for b in (0..buckets).step_by(every.max(1) as usize) {
        let x = PLOT_LEFT_PX + b as i32 * cell + cell / 2;
        root.draw(&Text::new(
            compact(grid.t_first + b * grid.width),
            (x, grid_bottom + 4),
            font(10).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    root.draw(&Text::new(
        format!(
            "decision tick (the first of each bucket of {} ticks)",
            grid.width
        ),
        ((PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2, grid_bottom + 22),
        font(11).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::missed::GroupSums;

    fn group(name: &str, kind: GroupKind, prompt: u128, lost: u128) -> Group {
        let mut parts = [0; 8];
        parts[0] = lost;
        Group {
            name: name.to_owned(),
            kind,
            sums: GroupSums {
                attributed: 1,
                prompt_tokens: prompt,
                cached_tokens: prompt - lost,
                lost_tokens: lost,
                parts,
                ..GroupSums::default()
            },
        }
    }

    /// The run and cohorts are always drawn; of 30 serving workers, the 24 with the
    /// most lost tokens, in the table's order, and the other 6 are counted.
    #[test]
    fn the_parts_chart_draws_the_24_serving_groups_that_lost_most() {
        let mut groups = vec![
            group("run", GroupKind::Run, 1000, 500),
            group("empty cohort", GroupKind::Cohort, 0, 0),
        ];
        groups.extend((0..30).map(|i| group(&format!("w{i:02}"), GroupKind::Worker, 100, i)));
        let (kept, more) = drawn(&groups);
        assert_eq!(more, 6);
        let names: Vec<&str> = kept.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names.len(),
            25,
            "the run and 24 workers; no bar without prompt tokens"
        );
        assert_eq!(&names[..3], ["run", "w06", "w07"]);
        let svg = parts_svg(&groups);
        assert!(svg.contains("and 6 more serving workers"));
        assert!(!svg.contains("w05\n"));
    }

    #[test]
    fn long_names_are_cut_to_the_label_column() {
        assert_eq!(label("dynamo|7|dp0"), "dynamo|7|dp0");
        let long = "a".repeat(40);
        assert_eq!(label(&long).chars().count(), LABEL_CHARS_MAX);
        assert!(label(&long).ends_with('…'));
    }
}
