//! Importing a Mooncake FAST'25 request trace as a `kvroute-trace/1` document (SPEC.md §10).
//!
//! Mooncake's traces are the public record of real prefix sharing at scale: one JSON
//! object a line with an arrival `timestamp` in milliseconds, `input_length`,
//! `output_length` and `hash_ids`, the ids of the prompt's prefix blocks. kvroute can only
//! replay what it can validate, so the import maps each line onto one request event under
//! the `scale` limits profile, with one prefix segment per block, and adds a fleet of
//! identical workers whose rates are the documented defaults below. Every rule the
//! validator would enforce is checked here first, per line, so a bad input is reported by
//! line number instead of by a JSON path into a document the user never wrote, and an
//! accepted import always validates.

use crate::import::importer::{ImportError, Imported, Importer, Problem, Report, Source};
use crate::import::request_lines::{
    block_tokens_each, fleet_head, fleet_option_reasons, hash_ids, integer, non_empty,
    request_checks, unknown_and_repeated, whole_input_errors, Totals, PROFILE,
};
use crate::import::shared::REQUEST_LINE_BYTES_MAX;
use crate::input::json::{quote_str, Node};
use crate::input::json_lines::{self, for_each_line, Line, LineErrors};
use crate::input::trace::members;
use crate::input::trace::{Event, EventKind, Namespace, PolicyParams, Request, Segment, Trace};
use rustc_hash::FxHashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The Mooncake members of one line, in the order their errors are reported.
const FIELDS: &[&str] = members::MOONCAKE_LINE;

pub use crate::input::json_lines::LineError;

/// The longest line read (SPEC.md §10.2).
pub const LINE_BYTES_MAX: usize = REQUEST_LINE_BYTES_MAX;

/// How the lines become requests, and which fleet replays them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MooncakeOptions {
    /// Tokens per hash id; Mooncake's own traces use 512.
    pub block_tokens: u64,
    /// The tenant every request belongs to.
    pub tenant: String,
    /// The model every request and every worker names.
    pub model: String,
    /// How many identical workers to create.
    pub workers: u32,
    /// `policy.dynamo_block_tokens` of the trace (SPEC.md §4.8), so that its receipt
    /// has the `dynamo_default` run; unset by default.
    pub dynamo_block_tokens: Option<u64>,
}

impl Default for MooncakeOptions {
    fn default() -> Self {
        MooncakeOptions {
            block_tokens: 512,
            tenant: "mooncake".to_owned(),
            model: "mooncake-model".to_owned(),
            workers: 8,
            dynamo_block_tokens: None,
        }
    }
}

/// Converts Mooncake JSONL into a `scale` trace, or returns every problem found.
///
/// Line `k` becomes request `r{k}` with `seq = k` and `tick = timestamp`. Errors are in
/// input order, at most [`ERROR_LINES_MAX`] of them, followed when there are more by one
/// line-0 entry `... and N more errors`. The whole input is read even after an error, so
/// that every bad line is counted.
pub fn import_mooncake(
    input: impl BufRead,
    options: &MooncakeOptions,
) -> Result<Trace, Vec<LineError>> {
    let mut events = Vec::new();
    let mut keep = |event| events.push(event);
    let head = convert(input, options, Some(&mut keep), BlockKeys::shared())?;
    Ok(Trace { events, ..head })
}

/// [`import_mooncake`] without holding the events: each request event is handed to
/// `on_event` as its line is read, and the trace is returned without them. Memory is
/// then one line, not the trace, so an import of any length can be written
/// as it is read: block keys are not shared here, since every event is gone once
/// handed on and a table of shared keys would only keep every distinct key alive.
///
/// The events arrive in `seq` order, which is the canonical `(tick, seq)` order of
/// SPEC.md §6.1 because an accepted input's timestamps never decrease. Events are handed
/// on only while no error has been found, but an error on a later line still rejects
/// the input: a caller that must not act on a rejected input reads it twice, first with
/// [`check_mooncake`], or discards what it did.
pub fn import_mooncake_each(
    input: impl BufRead,
    options: &MooncakeOptions,
    mut on_event: impl FnMut(Event),
) -> Result<Trace, Vec<LineError>> {
    convert(input, options, Some(&mut on_event), BlockKeys::unshared())
}

