//! kvroute against each Dynamo indexer on chain-structured traces built from the
//! fuzzer's bytes: every differing row must have a documented cause (SPEC.md §12, and
//! the known defect of docs/peers.md). A new finding aborts with the row and the trace;
//! saved to a file, `kvroute-peers dynamo FILE --block-tokens 16 --diff-out min.json`
//! shrinks it.
#![no_main]

use kvroute_core::output::canonical_trace_bytes;
use kvroute_peers::compare::{compare, Cause};
use kvroute_peers::generate::{chain_trace, Bytes};
use kvroute_peers::sweep::modes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let trace = chain_trace(&mut Bytes(data));
    for options in modes(true) {
        let report = compare(&trace, options);
        if report.new_findings() > 0 {
            let bytes = canonical_trace_bytes(&trace);
            panic!(
                "new finding (withhold_stale = {}): {:?}\ntrace: {}",
                options.withhold_stale,
                report.first.iter().find(|d| d.cause == Cause::NewFinding),
                String::from_utf8_lossy(&bytes)
            );
        }
    }
});
