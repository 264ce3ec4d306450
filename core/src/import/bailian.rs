//! Importing a Qwen-Bailian usage trace as a `kvroute-trace/1` document (SPEC.md §18).
//!
//! Alibaba's Bailian traces record real production traffic of one Qwen serving
//! instance, one JSON object a line, much as Mooncake's do, with one difference that
//! decides what a replay may reuse: each `hash_ids` entry hashes one 16-token block on
//! its own, not the prefix up to it. A matcher that took the ids for prefix keys would
//! credit a block whose tokens recur after other blocks, which no prefix cache can
//! serve. So the import re-chains them, keying each block by its id and the key of the
//! block before it, and its report counts the blocks a naive matcher would have
//! credited wrongly. Lines are streamed: memory is one line plus the two sets of
//! 64-bit values the report's matchers keep, one per distinct id and per distinct key.

use crate::import::importer::{ImportError, Imported, Importer, Problem, Report, Source};
use crate::import::request_lines::{
    block_tokens_each, fleet_head, fleet_option_reasons, hash_ids, integer, non_empty,
    request_checks, unknown_and_repeated, whole_input_errors, Totals, PROFILE,
};
use crate::import::shared::{chained_key, REQUEST_LINE_BYTES_MAX};
use crate::input::json::{quote_str, Node, Number};
use crate::input::json_lines::{self, for_each_line, Line, LineError, LineErrors};
use crate::input::limits::JSON_INTEGER_MAX;
use crate::input::trace::{Event, EventKind, Namespace, PolicyParams, Request, Segment, Trace};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The longest line read (SPEC.md §18.2, as §10.2).
pub const LINE_BYTES_MAX: usize = REQUEST_LINE_BYTES_MAX;

/// A line's members, in the order their errors are reported.
const FIELDS: &[&str] = &[
    "chat_id",
    "parent_chat_id",
    "timestamp",
    "input_length",
    "output_length",
    "type",
    "turn",
    "hash_ids",
];

/// The members a line must have; the others have defaults.
const REQUIRED: &[&str] = &[
    "chat_id",
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
];

/// How many distinct request types the report counts one by one; later types are
/// summed, so a hostile file of a million types holds this many counters.
const TYPES_LISTED_MAX: usize = 64;

/// How the lines become requests, and which fleet replays them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BailianOptions {
    /// Tokens per id: the published traces use 16 (`blksz_16`).
    pub block_tokens: u64,
    /// The tenant every request belongs to.
    pub tenant: String,
    /// The model every request and every worker names.
    pub model: String,
    /// How many identical workers to create.
    pub workers: u32,
}

impl Default for BailianOptions {
    fn default() -> Self {
        BailianOptions {
            block_tokens: 16,
            tenant: "bailian".to_owned(),
            model: "bailian-model".to_owned(),
            workers: 8,
        }
    }
}

/// `kvroute import bailian FILE`: one Qwen-Bailian JSONL file, streamed.
#[derive(Debug, Clone)]
pub struct BailianImport {
    pub file: PathBuf,
    pub options: BailianOptions,
}

impl Importer for BailianImport {
    fn name(&self) -> &'static str {
        "bailian"
    }

    fn inputs(&self) -> Vec<&Path> {
        vec![&self.file]
    }

    fn input_kind(&self) -> Option<&'static str> {
        Some("Bailian trace")
    }

    fn import(
        &self,
        sources: Vec<Source<'_>>,
        sink: &mut dyn FnMut(Event),
    ) -> Result<Imported, ImportError> {
        let lines = non_empty(self, &self.file, sources)?;
        let mut segments = 0u64;
        let mut on_event = |event: Event| {
            if let EventKind::Request(request) = &event.kind {
                segments += request.prefix.len() as u64;
            }
            sink(event);
        };
        let (head, tallies) = convert(lines, &self.options, Some(&mut on_event), LINE_BYTES_MAX)
            .map_err(|errors| self.rejected(errors))?;
        let counts = vec![
            (tallies.requests, "request", "requests"),
            (head.workers.len() as u64, "worker", "workers"),
            (segments, "segment", "segments"),
        ];
        let report = Report {
            counts,
            lines: tallies.lines(),
        };
        Ok(Imported { head, report })
    }

    /// The checks without building an event.
    fn check(&self, sources: Vec<Source<'_>>) -> Result<(), ImportError> {
        let lines = non_empty(self, &self.file, sources)?;
        convert(lines, &self.options, None, LINE_BYTES_MAX)
            .map(|_| ())
            .map_err(|errors| self.rejected(errors))
    }
}

impl BailianImport {
    /// The conversion's errors as problems of the file's lines.
    fn rejected(&self, errors: Vec<LineError>) -> ImportError {
        let problem = |e: LineError| Problem::at_line(&self.file, e.line, e.reason);
        ImportError::Rejected(errors.into_iter().map(problem).collect())
    }
}

