//! SPEC §14.1.2: the one JSON document `vllm bench serve --save-result --save-detailed`
//! writes (`--completions-format vllm-bench`). Read whole (at most 67,108,864 bytes),
//! its five members checked in §14.5's order: `$` an object; `duration`, `ttfts`,
//! `itls`, `output_lens`, `errors` each missing, of the wrong type (judged on the first
//! occurrence), then repeated; then each other array's length against `ttfts`'s; then
//! the entries, array by array, index by index (`itls[i]` before its `itls[i][j]`).
//! Seconds become whole nanoseconds from their decimal digits (`floor(value × 10^9)`,
//! at most `B`). An entry becomes §14.2's record: in error when its `errors` string is
//! not empty, else completed with `ttft_us = floor(ttft_ns / 1000)` and vLLM's TPOT
//! `floor(Σ itl_ns / (1000 × (output_len − 1)))` (0 below two tokens, `B` when it would
//! pass `B`); no start, end,
//! cancel or id (the join gives entry `i` the run's `i`-th decision's id).
//!
//! Readings (guesses where §14 leaves a choice): an input of JSON whitespace alone is
//! "no completion records" (§14.5, 2, "an empty file, only blank lines"), not invalid
//! JSON; the entries of an array are checked even when its length is not `ttfts`'s;
//! `output_lens[i]` is an integer as §1.1 writes one (plain digits); the byte cap is on
//! the whole input, trailing whitespace included.

use super::{capped, child, repeats, scaled, MsProblem, Record, B, MAX_LINE_BYTES};
use crate::json::{self, Member, Node};

/// The document read: `floor(duration × 10^9)` and one record per entry, in order.
#[derive(Debug, Clone)]
pub(super) struct Bench {
    pub(super) duration_ns: u128,
    pub(super) entries: Vec<Record>,
}

/// Seconds as whole nanoseconds, or the reason at `path`.
fn seconds(node: &Node, path: &str, problems: &mut Vec<String>) -> Option<u64> {
    let reason = match node {
        Node::Number(text) => match scaled(text, 9) {
            Ok(ns) => return Some(ns),
            Err(MsProblem::Negative) => "expected a non-negative number of seconds",
            Err(MsProblem::TooLarge) => "expected a number of seconds below 9007199.254740992",
        },
        _ => "expected a non-negative number of seconds",
    };
    problems.push(format!("{path}: {reason}, found {}", json::quote(node)));
    None
}

/// An integer of SPEC §1.1 (plain digits) of at most `B`.
fn tokens(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes == b"0" || bytes[0] != b'0');
    if !plain || bytes.len() > 16 {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v <= B)
}

fn at(name: &str, i: usize) -> String {
    format!("{name}[{i}]")
}

/// The five members' own problems in §14.5's order (missing, wrong type judged on the
/// first occurrence, then repeats); the duration in ns when it is good.
fn member_types(top: &[Member], problems: &mut Vec<String>) -> Option<u64> {
    let mut duration_ns = None;
    for name in ["duration", "ttfts", "itls", "output_lens", "errors"] {
        let path = child("$", name);
        match json::member(top, name) {
            None => problems.push(format!("$: missing required member \"{name}\"")),
            Some(node) if name == "duration" => {
                duration_ns = seconds(node, &path, problems);
            }
            Some(Node::Array(_)) => {}
            Some(other) => problems.push(format!(
                "{path}: expected an array, found {}",
                json::quote(other)
            )),
        }
        repeats(top, name, "$", problems);
    }
    duration_ns
}

/// The four arrays (each member's first occurrence, when it is an array).
struct Arrays<'m, 'd> {
    ttfts: Option<&'m [Node<'d>]>,
    itls: Option<&'m [Node<'d>]>,
    output_lens: Option<&'m [Node<'d>]>,
    errors: Option<&'m [Node<'d>]>,
}

fn arrays<'m, 'd>(top: &'m [Member<'d>]) -> Arrays<'m, 'd> {
    let array = |name: &str| match json::member(top, name) {
        Some(Node::Array(items)) => Some(items.as_slice()),
        _ => None,
    };
    Arrays {
        ttfts: array("ttfts"),
        itls: array("itls"),
        output_lens: array("output_lens"),
        errors: array("errors"),
    }
}

/// Each other array's length against `ttfts`'s.
fn lengths(arrays: &Arrays, problems: &mut Vec<String>) {
    let Some(ttfts) = arrays.ttfts else {
        return;
    };
    let n = ttfts.len();
    for (name, array) in [
        ("itls", arrays.itls),
        ("output_lens", arrays.output_lens),
        ("errors", arrays.errors),
    ] {
        if let Some(items) = array.filter(|items| items.len() != n) {
            problems.push(format!(
                "{name}: expected {n} entries, as ttfts has, found {}",
                items.len()
            ));
        }
    }
}

/// `itls[i]`: the sum of its seconds in ns, each `itls[i][j]` checked.
fn itl_sums(itls: Option<&[Node]>, problems: &mut Vec<String>) -> Vec<Option<u128>> {
    let mut itl_sums: Vec<Option<u128>> = Vec::new();
    for (i, node) in itls.into_iter().flatten().enumerate() {
        let path = at("itls", i);
        let Node::Array(items) = node else {
            problems.push(format!(
                "{path}: expected an array, found {}",
                json::quote(node)
            ));
            itl_sums.push(None);
            continue;
        };
        let mut sum = Some(0u128);
        for (j, item) in items.iter().enumerate() {
            let ns = seconds(item, &at(&path, j), problems);
            sum = sum.zip(ns).map(|(s, ns)| s + u128::from(ns));
        }
        itl_sums.push(sum);
    }
    itl_sums
}

