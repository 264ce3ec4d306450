//! The engine-model differential: core's closed loop (`kvroute simulate`) against the
//! oracle's independent one (SPEC.md §11), compared byte for byte through the
//! `kvroute-simulate/1` document and every policy's generated trace.
//!
//! The open-loop differential cannot see the engine model: a slip in how the model
//! stores, evicts, publishes or counts leaves a trace that core and the oracle replay
//! identically. This module compares what the model itself produced, and the join of
//! each policy's modelled completion records with its own receipt (SPEC.md §14.4).

use crate::differential::{first_receipt_difference, save_trace, Divergence};
use crate::join::JoinCase;
use kvroute_core::join::CompletionsFormat;
use kvroute_core::join::Slo;
use kvroute_core::simulate::completion_lines;
use kvroute_core::simulate::completions_file;
use kvroute_core::simulate::{simulate_result, SimulateResult};
use kvroute_core::simulate::{Capacity, CompletionsLayout, SimulateOptions, WorkerNames};
use kvroute_core::Policy;
use kvroute_oracle::{SimCache, SimLayout, SimOptions, SimWorkerNames};

/// One simulation's settings, as `kvroute simulate` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSettings {
    pub workers: Option<u32>,
    pub options: SimulateOptions,
    /// The `--ticks-per-ms` the completion records are compared at (SPEC.md §14.4).
    pub ticks_per_ms: u64,
    /// `--worker-names`: with `Dynamo`, the records are compared in Dynamo's layout as
    /// well, and joined in it (SPEC.md §14.4.1).
    pub worker_names: WorkerNames,
}

impl SimSettings {
    fn oracle_options(&self) -> SimOptions {
        SimOptions {
            workers: self.workers,
            cache: match self.options.capacity {
                Capacity::Tokens(t) => SimCache::Tokens(t),
                Capacity::Blocks(b) => SimCache::Blocks(b),
            },
            lag_ticks: self.options.publication_lag_ticks,
            jitter_ticks: self.options.jitter_ticks,
            seed: self.options.jitter_seed,
            loss_per_mille: self.options.loss_per_mille,
            // Core takes the stale rule and epochs from the trace (the CLI's
            // `--stale-rule`/`--epochs` rewrite its policy first), so the oracle does too.
            stale_rule: None,
            epochs: None,
            worker_names: match self.worker_names {
                WorkerNames::W => SimWorkerNames::W,
                WorkerNames::Dynamo => SimWorkerNames::Dynamo,
            },
        }
    }

    /// The `kvroute simulate` options that reproduce these settings.
    pub fn command_line(&self) -> String {
        let mut line = match self.options.capacity {
            Capacity::Tokens(t) => format!("--cache-tokens {t}"),
            Capacity::Blocks(b) => format!("--cache-blocks {b}"),
        };
        line.push_str(&format!(
            " --lag {} --jitter {} --seed {}",
            self.options.publication_lag_ticks, self.options.jitter_ticks, self.options.jitter_seed
        ));
        if self.options.loss_per_mille > 0 {
            line.push_str(&format!(" --loss {}", self.options.loss_per_mille));
        }
        if let Some(w) = self.workers {
            line.push_str(&format!(" --workers {w}"));
        }
        if self.worker_names == WorkerNames::Dynamo {
            line.push_str(" --worker-names dynamo --completions-format dynamo");
        }
        line
    }
}

/// Simulates `trace_json` in core and in the oracle: `Ok` with the shared document
/// when both agree byte for byte on it, on every generated trace and on every
/// policy's completion records at `settings.ticks_per_ms` (or both reject), else the
/// first difference.
pub fn compare_simulate(trace_json: &[u8], settings: &SimSettings) -> Result<Vec<u8>, Divergence> {
    compare_simulations(trace_json, settings, false)
}

/// [`compare_simulate`], then each policy's records joined with the receipt of its own
/// generated trace by core and by the oracle (SPEC.md §14.4): what the closed-loop
/// sweep checks for each seed.
pub fn compare_simulate_and_join(
    trace_json: &[u8],
    settings: &SimSettings,
) -> Result<Vec<u8>, Divergence> {
    compare_simulations(trace_json, settings, true)
}