/// Every check of [`import_mooncake`], building no event: the first pass of an import
/// that writes as it reads. The trace is returned without events.
pub fn check_mooncake(
    input: impl BufRead,
    options: &MooncakeOptions,
) -> Result<Trace, Vec<LineError>> {
    convert(input, options, None, BlockKeys::unshared())
}

/// The conversion, handing each event to `on_event` when there is one, its keys from
/// `block_keys`.
fn convert(
    input: impl BufRead,
    options: &MooncakeOptions,
    on_event: Option<&mut dyn FnMut(Event)>,
    block_keys: BlockKeys,
) -> Result<Trace, Vec<LineError>> {
    convert_capped(input, options, on_event, block_keys, LINE_BYTES_MAX)
}

/// [`convert`] with lines capped at `line_bytes_max` (smaller in tests).
fn convert_capped(
    input: impl BufRead,
    options: &MooncakeOptions,
    mut on_event: Option<&mut dyn FnMut(Event)>,
    mut block_keys: BlockKeys,
    line_bytes_max: usize,
) -> Result<Trace, Vec<LineError>> {
    let mut report = LineErrors::default();
    for reason in option_errors(options) {
        report.push(0, reason);
    }
    if !report.is_empty() {
        return Err(report.finish());
    }
    let namespace = Namespace {
        tenant: options.tenant.as_str().into(),
        model: options.model.as_str().into(),
        adapter: "base".into(),
    };
    let mut totals = Totals::default();
    let mut previous_timestamp: Option<(u64, usize)> = None;
    let read = for_each_line(input, line_bytes_max, |line_number, line| {
        totals.requests += 1;
        let line_bytes = match line {
            Line::Bytes(bytes) => bytes,
            Line::TooLong => {
                report.push(
                    line_number,
                    format!("line longer than {line_bytes_max} bytes"),
                );
                return;
            }
        };
        let mut reasons = Vec::new();
        let request = checked_request(
            line_bytes,
            line_number,
            options.block_tokens,
            &mut previous_timestamp,
            &mut reasons,
        );
        for reason in reasons {
            report.push(line_number, reason);
        }
        let Some(request) = request else {
            return;
        };
        totals.add(request.prompt_tokens, request.decode_tokens);
        // Once the input is known to be rejected, building more events only costs memory.
        if !report.is_empty() || totals.requests > PROFILE.requests_max() {
            return;
        }
        if let Some(on_event) = on_event.as_mut() {
            let seq = line_number as u64;
            let prefix = prefix(
                &request.hash_ids,
                request.prompt_tokens,
                options.block_tokens,
                &mut block_keys,
            );
            on_event(request.event(seq, &namespace, prefix));
        }
    });
    if let Err((line_number, e)) = read {
        report.push(line_number, format!("cannot read the input: {e}"));
    }
    for reason in whole_input_errors(&totals, options.dynamo_block_tokens) {
        report.push(0, reason);
    }
    if !report.is_empty() {
        return Err(report.finish());
    }
    Ok(trace_head(options, &namespace))
}

/// One line's request, once every check of SPEC.md §10.2 on it passed; its reasons
/// otherwise (pushed on `reasons`). `previous_timestamp` is the nearest earlier line
/// whose timestamp was an integer, and becomes this one's when it has one.
fn checked_request(
    line_bytes: &[u8],
    line_number: usize,
    block_tokens: u64,
    previous_timestamp: &mut Option<(u64, usize)>,
    reasons: &mut Vec<String>,
) -> Option<LineRequest> {
    let fields = parse_line(line_bytes, reasons);
    if let Some(timestamp) = fields.timestamp {
        if let Some((previous, previous_line)) = *previous_timestamp {
            if timestamp < previous {
                reasons.push(format!(
                    "timestamp: {timestamp} is before {previous} on line {previous_line} \
                     (timestamps must not decrease)"
                ));
            }
        }
        *previous_timestamp = Some((timestamp, line_number));
    }
    let LineFields {
        timestamp: Some(timestamp),
        input_length: Some(prompt_tokens),
        output_length: Some(decode_tokens),
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
        timestamp,
        prompt_tokens,
        decode_tokens,
        hash_ids,
    })
}

