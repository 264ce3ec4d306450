//! Runs the oracle's closed-loop simulation (SPEC §11) on a trace file:
//! `cargo run --release -p kvroute-oracle --example simulate -- TRACE [--workers N]
//! [--cache-tokens T | --cache-blocks B] [--lag L] [--jitter J] [--seed S]
//! [--events-out DIR]`. Prints the `kvroute-simulate/1` document plus `\n` on stdout
//! and, with `--events-out`, writes `DIR/<policy>.trace.json` (canonical bytes + `\n`).

use std::process::exit;

use kvroute_oracle::{simulate, SimCache, SimOptions};

fn number(args: &mut impl Iterator<Item = String>, flag: &str) -> u64 {
    match args.next().and_then(|v| v.parse().ok()) {
        Some(n) => n,
        None => {
            eprintln!("{flag} needs a non-negative integer");
            exit(2)
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut options = SimOptions::default();
    let mut events_out = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workers" => options.workers = Some(number(&mut args, &arg) as u32),
            "--cache-tokens" => options.cache = SimCache::Tokens(number(&mut args, &arg)),
            "--cache-blocks" => options.cache = SimCache::Blocks(number(&mut args, &arg)),
            "--lag" => options.lag_ticks = number(&mut args, &arg),
            "--jitter" => options.jitter_ticks = number(&mut args, &arg),
            "--seed" => options.seed = number(&mut args, &arg),
            "--events-out" => events_out = args.next(),
            _ => trace = Some(arg),
        }
    }
    let Some(trace) = trace else {
        eprintln!("usage: simulate TRACE [options]");
        exit(2)
    };
    let bytes = std::fs::read(&trace).unwrap_or_else(|e| {
        eprintln!("{trace}: {e}");
        exit(2)
    });
    let started = std::time::Instant::now();
    let outcome = simulate(&bytes, &options).unwrap_or_else(|e| {
        eprintln!("{e}");
        exit(2)
    });
    eprintln!("simulated in {:.2?}", started.elapsed());
    println!("{}", String::from_utf8_lossy(&outcome.result));
    if let Some(dir) = events_out {
        for (policy, trace) in &outcome.generated_traces {
            let mut bytes = trace.clone();
            bytes.push(b'\n');
            let path = format!("{dir}/{policy}.trace.json");
            std::fs::write(&path, bytes).unwrap_or_else(|e| {
                eprintln!("{path}: {e}");
                exit(1)
            });
        }
    }
}
