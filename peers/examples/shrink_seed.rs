//! Prints the shrunk trace of one sweep seed's first new finding:
//! `cargo run -p kvroute-peers --example shrink_seed -- SEED [withhold] [no-known]`.

use kvroute_core::output::canonical::canonical_trace_bytes;
use kvroute_peers::compare::{compare, Cause};
use kvroute_peers::shrink::{cut_reproducing, shows, shrink};
use kvroute_peers::sweep::{modes, trace_of};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let withhold = args.iter().any(|a| a == "withhold");
    let known = !args.iter().any(|a| a == "no-known");
    let options = modes(known)[withhold as usize];
    let trace = trace_of(seed);
    let report = compare(&trace, options);
    let Some(first) = report.first.iter().find(|d| d.cause == Cause::NewFinding) else {
        eprintln!("seed {seed}: no new finding");
        return;
    };
    eprintln!("{first:?}");
    let cut = cut_reproducing(&trace, first, options).unwrap_or(trace);
    let shrunk = shrink(
        cut,
        |t| shows(t, options, first.comparison, Cause::NewFinding),
        50_000,
    );
    println!(
        "{}",
        String::from_utf8(canonical_trace_bytes(&shrunk)).unwrap()
    );
    let again = compare(&shrunk, options);
    print!("{}", again.table());
    for d in &again.first {
        println!("{d:?}");
    }
}