/// The four fields of a line that passed every check.
struct LineRequest {
    timestamp: u64,
    prompt_tokens: u64,
    decode_tokens: u64,
    hash_ids: Vec<u64>,
}

impl LineRequest {
    /// The request event of line `seq` (SPEC.md §10.1: `r{seq}`, `tick = timestamp`).
    fn event(&self, seq: u64, namespace: &Namespace, prefix: Vec<Segment>) -> Event {
        Event {
            seq,
            tick: self.timestamp,
            kind: EventKind::Request(Request {
                id: format!("r{seq}").into(),
                namespace: namespace.clone(),
                prefix,
                prompt_tokens: self.prompt_tokens,
                decode_tokens: self.decode_tokens,
            }),
        }
    }
}

/// The imported trace without its events: the default policy (with
/// `dynamo_block_tokens` when asked for) and `options.workers` identical idle workers
/// (SPEC.md §10.1).
fn trace_head(options: &MooncakeOptions, namespace: &Namespace) -> Trace {
    let policy = PolicyParams {
        dynamo_block_tokens: options.dynamo_block_tokens,
        ..PolicyParams::default()
    };
    fleet_head(options.workers, &namespace.model, policy)
}

fn option_errors(options: &MooncakeOptions) -> Vec<String> {
    let mut reasons = fleet_option_reasons(
        options.block_tokens,
        options.workers,
        &options.tenant,
        &options.model,
    );
    if options.dynamo_block_tokens == Some(0) {
        // After the block size, as SPEC.md §10.2 lists them.
        let at = usize::from(options.block_tokens == 0);
        let reason = "dynamo_block_tokens: expected a positive integer, found 0".to_owned();
        reasons.insert(at, reason);
    }
    reasons
}

/// The members of one line that parsed; `None` where the member was missing or bad.
#[derive(Default)]
struct LineFields {
    timestamp: Option<u64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
}

/// Parses one line, pushing a reason for every problem: the four members in [`FIELDS`]
/// order, then unknown and repeated members in document order.
fn parse_line(line_bytes: &[u8], reasons: &mut Vec<String>) -> LineFields {
    let mut fields = LineFields::default();
    if line_bytes.iter().all(u8::is_ascii_whitespace) {
        reasons.push("empty line".to_owned());
        return fields;
    }
    let node = match json_lines::line_json(line_bytes) {
        Ok(node) => node,
        Err(reason) => {
            reasons.push(reason);
            return fields;
        }
    };
    let Node::Object(members) = &node else {
        reasons.push(format!("expected an object, found {}", node.quoted()));
        return fields;
    };
    let member = |name: &str| members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    for &name in FIELDS {
        let Some(value) = member(name) else {
            reasons.push(format!("missing field {}", quote_name(name)));
            continue;
        };
        match name {
            "timestamp" => fields.timestamp = integer(name, value, reasons),
            "input_length" => fields.input_length = integer(name, value, reasons),
            "output_length" => fields.output_length = integer(name, value, reasons),
            _ => fields.hash_ids = hash_ids(value, reasons),
        }
    }
    unknown_and_repeated(members, FIELDS, reasons);
    fields
}

fn quote_name(name: &str) -> String {
    quote_str(name)
}

/// The keys of block ids (`b` and the id). Shared for a trace that is kept: requests
/// of a Mooncake trace share most of their blocks, so a repeated block then costs a
/// pointer. Unshared for events that are written and dropped, where the table would be
/// the only thing growing with the input. Only looked up, never iterated.
struct BlockKeys {
    /// Each hash id seen so far and its one shared key; `None` when not sharing.
    by_hash_id: Option<FxHashMap<u64, Arc<str>>>,
}

impl BlockKeys {
    fn shared() -> BlockKeys {
        BlockKeys {
            by_hash_id: Some(FxHashMap::default()),
        }
    }

    fn unshared() -> BlockKeys {
        BlockKeys { by_hash_id: None }
    }

