//! AIPerf's per-request records (`profile_export.jsonl`, SPEC.md §14.1): one line, one
//! [`Completion`], or the reasons it is none, each with its path. Only the members the
//! join reads are looked at; AIPerf adds others from one version to the next.

use crate::input::json::{Node, Number};
use crate::input::json_lines::line_json;

/// What the join reads of one completion record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub request_id: String,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub cancelled: bool,
    pub failed: bool,
    /// Time to first token and time per output token, in whole microseconds.
    pub ttft_us: Option<u64>,
    pub tpot_us: Option<u64>,
}

/// Reads one non-blank line; on failure, every reason found, each `PATH: reason`.
pub fn parse_completion(line_bytes: &[u8]) -> Result<Completion, Vec<String>> {
    let node = line_json(line_bytes).map_err(|reason| vec![reason])?;
    let mut reasons = Vec::new();
    let record = Fields {
        node: &node,
        path: String::new(),
        reasons: &mut reasons,
    }
    .record();
    match record {
        Some(record) if reasons.is_empty() => Ok(record),
        _ => Err(reasons),
    }
}

/// An object being read, at `path`, collecting reasons.
struct Fields<'n, 'r> {
    node: &'n Node,
    path: String,
    reasons: &'r mut Vec<String>,
}

impl<'n> Fields<'n, '_> {
    fn at(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    fn fail(&mut self, path: String, reason: String) {
        self.reasons.push(format!("{path}: {reason}"));
    }

    /// The member `name`, once; a repeated one is an error (it would mean two things).
    fn member(&mut self, name: &str) -> Option<&'n Node> {
        let Node::Object(members) = self.node else {
            return None;
        };
        let mut found = members.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        let first = found.next();
        if found.next().is_some() {
            let path = self.at(name);
            self.fail(
                path,
                format!("repeated member {}", crate::input::json::quote_str(name)),
            );
        }
        first
    }

    /// The member `name`; a missing one is reported at this object (SPEC.md §14.5).
    fn required(&mut self, name: &str) -> Option<&'n Node> {
        let value = self.member(name);
        if value.is_none() {
            let quoted = crate::input::json::quote_str(name);
            self.fail(self.own_path(), format!("missing required member {quoted}"));
        }
        value
    }

    /// This object's path, `$` for the line itself.
    fn own_path(&self) -> String {
        if self.path.is_empty() {
            "$".to_owned()
        } else {
            self.path.clone()
        }
    }

    fn child(&mut self, name: &str, node: &'n Node) -> Fields<'n, '_> {
        Fields {
            node,
            path: self.at(name),
            reasons: self.reasons,
        }
    }

    fn expect_object(&mut self) -> bool {
        if matches!(self.node, Node::Object(_)) {
            return true;
        }
        let found = self.node.quoted();
        self.fail(
            self.own_path(),
            format!("expected an object, found {found}"),
        );
        false
    }

    fn record(&mut self) -> Option<Completion> {
        if !self.expect_object() {
            return None;
        }
        let metadata = self.required("metadata")?;
        let mut metadata = self.child("metadata", metadata);
        if !metadata.expect_object() {
            return None;
        }
        let request_id = metadata.request_id();
        let start_ns = metadata
            .required("request_start_ns")
            .and_then(|n| metadata.nanos("request_start_ns", n));
        let end_ns = match metadata.member("request_end_ns") {
            None | Some(Node::Null) => Some(None),
            Some(Node::Number(Number::Integer(v))) => Some(Some(*v)),
            Some(other) => {
                let (path, found) = (metadata.at("request_end_ns"), other.quoted());
                let reason = format!("expected a non-negative integer or null, found {found}");
                metadata.fail(path, reason);
                None
            }
        };
        let cancelled = metadata.flag("was_cancelled");
        // Metrics before the error, in the order SPEC.md §14.1 lists the members.
        let metrics = self.metrics();
        let failed = match self.member("error") {
            None | Some(Node::Null) => Some(false),
            Some(Node::Object(_)) => Some(true),
            Some(other) => {
                let found = other.quoted();
                self.fail(
                    "error".to_owned(),
                    format!("expected an object or null, found {found}"),
                );
                None
            }
        };
        let (ttft_us, tpot_us) = metrics?;
        Some(Completion {
            request_id: request_id?,
            start_ns: start_ns?,
            end_ns: end_ns?,
            cancelled: cancelled?,
            failed: failed?,
            ttft_us,
            tpot_us,
        })
    }

    fn request_id(&mut self) -> Option<String> {
        match self.required("x_request_id")? {
            Node::String(id) if !id.is_empty() => Some(id.to_string()),
            other => {
                let (path, found) = (self.at("x_request_id"), other.quoted());
                self.fail(path, format!("expected a non-empty string, found {found}"));
                None
            }
        }
    }

    /// An integer below 10^19: epoch nanoseconds, which pass 2^53.
    fn nanos(&mut self, name: &str, node: &Node) -> Option<u64> {
        match node {
            Node::Number(Number::Integer(v)) => Some(*v),
            other => {
                let (path, found) = (self.at(name), other.quoted());
                self.fail(
                    path,
                    format!("expected a non-negative integer, found {found}"),
                );
                None
            }
        }
    }

    fn flag(&mut self, name: &str) -> Option<bool> {
        match self.member(name) {
            None => Some(false),
            Some(Node::Bool(b)) => Some(*b),
            Some(other) => {
                let (path, found) = (self.at(name), other.quoted());
                self.fail(path, format!("expected a boolean, found {found}"));
                None
            }
        }
    }

    /// TTFT and TPOT, each when present; `None` after an error.
    fn metrics(&mut self) -> Option<(Option<u64>, Option<u64>)> {
        let metrics = match self.member("metrics") {
            None | Some(Node::Null) => return Some((None, None)),
            Some(metrics) => metrics,
        };
        let mut metrics = self.child("metrics", metrics);
        if !metrics.expect_object() {
            return None;
        }
        let ttft = metrics.milliseconds("time_to_first_token");
        let tpot = metrics.milliseconds("inter_token_latency");
        Some((ttft?, tpot?))
    }

    /// `{"value": number, "unit": "ms"}` as whole microseconds; `Some(None)` when absent.
    fn milliseconds(&mut self, name: &str) -> Option<Option<u64>> {
        let Some(node) = self.member(name) else {
            return Some(None);
        };
        let mut metric = self.child(name, node);
        if !metric.expect_object() {
            return None;
        }
        let unit_ok = match metric.required("unit") {
            Some(Node::String(unit)) if unit == "ms" => true,
            Some(other) => {
                let (path, found) = (metric.at("unit"), other.quoted());
                metric.fail(path, format!("expected \"ms\", found {found}"));
                false
            }
            None => false,
        };
        let value = metric.required("value");
        let micros = value.and_then(|value| {
            let micros = microseconds(value);
            if let Err(reason) = &micros {
                let (path, found) = (metric.at("value"), value.quoted());
                metric.fail(path, format!("{reason}, found {found}"));
            }
            micros.ok()
        });
        (unit_ok && micros.is_some()).then_some(micros)
    }
}

