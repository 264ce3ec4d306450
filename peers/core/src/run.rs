//! One trace put to a peer over `kvroute-peer/1` (SPEC.md §15) and the peer's answers
//! compared with kvroute's.
//!
//! [`run_peer`] sends the fleet and every event in processing order; at each request it
//! checks the answer's shape, compares the `reuse` answer row by row with kvroute's
//! reuse walk ([`Reference`], classified by the rules of §12 with a [`ChainModel`] as
//! the evidence of what a chain indexer would have rejected) and the `choice` with
//! kvroute's decision under the chosen policy. [`shrunk_first_difference`] cuts a
//! differing trace down, re-running the peer on every candidate.

use crate::chains::{ChainModel, ChainShape};
use crate::classify::{
    full_blocks_view, record, table_header, Cause, Difference, Options, PeerEvidence, Reference,
    Report, Rules, Tally,
};
use crate::protocol::{render, AnswerKinds, Hello, PeerError, PeerProcess};
use crate::shrink::{cut_reproducing, shrink};
use kvroute_core::input::{Event, Trace};
use kvroute_core::output::{canonical_event_bytes, canonical_fleet_members};
use kvroute_core::route::Runner;
use kvroute_core::route::{CEvent, Compiled, Req, Step};
use kvroute_core::Policy;
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

/// How `peer run` drives a peer.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub compare: Options,
    pub timeout: Duration,
    pub expect_version: Option<String>,
    /// The policy whose decisions a `choice` answer is compared with.
    pub policy: Policy,
}

/// The choice table's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChoiceTally {
    pub decisions: u64,
    pub same: u64,
    pub differing: u64,
    /// Differing choices on requests where some reuse row differed too.
    pub reuse_differed: u64,
    /// Differing choices on requests whose reuse rows all agreed (only counted when the
    /// peer answers `reuse`).
    pub reuse_agreed: u64,
}

impl ChoiceTally {
    /// Adds another trace's counts (the sweep's sums).
    pub fn add(&mut self, other: &ChoiceTally) {
        self.decisions += other.decisions;
        self.same += other.same;
        self.differing += other.differing;
        self.reuse_differed += other.reuse_differed;
        self.reuse_agreed += other.reuse_agreed;
    }

    /// The choice table of SPEC.md §15.4: a header naming `policy`, one row named
    /// `name` (`reuse_agreed` shown as `-` unless the peer answers `reuse`).
    pub fn table(&self, policy: Policy, name: &str, answers_reuse: bool) -> String {
        let mut out = format!(
            "{:<26} {:>12} {:>10} {:>10} {:>14} {:>12}\n",
            format!("choice vs {}", policy.name()),
            "decisions",
            "same",
            "differing",
            "reuse_differed",
            "reuse_agreed"
        );
        out.push_str(&format!(
            "{:<26} {:>12} {:>10} {:>10} {:>14} {:>12}\n",
            name,
            self.decisions,
            self.same,
            self.differing,
            self.reuse_differed,
            if answers_reuse {
                self.reuse_agreed.to_string()
            } else {
                "-".into()
            }
        ));
        out
    }
}

/// The first request on which the choices differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceDifference {
    pub request_id: String,
    pub request_seq: u64,
    pub request_tick: u64,
    pub kvroute: Option<String>,
    pub peer: Option<String>,
}

/// What one run of a peer found.
#[derive(Debug, Clone)]
pub struct PeerRun {
    pub hello: Hello,
    pub options: Options,
    pub policy: Policy,
    /// The reuse comparison: one tally, named by the peer (none when it does not
    /// answer `reuse`).
    pub report: Report,
    pub choice: Option<ChoiceTally>,
    pub first_choice: Option<ChoiceDifference>,
}

/// One checked answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `(worker, tokens)`, ascending by worker.
    pub reuse: Vec<(u32, u64)>,
    /// `Some(None)`: the peer would not route.
    pub choice: Option<Option<u32>>,
}