    fn key(&mut self, hash_id: u64) -> Arc<str> {
        let new = || format!("b{hash_id}").into();
        match &mut self.by_hash_id {
            Some(shared) => Arc::clone(shared.entry(hash_id).or_insert_with(new)),
            None => new(),
        }
    }
}

/// One segment per hash id, keyed `b<id>`: full blocks, then the partial remainder.
/// Only called once [`request_checks`] accepted the figures.
fn prefix(
    hash_ids: &[u64],
    prompt_tokens: u64,
    block_tokens: u64,
    block_keys: &mut BlockKeys,
) -> Vec<Segment> {
    let tokens = block_tokens_each(prompt_tokens, block_tokens, hash_ids.len());
    hash_ids
        .iter()
        .zip(tokens)
        .map(|(id, tokens)| Segment {
            key: block_keys.key(*id),
            tokens,
        })
        .collect()
}

/// `kvroute import mooncake FILE`: one Mooncake JSONL file (SPEC.md §10), streamed.
/// Each request event is handed on as its line is read, so memory is one line and the
/// checks' running totals, whatever the file's length.
#[derive(Debug, Clone)]
pub struct MooncakeImport {
    pub file: PathBuf,
    pub options: MooncakeOptions,
}

impl Importer for MooncakeImport {
    fn name(&self) -> &'static str {
        "mooncake"
    }

    fn inputs(&self) -> Vec<&Path> {
        vec![&self.file]
    }

    fn input_kind(&self) -> Option<&'static str> {
        Some("Mooncake trace")
    }

    fn import(
        &self,
        sources: Vec<Source<'_>>,
        sink: &mut dyn FnMut(Event),
    ) -> Result<Imported, ImportError> {
        let lines = self.non_empty(sources)?;
        let (mut requests, mut segments) = (0u64, 0u64);
        let head = import_mooncake_each(lines, &self.options, |event| {
            if let EventKind::Request(request) = &event.kind {
                requests += 1;
                segments += request.prefix.len() as u64;
            }
            sink(event);
        })
        .map_err(|errors| self.rejected(errors))?;
        let counts = vec![
            (requests, "request", "requests"),
            (head.workers.len() as u64, "worker", "workers"),
            (segments, "segment", "segments"),
        ];
        Ok(Imported {
            head,
            report: Report {
                counts,
                lines: Vec::new(),
            },
        })
    }

    /// The checks without building an event.
    fn check(&self, sources: Vec<Source<'_>>) -> Result<(), ImportError> {
        let lines = self.non_empty(sources)?;
        check_mooncake(lines, &self.options)
            .map(|_| ())
            .map_err(|errors| self.rejected(errors))
    }
}

