//! The explanation of one element that differs from the recomputation's: a cache or
//! observation log entry, a decision or a run's metrics. Problems are named in this
//! order (SPEC.md §7): bytes that are not RFC 8785's, a type or a missing member, then
//! for a decision its place in the run (a reorder names both positions), a row for
//! every worker, each row's dominance against its decision's own rows (§4.6), the
//! chosen worker against the policy's rule applied to its own rows (§5), and finally
//! the first value that differs from the recomputation, by path.

use super::json::{member_path, non_canonical, quote_str, sorts_before, Node, Parsed};

/// Which element of a run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ElementKind {
    CacheLog,
    Decision,
    Metrics,
    ObservationLog,
}

impl ElementKind {
    /// The kind of the items of a run's array member `name`.
    pub fn of_member(name: &str) -> Option<ElementKind> {
        match name {
            "cache_log" => Some(ElementKind::CacheLog),
            "decisions" => Some(ElementKind::Decision),
            "observation_log" => Some(ElementKind::ObservationLog),
            _ => None,
        }
    }
}

/// Where a decision's seq comes later in the recomputation's run.
pub trait Later {
    /// The index of the decision for `seq` after index `from`, if there is one.
    fn position_of_seq(&mut self, seq: u64, from: usize) -> Option<usize>;
}

/// One element of the receipt and the recomputation's element at the same path.
pub struct Element<'a> {
    pub path: &'a str,
    pub kind: ElementKind,
    pub policy: &'a str,
    pub receipt: &'a Parsed,
    pub expected: &'a Node,
    /// The recomputation's decision before this one in the run (its bytes), if any.
    pub previous_decision: Option<&'a [u8]>,
}

/// What a member must be (SPEC.md §6).
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Integer,
    Bool,
    StrOrNull,
    Array,
}

const DECISION_MEMBERS: [(&str, Kind); 8] = [
    ("seq", Kind::Integer),
    ("tick", Kind::Integer),
    ("request", Kind::Str),
    ("chosen", Kind::StrOrNull),
    ("route_kind", Kind::Str),
    ("tie_count", Kind::Integer),
    ("margin_milli", Kind::Integer),
    ("candidates", Kind::Array),
];
const ROW_MEMBERS: [(&str, Kind); 12] = [
    ("worker", Kind::Str),
    ("eligible", Kind::Bool),
    ("reasons", Kind::Array),
    ("reuse", Kind::Integer),
    ("recomputed", Kind::Integer),
    ("queued_prefill", Kind::Integer),
    ("active_decode", Kind::Integer),
    ("work_milli", Kind::Integer),
    ("after_milli", Kind::Integer),
    ("cost_milli", Kind::Integer),
    ("dominated_by", Kind::StrOrNull),
    ("dominated_count", Kind::Integer),
];
const CACHE_LOG_MEMBERS: [(&str, Kind); 6] = [
    ("seq", Kind::Integer),
    ("tick", Kind::Integer),
    ("worker", Kind::Str),
    ("epoch", Kind::Integer),
    ("op", Kind::Str),
    ("outcome", Kind::Str),
];
const OBSERVATION_LOG_MEMBERS: [(&str, Kind); 5] = [
    ("seq", Kind::Integer),
    ("tick", Kind::Integer),
    ("worker", Kind::Str),
    ("observed_tick", Kind::Integer),
    ("outcome", Kind::Str),
];
const METRICS: [&str; 15] = [
    "routed",
    "rejected",
    "cache_hits",
    "reused_tokens",
    "recomputed_tokens",
    "route_churn",
    "load_skew_milli",
    "latency_proxy_mean_milli",
    "latency_proxy_p95_milli",
    "latency_proxy_max_milli",
    "stale_event_rejections",
    "stale_observation_rejections",
    "boundary_rejections",
    "overload_escapes",
    "dominated_choices",
];

/// The first problem with the element, or `None` when it is the recomputation's.
pub fn explain(element: &Element<'_>, later: &mut dyn Later) -> Option<String> {
    let receipt = &element.receipt.node;
    if let Some(nc) = &element.receipt.non_canonical {
        return Some(non_canonical(&nc.path, nc.offset, &nc.what));
    }
    if let Err(problem) = shape(element.path, element.kind, receipt) {
        return Some(problem);
    }
    if element.kind == ElementKind::Decision {
        if let Some(problem) = decision_problem(element, later) {
            return Some(problem);
        }
    }
    first_difference(receipt, element.expected, element.path).map(|(path, r, e)| {
        format!(
            "{path}: the receipt has {r}, the recomputation has {e} (run {})",
            element.policy
        )
    })
}