/// Reads every line, handing each request event to `on_event` (when there is one)
/// while no problem has been found; the trace without its events and the report's
/// figures, or every problem.
fn convert(
    input: impl std::io::BufRead,
    options: &BailianOptions,
    mut on_event: Option<&mut dyn FnMut(Event)>,
    line_bytes_max: usize,
) -> Result<(Trace, Tallies), Vec<LineError>> {
    let mut problems = LineErrors::default();
    let reasons = fleet_option_reasons(
        options.block_tokens,
        options.workers,
        &options.tenant,
        &options.model,
    );
    for reason in reasons {
        problems.push(0, reason);
    }
    if !problems.is_empty() {
        return Err(problems.finish());
    }
    let namespace = Namespace {
        tenant: options.tenant.as_str().into(),
        model: options.model.as_str().into(),
        adapter: "base".into(),
    };
    let (mut totals, mut tallies) = (Totals::default(), Tallies::default());
    let mut previous: Option<Timestamp> = None;
    let read = for_each_line(input, line_bytes_max, |line_number, line| {
        totals.requests += 1;
        let Line::Bytes(bytes) = line else {
            problems.push(
                line_number,
                format!("line longer than {line_bytes_max} bytes"),
            );
            return;
        };
        let mut reasons = Vec::new();
        let request = checked_line(
            bytes,
            line_number,
            options.block_tokens,
            &mut previous,
            &mut reasons,
        );
        for reason in reasons {
            problems.push(line_number, reason);
        }
        let Some(request) = request else {
            return;
        };
        totals.add(request.prompt_tokens, request.decode_tokens);
        let keys = chain(&request.hash_ids);
        tallies.add(&request, &keys);
        // Once the input is known to be rejected, building more events only costs memory.
        if !problems.is_empty() || totals.requests > PROFILE.requests_max() {
            return;
        }
        if let Some(on_event) = on_event.as_mut() {
            on_event(request.event(line_number as u64, &namespace, keys, options.block_tokens));
        }
    });
    if let Err((line_number, e)) = read {
        problems.push(line_number, format!("cannot read the input: {e}"));
    }
    for reason in whole_input_errors(&totals, None) {
        problems.push(0, reason);
    }
    if !problems.is_empty() {
        return Err(problems.finish());
    }
    let head = fleet_head(options.workers, &namespace.model, PolicyParams::default());
    Ok((head, tallies))
}

/// The keys of a request's blocks, each chained on the one before (SPEC.md §18): the
/// id stands for the block's tokens.
fn chain(hash_ids: &[u64]) -> Vec<Arc<str>> {
    let mut parent: Arc<str> = "".into();
    hash_ids
        .iter()
        .map(|&id| {
            parent = chained_key(&parent, &[id]);
            Arc::clone(&parent)
        })
        .collect()
}

/// A line's timestamp: whole milliseconds, and the literal as written for messages.
#[derive(Clone)]
struct Timestamp {
    ms: u64,
    written: String,
    line: usize,
}

/// A line that passed every check.
struct LineRequest {
    chat_id: u64,
    root: bool,
    kind: Option<String>,
    tick: u64,
    prompt_tokens: u64,
    decode_tokens: u64,
    hash_ids: Vec<u64>,
}

impl LineRequest {
    /// The request event of line `seq` (SPEC.md §18.1), its blocks keyed by `keys`.
    fn event(
        &self,
        seq: u64,
        namespace: &Namespace,
        keys: Vec<Arc<str>>,
        block_tokens: u64,
    ) -> Event {
        let tokens = block_tokens_each(self.prompt_tokens, block_tokens, keys.len());
        let prefix = keys
            .into_iter()
            .zip(tokens)
            .map(|(key, tokens)| Segment { key, tokens })
            .collect();
        Event {
            seq,
            tick: self.tick,
            kind: EventKind::Request(Request {
                id: format!("r{seq}-c{}", self.chat_id).into(),
                namespace: namespace.clone(),
                prefix,
                prompt_tokens: self.prompt_tokens,
                decode_tokens: self.decode_tokens,
            }),
        }
    }
}

/// The members of one line that parsed; `None` where a member was missing or bad
/// (an optional member absent is its default, never `None`).
struct LineFields {
    chat_id: Option<u64>,
    root: Option<bool>,
    timestamp: Option<(u64, String)>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    kind: Option<Option<String>>,
    turn_ok: bool,
    hash_ids: Option<Vec<u64>>,
}

impl Default for LineFields {
    fn default() -> Self {
        LineFields {
            chat_id: None,
            root: Some(true),
            timestamp: None,
            input_length: None,
            output_length: None,
            kind: Some(None),
            turn_ok: true,
            hash_ids: None,
        }
    }
}

