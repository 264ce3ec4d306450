//! Every engine-event fixture trace (SPEC.md §13) validates the same way in core and
//! in the oracle: an import is only as good as the trace it writes, and the oracle is
//! the independent reading of §1 and §2 that says the trace is what it claims.

use kvroute_core::import::{import_engine_events, EventsOptions};
use kvroute_core::output;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/engine_events")
        .join(name)
}

/// The capture and request log of every committed fixture, with the options each is
/// imported under: the defaults, and a block size the stores do not have, so that an
/// import that leaves everything out is checked too.
fn cases() -> Vec<(&'static str, &'static str, EventsOptions)> {
    let other_block = EventsOptions {
        block_tokens: 32,
        ..EventsOptions::default()
    };
    vec![
        (
            "vllm.capture.jsonl",
            "requests.jsonl",
            EventsOptions::default(),
        ),
        (
            "sglang.capture.jsonl",
            "requests.jsonl",
            EventsOptions::default(),
        ),
        (
            "kthena-1535.capture.jsonl",
            "kthena-1535.requests.jsonl",
            EventsOptions::default(),
        ),
        ("vllm.capture.jsonl", "requests.jsonl", other_block),
        (
            "chain-replayed.capture.jsonl",
            "chain.requests.jsonl",
            EventsOptions::default(),
        ),
        (
            "two-publishers.capture.jsonl",
            "chain.requests.jsonl",
            EventsOptions::default(),
        ),
    ]
}

#[test]
fn core_and_the_oracle_validate_every_imported_fixture_alike() {
    for (capture, requests, options) in cases() {
        let capture_bytes = std::fs::read(fixture(capture)).unwrap();
        let request_bytes = std::fs::read(fixture(requests)).unwrap();
        let (trace, _) = import_engine_events(&capture_bytes[..], &request_bytes[..], &options)
            .unwrap_or_else(|e| panic!("{capture}: {e:?}"));
        let what = format!("{capture} at {} tokens a block", options.block_tokens);
        validates_alike(&trace, &what);
    }
}

/// Checks that core and the oracle validate `trace` alike, and that it is canonical.
fn validates_alike(trace: &kvroute_core::Trace, what: &str) {
    let bytes = output::canonical_trace_bytes(trace);
    let core = kvroute_core::parse_trace(&bytes)
        .map(|t| output::canonical_trace_bytes(&t))
        .map_err(|e| e.lines());
    let oracle = kvroute_oracle::validate(&bytes);
    assert_eq!(core, oracle, "{what}");
    assert_eq!(
        core.as_deref(),
        Ok(&bytes[..]),
        "{what}: canonical as written"
    );
}

#[test]
fn core_and_the_oracle_validate_the_imported_dynamo_fixture_alike() {
    let events = std::fs::read(fixture("dynamo.events.jsonl")).unwrap();
    let requests = std::fs::read(fixture("requests.jsonl")).unwrap();
    let options = EventsOptions::default();
    let (trace, _) =
        kvroute_core::import::import_dynamo_events(&events[..], &requests[..], &options).unwrap();
    validates_alike(&trace, "dynamo.events.jsonl");
}

/// The fixtures' payloads, decoded from their capture lines.
fn fixture_payloads() -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    for name in [
        "vllm.capture.jsonl",
        "sglang.capture.jsonl",
        "kthena-1535.capture.jsonl",
    ] {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        for line in text.lines() {
            let message = kvroute_core::import::capture_line(line.as_bytes())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            payloads.push(message.payload);
        }
    }
    payloads
}

proptest::proptest! {
    /// Any bytes decode to a batch or to a reason, never a panic.
    #[test]
    fn any_payload_decodes_or_is_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let _ = kvroute_core::import::decode_batch(&bytes);
    }

    /// A real payload with one byte changed, cut short or run on decodes or is
    /// refused, and whatever decodes imports without a panic.
    #[test]
    fn a_damaged_real_payload_decodes_or_is_refused(
        which in 0usize..9, at in proptest::num::usize::ANY, byte in proptest::num::u8::ANY,
        cut in proptest::bool::ANY,
    ) {
        let payloads = fixture_payloads();
        let mut payload = payloads[which % payloads.len()].clone();
        let at = at % payload.len();
        payload[at] = byte;
        if cut {
            payload.truncate(at);
        }
        if kvroute_core::import::decode_batch(&payload).is_ok() {
            use base64::Engine as _;
            let line = format!(
                r#"{{"endpoint":"e","topic":"t","seq":0,"payload_b64":"{}"}}"#,
                base64::engine::general_purpose::STANDARD.encode(&payload)
            );
            let requests = std::fs::read(fixture("requests.jsonl")).unwrap();
            let _ = import_engine_events(line.as_bytes(), &requests[..], &EventsOptions::default());
        }
    }
}
