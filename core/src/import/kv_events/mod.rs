//! Importing what vLLM and SGLang published about their KV caches (SPEC.md §13).
//!
//! A capture (one ZeroMQ message a line, §13.2) and a request log (§13.3) become one
//! `kvroute-trace/1`: a worker per publisher, the engines' stores, removals and clears
//! as cache events keyed by their tokens, and the requests keyed the same way, so that
//! a replay asks what the router could have known from the engines' own evidence. The
//! publishers' sequence numbers become sequential epochs (§3.6), so a lost message
//! opens an evidence gap and an engine restart is a clear. Whatever the mapping cannot
//! represent (another storage tier, a hybrid cache group, a chain whose start the
//! capture missed) is left out and counted in an [`ImportReport`], never guessed.
//!
//! Files: [`lines`] reads the two JSON Lines inputs, [`wire`] the MessagePack payload;
//! [`convert`] turns decoded messages into cache events; this file runs the import.
//! Both inputs are read line by line with a cap on each line, and nothing here panics
//! on any input.

pub(crate) mod convert;
pub(crate) mod dynamo;
pub(crate) mod lines;
pub(crate) mod report;
pub(crate) mod wire;

use crate::import::importer::{
    sources_as, ImportError, Imported, Importer, Problem, Report, Source,
};
use crate::import::shared::BYTE_ORDER_MARK_REASON;
use crate::input::compact::{EventStore, EventsView};
use crate::input::json_lines::{self, Line};
use crate::input::limits::{LimitsProfile, ERROR_LINES_MAX};
use crate::input::trace::{Event, EventKind, Trace};
use crate::input::validate::{read_trace_compact, ReadTraceError};
use crate::output::canonical::CanonicalTraceReader;
pub use convert::{EventsOptions, Keying};
pub use report::ImportReport;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The longest capture line read: a payload of [`wire::PAYLOAD_BYTES_MAX`] bytes in
/// base64 (4 characters per 3 bytes, 22.4 MB) and the line's other members fit.
pub const LINE_BYTES_MAX: usize = 24 * 1024 * 1024;

pub use crate::import::shared::REQUEST_LINE_BYTES_MAX;

/// Which input a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Capture,
    Requests,
    /// The inputs as a whole, or the options.
    Whole,
}

/// One reason the inputs were rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsImportError {
    pub input: Input,
    /// The 1-based line; 0 with [`Input::Whole`].
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for EventsImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.input {
            Input::Whole => f.write_str(&self.reason),
            Input::Capture => write!(f, "capture line {}: {}", self.line, self.reason),
            Input::Requests => write!(f, "request line {}: {}", self.line, self.reason),
        }
    }
}

/// The errors of a rejected import: the first [`ERROR_LINES_MAX`], and how many more.
#[derive(Default)]
struct Errors {
    kept: Vec<EventsImportError>,
    more: usize,
}

impl Errors {
    fn push(&mut self, input: Input, line: usize, reason: String) {
        if self.kept.len() < ERROR_LINES_MAX {
            self.kept.push(EventsImportError {
                input,
                line,
                reason,
            });
        } else {
            self.more += 1;
        }
    }

    fn into_result<T>(mut self, ok: impl FnOnce() -> T) -> Result<T, Vec<EventsImportError>> {
        if self.kept.is_empty() {
            return Ok(ok());
        }
        if self.more > 0 {
            self.kept.push(EventsImportError {
                input: Input::Whole,
                line: 0,
                reason: format!("... and {} more errors", self.more),
            });
        }
        Err(self.kept)
    }
}

/// Converts a capture and a request log into a `scale` trace and its report, or
/// returns every problem found (both inputs are read to their end). The trace is not
/// yet validated: the caller parses its canonical bytes back (SPEC.md §13.4), which
/// this folder cannot, since it imports nothing from `output`.
pub fn import_engine_events(
    capture: impl BufRead,
    requests: impl BufRead,
    options: &EventsOptions,
) -> Result<(Trace, ImportReport), Vec<EventsImportError>> {
    import_capped(capture, requests, options, LINE_BYTES_MAX, vllm_line)
}

/// A capture line of SPEC.md §13.2 as a message and its decoded batch.
fn vllm_line(bytes: &[u8]) -> Result<(lines::Message, wire::Batch), String> {
    let message = lines::capture_line(bytes)?;
    let batch = wire::decode_batch(&message.payload)?;
    Ok((message, batch))
}

