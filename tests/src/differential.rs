//! The differential oracle: run core and the naive oracle on the same trace bytes and
//! decide whether they agree.
//!
//! Agreement means both accept and produce byte-identical canonical receipts, or both
//! reject with identical error lines (paths and reasons) in the same order. A disagreement is explained
//! by the first differing JSON location, labelled with the policy, request and worker it
//! sits under, and the trace is saved to a file that reproduces it.

use serde_json::Value;
use std::fmt;
use std::path::PathBuf;

/// One of the two implementations under comparison.
pub trait Engine {
    fn name(&self) -> &'static str;
    /// Canonical receipt bytes, or the `PATH: reason` error lines.
    fn replay(&self, trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>>;
}

/// `kvroute-core`.
pub struct Core;

impl Engine for Core {
    fn name(&self) -> &'static str {
        "core"
    }
    fn replay(&self, trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>> {
        kvroute_core::replay_bytes(trace_json).map_err(|e| e.lines())
    }
}

/// `kvroute-oracle`.
pub struct Oracle;

impl Engine for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn replay(&self, trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>> {
        kvroute_oracle::replay(trace_json)
    }
}

/// What two agreeing implementations said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreement {
    /// Both accepted; the shared canonical receipt.
    Accepted(Vec<u8>),
    /// Both rejected; core's error lines.
    Rejected(Vec<String>),
}

/// A disagreement, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The first difference, in words.
    pub first_difference: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.first_difference)
    }
}

/// Compares core and the oracle on `trace_json`.
pub fn compare(trace_json: &[u8]) -> Result<Agreement, Divergence> {
    compare_engines(&Core, &Oracle, trace_json)
}

/// Compares any two engines on `trace_json`.
pub fn compare_engines(
    a: &dyn Engine,
    b: &dyn Engine,
    trace_json: &[u8],
) -> Result<Agreement, Divergence> {
    match (a.replay(trace_json), b.replay(trace_json)) {
        (Ok(x), Ok(y)) if x == y => Ok(Agreement::Accepted(x)),
        (Ok(x), Ok(y)) => Err(Divergence {
            first_difference: first_receipt_difference(&x, &y, a.name(), b.name()),
        }),
        // Rejections agree only when the error lines are identical: the same paths,
        // the same reasons, in the same order (SPEC.md §2). Comparing paths alone let
        // `unknown member` against `repeated member` at one path pass as agreement.
        (Err(x), Err(y)) if x == y => Ok(Agreement::Rejected(x)),
        (Err(x), Err(y)) => Err(Divergence {
            first_difference: first_error_difference(&x, &y, a.name(), b.name()),
        }),
        (Ok(_), Err(errors)) => Err(Divergence {
            first_difference: format!(
                "{} accepts the trace, {} rejects it: {:?}",
                a.name(),
                b.name(),
                errors
            ),
        }),
        (Err(errors), Ok(_)) => Err(Divergence {
            first_difference: format!(
                "{} rejects the trace ({:?}), {} accepts it",
                a.name(),
                errors,
                b.name()
            ),
        }),
    }
}

/// Names the first error line where two rejections differ, with both lines in full.
pub fn first_error_difference(x: &[String], y: &[String], x_name: &str, y_name: &str) -> String {
    let index = x.iter().zip(y).take_while(|(a, b)| a == b).count();
    let line = |lines: &[String]| {
        lines
            .get(index)
            .map_or("(no line)".to_owned(), |l| format!("{l:?}"))
    };
    format!(
        "both reject, but error line {} differs ({} vs {} lines):\n  {x_name}: {}\n  {y_name}: {}",
        index + 1,
        x.len(),
        y.len(),
        line(x),
        line(y)
    )
}

/// Names the first differing location of two receipts, e.g.
/// `runs[3] (cache_plus_load) .decisions[2] (request r5) .candidates[1] (worker w1) .cost_milli`.
pub fn first_receipt_difference(x: &[u8], y: &[u8], x_name: &str, y_name: &str) -> String {
    let (vx, vy) = match (
        serde_json::from_slice::<Value>(x),
        serde_json::from_slice::<Value>(y),
    ) {
        (Ok(vx), Ok(vy)) => (vx, vy),
        _ => return format!("{x_name} and {y_name} receipts differ and one is not JSON"),
    };
    // The digests differ whenever anything does, and `receipt_digest` sorts first, so
    // it is compared last: the difference worth naming is the content behind it.
    let without_digest = |v: &Value| {
        let mut v = v.clone();
        if let Some(object) = v.as_object_mut() {
            object.remove("receipt_digest");
        }
        v
    };
    let difference = first_difference(&without_digest(&vx), &without_digest(&vy), String::new())
        .or_else(|| first_difference(&vx, &vy, String::new()));
    match difference {
        Some((path, a, b)) => format!("at {path}: {x_name} has {a}, {y_name} has {b}"),
        None => format!(
            "{x_name} and {y_name} receipts are equal as JSON but differ as bytes \
             (serialisation is not canonical)"
        ),
    }
}

/// A label that makes an array element findable by a person.
fn element_label(value: &Value) -> String {
    if let Some(p) = value.get("policy").and_then(Value::as_str) {
        return format!(" ({p})");
    }
    if let Some(r) = value.get("request").and_then(Value::as_str) {
        return format!(" (request {r}, seq {})", value["seq"]);
    }
    if let Some(w) = value.get("worker").and_then(Value::as_str) {
        return format!(" (worker {w})");
    }
    String::new()
}

fn short(value: &Value) -> String {
    value.to_string().chars().take(200).collect()
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<(String, String, String)> {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let sub = format!("{path}.{key}");
                match (ma.get(key), mb.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(x, y, sub) {
                            return Some(d);
                        }
                    }
                    (x, y) => {
                        let show = |v: Option<&Value>| v.map_or("nothing".to_owned(), short);
                        return Some((sub, show(x), show(y)));
                    }
                }
            }
            None
        }
        (Value::Array(xa), Value::Array(ya)) => {
            for (i, (x, y)) in xa.iter().zip(ya).enumerate() {
                let sub = format!("{path}[{i}]{}", element_label(x));
                if let Some(d) = first_difference(x, y, sub) {
                    return Some(d);
                }
            }
            (xa.len() != ya.len()).then(|| {
                (
                    format!("{path} (length)"),
                    xa.len().to_string(),
                    ya.len().to_string(),
                )
            })
        }
        _ => (a != b).then(|| (path, short(a), short(b))),
    }
}

/// Where divergent traces are written: `$KVROUTE_DIVERGENCE_DIR`, else
/// `target/kvroute-divergences` under the workspace.
pub fn divergence_dir() -> PathBuf {
    std::env::var_os("KVROUTE_DIVERGENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("kvroute-divergences")
        })
}

/// Saves a trace that exposes a divergence and returns its path.
pub fn save_trace(name: &str, trace_json: &[u8]) -> std::io::Result<PathBuf> {
    let dir = divergence_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, trace_json)?;
    Ok(path)
}

/// Panics with a readable report when core and oracle disagree on `trace_json`.
/// `name` labels the saved trace; `reproduce` is a command that replays the case.
pub fn assert_agree(name: &str, trace_json: &[u8], reproduce: &str) -> Agreement {
    match compare(trace_json) {
        Ok(agreement) => agreement,
        Err(divergence) => {
            let saved = save_trace(name, trace_json)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|e| format!("(could not save the trace: {e})"));
            panic!(
                "core and oracle diverge on {name}\n  {divergence}\n  trace: {saved}\n  \
                 reproduce: {reproduce}\n  or: cargo run -- replay {saved} --format json"
            );
        }
    }
}