impl MooncakeImport {
    /// The one input, refused when it is empty (SPEC.md §10.2).
    fn non_empty<'s>(&self, sources: Vec<Source<'s>>) -> Result<Source<'s>, ImportError> {
        non_empty(self, &self.file, sources)
    }

    /// The conversion's errors as problems of the file's lines.
    fn rejected(&self, errors: Vec<LineError>) -> ImportError {
        let problem = |e: LineError| Problem::at_line(&self.file, e.line, e.reason);
        ImportError::Rejected(errors.into_iter().map(problem).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::limits::ERROR_LINES_MAX;
    use crate::input::limits::{CostBound, LimitsProfile};
    use crate::input::trace::{fleet_worker_id, WorkerSpec};
    use crate::output::canonical::canonical_trace_bytes;
    use crate::parse_trace;

    /// Three Mooncake lines, shared with the CLI tests.
    const THREE_LINES: &str = include_str!("../../../fixtures/mooncake/three-lines.jsonl");

    fn import(text: &str) -> Result<Trace, Vec<LineError>> {
        import_mooncake(text.as_bytes(), &MooncakeOptions::default())
    }

    /// The error lines as printed, for compact assertions.
    fn errors(text: &str) -> Vec<String> {
        match import(text) {
            Ok(_) => panic!("expected errors for {text:?}"),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    fn segment(key: &str, tokens: u64) -> Segment {
        Segment {
            key: key.into(),
            tokens,
        }
    }

    fn request_event(seq: u64, tick: u64, prefix: Vec<Segment>, prompt: u64, decode: u64) -> Event {
        Event {
            seq,
            tick,
            kind: EventKind::Request(Request {
                id: format!("r{seq}").into(),
                namespace: Namespace {
                    tenant: "mooncake".into(),
                    model: "mooncake-model".into(),
                    adapter: "base".into(),
                },
                prefix,
                prompt_tokens: prompt,
                decode_tokens: decode,
            }),
        }
    }

    /// A valid line with one member's text replaced.
    fn line_with(member: &str, value: &str) -> String {
        let mut fields = vec![
            ("timestamp", "7".to_owned()),
            ("input_length", "600".to_owned()),
            ("output_length", "10".to_owned()),
            ("hash_ids", "[3, 4]".to_owned()),
        ];
        for (name, text) in &mut fields {
            if *name == member {
                *text = value.to_owned();
            }
        }
        let body: Vec<String> = fields
            .iter()
            .map(|(name, text)| format!("\"{name}\": {text}"))
            .collect();
        format!("{{{}}}", body.join(", "))
    }

    const GOOD: &str =
        r#"{"timestamp": 7, "input_length": 600, "output_length": 10, "hash_ids": [3, 4]}"#;

    #[test]
    fn three_lines_map_exactly() {
        let trace = import(THREE_LINES).unwrap();
        assert_eq!(trace.limits, LimitsProfile::Scale);
        assert_eq!(trace.policy, PolicyParams::default());
        assert!(trace.sharing.is_empty());
        let ids: Vec<&str> = trace.workers.iter().map(|w| &*w.id).collect();
        assert_eq!(ids, ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]);
        assert_eq!(
            trace.workers[3],
            WorkerSpec {
                id: "w3".into(),
                model: "mooncake-model".into(),
                adapters: vec![],
                prefill_rate: 16,
                decode_rate: 4,
                queued_prefill: 0,
                active_decode: 0,
                observed_tick: 0,
                epoch: 0,
                cache: vec![],
            }
        );
        assert_eq!(
            trace.events,
            vec![
                request_event(
                    1,
                    0,
                    vec![segment("b0", 512), segment("b1", 512), segment("b7", 76)],
                    1100,
                    39
                ),
                request_event(2, 5, vec![segment("b0", 512)], 512, 0),
                request_event(3, 5, vec![], 0, 12),
            ]
        );
    }

    #[test]
    fn worker_ids_are_padded_so_byte_order_is_numeric_order() {
        assert_eq!(fleet_worker_id(0, 1), "w0");
        assert_eq!(fleet_worker_id(9, 10), "w9");
        assert_eq!(fleet_worker_id(0, 11), "w00");
        assert_eq!(fleet_worker_id(10, 11), "w10");
        assert_eq!(fleet_worker_id(0, 512), "w000");
        assert_eq!(fleet_worker_id(511, 512), "w511");
        assert_eq!(fleet_worker_id(4095, 4096), "w4095");
        let ids: Vec<String> = (0..512).map(|i| fleet_worker_id(i, 512)).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn options_choose_block_size_namespace_and_fleet() {
        let options = MooncakeOptions {
            block_tokens: 400,
            tenant: "t".to_owned(),
            model: "m".to_owned(),
            workers: 12,
            dynamo_block_tokens: None,
        };
        let first_and_last: String = THREE_LINES
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, line)| format!("{line}\n"))
            .collect();
        let trace = import_mooncake(first_and_last.as_bytes(), &options).unwrap();
        assert_eq!(trace.workers.len(), 12);
        assert_eq!(&*trace.workers[0].id, "w00");
        assert_eq!(&*trace.workers[11].id, "w11");
        assert!(trace.workers.iter().all(|w| &*w.model == "m"));
        let EventKind::Request(request) = &trace.events[0].kind else {
            panic!("expected a request");
        };
        assert_eq!(&*request.namespace.tenant, "t");
        assert_eq!(&*request.namespace.model, "m");
        assert_eq!(
            request.prefix,
            vec![segment("b0", 400), segment("b1", 400), segment("b7", 300)]
        );
        // Line 2: 512 tokens need two blocks of 400.
        let options = MooncakeOptions {
            block_tokens: 400,
            ..MooncakeOptions::default()
        };
        let errors = import_mooncake(THREE_LINES.as_bytes(), &options).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "line 2: hash_ids: input_length 512 at 400 tokens a block needs 2 ids, found 1"
        );
    }

    #[test]
    fn the_output_round_trips_through_validation() {
        for workers in [1, 8, 12, 512] {
            let options = MooncakeOptions {
                workers,
                ..MooncakeOptions::default()
            };
            let trace = import_mooncake(THREE_LINES.as_bytes(), &options).unwrap();
            let reparsed = parse_trace(&canonical_trace_bytes(&trace)).unwrap();
            assert_eq!(reparsed, trace);
        }
    }

    #[test]
    fn empty_input_is_an_empty_trace_and_crlf_and_a_missing_last_newline_are_fine() {
        let trace = import("").unwrap();
        assert!(trace.events.is_empty());
        assert_eq!(trace.workers.len(), 8);
        let crlf = THREE_LINES.replace('\n', "\r\n");
        assert_eq!(import(&crlf).unwrap(), import(THREE_LINES).unwrap());
        let unterminated = THREE_LINES.trim_end();
        assert_eq!(import(unterminated).unwrap(), import(THREE_LINES).unwrap());
    }

    /// Each bad line of [`each_kind_of_bad_line_names_its_line_and_reason`] and the
    /// reason it gives, in the order of SPEC.md §10.2's table.
    fn bad_lines() -> Vec<(String, &'static str)> {
        [bad_values(), bad_lines_as_a_whole()].concat()
    }

    /// Lines with a member of the wrong type or out of range.
    fn bad_values() -> Vec<(String, &'static str)> {
        vec![
            (
                line_with("input_length", "-3"),
                "input_length: expected a non-negative integer, found -3",
            ),
            (
                line_with("timestamp", "1.5"),
                "timestamp: expected a non-negative integer, found 1.5",
            ),
            (
                line_with("timestamp", "1e3"),
                "timestamp: expected a non-negative integer, found 1e3",
            ),
            (
                line_with("output_length", "\"10\""),
                "output_length: expected a non-negative integer, found \"10\"",
            ),
            (
                line_with("output_length", "9007199254740992"),
                "output_length: expected a non-negative integer, found 9007199254740992",
            ),
            (
                line_with("output_length", "null"),
                "output_length: expected a non-negative integer, found null",
            ),
            (
                line_with("hash_ids", "\"0,1\""),
                "hash_ids: expected an array, found \"0,1\"",
            ),
            (
                line_with("hash_ids", "[3, -4]"),
                "hash_ids[1]: expected a non-negative integer, found -4",
            ),
        ]
    }

    /// Lines whose ids do not cover the prompt, over the token limit, of a wrong set of
    /// members, or not a JSON object.
    fn bad_lines_as_a_whole() -> Vec<(String, &'static str)> {
        vec![
            (
                line_with("hash_ids", "[3]"),
                "hash_ids: input_length 600 at 512 tokens a block needs 2 ids, found 1",
            ),
            (
                line_with("hash_ids", "[3, 4, 5]"),
                "hash_ids: input_length 600 at 512 tokens a block needs 2 ids, found 3",
            ),
            (
                line_with("hash_ids", "[]"),
                "hash_ids: input_length 600 at 512 tokens a block needs 2 ids, found 0",
            ),
            (
                line_with("input_length", "1025"),
                "hash_ids: input_length 1025 at 512 tokens a block needs 3 ids, found 2",
            ),
            (
                line_with("input_length", "512"),
                "hash_ids: input_length 512 at 512 tokens a block needs 1 id, found 2",
            ),
            (
                line_with("output_length", "2096553"),
                "2097153 tokens (input_length + output_length) exceed the scale limit of \
                 2097152",
            ),
            (
                r#"{"timestamp": 7, "input_length": 600, "output_length": 10}"#.to_owned(),
                "missing field \"hash_ids\"",
            ),
            (GOOD.replace('}', r#", "foo": 1}"#), "unknown field \"foo\""),
            (
                GOOD.replace('}', r#", "timestamp": 7}"#),
                "repeated field \"timestamp\"",
            ),
            ("[1, 2]".to_owned(), "expected an object, found [1,2]"),
            ("   ".to_owned(), "empty line"),
            (
                r#"{"timestamp": 7,"#.to_owned(),
                "invalid JSON: EOF while parsing a value at column 16",
            ),
        ]
    }

    #[test]
    fn each_kind_of_bad_line_names_its_line_and_reason() {
        for (bad, reason) in bad_lines() {
            let text = format!("{GOOD}\n{bad}\n{GOOD}\n");
            assert_eq!(errors(&text), [format!("line 2: {reason}")], "{bad}");
        }
    }

    /// A line over the cap is one error and is read past, so a line with no end cannot
    /// grow until the allocator aborts; the lines around it are still checked, a line
    /// exactly at the cap is read, and reading through a 1-byte buffer drops the long
    /// line in pieces the same way.
    #[test]
    fn a_line_over_the_cap_is_an_error_and_is_read_past() {
        let cap = GOOD.len();
        let long = " ".repeat(3 * cap);
        let capped = |text: &str, buffer: usize| -> Vec<String> {
            let reader = std::io::BufReader::with_capacity(buffer, text.as_bytes());
            let options = MooncakeOptions::default();
            match convert_capped(reader, &options, None, BlockKeys::unshared(), cap) {
                Ok(_) => vec![],
                Err(errors) => errors.iter().map(ToString::to_string).collect(),
            }
        };
        let too_long = format!("line longer than {cap} bytes");
        for buffer in [1, 7, 8192] {
            let text = format!("{GOOD}\n{long}\n{GOOD}\n{GOOD}\n{long}");
            assert_eq!(
                capped(&text, buffer),
                [format!("line 2: {too_long}"), format!("line 5: {too_long}")],
                "a buffer of {buffer}"
            );
            // At the cap, with or without its newline: read as usual.
            assert_eq!(
                capped(&format!("{GOOD}\n{GOOD}"), buffer),
                Vec::<String>::new()
            );
            let over = format!("{GOOD} \n{GOOD}\n");
            assert_eq!(capped(&over, buffer), [format!("line 1: {too_long}")]);
        }
    }

    #[test]
    fn input_length_1024_is_covered_by_two_full_blocks() {
        // An exact multiple of the block size ends in a full last block, not an error.
        let text = line_with("input_length", "1024");
        let trace = import(&text).unwrap();
        let EventKind::Request(request) = &trace.events[0].kind else {
            panic!("expected a request");
        };
        assert_eq!(request.prefix, vec![segment("b3", 512), segment("b4", 512)]);
    }

    #[test]
    fn timestamps_must_not_decrease() {
        let text = format!(
            "{}\n{}\n{}\n",
            line_with("timestamp", "20"),
            line_with("timestamp", "20"),
            line_with("timestamp", "19")
        );
        assert_eq!(
            errors(&text),
            ["line 3: timestamp: 19 is before 20 on line 2 (timestamps must not decrease)"]
        );
    }

    #[test]
    fn every_bad_line_is_reported_and_every_problem_on_it() {
        let text = format!(
            "\n{GOOD}\n{}\nnot json\n",
            GOOD.replace("600", "-1").replace('}', r#", "x": 0}"#)
        );
        let lines = errors(&text);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0], "line 1: empty line");
        assert_eq!(
            lines[1],
            "line 3: input_length: expected a non-negative integer, found -1"
        );
        assert_eq!(lines[2], "line 3: unknown field \"x\"");
        assert!(lines[3].starts_with("line 4: invalid JSON: "), "{lines:?}");
    }

    #[test]
    fn invalid_utf8_is_a_bad_line_not_a_panic() {
        let mut bytes = GOOD.as_bytes().to_vec();
        bytes.push(b'\n');
        bytes.extend_from_slice(b"{\"timestamp\": \"\xff\"}\n");
        let errors = import_mooncake(&bytes[..], &MooncakeOptions::default()).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 2);
        assert!(errors[0].reason.starts_with("invalid JSON: "), "{errors:?}");
    }

    #[test]
    fn errors_are_capped_with_a_count_of_the_rest() {
        let text = "x\n".repeat(ERROR_LINES_MAX + 5);
        let errors = import(&text).unwrap_err();
        assert_eq!(errors.len(), ERROR_LINES_MAX + 1);
        assert_eq!(errors[ERROR_LINES_MAX - 1].line, ERROR_LINES_MAX);
        assert_eq!(
            errors[ERROR_LINES_MAX],
            LineError {
                line: 0,
                reason: "... and 5 more errors".to_owned()
            }
        );
        assert_eq!(errors[ERROR_LINES_MAX].to_string(), "... and 5 more errors");
    }

    #[test]
    fn bad_options_are_line_0_errors() {
        let options = MooncakeOptions {
            block_tokens: 0,
            tenant: String::new(),
            model: String::new(),
            workers: 4097,
            dynamo_block_tokens: None,
        };
        let errors: Vec<String> = import_mooncake(THREE_LINES.as_bytes(), &options)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "block_tokens: expected a positive integer, found 0",
                "workers: expected 1 to 4096 (the scale limit), found 4097",
                "tenant: expected a non-empty string",
                "model: expected a non-empty string",
            ]
        );
        let options = MooncakeOptions {
            workers: 0,
            ..MooncakeOptions::default()
        };
        assert!(import_mooncake(THREE_LINES.as_bytes(), &options).is_err());
        let options = MooncakeOptions {
            workers: 4096,
            ..MooncakeOptions::default()
        };
        let trace = import_mooncake(THREE_LINES.as_bytes(), &options).unwrap();
        assert_eq!(&*trace.workers[4095].id, "w4095");
    }

    #[test]
    fn whole_input_limits_are_line_0_errors() {
        let within = Totals {
            requests: 10_000_000,
            bound: CostBound {
                prompt_sum: 9_000_000_000_000 - 2_097_152,
                prompt_max: 2_097_152,
                ..CostBound::default()
            },
        };
        assert!(whole_input_errors(&within, None).is_empty());
        let over = Totals {
            requests: 10_000_001,
            bound: CostBound {
                prompt_sum: 9_000_000_000_000,
                decode_sum: 7_200_000_000,
                prompt_max: 2_000_000,
                ..CostBound::default()
            },
        };
        assert_eq!(
            whole_input_errors(&over, None),
            [
                "10000001 requests exceed the scale limit of 10000000".to_owned(),
                "figures could overflow: 9000000000000 prompt and 7200000000 decode tokens \
                 in all put the cost bound over 9007199254740991; import fewer lines"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn dynamo_block_tokens_sets_the_member_and_its_bound() {
        let options = MooncakeOptions {
            dynamo_block_tokens: Some(512),
            ..MooncakeOptions::default()
        };
        let trace = import_mooncake(THREE_LINES.as_bytes(), &options).unwrap();
        assert_eq!(trace.policy.dynamo_block_tokens, Some(512));
        assert_eq!(
            trace.policy,
            PolicyParams {
                dynamo_block_tokens: Some(512),
                ..PolicyParams::default()
            }
        );
        let zero = MooncakeOptions {
            dynamo_block_tokens: Some(0),
            ..MooncakeOptions::default()
        };
        let errors: Vec<String> = import_mooncake(THREE_LINES.as_bytes(), &zero)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            ["dynamo_block_tokens: expected a positive integer, found 0"]
        );
        // Within the version-1 bound, over the dynamo one: 1000·(Σprompt + Σdecode + b)
        // passes 2^53 - 1 only through the block (SPEC.md §1.4).
        let totals = Totals {
            requests: 1,
            bound: CostBound {
                prompt_sum: 1000,
                decode_sum: 10,
                prompt_max: 1000,
                ..CostBound::default()
            },
        };
        assert!(whole_input_errors(&totals, Some(9_007_199_254_740 - 1010)).is_empty());
        assert_eq!(
            whole_input_errors(&totals, Some(9_007_199_254_740 - 1009)),
            // The lines fit: the block is named, with the largest the lines allow.
            [
                "dynamo_block_tokens: 9007199253731 puts the dynamo_default cost bound over \
                 9007199254740991 (1000 per token of 1000 prompt and 10 decode tokens in \
                 all, plus one block); these lines allow at most 9007199253730"
            ]
        );
    }
}
