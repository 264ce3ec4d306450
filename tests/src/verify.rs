//! Receipt verification: is this receipt what the trace must produce?
//!
//! The checks run from the cheapest and most specific to the full recomputation, and
//! the first failure is reported (SPEC.md §7): the receipt is JSON with every member of
//! the right type (a type error names its path), its own digest is right, its trace
//! digest names this trace, each run lists the decisions in the recomputed order (a
//! reorder names both positions), every decision has a row for every worker, each
//! chosen worker is the one its own rows justify under the policy's rule, each row's
//! dominance (one id and a count) is what its decision's rows give, and finally it
//! equals, byte for byte, what the oracle recomputes from the trace.

use kvroute_core::input::json::{self, MemberName, Node};
use kvroute_core::output::canonical::{jcs_bytes, sha256_tag};
use kvroute_core::output::ids::keyed_id;
use serde_json::Value;

/// Why verification could not even start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The trace itself is invalid (its validation errors).
    InvalidTrace(Vec<String>),
    /// The receipt is wrong; the first problem found.
    Rejected(String),
}

/// Verifies `receipt_json` against `trace_json`. `Ok` carries the receipt digest.
pub fn verify(trace_json: &[u8], receipt_json: &[u8]) -> Result<String, VerifyError> {
    verify_keyed(trace_json, receipt_json, None)
}

/// Verifies a receipt written with `--id-key` (SPEC.md §6.5) when `id_key` is given:
/// the recomputed receipt's request ids are keyed the same way, and its digest
/// recomputed, before anything is compared.
pub fn verify_keyed(
    trace_json: &[u8],
    receipt_json: &[u8],
    id_key: Option<&[u8]>,
) -> Result<String, VerifyError> {
    let expected = kvroute_oracle::replay(trace_json).map_err(VerifyError::InvalidTrace)?;
    let expected = match id_key {
        Some(key) => key_receipt(&expected, key),
        None => expected,
    };
    let reject = |message: String| Err(VerifyError::Rejected(message));
    let node = match json::parse_node(receipt_json) {
        Ok(node) => node,
        Err(e) => return reject(format!("the receipt is not JSON: {e}")),
    };
    let Node::Object(members) = &node else {
        return reject("the receipt is not a JSON object".to_owned());
    };
    if let Err(problem) = receipt_shape(members) {
        return reject(problem);
    }
    let receipt: Value = match serde_json::from_slice(receipt_json) {
        Ok(value) => value,
        Err(e) => return reject(format!("the receipt is not JSON: {e}")),
    };
    let Some(object) = receipt.as_object() else {
        return reject("the receipt is not a JSON object".to_owned());
    };
    if receipt["format"] != "kvroute-receipt/1" {
        return reject(format!(
            "format is {}, expected \"kvroute-receipt/1\"",
            receipt["format"]
        ));
    }

    // Its own digest.
    let Some(claimed) = receipt["receipt_digest"].as_str() else {
        return reject("receipt_digest is missing".to_owned());
    };
    let mut body = object.clone();
    body.remove("receipt_digest");
    let actual = sha256_tag(&jcs_bytes(&Value::Object(body)));
    if claimed != actual {
        return reject(format!(
            "receipt_digest is {claimed}, but the receipt's content hashes to {actual}"
        ));
    }

    // The trace it claims to explain.
    let expected_value: Value = serde_json::from_slice(&expected).expect("the oracle writes JSON");
    if receipt["trace_digest"] != expected_value["trace_digest"] {
        return reject(format!(
            "trace_digest is {}, but this trace's digest is {}",
            receipt["trace_digest"], expected_value["trace_digest"]
        ));
    }

    // The decisions' order, before anything that reads one decision after another.
    if let Some(problem) = reorder_problem(&receipt, &expected_value) {
        return reject(problem);
    }

    // Complete rows, and choices its own rows justify.
    let workers: Vec<&str> = expected_value["runs"][0]["decisions"][0]["candidates"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["worker"].as_str()).collect())
        .unwrap_or_default();
    let Some(runs) = receipt["runs"].as_array() else {
        return reject("runs is missing".to_owned());
    };
    for (r, run) in runs.iter().enumerate() {
        let policy = run["policy"].as_str().unwrap_or("?");
        let Some(decisions) = run["decisions"].as_array() else {
            return reject(format!("runs[{r}] ({policy}) has no decisions array"));
        };
        let mut cursor = 0usize;
        for (d, decision) in decisions.iter().enumerate() {
            let at = format!(
                "runs[{r}] ({policy}) decisions[{d}] (request {})",
                decision["request"]
            );
            let rows = decision["candidates"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for worker in &workers {
                if !rows.iter().any(|row| row["worker"] == *worker) {
                    return reject(format!("{at}: no candidate row for worker \"{worker}\""));
                }
            }
            if rows.len() != workers.len() {
                return reject(format!(
                    "{at}: {} candidate rows for {} workers",
                    rows.len(),
                    workers.len()
                ));
            }
            if let Some(problem) = dominance_problem(&rows) {
                return reject(format!("{at}: {problem}"));
            }
            let justified = justified_choice(policy, &rows, &mut cursor);
            let chosen = decision["chosen"].as_str();
            if chosen != justified.as_deref() {
                return reject(format!(
                    "{at}: chosen is {}, but its own rows justify {}",
                    decision["chosen"],
                    justified.map_or("null".to_owned(), |w| format!("\"{w}\""))
                ));
            }
        }
    }

    // Everything else: the recomputation.
    let receipt_bytes = jcs_bytes(&receipt);
    if receipt_bytes != expected {
        return reject(format!(
            "differs from the recomputed receipt {}",
            crate::differential::first_receipt_difference(
                &receipt_bytes,
                &expected,
                "the receipt",
                "the recomputation"
            )
        ));
    }
    Ok(actual)
}