/// Checks an answer's shape (SPEC.md §15.2, message 3); the error is `<path>: <reason>`.
pub fn parse_answer(
    value: &Value,
    seq: u64,
    prompt_tokens: u64,
    workers: &HashMap<&str, u32>,
    kinds: AnswerKinds,
) -> Result<Answer, String> {
    let Some(object) = value.as_object() else {
        return Err(format!("$: expected an object, found {}", render(value)));
    };
    check_answer_header(object, seq)?;
    let mut answer = Answer {
        reuse: Vec::new(),
        choice: None,
    };
    match (object.get("reuse"), kinds.reuse) {
        (Some(_), false) => {
            return Err("$.reuse: present, but the hello did not list \"reuse\"".into())
        }
        (None, true) => return Err("$: missing required member \"reuse\"".into()),
        (None, false) => {}
        (Some(reuse), true) => answer.reuse = parse_reuse(reuse, prompt_tokens, workers)?,
    }
    match (object.get("choice"), kinds.choice) {
        (Some(_), false) => {
            return Err("$.choice: present, but the hello did not list \"choice\"".into())
        }
        (None, true) => return Err("$: missing required member \"choice\"".into()),
        (None, false) => {}
        (Some(Value::Null), true) => answer.choice = Some(None),
        (Some(v), true) => answer.choice = Some(Some(answer_worker(workers, "$.choice", v)?)),
    }
    if let Some(scores) = object.get("scores") {
        check_scores(scores, workers)?;
    }
    Ok(answer)
}

/// Checks an answer's member names, its `type` and that its `seq` is `seq`.
fn check_answer_header(object: &serde_json::Map<String, Value>, seq: u64) -> Result<(), String> {
    for name in object.keys() {
        if !["type", "seq", "reuse", "choice", "scores"].contains(&name.as_str()) {
            return Err(format!(
                "$: unexpected member {}",
                render(&Value::String(name.clone()))
            ));
        }
    }
    let member = |name: &str| {
        object
            .get(name)
            .ok_or_else(|| format!("$: missing required member \"{name}\""))
    };
    let kind = member("type")?;
    if kind.as_str() != Some("answer") {
        return Err(format!(
            "$.type: expected \"answer\", found {}",
            render(kind)
        ));
    }
    let answered = member("seq")?;
    if answered.as_u64() != Some(seq) {
        return Err(format!("$.seq: expected {seq}, found {}", render(answered)));
    }
    Ok(())
}

/// The fleet index of the worker id `v` at `path`.
fn answer_worker(workers: &HashMap<&str, u32>, path: &str, v: &Value) -> Result<u32, String> {
    match v {
        Value::String(id) => workers
            .get(id.as_str())
            .copied()
            .ok_or_else(|| format!("{path}: unknown worker {}", render(v))),
        _ => Err(format!("{path}: expected a worker id, found {}", render(v))),
    }
}

/// An answer's `reuse` rows, ascending by worker; each worker at most once, with 1 to
/// `prompt_tokens` tokens.
fn parse_reuse(
    reuse: &Value,
    prompt_tokens: u64,
    workers: &HashMap<&str, u32>,
) -> Result<Vec<(u32, u64)>, String> {
    let Value::Array(items) = reuse else {
        return Err(format!(
            "$.reuse: expected an array, found {}",
            render(reuse)
        ));
    };
    let mut rows: Vec<(u32, u64)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("$.reuse[{i}]");
        let Some(fields) = item.as_object() else {
            return Err(format!(
                "{path}: expected an object, found {}",
                render(item)
            ));
        };
        if let Some(other) = fields.keys().find(|k| *k != "worker" && *k != "tokens") {
            return Err(format!(
                "{path}: unexpected member {}",
                render(&Value::String(other.clone()))
            ));
        }
        let w = match fields.get("worker") {
            Some(v) => answer_worker(workers, &format!("{path}.worker"), v)?,
            None => return Err(format!("{path}: missing required member \"worker\"")),
        };
        let tokens = reuse_tokens(fields, &path, prompt_tokens)?;
        if rows.iter().any(|&(seen, _)| seen == w) {
            return Err(format!(
                "{path}.worker: repeated worker {}",
                render(&fields["worker"])
            ));
        }
        rows.push((w, tokens));
    }
    rows.sort_unstable();
    Ok(rows)
}