/// One line's request once every check of SPEC.md §18.2 on it passed; its reasons
/// otherwise. `previous` is the nearest earlier line whose timestamp was good, and
/// becomes this one's when it has one.
fn checked_line(
    bytes: &[u8],
    line_number: usize,
    block_tokens: u64,
    previous: &mut Option<Timestamp>,
    reasons: &mut Vec<String>,
) -> Option<LineRequest> {
    let fields = parse_line(bytes, reasons);
    if let Some((ms, written)) = &fields.timestamp {
        if let Some(before) = previous.as_ref().filter(|before| *ms < before.ms) {
            reasons.push(format!(
                "timestamp: {written} s is before {} s on line {} (timestamps must not decrease)",
                before.written, before.line
            ));
        }
        *previous = Some(Timestamp {
            ms: *ms,
            written: written.clone(),
            line: line_number,
        });
    }
    let LineFields {
        chat_id: Some(chat_id),
        root: Some(root),
        timestamp: Some((tick, _)),
        input_length: Some(prompt_tokens),
        output_length: Some(decode_tokens),
        kind: Some(kind),
        turn_ok: true,
        hash_ids: Some(hash_ids),
    } = fields
    else {
        return None;
    };
    request_checks(
        prompt_tokens,
        decode_tokens,
        &hash_ids,
        block_tokens,
        reasons,
    )
    .then_some(LineRequest {
        chat_id,
        root,
        kind,
        tick,
        prompt_tokens,
        decode_tokens,
        hash_ids,
    })
}

/// Parses one line, pushing a reason for every problem: the members in [`FIELDS`]
/// order, then unknown and repeated members in document order.
fn parse_line(bytes: &[u8], reasons: &mut Vec<String>) -> LineFields {
    let mut fields = LineFields::default();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        reasons.push("empty line".to_owned());
        return LineFields {
            root: None,
            ..fields
        };
    }
    let node = match json_lines::line_json(bytes) {
        Ok(node) => node,
        Err(reason) => {
            reasons.push(reason);
            return LineFields {
                root: None,
                ..fields
            };
        }
    };
    let Node::Object(members) = &node else {
        reasons.push(format!("expected an object, found {}", node.quoted()));
        return LineFields {
            root: None,
            ..fields
        };
    };
    for &name in FIELDS {
        let Some((_, value)) = members.iter().find(|(k, _)| k == name) else {
            if REQUIRED.contains(&name) {
                reasons.push(format!("missing field {}", quote_str(name)));
            }
            continue;
        };
        match name {
            "chat_id" => fields.chat_id = integer(name, value, reasons),
            "parent_chat_id" => fields.root = parent_is_root(value, reasons),
            "timestamp" => fields.timestamp = timestamp(value, reasons),
            "input_length" => fields.input_length = integer(name, value, reasons),
            "output_length" => fields.output_length = integer(name, value, reasons),
            "type" => fields.kind = request_type(value, reasons).map(Some),
            "turn" => fields.turn_ok = turn(value, reasons),
            _ => fields.hash_ids = hash_ids(value, reasons),
        }
    }
    unknown_and_repeated(members, FIELDS, reasons);
    fields
}

/// Whether `parent_chat_id` marks a root (−1), or `None` after its reason.
fn parent_is_root(value: &Node, reasons: &mut Vec<String>) -> Option<bool> {
    if let Node::Number(Number::Literal(text)) = value {
        if &**text == "-1" {
            return Some(true);
        }
    }
    if value.integer().is_some() {
        return Some(false);
    }
    reasons.push(format!(
        "parent_chat_id: expected -1 or a non-negative integer, found {}",
        value.quoted()
    ));
    None
}

fn turn(value: &Node, reasons: &mut Vec<String>) -> bool {
    let good = value.integer().is_some_and(|turn| turn >= 1);
    if !good {
        reasons.push(format!(
            "turn: expected a positive integer, found {}",
            value.quoted()
        ));
    }
    good
}

fn request_type(value: &Node, reasons: &mut Vec<String>) -> Option<String> {
    match value {
        Node::String(text) if !text.is_empty() => Some(text.to_string()),
        other => {
            reasons.push(format!(
                "type: expected a non-empty string, found {}",
                other.quoted()
            ));
            None
        }
    }
}

/// The timestamp in whole milliseconds and as written, or `None` after its reason.
fn timestamp(value: &Node, reasons: &mut Vec<String>) -> Option<(u64, String)> {
    let written = match value {
        Node::Number(number) => number.to_string(),
        _ => String::new(),
    };
    match seconds_to_ms(&written) {
        Some(ms) => Some((ms, written)),
        None => {
            reasons.push(format!(
                "timestamp: expected seconds from 0 to 9007199254740.991, found {}",
                value.quoted()
            ));
            None
        }
    }
}

