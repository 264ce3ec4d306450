//! The JSON document `vllm bench serve --save-result --save-detailed` writes (SPEC.md
//! §14.1.2): parallel arrays, one entry per request in the order the benchmark sent
//! them, with no request ids. What is kept per entry is what the join measures; the
//! entries are matched to decisions by position once the receipt is read.

use crate::input::json::{self, Node, Number};
use crate::join::aiperf::{scaled_floor, DecimalProblem, Fields};

/// What the join reads of one request of the benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchEntry {
    pub ttft_us: u64,
    /// vLLM's own TPOT: the latency after the first token over the tokens after it.
    pub tpot_us: u64,
    /// `errors[i]` is not `""`.
    pub failed: bool,
}

/// The document's entries and the benchmark's duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchResult {
    pub entries: Vec<BenchEntry>,
    pub duration_ns: u64,
}

/// The arrays read, in SPEC.md's order after `duration`.
const ARRAYS: [&str; 4] = ["ttfts", "itls", "output_lens", "errors"];

/// Reads the whole document; on failure every reason, each `PATH: reason` (or the
/// parser's `invalid JSON: ...`).
pub fn parse_document(bytes: &[u8]) -> Result<BenchResult, Vec<String>> {
    let node = json::parse_node(bytes).map_err(|e| vec![format!("invalid JSON: {e}")])?;
    let mut reasons = Vec::new();
    let result = read(&node, &mut reasons);
    match result {
        Some(result) if reasons.is_empty() => Ok(result),
        _ => Err(reasons),
    }
}

fn seconds_reason(problem: DecimalProblem) -> &'static str {
    match problem {
        DecimalProblem::NotNonNegative => "expected a non-negative number of seconds",
        DecimalProblem::PastTheBound => "expected a number of seconds below 9007199.254740992",
    }
}

fn read(node: &Node, reasons: &mut Vec<String>) -> Option<BenchResult> {
    let mut doc = Fields {
        node,
        path: String::new(),
        reasons,
    };
    if !matches!(node, Node::Object(_)) {
        doc.fail(
            "$".to_owned(),
            format!("expected an object, found {}", node.quoted()),
        );
        return None;
    }
    // Each member's own problem, then its repeats, in the table's order.
    let duration_ns = doc.scalar("duration", true, |fields, value| {
        match scaled_floor(value, 9) {
            Ok(ns) => Some(ns),
            Err(problem) => {
                fields.wrong("duration", seconds_reason(problem), value);
                None
            }
        }
    });
    let arrays = array_members(&mut doc);
    let ttft_ns = entries(&mut doc, "ttfts", arrays[0], |fields, path, value| {
        scaled_floor(value, 9)
            .map_err(|problem| fields.wrong_at(path, seconds_reason(problem), value))
            .ok()
    });
    let itl_sums_ns = entries(&mut doc, "itls", arrays[1], itl_sum_ns);
    let output_lens = entries(&mut doc, "output_lens", arrays[2], output_len);
    let failed = entries(&mut doc, "errors", arrays[3], entry_failed);
    let (duration_ns, ttft_ns, itl_sums_ns, output_lens, failed) =
        (duration_ns??, ttft_ns?, itl_sums_ns?, output_lens?, failed?);
    if [itl_sums_ns.len(), output_lens.len(), failed.len()]
        .iter()
        .any(|&len| len != ttft_ns.len())
    {
        return None;
    }
    let entries = (0..ttft_ns.len())
        .map(|i| BenchEntry {
            ttft_us: ttft_ns[i] / 1000,
            tpot_us: tpot_us(itl_sums_ns[i], output_lens[i]),
            failed: failed[i],
        })
        .collect();
    Some(BenchResult {
        entries,
        duration_ns,
    })
}

/// The four arrays in [`ARRAYS`]' order (`None` where one is missing or not an array),
/// each array's length checked against `ttfts`'.
fn array_members<'n>(doc: &mut Fields<'n, '_>) -> Vec<Option<&'n [Node]>> {
    let mut arrays: Vec<Option<&[Node]>> = Vec::with_capacity(ARRAYS.len());
    for name in ARRAYS {
        let items = doc.scalar(name, true, |fields, value| match value {
            Node::Array(items) => Some(items.as_slice()),
            other => {
                fields.wrong(name, "expected an array", other);
                None
            }
        });
        arrays.push(items.flatten());
    }
    let n = arrays[0].map(<[Node]>::len);
    if let Some(n) = n {
        for (name, items) in ARRAYS.iter().zip(&arrays).skip(1) {
            if let Some(items) = items.filter(|items| items.len() != n) {
                let reason = format!("expected {n} entries, as ttfts has, found {}", items.len());
                doc.fail((*name).to_owned(), reason);
            }
        }
    }
    arrays
}

