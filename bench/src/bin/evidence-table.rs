//! `evidence-table`: the README's comparison of cache evidence rules under reordering
//! and loss (SPEC.md §3.2, §3.6, §11).
//!
//! The Mooncake conversation trace is imported onto 8 and 64 workers and simulated
//! closed-loop under `cache_plus_load` with each stale rule (`worker_epoch`, `key_epoch`,
//! the `arrival_order` baseline) and with `key_epoch` plus sequential-epoch gap detection,
//! at several lag/jitter settings without loss and a few with loss. Each row gives the
//! stale events dropped whole (`stale`) and, under `key_epoch`, the mutations rejected
//! (`stale_mut`), then the router's residency error against the engine's truth at every
//! decision: `phantom` (believed, not held) and `missed` (held, not believed), in tokens.
//! The last lines check the claim that on every reordering-only setting, `key_epoch`'s
//! `missed + phantom` is no larger than either other rule's.
//!
//! `cargo run --release -p kvroute-bench --bin evidence-table [WORKERS...]`

use kvroute_bench::{import, mooncake_bytes, simulation_input};
use kvroute_core::input::{EpochsMode, StaleRule};
use kvroute_core::route::Compiled;
use kvroute_core::simulate::{simulate_policy, SimRun, SimulateOptions};
use kvroute_core::Policy;

/// `(lag, jitter, loss per mille)`; the first ones reorder only.
const SETTINGS: [(u64, u64, u64); 7] = [
    (10, 0, 0),
    (10, 40, 0),
    (10, 200, 0),
    (50, 1000, 0),
    (10, 40, 10),
    (10, 40, 50),
    (10, 40, 200),
];

/// The rules compared: a stale rule and whether gaps are detected.
const RULES: [(StaleRule, EpochsMode); 4] = [
    (StaleRule::WorkerEpoch, EpochsMode::Any),
    (StaleRule::KeyEpoch, EpochsMode::Any),
    (StaleRule::ArrivalOrder, EpochsMode::Any),
    (StaleRule::KeyEpoch, EpochsMode::Sequential),
];

fn rule_name(rule: (StaleRule, EpochsMode)) -> String {
    match rule.1 {
        EpochsMode::Any => rule.0.name().to_owned(),
        EpochsMode::Sequential => format!("{}+sequential", rule.0.name()),
    }
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("worker counts are integers"))
        .collect();
    let worker_counts = if args.is_empty() { vec![8, 64] } else { args };
    let mooncake = mooncake_bytes();
    println!(
        "| workers | lag | jitter | loss ‰ | rule | stale | stale_mut | lost | resyncs | hit_pm | lat_mean_m | phantom | missed | missed + phantom |"
    );
    println!("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut claims = Vec::new();
    for &workers in &worker_counts {
        let base = simulation_input(&import(&mooncake, workers));
        for (lag, jitter, loss) in SETTINGS {
            let options = SimulateOptions {
                publication_lag_ticks: lag,
                jitter_ticks: jitter,
                jitter_seed: 1,
                loss_per_mille: loss,
                ..SimulateOptions::default()
            };
            let mut totals = Vec::new();
            for rule in RULES {
                let mut sim = base.clone();
                sim.policy.stale_rule = rule.0;
                sim.policy.epochs = rule.1;
                let compiled = Compiled::new(&sim);
                let run: SimRun =
                    simulate_policy(&compiled, Policy::CachePlusLoad, &options, false, &mut ());
                let s = run.stats;
                let m = &run.metrics;
                let total = s.phantom_reuse_tokens + s.missed_reuse_tokens;
                totals.push((rule, total));
                println!(
                    "| {workers} | {lag} | {jitter} | {loss} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    rule_name(rule),
                    m.stale_event_rejections,
                    m.stale_mutation_rejections.map_or("-".to_owned(), |n| n.to_string()),
                    s.lost_events,
                    s.resyncs,
                    m.hits_per_mille(),
                    m.latency_proxy_mean_milli,
                    s.phantom_reuse_tokens,
                    s.missed_reuse_tokens,
                    total
                );
            }
            if loss == 0 {
                claims.push(key_epoch_claim(workers, lag, jitter, &totals));
            }
        }
    }
    println!();
    println!("claim (reordering only: key_epoch missed + phantom <= both other rules):");
    for claim in claims {
        println!("  {claim}");
    }
}

/// Whether key_epoch's missed + phantom tokens (`totals`, by rule) are at most both
/// other rules' in one setting without loss, as a line of the closing claim.
fn key_epoch_claim(
    workers: u32,
    lag: u64,
    jitter: u64,
    totals: &[((StaleRule, EpochsMode), u64)],
) -> String {
    let of = |r: StaleRule| {
        totals
            .iter()
            .find(|(rule, _)| *rule == (r, EpochsMode::Any))
            .map(|(_, t)| *t)
            .expect("every rule ran")
    };
    let key = of(StaleRule::KeyEpoch);
    let holds = key <= of(StaleRule::WorkerEpoch) && key <= of(StaleRule::ArrivalOrder);
    format!(
        "{workers} workers, lag {lag}, jitter {jitter}: key_epoch {key} vs worker_epoch {} and arrival_order {}: {}",
        of(StaleRule::WorkerEpoch),
        of(StaleRule::ArrivalOrder),
        if holds { "holds" } else { "DOES NOT HOLD" }
    )
}
