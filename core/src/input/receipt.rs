//! The one reader of a `kvroute-receipt/1` receipt (SPEC.md §6), in either layout: the
//! canonical JSON document or its JSON Lines form (§6.4). It streams: a JSON receipt
//! goes through one serde pass, a JSON Lines receipt a line at a time, and each element
//! of a run (a decision, a log entry, the metrics) is handed to a [`ReceiptSink`] as soon
//! as it is parsed, in the caller's own type, then forgotten. What the reader keeps is
//! the receipt's digests and its runs' policies; the sink keeps what it needs.
//!
//! Elements a sink does not want ([`ReceiptSink::wants`]) are skipped unparsed in a JSON
//! receipt. In a canonical run object `decisions` comes before `policy` (members are
//! sorted), so a JSON run's policy is known only at its end ([`ReceiptSink::run_end`]);
//! a JSON Lines line names its policy beside its element. Problems are named by the
//! serde error's line and column (JSON) or by line number (JSON Lines); the caller adds
//! the file's name.

use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};
use serde::Deserialize;
use std::fmt;
use std::io::BufRead;

/// The `format` of a receipt (and the `receipt_format` of its JSON Lines form).
pub const RECEIPT_FORMAT: &str = "kvroute-receipt/1";
/// The `format` of a receipt's JSON Lines form (SPEC.md §6.4).
pub const STREAM_FORMAT: &str = "kvroute-receipt-stream/1";
/// How a canonical receipt starts (its members are sorted, `format` first).
pub const RECEIPT_HEAD: &[u8] = br#"{"format":"kvroute-receipt/1""#;
/// How a JSON Lines receipt starts: its first line's first member.
pub const STREAM_HEAD: &[u8] = br#"{"format":"kvroute-receipt-stream/1""#;

/// The two ways a receipt is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One JSON document (`replay --format json`).
    Json,
    /// JSON Lines (`replay --format jsonl`, SPEC.md §6.4).
    JsonLines,
}

impl Layout {
    /// The layout of a receipt whose first bytes are `head`: JSON Lines when its first
    /// line starts as that form's does, JSON otherwise.
    pub fn of_head(head: &[u8]) -> Layout {
        if head.starts_with(STREAM_HEAD) {
            Layout::JsonLines
        } else {
            Layout::Json
        }
    }
}

/// The members of a run that hold elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    CacheLog,
    Decisions,
    Metrics,
    ObservationLog,
}

impl Member {
    pub fn name(self) -> &'static str {
        match self {
            Member::CacheLog => "cache_log",
            Member::Decisions => "decisions",
            Member::Metrics => "metrics",
            Member::ObservationLog => "observation_log",
        }
    }
}

/// Where an element was read: its run (receipt order, from 0), its index in that run's
/// member, and in a JSON Lines receipt its line (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub run: usize,
    pub index: usize,
    pub line: Option<usize>,
}

/// What the reader keeps of a receipt read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptOutline {
    pub layout: Layout,
    pub trace_digest: String,
    pub receipt_digest: String,
    /// Each run's policy, in receipt order.
    pub policies: Vec<String>,
}

/// Takes a receipt's elements as they are read. Each element type is the caller's own
/// (serde's messages name its fields); a sink that does not want a member gives it
/// [`IgnoredAny`] and returns `false` from [`ReceiptSink::wants`]. An `Err` from a
/// method stops the reading with that message, as it is.
pub trait ReceiptSink {
    type Decision: DeserializeOwned;
    type CacheLogEntry: DeserializeOwned;
    type ObservationLogEntry: DeserializeOwned;
    type Metrics: DeserializeOwned;

    /// Whether the elements of `member` in run `run` are parsed and handed over;
    /// `policy` is the run's when it is known yet (always in JSON Lines).
    fn wants(&self, member: Member, run: usize, policy: Option<&str>) -> bool;

    fn decision(&mut self, place: Place, decision: Self::Decision) -> Result<(), String> {
        let _ = (place, decision);
        Ok(())
    }
    fn cache_log(&mut self, place: Place, entry: Self::CacheLogEntry) -> Result<(), String> {
        let _ = (place, entry);
        Ok(())
    }
    fn observation_log(
        &mut self,
        place: Place,
        entry: Self::ObservationLogEntry,
    ) -> Result<(), String> {
        let _ = (place, entry);
        Ok(())
    }
    fn metrics(&mut self, run: usize, metrics: Self::Metrics) -> Result<(), String> {
        let _ = (run, metrics);
        Ok(())
    }
    /// Run `run` has no more elements; its policy.
    fn run_end(&mut self, run: usize, policy: &str) -> Result<(), String> {
        let _ = (run, policy);
        Ok(())
    }
}

