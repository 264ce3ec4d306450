//! Receipt verification: is this receipt what the trace must produce?
//!
//! The checks run from the cheapest and most specific to the full recomputation, and
//! the first failure is reported: the receipt is JSON of the right form, its own digest
//! is right, its trace digest names this trace, every decision has a row for every
//! worker, each chosen worker is the one its own rows justify under the policy's rule,
//! each row's dominance (one id and a count) is what its decision's rows give, and
//! finally it equals, byte for byte, what the oracle recomputes from the trace.

use kvroute_core::output::canonical::{jcs_bytes, sha256_tag};
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
    let expected = kvroute_oracle::replay(trace_json).map_err(VerifyError::InvalidTrace)?;
    let reject = |message: String| Err(VerifyError::Rejected(message));
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

/// The first row whose `dominated_by` or `dominated_count` differs from what the rows'
/// own `reuse`, `after_milli`, eligibility and `overloaded` reasons give (SPEC.md §4.6).
fn dominance_problem(rows: &[Value]) -> Option<String> {
    let in_front = |row: &Value| {
        row["eligible"] == true
            && !row["reasons"]
                .as_array()
                .is_some_and(|reasons| reasons.iter().any(|x| x == "overloaded"))
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
        _ => {
            let overloaded = |i: &usize| {
                rows[*i]["reasons"]
                    .as_array()
                    .is_some_and(|reasons| reasons.iter().any(|x| x == "overloaded"))
            };
            let fitting: Vec<usize> = eligible
                .iter()
                .copied()
                .filter(|i| !overloaded(i))
                .collect();
            if fitting.is_empty() {
                smallest(&eligible, &|r| field(r, "after_milli"))
            } else {
                smallest(&fitting, &|r| field(r, "cost_milli"))
            }
        }
    };
    index.and_then(worker)
}
