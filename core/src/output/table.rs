//! The human-readable summary `kvroute replay` prints: one row per policy with the
//! headline metrics of SPEC.md §6.2, then the trace and receipt digests. Column names
//! are the ones `simulate`'s table and the report page use for the same figures
//! (`lat_mean_m`, milli-ticks; stale events and stale observations apart).

use crate::route::metrics::Metrics;
use crate::route::policy::Policy;

/// The summary table from each run's metrics and the two digests.
pub fn summary_table_of(
    runs: &[(Policy, Metrics)],
    trace_digest: &str,
    receipt_digest: &str,
) -> String {
    let header = [
        "policy",
        "routed",
        "rej",
        "hits",
        "reused",
        "recomputed",
        "churn",
        "skew_m",
        "lat_mean_m",
        "lat_p95_m",
        "stale_ev",
        "stale_obs",
        "boundary",
        "escapes",
        "dominated",
    ];
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(policy, m)| {
            vec![
                policy.name().to_owned(),
                m.routed.to_string(),
                m.rejected.to_string(),
                m.cache_hits.to_string(),
                m.reused_tokens.to_string(),
                m.recomputed_tokens.to_string(),
                m.route_churn.to_string(),
                m.load_skew_milli.to_string(),
                m.latency_proxy_mean_milli.to_string(),
                m.latency_proxy_p95_milli.to_string(),
                m.stale_event_rejections.to_string(),
                m.stale_observation_rejections.to_string(),
                m.boundary_rejections.to_string(),
                m.overload_escapes.to_string(),
                m.dominated_choices.to_string(),
            ]
        })
        .collect();
    let mut out = columns(
        &header,
        &rows,
        &[16, 6, 5, 5, 9, 11, 6, 9, 11, 11, 9, 10, 8, 8, 10],
    );
    out.push_str(&format!("trace   {trace_digest}\n"));
    out.push_str(&format!("receipt {receipt_digest}\n"));
    out
}

/// A table with the first column left-aligned and the others right-aligned. Each column
/// is `widths[i]` wide, or as wide as its longest value when that is longer (a 20-digit
/// figure), so the values of one column always line up; a header longer than its
/// column's values runs over as it always has, which keeps the usual tables' bytes.
pub fn columns(header: &[&str], rows: &[Vec<String>], widths: &[usize]) -> String {
    let widths: Vec<usize> = widths
        .iter()
        .enumerate()
        .map(|(i, &width)| {
            rows.iter()
                .filter_map(|row| row.get(i))
                .map(|cell| cell.chars().count())
                .fold(width, usize::max)
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            if i == 0 {
                out.push_str(&format!("{cell:<width$}"));
            } else {
                out.push_str(&format!(" {cell:>width$}"));
            }
        }
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{columns, summary_table_of};
    use crate::route::metrics::Metrics;
    use crate::route::policy::Policy;

    #[test]
    fn the_replay_table_stays_aligned_with_10_and_20_digit_figures() {
        let small = Metrics::default();
        let big = Metrics {
            routed: 1_234_567_890,
            latency_proxy_mean_milli: 9_876_543_210,
            latency_proxy_p95_milli: u64::MAX,
            reused_tokens: u64::MAX,
            ..Metrics::default()
        };
        let runs = vec![(Policy::ALL[0], small), (Policy::ALL[1], big)];
        let text = summary_table_of(&runs, "sha256:t", "sha256:r");
        let rows: Vec<&str> = text.lines().skip(1).take(2).collect();
        // The same column ends at the same offset in every row (past the left-aligned
        // policy names).
        let ends = |row: &str| -> Vec<usize> {
            let mut ends = Vec::new();
            let bytes = row.as_bytes();
            for i in 0..bytes.len() {
                if bytes[i] != b' ' && (i + 1 == bytes.len() || bytes[i + 1] == b' ') {
                    ends.push(i);
                }
            }
            ends.split_off(1)
        };
        assert_eq!(ends(rows[0]), ends(rows[1]), "{text}");
    }

    #[test]
    fn long_values_widen_their_column_and_stay_aligned() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned(), "2".to_owned()],
            vec![
                "b".to_owned(),
                "1234567890".to_owned(),
                u64::MAX.to_string(),
            ],
        ];
        let text = columns(&["name", "x", "y"], &rows, &[4, 6, 6]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "a             1                    2");
        assert_eq!(lines[2], "b    1234567890 18446744073709551615");
        // Every value ends at the same column as the header's last character.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
    }
}
