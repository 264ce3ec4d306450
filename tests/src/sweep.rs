//! The seed sweep: many seeds, each building one trace deterministically, run through
//! the differential oracle in parallel with rayon.
//!
//! A seed alone determines its trace (a ChaCha stream seeded with it feeds
//! [`TraceRecipe`]), so results do not depend on thread count or scheduling. A divergent
//! seed is shrunk to a smaller trace that still diverges and written to a file.

use crate::differential::{self, Divergence};
use crate::generators::TraceRecipe;
use rayon::prelude::*;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which seeds to run, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepConfig {
    pub start: u64,
    pub seeds: u64,
    pub jobs: usize,
    /// `(k, m)`: run only the seeds whose offset from `start` is `k - 1` modulo `m`.
    pub shard: Option<(u64, u64)>,
}

impl SweepConfig {
    /// The seeds this configuration (and shard) covers, in order.
    pub fn seed_list(&self) -> Vec<u64> {
        (0..self.seeds)
            .filter(|offset| match self.shard {
                Some((k, m)) => offset % m == k - 1,
                None => true,
            })
            .map(|offset| self.start.wrapping_add(offset))
            .collect()
    }
}

/// A divergent seed, with its shrunk reproduction for the first one.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub divergence: Divergence,
    pub shrunk_trace: Option<PathBuf>,
}

/// What a sweep found.
#[derive(Debug, Clone)]
pub struct SweepReport {
    pub seeds_run: u64,
    pub failures: Vec<Failure>,
    pub elapsed: Duration,
}

impl SweepReport {
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds_run as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The trace a seed builds.
pub fn trace_for_seed(seed: u64) -> Vec<u8> {
    TraceRecipe::from_seed(seed).build_bytes()
}

/// Runs one seed through the differential oracle.
pub fn check_seed(seed: u64) -> Result<(), Divergence> {
    differential::compare(&trace_for_seed(seed)).map(|_| ())
}

/// Runs the sweep on `config.jobs` threads; `on_seed_done` is called once per seed
/// (from any thread), e.g. to advance a progress bar.
pub fn run(config: &SweepConfig, on_seed_done: impl Fn() + Sync) -> SweepReport {
    let seeds = config.seed_list();
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.jobs.max(1))
        .build()
        .expect("a rayon pool with a positive thread count builds");
    let mut failures: Vec<(u64, Divergence)> = pool.install(|| {
        seeds
            .par_iter()
            .filter_map(|&seed| {
                let result = check_seed(seed).err().map(|d| (seed, d));
                on_seed_done();
                result
            })
            .collect()
    });
    failures.sort_by_key(|(seed, _)| *seed);
    let elapsed = started.elapsed();
    // Shrinking costs many comparisons, so only the first (smallest) seed is shrunk:
    // one small reproduction is what a person needs, and a badly broken build may have
    // thousands of divergent seeds.
    let failures = failures
        .into_iter()
        .enumerate()
        .map(|(i, (seed, divergence))| {
            let shrunk_trace = (i == 0)
                .then(|| {
                    let shrunk = shrink(&trace_for_seed(seed));
                    differential::save_trace(&format!("seed-{seed}-shrunk"), &shrunk).ok()
                })
                .flatten();
            Failure {
                seed,
                divergence,
                shrunk_trace,
            }
        })
        .collect();
    SweepReport {
        seeds_run: seeds.len() as u64,
        failures,
        elapsed,
    }
}

/// Greedily removes events, grants, workers, cache entries and prefix segments while
/// core and oracle still diverge. Returns pretty JSON of the smallest trace found.
pub fn shrink(trace_json: &[u8]) -> Vec<u8> {
    let diverges = |value: &Value| differential::compare(value.to_string().as_bytes()).is_err();
    let Ok(mut trace) = serde_json::from_slice::<Value>(trace_json) else {
        return trace_json.to_vec();
    };
    if !diverges(&trace) {
        return trace_json.to_vec();
    }
    loop {
        let mut progressed = false;
        for candidate in removal_candidates(&trace) {
            if diverges(&candidate) {
                trace = candidate;
                progressed = true;
                break;
            }
        }
        if !progressed {
            break;
        }
    }
    serde_json::to_vec_pretty(&trace).expect("a Value always serialises")
}

/// Every trace obtained by removing one element from one array.
fn removal_candidates(trace: &Value) -> Vec<Value> {
    let mut candidates = Vec::new();
    let mut remove_each = |pointer: &str| {
        let len = trace
            .pointer(pointer)
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for i in (0..len).rev() {
            let mut copy = trace.clone();
            if let Some(Value::Array(items)) = copy.pointer_mut(pointer) {
                items.remove(i);
            }
            candidates.push(copy);
        }
    };
    remove_each("/events");
    remove_each("/sharing");
    remove_each("/workers");
    let workers = trace["workers"].as_array().map_or(0, Vec::len);
    for w in 0..workers {
        remove_each(&format!("/workers/{w}/cache"));
        remove_each(&format!("/workers/{w}/adapters"));
    }
    let events = trace["events"].as_array().map_or(0, Vec::len);
    for e in 0..events {
        remove_each(&format!("/events/{e}/prefix"));
        remove_each(&format!("/events/{e}/segments"));
        remove_each(&format!("/events/{e}/keys"));
    }
    candidates
}
