//! SPEC §14: joining a receipt's run with completion records (`kvroute join`): AIPerf
//! records here, Dynamo's request trace in `dynamo`, `vllm bench serve` results in
//! `vllm`, the layout told from the first line in `detect`, cohorts in `cohorts`, the
//! objectives of `--slo` in `slo`, why requests missed the cache (§14.7) and the gate
//! lines in `attribution`.
//!
//! Written naively from §14 (with §2 for paths and quoted values, §6/§6.4 for the two
//! receipt forms, §6.5 for keyed ids, §10.2 for the line cap and the column of a line's
//! syntax error): the completions are read line by line (or, for `vllm-bench`, as one
//! document) into a list of record lines, each with its (possibly keyed) id; the run's
//! decisions into a plain list; every figure is a loop over those, with the first line
//! of each id found through a `BTreeMap`, in 128-bit integers. The rank correlation is
//! the double loop over every unordered pair. A cohort's figures are the same function
//! over the cohort's decisions and the lines of their ids.
//!
//! Which error applies when (SPEC §14.5, "the first that applies, in this order"):
//! without a named layout, a layout that cannot be told, alone; then the completions'
//! layout errors (all lines are checked, the first 100 errors kept); then completions
//! with no record at all; then the receipt (not a receipt); then `--run` (no such run);
//! then, with `--trace`, the trace's own errors, its digest, a decision whose request is
//! not in it; then the join that matches nothing.
//!
//! Inside one line (§14.5): the members in the order §14.1 lists them, a member's own
//! problems before the members inside it; a missing member is reported at the object
//! that lacks it (`$` for the line), with the §14.5 table's wordings.
//!
//! Figures (§14.5, "Figures above `B`"): every figure is computed exactly in 128-bit
//! integers and written as `B` when its exact value passes `B`; nothing is computed
//! from a saturated figure (`good_per_second_milli` divides by the exact span).
//!
//! Readings of §14 where it still leaves a choice (each a guess, to be settled by SPEC):
//! - A member's own problems among themselves: its missing or type error (read from its
//!   first occurrence, as §2.2 accepts the first occurrence) before its repeats (the
//!   later occurrences), i.e. document order for errors at one path (§2.2). A missing
//!   member's line, though written at its parent's path, takes the missing member's
//!   place in the order, not the parent's.
//! - In a metric, `value` before `unit` (the order §14.1 writes `{"value": number,
//!   "unit": "ms"}` in; §14.5's table happens to list `unit` first). Both are "listed
//!   members" for the repeat rule.
//! - `-0` (any zero written with a sign) as a `value` is 0 µs, not negative; `-1e-400`
//!   is negative.
//! - The byte-order-mark line is §10.2's (`invalid JSON: the line starts with a UTF-8
//!   byte order mark ...`, no column).
//! - The 64 MiB cap is checked before the blank-line rule, so an over-long line of spaces
//!   is an error (§10.2's order), and the cap counts the line's bytes without its `\n`.
//! - The receipt is checked only as far as it is read: its format, `receipt_digest`, each
//!   run's `policy` and `decisions`, and of the chosen run's decisions `request`, `tick`,
//!   `chosen`, `route_kind` and each row's `worker`, `eligible`, `reasons` (strings),
//!   `reuse`, `recomputed`, `work_milli`, `after_milli` and `cost_milli` (integers of
//!   §1.1; §14.7 reads them all). A JSON Lines receipt's line order is not checked. So a defect in
//!   another run's decisions is no error, and one in the chosen run's decisions is found
//!   only once `--run` has named an existing run. The receipt's `trace_digest` is read
//!   only with `--trace`; a receipt without one (a string) is then not a receipt.
//! - `vllm-bench`'s span is the duration when `matched` (routed decisions with a record)
//!   is at least 1, a rejected decision's entry (`rejected_served`) not counting.

mod attribution;
mod cohorts;
mod detect;
mod dynamo;
mod slo;
mod vllm;

pub use attribution::gate_lines;
pub use slo::{parse_slo, Slo};

use std::collections::{BTreeMap, BTreeSet};

use crate::jcs::{self, Json};
use crate::json::{self, Member, Node};
use crate::keyed;

/// The longest completion line, in bytes without its `\n` (SPEC §14.1, §10.2).
const MAX_LINE_BYTES: usize = 67_108_864;

/// `B = 2^53 - 1` (SPEC conventions).
const B: u64 = 9_007_199_254_740_991;

/// The largest `request_start_ns` / `request_end_ns`: 10^19 − 1 (SPEC §14.1).
const NS_MAX: u64 = 9_999_999_999_999_999_999;

/// Error lines kept before the rest are only counted (SPEC §2.3).
const ERROR_LINES: usize = 100;

/// Why [`join`] wrote nothing (SPEC §14.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinFailure {
    /// Completion lines that are not the layout: (1-based line, `"<path>: <reason>"` or
    /// `"invalid JSON: ..."` or `"line longer than 67108864 bytes"`), the first 100
    /// kept, then, if there were more, one entry `(0, "... and N more errors")`.
    Lines(Vec<(usize, String)>),
    /// The receipt is not §6's shape (canonical or JSON Lines).
    NotAReceipt,
    /// `--run` names no run of the receipt: the receipt's runs, in order.
    NoSuchRun(Vec<String>),
    /// The completions hold no record at all (empty, or only blank lines).
    NoRecords,
    /// Nothing matched while both sides have ids: the first completion id (in file
    /// order, keyed when a key was given, i.e. as it was compared) and the run's first
    /// request id (in receipt order).
    NothingMatched {
        completion_id: String,
        request_id: String,
    },
    /// Without `--completions-format`, the layout cannot be told from the first line
    /// that is not blank (SPEC §14.1.4): that line's 1-based number. A first line that
    /// is not JSON text (a byte order mark, not UTF-8) is `Lines` with its one error.
    Undetectable(usize),
    /// A `vllm-bench` document's problems (SPEC §14.5, 1), each the text after
    /// `COMPLETIONS: ` (`"<path>: <reason>"`, `"invalid JSON: ..."` or `"document longer
    /// than 67108864 bytes"`), the first 100 kept, then, if there were more, one entry
    /// `"... and N more errors"`.
    Document(Vec<String>),
    /// `--trace` is not a valid trace (SPEC §14.5, 5): its lines as `validate` gives them.
    TraceInvalid(Vec<String>),
    /// `--trace`'s digest is not the receipt's `trace_digest` (SPEC §14.5, 5), both as
    /// `sha256:<hex>`.
    TraceDigest { trace: String, receipt: String },
    /// The run's first decision (receipt order) whose request is not a request of the
    /// trace (SPEC §14.5, 6): that request id, as the receipt has it.
    NotInTrace(String),
}