/// The `tokens` of the reuse row at `path`: an integer from 1 to `prompt_tokens`.
fn reuse_tokens(
    fields: &serde_json::Map<String, Value>,
    path: &str,
    prompt_tokens: u64,
) -> Result<u64, String> {
    match fields.get("tokens") {
        Some(v) => match v.as_u64() {
            Some(t) if (1..=prompt_tokens).contains(&t) => Ok(t),
            _ => Err(format!(
                "{path}.tokens: expected an integer from 1 to {prompt_tokens} (prompt_tokens), found {}",
                render(v)
            )),
        },
        None => Err(format!("{path}: missing required member \"tokens\"")),
    }
}

/// Checks an answer's `scores`: an object of integers keyed by known worker ids.
fn check_scores(scores: &Value, workers: &HashMap<&str, u32>) -> Result<(), String> {
    let Value::Object(scores) = scores else {
        return Err(format!(
            "$.scores: expected an object, found {}",
            render(scores)
        ));
    };
    for (id, score) in scores {
        let path = format!("$.scores.{id}");
        answer_worker(workers, &path, &Value::String(id.clone()))?;
        if !(score.is_i64() || score.is_u64()) {
            return Err(format!(
                "{path}: expected an integer, found {}",
                render(score)
            ));
        }
    }
    Ok(())
}

/// Runs the peer `command` on `trace` (already validated): one process, hello, the
/// trace, end.
pub fn run_peer(
    trace: &Trace,
    command: &[OsString],
    options: &RunOptions,
) -> Result<PeerRun, PeerError> {
    let mut peer = PeerProcess::spawn(command, options.timeout)?;
    let hello = peer.hello(
        options.compare.block_tokens,
        options.expect_version.as_deref(),
    )?;
    let run = run_trace(&mut peer, &hello, trace, options)?;
    peer.end()?;
    Ok(run)
}

/// Puts one trace to a peer that has said hello and holds no trace's state (just
/// started, or reset): the fleet, then every event. `options.compare.block_tokens` must
/// be what the hello told the peer.
pub fn run_trace(
    peer: &mut PeerProcess,
    hello: &Hello,
    trace: &Trace,
    options: &RunOptions,
) -> Result<PeerRun, PeerError> {
    let compare = options.compare;
    let view;
    let trace = if compare.full_blocks_only {
        view = full_blocks_view(trace, compare.block_tokens);
        &view
    } else {
        trace
    };
    let compiled = Compiled::new(trace);
    let shape = ChainShape::streamed(&compiled, &withheld(&compiled, compare));
    let workers = compiled.worker_count();
    let worker_index = worker_index(&compiled);
    let mut fleet = Vec::new();
    canonical_fleet_members(trace, &mut fleet);
    peer.fleet(&fleet)?;

    let mut reference = Reference::new(&compiled, &shape, compare).with_peer_models();
    let mut model = ChainModel::new(&compiled, &shape);
    let mut evidence = PeerEvidence::new(workers);
    // kvroute's decisions are only needed to compare choices: a whole policy run per
    // request is not paid for a peer that gives none.
    let mut runner = hello
        .answers
        .choice
        .then(|| Runner::new(&compiled, options.policy));
    let mut found = Found::new(&hello.name);
    let mut answer_dense = vec![0u64; workers];
    let mut bytes = Vec::new();
    // The compiled events are the trace's in processing order, `(tick, seq)` (§3.1).
    let mut in_order: Vec<&Event> = trace.events.iter().collect();
    in_order.sort_by_key(|e| (e.tick, e.seq));
    for (event, source) in compiled.events.iter().zip(in_order) {
        debug_assert_eq!((event.tick, event.seq), (source.tick, source.seq));
        let placement = runner.as_mut().and_then(|r| r.step(event, &mut ()));
        if let Step::Cache { worker, epoch, op } = &event.step {
            if !reference.cache_event(*worker, event.tick, *epoch, op) {
                continue;
            }
            let applied = model.apply(*worker as usize, &shape, op);
            evidence.note(*worker, op, applied);
        }
        bytes.clear();
        canonical_event_bytes(source, &mut bytes);
        let Step::Request(request) = &event.step else {
            peer.event(event.seq, event.tick, &bytes, false)?;
            continue;
        };
        peer.event(event.seq, event.tick, &bytes, true)?;
        let value = peer.answer(event.seq)?;
        let answer = parse_answer(
            &value,
            event.seq,
            request.prompt_tokens,
            &worker_index,
            hello.answers,
        )
        .map_err(|e| peer.fail(format!("answer to seq {}: {e}", event.seq)))?;
        found.requests += 1;
        let place = RequestPlace {
            event,
            compiled: &compiled,
            request,
        };
        let reuse_differed = hello.answers.reuse && {
            crate::densify(&answer.reuse, &mut answer_dense);
            found.compare_reuse(&mut reference, &evidence, &answer_dense, &place)
        };
        if let Some(chosen) = answer.choice {
            let decided = placement.map(|p| p.worker as u32);
            let reuse_answered = hello.answers.reuse;
            found.compare_choice(&place, chosen, decided, reuse_differed, reuse_answered);
        }
    }
    Ok(found.peer_run(options, hello, workers, shape.forked_keys()))
}