/// Converts Dynamo `RouterEvent` lines (SPEC.md §13.7) and a request log, as
/// [`import_engine_events`] converts a capture: `options.keying` is taken as
/// [`Keying::DynamoTokensHash`] whatever it says, since Dynamo's stores carry no tokens.
pub fn import_dynamo_events(
    events: impl BufRead,
    requests: impl BufRead,
    options: &EventsOptions,
) -> Result<(Trace, ImportReport), Vec<EventsImportError>> {
    let options = EventsOptions {
        keying: Keying::DynamoTokensHash,
        ..options.clone()
    };
    let mut reader = dynamo::DynamoReader::new(options.block_tokens);
    import_capped(events, requests, &options, LINE_BYTES_MAX, |bytes| {
        reader.line(bytes)
    })
}

/// The import, with capture lines capped at `line_bytes_max` (smaller in tests) and
/// read by `decode`.
fn import_capped(
    capture: impl BufRead,
    requests: impl BufRead,
    options: &EventsOptions,
    line_bytes_max: usize,
    mut decode: impl FnMut(&[u8]) -> Result<(lines::Message, wire::Batch), String>,
) -> Result<(Trace, ImportReport), Vec<EventsImportError>> {
    let mut errors = Errors::default();
    // The requests come first: without `--model`, the model they name is the
    // workers', and every store's namespace needs it.
    let logged = read_requests(requests, options.keying, &mut errors);
    let model = match convert::fleet_model(options, &logged) {
        Ok(model) => model,
        // With no request read (bad lines, or none), the log has nothing to route:
        // asking for --model would mislead.
        Err(_) if logged.is_empty() => String::new(),
        Err(reason) => {
            errors.push(Input::Whole, 0, reason);
            String::new()
        }
    };
    let mut converter = convert::Converter::new(options, model);
    for_each_line(
        capture,
        line_bytes_max,
        Input::Capture,
        &mut errors,
        |line, bytes, errors| match decode(bytes) {
            Ok((message, batch)) => converter.message(line, &message, batch),
            Err(reason) => errors.push(Input::Capture, line, reason),
        },
    );
    let (trace, report) = converter.finish(logged);
    errors.into_result(|| (trace, report))
}

/// The request log's requests with their line numbers; bad lines go to `errors`.
fn read_requests(
    input: impl BufRead,
    keying: Keying,
    errors: &mut Errors,
) -> Vec<(usize, lines::LoggedRequest)> {
    let mut logged = Vec::new();
    let mut first_line_of = rustc_hash::FxHashMap::<String, usize>::default();
    let tokens_max = LimitsProfile::Scale.tokens_per_request_max();
    for_each_line(
        input,
        REQUEST_LINE_BYTES_MAX,
        Input::Requests,
        errors,
        |line, bytes, errors| {
            let request = match lines::request_line(bytes) {
                Ok(request) => request,
                Err(reasons) => {
                    reasons
                        .into_iter()
                        .for_each(|r| errors.push(Input::Requests, line, r));
                    return;
                }
            };
            if keying == Keying::DynamoTokensHash {
                if let Some(reason) = convert::dynamo_request_problem(&request) {
                    errors.push(Input::Requests, line, reason);
                    return;
                }
            }
            if let Some(first) = first_line_of.get(&request.id) {
                let reason = format!(
                    "duplicate request id {} (first on line {first})",
                    crate::input::json::quote_str(&request.id)
                );
                errors.push(Input::Requests, line, reason);
                return;
            }
            let tokens = (request.token_ids.len() as u64).saturating_add(request.output_tokens);
            if tokens > tokens_max {
                let reason = format!(
                "{tokens} tokens (prompt + output_tokens) exceed the scale limit of {tokens_max}"
            );
                errors.push(Input::Requests, line, reason);
                return;
            }
            first_line_of.insert(request.id.clone(), line);
            logged.push((line, request));
        },
    );
    logged
}

/// Calls `each` with every line of `input` (its number from 1 and its bytes without
/// the line end) that is not too long, blank or marked as UTF-8; those, and a read
/// error, are reported to `errors` under `which`.
fn for_each_line(
    input: impl BufRead,
    line_bytes_max: usize,
    which: Input,
    errors: &mut Errors,
    mut each: impl FnMut(usize, &[u8], &mut Errors),
) {
    let read = json_lines::for_each_line(input, line_bytes_max, |line, read| match read {
        Line::TooLong => errors.push(
            which,
            line,
            format!("line longer than {line_bytes_max} bytes"),
        ),
        Line::Bytes(buffer) => {
            let bytes = buffer.strip_suffix(b"\n").unwrap_or(buffer);
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                errors.push(which, line, "empty line".to_owned());
            } else if bytes.starts_with(b"\xEF\xBB\xBF") {
                errors.push(which, line, BYTE_ORDER_MARK_REASON.to_owned());
            } else {
                each(line, bytes, errors);
            }
        }
    });
    if let Err((_, e)) = read {
        errors.push(Input::Whole, 0, format!("cannot read: {e}"));
    }
}

