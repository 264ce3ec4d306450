//! The compactly held events (`read_trace_compact`, `Compiled::from_compact`, what
//! `kvroute validate` and `kvroute replay` read) against the typed trace
//! (`read_trace`, `Compiled::new`): on every fixture, valid and invalid, on generated
//! traces and on generated traces with a planted defect, the same error lines, the
//! same events decoded back, the same trace digest, and byte-identical receipts in
//! every output format, with and without keyed request ids.

use kvroute_core::input::EventStore;
use kvroute_core::output::CsvIds;
use kvroute_core::output::{key_request_ids, keyed_id};
use kvroute_core::output::{trace_digest, trace_digest_of};
use kvroute_core::replay;
use kvroute_core::route::Compiled;
use kvroute_core::{read_trace, read_trace_compact, ReadTraceError, Trace, ValidationErrors};
use kvroute_harness::fixtures;
use kvroute_harness::generators::{near_valid, TraceRecipe, DEFECTS};

fn typed(bytes: &[u8]) -> Result<Trace, ValidationErrors> {
    read_trace(bytes).map_err(invalid)
}

fn compact(bytes: &[u8]) -> Result<(Trace, EventStore), ValidationErrors> {
    read_trace_compact(bytes).map_err(invalid)
}

fn invalid(e: ReadTraceError) -> ValidationErrors {
    match e {
        ReadTraceError::Invalid(errors) => errors,
        ReadTraceError::Io(e) => panic!("an in-memory source cannot fail: {e}"),
    }
}

/// Every output a replay can write, in order: JSON, JSON Lines, CSV.
fn outputs(compiled: &Compiled, digest: &str) -> Vec<Vec<u8>> {
    let mut json = Vec::new();
    replay::write_json(compiled, digest, &mut json).unwrap();
    let mut jsonl = Vec::new();
    replay::write_jsonl(compiled, digest, &mut jsonl).unwrap();
    let mut csv = Vec::new();
    replay::write_csv(compiled, &mut csv, CsvIds::SpreadsheetSafe).unwrap();
    vec![json, jsonl, csv]
}

fn check(bytes: &[u8], what: &str) {
    let (mut trace, (head, mut store)) = match (typed(bytes), compact(bytes)) {
        (Ok(trace), Ok(compact)) => (trace, compact),
        (Err(a), Err(b)) => {
            assert_eq!(a.lines(), b.lines(), "{what}: the same error lines");
            return;
        }
        (a, b) => panic!(
            "{what}: one reader accepted, the other did not: {:?} / {:?}",
            a.err(),
            b.err()
        ),
    };
    assert!(
        head.events.is_empty(),
        "{what}: the events are in the store"
    );
    let decoded: Vec<_> = (0..store.len()).map(|i| store.event(i)).collect();
    assert_eq!(decoded, trace.events, "{what}: the events decode back");
    let without_events = Trace {
        events: Vec::new(),
        ..trace.clone()
    };
    assert_eq!(head, without_events, "{what}: the other members");
    let digest = trace_digest(&trace);
    assert_eq!(
        trace_digest_of(&head, &store),
        digest,
        "{what}: the trace digest"
    );
    let eager = Compiled::new(&trace);
    let lazy = Compiled::from_compact(&head, &store);
    assert_eq!(lazy.request_count(), eager.request_count(), "{what}");
    assert_eq!(
        outputs(&lazy, &digest),
        outputs(&eager, &digest),
        "{what}: the receipts"
    );
    drop((eager, lazy));
    // Keyed ids (`--id-key`), renamed in the store as in the trace.
    let key = b"a key";
    key_request_ids(&mut trace, key);
    store.rename_request_ids(|id| keyed_id(key, id));
    assert_eq!(
        outputs(&Compiled::from_compact(&head, &store), &digest),
        outputs(&Compiled::new(&trace), &digest),
        "{what}: the receipts with keyed ids"
    );
}

#[test]
fn compact_events_replay_as_the_typed_trace_on_every_fixture() {
    for topic in fixtures::valid_topics() {
        check(&fixtures::trace_bytes(&topic), &topic);
    }
    for case in fixtures::invalid_cases() {
        let bytes = std::fs::read(fixtures::invalid_dir(&case).join("trace.json")).unwrap();
        check(&bytes, &case);
    }
}

#[test]
fn compact_events_replay_as_the_typed_trace_on_generated_traces() {
    for seed in 0..150 {
        let recipe = TraceRecipe::from_seed(seed);
        check(&recipe.build_bytes(), &format!("seed {seed}"));
        let choice = seed as u8 % DEFECTS.len() as u8;
        let planted = near_valid(&recipe, choice);
        check(
            planted.json_text.as_bytes(),
            &format!("seed {seed}, {}", planted.defect),
        );
    }
}