/// Reads a receipt in the layout its first bytes show ([`Layout::of_head`]); a receipt
/// that starts with a byte order mark is named as such.
pub fn read<S: ReceiptSink>(
    mut reader: impl BufRead,
    sink: &mut S,
) -> Result<ReceiptOutline, String> {
    let head = reader
        .fill_buf()
        .map_err(|e| format!("cannot read it: {e}"))?;
    // Named rather than left to the parser, which would only say it expected a value.
    if head.starts_with(b"\xEF\xBB\xBF") {
        return Err(
            "the receipt starts with a UTF-8 byte order mark (EF BB BF), which JSON \
                    text must not carry"
                .to_owned(),
        );
    }
    let layout = Layout::of_head(head);
    read_layout(reader, layout, sink)
}

/// Reads a receipt written in `layout`.
pub fn read_layout<S: ReceiptSink>(
    reader: impl BufRead,
    layout: Layout,
    sink: &mut S,
) -> Result<ReceiptOutline, String> {
    match layout {
        Layout::Json => read_json(reader, sink),
        Layout::JsonLines => read_lines(reader, sink),
    }
}

/// The reading's state inside serde's visitors: the sink, the policies read so far and
/// a sink's own error (returned as it is, without serde's position).
struct Ctx<'s, S> {
    sink: &'s mut S,
    policies: Vec<String>,
    sink_error: Option<String>,
}

impl<S> Ctx<'_, S> {
    /// Keeps a sink's error and gives serde one that stops the parse.
    fn stop<E: serde::de::Error>(&mut self, message: String) -> E {
        self.sink_error = Some(message);
        E::custom("stopped by the receipt's reader")
    }
}

fn read_json<S: ReceiptSink>(reader: impl BufRead, sink: &mut S) -> Result<ReceiptOutline, String> {
    let mut ctx = Ctx {
        sink,
        policies: Vec::new(),
        sink_error: None,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = ReceiptSeed { ctx: &mut ctx }
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top));
    let top = match (parsed, ctx.sink_error.take()) {
        (_, Some(message)) => return Err(message),
        (Err(e), None) => return Err(e.to_string()),
        (Ok(top), None) => top,
    };
    if top.format.as_deref() != Some(RECEIPT_FORMAT) {
        return Err(format!("its format is not {RECEIPT_FORMAT:?}"));
    }
    let receipt_digest = top.receipt_digest.ok_or("no receipt_digest")?;
    let trace_digest = top.trace_digest.ok_or("no trace_digest")?;
    Ok(ReceiptOutline {
        layout: Layout::Json,
        trace_digest,
        receipt_digest,
        policies: ctx.policies,
    })
}

/// The receipt object's own members, as read.
#[derive(Default)]
struct Top {
    format: Option<String>,
    receipt_digest: Option<String>,
    trace_digest: Option<String>,
    runs: bool,
}

struct ReceiptSeed<'c, 's, S> {
    ctx: &'c mut Ctx<'s, S>,
}

impl<'de, S: ReceiptSink> DeserializeSeed<'de> for ReceiptSeed<'_, '_, S> {
    type Value = Top;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top, D::Error> {
        d.deserialize_map(self)
    }
}