/// Each worker's fleet index by its id, as answers name workers.
fn worker_index<'t>(compiled: &Compiled<'t>) -> HashMap<&'t str, u32> {
    compiled
        .worker_ids
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, i as u32))
        .collect()
}

/// One request's place in the trace, for the rows and choices recorded on it.
struct RequestPlace<'a> {
    event: &'a CEvent<'a>,
    compiled: &'a Compiled<'a>,
    request: &'a Req<'a>,
}

/// What a run has found so far: the reuse rows compared, the choices compared, and the
/// first difference of each.
struct Found {
    tally: Tally,
    first: Vec<Difference>,
    choice: ChoiceTally,
    first_choice: Option<ChoiceDifference>,
    requests: u64,
}

impl Found {
    /// Nothing found yet, the reuse tally named `name`.
    fn new(name: &str) -> Self {
        Found {
            tally: Tally::new(name),
            first: Vec::new(),
            choice: ChoiceTally::default(),
            first_choice: None,
            requests: 0,
        }
    }

    /// Records the peer's reuse row (`dense`, by worker) against kvroute's for every
    /// worker; whether any differed.
    fn compare_reuse(
        &mut self,
        reference: &mut Reference,
        evidence: &PeerEvidence,
        dense: &[u64],
        place: &RequestPlace,
    ) -> bool {
        let (event, compiled, request) = (place.event, place.compiled, place.request);
        let kvroute = reference.answer(request);
        let kvroute: Vec<u64> = kvroute.to_vec();
        let mut differed = false;
        for w in 0..compiled.worker_count() {
            let (kv, p) = (kvroute[w], dense[w]);
            let cause =
                (kv != p).then(|| reference.cause(Rules::Positional, evidence, request, w, kv, p));
            differed |= cause.is_some();
            let (tally, first) = (&mut self.tally, &mut self.first);
            record(tally, first, event, compiled, request, w, kv, p, cause);
        }
        differed
    }

