//! The streaming writers against their in-memory counterparts (SPEC.md §6.4): the
//! JSON Lines stream must carry the same members in canonical order and end with the
//! same `receipt_digest`, and the streamed CSV must be byte-identical to the CSV of the
//! in-memory receipt; the streamed `--format json` receipt must be the in-memory
//! receipt's bytes, and those bytes (written by type) the canonical form of their own
//! parse and of the receipt's JSON tree; and the canonical trace, written piece by
//! piece, must equal the JCS of the whole trace tree. Checked on every fixture and on
//! generated traces.

use kvroute_core::output;
use kvroute_core::output::{csv_bytes, CsvIds};
use kvroute_core::output::{Receipt, STREAM_FORMAT};
use kvroute_core::replay::{self, write_csv, write_jsonl};
use kvroute_core::route;
use kvroute_core::route::Compiled;
use kvroute_core::{parse_trace, Policy, Trace};
use kvroute_harness::fixtures;
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::oracles::assert_canonical_receipt;
use kvroute_harness::receipt_tree;
use serde_json::{json, Map, Value};

/// Rebuilds the full receipt from its JSON Lines records.
fn reassemble(jsonl: &[u8]) -> Value {
    let records: Vec<Value> = jsonl
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("each line is one JSON value"))
        .collect();
    let (header, rest) = records.split_first().expect("a header record");
    assert_eq!(header["format"], STREAM_FORMAT);
    let (last, body) = rest.split_last().expect("a closing record");
    let mut runs: Vec<(String, Map<String, Value>)> = Vec::new();
    for record in body {
        let policy = record["policy"]
            .as_str()
            .expect("every record names its run");
        if runs.last().map(|(p, _)| p.as_str()) != Some(policy) {
            let mut run = Map::new();
            run.insert("policy".into(), json!(policy));
            for member in ["cache_log", "decisions", "observation_log"] {
                run.insert(member.into(), json!([]));
            }
            runs.push((policy.to_owned(), run));
        }
        let run = &mut runs.last_mut().unwrap().1;
        let (member, value) = record
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| k.as_str() != "policy")
            .expect("a record carries one member besides policy");
        match run.get_mut(member.as_str()) {
            Some(Value::Array(items)) => items.push(value.clone()),
            _ => {
                run.insert(member.clone(), value.clone());
            }
        }
    }
    json!({
        "format": header["receipt_format"],
        "trace_digest": header["trace_digest"],
        "receipt_digest": last["receipt_digest"],
        "runs": runs.into_iter().map(|(_, r)| Value::Object(r)).collect::<Vec<_>>(),
    })
}

fn check(trace_bytes: &[u8], what: &str) {
    let trace = parse_trace(trace_bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    // The canonical trace, written piece by piece, is the JCS of the whole tree.
    let whole = output::jcs_bytes(&output::canonical_trace_value(&trace));
    assert_eq!(
        output::canonical_trace_bytes(&trace),
        whole,
        "{what}: trace"
    );
    let receipt = replay::receipt(&trace);
    let compiled = Compiled::new(&trace);

    check_jsonl(&trace, &receipt, &compiled, what);
    check_typed_bytes(&trace, &receipt, &compiled, what);

    for mode in [CsvIds::SpreadsheetSafe, CsvIds::Plain] {
        let mut csv = Vec::new();
        write_csv(&compiled, &mut csv, mode).unwrap();
        assert_eq!(
            csv,
            csv_bytes(&receipt.worker_ids, &receipt.runs, mode).unwrap(),
            "{what}: csv"
        );
    }

    // Metrics-only runs (no rows materialised) agree with the full runs.
    for run in &receipt.runs {
        assert_eq!(
            route::run_metrics(&compiled, run.policy),
            run.metrics,
            "{what}: {} metrics without a receipt",
            run.policy.name()
        );
    }
}

/// The JSON Lines receipt of `trace`: every line canonical, the lines' members the
/// receipt's, and its summary the receipt's digest and metrics in the runs' order.
fn check_jsonl(trace: &Trace, receipt: &Receipt, compiled: &Compiled, what: &str) {
    let mut jsonl = Vec::new();
    let summary = write_jsonl(compiled, &output::trace_digest(trace), &mut jsonl).unwrap();
    for line in jsonl.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let value: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(
            output::jcs_bytes(&value),
            line,
            "{what}: a line is not canonical"
        );
    }
    assert_eq!(
        reassemble(&jsonl),
        receipt_tree::receipt_value(receipt),
        "{what}: members"
    );
    assert_eq!(summary.receipt_digest, receipt.digest(), "{what}: digest");
    let metrics: Vec<_> = receipt
        .runs
        .iter()
        .map(|r| (r.policy, r.metrics.clone()))
        .collect();
    assert_eq!(summary.runs, metrics, "{what}: metrics");
    assert_eq!(
        summary.runs.iter().map(|r| r.0).collect::<Vec<_>>(),
        Policy::runs_for(&trace.policy).to_vec()
    );
}