/// Why a metric's value is not whole microseconds (SPEC.md §14.5).
const NOT_NON_NEGATIVE: &str = "expected a non-negative number";
const PAST_THE_BOUND: &str = "expected a number of milliseconds below 9007199254740.992";

/// `floor(value × 1000)` of a non-negative number of milliseconds, from its decimal
/// digits as written (SPEC.md §14.1); else why not.
pub fn microseconds(node: &Node) -> Result<u64, &'static str> {
    let bounded = |us: u64| {
        if us <= crate::input::limits::JSON_INTEGER_MAX {
            Ok(us)
        } else {
            Err(PAST_THE_BOUND)
        }
    };
    let text = match node {
        Node::Number(Number::Integer(v)) => {
            return v.checked_mul(1000).ok_or(PAST_THE_BOUND).and_then(bounded)
        }
        Node::Number(Number::Literal(text)) => text,
        _ => return Err(NOT_NON_NEGATIVE),
    };
    if let Some(magnitude) = text.strip_prefix('-') {
        // Any zero (`-0`, `-0.0`, `-0e5`) is zero; any other negative value is refused.
        let mantissa = magnitude.split(['e', 'E']).next().unwrap_or("");
        return if mantissa.bytes().all(|b| matches!(b, b'0' | b'.')) {
            Ok(0)
        } else {
            Err(NOT_NON_NEGATIVE)
        };
    }
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => match text[at + 1..].parse::<i64>() {
            Ok(exponent) => (&text[..at], exponent),
            // An exponent past 64 bits: below any microsecond, or past any bound.
            Err(_) if text[at + 1..].starts_with('-') => return Ok(0),
            Err(_) => return Err(PAST_THE_BOUND),
        },
        None => (&text[..], 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = [whole, fraction].concat();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    // The value is `digits × 10^(exponent - fraction digits)`; times 1000 for µs.
    let shift = exponent
        .saturating_sub(fraction.len() as i64)
        .saturating_add(3);
    let kept = if shift >= 0 {
        if digits.len() as i64 + shift > 16 {
            return Err(PAST_THE_BOUND);
        }
        format!("{digits}{}", "0".repeat(shift as usize))
    } else {
        let keep = digits.len() as i64 + shift;
        if keep <= 0 {
            return Ok(0);
        }
        digits[..keep as usize].to_owned()
    };
    kept.parse::<u64>()
        .map_err(|_| PAST_THE_BOUND)
        .and_then(bounded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(literal: &str) -> Option<u64> {
        microseconds(&crate::input::json::parse_node(literal.as_bytes()).unwrap()).ok()
    }

    #[test]
    fn milliseconds_become_whole_microseconds_from_their_digits() {
        for (literal, expected) in [
            ("0", Some(0)),
            ("12", Some(12_000)),
            ("0.5", Some(500)),
            ("4.8984369999999995", Some(4_898)),
            ("255.886567999", Some(255_886)),
            ("1e-3", Some(1)),
            ("1e-4", Some(0)),
            ("1E+2", Some(100_000)),
            ("0.0001e4", Some(1_000)),
            ("-0", Some(0)),
            ("-0.0", Some(0)),
            ("-0.5", None),
            ("9007199254740.991", Some(9_007_199_254_740_991)),
            ("9007199254740.992", None),
            ("9007199254741", None),
            ("1e99999999999999999999", None),
            ("1e-99999999999999999999", Some(0)),
            ("\"5\"", None),
        ] {
            assert_eq!(us(literal), expected, "{literal}");
        }
    }
}