/// What the join keeps of one completion record (the first line of its id).
#[derive(Debug, Clone)]
struct Record {
    /// `None`: no start (a Dynamo record without `request_received_ms`, a `vllm-bench`
    /// entry), left out of the span's min.
    start_ns: Option<u64>,
    end_ns: Option<u64>,
    cancelled: bool,
    error: bool,
    ttft_us: Option<u128>,
    tpot_us: Option<u128>,
    /// The prompt tokens the record says were read from cache (SPEC §14.7's cached
    /// figure): AIPerf's `usage_prompt_cache_read_tokens`, Dynamo's `cached_tokens`.
    cached_tokens: Option<u64>,
    /// Dynamo's prefill worker as a kvroute worker id, `dynamo|<id>|dp<rank>`.
    serving_worker: Option<String>,
}

/// What the join keeps of one decision: its request id and, when routed, the chosen
/// worker with `predicted_milli = work_milli + 1000 × recomputed` of the chosen row.
#[derive(Debug, Clone)]
struct Decision {
    request: String,
    chosen: Option<(String, u128)>,
    /// `route_kind` and every row, for §14.7.
    route_kind: String,
    rows: Vec<Row>,
}

/// What §14.7 reads of one row of a decision.
#[derive(Debug, Clone)]
struct Row {
    worker: String,
    eligible: bool,
    reasons: Vec<String>,
    reuse: u64,
    recomputed: u64,
    work_milli: u64,
    after_milli: u64,
    cost_milli: u64,
}

// ---------------------------------------------------------------------------------------
// Completion lines (SPEC §14.1)
// ---------------------------------------------------------------------------------------

/// A member's path below `parent` (SPEC §2.1; every name here is a plain identifier).
fn child(parent: &str, name: &str) -> String {
    if parent == "$" {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// `repeated member "<name>"` at the member's path for the second and each later
/// occurrence of `name` (SPEC §14.5, §2.2). Called for listed names only (SPEC §14.1:
/// every other member is ignored, repeats included), right after the member's own type
/// check: a member's errors keep document order (the first occurrence is the one read,
/// §2.2), and come before the errors of the members inside it (§14.5).
fn repeats(members: &[Member], name: &str, parent: &str, problems: &mut Vec<String>) {
    for _ in members.iter().filter(|(n, _)| n == name).skip(1) {
        problems.push(format!(
            "{}: repeated member {}",
            child(parent, name),
            json::quote_str(name)
        ));
    }
}

/// An integer as SPEC §1.1 writes one (`0` or a non-zero digit then digits, no sign,
/// fraction or exponent) of at most 10^19 − 1.
fn nanoseconds(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes == b"0" || bytes[0] != b'0');
    if !plain || bytes.len() > 19 {
        return None;
    }
    let value: u64 = text.parse().ok()?;
    (value <= NS_MAX).then_some(value)
}

/// Why a number literal has no whole figure.
enum MsProblem {
    Negative,
    TooLarge,
}

/// `floor(value × 1000)` of a millisecond literal: its microseconds (SPEC §14.1).
fn microseconds(literal: &str) -> Result<u64, MsProblem> {
    scaled(literal, 3)
}

/// `floor(value × 10^places)` of a JSON number literal, from its decimal digits as
/// written (SPEC §14.1, §14.1.2): the literal is `digits × 10^(exponent − fraction
/// digits)`, so the result is the digits shifted by `exponent + places − fraction
/// digits` places and cut (a floor, the value being non-negative). `-0` (any zero) is
/// 0, any other negative value an error, and a result above `B` an error (`places` 3:
/// more than 2^53 − 1 µs; 9: 2^53 ns or more).
fn scaled(literal: &str, places: i128) -> Result<u64, MsProblem> {
    let (negative, unsigned) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
        None => (unsigned, ""),
    };
    let (integer, fraction) = match mantissa.find('.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, ""),
    };
    // The exponent as written, saturated far beyond any digit count a line can hold.
    let (exponent_negative, exponent_digits) = match exponent.as_bytes().first() {
        Some(b'-') => (true, &exponent[1..]),
        Some(b'+') => (false, &exponent[1..]),
        _ => (false, exponent),
    };
    let mut exponent_value: i128 = 0;
    for digit in exponent_digits.bytes() {
        exponent_value = (exponent_value * 10 + i128::from(digit - b'0')).min(1_000_000_000_000);
    }
    if exponent_negative {
        exponent_value = -exponent_value;
    }
    let all_digits = format!("{integer}{fraction}");
    let digits = all_digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(MsProblem::Negative);
    }
    // value × 10^places = digits × 10^shift.
    let shift = exponent_value + places - fraction.len() as i128;
    // How many digits the integer part of value × 10^places has (the first digit is not 0).
    let whole_digits = digits.len() as i128 + shift;
    if whole_digits <= 0 {
        return Ok(0);
    }
    if whole_digits > 16 {
        return Err(MsProblem::TooLarge); // at least 10^16 > B
    }
    let whole: String = if shift >= 0 {
        format!("{digits}{}", "0".repeat(shift as usize))
    } else {
        digits[..whole_digits as usize].to_owned()
    };
    let value: u64 = whole.parse().map_err(|_| MsProblem::TooLarge)?;
    if value > B {
        return Err(MsProblem::TooLarge);
    }
    Ok(value)
}

/// `metrics.time_to_first_token` or `metrics.inter_token_latency`: `{"value": number,
/// "unit": "ms"}`; the microseconds when both members are good. `value` is checked
/// before `unit`, the order §14.1 writes them in; each one's repeats right after it.
fn duration(members: &[Member], path: &str, problems: &mut Vec<String>) -> Option<u64> {
    let mut micros = None;
    match json::member(members, "value") {
        None => problems.push(format!("{path}: missing required member \"value\"")),
        Some(node @ Node::Number(text)) => match microseconds(text) {
            Ok(us) => micros = Some(us),
            Err(MsProblem::Negative) => problems.push(format!(
                "{path}.value: expected a non-negative number, found {}",
                json::quote(node)
            )),
            Err(MsProblem::TooLarge) => problems.push(format!(
                "{path}.value: expected a number of milliseconds below 9007199254740.992, found {}",
                json::quote(node)
            )),
        },
        Some(other) => problems.push(format!(
            "{path}.value: expected a non-negative number, found {}",
            json::quote(other)
        )),
    }
    repeats(members, "value", path, problems);
    let mut unit_ok = false;
    match json::member(members, "unit") {
        None => problems.push(format!("{path}: missing required member \"unit\"")),
        Some(Node::String(unit)) if unit == "ms" => unit_ok = true,
        Some(other) => problems.push(format!(
            "{path}.unit: expected \"ms\", found {}",
            json::quote(other)
        )),
    }
    repeats(members, "unit", path, problems);
    micros.filter(|_| unit_ok)
}

