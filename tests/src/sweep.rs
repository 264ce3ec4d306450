//! The seed sweep: many seeds, each building one trace deterministically, run through
//! the differential oracle in parallel with rayon.
//!
//! A seed alone determines its trace (a ChaCha stream seeded with it feeds
//! [`TraceRecipe`]), so results do not depend on thread count or scheduling. A divergent
//! seed is shrunk to a smaller trace that still diverges and written to a file
//! ([`first_divergence`] instead stops at the first divergent seed, for the mutant
//! check, which only asks whether there is one). Seeds are
//! streamed from their range, never listed, so a sweep of billions of seeds needs no more
//! memory than a sweep of ten.

use crate::differential::{self, Agreement, Divergence};
use crate::generators::TraceRecipe;
use rayon::prelude::*;
use serde_json::Value;
use std::fmt;
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

/// A configuration [`run`] refuses, in words a user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepConfigError {
    /// No worker threads.
    NoJobs,
    /// The last seed, `start + seeds - 1`, is past `u64::MAX`.
    RangeOverflow { start: u64, seeds: u64 },
    /// A shard `k/m` outside `1 <= k <= m`.
    BadShard { k: u64, m: u64 },
}

impl fmt::Display for SweepConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SweepConfigError::NoJobs => f.write_str("--jobs must be at least 1"),
            SweepConfigError::RangeOverflow { start, seeds } => write!(
                f,
                "--start {start} --seeds {seeds} runs past the last seed, {}: from {start}, at \
                 most {} seeds fit",
                u64::MAX,
                // Seeds start..=u64::MAX: u64::MAX - start + 1 of them, which only
                // overflows for start 0, where every u64 seeds count fits.
                (u64::MAX - start).saturating_add(1)
            ),
            SweepConfigError::BadShard { k, m } => {
                write!(f, "shard {k}/{m}: expected 1 <= K <= M")
            }
        }
    }
}

impl std::error::Error for SweepConfigError {}

impl SweepConfig {
    /// Refuses configurations that cannot run as written.
    pub fn check(&self) -> Result<(), SweepConfigError> {
        if self.jobs == 0 {
            return Err(SweepConfigError::NoJobs);
        }
        if self.seeds > 0 && self.start.checked_add(self.seeds - 1).is_none() {
            return Err(SweepConfigError::RangeOverflow {
                start: self.start,
                seeds: self.seeds,
            });
        }
        if let Some((k, m)) = self.shard {
            if k == 0 || k > m {
                return Err(SweepConfigError::BadShard { k, m });
            }
        }
        Ok(())
    }

    /// `(k, m)`, with an unsharded sweep as shard 1 of 1.
    fn shard_or_whole(&self) -> (u64, u64) {
        self.shard.unwrap_or((1, 1))
    }

    /// How many seeds this configuration (and shard) covers, without listing them.
    pub fn seed_count(&self) -> u64 {
        let (k, m) = self.shard_or_whole();
        // Offsets k-1, k-1+m, ... below `seeds`.
        if self.seeds < k {
            0
        } else {
            (self.seeds - k) / m + 1
        }
    }

    /// The `i`-th seed this configuration covers (`i < seed_count()`).
    fn nth_seed(&self, i: u64) -> u64 {
        let (k, m) = self.shard_or_whole();
        // `check` guarantees start + seeds - 1 fits, and this offset is below `seeds`.
        self.start + (k - 1) + i * m
    }

    /// The seeds this configuration (and shard) covers, in order, one at a time.
    /// Call [`SweepConfig::check`] first: an overflowing range would wrap.
    pub fn seed_iter(&self) -> impl Iterator<Item = u64> {
        let config = *self;
        (0..config.seed_count()).map(move |i| config.nth_seed(i))
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
    /// The wrapping sum, over every agreeing seed, of the first 64 bits of the SHA-256
    /// of what both implementations said (the receipt, or the error lines). Order does
    /// not matter, so shards' fingerprints add up to the whole sweep's: merging shard
    /// reports shows that they replayed the same traces to the same receipts.
    pub outcome_fingerprint: u64,
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

/// The 64 bits an agreeing seed adds to [`SweepReport::outcome_fingerprint`].
pub fn outcome_bits(agreement: &Agreement) -> u64 {
    match agreement {
        Agreement::Accepted(receipt) => fingerprint_bits(receipt),
        Agreement::Rejected(lines) => fingerprint_bits(lines.join("\n").as_bytes()),
    }
}

/// What each seed of a sweep checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepMode {
    /// Core's receipt against the oracle's, on the seed's trace.
    Receipts,
    /// Core's closed loop against the oracle's engine model (SPEC.md §11), on the seed's
    /// trace under [`crate::engine_model::settings_for_seed`].
    ClosedLoop,
}

impl SweepMode {
    pub fn name(self) -> &'static str {
        match self {
            SweepMode::Receipts => "receipts",
            SweepMode::ClosedLoop => "closed_loop",
        }
    }