/// Whether a row lists `reason`.
fn has_reason(row: &Value, reason: &str) -> bool {
    row["reasons"]
        .as_array()
        .is_some_and(|reasons| reasons.iter().any(|x| x == reason))
}

/// The first row whose `dominated_by` or `dominated_count` differs from what the rows'
/// own `reuse`, `after_milli`, eligibility and `overloaded` / `cold_reserve` reasons give
/// (SPEC.md §4.6: the front set is the eligible rows with neither).
fn dominance_problem(rows: &[Value]) -> Option<String> {
    let in_front = |row: &Value| {
        row["eligible"] == true
            && !has_reason(row, "overloaded")
            && !has_reason(row, "cold_reserve")
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
                    let id = b["worker"].as_str().unwrap_or("");
                    if !matches!(by, Some(smallest) if smallest <= id) {
                        by = Some(id);
                    }
                    count += 1;
                }
            }
        }
        let expected_by = by.map_or(Value::Null, Value::from);
        if a["dominated_by"] != expected_by || a["dominated_count"] != count {
            return Some(format!(
                "worker {} has dominated_by {} and dominated_count {}, but its decision's rows give {expected_by} and {count}",
                a["worker"], a["dominated_by"], a["dominated_count"]
            ));
        }
    }
    None
}

fn field(row: &Value, name: &str) -> u64 {
    row[name].as_u64().unwrap_or(u64::MAX)
}

/// The worker a policy must choose from these rows (in worker-id order), by SPEC.md §5.
/// Round robin advances `cursor` exactly as the policy does.
fn justified_choice(policy: &str, rows: &[Value], cursor: &mut usize) -> Option<String> {
    let eligible: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i]["eligible"] == true)
        .collect();
    let worker = |i: usize| rows[i]["worker"].as_str().map(str::to_owned);
    let smallest = |candidates: &[usize], score: &dyn Fn(&Value) -> u64| {
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
                .find(|i| eligible.contains(i));
            if let Some(i) = found {
                *cursor = (i + 1) % n;
            }
            found
        }
        "least_load" => smallest(&eligible, &|r| field(r, "work_milli")),
        "longest_prefix" => smallest(&eligible, &|r| u64::MAX - field(r, "reuse")),
        // SPEC.md §4.8: the Dynamo cost over every eligible row; no cap, no reserve, so
        // an `overloaded` or `cold_reserve` reason here excludes nothing (it is itself
        // wrong, which the recomputation reports).
        "dynamo_default" => smallest(&eligible, &|r| field(r, "cost_milli")),
        _ => {
            // SPEC.md §5 and §4.5: rows neither overloaded nor reserved out, else the
            // reserved-out rows too, else the overload escape over every eligible row.
            let within = |skip_reserved: bool| -> Vec<usize> {
                eligible
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
                smallest(&eligible, &|r| field(r, "after_milli"))
            }
        }
    };
    index.and_then(worker)
}