    /// Counts the peer's choice `chosen` against kvroute's `decided`, and keeps the first
    /// that differs; a differing choice counts as one where reuse agreed only if the peer
    /// answers `reuse` (`reuse_answered`).
    fn compare_choice(
        &mut self,
        place: &RequestPlace,
        chosen: Option<u32>,
        decided: Option<u32>,
        reuse_differed: bool,
        reuse_answered: bool,
    ) {
        let choice = &mut self.choice;
        choice.decisions += 1;
        if chosen == decided {
            choice.same += 1;
            return;
        }
        choice.differing += 1;
        if reuse_differed {
            choice.reuse_differed += 1;
        } else if reuse_answered {
            choice.reuse_agreed += 1;
        }
        if self.first_choice.is_none() {
            let id = |w: Option<u32>| w.map(|w| place.compiled.worker_ids[w as usize].to_string());
            self.first_choice = Some(ChoiceDifference {
                request_id: place.request.id.to_string(),
                request_seq: place.event.seq,
                request_tick: place.event.tick,
                kvroute: id(decided),
                peer: id(chosen),
            });
        }
    }

    /// The run's result: the reuse tally only if the peer answers `reuse`, the choice
    /// tally only if it answers `choice`.
    fn peer_run(
        self,
        options: &RunOptions,
        hello: &Hello,
        workers: usize,
        forked_keys: usize,
    ) -> PeerRun {
        PeerRun {
            options: options.compare,
            policy: options.policy,
            report: Report {
                workers,
                requests: self.requests,
                forked_keys,
                tallies: if hello.answers.reuse {
                    vec![self.tally]
                } else {
                    Vec::new()
                },
                first: self.first,
            },
            choice: hello.answers.choice.then_some(self.choice),
            first_choice: self.first_choice,
            hello: hello.clone(),
        }
    }
}

/// Which events kvroute does not send: with `withhold_stale`, the cache events its
/// epoch rule drops (a replay of the cache events alone, ahead of the run, since the
/// chain positions the peer can know depend on what it is sent).
pub fn withheld(compiled: &Compiled, options: Options) -> Vec<bool> {
    let mut index = crate::kvroute::KvrouteIndex::new(compiled);
    compiled
        .events
        .iter()
        .map(|event| match &event.step {
            Step::Cache { worker, epoch, op } if options.withhold_stale => {
                use crate::Peer;
                index.apply_cache_event(*worker, event.tick, *epoch, op)
                    == crate::Applied::StaleEpoch
            }
            _ => false,
        })
        .collect()
}

impl PeerRun {
    /// What `peer run --format table` prints (SPEC.md §15.4).
    pub fn table(&self) -> String {
        let o = self.options;
        let mut out =
            format!(
            "peer {} {}: {} requests on {} workers, block_tokens {}{}{}; {} keys not in chains\n",
            self.hello.name,
            self.hello.version,
            self.report.requests,
            self.report.workers,
            o.block_tokens,
            if o.full_blocks_only { ", full blocks only" } else { "" },
            if o.withhold_stale { ", stale events withheld" } else { "" },
            self.report.forked_keys
        );
        if !self.report.tallies.is_empty() {
            out.push_str(&self.report.table());
        }
        if let Some(c) = &self.choice {
            out.push_str(&c.table(self.policy, &self.hello.name, self.hello.answers.reuse));
        }
        out
    }

    /// What `peer run --format json` prints (SPEC.md §15.4), one line.
    pub fn json(&self) -> String {
        let mut value = serde_json::json!({
            "peer": self.hello.name,
            "version": self.hello.version,
            "requests": self.report.requests,
            "workers": self.report.workers,
            "block_tokens": self.options.block_tokens,
        });
        if let Some(t) = self.report.tallies.first() {
            let causes: serde_json::Map<String, Value> = Cause::ALL
                .iter()
                .map(|&c| (c.name().to_string(), Value::from(t.count(c))))
                .collect();
            value["reuse"] = serde_json::json!({
                "rows": t.rows_compared, "differing": t.rows_differing, "causes": causes,
            });
        }
        if let Some(c) = &self.choice {
            let mut choice = serde_json::json!({
                "decisions": c.decisions, "same": c.same, "differing": c.differing,
                "reuse_differed": c.reuse_differed,
            });
            if self.hello.answers.reuse {
                choice["reuse_agreed"] = c.reuse_agreed.into();
            }
            value["choice"] = choice;
        }
        value.to_string()
    }