/// `output_lens[i]`: the output tokens.
fn output_lens(output_lens: Option<&[Node]>, problems: &mut Vec<String>) -> Vec<Option<u64>> {
    let mut lens = Vec::new();
    for (i, node) in output_lens.into_iter().flatten().enumerate() {
        let value = match node {
            Node::Number(text) => tokens(text),
            _ => None,
        };
        if value.is_none() {
            problems.push(format!(
                "{}: expected a non-negative integer, found {}",
                at("output_lens", i),
                json::quote(node)
            ));
        }
        lens.push(value);
    }
    lens
}

/// `errors[i]`: whether the entry failed (a non-empty string).
fn failed(errors: Option<&[Node]>, problems: &mut Vec<String>) -> Vec<bool> {
    let mut failed = Vec::new();
    for (i, node) in errors.into_iter().flatten().enumerate() {
        match node {
            Node::String(text) => failed.push(!text.is_empty()),
            other => problems.push(format!(
                "{}: expected a string, found {}",
                at("errors", i),
                json::quote(other)
            )),
        }
    }
    failed
}

/// vLLM's TPOT in µs, `floor(Σ itl_ns / (1000 × (output_len − 1)))`, 0 below two tokens
/// and `B` when it would pass `B` (SPEC §14.1.2).
fn tpot_us(itl_sum_ns: u128, output_len: u64) -> u128 {
    if output_len >= 2 {
        (itl_sum_ns / (1000 * (u128::from(output_len) - 1))).min(u128::from(B))
    } else {
        0
    }
}

/// The document's entries, or its problems (each the text after `COMPLETIONS: `).
pub(super) fn read(bytes: &[u8]) -> Result<Bench, Vec<String>> {
    if bytes.len() > MAX_LINE_BYTES {
        return Err(vec![format!("document longer than {MAX_LINE_BYTES} bytes")]);
    }
    if super::blank(bytes) {
        return Ok(Bench {
            duration_ns: 0,
            entries: Vec::new(),
        });
    }
    let root = json::parse(bytes).map_err(|message| vec![format!("invalid JSON: {message}")])?;
    let Node::Object(top) = &root else {
        return Err(vec![format!(
            "$: expected an object, found {}",
            json::quote(&root)
        )]);
    };
    let mut problems = Vec::new();
    let duration_ns = member_types(top, &mut problems);
    let arrays = arrays(top);
    lengths(&arrays, &mut problems);
    let mut ttft_ns = Vec::new();
    for (i, node) in arrays.ttfts.into_iter().flatten().enumerate() {
        ttft_ns.push(seconds(node, &at("ttfts", i), &mut problems));
    }
    let itl_sums = itl_sums(arrays.itls, &mut problems);
    let lens = output_lens(arrays.output_lens, &mut problems);
    let failed = failed(arrays.errors, &mut problems);
    if !problems.is_empty() {
        return Err(capped(problems, |line| line));
    }
    let mut entries = Vec::new();
    for i in 0..ttft_ns.len() {
        let (Some(ttft), Some(sum), Some(len)) = (ttft_ns[i], itl_sums[i], lens[i]) else {
            return Err(vec![
                "$: internal error: an entry without its figures".to_owned()
            ]);
        };
        entries.push(Record {
            start_ns: None,
            end_ns: None,
            cancelled: false,
            error: failed[i],
            ttft_us: Some(u128::from(ttft) / 1000),
            tpot_us: Some(tpot_us(sum, len)),
            // §14.1.2: the result keeps neither figure of §14.7.
            cached_tokens: None,
            serving_worker: None,
        });
    }
    Ok(Bench {
        duration_ns: u128::from(duration_ns.unwrap_or(0)),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{scaled, MsProblem, B};

    fn ns(literal: &str) -> Result<u64, &'static str> {
        scaled(literal, 9).map_err(|problem| match problem {
            MsProblem::Negative => "negative",
            MsProblem::TooLarge => "too large",
        })
    }

    /// SPEC §14.1.2: `floor(value × 10^9)` from the decimal digits as written.
    #[test]
    fn seconds_become_whole_nanoseconds_from_the_digits() {
        assert_eq!(ns("0.255886567999"), Ok(255_886_567));
        assert_eq!(ns("4.8984369999999995e-3"), Ok(4_898_436));
        assert_eq!(ns("0.0049999999"), Ok(4_999_999));
        assert_eq!(ns("12.5"), Ok(12_500_000_000));
        assert_eq!(ns("1E+3"), Ok(1_000_000_000_000));
        assert_eq!(ns("1e-9"), Ok(1));
        assert_eq!(ns("9.99e-10"), Ok(0));
        assert_eq!(ns("0"), Ok(0));
        assert_eq!(ns("-0"), Ok(0));
        assert_eq!(ns("-0.0e5"), Ok(0));
        assert_eq!(ns("-1e-400"), Err("negative"));
        assert_eq!(ns("-2"), Err("negative"));
        // 2^53 ns or more is an error: 9007199.254740991 s is B ns exactly.
        assert_eq!(ns("9007199.254740991"), Ok(B));
        assert_eq!(ns("9007199.2547409919"), Ok(B));
        assert_eq!(ns("9007199.254740992"), Err("too large"));
        assert_eq!(ns("1e400"), Err("too large"));
    }
}