/// Whose events an engine-event import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFormat {
    /// ZeroMQ captures (SPEC.md §13.2), as `vllm-events` names them; both engines'
    /// layouts are read by either name.
    Vllm,
    /// The same, as `sglang-events` names them.
    Sglang,
    /// Dynamo's RouterEvent lines (SPEC.md §13.7).
    Dynamo,
}

/// `kvroute import vllm-events|sglang-events|dynamo-events CAPTURE --requests LOG`:
/// the engines' events and the requests they served (SPEC.md §13). The trace is held:
/// its events are ordered and ticked from the earliest time of both inputs, and the
/// workers' model comes from the request log, so no event is final before both inputs
/// are read. It is parsed back through validation before any event is handed on, so
/// an accepted import always validates.
#[derive(Debug, Clone)]
pub struct EngineEventsImport {
    pub format: EngineFormat,
    pub capture: PathBuf,
    pub requests: PathBuf,
    pub options: EventsOptions,
}

impl Importer for EngineEventsImport {
    fn name(&self) -> &'static str {
        match self.format {
            EngineFormat::Vllm => "vllm-events",
            EngineFormat::Sglang => "sglang-events",
            EngineFormat::Dynamo => "dynamo-events",
        }
    }

    fn inputs(&self) -> Vec<&Path> {
        vec![&self.capture, &self.requests]
    }

    fn import(
        &self,
        sources: Vec<Source<'_>>,
        sink: &mut dyn FnMut(Event),
    ) -> Result<Imported, ImportError> {
        let [capture, requests] = sources_as(self.command(), sources)?;
        let imported = match self.format {
            EngineFormat::Vllm | EngineFormat::Sglang => {
                import_engine_events(capture, requests, &self.options)
            }
            EngineFormat::Dynamo => import_dynamo_events(capture, requests, &self.options),
        };
        let (trace, report) = imported.map_err(|errors| self.rejected(errors))?;
        let (capture_name, requests_name) = (
            self.capture.display().to_string(),
            self.requests.display().to_string(),
        );
        let workers = trace.workers.len();
        if let Some(nothing) = report.nothing_to_import(workers, &capture_name, &requests_name) {
            return Err(ImportError::Empty(Problem::of_import(
                self.command(),
                nothing,
            )));
        }
        let (head, events) = self.validated(trace)?;
        let mut requests = 0u64;
        for index in events.sorted_order() {
            let event = events.event(index as usize);
            requests += u64::from(matches!(event.kind, EventKind::Request(_)));
            sink(event);
        }
        let counts = vec![
            (requests, "request", "requests"),
            (head.workers.len() as u64, "worker", "workers"),
            (
                events.len() as u64 - requests,
                "cache event",
                "cache events",
            ),
        ];
        Ok(Imported {
            head,
            report: Report {
                counts,
                lines: report.lines(&capture_name),
            },
        })
    }
}

impl EngineEventsImport {
    /// The trace read back from its canonical bytes as they are made, through the
    /// validation every trace meets (SPEC.md §13.4), so that an accepted import always
    /// validates; neither the bytes nor a second typed trace is held, only the
    /// compact events.
    fn validated(&self, trace: Trace) -> Result<(Trace, EventStore), ImportError> {
        let validated = read_trace_compact(CanonicalTraceReader::new(&trace));
        drop(trace);
        validated.map_err(|e| {
            let first = match e {
                ReadTraceError::Invalid(errors) => errors.lines().into_iter().next(),
                ReadTraceError::Io(e) => Some(e.to_string()),
            };
            let reason = format!(
                "the imported trace does not validate: {}",
                first.unwrap_or_default()
            );
            ImportError::Rejected(vec![Problem::of_import(self.command(), reason)])
        })
    }

    /// The import's errors as problems of the input (and line) each names.
    fn rejected(&self, errors: Vec<EventsImportError>) -> ImportError {
        let problem = |e: EventsImportError| match e.input {
            Input::Capture => Problem::at_line(&self.capture, e.line, e.reason),
            Input::Requests => Problem::at_line(&self.requests, e.line, e.reason),
            Input::Whole => Problem::of_import(self.command(), e.reason),
        };
        ImportError::Rejected(errors.into_iter().map(problem).collect())
    }
}

#[cfg(test)]
mod tests;