fn check_kind(path: &str, node: &Node, kind: Kind) -> Result<(), String> {
    let (ok, what) = match kind {
        Kind::Str => (matches!(node, Node::Str(_)), "a string"),
        Kind::Integer => (
            matches!(node, Node::Num(t) if t.bytes().all(|b| b.is_ascii_digit())),
            "a non-negative integer",
        ),
        Kind::Bool => (matches!(node, Node::Bool(_)), "true or false"),
        Kind::StrOrNull => (
            matches!(node, Node::Str(_) | Node::Null),
            "a string or null",
        ),
        Kind::Array => (matches!(node, Node::Array(_)), "an array"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{path}: expected {what}, found {}", node.quoted()))
    }
}

fn check_members(path: &str, node: &Node, table: &[(&str, Kind)]) -> Result<(), String> {
    if !matches!(node, Node::Object(_)) {
        return Err(format!(
            "{path}: expected an object, found {}",
            node.quoted()
        ));
    }
    for &(name, kind) in table {
        let at = member_path(path, name);
        let Some(value) = node.get(name) else {
            return Err(format!("{at}: missing required member {}", quote_str(name)));
        };
        check_kind(&at, value, kind)?;
    }
    Ok(())
}

/// Every member §6 lists, with its type, in the order §6 lists them.
fn shape(path: &str, kind: ElementKind, node: &Node) -> Result<(), String> {
    match kind {
        ElementKind::CacheLog => check_members(path, node, &CACHE_LOG_MEMBERS),
        ElementKind::ObservationLog => check_members(path, node, &OBSERVATION_LOG_MEMBERS),
        ElementKind::Metrics => {
            let table: Vec<(&str, Kind)> = METRICS.iter().map(|&m| (m, Kind::Integer)).collect();
            check_members(path, node, &table)
        }
        ElementKind::Decision => {
            check_members(path, node, &DECISION_MEMBERS)?;
            let rows_path = member_path(path, "candidates");
            for (i, row) in node
                .get("candidates")
                .map_or(&[][..], Node::items)
                .iter()
                .enumerate()
            {
                let row_path = format!("{rows_path}[{i}]");
                check_members(&row_path, row, &ROW_MEMBERS)?;
                let reasons = row.get("reasons").map_or(&[][..], Node::items);
                for (j, reason) in reasons.iter().enumerate() {
                    check_kind(&format!("{row_path}.reasons[{j}]"), reason, Kind::Str)?;
                }
            }
            Ok(())
        }
    }
}

fn decision_index(path: &str) -> usize {
    path.rsplit('[')
        .next()
        .and_then(|i| i.trim_end_matches(']').parse().ok())
        .unwrap_or(0)
}

fn decision_problem(element: &Element<'_>, later: &mut dyn Later) -> Option<String> {
    let (receipt, expected, path) = (&element.receipt.node, element.expected, element.path);
    let seq = receipt.get("seq").and_then(Node::as_u64);
    let expected_seq = expected.get("seq").and_then(Node::as_u64);
    if let (Some(seq), Some(_)) = (seq, expected_seq) {
        if Some(seq) != expected_seq {
            let i = decision_index(path);
            if let Some(j) = later.position_of_seq(seq, i) {
                return Some(format!(
                    "{path}: decision for seq {seq} is out of order: it belongs at decisions[{j}]"
                ));
            }
        }
    }
    let rows = receipt.get("candidates").map_or(&[][..], Node::items);
    let workers: Vec<&str> = expected
        .get("candidates")
        .map_or(&[][..], Node::items)
        .iter()
        .filter_map(|row| row.get("worker").and_then(Node::as_str))
        .collect();
    for worker in &workers {
        if !rows
            .iter()
            .any(|row| row.get("worker").and_then(Node::as_str) == Some(worker))
        {
            return Some(format!(
                "{path}: no candidate row for worker {}",
                quote_str(worker)
            ));
        }
    }
    if rows.len() != workers.len() {
        return Some(format!(
            "{path}: {} candidate rows for {} workers",
            rows.len(),
            workers.len()
        ));
    }
    if let Some(problem) = dominance_problem(rows) {
        return Some(format!("{path}: {problem}"));
    }
    // No check (and so no claim) when round robin's cursor cannot be known here.
    let mut cursor = round_robin_cursor(element, rows)?;
    let justified = match justified_choice(element.policy, rows, &mut cursor) {
        Ok(justified) => justified,
        Err(problem) => return Some(format!("{path}: {problem}")),
    };
    let chosen = receipt.get("chosen").and_then(Node::as_str);
    if chosen != justified.as_deref() {
        return Some(format!(
            "{path}: chosen is {}, but its own rows justify {}",
            receipt
                .get("chosen")
                .map_or("null".to_owned(), Node::quoted),
            justified.map_or("null".to_owned(), |w| quote_str(&w))
        ));
    }
    None
}

/// Round robin's cursor before this decision: after the worker the run's previous
/// decision chose, in worker-id order. `None` (no check) when that decision chose no
/// one, since the cursor then depends on decisions further back; others need none.
fn round_robin_cursor(element: &Element<'_>, rows: &[Node]) -> Option<usize> {
    if element.policy != "round_robin" || decision_index(element.path) == 0 {
        return Some(0);
    }
    let previous = super::json::parse_bytes(element.previous_decision?)?;
    let last = previous.get("chosen").and_then(Node::as_str)?;
    let i = rows
        .iter()
        .position(|row| row.get("worker").and_then(Node::as_str) == Some(last))?;
    Some((i + 1) % rows.len().max(1))
}

fn has_reason(row: &Node, reason: &str) -> bool {
    row.get("reasons")
        .is_some_and(|r| r.items().iter().any(|x| x.as_str() == Some(reason)))
}

fn field(row: &Node, name: &str) -> u64 {
    row.get(name).and_then(Node::as_u64).unwrap_or(u64::MAX)
}

fn eligible(row: &Node) -> bool {
    row.get("eligible") == Some(&Node::Bool(true))
}

/// The first row whose `dominated_by` or `dominated_count` differs from what the rows'
/// own `reuse`, `after_milli`, eligibility and `overloaded` / `cold_reserve` reasons give
/// (SPEC.md §4.6: the front set is the eligible rows with neither).
fn dominance_problem(rows: &[Node]) -> Option<String> {
    let in_front = |row: &Node| {
        eligible(row) && !has_reason(row, "overloaded") && !has_reason(row, "cold_reserve")
    };
    for a in rows {
        let mut by: Option<&str> = None;
        let mut count = 0u64;
        if in_front(a) {
            let (reuse_a, after_a) = (field(a, "reuse"), field(a, "after_milli"));
            for b in rows.iter().filter(|b| in_front(b)) {
                let (reuse_b, after_b) = (field(b, "reuse"), field(b, "after_milli"));
                if reuse_b >= reuse_a
                    && after_b <= after_a
                    && (reuse_b > reuse_a || after_b < after_a)
                {
                    let id = b.get("worker").and_then(Node::as_str).unwrap_or("");
                    if !matches!(by, Some(smallest) if smallest <= id) {
                        by = Some(id);
                    }
                    count += 1;
                }
            }
        }
        let expected_by = by.map_or(Node::Null, |w| Node::Str(w.to_owned()));
        let given_by = a.get("dominated_by").cloned().unwrap_or(Node::Null);
        if given_by != expected_by || a.get("dominated_count").and_then(Node::as_u64) != Some(count)
        {
            return Some(format!(
                "worker {} has dominated_by {} and dominated_count {}, but its decision's rows give {} and {count}",
                a.get("worker").map_or("?".to_owned(), Node::quoted),
                given_by.quoted(),
                a.get("dominated_count").map_or("?".to_owned(), Node::quoted),
                expected_by.quoted(),
            ));
        }
    }
    None
}

/// The worker a policy must choose from these rows (in worker-id order), by SPEC.md §5.
/// Round robin advances `cursor` exactly as the policy does. `Err` for a policy §5 has
/// no rule for: no other policy's rule stands in for it.
pub fn justified_choice(
    policy: &str,
    rows: &[Node],
    cursor: &mut usize,
) -> Result<Option<String>, String> {
    let eligible_rows: Vec<usize> = (0..rows.len()).filter(|&i| eligible(&rows[i])).collect();
    let worker = |i: usize| {
        rows[i]
            .get("worker")
            .and_then(Node::as_str)
            .map(str::to_owned)
    };
    let smallest = |candidates: &[usize], score: &dyn Fn(&Node) -> u64| {
        candidates
            .iter()
            .copied()
            .min_by_key(|&i| (score(&rows[i]), i))
    };
    let index = match policy {
        "round_robin" => {
            let n = rows.len();
            let found = (0..n)
                .map(|step| (*cursor + step) % n)
                .find(|i| eligible_rows.contains(i));
            if let Some(i) = found {
                *cursor = (i + 1) % n;
            }
            found
        }
        "least_load" => smallest(&eligible_rows, &|r| field(r, "work_milli")),
        "longest_prefix" => smallest(&eligible_rows, &|r| u64::MAX - field(r, "reuse")),
        // SPEC.md §4.8: the Dynamo cost over every eligible row; no cap, no reserve.
        "dynamo_default" => smallest(&eligible_rows, &|r| field(r, "cost_milli")),
        "cache_plus_load" => {
            // SPEC.md §5 and §4.5: rows neither overloaded nor reserved out, else the
            // reserved-out rows too, else the overload escape over every eligible row.
            let within = |skip_reserved: bool| -> Vec<usize> {
                eligible_rows
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let reserved_out = skip_reserved && has_reason(&rows[i], "cold_reserve");
                        !has_reason(&rows[i], "overloaded") && !reserved_out
                    })
                    .collect()
            };
            let (first, second) = (within(true), within(false));
            if !first.is_empty() {
                smallest(&first, &|r| field(r, "cost_milli"))
            } else if !second.is_empty() {
                smallest(&second, &|r| field(r, "cost_milli"))
            } else {
                smallest(&eligible_rows, &|r| field(r, "after_milli"))
            }
        }
        unknown => {
            return Err(format!(
                "chosen cannot be checked: SPEC.md §5 has no rule for a run of policy {}",
                quote_str(unknown)
            ))
        }
    };
    Ok(index.and_then(worker))
}