fn compare_simulations(
    trace_json: &[u8],
    settings: &SimSettings,
    join: bool,
) -> Result<Vec<u8>, Divergence> {
    let core = kvroute_core::parse_trace(trace_json)
        .map_err(|e| e.to_string())
        .and_then(|trace| {
            simulate_result(
                &trace,
                settings.workers,
                settings.worker_names,
                &settings.options,
                &Default::default(),
                true,
            )
            .map_err(|e| e.to_string())
        });
    let dynamo = settings.worker_names == WorkerNames::Dynamo;
    let oracle = kvroute_oracle::simulate_with_completions(trace_json, &settings.oracle_options())
        .and_then(|(outcome, completions)| {
            let aiperf = completions.jsonl(settings.ticks_per_ms)?;
            let dynamo_files = if dynamo {
                completions.jsonl_in(settings.ticks_per_ms, SimLayout::Dynamo)?
            } else {
                Vec::new()
            };
            Ok((outcome, aiperf, dynamo_files))
        });
    let diverge = |first_difference: String| Err(Divergence { first_difference });
    match (core, oracle) {
        (Err(_), Err(_)) => Ok(Vec::new()),
        (Ok(_), Err(e)) => diverge(format!(
            "core simulates the trace, the oracle rejects it: {e}"
        )),
        (Err(e), Ok(_)) => diverge(format!(
            "core rejects the trace ({e}), the oracle simulates it"
        )),
        (Ok(core), Ok((oracle, oracle_completions, oracle_dynamo))) => {
            let agreed = documents_agree(&core, &oracle.generated_traces, &oracle.result)
                .and_then(|()| {
                    completions_agree(
                        &core,
                        &oracle_completions,
                        &oracle_dynamo,
                        settings.ticks_per_ms,
                    )
                })
                .and_then(|()| {
                    // The join end to end (SPEC §14.4): each policy's records joined with
                    // the receipt of its own generated trace, by core and by the oracle,
                    // with and without objectives, and with the trace for cohorts; in
                    // Dynamo's layout when the workers are named for it, so attribution is
                    // compared too.
                    if join {
                        joins_agree(&core, settings.ticks_per_ms, dynamo)
                    } else {
                        Ok(())
                    }
                });
            match agreed {
                Ok(()) => Ok(core.document),
                Err(first_difference) => diverge(first_difference),
            }
        }
    }
}

/// Whether core's generated traces and simulate document are the oracle's, byte for
/// byte; else the first difference. The generated traces come first: a difference there
/// names the event, where the document would only show two digests.
fn documents_agree(
    core: &SimulateResult,
    oracle_traces: &[(String, Vec<u8>)],
    oracle_document: &[u8],
) -> Result<(), String> {
    for ((policy, core_bytes), (name, oracle_bytes)) in
        core.generated_traces.iter().zip(oracle_traces)
    {
        if policy.name() != name {
            return Err(format!(
                "policy order differs: core {}, oracle {name}",
                policy.name()
            ));
        }
        if core_bytes != oracle_bytes {
            return Err(format!(
                "{name}: generated traces differ {}",
                first_receipt_difference(core_bytes, oracle_bytes, "core", "oracle")
            ));
        }
    }
    if core.document != oracle_document {
        return Err(format!(
            "simulate documents differ {}",
            first_receipt_difference(&core.document, oracle_document, "core", "oracle")
        ));
    }
    Ok(())
}

/// Whether core's completion records are the oracle's at `ticks_per_ms`, in AIPerf's
/// layout and (when the oracle wrote them) in Dynamo's; else the first difference.
fn completions_agree(
    core: &SimulateResult,
    oracle_completions: &[(String, Vec<u8>)],
    oracle_dynamo: &[(String, Vec<u8>)],
    ticks_per_ms: u64,
) -> Result<(), String> {
    for ((policy, served), (name, oracle_bytes)) in core.completions.iter().zip(oracle_completions)
    {
        let core_bytes = completion_lines(served, ticks_per_ms);
        if policy.name() != name || &core_bytes != oracle_bytes {
            return Err(format!(
                "{name}: completion records at {ticks_per_ms} ticks a ms differ {}",
                first_receipt_difference(&core_bytes, oracle_bytes, "core", "oracle")
            ));
        }
    }
    for ((policy, served), (name, oracle_bytes)) in core.completions.iter().zip(oracle_dynamo) {
        let core_bytes = completions_file(
            served,
            ticks_per_ms,
            CompletionsLayout::Dynamo,
            &core.worker_ids,
        );
        if policy.name() != name || &core_bytes != oracle_bytes {
            return Err(format!(
                "{name}: Dynamo records at {ticks_per_ms} ticks a ms differ {}",
                first_receipt_difference(&core_bytes, oracle_bytes, "core", "oracle")
            ));
        }
    }
    Ok(())
}

/// Whether each policy's records, joined with the receipt of its own generated trace,
/// give the same join in core and in the oracle; else the first difference.
fn joins_agree(core: &SimulateResult, ticks_per_ms: u64, dynamo: bool) -> Result<(), String> {
    let layout = if dynamo {
        CompletionsLayout::Dynamo
    } else {
        CompletionsLayout::Aiperf
    };
    for ((policy, served), (_, trace)) in core.completions.iter().zip(&core.generated_traces) {
        let records = completions_file(served, ticks_per_ms, layout, &core.worker_ids);
        if let Err(difference) = compare_policy_join(*policy, trace, &records, dynamo) {
            return Err(format!("{}: {difference}", policy.name()));
        }
    }
    Ok(())
}