/// The typed receipt bytes of `trace` in every way core writes them.
fn check_typed_bytes(trace: &Trace, receipt: &Receipt, compiled: &Compiled, what: &str) {
    // The typed bytes: in memory from records, in memory while replaying, streamed to a
    // writer; all equal, and equal to the canonicalizer's form of the tree and of their
    // own parse.
    let bytes = receipt.canonical_bytes();
    assert_eq!(
        bytes,
        output::jcs_bytes(&receipt_tree::receipt_value(receipt)),
        "{what}: tree"
    );
    assert_canonical_receipt(&bytes, what);
    let digest = output::trace_digest(trace);
    assert_eq!(
        replay::receipt_bytes(compiled, &digest),
        bytes,
        "{what}: replayed"
    );
    let mut streamed = Vec::new();
    let streamed_digest = replay::write_json(compiled, &digest, &mut streamed).unwrap();
    assert_eq!(streamed.pop(), Some(b'\n'), "{what}: one newline");
    assert_eq!(streamed, bytes, "{what}: streamed json");
    assert_eq!(streamed_digest, receipt.digest(), "{what}: streamed digest");
    assert_eq!(
        replay::stream_digest(compiled, &digest).0,
        receipt.digest(),
        "{what}: digest only"
    );
}

#[test]
fn streams_match_the_in_memory_receipt_on_every_fixture() {
    for topic in fixtures::valid_topics() {
        check(&fixtures::trace_bytes(&topic), &topic);
    }
}

#[test]
fn streams_match_the_in_memory_receipt_on_generated_traces() {
    for seed in 0..200 {
        let bytes = TraceRecipe::from_seed(seed).build_bytes();
        check(&bytes, &format!("seed {seed}"));
    }
}

/// SPEC.md §3.5 in the streamed outputs: every run of the JSON Lines, CSV and
/// digest-only replays starts from the trace's initial state, so its metrics are those
/// of the policy replayed alone.
#[test]
fn every_streamed_run_starts_from_the_initial_state() {
    for topic in fixtures::valid_topics() {
        let trace = parse_trace(&fixtures::trace_bytes(&topic)).unwrap();
        let compiled = Compiled::new(&trace);
        let alone: Vec<_> = Policy::runs_for(&trace.policy)
            .iter()
            .map(|&p| (p, route::run_metrics(&compiled, p)))
            .collect();
        let digest = output::trace_digest(&trace);
        let jsonl = write_jsonl(&compiled, &digest, &mut std::io::sink()).unwrap();
        assert_eq!(jsonl.runs, alone, "{topic}: jsonl");
        let csv = write_csv(&compiled, &mut std::io::sink(), CsvIds::Plain).unwrap();
        assert_eq!(csv, alone, "{topic}: csv");
        assert_eq!(
            replay::stream_digest(&compiled, &digest).1,
            alone,
            "{topic}: digest"
        );
    }
}