/// One optional duration member of `metrics`: its own type, its repeats, then (when it
/// is an object) its `value` and `unit`.
fn metric(members: &[Member], name: &str, problems: &mut Vec<String>) -> Option<u64> {
    let path = child("metrics", name);
    let inner = match json::member(members, name) {
        None => None,
        Some(Node::Object(inner)) => Some(inner),
        Some(other) => {
            problems.push(format!(
                "{path}: expected an object, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(members, name, "metrics", problems);
    inner.and_then(|inner| duration(inner, &path, problems))
}

/// What an AIPerf line's `metadata` gives (SPEC §14.1).
#[derive(Default)]
struct Metadata {
    id: Option<String>,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
    cancelled: bool,
}

/// `metadata`: its own problem and repeats, then its members in §14.1's order
/// (`x_request_id`, `request_start_ns`, `request_end_ns`, `was_cancelled`), each with
/// its repeats.
fn metadata(top: &[Member], problems: &mut Vec<String>) -> Metadata {
    let meta = match json::member(top, "metadata") {
        None => {
            problems.push("$: missing required member \"metadata\"".to_owned());
            None
        }
        Some(Node::Object(meta)) => Some(meta),
        Some(other) => {
            problems.push(format!(
                "metadata: expected an object, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(top, "metadata", "$", problems);
    let Some(meta) = meta else {
        return Metadata::default();
    };
    let mut read = Metadata::default();
    match json::member(meta, "x_request_id") {
        None => problems.push("metadata: missing required member \"x_request_id\"".to_owned()),
        Some(Node::String(text)) if !text.is_empty() => read.id = Some(text.to_string()),
        Some(other) => problems.push(format!(
            "metadata.x_request_id: expected a non-empty string, found {}",
            json::quote(other)
        )),
    }
    repeats(meta, "x_request_id", "metadata", problems);
    match json::member(meta, "request_start_ns") {
        None => problems.push("metadata: missing required member \"request_start_ns\"".to_owned()),
        Some(Node::Number(text)) if nanoseconds(text).is_some() => {
            read.start_ns = nanoseconds(text)
        }
        Some(other) => problems.push(format!(
            "metadata.request_start_ns: expected a non-negative integer, found {}",
            json::quote(other)
        )),
    }
    repeats(meta, "request_start_ns", "metadata", problems);
    match json::member(meta, "request_end_ns") {
        None | Some(Node::Null) => {}
        Some(Node::Number(text)) if nanoseconds(text).is_some() => read.end_ns = nanoseconds(text),
        Some(other) => problems.push(format!(
            "metadata.request_end_ns: expected a non-negative integer or null, found {}",
            json::quote(other)
        )),
    }
    repeats(meta, "request_end_ns", "metadata", problems);
    match json::member(meta, "was_cancelled") {
        None => {}
        Some(Node::Bool(value)) => read.cancelled = *value,
        Some(other) => problems.push(format!(
            "metadata.was_cancelled: expected a boolean, found {}",
            json::quote(other)
        )),
    }
    repeats(meta, "was_cancelled", "metadata", problems);
    read
}

/// `metrics` (an object or null): its own problem and repeats, then TTFT and ITL in µs
/// and the cached tokens.
fn metrics(top: &[Member], problems: &mut Vec<String>) -> (Option<u64>, Option<u64>, Option<u64>) {
    let metrics = match json::member(top, "metrics") {
        None | Some(Node::Null) => None,
        Some(Node::Object(metrics)) => Some(metrics),
        Some(other) => {
            problems.push(format!(
                "metrics: expected an object or null, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(top, "metrics", "$", problems);
    match metrics {
        Some(metrics) => (
            metric(metrics, "time_to_first_token", problems),
            metric(metrics, "inter_token_latency", problems),
            cache_read_tokens(metrics, problems),
        ),
        None => (None, None, None),
    }
}

/// `metrics.usage_prompt_cache_read_tokens` (SPEC §14.1): absent, or an object whose
/// `value` is an integer from 0 to `B` and whose `unit` is `"tokens"`; its own type,
/// its repeats, then `value` and `unit`, each with its repeats.
fn cache_read_tokens(metrics: &[Member], problems: &mut Vec<String>) -> Option<u64> {
    let name = "usage_prompt_cache_read_tokens";
    let path = child("metrics", name);
    let inner = match json::member(metrics, name) {
        None => None,
        Some(Node::Object(inner)) => Some(inner),
        Some(other) => {
            problems.push(format!(
                "{path}: expected an object, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(metrics, name, "metrics", problems);
    let inner = inner?;
    let mut tokens = None;
    match json::member(inner, "value") {
        None => problems.push(format!("{path}: missing required member \"value\"")),
        Some(node) => match receipt_integer(node) {
            Some(value) => tokens = Some(value),
            None => problems.push(format!(
                "{path}.value: expected a non-negative integer, found {}",
                json::quote(node)
            )),
        },
    }
    repeats(inner, "value", &path, problems);
    let mut unit_ok = false;
    match json::member(inner, "unit") {
        None => problems.push(format!("{path}: missing required member \"unit\"")),
        Some(Node::String(unit)) if unit == "tokens" => unit_ok = true,
        Some(other) => problems.push(format!(
            "{path}.unit: expected \"tokens\", found {}",
            json::quote(other)
        )),
    }
    repeats(inner, "unit", &path, problems);
    tokens.filter(|_| unit_ok)
}

/// `error` (an object or null), then its repeats: whether the request failed.
fn error(top: &[Member], problems: &mut Vec<String>) -> bool {
    let mut error = false;
    match json::member(top, "error") {
        None | Some(Node::Null) => {}
        Some(Node::Object(_)) => error = true,
        Some(other) => problems.push(format!(
            "error: expected an object or null, found {}",
            json::quote(other)
        )),
    }
    repeats(top, "error", "$", problems);
    error
}

/// One non-blank completion line, parsed: its id and record, or its reasons (each
/// `"<path>: <reason>"`), in the order of SPEC §14.5: the members in the order §14.1
/// lists them (`metadata` with `x_request_id`, `request_start_ns`, `request_end_ns`,
/// `was_cancelled`; `metrics` with `time_to_first_token`, `inter_token_latency`, each
/// with `value`, `unit`, then `usage_prompt_cache_read_tokens`; `error`), a member's own problems (missing, wrong type, then its
/// repeats) before those of the members inside it. A missing member is reported at the
/// object that lacks it, in the missing member's place in that order.
fn record(root: &Node) -> Parsed {
    let mut problems = Vec::new();
    let Node::Object(top) = root else {
        return Err(vec![format!(
            "$: expected an object, found {}",
            json::quote(root)
        )]);
    };
    let meta = metadata(top, &mut problems);
    let (ttft_us, tpot_us, cached_tokens) = metrics(top, &mut problems);
    let error = error(top, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    match (meta.id, meta.start_ns) {
        (Some(id), Some(start_ns)) => Ok(Some((
            id,
            Record {
                start_ns: Some(start_ns),
                end_ns: meta.end_ns,
                cancelled: meta.cancelled,
                error,
                ttft_us: ttft_us.map(u128::from),
                tpot_us: tpot_us.map(u128::from),
                cached_tokens,
                serving_worker: None,
            },
        ))),
        _ => Err(vec!["$: internal error: a record without its id".to_owned()]),
    }
}

/// `invalid JSON: <what> at column C` from the reader's `<what> at line 1 column C`
/// (a line holds no `\n`, so its position is a column alone, SPEC §10.2).
fn syntax_reason(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => {
            let what = &message[..at];
            let column = message[at..].rsplit(" column ").next().unwrap_or("0");
            format!("invalid JSON: {what} at column {column}")
        }
        None => format!("invalid JSON: {message}"),
    }
}

/// Whether a line is blank: only JSON whitespace (space, tab, CR; LF never occurs).
fn blank(line: &[u8]) -> bool {
    line.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// A record's line: its 1-based number, its id as written, the record.
type Line = (usize, String, Record);

/// What one non-blank JSON Lines line gives: its id and record, nothing (a Dynamo line
/// that is not `request_end`, skipped like a blank line), or its reasons.
type Parsed = Result<Option<(String, Record)>, Vec<String>>;

/// The lines of `bytes` (split at `\n`; the newline that ends the last line starts no
/// line).
fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|last| last.is_empty()) {
        lines.pop();
    }
    lines
}

/// A completion line that starts with a byte order mark (SPEC §14.5, 1; §14.1.4 without
/// a named layout): the mark is refused, never skipped.
const BOM_REASON: &str = "invalid JSON: the line starts with a UTF-8 byte order mark \
                          (EF BB BF), which JSON text must not carry";

/// Keeps the first 100 problems, then one `... and N more errors` (SPEC §2.3).
fn capped<T>(mut problems: Vec<T>, count_line: impl FnOnce(String) -> T) -> Vec<T> {
    let more = problems.len().saturating_sub(ERROR_LINES);
    problems.truncate(ERROR_LINES);
    if more > 0 {
        problems.push(count_line(format!("... and {more} more errors")));
    }
    problems
}

/// The completions read, one layout's line reader `parse` on each non-blank line:
/// each record line's (1-based line number, id, record) in file order, or every line's
/// problems (SPEC §14.5, 1: the same loop for `aiperf` and `dynamo`).
fn completion_records(
    bytes: &[u8],
    parse: fn(&Node) -> Parsed,
) -> Result<Vec<Line>, Vec<(usize, String)>> {
    let mut records = Vec::new();
    let mut problems: Vec<(usize, String)> = Vec::new();
    for (index, line) in split_lines(bytes).iter().enumerate() {
        let number = index + 1;
        if line.len() > MAX_LINE_BYTES {
            problems.push((number, format!("line longer than {MAX_LINE_BYTES} bytes")));
            continue;
        }
        if blank(line) {
            continue;
        }
        if line.starts_with(&[0xef, 0xbb, 0xbf]) {
            problems.push((number, BOM_REASON.to_owned()));
            continue;
        }
        let root = match json::parse(line) {
            Ok(root) => root,
            Err(message) => {
                problems.push((number, syntax_reason(&message)));
                continue;
            }
        };
        match parse(&root) {
            Ok(Some((id, rec))) => records.push((number, id, rec)),
            Ok(None) => {}
            Err(reasons) => problems.extend(reasons.into_iter().map(|r| (number, r))),
        }
    }
    if problems.is_empty() {
        return Ok(records);
    }
    Err(capped(problems, |line| (0, line)))
}

// ---------------------------------------------------------------------------------------
// The receipt (SPEC §6, §6.4)
// ---------------------------------------------------------------------------------------

/// An integer of SPEC §1.1 (plain digits, at most `B`).
fn receipt_integer(node: &Node) -> Option<u64> {
    let Node::Number(text) = node else {
        return None;
    };
    let bytes = text.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes == b"0" || bytes[0] != b'0')
        && bytes.len() <= 16;
    if !plain {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v <= B)
}

fn string<'a>(node: Option<&'a Node>) -> Option<&'a str> {
    match node {
        Some(Node::String(text)) => Some(text),
        _ => None,
    }
}

/// The receipt read as SPEC §6 / §6.4 shape it: its `receipt_digest`, its
/// `trace_digest` (when it is a string; needed only with `--trace`, §14.1) and its runs
/// in order, each run's policy and its decision nodes (in receipt order).
type Runs<'a, 'd> = (String, Option<String>, Vec<(String, Vec<&'a Node<'d>>)>);

/// The receipt's parsed form: one document (canonical receipt) or its lines (JSON Lines).
enum ReceiptText<'d> {
    Whole(Node<'d>),
    Lines(Vec<Node<'d>>),
}

/// Tells the two forms apart by content: a document that is one JSON value is the
/// canonical receipt (whatever its format member then says); otherwise each line must be
/// one JSON value, the form of §6.4 (checked by [`runs`]).
fn receipt_text(bytes: &[u8]) -> Option<ReceiptText<'_>> {
    if let Ok(root) = json::parse(bytes) {
        return Some(ReceiptText::Whole(root));
    }
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|last| last.is_empty()) {
        lines.pop();
    }
    let nodes: Result<Vec<Node>, String> = lines.iter().map(|line| json::parse(line)).collect();
    nodes.ok().map(ReceiptText::Lines)
}

fn runs<'a, 'd>(text: &'a ReceiptText<'d>) -> Option<Runs<'a, 'd>> {
    match text {
        ReceiptText::Whole(Node::Object(top)) => {
            if string(json::member(top, "format")) != Some("kvroute-receipt/1") {
                return None;
            }
            let digest = string(json::member(top, "receipt_digest"))?.to_owned();
            let trace_digest = string(json::member(top, "trace_digest")).map(str::to_owned);
            let Some(Node::Array(items)) = json::member(top, "runs") else {
                return None;
            };
            let mut runs = Vec::new();
            for item in items {
                let Node::Object(run) = item else {
                    return None;
                };
                let policy = string(json::member(run, "policy"))?.to_owned();
                let Some(Node::Array(decisions)) = json::member(run, "decisions") else {
                    return None;
                };
                runs.push((policy, decisions.iter().collect()));
            }
            Some((digest, trace_digest, runs))
        }
        ReceiptText::Whole(_) => None,
        ReceiptText::Lines(lines) => {
            if lines.len() < 2 {
                return None;
            }
            let Node::Object(first) = &lines[0] else {
                return None;
            };
            if string(json::member(first, "format")) != Some("kvroute-receipt-stream/1") {
                return None;
            }
            let Node::Object(last) = &lines[lines.len() - 1] else {
                return None;
            };
            let digest = string(json::member(last, "receipt_digest"))?.to_owned();
            let trace_digest = string(json::member(first, "trace_digest")).map(str::to_owned);
            let mut runs: Vec<(String, Vec<&Node>)> = Vec::new();
            for line in &lines[1..lines.len() - 1] {
                let Node::Object(members) = line else {
                    return None;
                };
                let policy = string(json::member(members, "policy"))?;
                if members.len() != 2 {
                    return None;
                }
                let (name, value) = members.iter().find(|(name, _)| name != "policy")?;
                if !["cache_log", "decisions", "metrics", "observation_log"]
                    .contains(&name.as_ref())
                {
                    return None;
                }
                let at = match runs.iter().position(|(p, _)| p == policy) {
                    Some(at) => at,
                    None => {
                        runs.push((policy.to_owned(), Vec::new()));
                        runs.len() - 1
                    }
                };
                if name == "decisions" {
                    runs[at].1.push(value);
                }
            }
            Some((digest, trace_digest, runs))
        }
    }
}

/// One row of a decision: `worker`, `eligible`, `reasons`, `reuse`, `recomputed`,
/// `work_milli`, `after_milli`, `cost_milli` (SPEC §14.1, §6).
fn row(node: &Node) -> Option<Row> {
    let Node::Object(row) = node else {
        return None;
    };
    let integer = |name: &str| json::member(row, name).and_then(receipt_integer);
    let eligible = match json::member(row, "eligible")? {
        Node::Bool(value) => *value,
        _ => return None,
    };
    let Node::Array(reason_nodes) = json::member(row, "reasons")? else {
        return None;
    };
    let mut reasons = Vec::new();
    for reason in reason_nodes {
        reasons.push(string(Some(reason))?.to_owned());
    }
    Some(Row {
        worker: string(json::member(row, "worker"))?.to_owned(),
        eligible,
        reasons,
        reuse: integer("reuse")?,
        recomputed: integer("recomputed")?,
        work_milli: integer("work_milli")?,
        after_milli: integer("after_milli")?,
        cost_milli: integer("cost_milli")?,
    })
}

/// One decision of the run: `request`, `tick`, `chosen`, `route_kind` and its rows; the
/// chosen row (the first with the chosen worker) gives `predicted_milli` (SPEC §14.1).
fn decision(node: &Node) -> Option<Decision> {
    let Node::Object(members) = node else {
        return None;
    };
    let request = string(json::member(members, "request"))?.to_owned();
    receipt_integer(json::member(members, "tick")?)?;
    let route_kind = string(json::member(members, "route_kind"))?.to_owned();
    let chosen = match json::member(members, "chosen")? {
        Node::Null => None,
        Node::String(worker) => Some(worker.to_string()),
        _ => return None,
    };
    let Some(Node::Array(row_nodes)) = json::member(members, "candidates") else {
        return None;
    };
    let mut rows = Vec::new();
    for node in row_nodes {
        rows.push(row(node)?);
    }
    let chosen = match chosen {
        None => None,
        Some(worker) => {
            let chosen_row = rows.iter().find(|r| r.worker == worker)?;
            let predicted =
                u128::from(chosen_row.work_milli) + 1000 * u128::from(chosen_row.recomputed);
            Some((worker, predicted))
        }
    };
    Some(Decision {
        request,
        chosen,
        route_kind,
        rows,
    })
}

// ---------------------------------------------------------------------------------------
// The join (SPEC §14.2) and the document (§14.3)
// ---------------------------------------------------------------------------------------

/// A figure of the document, computed exactly, written plainly (SPEC §6.1) and, when
/// its exact value passes `B`, written as `B` (SPEC §14.5, "Figures above `B`"). Only
/// the written figure saturates: every computation uses the exact values.
fn number<'a>(value: i128) -> Json<'a> {
    Json::Written(value.min(i128::from(B)).to_string().into_bytes())
}

fn optional<'a>(value: Option<i128>) -> Json<'a> {
    value.map_or(Json::Null, number)
}

/// `floor(1000 × Σ ttft_us / Σ predicted_milli)`, `None` when the sum is 0.
fn per_token(ttft_sum: u128, predicted_sum: u128) -> Option<i128> {
    (predicted_sum > 0).then(|| (1000 * ttft_sum / predicted_sum) as i128)
}

/// How a run's (or a cohort's) `span_ns` is found.
#[derive(Debug, Clone, Copy)]
enum Span {
    /// `max(end) − min(start)` over the matched records (SPEC §14.2).
    Records,
    /// `floor(duration × 10^9)` when anything matched, else 0 (`vllm-bench`, §14.1.2).
    Duration(u128),
}

/// One line that holds a record, as the join sees it: its id as compared (keyed under
/// `--id-key`; for `vllm-bench` the id of the decision at its position), or `None` for
/// a `vllm-bench` entry past the run's last decision (unrouted, one each, §14.1.2).
#[derive(Debug, Clone)]
struct Entry {
    id: Option<String>,
    record: Record,
}

/// §14.2's figures over some decisions and some record lines, as the document's four
/// members, with the two counts error 7 of §14.5 looks at.
struct Figures<'a> {
    matched: u128,
    rejected_served: u128,
    counts: Json<'a>,
    prediction: Json<'a>,
    goodput: Json<'a>,
    workers: Json<'a>,
    /// §14.7's `attribution`, and whether a matched record carries a figure it reads
    /// (the member is written only then, SPEC §14.3).
    attribution: Json<'a>,
    carries_figure: bool,
}

/// The record lines grouped by id (SPEC §14.2): each id's record (its first line in
/// file order), how many lines each id is on, and how many lines have no id (`vllm-bench`
/// entries past the run's last decision).
struct RecordsById<'e> {
    records: BTreeMap<&'e str, &'e Record>,
    lines_of: BTreeMap<&'e str, u128>,
    without_id: u128,
    /// Every line that holds a record: `completion_lines`.
    lines: u128,
}

fn records_by_id<'e>(entries: &[&'e Entry]) -> RecordsById<'e> {
    let mut by_id = RecordsById {
        records: BTreeMap::new(),
        lines_of: BTreeMap::new(),
        without_id: 0,
        lines: entries.len() as u128,
    };
    for &entry in entries {
        match &entry.id {
            Some(id) => {
                *by_id.lines_of.entry(id).or_insert(0) += 1;
                by_id.records.entry(id).or_insert(&entry.record);
            }
            None => by_id.without_id += 1,
        }
    }
    by_id
}

/// A completed record with its decision's chosen worker and `predicted_milli`.
type Completed<'a, 'e> = (&'a str, u128, &'e Record);

/// What matching the decisions with their records gives (SPEC §14.2's counts that
/// look at records, and what the measured figures and the span are taken over).
struct Matching<'a, 'e> {
    matched: u128,
    rejected_served: u128,
    cancelled: u128,
    errors: u128,
    completed: Vec<Completed<'a, 'e>>,
    /// The same completed records, each with its decision (§14.7).
    completed_decisions: Vec<(&'a Decision, &'e Record)>,
    /// Whether a matched record has a cached figure or a serving worker.
    carries_figure: bool,
    /// `min(request_start_ns)` and `max(request_end_ns)` over the matched records.
    min_start_ns: Option<u64>,
    max_end_ns: Option<u64>,
}

/// Each decision against the record of its request id: a rejected decision with one is
/// `rejected_served`; a routed one is `matched`, then cancelled, in error or completed.
fn match_decisions<'a, 'e>(
    decisions: &[&'a Decision],
    records: &BTreeMap<&str, &'e Record>,
) -> Matching<'a, 'e> {
    let mut m = Matching {
        matched: 0,
        rejected_served: 0,
        cancelled: 0,
        errors: 0,
        completed: Vec::new(),
        completed_decisions: Vec::new(),
        carries_figure: false,
        min_start_ns: None,
        max_end_ns: None,
    };
    for d in decisions {
        let Some(rec) = records.get(d.request.as_str()) else {
            continue;
        };
        let Some((worker, predicted)) = &d.chosen else {
            m.rejected_served += 1;
            continue;
        };
        m.matched += 1;
        m.carries_figure |= attribution::carries_figure(rec);
        if let Some(start) = rec.start_ns {
            m.min_start_ns = Some(m.min_start_ns.map_or(start, |s| s.min(start)));
        }
        if let Some(end) = rec.end_ns {
            m.max_end_ns = Some(m.max_end_ns.map_or(end, |e| e.max(end)));
        }
        if rec.cancelled {
            m.cancelled += 1;
        } else if rec.error {
            m.errors += 1;
        } else if rec.ttft_us.is_some() && rec.tpot_us.is_some() {
            m.completed.push((worker, *predicted, rec));
            m.completed_decisions.push((d, rec));
        }
    }
    m
}

/// A completed record's TTFT and TPOT in µs (both present, by §14.2's `completed`).
fn ttft_us(rec: &Record) -> u128 {
    rec.ttft_us.unwrap_or(0)
}

fn tpot_us(rec: &Record) -> u128 {
    rec.tpot_us.unwrap_or(0)
}

/// The `counts` member (SPEC §14.2's table, in its order).
fn counts<'a>(decisions: &[&Decision], by_id: &RecordsById, m: &Matching) -> Json<'a> {
    let total = decisions.len() as u128;
    let routed = routed(decisions);
    let requests: BTreeSet<&str> = decisions.iter().map(|d| d.request.as_str()).collect();
    let unrouted = by_id
        .records
        .keys()
        .filter(|id| !requests.contains(*id))
        .count() as u128
        + by_id.without_id;
    let retried = by_id.lines_of.values().filter(|n| **n > 1).count() as u128;
    let error_rate_pm = (1000 * m.errors).checked_div(m.matched).unwrap_or(0);
    let count = |v: u128| number(v as i128);
    Json::Object(vec![
        ("decisions", count(total)),
        ("routed", count(routed)),
        ("rejected", count(total - routed)),
        ("completion_lines", count(by_id.lines)),
        ("matched", count(m.matched)),
        ("dropped", count(routed - m.matched)),
        ("rejected_served", count(m.rejected_served)),
        ("unrouted", count(unrouted)),
        ("retried", count(retried)),
        ("cancelled", count(m.cancelled)),
        ("errors", count(m.errors)),
        ("completed", count(m.completed.len() as u128)),
        ("error_rate_pm", count(error_rate_pm)),
    ])
}

/// Decisions with a chosen worker.
fn routed(decisions: &[&Decision]) -> u128 {
    decisions.iter().filter(|d| d.chosen.is_some()).count() as u128
}

/// `ttft_rank_gamma_pm`: Goodman and Kruskal's gamma between `predicted_milli` and TTFT
/// over every unordered pair of completed records, pairs tied in either not counted;
/// `None` when no pair counts.
fn ttft_rank_gamma_pm(completed: &[Completed]) -> Option<i128> {
    let mut concordant: i128 = 0;
    let mut discordant: i128 = 0;
    for i in 0..completed.len() {
        for j in i + 1..completed.len() {
            let (_, p_i, r_i) = completed[i];
            let (_, p_j, r_j) = completed[j];
            let (t_i, t_j) = (ttft_us(r_i), ttft_us(r_j));
            if p_i == p_j || t_i == t_j {
                continue;
            }
            if (p_i > p_j) == (t_i > t_j) {
                concordant += 1;
            } else {
                discordant += 1;
            }
        }
    }
    (concordant + discordant > 0)
        .then(|| (1000 * (concordant - discordant)).div_euclid(concordant + discordant))
}

/// The `prediction` member: the rank correlation and the fleet's µs per predicted token.
fn prediction<'a>(completed: &[Completed]) -> Json<'a> {
    let ttft_sum: u128 = completed.iter().map(|(_, _, r)| ttft_us(r)).sum();
    let predicted_sum: u128 = completed.iter().map(|(_, p, _)| *p).sum();
    Json::Object(vec![
        (
            "ttft_rank_gamma_pm",
            optional(ttft_rank_gamma_pm(completed)),
        ),
        (
            "us_per_predicted_token",
            optional(per_token(ttft_sum, predicted_sum)),
        ),
    ])
}

/// The `workers` member: one entry per worker with a completed record, in worker id
/// byte order, each with the floors of its means.
fn workers<'a>(completed: &[Completed<'a, '_>]) -> Json<'a> {
    let mut by_worker: BTreeMap<&'a str, Vec<(u128, &Record)>> = BTreeMap::new();
    for (worker, predicted, rec) in completed {
        by_worker.entry(worker).or_default().push((*predicted, rec));
    }
    let mut workers = Vec::new();
    for (worker, entries) in by_worker {
        let n = entries.len() as u128;
        let ttft_total: u128 = entries.iter().map(|(_, r)| ttft_us(r)).sum();
        let tpot_total: u128 = entries.iter().map(|(_, r)| tpot_us(r)).sum();
        let predicted_total: u128 = entries.iter().map(|(p, _)| *p).sum();
        workers.push(Json::Object(vec![
            ("worker", Json::Str(worker)),
            ("completed", number(n as i128)),
            ("ttft_mean_us", number((ttft_total / n) as i128)),
            ("tpot_mean_us", number((tpot_total / n) as i128)),
            (
                "predicted_mean_milli",
                number((predicted_total / n) as i128),
            ),
            (
                "us_per_predicted_token",
                optional(per_token(ttft_total, predicted_total)),
            ),
        ]));
    }
    Json::Array(workers)
}

/// `span_ns` (SPEC §14.2, §14.1.2): `max(end) − min(start)` over the matched records
/// (0 when negative or either is missing), or the `vllm-bench` duration when anything
/// matched.
fn span_ns(span: Span, m: &Matching) -> u128 {
    match span {
        Span::Records => match (m.min_start_ns, m.max_end_ns) {
            (Some(start), Some(end)) if end > start => u128::from(end - start),
            _ => 0,
        },
        Span::Duration(duration_ns) if m.matched > 0 => duration_ns,
        Span::Duration(_) => 0,
    }
}

/// The `goodput` member: `null` without objectives; else the good records (each
/// declared objective met, compared in microseconds), their share of the routed
/// decisions and their rate over the span.
fn goodput<'a>(m: &Matching, routed: u128, span: Span, slo: Option<Slo>) -> Json<'a> {
    let Some(slo) = slo else {
        return Json::Null;
    };
    let meets = |measured_us: u128, objective_us: Option<u64>| {
        objective_us.is_none_or(|objective_us| measured_us <= u128::from(objective_us))
    };
    let good = m
        .completed
        .iter()
        .filter(|(_, _, r)| meets(ttft_us(r), slo.ttft_us) && meets(tpot_us(r), slo.tpot_us))
        .count() as u128;
    let good_pm = (1000 * good).checked_div(routed).unwrap_or(0);
    let span_ns = span_ns(span, m);
    // The exact span, not the written (saturated) one (SPEC §14.5).
    let per_second = (good * 1_000_000_000_000).checked_div(span_ns).unwrap_or(0);
    Json::Object(vec![
        ("good", number(good as i128)),
        ("good_pm", number(good_pm as i128)),
        ("span_ns", number(span_ns as i128)),
        ("good_per_second_milli", number(per_second as i128)),
    ])
}

/// SPEC §14.2 over `decisions` and the record lines `entries` (in file order): the
/// first line of an id is its record, later ones only counted.
fn figures<'a>(
    run: &str,
    decisions: &[&'a Decision],
    entries: &[&Entry],
    span: Span,
    slo: Option<Slo>,
) -> Figures<'a> {
    let by_id = records_by_id(entries);
    let m = match_decisions(decisions, &by_id.records);
    Figures {
        matched: m.matched,
        rejected_served: m.rejected_served,
        counts: counts(decisions, &by_id, &m),
        prediction: prediction(&m.completed),
        goodput: goodput(&m, routed(decisions), span, slo),
        workers: workers(&m.completed),
        attribution: attribution::attribution(run, &m.completed_decisions),
        carries_figure: m.carries_figure,
    }
}

// ---------------------------------------------------------------------------------------
// The entry points
// ---------------------------------------------------------------------------------------

/// What `kvroute join` is given (SPEC §14.1).
#[derive(Debug, Clone, Copy)]
pub struct JoinInputs<'a> {
    pub receipt: &'a [u8],
    pub completions: &'a [u8],
    /// "aiperf", "dynamo" or "vllm-bench"; None: detect (§14.1.4). Any other name is
    /// bad usage, which the command line refuses before reading anything: a panic here.
    pub format: Option<&'a str>,
    pub run: &'a str,
    /// `--slo`'s objectives in microseconds ([`parse_slo`]); `None` without it.
    pub slo: Option<Slo>,
    pub id_key: Option<&'a [u8]>,
    /// `--trace`'s bytes, for cohorts (§14.2.1).
    pub trace: Option<&'a [u8]>,
}

/// SPEC §14 for AIPerf records without a trace: the canonical bytes of the
/// kvroute-join/2 document (no trailing newline), or the errors.
pub fn join(
    receipt: &[u8],
    completions: &[u8],
    run: &str,
    slo: Option<Slo>,
    id_key: Option<&[u8]>,
) -> Result<Vec<u8>, JoinFailure> {
    join_inputs(&JoinInputs {
        receipt,
        completions,
        format: Some("aiperf"),
        run,
        slo,
        id_key,
        trace: None,
    })
}

/// The completions as read, before any id is keyed.
enum Completions {
    /// `aiperf` or `dynamo`: each record line's (line number, id, record).
    Lines(Vec<Line>),
    /// `vllm-bench`: the duration and the entries, in index order.
    Bench(vllm::Bench),
}

/// The layout: named, or told from the first line that is not blank (§14.1.4), the
/// only error reported when it cannot be told; a first line that is not JSON text is
/// reported as the line error it is, not as one that cannot tell.
fn layout(inputs: &JoinInputs) -> Result<detect::Layout, JoinFailure> {
    match inputs.format {
        Some(name) => Ok(detect::Layout::named(name)
            .unwrap_or_else(|| panic!("no completions format {name:?} (bad usage)"))),
        None => match detect::detect(inputs.completions) {
            Ok(Some(layout)) => Ok(layout),
            Ok(None) => Err(JoinFailure::NoRecords),
            Err(detect::Undetected::CannotTell(line)) => Err(JoinFailure::Undetectable(line)),
            Err(detect::Undetected::NotJsonText(line, reason)) => {
                Err(JoinFailure::Lines(vec![(line, reason)]))
            }
        },
    }
}

/// §14.5 errors 1 and 2: the completions in `layout`, every line (or the whole
/// document) checked, then at least one record.
fn read_completions(bytes: &[u8], layout: detect::Layout) -> Result<Completions, JoinFailure> {
    let completions = match layout {
        detect::Layout::Aiperf => {
            Completions::Lines(completion_records(bytes, record).map_err(JoinFailure::Lines)?)
        }
        detect::Layout::Dynamo => Completions::Lines(
            completion_records(bytes, dynamo::record).map_err(JoinFailure::Lines)?,
        ),
        detect::Layout::VllmBench => {
            Completions::Bench(vllm::read(bytes).map_err(JoinFailure::Document)?)
        }
    };
    let empty = match &completions {
        Completions::Lines(lines) => lines.is_empty(),
        Completions::Bench(bench) => bench.entries.is_empty(),
    };
    if empty {
        return Err(JoinFailure::NoRecords);
    }
    Ok(completions)
}

/// What the join reads of the receipt: its `receipt_digest`, its `trace_digest` (when
/// a string) and the decisions of the run.
struct RunRead {
    receipt_digest: String,
    trace_digest: Option<String>,
    decisions: Vec<Decision>,
}

/// §14.5 errors 3 and 4: the receipt, and the run `--run` names.
fn read_run(receipt: &[u8], run: &str) -> Result<RunRead, JoinFailure> {
    let text = receipt_text(receipt).ok_or(JoinFailure::NotAReceipt)?;
    let (receipt_digest, trace_digest, all_runs) = runs(&text).ok_or(JoinFailure::NotAReceipt)?;
    let Some((_, decision_nodes)) = all_runs.iter().find(|(policy, _)| policy == run) else {
        return Err(JoinFailure::NoSuchRun(
            all_runs.iter().map(|(policy, _)| policy.clone()).collect(),
        ));
    };
    let mut decisions = Vec::new();
    for node in decision_nodes {
        decisions.push(decision(node).ok_or(JoinFailure::NotAReceipt)?);
    }
    Ok(RunRead {
        receipt_digest,
        trace_digest,
        decisions,
    })
}

/// The record lines as the join compares them, how the span is found, and the first
/// completion id (for §14.5 error 7; `None` for `vllm-bench`, whose entries take their
/// decisions' ids). Ids are keyed under `--id-key`.
fn comparable_entries(
    completions: Completions,
    id_key: Option<&[u8]>,
    decisions: &[Decision],
) -> (Vec<Entry>, Span, Option<String>) {
    match completions {
        Completions::Lines(lines) => {
            let entries: Vec<Entry> = lines
                .into_iter()
                .map(|(_, id, record)| Entry {
                    id: Some(match id_key {
                        Some(key) => keyed::keyed_id(key, &id),
                        None => id,
                    }),
                    record,
                })
                .collect();
            let first = entries[0].id.clone();
            (entries, Span::Records, first)
        }
        Completions::Bench(bench) => {
            let entries: Vec<Entry> = bench
                .entries
                .into_iter()
                .enumerate()
                .map(|(i, record)| Entry {
                    id: decisions.get(i).map(|d| d.request.clone()),
                    record,
                })
                .collect();
            (entries, Span::Duration(bench.duration_ns), None)
        }
    }
}

/// §14.3's `cohorts`: per cohort, in triple order, §14.2's figures over its decisions
/// and the lines of their ids.
fn cohort_documents<'a>(
    run: &str,
    with_attribution: bool,
    groups: &'a BTreeMap<cohorts::Triple, Vec<&'a Decision>>,
    entries: &[Entry],
    span: Span,
    slo: Option<Slo>,
) -> Json<'a> {
    let mut listed = Vec::new();
    for ((tenant, model, adapter), members_of) in groups {
        let ids: BTreeSet<&str> = members_of.iter().map(|d| d.request.as_str()).collect();
        let own: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.id.as_deref().is_some_and(|id| ids.contains(id)))
            .collect();
        let f = figures(run, members_of, &own, span, slo);
        let mut members = vec![
            ("tenant", Json::Str(tenant)),
            ("model", Json::Str(model)),
            ("adapter", Json::Str(adapter)),
            ("counts", f.counts),
            ("prediction", f.prediction),
            ("goodput", f.goodput),
            ("workers", f.workers),
        ];
        if with_attribution {
            members.push(("attribution", f.attribution));
        }
        listed.push(Json::Object(members));
    }
    Json::Array(listed)
}

/// SPEC §14: the canonical bytes of the kvroute-join/2 document (no trailing newline),
/// or the first error of §14.5 that applies.
pub fn join_inputs(inputs: &JoinInputs) -> Result<Vec<u8>, JoinFailure> {
    let layout = layout(inputs)?;
    let completions = read_completions(inputs.completions, layout)?;
    let run = read_run(inputs.receipt, inputs.run)?;
    let decisions = run.decisions;

    // 5, 6: the trace, its digest, and each decision's cohort.
    let cohort_of: Option<Vec<cohorts::Triple>> = match inputs.trace {
        None => None,
        Some(trace) => {
            let receipt_trace_digest = run.trace_digest.ok_or(JoinFailure::NotAReceipt)?;
            Some(cohorts::triples(
                trace,
                &receipt_trace_digest,
                inputs.id_key,
                &decisions,
            )?)
        }
    };

    let (entries, span, first_completion_id) =
        comparable_entries(completions, inputs.id_key, &decisions);
    let all: Vec<&Decision> = decisions.iter().collect();
    let every_entry: Vec<&Entry> = entries.iter().collect();
    let whole = figures(inputs.run, &all, &every_entry, span, inputs.slo);

    // 7: "a join that matches nothing (`matched` and `rejected_served` both 0) while
    // both sides have ids" (§14.5): the completions have a record (always, by now), so
    // the error needs a run with at least one decision, and a layout with ids (a
    // `vllm-bench` entry takes its decision's id, so it always matches when there is
    // one). The completion id is the first record's in file order, keyed when a key is
    // given; the request id the run's first decision's.
    if let Some(completion_id) = first_completion_id {
        if !decisions.is_empty() && whole.matched == 0 && whole.rejected_served == 0 {
            return Err(JoinFailure::NothingMatched {
                completion_id,
                request_id: decisions[0].request.clone(),
            });
        }
    }

    let declared = inputs.slo.unwrap_or_default();
    let mut members = vec![
        ("format", Json::Str("kvroute-join/2")),
        ("receipt_digest", Json::Str(&run.receipt_digest)),
        ("run", Json::Str(inputs.run)),
        (
            "slo",
            Json::Object(vec![
                ("ttft_us", optional(declared.ttft_us.map(i128::from))),
                ("tpot_us", optional(declared.tpot_us.map(i128::from))),
            ]),
        ),
        ("counts", whole.counts),
        ("prediction", whole.prediction),
        ("goodput", whole.goodput),
        ("workers", whole.workers),
    ];
    // §14.3: `attribution` only when a matched record of the run carries a figure of
    // §14.7, then in the run and in every cohort alike.
    let with_attribution = whole.carries_figure;
    if with_attribution {
        members.push(("attribution", whole.attribution));
    }
    // §14.3: `cohorts` only with `--trace`.
    let groups = cohort_of.map(|triples| cohorts::group(&decisions, &triples));
    if let Some(groups) = &groups {
        members.push((
            "cohorts",
            cohort_documents(
                inputs.run,
                with_attribution,
                groups,
                &entries,
                span,
                inputs.slo,
            ),
        ));
    }
    Ok(jcs::to_bytes(&Json::Object(members)))
}