/// Joins `records` with the receipt of `trace` under `policy`'s run in core and in the
/// oracle, as `simulate --completions-out` then `join --trace --slo` would; the first
/// difference, if any. (The join without a trace or objectives is a part of this one:
/// the run's figures are the same, only cohorts and goodput are added.)
fn compare_policy_join(
    policy: Policy,
    trace: &[u8],
    records: &[u8],
    dynamo: bool,
) -> Result<(), String> {
    let receipt = kvroute_core::replay_bytes(trace).map_err(|e| format!("replay: {e}"))?;
    let case = JoinCase {
        receipt: &receipt,
        completions: records,
        format: Some(if dynamo {
            CompletionsFormat::Dynamo
        } else {
            CompletionsFormat::Aiperf
        }),
        run: policy,
        slo: Some(Slo {
            ttft_us: Some(50_000),
            tpot_us: Some(5_000),
        }),
        trace: Some(trace),
    };
    // simulate's records always join their own receipt: an error both sides agree on
    // is still a bug, unless no request was served at all.
    match crate::join::compare_join(&case)? {
        Ok(_) | Err(kvroute_oracle::JoinFailure::NoRecords) => Ok(()),
        Err(e) => Err(format!("the records do not join their receipt: {e:?}")),
    }
}

/// Panics with a readable report when the two engine models disagree; the trace is
/// saved under `name` beside the other divergences.
pub fn assert_simulations_agree(name: &str, trace_json: &[u8], settings: &SimSettings) -> Vec<u8> {
    match compare_simulate(trace_json, settings) {
        Ok(document) => document,
        Err(divergence) => {
            let saved = save_trace(name, trace_json)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|e| format!("(could not save the trace: {e})"));
            panic!(
                "the engine models disagree: {divergence}\n  trace: {saved}\n  reproduce: \
                 kvroute simulate {saved} {} --format json",
                settings.command_line()
            );
        }
    }
}

/// The engine settings a seed of the closed-loop sweep runs under: tiny caches in
/// blocks or tokens (so evictions are common), short lags and jitter (so stale
/// events are), all a pure function of the seed.
pub fn settings_for_seed(seed: u64) -> SimSettings {
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let capacity = if mixed >> 63 == 0 {
        Capacity::Blocks(seed % 7)
    } else {
        Capacity::Tokens(seed.wrapping_mul(37) % 3_000)
    };
    SimSettings {
        workers: None,
        options: SimulateOptions {
            capacity,
            publication_lag_ticks: seed % 5,
            jitter_ticks: (mixed >> 8) % 9,
            jitter_seed: seed,
            // Half the seeds lose events on the bus (SPEC.md §11, *Loss*).
            loss_per_mille: [0, 0, 50, 300][((mixed >> 24) % 4) as usize],
        },
        // Ticks of 1 ms, of 1/7 ms (every figure floored) and of 1 µs.
        ticks_per_ms: [1, 7, 1000][(seed % 3) as usize],
        worker_names: WorkerNames::W,
    }
}

/// For one seed in four, the seed's settings again with 2 to 4 copies of the first
/// worker named as Dynamo names them: the closed loop's Dynamo records (SPEC.md
/// §14.4.1) compared byte for byte and joined, attribution included.
pub fn dynamo_settings_for_seed(seed: u64) -> Option<SimSettings> {
    seed.is_multiple_of(4).then(|| SimSettings {
        workers: Some(2 + (seed / 4 % 3) as u32),
        worker_names: WorkerNames::Dynamo,
        ..settings_for_seed(seed)
    })
}

/// The closed-loop sweep's check of one seed: [`compare_simulate_and_join`] under
/// [`settings_for_seed`], then under [`dynamo_settings_for_seed`] where it applies;
/// the first run's document.
pub fn compare_seed(trace: &[u8], seed: u64) -> Result<Vec<u8>, Divergence> {
    let document = compare_simulate_and_join(trace, &settings_for_seed(seed))?;
    if let Some(dynamo) = dynamo_settings_for_seed(seed) {
        compare_simulate_and_join(trace, &dynamo).map_err(|d| Divergence {
            first_difference: format!("{} ({})", d.first_difference, dynamo.command_line()),
        })?;
    }
    Ok(document)
}

/// One seed of the closed-loop sweep (`kvroute swarm --closed-loop`): the seed's
/// generated trace simulated by both engine models under [`settings_for_seed`].
pub fn check_closed_loop_seed(seed: u64) -> Result<(), Divergence> {
    let trace = crate::generators::TraceRecipe::from_seed(seed).build_bytes();
    compare_seed(&trace, seed).map(|_| ())
}