/// The first path, in canonical order, where two values differ, with both values.
fn first_difference(
    receipt: &Node,
    expected: &Node,
    path: &str,
) -> Option<(String, String, String)> {
    match (receipt, expected) {
        (Node::Object(a), Node::Object(b)) => {
            let mut names: Vec<&str> = a.iter().chain(b).map(|(k, _)| k.as_str()).collect();
            names.sort_by(|x, y| {
                if x == y {
                    std::cmp::Ordering::Equal
                } else if sorts_before(x, y) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            });
            names.dedup();
            for name in names {
                let at = member_path(path, name);
                match (receipt.get(name), expected.get(name)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(x, y, &at) {
                            return Some(d);
                        }
                    }
                    (Some(x), None) => return Some((at, x.quoted(), "no such member".to_owned())),
                    (None, Some(y)) => return Some((at, "no such member".to_owned(), y.quoted())),
                    (None, None) => {}
                }
            }
            None
        }
        (Node::Array(a), Node::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                if let Some(d) = first_difference(x, y, &format!("{path}[{i}]")) {
                    return Some(d);
                }
            }
            (a.len() != b.len()).then(|| {
                (
                    path.to_owned(),
                    format!("{} items", a.len()),
                    format!("{} items", b.len()),
                )
            })
        }
        _ => (receipt != expected).then(|| (path.to_owned(), receipt.quoted(), expected.quoted())),
    }
}