    /// The new findings among the reuse rows.
    pub fn new_findings(&self) -> u64 {
        self.report.new_findings()
    }
}

/// The header of the reuse table, for callers that compare tables.
pub fn reuse_table_header() -> String {
    table_header()
}

/// Re-runs of one peer command on candidate traces, for shrinking: one process for
/// every candidate when the peer's hello offers `reset` (reset between candidates, as
/// `peer sweep` does, so a shrink of hundreds of candidates does not pay the peer's
/// start-up each time), else one per candidate. A candidate the peer fails on drops
/// that process; the next one starts anew.
struct Rerunner<'a> {
    command: &'a [OsString],
    options: RunOptions,
    live: std::cell::RefCell<Option<(PeerProcess, Hello)>>,
}

impl<'a> Rerunner<'a> {
    fn new(command: &'a [OsString], options: RunOptions) -> Self {
        Rerunner {
            command,
            options,
            live: std::cell::RefCell::new(None),
        }
    }

    fn run(&self, trace: &Trace) -> Option<PeerRun> {
        let live = self.live.borrow_mut().take();
        let (mut peer, hello) = match live {
            Some(session) => session,
            None => {
                let mut peer = PeerProcess::spawn(self.command, self.options.timeout).ok()?;
                let hello = peer
                    .hello(
                        self.options.compare.block_tokens,
                        self.options.expect_version.as_deref(),
                    )
                    .ok()?;
                (peer, hello)
            }
        };
        let run = run_trace(&mut peer, &hello, trace, &self.options).ok()?;
        if hello.reset {
            if peer.reset().is_ok() {
                *self.live.borrow_mut() = Some((peer, hello));
            }
        } else {
            peer.end().ok()?;
        }
        Some(run)
    }
}

impl Drop for Rerunner<'_> {
    fn drop(&mut self) {
        if let Some((peer, _)) = self.live.get_mut().take() {
            // The shrink is over: a peer that fails to say bye is killed by its drop.
            let _ = peer.end();
        }
    }
}

/// The first difference of `run` (the first differing reuse row, else the first
/// differing choice) as a trace cut and shrunk while re-running the peer still shows a
/// difference of the same kind, at most `budget` peer runs; `None` when `run` has no
/// difference. A candidate on which the peer fails counts as not showing it.
pub fn shrunk_first_difference(
    trace: &Trace,
    command: &[OsString],
    options: &RunOptions,
    run: &PeerRun,
    budget: usize,
) -> Option<Trace> {
    if let Some(difference) = run.report.first.first() {
        return Some(shrunk_difference(
            trace, command, options, difference, budget,
        ));
    }
    run.first_choice.as_ref()?;
    let (base, exact) = shrink_base(trace, options);
    let rerunner = Rerunner::new(command, exact);
    let shows = |t: &Trace| {
        rerunner
            .run(t)
            .is_some_and(|r| r.choice.is_some_and(|c| c.differing > 0))
    };
    Some(shrink(base, shows, budget))
}

/// The differing reuse row `difference` of a run of `trace` under `options` (a row of
/// `run.report.first`, or a sweep's first new finding) as a trace cut and shrunk while
/// re-running the peer still shows a row of the same cause, at most `budget` peer runs.
pub fn shrunk_difference(
    trace: &Trace,
    command: &[OsString],
    options: &RunOptions,
    difference: &Difference,
    budget: usize,
) -> Trace {
    let (base, exact) = shrink_base(trace, options);
    let rerunner = Rerunner::new(command, exact);
    let cause = difference.cause;
    let shows = |t: &Trace| {
        rerunner
            .run(t)
            .is_some_and(|r| r.report.tallies.first().is_some_and(|t| t.count(cause) > 0))
    };
    let cut = cut_reproducing(&base, difference, shows).unwrap_or(base);
    shrink(cut, shows, budget)
}