/// A string member given once.
fn once<'de, A: MapAccess<'de>>(
    slot: &mut Option<String>,
    name: &'static str,
    map: &mut A,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

impl<'de, S: ReceiptSink> Visitor<'de> for ReceiptSeed<'_, '_, S> {
    type Value = Top;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a receipt object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut top = Top::default();
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "format" => once(&mut top.format, "format", &mut map)?,
                "receipt_digest" => once(&mut top.receipt_digest, "receipt_digest", &mut map)?,
                "trace_digest" => once(&mut top.trace_digest, "trace_digest", &mut map)?,
                "runs" if top.runs => return Err(A::Error::duplicate_field("runs")),
                "runs" => {
                    map.next_value_seed(RunsSeed {
                        ctx: &mut *self.ctx,
                    })?;
                    top.runs = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // A missing member is named with the place the object ends; a document of
        // another format is named as such once it is read (by the caller of the parse).
        if top.format.as_deref() == Some(RECEIPT_FORMAT) {
            if top.trace_digest.is_none() {
                return Err(A::Error::missing_field("trace_digest"));
            }
            if !top.runs {
                return Err(A::Error::missing_field("runs"));
            }
            if top.receipt_digest.is_none() {
                return Err(A::Error::missing_field("receipt_digest"));
            }
        }
        Ok(top)
    }
}

struct RunsSeed<'c, 's, S> {
    ctx: &'c mut Ctx<'s, S>,
}

impl<'de, S: ReceiptSink> DeserializeSeed<'de> for RunsSeed<'_, '_, S> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: ReceiptSink> Visitor<'de> for RunsSeed<'_, '_, S> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of runs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let run = self.ctx.policies.len();
            let seed = RunSeed {
                ctx: &mut *self.ctx,
                run,
            };
            let Some(policy) = seq.next_element_seed(seed)? else {
                return Ok(());
            };
            if let Err(message) = self.ctx.sink.run_end(run, &policy) {
                return Err(self.ctx.stop(message));
            }
            self.ctx.policies.push(policy);
        }
    }
}

/// One run object: its elements to the sink; its policy.
struct RunSeed<'c, 's, S> {
    ctx: &'c mut Ctx<'s, S>,
    run: usize,
}

impl<'de, S: ReceiptSink> DeserializeSeed<'de> for RunSeed<'_, '_, S> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_map(self)
    }
}

/// The members a run object must have, in canonical order.
const RUN_MEMBERS: [&str; 5] = [
    "cache_log",
    "decisions",
    "metrics",
    "observation_log",
    "policy",
];

impl<'de, S: ReceiptSink> Visitor<'de> for RunSeed<'_, '_, S> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a run object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        let mut policy: Option<String> = None;
        let mut seen = [false; RUN_MEMBERS.len()];
        while let Some(name) = map.next_key::<String>()? {
            let Some(slot) = RUN_MEMBERS.iter().position(|m| *m == name) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if seen[slot] {
                return Err(A::Error::duplicate_field(RUN_MEMBERS[slot]));
            }
            seen[slot] = true;
            let member = match slot {
                0 => Member::CacheLog,
                1 => Member::Decisions,
                2 => Member::Metrics,
                3 => Member::ObservationLog,
                _ => {
                    policy = Some(map.next_value()?);
                    continue;
                }
            };
            if !self.ctx.sink.wants(member, self.run, policy.as_deref()) {
                map.next_value::<IgnoredAny>()?;
            } else if member == Member::Metrics {
                let metrics: S::Metrics = map.next_value()?;
                if let Err(message) = self.ctx.sink.metrics(self.run, metrics) {
                    return Err(self.ctx.stop(message));
                }
            } else {
                map.next_value_seed(ElementsSeed {
                    ctx: &mut *self.ctx,
                    run: self.run,
                    member,
                })?;
            }
        }
        if let Some(missing) = seen.iter().position(|seen| !seen) {
            return Err(A::Error::missing_field(RUN_MEMBERS[missing]));
        }
        Ok(policy.unwrap_or_default())
    }
}

/// A run's array of cache log entries, decisions or observation log entries.
struct ElementsSeed<'c, 's, S> {
    ctx: &'c mut Ctx<'s, S>,
    run: usize,
    member: Member,
}

impl<'de, S: ReceiptSink> DeserializeSeed<'de> for ElementsSeed<'_, '_, S> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: ReceiptSink> Visitor<'de> for ElementsSeed<'_, '_, S> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let place = Place {
                run: self.run,
                index,
                line: None,
            };
            let handed = match self.member {
                Member::Decisions => match seq.next_element::<S::Decision>()? {
                    Some(decision) => Some(self.ctx.sink.decision(place, decision)),
                    None => None,
                },
                Member::CacheLog => match seq.next_element::<S::CacheLogEntry>()? {
                    Some(entry) => Some(self.ctx.sink.cache_log(place, entry)),
                    None => None,
                },
                Member::ObservationLog => match seq.next_element::<S::ObservationLogEntry>()? {
                    Some(entry) => Some(self.ctx.sink.observation_log(place, entry)),
                    None => None,
                },
                Member::Metrics => None,
            };
            match handed {
                None => return Ok(()),
                Some(Err(message)) => return Err(self.ctx.stop(message)),
                Some(Ok(())) => index += 1,
            }
        }
    }
}