#[cfg(test)]
mod tests {
    use super::justified_choice;
    use crate::verify::json::{parse_bytes, Node};

    fn row(worker: &str, cost: u64, reasons: &[&str], eligible: bool) -> Node {
        let reasons: Vec<String> = reasons.iter().map(|r| format!("\"{r}\"")).collect();
        parse_bytes(
            format!(
                r#"{{"worker":"{worker}","eligible":{eligible},"cost_milli":{cost},"reuse":0,"work_milli":0,"after_milli":5000,"reasons":[{}]}}"#,
                reasons.join(",")
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn dynamo_default_is_the_smallest_cost_over_every_eligible_row() {
        let mut cursor = 0;
        // SPEC.md §4.8: no cap and no reserve in this run, so a row's `overloaded` or
        // `cold_reserve` reason (itself wrong there) does not move the choice; under
        // cache_plus_load's rule the same rows justify w1.
        let rows = [
            row("w0", 100, &["overloaded"], true),
            row("w1", 300, &[], true),
            row("w2", 100, &["cold_reserve"], true),
        ];
        let choice = |policy, rows: &[Node], cursor: &mut usize| {
            justified_choice(policy, rows, cursor).unwrap()
        };
        assert_eq!(
            choice("dynamo_default", &rows, &mut cursor).as_deref(),
            Some("w0")
        );
        assert_eq!(
            choice("cache_plus_load", &rows, &mut cursor).as_deref(),
            Some("w1")
        );
        // Ties by id; ineligible rows never.
        let rows = [
            row("w0", 7, &[], true),
            row("w1", 5, &[], false),
            row("w2", 5, &[], true),
        ];
        assert_eq!(
            choice("dynamo_default", &rows, &mut cursor).as_deref(),
            Some("w2")
        );
        let rows = [row("w0", 7, &[], false), row("w1", 5, &[], false)];
        assert_eq!(choice("dynamo_default", &rows, &mut cursor), None);
        // Round robin starts at its cursor and moves it past the choice.
        let rows = [
            row("w0", 0, &[], true),
            row("w1", 0, &[], false),
            row("w2", 0, &[], true),
        ];
        let mut cursor = 1;
        assert_eq!(
            choice("round_robin", &rows, &mut cursor).as_deref(),
            Some("w2")
        );
        assert_eq!(cursor, 0);
    }

    #[test]
    fn a_policy_without_a_rule_is_named_not_judged_by_another_rule() {
        let rows = [
            row("w0", 100, &["overloaded"], true),
            row("w1", 300, &[], true),
        ];
        let problem = justified_choice("?", &rows, &mut 0).unwrap_err();
        assert_eq!(
            problem,
            "chosen cannot be checked: SPEC.md §5 has no rule for a run of policy \"?\""
        );
    }
}
