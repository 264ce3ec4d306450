//! Dynamo's per-request trace records (SPEC.md §14.1.1): one JSON Lines line, either
//! the file sink's `{"timestamp", "event"}` wrapper or the bare record the stderr sink
//! writes. Only `request_end` lines hold a record; tool and payload lines are skipped.
//! Dynamo writes no status, so a record is never cancelled or in error. A record's
//! `cached_tokens` and prefill worker go to attribution (§14.7) as they are.

use crate::input::json::{Node, Number};
use crate::input::json_lines::line_json;
use crate::join::aiperf::{microseconds, token_count, Completion, Fields};

/// `Some(None)` for `null`, `Some(Some(v))` for an integer from 0 to `max` written in
/// plain digits (2^64 − 1 has twenty, which the JSON reader keeps as a literal), else
/// `None`.
fn nullable_integer(node: &Node, max: u64) -> Option<Option<u64>> {
    let value = match node {
        Node::Null => return Some(None),
        Node::Number(Number::Integer(v)) => *v,
        Node::Number(Number::Literal(text))
            if text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0') =>
        {
            text.parse::<u64>().ok()?
        }
        _ => return None,
    };
    (value <= max).then_some(Some(value))
}

/// The largest `request_received_ms` read: its nanoseconds stay within 64 bits.
const RECEIVED_MS_MAX: u64 = 9_999_999_999_999;

/// Reads one non-blank line: `Ok(None)` for a line that holds no record (another
/// `event_type`), else the record or every reason found, each `PATH: reason`.
pub fn parse_line(line_bytes: &[u8]) -> Result<Option<Completion>, Vec<String>> {
    let node = line_json(line_bytes).map_err(|reason| vec![reason])?;
    let mut reasons = Vec::new();
    let record = read_line(&node, &mut reasons);
    if reasons.is_empty() {
        Ok(record.flatten())
    } else {
        Err(reasons)
    }
}

/// `Some(None)`: a line that holds no record; `None`: an error was recorded.
fn read_line(node: &Node, reasons: &mut Vec<String>) -> Option<Option<Completion>> {
    let mut line = Fields {
        node,
        path: String::new(),
        reasons,
    };
    if !matches!(node, Node::Object(_)) {
        line.fail(
            "$".to_owned(),
            format!("expected an object, found {}", node.quoted()),
        );
        return None;
    }
    let wrapped = line.object("event", false, false)?;
    let mut record = match wrapped {
        Some(event) => line.child("event", event),
        None => Fields {
            node,
            path: String::new(),
            reasons: &mut *line.reasons,
        },
    };
    let event_type = record.scalar("event_type", true, |fields, value| match value {
        Node::String(text) => Some(text.to_string()),
        other => {
            fields.wrong("event_type", "expected a string", other);
            None
        }
    })??;
    if event_type != "request_end" {
        return Some(None);
    }
    let request = record.object("request", true, false)??;
    let mut request = record.child("request", request);
    request.request().map(Some)
}

impl Fields<'_, '_> {
    /// The members of `request` (SPEC.md §14.1.1), each checked whatever the others gave.
    fn request(&mut self) -> Option<Completion> {
        let request_id = self.scalar("request_id", true, |fields, node| match node {
            Node::String(id) if !id.is_empty() => Some(id.to_string()),
            other => {
                fields.wrong("request_id", "expected a non-empty string", other);
                None
            }
        });
        let x_request_id = self.scalar("x_request_id", false, |fields, node| match node {
            Node::Null => Some(None),
            Node::String(id) if !id.is_empty() => Some(Some(id.to_string())),
            other => {
                fields.wrong("x_request_id", "expected a non-empty string or null", other);
                None
            }
        });
        let received_ms = self.scalar("request_received_ms", false, |fields, node| match node {
            Node::Null => Some(None),
            Node::Number(Number::Integer(v)) if *v <= RECEIVED_MS_MAX => Some(Some(*v)),
            other => {
                let expected = "expected a non-negative integer below 10000000000000 or null";
                fields.wrong("request_received_ms", expected, other);
                None
            }
        });
        let ttft_us = self.optional_milliseconds("ttft_ms");
        let tpot_us = self.optional_milliseconds("avg_itl_ms");
        let total_us = self.optional_milliseconds("total_time_ms");
        let cached_tokens = self.scalar("cached_tokens", false, |fields, node| match node {
            Node::Null => Some(None),
            value => match token_count(value) {
                Some(count) => Some(Some(count)),
                None => {
                    let expected = "expected a non-negative integer or null";
                    fields.wrong("cached_tokens", expected, value);
                    None
                }
            },
        });
        let serving_worker = match self.object("worker", false, true) {
            Some(Some(node)) => self.child("worker", node).prefill_worker(),
            Some(None) => Some(None),
            None => None,
        };
        let request_id = request_id??;
        let start_ns = received_ms?.flatten().map(|ms| ms * 1_000_000);
        let end_ns = match (start_ns, total_us?) {
            (Some(start), Some(total)) => Some(
                (u128::from(start) + 1000 * u128::from(total)).min(u128::from(u64::MAX)) as u64,
            ),
            _ => None,
        };
        Some(Completion {
            request_id: x_request_id?.flatten().unwrap_or(request_id),
            start_ns,
            end_ns,
            cancelled: false,
            failed: false,
            ttft_us: ttft_us?,
            tpot_us: tpot_us?,
            cached_tokens: cached_tokens?.flatten(),
            serving_worker: serving_worker?,
        })
    }