/// The members of one JSON Lines receipt line (SPEC.md §6.4): the head's, one element's
/// beside its `policy`, or the last line's `receipt_digest`.
#[derive(Deserialize)]
struct StreamLine<D, C, O, M> {
    format: Option<IgnoredAny>,
    receipt_format: Option<String>,
    trace_digest: Option<String>,
    policy: Option<String>,
    decisions: Option<D>,
    cache_log: Option<C>,
    observation_log: Option<O>,
    metrics: Option<M>,
    receipt_digest: Option<String>,
}

type LineOf<S> = StreamLine<
    <S as ReceiptSink>::Decision,
    <S as ReceiptSink>::CacheLogEntry,
    <S as ReceiptSink>::ObservationLogEntry,
    <S as ReceiptSink>::Metrics,
>;

impl<D, C, O, M> StreamLine<D, C, O, M> {
    fn elements(&self) -> usize {
        usize::from(self.decisions.is_some())
            + usize::from(self.cache_log.is_some())
            + usize::from(self.observation_log.is_some())
            + usize::from(self.metrics.is_some())
    }
}

/// Why a JSON Lines receipt line did not parse: two element members beside `policy` is
/// said as such, since which of them failed first is an accident of their order.
fn line_problem(line: &[u8], error: &serde_json::Error) -> String {
    #[derive(Deserialize)]
    struct Members {
        policy: Option<IgnoredAny>,
        decisions: Option<IgnoredAny>,
        cache_log: Option<IgnoredAny>,
        observation_log: Option<IgnoredAny>,
        metrics: Option<IgnoredAny>,
    }
    match serde_json::from_slice::<Members>(line) {
        Ok(m)
            if m.policy.is_some()
                && [&m.decisions, &m.cache_log, &m.observation_log, &m.metrics]
                    .iter()
                    .filter(|member| member.is_some())
                    .count()
                    > 1 =>
        {
            "not one member beside policy".to_owned()
        }
        _ => error.to_string(),
    }
}

/// The runs of a JSON Lines receipt as its lines make them: a new run wherever a line
/// names another policy than the line before.
struct LineRuns {
    policies: Vec<String>,
    /// How many elements of each member the current run has had.
    counts: [usize; 4],
    has_metrics: bool,
    /// The first run read without a metrics line.
    without_metrics: Option<String>,
}

impl LineRuns {
    fn end_run<S: ReceiptSink>(&mut self, sink: &mut S) -> Result<(), String> {
        let Some(policy) = self.policies.last() else {
            return Ok(());
        };
        if !self.has_metrics && self.without_metrics.is_none() {
            self.without_metrics = Some(policy.clone());
        }
        sink.run_end(self.policies.len() - 1, policy)
    }

    /// The run of a line of `policy`, starting a new one when the policy changes.
    fn run_of<S: ReceiptSink>(&mut self, policy: &str, sink: &mut S) -> Result<usize, String> {
        if self.policies.last().map(String::as_str) != Some(policy) {
            self.end_run(sink)?;
            self.policies.push(policy.to_owned());
            self.counts = [0; 4];
            self.has_metrics = false;
        }
        Ok(self.policies.len() - 1)
    }
}

fn read_lines<S: ReceiptSink>(
    reader: impl BufRead,
    sink: &mut S,
) -> Result<ReceiptOutline, String> {
    let mut runs = LineRuns {
        policies: Vec::new(),
        counts: [0; 4],
        has_metrics: false,
        without_metrics: None,
    };
    let mut head: Option<Option<String>> = None;
    let mut receipt_digest = None;
    for (index, line) in reader.split(b'\n').enumerate() {
        let number = index + 1;
        let line = line.map_err(|e| format!("line {number}: cannot read it: {e}"))?;
        if line.is_empty() {
            continue;
        }
        let parsed: LineOf<S> = serde_json::from_slice(&line)
            .map_err(|e| format!("line {number}: {}", line_problem(&line, &e)))?;
        if head.is_none() {
            if parsed.receipt_format.as_deref() != Some(RECEIPT_FORMAT) {
                return Err(format!(
                    "line {number}: its receipt_format is not {RECEIPT_FORMAT:?}"
                ));
            }
            head = Some(parsed.trace_digest);
            continue;
        }
        if parsed.format.is_some() {
            return Err(format!("line {number}: a second head"));
        }
        if parsed.receipt_digest.is_some() {
            receipt_digest = parsed.receipt_digest;
            continue;
        }
        line_element(parsed, number, &mut runs, sink)?;
    }
    runs.end_run(sink)?;
    if let Some(policy) = runs.without_metrics {
        return Err(format!("the {policy} run has no metrics line"));
    }
    let trace_digest = head.flatten().ok_or("line 1: no trace_digest")?;
    let receipt_digest =
        receipt_digest.ok_or("no last line with the receipt_digest: the receipt is cut short")?;
    Ok(ReceiptOutline {
        layout: Layout::JsonLines,
        trace_digest,
        receipt_digest,
        policies: runs.policies,
    })
}

