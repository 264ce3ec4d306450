//! SPEC §6, the receipt (`kvroute-receipt/1`): each element (a cache log entry, a
//! decision with its rows, a metrics object, an observation log entry) is built as a
//! small JSON tree and written by the RFC 8785 writer of [`crate::jcs`]; the bytes
//! between elements are the receipt's own structure, written the same way. The whole
//! receipt is produced in byte order (§6.1: members sorted, so a run is `cache_log`,
//! `decisions`, `metrics`, `observation_log`, `policy`), one element at a time, and
//! hashed as it goes for `receipt_digest`; no element is kept after it is handed out.
//! Keys, tenants, models and adapters are never written (§6): rows name workers only.

use std::fmt::Write;
use std::ops::ControlFlow;

use sha2::{Digest, Sha256};

use crate::candidates::Row;
use crate::jcs::{self, Json};
use crate::model::{EventKind, StaleRule, Trace};
use crate::policies::receipt_policies;
use crate::run::{
    in_order, CacheLogEntry, Decision, Metrics, ObservationLogEntry, Outcome, Router,
};
use crate::{ReceiptPiece, Streamed};

pub const FORMAT: &str = "kvroute-receipt/1";

// The element trees list their members in byte order, the order they are written in,
// so that the writer finds them sorted and need not sort them (it would if they were not).

fn row_tree<'a>(row: &'a Row, ids: &[&'a str]) -> Json<'a> {
    Json::Object(vec![
        ("active_decode", Json::Int(row.active_decode)),
        ("after_milli", Json::Int(row.after_milli)),
        ("cost_milli", Json::Int(row.cost_milli)),
        (
            "dominated_by",
            Json::opt_str(row.dominated_by.map(|w| ids[w])),
        ),
        ("dominated_count", Json::Int(row.dominated_count)),
        ("eligible", Json::Bool(row.eligible)),
        ("queued_prefill", Json::Int(row.queued_prefill)),
        (
            "reasons",
            Json::Array(row.reasons.iter().map(|r| Json::Str(r)).collect()),
        ),
        ("recomputed", Json::Int(row.recomputed)),
        ("reuse", Json::Int(row.reuse)),
        ("work_milli", Json::Int(row.work_milli)),
        ("worker", Json::Str(ids[row.worker])),
    ])
}

/// A decision of §6 as a tree.
pub fn decision_tree<'a>(d: &'a Decision, ids: &[&'a str]) -> Json<'a> {
    Json::Object(vec![
        (
            "candidates",
            Json::Array(d.candidates.iter().map(|r| row_tree(r, ids)).collect()),
        ),
        ("chosen", Json::opt_str(d.chosen.map(|w| ids[w]))),
        ("margin_milli", Json::Int(d.margin_milli)),
        ("request", Json::Str(&d.request)),
        ("route_kind", Json::Str(d.route_kind)),
        ("seq", Json::Int(d.seq)),
        ("tick", Json::Int(d.tick)),
        ("tie_count", Json::Int(d.tie_count)),
    ])
}

/// A cache log entry; `stale_mutations` only under `key_epoch` (§6).
pub fn cache_entry_tree<'a>(e: &CacheLogEntry, ids: &[&'a str], key_epoch: bool) -> Json<'a> {
    let mut members = vec![
        ("epoch", Json::Int(e.epoch)),
        ("op", Json::Str(e.op)),
        ("outcome", Json::Str(e.outcome.outcome)),
        ("seq", Json::Int(e.seq)),
    ];
    if key_epoch {
        members.push(("stale_mutations", Json::Int(e.outcome.stale_mutations)));
    }
    members.push(("tick", Json::Int(e.tick)));
    members.push(("worker", Json::Str(ids[e.worker])));
    Json::Object(members)
}

