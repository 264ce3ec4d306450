//! AIPerf's per-request records (`profile_export.jsonl`, SPEC.md §14.1): one line, one
//! [`Completion`], or the reasons it is none, each with its path. Only the members the
//! join reads are looked at; AIPerf adds others from one version to the next.

use crate::input::json::{quote_str, Node, Number};
use crate::input::json_lines::line_json;

/// What the join reads of one completion record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub request_id: String,
    /// When the request started, epoch ns; Dynamo may not have observed it.
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub cancelled: bool,
    pub failed: bool,
    /// Time to first token and time per output token, in whole microseconds.
    pub ttft_us: Option<u64>,
    pub tpot_us: Option<u64>,
    /// The prompt tokens the record says were served from cache (SPEC.md §14.7).
    pub cached_tokens: Option<u64>,
    /// The kvroute worker that served the request, when the record names one.
    pub serving_worker: Option<String>,
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

/// An object being read, at `path`, collecting reasons; the Dynamo reader uses it too.
pub(crate) struct Fields<'n, 'r> {
    pub(crate) node: &'n Node,
    pub(crate) path: String,
    pub(crate) reasons: &'r mut Vec<String>,
}

impl<'n> Fields<'n, '_> {
    pub(crate) fn at(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// This object's path, `$` for the line itself.
    pub(crate) fn own_path(&self) -> String {
        if self.path.is_empty() {
            "$".to_owned()
        } else {
            self.path.clone()
        }
    }

    pub(crate) fn fail(&mut self, path: String, reason: String) {
        self.reasons.push(format!("{path}: {reason}"));
    }

    /// The type error of member `name` (SPEC.md §14.5's reason, after its path).
    pub(crate) fn wrong(&mut self, name: &str, expected: &str, found: &Node) {
        let (path, found) = (self.at(name), found.quoted());
        self.fail(path, format!("{expected}, found {found}"));
    }

    /// The first occurrence of member `name`; a missing required one is reported at
    /// this object, in the member's place (SPEC.md §14.5).
    pub(crate) fn first(&mut self, name: &str, required: bool) -> Option<&'n Node> {
        let Node::Object(members) = self.node else {
            return None;
        };
        let first = members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        if first.is_none() && required {
            let quoted = quote_str(name);
            self.fail(self.own_path(), format!("missing required member {quoted}"));
        }
        first
    }

    /// One error for each later occurrence of member `name`: after the member's own
    /// problem, before those of the members inside it.
    pub(crate) fn repeats(&mut self, name: &str) {
        let Node::Object(members) = self.node else {
            return;
        };
        let later = members
            .iter()
            .filter(|(k, _)| k == name)
            .count()
            .saturating_sub(1);
        for _ in 0..later {
            self.fail(
                self.at(name),
                format!("repeated member {}", quote_str(name)),
            );
        }
    }

    /// Member `name` read by `read` (which reports its own problem), then its repeats.
    pub(crate) fn scalar<T>(
        &mut self,
        name: &str,
        required: bool,
        read: impl FnOnce(&mut Self, &'n Node) -> Option<T>,
    ) -> Option<Option<T>> {
        let value = match self.first(name, required) {
            None if required => None,
            None => Some(None),
            Some(node) => read(self, node).map(Some),
        };
        self.repeats(name);
        value
    }

    /// Member `name` when it is an object (else its type error; `null` is allowed
    /// when `nullable`), then its repeats. `Some(None)`: absent or null.
    pub(crate) fn object(
        &mut self,
        name: &str,
        required: bool,
        nullable: bool,
    ) -> Option<Option<&'n Node>> {
        let expected = if nullable {
            "expected an object or null"
        } else {
            "expected an object"
        };
        self.scalar(name, required, |fields, node| match node {
            Node::Object(_) => Some(Some(node)),
            Node::Null if nullable => Some(None),
            other => {
                fields.wrong(name, expected, other);
                None
            }
        })
        .map(Option::flatten)
    }

    pub(crate) fn child(&mut self, name: &str, node: &'n Node) -> Fields<'n, '_> {
        Fields {
            node,
            path: self.at(name),
            reasons: self.reasons,
        }
    }

    /// The whole record; every member is checked whatever the others gave, so a line
    /// lists all its problems in SPEC.md §14.1's order.
    fn record(&mut self) -> Option<Completion> {
        if !matches!(self.node, Node::Object(_)) {
            let found = self.node.quoted();
            self.fail("$".to_owned(), format!("expected an object, found {found}"));
            return None;
        }
        let metadata = match self.object("metadata", true, false) {
            Some(Some(node)) => self.child("metadata", node).metadata(),
            _ => None,
        };
        let metrics = match self.object("metrics", false, true) {
            Some(Some(node)) => self.child("metrics", node).metrics(),
            Some(None) => Some((None, None, None)),
            None => None,
        };
        let failed = self
            .object("error", false, true)
            .map(|error| error.is_some());
        let (request_id, start_ns, end_ns, cancelled) = metadata?;
        let (ttft_us, tpot_us, cached_tokens) = metrics?;
        Some(Completion {
            request_id,
            start_ns: Some(start_ns),
            end_ns,
            cancelled,
            failed: failed?,
            ttft_us,
            tpot_us,
            cached_tokens,
            // AIPerf's own `metadata.worker_id` is its client worker, not a server's.
            serving_worker: None,
        })
    }

    /// `x_request_id`, `request_start_ns`, `request_end_ns`, `was_cancelled`.
    fn metadata(&mut self) -> Option<(String, u64, Option<u64>, bool)> {
        let id = self.scalar("x_request_id", true, |fields, node| match node {
            Node::String(id) if !id.is_empty() => Some(id.to_string()),
            other => {
                fields.wrong("x_request_id", "expected a non-empty string", other);
                None
            }
        });
        let start = self.scalar("request_start_ns", true, |fields, node| match node {
            Node::Number(Number::Integer(v)) => Some(*v),
            other => {
                fields.wrong("request_start_ns", "expected a non-negative integer", other);
                None
            }
        });
        let end = self.scalar("request_end_ns", false, |fields, node| match node {
            Node::Null => Some(None),
            Node::Number(Number::Integer(v)) => Some(Some(*v)),
            other => {
                let expected = "expected a non-negative integer or null";
                fields.wrong("request_end_ns", expected, other);
                None
            }
        });
        let cancelled = self.scalar("was_cancelled", false, |fields, node| match node {
            Node::Bool(b) => Some(*b),
            other => {
                fields.wrong("was_cancelled", "expected a boolean", other);
                None
            }
        });
        Some((id??, start??, end?.flatten(), cancelled?.unwrap_or(false)))
    }

    /// TTFT, TPOT and the cached prompt tokens, each when present; `None` after an
    /// error.
    fn metrics(&mut self) -> Option<(Option<u64>, Option<u64>, Option<u64>)> {
        let ttft = self.milliseconds("time_to_first_token");
        let tpot = self.milliseconds("inter_token_latency");
        let cached = self.tokens("usage_prompt_cache_read_tokens");
        Some((ttft?, tpot?, cached?))
    }

    /// `{"value": integer from 0 to B, "unit": "tokens"}`; `Some(None)` when absent.
    fn tokens(&mut self, name: &str) -> Option<Option<u64>> {
        let node = match self.object(name, false, false)? {
            None => return Some(None),
            Some(node) => node,
        };
        let mut metric = self.child(name, node);
        let count = metric.scalar("value", true, |fields, value| match token_count(value) {
            Some(count) => Some(count),
            None => {
                fields.wrong("value", "expected a non-negative integer", value);
                None
            }
        });
        let unit = metric.scalar("unit", true, |fields, unit| match unit {
            Node::String(text) if text == "tokens" => Some(()),
            other => {
                fields.wrong("unit", "expected \"tokens\"", other);
                None
            }
        });
        unit??;
        Some(Some(count??))
    }

    /// `{"value": number, "unit": "ms"}` as whole microseconds; `Some(None)` when absent.
    fn milliseconds(&mut self, name: &str) -> Option<Option<u64>> {
        let node = match self.object(name, false, false)? {
            None => return Some(None),
            Some(node) => node,
        };
        let mut metric = self.child(name, node);
        let micros = metric.scalar("value", true, |fields, value| match microseconds(value) {
            Ok(us) => Some(us),
            Err(expected) => {
                fields.wrong("value", expected, value);
                None
            }
        });
        let unit = metric.scalar("unit", true, |fields, unit| match unit {
            Node::String(text) if text == "ms" => Some(()),
            other => {
                fields.wrong("unit", "expected \"ms\"", other);
                None
            }
        });
        unit??;
        Some(Some(micros??))
    }
}

