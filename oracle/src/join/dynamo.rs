//! SPEC §14.1.1: one line of Dynamo's request trace (`--completions-format dynamo`).
//! The record object `R` is the line's `event` when it has one (the file sink's
//! wrapper; paths then start with `event.`), else the line itself. Only `request_end`
//! lines hold a record; a line with any other `event_type` string is skipped, unchecked.
//! Problems follow §14.5's Dynamo table, members in the order of §14.1.1's table
//! (§14.1.3), each member's own problem, then its repeats, then what is inside it:
//! `event` (when present) and `event_type` first; when `event` is not an object, or
//! `event_type` is missing or not a string, nothing else of the line is checked; a line
//! whose `event_type` is another string is checked no further and skipped unless a
//! repeat of `event` or `event_type` was reported.
//!
//! Readings (guesses where §14 leaves a choice): `request_received_ms` is an integer as
//! §1.1 writes one (plain digits, so `1e3` and `-0` are errors); `-0` as a millisecond
//! figure is 0, as for AIPerf. `cached_tokens`, `worker.prefill_worker_id` and
//! `worker.prefill_dp_rank` are integers in that same plain form (`7.0`, `7e0` and `-0`
//! are errors). A `worker` without `prefill_worker_id` gives no serving worker, whatever
//! its `prefill_dp_rank`.

use super::{child, microseconds, receipt_integer, repeats, MsProblem, Parsed, Record};
use crate::json::{self, Member, Node};

/// The largest `request_received_ms` (SPEC §14.1.1).
const RECEIVED_MS_MAX: u64 = 9_999_999_999_999;

/// An integer as SPEC §1.1 writes one, of at most 9,999,999,999,999.
fn received_ms(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes == b"0" || bytes[0] != b'0');
    if !plain || bytes.len() > 13 {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v <= RECEIVED_MS_MAX)
}

/// One of `ttft_ms`, `avg_itl_ms`, `total_time_ms`: a non-negative number or null,
/// turned into whole microseconds; then its repeats.
fn milliseconds(
    request: &[Member],
    name: &str,
    path: &str,
    problems: &mut Vec<String>,
) -> Option<u64> {
    let at = child(path, name);
    let mut micros = None;
    match json::member(request, name) {
        None | Some(Node::Null) => {}
        Some(node @ Node::Number(text)) => match microseconds(text) {
            Ok(us) => micros = Some(us),
            Err(MsProblem::Negative) => problems.push(format!(
                "{at}: expected a non-negative number or null, found {}",
                json::quote(node)
            )),
            Err(MsProblem::TooLarge) => problems.push(format!(
                "{at}: expected a number of milliseconds below 9007199254740.992, found {}",
                json::quote(node)
            )),
        },
        Some(other) => problems.push(format!(
            "{at}: expected a non-negative number or null, found {}",
            json::quote(other)
        )),
    }
    repeats(request, name, path, problems);
    micros
}

/// The record object `R` and its path: the line's `event` when it has one (its own
/// problem, then its repeats), else the line. `None`: a bad `event` ends the line's
/// checks (SPEC §14.5).
fn record_object<'m, 'd>(
    line: &'m [Member<'d>],
    problems: &mut Vec<String>,
) -> Option<(&'static str, &'m [Member<'d>])> {
    match json::member(line, "event") {
        None => Some(("$", line)),
        Some(Node::Object(inner)) => {
            repeats(line, "event", "$", problems);
            Some(("event", inner.as_slice()))
        }
        Some(other) => {
            problems.push(format!(
                "event: expected an object, found {}",
                json::quote(other)
            ));
            repeats(line, "event", "$", problems);
            None
        }
    }
}

/// `R.event_type`, then its repeats. `None`: missing or not a string, which ends the
/// line's checks (SPEC §14.5).
fn event_type<'m>(r: &'m [Member], at: &str, problems: &mut Vec<String>) -> Option<&'m str> {
    match json::member(r, "event_type") {
        None => {
            problems.push(format!("{at}: missing required member \"event_type\""));
            None
        }
        Some(Node::String(text)) => {
            repeats(r, "event_type", at, problems);
            Some(text)
        }
        Some(other) => {
            problems.push(format!(
                "{}: expected a string, found {}",
                child(at, "event_type"),
                json::quote(other)
            ));
            repeats(r, "event_type", at, problems);
            None
        }
    }
}

