//! Every engine-event fixture trace (SPEC.md §13) validates the same way in core and
//! in the oracle: an import is only as good as the trace it writes, and the oracle is
//! the independent reading of §1 and §2 that says the trace is what it claims.

use kvroute_core::input::kv_events::{import_engine_events, EventsOptions};
use kvroute_core::output::canonical;
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
    ]
}

#[test]
fn core_and_the_oracle_validate_every_imported_fixture_alike() {
    for (capture, requests, options) in cases() {
        let capture_bytes = std::fs::read(fixture(capture)).unwrap();
        let request_bytes = std::fs::read(fixture(requests)).unwrap();
        let (trace, _) = import_engine_events(&capture_bytes[..], &request_bytes[..], &options)
            .unwrap_or_else(|e| panic!("{capture}: {e:?}"));
        let bytes = canonical::canonical_trace_bytes(&trace);
        let core = kvroute_core::parse_trace(&bytes)
            .map(|t| canonical::canonical_trace_bytes(&t))
            .map_err(|e| e.lines());
        let oracle = kvroute_oracle::validate(&bytes);
        assert_eq!(
            core, oracle,
            "{capture} at {} tokens a block",
            options.block_tokens
        );
        assert_eq!(
            core.as_deref(),
            Ok(&bytes[..]),
            "{capture}: canonical as written"
        );
    }
}