/// An `output_lens` entry: a non-negative JSON integer.
fn output_len(fields: &mut Fields, path: &str, value: &Node) -> Option<u64> {
    match value {
        Node::Number(Number::Integer(v)) if *v <= crate::input::limits::JSON_INTEGER_MAX => {
            Some(*v)
        }
        other => {
            fields.wrong_at(path, "expected a non-negative integer", other);
            None
        }
    }
}

/// An `errors` entry: whether the request failed (a non-empty string).
fn entry_failed(fields: &mut Fields, path: &str, value: &Node) -> Option<bool> {
    match value {
        Node::String(text) => Some(!text.is_empty()),
        other => {
            fields.wrong_at(path, "expected a string", other);
            None
        }
    }
}

/// One `itls` entry: the sum of its inter-token latencies in nanoseconds, each entry
/// that is not a number of seconds named.
fn itl_sum_ns(fields: &mut Fields, path: &str, value: &Node) -> Option<u128> {
    let Node::Array(itls) = value else {
        fields.wrong_at(path, "expected an array", value);
        return None;
    };
    let mut sum = Some(0u128);
    for (j, itl) in itls.iter().enumerate() {
        match scaled_floor(itl, 9) {
            Ok(ns) => sum = sum.map(|s| s + u128::from(ns)),
            Err(problem) => {
                fields.wrong_at(&format!("{path}[{j}]"), seconds_reason(problem), itl);
                sum = None;
            }
        }
    }
    sum
}

/// `floor(Σ itl_ns / (1000 × (output_len − 1)))`, 0 below two tokens (vLLM's own
/// TPOT); at most `B`, as every figure the document writes.
fn tpot_us(itl_sum_ns: u128, output_len: u64) -> u64 {
    if output_len < 2 {
        return 0;
    }
    let tpot = itl_sum_ns / (1000 * u128::from(output_len - 1));
    tpot.min(u128::from(crate::input::limits::JSON_INTEGER_MAX)) as u64
}

/// Every entry of array `name` read by `read` (which reports its own problems), in
/// index order; `None` when the array is missing or any entry failed.
fn entries<T>(
    doc: &mut Fields,
    name: &str,
    items: Option<&[Node]>,
    mut read: impl FnMut(&mut Fields, &str, &Node) -> Option<T>,
) -> Option<Vec<T>> {
    let items = items?;
    let mut values = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let value = read(doc, &format!("{name}[{i}]"), item);
        values = match (values, value) {
            (Some(mut values), Some(value)) => {
                values.push(value);
                Some(values)
            }
            _ => None,
        };
    }
    values
}

impl Fields<'_, '_> {
    /// The type error of the value at `path` (an array entry, not a member).
    fn wrong_at(&mut self, path: &str, expected: &str, found: &Node) {
        let found = found.quoted();
        self.fail(path.to_owned(), format!("{expected}, found {found}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_whole_units_and_tpot_is_vllms_own() {
        let doc = br#"{"duration":2.5,"ttfts":[0.1205,0.05],"itls":[[0.01,0.0105],[0.03]],"output_lens":[3,1],"errors":["",""],"input_lens":[1,2]}"#;
        let result = parse_document(doc).unwrap();
        assert_eq!(result.duration_ns, 2_500_000_000);
        assert_eq!(
            result.entries,
            vec![
                BenchEntry {
                    ttft_us: 120_500,
                    tpot_us: 10_250,
                    failed: false
                },
                BenchEntry {
                    ttft_us: 50_000,
                    tpot_us: 0,
                    failed: false
                },
            ]
        );
    }

    #[test]
    fn every_problem_is_named_at_its_path() {
        let doc = br#"{"duration":-1,"ttfts":[0.1,"x"],"itls":[[],[-2]],"output_lens":[1],"errors":["",5]}"#;
        assert_eq!(
            parse_document(doc),
            Err(vec![
                "duration: expected a non-negative number of seconds, found -1".to_owned(),
                "output_lens: expected 2 entries, as ttfts has, found 1".to_owned(),
                "ttfts[1]: expected a non-negative number of seconds, found \"x\"".to_owned(),
                "itls[1][0]: expected a non-negative number of seconds, found -2".to_owned(),
                "errors[1]: expected a string, found 5".to_owned(),
            ])
        );
        assert_eq!(
            parse_document(br#"{"ttfts":[]}"#),
            Err(vec![
                "$: missing required member \"duration\"".to_owned(),
                "$: missing required member \"itls\"".to_owned(),
                "$: missing required member \"output_lens\"".to_owned(),
                "$: missing required member \"errors\"".to_owned(),
            ])
        );
    }
}
