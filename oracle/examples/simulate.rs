//! Runs the oracle's closed-loop simulation (SPEC §11) on a trace file:
//! `cargo run --release -p kvroute-oracle --example simulate -- TRACE [--workers N]
//! [--cache-tokens T | --cache-blocks B] [--lag L] [--jitter J] [--seed S]
//! [--worker-names w|dynamo] [--events-out DIR] [--completions-out DIR [--ticks-per-ms N]
//! [--completions-format aiperf|dynamo]]`. Prints the `kvroute-simulate/1` document plus
//! `\n` on stdout and, with `--events-out`, writes `DIR/<policy>.trace.json` (canonical
//! bytes + `\n`); with `--completions-out`, `DIR/<policy>.completions.jsonl` (SPEC §14.4,
//! §14.4.1).

use std::process::exit;

use kvroute_oracle::{simulate_with_completions, SimCache, SimLayout, SimOptions, SimWorkerNames};

fn number(args: &mut impl Iterator<Item = String>, flag: &str) -> u64 {
    match args.next().and_then(|v| v.parse().ok()) {
        Some(n) => n,
        None => {
            eprintln!("{flag} needs a non-negative integer");
            exit(2)
        }
    }
}

/// The command line, read.
struct Args {
    trace: String,
    options: SimOptions,
    events_out: Option<String>,
    completions_out: Option<String>,
    ticks_per_ms: u64,
    layout: SimLayout,
}

fn choice<T>(args: &mut impl Iterator<Item = String>, flag: &str, names: [(&str, T); 2]) -> T {
    let given = args.next();
    for (name, value) in names {
        if given.as_deref() == Some(name) {
            return value;
        }
    }
    eprintln!("{flag} needs one of its two names");
    exit(2)
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut options = SimOptions::default();
    let mut events_out = None;
    let mut completions_out = None;
    let mut ticks_per_ms = 1;
    let mut layout = SimLayout::Aiperf;
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
            "--worker-names" => {
                options.worker_names = choice(
                    &mut args,
                    &arg,
                    [("w", SimWorkerNames::W), ("dynamo", SimWorkerNames::Dynamo)],
                )
            }
            "--completions-format" => {
                layout = choice(
                    &mut args,
                    &arg,
                    [("aiperf", SimLayout::Aiperf), ("dynamo", SimLayout::Dynamo)],
                )
            }
            _ => trace = Some(arg),
        }
    }
    let Some(trace) = trace else {
        eprintln!("usage: simulate TRACE [options]");
        exit(2)
    };
    Args {
        trace,
        options,
        events_out,
        completions_out,
        ticks_per_ms,
        layout,
    }
}

fn write_or_exit(path: &str, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        exit(1)
    });
}

fn main() {
    let args = parse_args();
    let bytes = std::fs::read(&args.trace).unwrap_or_else(|e| {
        eprintln!("{}: {e}", args.trace);
        exit(2)
    });
    let started = std::time::Instant::now();
    let (outcome, completions) =
        simulate_with_completions(&bytes, &args.options).unwrap_or_else(|e| {
            eprintln!("{e}");
            exit(2)
        });
    eprintln!("simulated in {:.2?}", started.elapsed());
    // The completion files are made before anything is written, so that a refusal
    // (a worker Dynamo's layout cannot name) leaves no file behind.
    let completion_files = args.completions_out.map(|dir| {
        let files = completions
            .jsonl_in(args.ticks_per_ms, args.layout)
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                exit(2)
            });
        (dir, files)
    });
    println!("{}", String::from_utf8_lossy(&outcome.result));
    if let Some(dir) = args.events_out {
        for (policy, trace) in &outcome.generated_traces {
            let mut bytes = trace.clone();
            bytes.push(b'\n');
            write_or_exit(&format!("{dir}/{policy}.trace.json"), &bytes);
        }
    }
    if let Some((dir, files)) = completion_files {
        for (policy, lines) in &files {
            write_or_exit(&format!("{dir}/{policy}.completions.jsonl"), lines);
        }
    }
}
