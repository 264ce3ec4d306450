//! The conformance report (SPEC.md §16.5): `report.yaml` in the Gateway API Inference
//! Extension's `ConformanceReport` layout, and `cases.md`, the per-case table with its
//! "Reproduce" section. Both are written by hand: every value is a string kvroute made
//! or a case's own text, quoted as a YAML double-quoted scalar.

use super::case::Case;
use super::outcome::Outcome;

/// Who made the router under test, for `implementation`.
pub struct Implementation {
    pub organization: &'static str,
    pub project: &'static str,
    pub url: &'static str,
    pub version: String,
}

/// One case's row.
pub struct Row<'a> {
    pub case: &'a Case,
    pub outcome: Outcome,
    pub answer: String,
}

/// `(passed, ties, failed, skipped)`.
pub fn counts(rows: &[Row]) -> (usize, usize, usize, usize) {
    let n = |name: &str| rows.iter().filter(|r| r.outcome.name() == name).count();
    (n("pass"), n("tie"), n("fail"), n("skipped"))
}

/// A YAML double-quoted scalar.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// `report.yaml`.
pub fn yaml(implementation: &Implementation, date: &str, rows: &[Row]) -> String {
    let (passed, ties, failed, skipped) = counts(rows);
    let result = if failed == 0 { "success" } else { "failure" };
    let mut out = format!(
        "apiVersion: kvroute.dev/v1\nkind: ConformanceReport\ndate: {}\nimplementation:\n  organization: {}\n  project: {}\n  url: {}\n  version: {}\nmode: default\nprofiles:\n- name: KVRouting\n  core:\n    result: {result}\n    statistics:\n      Passed: {passed}\n      Failed: {failed}\n      Skipped: {skipped}\n  summary: {}\ncases:\n",
        quoted(date),
        quoted(implementation.organization),
        quoted(implementation.project),
        quoted(implementation.url),
        quoted(&implementation.version),
        quoted(&format!(
            "{passed} passed, {ties} ties, {failed} failed, {skipped} skipped of {} cases",
            rows.len()
        )),
    );
    for row in rows {
        out += &format!(
            "- name: {}\n  outcome: {}\n",
            row.case.name,
            row.outcome.name()
        );
        match &row.outcome {
            Outcome::Fail { cause } => out += &format!("  cause: {}\n", quoted(cause)),
            Outcome::Skipped { reason } => out += &format!("  reason: {}\n", quoted(reason)),
            _ => {}
        }
        out += &format!(
            "  rule: {}\n  report: {}\n  answer: {}\n",
            quoted(&row.case.rule),
            quoted(&row.case.report),
            quoted(&row.answer)
        );
    }
    out
}

/// A Markdown table cell: pipes escaped, one line.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `cases.md`: the table, then how to reproduce it.
pub fn markdown(implementation: &Implementation, rows: &[Row], command: &str) -> String {
    let (passed, ties, failed, skipped) = counts(rows);
    let mut out = format!(
        "# {} {} under kvroute conform\n\n{passed} passed, {ties} ties, {failed} failed, {skipped} skipped of {} cases (SPEC.md §16).\n\n| case | outcome | cause or reason | answer | expected | what happens | wire | rule | report |\n|---|---|---|---|---|---|---|---|---|\n",
        implementation.project,
        implementation.version,
        rows.len()
    );
    for row in rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.case.name,
            row.outcome.name(),
            cell(row.outcome.detail()),
            cell(&row.answer),
            cell(&row.case.expect.text()),
            cell(&row.case.summary),
            cell(&row.case.wire.describe()),
            cell(&row.case.rule),
            row.case.report
        );
    }
    out += &format!("\n## Reproduce\n\n```sh\n{command}\n```\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::case::load;
    use super::*;
    use std::path::Path;

    #[test]
    fn the_report_counts_ties_apart_and_fails_on_a_failure() {
        let case = load(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../peers/conformance/cases/exact_tie.json"),
        )
        .unwrap();
        let rows = vec![
            Row {
                case: &case,
                outcome: Outcome::Tie,
                answer: "w0".into(),
            },
            Row {
                case: &case,
                outcome: Outcome::Fail {
                    cause: "new_finding".into(),
                },
                answer: "w|9".into(),
            },
            Row {
                case: &case,
                outcome: Outcome::Skipped {
                    reason: "no \"overlap\"".into(),
                },
                answer: String::new(),
            },
        ];
        let implementation = Implementation {
            organization: "o",
            project: "p",
            url: "u",
            version: "1".into(),
        };
        let text = yaml(&implementation, "2026-12-07T00:00:00Z", &rows);
        let value: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(value["kind"].as_str(), Some("ConformanceReport"));
        let core = &value["profiles"][0]["core"];
        assert_eq!(core["result"].as_str(), Some("failure"));
        assert_eq!(core["statistics"]["Passed"].as_u64(), Some(0));
        assert_eq!(core["statistics"]["Failed"].as_u64(), Some(1));
        assert_eq!(core["statistics"]["Skipped"].as_u64(), Some(1));
        assert_eq!(value["cases"][2]["reason"].as_str(), Some("no \"overlap\""));
        let table = markdown(&implementation, &rows, "kvroute conform --router kvroute");
        assert!(
            table.contains("w\\|9") && table.contains("## Reproduce"),
            "{table}"
        );
    }
}