/// An observation log entry (§6).
pub fn observation_tree<'a>(e: &ObservationLogEntry, ids: &[&'a str]) -> Json<'a> {
    Json::Object(vec![
        ("observed_tick", Json::Int(e.observed_tick)),
        ("outcome", Json::Str(e.outcome)),
        ("seq", Json::Int(e.seq)),
        ("tick", Json::Int(e.tick)),
        ("worker", Json::Str(ids[e.worker])),
    ])
}

/// The metrics object of §6.2; the later metrics only when present.
pub fn metrics_tree(m: &Metrics) -> Json<'static> {
    let mut members = vec![
        ("routed", Json::Int(m.routed)),
        ("rejected", Json::Int(m.rejected)),
        ("cache_hits", Json::Int(m.cache_hits)),
        ("reused_tokens", Json::Int(m.reused_tokens)),
        ("recomputed_tokens", Json::Int(m.recomputed_tokens)),
        ("route_churn", Json::Int(m.route_churn)),
        ("load_skew_milli", Json::Int(m.load_skew_milli)),
        (
            "latency_proxy_mean_milli",
            Json::Int(m.latency_proxy_mean_milli),
        ),
        (
            "latency_proxy_p95_milli",
            Json::Int(m.latency_proxy_p95_milli),
        ),
        (
            "latency_proxy_max_milli",
            Json::Int(m.latency_proxy_max_milli),
        ),
        (
            "stale_event_rejections",
            Json::Int(m.stale_event_rejections),
        ),
        (
            "stale_observation_rejections",
            Json::Int(m.stale_observation_rejections),
        ),
        ("boundary_rejections", Json::Int(m.boundary_rejections)),
        ("overload_escapes", Json::Int(m.overload_escapes)),
        ("dominated_choices", Json::Int(m.dominated_choices)),
    ];
    let later = [
        ("stale_mutation_rejections", m.stale_mutation_rejections),
        ("evidence_gaps", m.evidence_gaps),
        ("evidence_gap_rows", m.evidence_gap_rows),
        ("cold_reserve_exclusions", m.cold_reserve_exclusions),
        ("cold_reserve_fallbacks", m.cold_reserve_fallbacks),
    ];
    for (name, value) in later {
        if let Some(value) = value {
            members.push((name, Json::Int(value)));
        }
    }
    Json::Object(members)
}

/// The two logs, the same in every run (§6): computed once by a run that takes the
/// cache and load events only (routing never touches them, §3.4).
fn logs(trace: &Trace) -> (Vec<CacheLogEntry>, Vec<ObservationLogEntry>) {
    let mut router = Router::new(trace, crate::policy_kind::PolicyKind::RoundRobin);
    let (mut cache_log, mut observation_log) = (Vec::new(), Vec::new());
    for event in in_order(trace) {
        if matches!(event.kind, EventKind::Request { .. }) {
            continue;
        }
        match router.event(event) {
            Some(Outcome::Cache(entry)) => cache_log.push(entry),
            Some(Outcome::Observation(entry)) => observation_log.push(entry),
            _ => {}
        }
    }
    (cache_log, observation_log)
}

/// Hands the pieces to the sink and hashes them: structure is gathered until the next
/// element, so that the sink sees each run of structure bytes as one piece.
struct Out<'s> {
    sink: &'s mut dyn FnMut(ReceiptPiece<'_>) -> ControlFlow<()>,
    hasher: Sha256,
    structure: Vec<u8>,
    element: Vec<u8>,
    /// The current element's path, rewritten for each element.
    path: String,
}

impl Out<'_> {
    /// Sets the path of the next element.
    fn at(&mut self, path: std::fmt::Arguments) -> &mut Self {
        self.path.clear();
        // Writing to a String cannot fail.
        let _ = self.path.write_fmt(path);
        self
    }

    fn structure(&mut self, bytes: &[u8]) {
        self.structure.extend_from_slice(bytes);
    }

    fn flush(&mut self) -> ControlFlow<()> {
        if self.structure.is_empty() {
            return ControlFlow::Continue(());
        }
        self.hasher.update(&self.structure);
        let flow = (self.sink)(ReceiptPiece::Structure(&self.structure));
        self.structure.clear();
        flow
    }

    /// Hands out one element at the path set by [`Out::at`].
    fn element(&mut self, tree: &Json) -> ControlFlow<()> {
        self.flush()?;
        self.element.clear();
        jcs::write(tree, &mut self.element);
        self.hasher.update(&self.element);
        (self.sink)(ReceiptPiece::Element {
            path: &self.path,
            bytes: &self.element,
        })
    }
}