/// The recomputed receipt with every decision's `request` keyed (SPEC.md §6.5) and its
/// digest recomputed over the keyed bytes, as `replay --id-key` writes it.
fn key_receipt(receipt_bytes: &[u8], key: &[u8]) -> Vec<u8> {
    let mut receipt: Value = serde_json::from_slice(receipt_bytes).expect("the oracle writes JSON");
    if let Some(runs) = receipt["runs"].as_array_mut() {
        for run in runs {
            if let Some(decisions) = run["decisions"].as_array_mut() {
                for decision in decisions {
                    if let Some(id) = decision["request"].as_str() {
                        decision["request"] = Value::String(keyed_id(key, id));
                    }
                }
            }
        }
    }
    if let Some(object) = receipt.as_object_mut() {
        object.remove("receipt_digest");
    }
    let digest = sha256_tag(&jcs_bytes(&receipt));
    receipt["receipt_digest"] = Value::String(digest);
    jcs_bytes(&receipt)
}

/// When a run lists the recomputed decisions' seqs in another order: the first
/// position that differs and where that decision belongs.
fn reorder_problem(receipt: &Value, expected: &Value) -> Option<String> {
    let seqs = |run: &Value| -> Vec<u64> {
        run["decisions"]
            .as_array()
            .map(|d| d.iter().filter_map(|d| d["seq"].as_u64()).collect())
            .unwrap_or_default()
    };
    let runs = receipt["runs"].as_array()?;
    let expected_runs = expected["runs"].as_array()?;
    for (r, (run, expected_run)) in runs.iter().zip(expected_runs).enumerate() {
        let (given, wanted) = (seqs(run), seqs(expected_run));
        if given == wanted {
            continue;
        }
        let (mut a, mut b) = (given.clone(), wanted.clone());
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            // Not a permutation: the field comparison says what differs.
            continue;
        }
        let i = given.iter().zip(&wanted).position(|(x, y)| x != y)?;
        let j = wanted.iter().position(|&s| s == given[i])?;
        return Some(format!(
            "runs[{r}].decisions[{i}]: decision for seq {} is out of order: it belongs at decisions[{j}]",
            given[i]
        ));
    }
    None
}

/// What a receipt member must be (SPEC.md §6).
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Integer,
    Bool,
    StrOrNull,
    Array,
    Object,
}

const RECEIPT_MEMBERS: [(&str, Kind); 4] = [
    ("format", Kind::Str),
    ("trace_digest", Kind::Str),
    ("runs", Kind::Array),
    ("receipt_digest", Kind::Str),
];
const RUN_MEMBERS: [(&str, Kind); 5] = [
    ("policy", Kind::Str),
    ("decisions", Kind::Array),
    ("cache_log", Kind::Array),
    ("observation_log", Kind::Array),
    ("metrics", Kind::Object),
];
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

/// The path of member `name` below `path` (`$` is the receipt itself).
fn member_path(path: &str, name: &str) -> String {
    if path == "$" {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Checks `node` is of `kind`; the error is `PATH: expected <what>, found <v>`.
fn check_kind(path: &str, node: &Node, kind: Kind) -> Result<(), String> {
    let (ok, what) = match kind {
        Kind::Str => (matches!(node, Node::String(_)), "a string"),
        Kind::Integer => (node.integer().is_some(), "a non-negative integer"),
        Kind::Bool => (matches!(node, Node::Bool(_)), "true or false"),
        Kind::StrOrNull => (
            matches!(node, Node::String(_) | Node::Null),
            "a string or null",
        ),
        Kind::Array => (matches!(node, Node::Array(_)), "an array"),
        Kind::Object => (matches!(node, Node::Object(_)), "an object"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{path}: expected {what}, found {}", node.quoted()))
    }
}

/// Checks every member of `table`, in table order: present (its first occurrence) and
/// of its kind.
fn check_members(
    path: &str,
    members: &[(MemberName, Node)],
    table: &[(&str, Kind)],
) -> Result<(), String> {
    for &(name, kind) in table {
        let at = member_path(path, name);
        let Some((_, node)) = members.iter().find(|(k, _)| k == name) else {
            return Err(format!("{at}: missing required member \"{name}\""));
        };
        check_kind(&at, node, kind)?;
    }
    Ok(())
}

fn member<'n>(members: &'n [(MemberName, Node)], name: &str) -> &'n Node {
    members
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .expect("checked present")
}

/// Each item of the array member `name` is an object with `table`'s members.
fn check_items(
    path: &str,
    members: &[(MemberName, Node)],
    name: &str,
    table: &[(&str, Kind)],
    mut inner: impl FnMut(&str, &[(MemberName, Node)]) -> Result<(), String>,
) -> Result<(), String> {
    let Node::Array(items) = member(members, name) else {
        unreachable!("checked an array")
    };
    let at = member_path(path, name);
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{at}[{i}]");
        check_kind(&item_path, item, Kind::Object)?;
        let Node::Object(item_members) = item else {
            unreachable!("checked an object")
        };
        check_members(&item_path, item_members, table)?;
        inner(&item_path, item_members)?;
    }
    Ok(())
}