/// A token count: an integer from 0 to `B` (SPEC.md §14.1), else `None`.
pub(crate) fn token_count(node: &Node) -> Option<u64> {
    match node {
        Node::Number(Number::Integer(v)) if *v <= crate::input::limits::JSON_INTEGER_MAX => {
            Some(*v)
        }
        _ => None,
    }
}

/// Why a metric's value is not whole microseconds (SPEC.md §14.5).
const NOT_NON_NEGATIVE: &str = "expected a non-negative number";
const PAST_THE_BOUND: &str = "expected a number of milliseconds below 9007199254740.992";

/// Why a decimal number cannot be read as whole units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalProblem {
    /// Not a number, or a negative one.
    NotNonNegative,
    /// Its whole units pass `2^53 - 1`.
    PastTheBound,
}

/// `floor(value × 1000)` of a non-negative number of milliseconds, from its decimal
/// digits as written (SPEC.md §14.1); else why not.
pub fn microseconds(node: &Node) -> Result<u64, &'static str> {
    scaled_floor(node, 3).map_err(|problem| match problem {
        DecimalProblem::NotNonNegative => NOT_NON_NEGATIVE,
        DecimalProblem::PastTheBound => PAST_THE_BOUND,
    })
}

/// `floor(value × 10^decimals)` of a non-negative JSON number, from its decimal digits
/// as written (never through a binary float), at most `2^53 - 1`; else why not.
pub fn scaled_floor(node: &Node, decimals: u32) -> Result<u64, DecimalProblem> {
    use DecimalProblem::{NotNonNegative, PastTheBound};
    let bounded = |units: u64| {
        if units <= crate::input::limits::JSON_INTEGER_MAX {
            Ok(units)
        } else {
            Err(PastTheBound)
        }
    };
    let text = match node {
        Node::Number(Number::Integer(v)) => {
            return v
                .checked_mul(10u64.pow(decimals))
                .ok_or(PastTheBound)
                .and_then(bounded)
        }
        Node::Number(Number::Literal(text)) => text,
        _ => return Err(NotNonNegative),
    };
    if let Some(magnitude) = text.strip_prefix('-') {
        // Any zero (`-0`, `-0.0`, `-0e5`) is zero; any other negative value is refused.
        let mantissa = magnitude.split(['e', 'E']).next().unwrap_or("");
        return if mantissa.bytes().all(|b| matches!(b, b'0' | b'.')) {
            Ok(0)
        } else {
            Err(NotNonNegative)
        };
    }
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => match text[at + 1..].parse::<i64>() {
            Ok(exponent) => (&text[..at], exponent),
            // An exponent past 64 bits: below any unit, or past any bound.
            Err(_) if text[at + 1..].starts_with('-') => return Ok(0),
            Err(_) => return Err(PastTheBound),
        },
        None => (&text[..], 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = [whole, fraction].concat();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    // The value is `digits × 10^(exponent - fraction digits)`; times 10^decimals.
    let shift = exponent
        .saturating_sub(fraction.len() as i64)
        .saturating_add(i64::from(decimals));
    let kept = if shift >= 0 {
        if digits.len() as i64 + shift > 16 {
            return Err(PastTheBound);
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
        .map_err(|_| PastTheBound)
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