/// Writes the receipt without `receipt_digest`, in byte order, to `sink`.
pub fn stream(
    trace: &Trace,
    trace_digest: &str,
    sink: &mut dyn FnMut(ReceiptPiece<'_>) -> ControlFlow<()>,
) -> Streamed {
    let mut out = Out {
        sink,
        hasher: Sha256::new(),
        structure: Vec::new(),
        element: Vec::new(),
        path: String::new(),
    };
    match stream_into(trace, trace_digest, &mut out) {
        ControlFlow::Break(()) => Streamed::Stopped,
        ControlFlow::Continue(()) => Streamed::Complete {
            receipt_digest: jcs::hex_digest(out.hasher.finalize().as_slice()),
        },
    }
}

fn stream_into(trace: &Trace, trace_digest: &str, out: &mut Out) -> ControlFlow<()> {
    let (cache_log, observation_log) = logs(trace);
    let events = in_order(trace);
    let key_epoch = trace.policy.stale_rule == StaleRule::KeyEpoch;
    out.structure(b"{\"format\":");
    jcs::write_string(FORMAT, &mut out.structure);
    out.structure(b",\"runs\":[");
    for (i, kind) in receipt_policies(trace).into_iter().enumerate() {
        if i > 0 {
            out.structure(b",");
        }
        let mut router = Router::new(trace, kind);
        let ids = router
            .worker_ids()
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<String>>();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        out.structure(b"{\"cache_log\":[");
        for (j, entry) in cache_log.iter().enumerate() {
            if j > 0 {
                out.structure(b",");
            }
            out.at(format_args!("runs[{i}].cache_log[{j}]"))
                .element(&cache_entry_tree(entry, &ids, key_epoch))?;
        }
        out.structure(b"],\"decisions\":[");
        let mut k = 0usize;
        for event in &events {
            if let Some(Outcome::Decision(decision)) = router.event(event) {
                if k > 0 {
                    out.structure(b",");
                }
                out.at(format_args!("runs[{i}].decisions[{k}]"))
                    .element(&decision_tree(&decision, &ids))?;
                k += 1;
            }
        }
        out.structure(b"],\"metrics\":");
        out.at(format_args!("runs[{i}].metrics"))
            .element(&metrics_tree(&router.metrics()))?;
        out.structure(b",\"observation_log\":[");
        for (j, entry) in observation_log.iter().enumerate() {
            if j > 0 {
                out.structure(b",");
            }
            out.at(format_args!("runs[{i}].observation_log[{j}]"))
                .element(&observation_tree(entry, &ids))?;
        }
        out.structure(b"],\"policy\":");
        jcs::write_string(kind.name(), &mut out.structure);
        out.structure(b"}");
    }
    out.structure(b"],\"trace_digest\":");
    jcs::write_string(trace_digest, &mut out.structure);
    out.structure(b"}");
    out.flush()
}

/// Canonical bytes of `[{"metrics": …, "policy": …}, …]`, one per run (no receipt).
pub fn metrics_bytes(trace: &Trace) -> Vec<u8> {
    let events = in_order(trace);
    let mut runs = Vec::new();
    for kind in receipt_policies(trace) {
        let mut router = Router::new(trace, kind);
        for event in &events {
            router.event(event);
        }
        runs.push((kind.name(), router.metrics()));
    }
    let trees = runs
        .iter()
        .map(|(name, m)| {
            Json::Object(vec![
                ("metrics", metrics_tree(m)),
                ("policy", Json::Str(name)),
            ])
        })
        .collect();
    jcs::to_bytes(&Json::Array(trees))
}