/// A JSON number literal of seconds as whole milliseconds, rounded down, from its
/// exact decimal value (never through a binary float): `None` for a negative value,
/// anything but a number literal, or more than 2^53 − 1 ms.
fn seconds_to_ms(literal: &str) -> Option<u64> {
    let (negative, literal) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exponent) = match literal.find(['e', 'E']) {
        Some(at) => (&literal[..at], literal[at + 1..].parse::<i64>().ok()?),
        None => (literal, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || whole.bytes().chain(fraction.bytes());
    if whole.is_empty() || !digits().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Only a zero may be negative: `-0`, `-0.0`, `-0e5`.
    if negative && digits().any(|b| b != b'0') {
        return None;
    }
    // value = digits × 10^(exponent − fraction digits), so ms = digits × 10^shift.
    let shift = exponent
        .checked_add(3)?
        .checked_sub(fraction.len() as i64)?;
    let significant = digits().skip_while(|&b| b == b'0');
    let kept = significant.clone().count() as i64 + shift.min(0);
    if kept <= 0 {
        return Some(0);
    }
    let mut ms: u64 = 0;
    for digit in significant.take(usize::try_from(kept).ok()?) {
        ms = ms.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    for _ in 0..shift.max(0) {
        ms = ms.checked_mul(10)?;
        if ms > JSON_INTEGER_MAX {
            return None;
        }
    }
    (ms <= JSON_INTEGER_MAX).then_some(ms)
}

/// What the report says beyond the counts (SPEC.md §18.1).
#[derive(Default)]
struct Tallies {
    requests: u64,
    roots: u64,
    /// The first [`TYPES_LISTED_MAX`] distinct types and their lines.
    types: BTreeMap<String, u64>,
    /// Lines of any later type.
    other_types: u64,
    matchers: Matchers,
}

impl Tallies {
    fn add(&mut self, request: &LineRequest, keys: &[Arc<str>]) {
        self.requests += 1;
        self.roots += u64::from(request.root);
        if let Some(kind) = &request.kind {
            let listed = self.types.len();
            match self.types.get_mut(kind) {
                Some(n) => *n += 1,
                None if listed < TYPES_LISTED_MAX => {
                    self.types.insert(kind.clone(), 1);
                }
                None => self.other_types += 1,
            }
        }
        self.matchers.add(&request.hash_ids, keys);
    }

    fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "sessions: {} root requests (parent_chat_id -1), {} later turns",
            self.roots,
            self.requests - self.roots
        )];
        if !self.types.is_empty() {
            let mut listed: Vec<String> = self
                .types
                .iter()
                .map(|(kind, n)| format!("{} x{n}", quote_str(kind)))
                .collect();
            if self.other_types > 0 {
                listed.push(format!("(other) x{}", self.other_types));
            }
            lines.push(format!("types: {}", listed.join(", ")));
        }
        lines.push(self.matchers.line());
        lines
    }
}

/// The two matchers of the report over an unbounded cache shared by every request:
/// the naive one takes the ids for prefix keys, the chained one the keys.
#[derive(Default)]
struct Matchers {
    seen_ids: FxHashSet<u64>,
    /// Each key seen, as the 64 bits its hex spells.
    seen_keys: FxHashSet<u64>,
    naive: u64,
    chained: u64,
}

impl Matchers {
    fn add(&mut self, hash_ids: &[u64], keys: &[Arc<str>]) {
        let keys: Vec<u64> = keys.iter().map(|key| key_bits(key)).collect();
        let naive = hash_ids
            .iter()
            .take_while(|id| self.seen_ids.contains(id))
            .count();
        let chained = keys
            .iter()
            .take_while(|key| self.seen_keys.contains(key))
            .count();
        debug_assert!(
            chained <= naive,
            "a block whose chain was seen has an id that was"
        );
        self.naive += naive as u64;
        self.chained += chained as u64;
        self.seen_ids.extend(hash_ids);
        self.seen_keys.extend(keys);
    }

    fn line(&self) -> String {
        let over = self.naive - self.chained;
        let hundredths = match self.naive {
            0 => 0,
            naive => u128::from(over) * 10_000 / u128::from(naive),
        };
        format!(
            "re-chained: a naive matcher credits {} blocks, a prefix cache could reuse {}; {over} ({}.{:02}%) credited wrongly",
            self.naive,
            self.chained,
            hundredths / 100,
            hundredths % 100
        )
    }
}

/// A key's 64 bits: `k` and 16 hex digits (SPEC.md §13.4).
fn key_bits(key: &str) -> u64 {
    u64::from_str_radix(&key[1..], 16).unwrap_or_default()
}

#[cfg(test)]
mod tests;