    /// One seed's check: the 64 bits it adds to the fingerprint, or the divergence.
    fn check(self, seed: u64) -> Result<u64, Divergence> {
        match self {
            SweepMode::Receipts => {
                differential::compare(&trace_for_seed(seed)).map(|a| outcome_bits(&a))
            }
            SweepMode::ClosedLoop => crate::engine_model::compare_seed(&trace_for_seed(seed), seed)
                .map(|document| fingerprint_bits(&document)),
        }
    }
}

/// The first 64 bits of SHA-256 of `bytes`.
fn fingerprint_bits(bytes: &[u8]) -> u64 {
    let digest = kvroute_core::output::sha256_tag(bytes);
    let hex = digest.trim_start_matches("sha256:");
    u64::from_str_radix(&hex[..16], 16).expect("a SHA-256 tag is 64 hex digits")
}

/// Runs the receipt sweep on `config.jobs` threads; `on_seed_done` is called once per
/// seed (from any thread), e.g. to advance a progress bar.
pub fn run(
    config: &SweepConfig,
    on_seed_done: impl Fn() + Sync,
) -> Result<SweepReport, SweepConfigError> {
    run_mode(config, SweepMode::Receipts, on_seed_done)
}

/// Runs the sweep in `mode`.
pub fn run_mode(
    config: &SweepConfig,
    mode: SweepMode,
    on_seed_done: impl Fn() + Sync,
) -> Result<SweepReport, SweepConfigError> {
    config.check()?;
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.jobs)
        .build()
        .expect("a rayon pool with a positive thread count builds");
    // Rayon splits the index range itself: no seed list is ever built.
    let (mut failures, outcome_fingerprint) = pool.install(|| {
        (0..config.seed_count())
            .into_par_iter()
            .map(|i| {
                let seed = config.nth_seed(i);
                let outcome = mode.check(seed);
                on_seed_done();
                match outcome {
                    Ok(bits) => (Vec::new(), bits),
                    Err(divergence) => (vec![(seed, divergence)], 0),
                }
            })
            .reduce(
                || (Vec::new(), 0u64),
                |(mut failures, bits), (more, more_bits)| {
                    failures.extend(more);
                    (failures, bits.wrapping_add(more_bits))
                },
            )
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
            // The shrinker keeps what makes receipts differ; a closed-loop divergence is
            // saved whole, with its seed's engine settings in the reproducer.
            let shrunk_trace = (i == 0)
                .then(|| match mode {
                    SweepMode::Receipts => {
                        let shrunk = shrink(&trace_for_seed(seed));
                        differential::save_trace(&format!("seed-{seed}-shrunk"), &shrunk).ok()
                    }
                    SweepMode::ClosedLoop => differential::save_trace(
                        &format!("seed-{seed}-closed-loop"),
                        &trace_for_seed(seed),
                    )
                    .ok(),
                })
                .flatten();
            Failure {
                seed,
                divergence,
                shrunk_trace,
            }
        })
        .collect();
    Ok(SweepReport {
        seeds_run: config.seed_count(),
        failures,
        outcome_fingerprint,
        elapsed,
    })
}

/// The receipt sweep when only whether some seed diverges matters (the mutant check):
/// it stops at the smallest divergent seed and shrinks nothing. A sweep with no
/// divergence checks every seed, exactly as [`run`] does.
pub fn first_divergence(
    config: &SweepConfig,
) -> Result<FirstFailure<Divergence>, SweepConfigError> {
    first_failing_seed(config, check_seed)
}

/// [`first_divergence`] with the seed's check given, so that stopping early can be
/// tested without a broken build. The answer is the smallest failing seed whatever the
/// thread count: rayon's `find_map_first` keeps checking the seeds before a failure
/// and skips the ones after it.
pub fn first_failing_seed<E: Send>(
    config: &SweepConfig,
    check: impl Fn(u64) -> Result<(), E> + Sync,
) -> Result<FirstFailure<E>, SweepConfigError> {
    config.check()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.jobs)
        .build()
        .expect("a rayon pool with a positive thread count builds");
    let checked = std::sync::atomic::AtomicU64::new(0);
    let first = pool.install(|| {
        (0..config.seed_count())
            .into_par_iter()
            .find_map_first(|i| {
                let seed = config.nth_seed(i);
                checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                check(seed).err().map(|e| (seed, e))
            })
    });
    Ok(FirstFailure {
        first,
        seeds_checked: checked.into_inner(),
    })
}

/// What [`first_failing_seed`] found: the smallest failing seed with its error, and
/// how many seeds were checked.
#[derive(Debug, Clone)]
pub struct FirstFailure<E> {
    pub first: Option<(u64, E)>,
    pub seeds_checked: u64,
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