/// Hands the one element of line `number` to the sink.
fn line_element<S: ReceiptSink>(
    line: LineOf<S>,
    number: usize,
    runs: &mut LineRuns,
    sink: &mut S,
) -> Result<(), String> {
    let elements = line.elements();
    let Some(policy) = line.policy else {
        return Err(format!("line {number}: no policy"));
    };
    if elements != 1 {
        return Err(format!("line {number}: not one member beside policy"));
    }
    let run = runs.run_of(&policy, sink)?;
    let member = if line.metrics.is_some() {
        runs.has_metrics = true;
        Member::Metrics
    } else if line.decisions.is_some() {
        Member::Decisions
    } else if line.cache_log.is_some() {
        Member::CacheLog
    } else {
        Member::ObservationLog
    };
    let counted = &mut runs.counts[member as usize];
    let at = Place {
        run,
        index: *counted,
        line: Some(number),
    };
    *counted += 1;
    if !sink.wants(member, run, Some(&policy)) {
        return Ok(());
    }
    match (
        line.metrics,
        line.decisions,
        line.cache_log,
        line.observation_log,
    ) {
        (Some(metrics), ..) => sink.metrics(run, metrics),
        (_, Some(decision), ..) => sink.decision(at, decision),
        (_, _, Some(entry), _) => sink.cache_log(at, entry),
        (_, _, _, Some(entry)) => sink.observation_log(at, entry),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::compiled::Compiled;
    use crate::{parse_trace, replay, LAB_TRACE_JSON};
    use serde_json::Value;

    /// Every element handed over, with where it was read (lines left out: only JSON
    /// Lines has them).
    #[derive(Default)]
    struct Everything {
        read: Vec<(Member, usize, usize, Value)>,
        ends: Vec<(usize, String)>,
    }

    impl ReceiptSink for Everything {
        type Decision = Value;
        type CacheLogEntry = Value;
        type ObservationLogEntry = Value;
        type Metrics = Value;
        fn wants(&self, _: Member, _: usize, _: Option<&str>) -> bool {
            true
        }
        fn decision(&mut self, at: Place, decision: Value) -> Result<(), String> {
            self.read
                .push((Member::Decisions, at.run, at.index, decision));
            Ok(())
        }
        fn cache_log(&mut self, at: Place, entry: Value) -> Result<(), String> {
            self.read.push((Member::CacheLog, at.run, at.index, entry));
            Ok(())
        }
        fn observation_log(&mut self, at: Place, entry: Value) -> Result<(), String> {
            self.read
                .push((Member::ObservationLog, at.run, at.index, entry));
            Ok(())
        }
        fn metrics(&mut self, run: usize, metrics: Value) -> Result<(), String> {
            self.read.push((Member::Metrics, run, 0, metrics));
            Ok(())
        }
        fn run_end(&mut self, run: usize, policy: &str) -> Result<(), String> {
            self.ends.push((run, policy.to_owned()));
            Ok(())
        }
    }

    fn lab_receipts() -> (Vec<u8>, Vec<u8>) {
        let json = crate::replay_bytes(LAB_TRACE_JSON.as_bytes()).unwrap();
        let trace = parse_trace(LAB_TRACE_JSON.as_bytes()).unwrap();
        let digest = crate::output::canonical::trace_digest(&trace);
        let mut lines = Vec::new();
        replay::write_jsonl(&Compiled::new(&trace), &digest, &mut lines).unwrap();
        (json, lines)
    }

    /// Sorted by member, run and index: a JSON run lists its members in name order, a
    /// JSON Lines run its metrics before its observations, so only the order within a
    /// member is the same.
    fn sorted(mut read: Vec<(Member, usize, usize, Value)>) -> Vec<(Member, usize, usize, Value)> {
        read.sort_by_key(|(member, run, index, _)| (member.name(), *run, *index));
        read
    }

    #[test]
    fn both_layouts_hand_over_the_same_elements_and_outline() {
        let (json, lines) = lab_receipts();
        let (mut from_json, mut from_lines) = (Everything::default(), Everything::default());
        let json_outline = read(&json[..], &mut from_json).unwrap();
        let lines_outline = read(&lines[..], &mut from_lines).unwrap();
        assert_eq!(json_outline.layout, Layout::Json);
        assert_eq!(lines_outline.layout, Layout::JsonLines);
        assert_eq!(json_outline.receipt_digest, lines_outline.receipt_digest);
        assert_eq!(json_outline.trace_digest, lines_outline.trace_digest);
        assert_eq!(json_outline.policies, lines_outline.policies);
        assert_eq!(json_outline.policies.len(), 4);
        let receipt: Value = serde_json::from_slice(&json).unwrap();
        let decisions = receipt["runs"][2]["decisions"].as_array().unwrap();
        assert!(from_json.read.contains(&(
            Member::Decisions,
            2,
            decisions.len() - 1,
            decisions[decisions.len() - 1].clone()
        )));
        assert_eq!(from_json.ends, from_lines.ends);
        assert_eq!(sorted(from_json.read), sorted(from_lines.read));
    }

    /// Skips every element it is given the choice of, and stops at the second decision
    /// of run 1.
    struct Stops {
        decisions: usize,
    }

    impl ReceiptSink for Stops {
        type Decision = IgnoredAny;
        type CacheLogEntry = IgnoredAny;
        type ObservationLogEntry = IgnoredAny;
        type Metrics = IgnoredAny;
        fn wants(&self, member: Member, run: usize, _: Option<&str>) -> bool {
            member == Member::Decisions && run == 1
        }
        fn decision(&mut self, at: Place, _: IgnoredAny) -> Result<(), String> {
            self.decisions += 1;
            match at.index {
                1 => Err(format!(
                    "stopped at decision {} of run {}",
                    at.index, at.run
                )),
                _ => Ok(()),
            }
        }
    }

    #[test]
    fn a_sinks_error_stops_the_reading_and_is_returned_as_it_is() {
        let (json, lines) = lab_receipts();
        for receipt in [json, lines] {
            let mut sink = Stops { decisions: 0 };
            let error = read(&receipt[..], &mut sink).unwrap_err();
            assert_eq!(error, "stopped at decision 1 of run 1");
            assert_eq!(sink.decisions, 2);
        }
    }

    #[test]
    fn a_broken_receipt_is_named_by_its_place() {
        let (json, lines) = lab_receipts();
        let mut sink = Everything::default();
        let cut = &json[..json.len() / 2];
        assert!(read(cut, &mut sink)
            .unwrap_err()
            .starts_with("EOF while parsing"));
        let no_metrics =
            String::from_utf8(json.clone())
                .unwrap()
                .replacen("\"metrics\":", "\"metrix\":", 1);
        let error = read(no_metrics.as_bytes(), &mut sink).unwrap_err();
        assert!(error.starts_with("missing field `metrics`"), "{error}");
        let no_digest = String::from_utf8(json.clone()).unwrap().replacen(
            "\"trace_digest\":",
            "\"trace_digest_\":",
            1,
        );
        let error = read(no_digest.as_bytes(), &mut sink).unwrap_err();
        let end = no_digest.len();
        assert_eq!(
            error,
            format!("missing field `trace_digest` at line 1 column {end}")
        );
        let mut text = String::from_utf8(lines).unwrap();
        let last = text.trim_end().rfind('\n').unwrap();
        text.truncate(last + 1);
        let error = read(text.as_bytes(), &mut sink).unwrap_err();
        assert_eq!(
            error,
            "no last line with the receipt_digest: the receipt is cut short"
        );
        let two = text.replacen("\n{\"cache_log\":", "\n{\"metrics\":{},\"cache_log\":", 1);
        let error = read(two.as_bytes(), &mut sink).unwrap_err();
        assert_eq!(error, "line 2: not one member beside policy");
    }
}
