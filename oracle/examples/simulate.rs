//! Runs the oracle's closed-loop simulation (SPEC §11) on a trace file:
//! `cargo run --release -p kvroute-oracle --example simulate -- TRACE [--workers N]
//! [--cache-tokens T | --cache-blocks B] [--lag L] [--jitter J] [--seed S]
//! [--events-out DIR] [--completions-out DIR [--ticks-per-ms N]]`. Prints the
//! `kvroute-simulate/1` document plus `\n` on stdout and, with `--events-out`, writes
//! `DIR/<policy>.trace.json` (canonical bytes + `\n`); with `--completions-out`,
//! `DIR/<policy>.completions.jsonl` (SPEC §14.4).

use std::process::exit;

use kvroute_oracle::{simulate_with_completions, SimCache, SimOptions};

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
    let mut completions_out = None;
    let mut ticks_per_ms = 1;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workers" => options.workers = Some(number(&mut args, &arg) as u32),
            "--cache-tokens" => options.cache = SimCache::Tokens(number(&mut args, &arg)),
            "--cache-blocks" => options.cache = SimCache::Blocks(number(&mut args, &arg)),
            "--lag" => options.lag_ticks = number(&mut args, &arg),
            "--jitter" => options.jitter_ticks = number(&mut args, &arg),
            "--seed" => options.seed = number(&mut args, &arg),
            "--events-out" => events_out = args.next(),
            "--completions-out" => completions_out = args.next(),
            "--ticks-per-ms" => ticks_per_ms = number(&mut args, &arg),
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
    let (outcome, completions) = simulate_with_completions(&bytes, &options).unwrap_or_else(|e| {
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
    if let Some(dir) = completions_out {
        let files = completions.jsonl(ticks_per_ms).unwrap_or_else(|e| {
            eprintln!("{e}");
            exit(2)
        });
        for (policy, lines) in &files {
            let path = format!("{dir}/{policy}.completions.jsonl");
            std::fs::write(&path, lines).unwrap_or_else(|e| {
                eprintln!("{path}: {e}");
                exit(1)
            });
        }
    }
}