/// The trace a shrink starts from (cut to whole blocks when `options` says so) and the
/// options its candidates are run with (the base is already cut: cutting again would
/// change nothing).
fn shrink_base(trace: &Trace, options: &RunOptions) -> (Trace, RunOptions) {
    let base = if options.compare.full_blocks_only {
        full_blocks_view(trace, options.compare.block_tokens)
    } else {
        trace.clone()
    };
    let exact = RunOptions {
        compare: Options {
            full_blocks_only: false,
            ..options.compare
        },
        ..options.clone()
    };
    (base, exact)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(value: Value, kinds: AnswerKinds) -> Result<Answer, String> {
        let workers: HashMap<&str, u32> = [("w0", 0), ("w1", 1)].into_iter().collect();
        parse_answer(&value, 41, 100, &workers, kinds)
    }

    const REUSE: AnswerKinds = AnswerKinds {
        reuse: true,
        choice: false,
    };
    const BOTH: AnswerKinds = AnswerKinds {
        reuse: true,
        choice: true,
    };

    #[test]
    fn a_good_answer_is_read_sorted_by_worker() {
        let answer = check(
            json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w1", "tokens": 100},
                {"worker": "w0", "tokens": 3}], "choice": null, "scores": {"w0": -2}}),
            BOTH,
        )
        .unwrap();
        assert_eq!(answer.reuse, vec![(0, 3), (1, 100)]);
        assert_eq!(answer.choice, Some(None));
    }

    /// Checks that each answer is refused with its path and reason.
    fn assert_refused(cases: Vec<(Value, AnswerKinds, &str)>) {
        for (value, kinds, expected) in cases {
            assert_eq!(
                check(value.clone(), kinds).unwrap_err(),
                expected,
                "{value}"
            );
        }
    }

    #[test]
    fn each_bad_answer_names_its_path_and_reason() {
        assert_refused(vec![
            (json!([1]), REUSE, "$: expected an object, found [1]"),
            (
                json!({"type": "answer", "seq": 41, "reuse": [], "extra": 1}),
                REUSE,
                "$: unexpected member \"extra\"",
            ),
            (
                json!({"type": "ready", "seq": 41}),
                REUSE,
                "$.type: expected \"answer\", found \"ready\"",
            ),
            (
                json!({"type": "answer", "seq": 40, "reuse": []}),
                REUSE,
                "$.seq: expected 41, found 40",
            ),
            (
                json!({"type": "answer", "seq": 41}),
                REUSE,
                "$: missing required member \"reuse\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [], "choice": "w0"}),
                REUSE,
                "$.choice: present, but the hello did not list \"choice\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": []}),
                BOTH,
                "$: missing required member \"choice\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [], "choice": "w7"}),
                BOTH,
                "$.choice: unknown worker \"w7\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [], "scores": {"w0": 1.5}}),
                REUSE,
                "$.scores.w0: expected an integer, found 1.5",
            ),
        ]);
    }

    #[test]
    fn each_bad_reuse_row_names_its_path_and_reason() {
        assert_refused(vec![
            (
                json!({"type": "answer", "seq": 41, "reuse": {}}),
                REUSE,
                "$.reuse: expected an array, found {}",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w9", "tokens": 1}]}),
                REUSE,
                "$.reuse[0].worker: unknown worker \"w9\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": 0, "tokens": 1}]}),
                REUSE,
                "$.reuse[0].worker: expected a worker id, found 0",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w0", "tokens": 101}]}),
                REUSE,
                "$.reuse[0].tokens: expected an integer from 1 to 100 (prompt_tokens), found 101",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w0", "tokens": 0}]}),
                REUSE,
                "$.reuse[0].tokens: expected an integer from 1 to 100 (prompt_tokens), found 0",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w0", "tokens": 1},
                {"worker": "w0", "tokens": 2}]}),
                REUSE,
                "$.reuse[1].worker: repeated worker \"w0\"",
            ),
            (
                json!({"type": "answer", "seq": 41, "reuse": [{"worker": "w0"}]}),
                REUSE,
                "$.reuse[0]: missing required member \"tokens\"",
            ),
        ]);
    }
}
