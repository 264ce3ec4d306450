//! Dynamo through the peer protocol (SPEC.md §15) on chain-structured traces built from
//! the fuzzer's bytes: `kvroute-peer-dynamo` as a child process must answer every
//! request in shape (a protocol failure aborts), no differing row may lack a
//! documented cause, and where the adapter's first-occurrence chain positions are the
//! in-process look-ahead's, its tally must be the in-process `radix_tree` tally (with the
//! `in-process` feature, which links Dynamo; CI builds it without). The adapter is `$KVROUTE_PEER_DYNAMO`, else the workspace's release or debug build
//! (`cargo build -p kvroute-peers --bin kvroute-peer-dynamo`).
#![no_main]

use kvroute_core::output::canonical_trace_bytes;
#[cfg(feature = "in-process")]
use kvroute_core::route::Compiled;
use kvroute_core::Policy;
#[cfg(feature = "in-process")]
use kvroute_peer_core::chains::ChainShape;
use kvroute_peer_core::generate::{chain_trace, Bytes};
use kvroute_peer_core::run::{run_peer, RunOptions};
use kvroute_peer_core::sweep::modes;
#[cfg(feature = "in-process")]
use kvroute_peers::compare::compare;
use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

fn adapter() -> &'static OsString {
    static ADAPTER: OnceLock<OsString> = OnceLock::new();
    ADAPTER.get_or_init(|| {
        if let Some(path) = std::env::var_os("KVROUTE_PEER_DYNAMO") {
            return path;
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
        ["release", "debug"]
            .iter()
            .map(|profile| root.join(profile).join("kvroute-peer-dynamo"))
            .find(|p| p.exists())
            .expect("set KVROUTE_PEER_DYNAMO, or build the adapter: cargo build -p kvroute-peers --bin kvroute-peer-dynamo")
            .into_os_string()
    })
}

fuzz_target!(|data: &[u8]| {
    // The canonical form, as a file the adapter would be run on: eviction keys in
    // byte order (the generator writes them so already).
    let trace = chain_trace(&mut Bytes(data));
    #[cfg(feature = "in-process")]
    let same_positions = {
        let compiled = Compiled::new(&trace);
        let streamed = ChainShape::streamed(&compiled, &vec![false; compiled.events.len()]);
        streamed.same_positions(&ChainShape::new(&compiled))
    };
    for options in modes(true) {
        let run = run_peer(
            &trace,
            &[adapter().clone()],
            &RunOptions {
                compare: options,
                timeout: Duration::from_secs(20),
                expect_version: None,
                policy: Policy::CachePlusLoad,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let shown = || String::from_utf8_lossy(&canonical_trace_bytes(&trace)).into_owned();
        assert_eq!(run.new_findings(), 0, "{}\ntrace: {}", run.table(), shown());
        #[cfg(feature = "in-process")]
        if same_positions && !options.withhold_stale {
            let in_process = compare(&trace, options);
            let (a, b) = (&run.report.tallies[0], in_process.tally("radix_tree"));
            assert_eq!(
                (a.rows_compared, a.rows_differing, a.by_cause),
                (b.rows_compared, b.rows_differing, b.by_cause),
                "protocol {}\nin-process {}\ntrace: {}",
                a.table_line(),
                b.table_line(),
                shown()
            );
        }
    }
});