/// The receipt's shape (SPEC.md §7): every member §6 lists, with its type.
fn receipt_shape(members: &[(MemberName, Node)]) -> Result<(), String> {
    check_members("$", members, &RECEIPT_MEMBERS)?;
    check_items("$", members, "runs", &RUN_MEMBERS, |run_path, run| {
        check_items(
            run_path,
            run,
            "decisions",
            &DECISION_MEMBERS,
            |path, decision| {
                check_items(path, decision, "candidates", &ROW_MEMBERS, |path, row| {
                    let Node::Array(reasons) = member(row, "reasons") else {
                        unreachable!("checked an array")
                    };
                    for (i, reason) in reasons.iter().enumerate() {
                        check_kind(&format!("{path}.reasons[{i}]"), reason, Kind::Str)?;
                    }
                    Ok(())
                })
            },
        )?;
        check_items(
            run_path,
            run,
            "cache_log",
            &CACHE_LOG_MEMBERS,
            |_, _| Ok(()),
        )?;
        check_items(
            run_path,
            run,
            "observation_log",
            &OBSERVATION_LOG_MEMBERS,
            |_, _| Ok(()),
        )?;
        let Node::Object(metrics) = member(run, "metrics") else {
            unreachable!("checked an object")
        };
        let table: Vec<(&str, Kind)> = METRICS.iter().map(|&m| (m, Kind::Integer)).collect();
        check_members(&member_path(run_path, "metrics"), metrics, &table)
    })
}

#[cfg(test)]
mod tests {
    use super::justified_choice;
    use serde_json::{json, Value};

    fn row(worker: &str, cost: u64, reasons: &[&str]) -> Value {
        json!({ "worker": worker, "eligible": true, "cost_milli": cost, "reuse": 0,
                "work_milli": 0, "after_milli": 5000, "reasons": reasons })
    }

    #[test]
    fn dynamo_default_is_the_smallest_cost_over_every_eligible_row() {
        let mut cursor = 0;
        // SPEC.md §4.8: no cap and no reserve in this run, so a row's `overloaded` or
        // `cold_reserve` reason (itself wrong there) does not move the choice; under
        // cache_plus_load's rule the same rows justify w1.
        let rows = [
            row("w0", 100, &["overloaded"]),
            row("w1", 300, &[]),
            row("w2", 100, &["cold_reserve"]),
        ];
        assert_eq!(
            justified_choice("dynamo_default", &rows, &mut cursor).as_deref(),
            Some("w0")
        );
        assert_eq!(
            justified_choice("cache_plus_load", &rows, &mut cursor).as_deref(),
            Some("w1")
        );
        // Ties by id; ineligible rows never.
        let mut rows = [row("w0", 7, &[]), row("w1", 5, &[]), row("w2", 5, &[])];
        assert_eq!(
            justified_choice("dynamo_default", &rows, &mut cursor).as_deref(),
            Some("w1")
        );
        rows[1]["eligible"] = json!(false);
        assert_eq!(
            justified_choice("dynamo_default", &rows, &mut cursor).as_deref(),
            Some("w2")
        );
        for row in &mut rows {
            row["eligible"] = json!(false);
        }
        assert_eq!(justified_choice("dynamo_default", &rows, &mut cursor), None);
    }
}
