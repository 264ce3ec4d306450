//! A driver for profiling one policy's routing under callgrind (README, "Performance").
//!
//! Set-up (the Mooncake import and the closed loop that generates the cache events) is
//! slow under valgrind and not what is measured, so it runs natively once:
//! `route-driver prepare WORKERS FILE` writes the bench-table routing trace of WORKERS
//! workers to FILE as canonical JSON. `route-driver run FILE [POLICY]` reads it back and
//! calls `run_metrics` once (`cache_plus_load` unless POLICY names another), so
//! `valgrind --tool=callgrind --toggle-collect='kvroute_core::route::run_metrics*'
//! route-driver run FILE` counts one run's instructions and nothing else.
//!
//! That trace is also, byte for byte, the stream `peers-bench` replays for its
//! whole-decision figure (checked at 8 workers), so the same run profiles that figure.
//!
//! The same for reading a trace: `route-driver prepare-input FILE` writes bench-table's
//! input trace (the core-versus-oracle trace, 8.9 MB) and `route-driver parse FILE`
//! calls `parse_trace` on it once (`--toggle-collect='kvroute_core::input::parse_trace*'`).

use kvroute_bench::{import, mooncake_bytes, oracle_trace_bytes, replay_trace, request_count};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::route::run_metrics;
use kvroute_core::route::Compiled;
use kvroute_core::{parse_trace, Policy};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["prepare", workers, file] => {
            let workers: u32 = workers.parse().expect("WORKERS is a number");
            let trace = replay_trace(&import(&mooncake_bytes(), workers));
            std::fs::write(file, canonical_trace_bytes(&trace)).expect("FILE is written");
        }
        ["prepare-input", file] => {
            std::fs::write(file, oracle_trace_bytes(&mooncake_bytes())).expect("FILE is written");
        }
        ["parse", file] => {
            let bytes = std::fs::read(file).expect("FILE is readable");
            let trace = parse_trace(&bytes).expect("FILE validates");
            println!("{} events from {} bytes", trace.events.len(), bytes.len());
        }
        ["run", file, ref policy @ ..] => {
            let policy = match policy {
                [] => Policy::CachePlusLoad,
                [name] => Policy::from_name(name).expect("POLICY is a policy name"),
                _ => panic!("one POLICY at most"),
            };
            let bytes = std::fs::read(file).expect("FILE is readable");
            let trace = parse_trace(&bytes).expect("FILE validates");
            let compiled = Compiled::new(&trace);
            let metrics = run_metrics(&compiled, policy);
            println!(
                "{} decisions, {} cache hits, {} dominated choices",
                request_count(&trace),
                metrics.cache_hits,
                metrics.dominated_choices
            );
        }
        _ => panic!(
            "usage: route-driver prepare WORKERS FILE | run FILE [POLICY] | prepare-input FILE | parse FILE"
        ),
    }
}