    /// The kvroute name of the worker that ran the prefill, `dynamo|<id>|dp<rank>` as
    /// SPEC.md §13.7 names Dynamo's workers (rank 0 when absent): a prefix cache saves
    /// prefill, so that worker's cache is the one the record's cached tokens are from.
    /// `Some(None)` when the record names no prefill worker, `None` after an error.
    fn prefill_worker(&mut self) -> Option<Option<String>> {
        let id = self.scalar("prefill_worker_id", false, |fields, node| {
            nullable_integer(node, u64::MAX).or_else(|| {
                let expected = "expected an integer from 0 to 18446744073709551615 or null";
                fields.wrong("prefill_worker_id", expected, node);
                None
            })
        });
        let rank = self.scalar("prefill_dp_rank", false, |fields, node| {
            nullable_integer(node, u64::from(u32::MAX)).or_else(|| {
                let expected = "expected an integer from 0 to 4294967295 or null";
                fields.wrong("prefill_dp_rank", expected, node);
                None
            })
        });
        let (id, rank) = (id?.flatten(), rank?.flatten());
        Some(id.map(|id| format!("dynamo|{id}|dp{}", rank.unwrap_or(0))))
    }

    /// A number of milliseconds or `null`, as whole microseconds; `Some(None)` when
    /// absent or `null`, `None` after an error.
    fn optional_milliseconds(&mut self, name: &str) -> Option<Option<u64>> {
        self.scalar(name, false, |fields, node| match node {
            Node::Null => Some(None),
            value => match microseconds(value) {
                Ok(us) => Some(Some(us)),
                Err(expected) => {
                    let expected = if expected.ends_with("non-negative number") {
                        "expected a non-negative number or null"
                    } else {
                        expected
                    };
                    fields.wrong(name, expected, value);
                    None
                }
            },
        })
        .map(Option::flatten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_request_end_reads_its_key_times_and_span() {
        let line = br#"{"timestamp":5,"event":{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":2,"request":{"request_id":"cmpl-1","x_request_id":"acme-01","request_received_ms":1000,"ttft_ms":82.4,"avg_itl_ms":1.8,"total_time_ms":1000.1,"kv_hit_rate":0.875}}}"#;
        let record = parse_line(line).unwrap().unwrap();
        assert_eq!(record.request_id, "acme-01");
        assert_eq!(record.start_ns, Some(1_000_000_000));
        assert_eq!(record.end_ns, Some(1_000_000_000 + 1_000_100_000));
        assert_eq!(
            (record.ttft_us, record.tpot_us),
            (Some(82_400), Some(1_800))
        );
        assert!(!record.cancelled && !record.failed);
    }

    #[test]
    fn a_bare_record_without_header_is_keyed_by_dynamos_id() {
        let line = br#"{"event_type":"request_end","request":{"request_id":"cmpl-2"}}"#;
        let record = parse_line(line).unwrap().unwrap();
        assert_eq!(record.request_id, "cmpl-2");
        assert_eq!(
            (record.start_ns, record.end_ns, record.ttft_us),
            (None, None, None)
        );
    }

    #[test]
    fn tool_lines_hold_no_record_and_bad_members_are_all_named() {
        assert_eq!(
            parse_line(br#"{"event_type":"tool_start","request":7}"#),
            Ok(None)
        );
        let line = br#"{"event":{"event_type":"request_end","request":{"request_id":"","ttft_ms":-1,"request_received_ms":10000000000000}}}"#;
        assert_eq!(
            parse_line(line),
            Err(vec![
                "event.request.request_id: expected a non-empty string, found \"\"".to_owned(),
                "event.request.request_received_ms: expected a non-negative integer below \
                 10000000000000 or null, found 10000000000000"
                    .to_owned(),
                "event.request.ttft_ms: expected a non-negative number or null, found -1"
                    .to_owned(),
            ])
        );
        assert_eq!(
            parse_line(br#"{"event":3}"#),
            Err(vec!["event: expected an object, found 3".to_owned()])
        );
        assert_eq!(
            parse_line(br#"{"event_type":1}"#),
            Err(vec!["event_type: expected a string, found 1".to_owned()])
        );
    }
}