/// `R.request`, then its repeats; `None` when it is missing or not an object.
fn request_object<'m, 'd>(
    r: &'m [Member<'d>],
    at: &str,
    request_path: &str,
    problems: &mut Vec<String>,
) -> Option<&'m [Member<'d>]> {
    let request = match json::member(r, "request") {
        None => {
            problems.push(format!("{at}: missing required member \"request\""));
            None
        }
        Some(Node::Object(request)) => Some(request.as_slice()),
        Some(other) => {
            problems.push(format!(
                "{request_path}: expected an object, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(r, "request", at, problems);
    request
}

/// The ids of `R.request` at path `p`: `request_id`, then `x_request_id`, each with its
/// repeats.
fn request_ids(
    request: &[Member],
    p: &str,
    problems: &mut Vec<String>,
) -> (Option<String>, Option<String>) {
    let mut request_id = None;
    match json::member(request, "request_id") {
        None => problems.push(format!("{p}: missing required member \"request_id\"")),
        Some(Node::String(text)) if !text.is_empty() => request_id = Some(text.to_string()),
        Some(other) => problems.push(format!(
            "{}: expected a non-empty string, found {}",
            child(p, "request_id"),
            json::quote(other)
        )),
    }
    repeats(request, "request_id", p, problems);

    let mut x_request_id = None;
    match json::member(request, "x_request_id") {
        None | Some(Node::Null) => {}
        Some(Node::String(text)) if !text.is_empty() => x_request_id = Some(text.to_string()),
        Some(other) => problems.push(format!(
            "{}: expected a non-empty string or null, found {}",
            child(p, "x_request_id"),
            json::quote(other)
        )),
    }
    repeats(request, "x_request_id", p, problems);
    (request_id, x_request_id)
}

/// `R.request.request_received_ms` at path `p`, then its repeats.
fn request_received_ms(request: &[Member], p: &str, problems: &mut Vec<String>) -> Option<u64> {
    let mut received = None;
    match json::member(request, "request_received_ms") {
        None | Some(Node::Null) => {}
        Some(Node::Number(text)) if received_ms(text).is_some() => received = received_ms(text),
        Some(other) => problems.push(format!(
            "{}: expected a non-negative integer below 10000000000000 or null, found {}",
            child(p, "request_received_ms"),
            json::quote(other)
        )),
    }
    repeats(request, "request_received_ms", p, problems);
    received
}

/// An integer as SPEC §1.1 writes one (plain digits, no leading zero), from 0 to `max`.
fn plain_integer(node: &Node, max: u64) -> Option<u64> {
    let Node::Number(text) = node else {
        return None;
    };
    let bytes = text.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes == b"0" || bytes[0] != b'0')
        && bytes.len() <= 20;
    if !plain {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v <= max)
}

/// `R.request.cached_tokens` at path `p` (an integer from 0 to `B`, or null), then its
/// repeats (SPEC §14.1.1).
fn cached_tokens(request: &[Member], p: &str, problems: &mut Vec<String>) -> Option<u64> {
    let mut cached = None;
    match json::member(request, "cached_tokens") {
        None | Some(Node::Null) => {}
        Some(node) => match receipt_integer(node) {
            Some(value) => cached = Some(value),
            None => problems.push(format!(
                "{}: expected a non-negative integer or null, found {}",
                child(p, "cached_tokens"),
                json::quote(node)
            )),
        },
    }
    repeats(request, "cached_tokens", p, problems);
    cached
}

/// One integer member of `worker` (null or absent: none), then its repeats.
fn worker_integer(
    worker: &[Member],
    name: &str,
    at: &str,
    max: u64,
    problems: &mut Vec<String>,
) -> Option<u64> {
    let mut read = None;
    match json::member(worker, name) {
        None | Some(Node::Null) => {}
        Some(node) => match plain_integer(node, max) {
            Some(value) => read = Some(value),
            None => problems.push(format!(
                "{}: expected an integer from 0 to {max} or null, found {}",
                child(at, name),
                json::quote(node)
            )),
        },
    }
    repeats(worker, name, at, problems);
    read
}

/// `R.request.worker` at path `p` (an object or null), its repeats, then
/// `prefill_worker_id` and `prefill_dp_rank`: the serving worker
/// `dynamo|<prefill_worker_id>|dp<prefill_dp_rank>` (rank 0 when absent), none without
/// `prefill_worker_id` (SPEC §14.1.1).
fn serving_worker(request: &[Member], p: &str, problems: &mut Vec<String>) -> Option<String> {
    let at = child(p, "worker");
    let worker = match json::member(request, "worker") {
        None | Some(Node::Null) => None,
        Some(Node::Object(worker)) => Some(worker),
        Some(other) => {
            problems.push(format!(
                "{at}: expected an object or null, found {}",
                json::quote(other)
            ));
            None
        }
    };
    repeats(request, "worker", p, problems);
    let worker = worker?;
    let id = worker_integer(worker, "prefill_worker_id", &at, u64::MAX, problems);
    let rank = worker_integer(
        worker,
        "prefill_dp_rank",
        &at,
        u64::from(u32::MAX),
        problems,
    );
    id.map(|id| format!("dynamo|{id}|dp{}", rank.unwrap_or(0)))
}

/// The end in ns: `min(start + 1000 × total_us, 2^64 − 1)` when both are present (SPEC
/// §14.1.1).
fn end_ns(start_ns: Option<u64>, total_us: Option<u64>) -> Option<u64> {
    match (start_ns, total_us) {
        (Some(start), Some(total)) => {
            let end = u128::from(start) + 1000 * u128::from(total);
            Some(u64::try_from(end).unwrap_or(u64::MAX))
        }
        _ => None,
    }
}

/// One non-blank line: its join key and record, `None` for a line that is not
/// `request_end`, or its reasons (each `"<path>: <reason>"`).
pub(super) fn record(root: &Node) -> Parsed {
    let Node::Object(line) = root else {
        return Err(vec![format!(
            "$: expected an object, found {}",
            json::quote(root)
        )]);
    };
    let mut problems = Vec::new();
    let Some((at, r)) = record_object(line, &mut problems) else {
        return Err(problems);
    };
    let Some(event_type) = event_type(r, at, &mut problems) else {
        return Err(problems);
    };
    if event_type != "request_end" {
        // Skipped, unless a repeat was reported.
        return if problems.is_empty() {
            Ok(None)
        } else {
            Err(problems)
        };
    }

    let request_path = child(at, "request");
    let Some(request) = request_object(r, at, &request_path, &mut problems) else {
        return Err(problems);
    };
    let p = request_path.as_str();
    let (request_id, x_request_id) = request_ids(request, p, &mut problems);
    let received = request_received_ms(request, p, &mut problems);
    let ttft_us = milliseconds(request, "ttft_ms", p, &mut problems);
    let tpot_us = milliseconds(request, "avg_itl_ms", p, &mut problems);
    let total_us = milliseconds(request, "total_time_ms", p, &mut problems);
    let cached = cached_tokens(request, p, &mut problems);
    let serving = serving_worker(request, p, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    let Some(request_id) = request_id else {
        return Err(vec!["$: internal error: a record without its id".to_owned()]);
    };
    let start_ns = received.map(|ms| ms * 1_000_000);
    Ok(Some((
        x_request_id.unwrap_or(request_id),
        Record {
            start_ns,
            end_ns: end_ns(start_ns, total_us),
            cancelled: false,
            error: false,
            ttft_us: ttft_us.map(u128::from),
            tpot_us: tpot_us.map(u128::from),
            cached_tokens: cached,
            serving_worker: serving,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::record;
    use crate::json;

    /// `(start_ns, end_ns)` of one `request_end` line with the given `request` members.
    fn span(members: &str) -> (Option<u64>, Option<u64>) {
        let line =
            format!(r#"{{"event_type":"request_end","request":{{"request_id":"q"{members}}}}}"#);
        let root = json::parse(line.as_bytes()).unwrap();
        let (_, rec) = record(&root).unwrap().unwrap();
        (rec.start_ns, rec.end_ns)
    }

    /// SPEC §14.1.1: start `request_received_ms × 10^6`; end `min(start + 1000 ×
    /// floor(total_time_ms × 1000), 2^64 − 1)` when both are present, else none.
    #[test]
    fn start_and_end_in_nanoseconds() {
        assert_eq!(
            span(r#","request_received_ms":1,"total_time_ms":0.0015"#),
            (Some(1_000_000), Some(1_001_000))
        );
        assert_eq!(
            span(r#","request_received_ms":0,"total_time_ms":null"#),
            (Some(0), None)
        );
        assert_eq!(span(r#","total_time_ms":5"#), (None, None));
        assert_eq!(span(""), (None, None));
        // 9,999,999,999,999 ms + 9,007,199,254,740.991 ms passes 2^64 − 1 ns.
        assert_eq!(
            span(r#","request_received_ms":9999999999999,"total_time_ms":9007199254740.991"#),
            (Some(9_999_999_999_999_000_000), Some(u64::MAX))
        );
        assert_eq!(
            span(r#","request_received_ms":9999999999999,"total_time_ms":8446744073710.551"#),
            (
                Some(9_999_999_999_999_000_000),
                Some(18_446_744_073_709_551_000)
            )
        );
        assert_eq!(
            span(r#","request_received_ms":9999999999999,"total_time_ms":8446744073710.552"#),
            (Some(9_999_999_999_999_000_000), Some(u64::MAX))
        );
    }

    /// The join key: `x_request_id` when present, else `request_id`.
    #[test]
    fn the_join_key() {
        for (members, key) in [
            (r#","x_request_id":"x""#, "x"),
            (r#","x_request_id":null"#, "q"),
            ("", "q"),
        ] {
            let line = format!(
                r#"{{"event_type":"request_end","request":{{"request_id":"q"{members}}}}}"#
            );
            let root = json::parse(line.as_bytes()).unwrap();
            assert_eq!(record(&root).unwrap().unwrap().0, key);
        }
    }
}
