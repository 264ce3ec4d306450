//! The swarm report (`kvroute-swarm-report/1`): a small JSON summary of one sweep or one
//! shard of it, and `kvroute swarm merge`, which checks that a set of reports covers a
//! seed range exactly once and prints their union in the same format.
//!
//! A report holds no timestamps, durations or host names, only what the seeds decided,
//! so the same range swept on one machine or as M shards on a cluster gives the same
//! merged bytes; the outcome fingerprint (a sum over seeds, see `sweep::SweepReport`)
//! shows that the shards replayed the same traces to the same receipts.

use crate::failure::Failure;
use kvroute_cli::terminal::{counted, printable};
use kvroute_harness::generators::GENERATOR_VERSION;
use kvroute_harness::sweep::{SweepConfig, SweepMode, SweepReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const REPORT_FORMAT: &str = "kvroute-swarm-report/1";

/// A report lists at most this many divergences (the smallest seeds); `divergent_seeds`
/// still counts all of them. A badly broken build may diverge on every seed, and the
/// report should stay small.
pub const DIVERGENCES_LISTED_MAX: usize = 100;

/// One sweep or shard, as written by `kvroute swarm --report` and by `swarm merge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardReport {
    pub format: String,
    /// The `kvroute` binary's version.
    pub kvroute_version: String,
    /// `GENERATOR_VERSION` of the harness that built the traces.
    pub generator_version: u32,
    /// What each seed checked: `receipts`, or `closed_loop` (`--closed-loop`).
    #[serde(default = "receipts_mode")]
    pub mode: String,
    /// The sweep's range: seeds `start` to `start + seeds - 1`.
    pub start: u64,
    pub seeds: u64,
    /// Which shard of the range this report covers (1 of 1 for a whole range).
    pub shard: Shard,
    pub seeds_run: u64,
    /// `SweepReport::outcome_fingerprint` as 16 hex digits (a string, because JSON
    /// readers other than this one lose integers past 2^53).
    pub outcome_fingerprint: String,
    pub divergent_seeds: u64,
    /// The first `DIVERGENCES_LISTED_MAX` divergent seeds, in seed order.
    pub divergences: Vec<DivergenceEntry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// 1-based.
    pub index: u64,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DivergenceEntry {
    pub seed: u64,
    pub first_difference: String,
    /// The command that reruns this seed alone.
    pub reproduce: String,
    /// The shrunk trace's file name in the divergence directory (`KVROUTE_DIVERGENCE_DIR`,
    /// by default `target/kvroute-divergences/`); each shard shrinks its smallest seed.
    pub shrunk_trace: Option<String>,
}

fn receipts_mode() -> String {
    SweepMode::Receipts.name().to_string()
}

/// The command line that reruns one seed.
pub fn reproduce_line(seed: u64, mode: SweepMode) -> String {
    match mode {
        SweepMode::Receipts => format!("kvroute swarm --seeds 1 --start {seed}"),
        SweepMode::ClosedLoop => format!("kvroute swarm --closed-loop --seeds 1 --start {seed}"),
    }
}

impl ShardReport {
    pub fn of_sweep(config: &SweepConfig, mode: SweepMode, report: &SweepReport) -> Self {
        let (index, count) = config.shard.unwrap_or((1, 1));
        ShardReport {
            format: REPORT_FORMAT.to_string(),
            kvroute_version: env!("CARGO_PKG_VERSION").to_string(),
            generator_version: GENERATOR_VERSION,
            mode: mode.name().to_string(),
            start: config.start,
            seeds: config.seeds,
            shard: Shard { index, count },
            seeds_run: report.seeds_run,
            outcome_fingerprint: format!("{:016x}", report.outcome_fingerprint),
            divergent_seeds: report.failures.len() as u64,
            divergences: report
                .failures
                .iter()
                .take(DIVERGENCES_LISTED_MAX)
                .map(|failure| DivergenceEntry {
                    seed: failure.seed,
                    first_difference: failure.divergence.to_string(),
                    reproduce: reproduce_line(failure.seed, mode),
                    shrunk_trace: failure.shrunk_trace.as_ref().and_then(|path| {
                        path.file_name()
                            .map(|name| name.to_string_lossy().into_owned())
                    }),
                })
                .collect(),
        }
    }

    /// Pretty JSON plus a newline; fields in declaration order, so equal reports are
    /// equal bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a report always serialises");
        bytes.push(b'\n');
        bytes
    }

    /// The seeds past the range's last one, as a 65-bit number (`start + seeds` may be
    /// 2^64).
    fn end(&self) -> u128 {
        u128::from(self.start) + u128::from(self.seeds)
    }

    /// How many seeds shard `index` of `count` holds, as `SweepConfig::seed_count`.
    fn expected_seeds_run(&self) -> u64 {
        SweepConfig {
            start: self.start,
            seeds: self.seeds,
            jobs: 1,
            shard: Some((self.shard.index, self.shard.count)),
        }
        .seed_count()
    }
}

impl ShardReport {
    /// What this report says about itself that cannot be true of a report `swarm`
    /// wrote: more divergences listed than counted, more counted than run, a list that
    /// is not the first `DIVERGENCES_LISTED_MAX` by seed, a seed twice or outside the
    /// shard, a reproduce line that is not the one for its seed, a shrunk trace that is
    /// not a plain file name. Merging such a report could turn a failing sweep into a
    /// passing one (`divergent_seeds: 0` beside a listed divergence), so it is bad input.
    fn inconsistencies(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let listed = self.divergences.len() as u64;
        if self.divergent_seeds > self.seeds_run {
            problems.push(format!(
                "divergent_seeds is {}, more than the {} seeds run",
                self.divergent_seeds, self.seeds_run
            ));
        }
        let expected_listed = self.divergent_seeds.min(DIVERGENCES_LISTED_MAX as u64);
        if listed != expected_listed {
            problems.push(format!(
                "{} listed, but divergent_seeds is {} (a report lists the first {expected_listed})",
                counted(listed, "divergence", "divergences"),
                self.divergent_seeds
            ));
        }
        let mode = match self.mode.as_str() {
            "receipts" => Some(SweepMode::Receipts),
            "closed_loop" => Some(SweepMode::ClosedLoop),
            _ => {
                problems.push(format!(
                    "mode {:?} is neither \"receipts\" nor \"closed_loop\"",
                    self.mode
                ));
                None
            }
        };
        let mut previous: Option<u64> = None;
        for entry in &self.divergences {
            let seed = entry.seed;
            if let Some(before) = previous.filter(|&before| seed <= before) {
                problems.push(if seed == before {
                    format!("seed {seed} is listed twice")
                } else {
                    format!("divergences are not in seed order: seed {seed} after seed {before}")
                });
            }
            previous = Some(seed);
            if !self.holds_seed(seed) {
                problems.push(format!(
                    "a divergence at seed {seed}, which is not in shard {}/{} of {}",
                    self.shard.index,
                    self.shard.count,
                    range_text(self.start.into(), self.end())
                ));
            }
            if let Some(mode) = mode {
                let expected = reproduce_line(seed, mode);
                if entry.reproduce != expected {
                    problems.push(format!(
                        "seed {seed}'s reproduce line is {:?}, expected {expected:?}",
                        entry.reproduce
                    ));
                }
            }
            if let Some(name) = &entry.shrunk_trace {
                let plain = !name.is_empty()
                    && name != "."
                    && name != ".."
                    && !name.contains('/')
                    && !name.chars().any(char::is_control);
                if !plain {
                    problems.push(format!(
                        "seed {seed}'s shrunk_trace {name:?} is not a plain file name"
                    ));
                }
            }
        }
        problems
    }

    /// Whether `seed` is one of this shard's: in the range, `K - 1` modulo `M` from its
    /// start (SPEC.md §7).
    fn holds_seed(&self, seed: u64) -> bool {
        let Some(offset) = seed.checked_sub(self.start) else {
            return false;
        };
        offset < self.seeds && offset % self.shard.count == self.shard.index - 1
    }
}

/// Why a set of reports does not merge; each is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeProblems(pub Vec<String>);

fn range_text(start: u128, end: u128) -> String {
    format!("seeds {start}..{}", end.saturating_sub(1))
}

/// Checks and joins reports (with the file each came from, for messages). Reports of one
/// range must be shards 1..=M of the same M, each once; several ranges must follow one
/// another with no gap or overlap. Versions must all match.
pub fn merge(reports: &[(PathBuf, ShardReport)]) -> Result<ShardReport, MergeProblems> {
    let problems = report_problems(reports);
    if !problems.is_empty() {
        return Err(MergeProblems(problems));
    }
    let spans = coverage(reports).map_err(MergeProblems)?;
    union(reports, &spans)
}

/// What is wrong with each report on its own or against the first: format, mode,
/// versions, shard numbers, seed counts and its claims about itself.
fn report_problems(reports: &[(PathBuf, ShardReport)]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some((first_path, first)) = reports.first() else {
        return vec!["no reports to merge".to_string()];
    };
    for (path, report) in reports {
        if report.format != REPORT_FORMAT {
            problems.push(format!(
                "{}: format {:?}, expected {REPORT_FORMAT:?}",
                path.display(),
                report.format
            ));
        }
        if report.mode != first.mode {
            problems.push(format!(
                "{}: a {} sweep, but {} is a {} sweep",
                path.display(),
                report.mode,
                first_path.display(),
                first.mode
            ));
        }
        if (report.kvroute_version.as_str(), report.generator_version)
            != (first.kvroute_version.as_str(), first.generator_version)
        {
            problems.push(format!(
                "{}: run by kvroute {} with generator {}, but {} by kvroute {} with generator {}",
                path.display(),
                report.kvroute_version,
                report.generator_version,
                first_path.display(),
                first.kvroute_version,
                first.generator_version
            ));
        }
        let shard = report.shard;
        if shard.index == 0 || shard.index > shard.count {
            problems.push(format!(
                "{}: shard {}/{} is not 1 <= K <= M",
                path.display(),
                shard.index,
                shard.count
            ));
        } else if report.seeds_run != report.expected_seeds_run() {
            problems.push(format!(
                "{}: {} seeds run, but shard {}/{} of {} holds {}",
                path.display(),
                report.seeds_run,
                shard.index,
                shard.count,
                range_text(report.start.into(), report.end()),
                report.expected_seeds_run()
            ));
        } else {
            problems.extend(
                report
                    .inconsistencies()
                    .into_iter()
                    .map(|problem| format!("{}: {problem}", path.display())),
            );
        }
    }
    problems
}

/// The seed ranges the reports cover, in order, when every range has each of its `M`
/// shards once and the ranges tile with no gap or overlap; otherwise every gap and
/// overlap.
fn coverage(reports: &[(PathBuf, ShardReport)]) -> Result<Vec<(u128, u128)>, Vec<String>> {
    let mut problems = Vec::new();
    // Group the shards of each range; every range must have each of its M shards once.
    let (ranges, counts) = shards_by_range(reports);
    for (&(start, seeds), shards) in &ranges {
        let range = range_text(start.into(), u128::from(start) + u128::from(seeds));
        range_problems(&range, shards, &counts[&(start, seeds)], &mut problems);
    }
    // Ranges must tile: each starts where the one before it ends.
    let spans: Vec<(u128, u128)> = ranges
        .keys()
        .map(|&(start, seeds)| (u128::from(start), u128::from(start) + u128::from(seeds)))
        .collect();
    tiling_problems(&spans, &mut problems);
    if problems.is_empty() {
        Ok(spans)
    } else {
        Err(problems)
    }
}

/// Reports by the seed range `(start, seeds)` they split, then by shard index.
type ShardsByRange<'a> = BTreeMap<(u64, u64), BTreeMap<u64, Vec<&'a Path>>>;

/// Reports by the seed range they split, then by how many shards they split it into
/// (the first report of each).
type SplitsByRange<'a> = BTreeMap<(u64, u64), BTreeMap<u64, &'a Path>>;

/// The reports grouped by range and shard index, and by range and shard count.
fn shards_by_range(reports: &[(PathBuf, ShardReport)]) -> (ShardsByRange<'_>, SplitsByRange<'_>) {
    let mut ranges: ShardsByRange = BTreeMap::new();
    let mut counts: SplitsByRange = BTreeMap::new();
    for (path, report) in reports {
        let range = (report.start, report.seeds);
        ranges
            .entry(range)
            .or_default()
            .entry(report.shard.index)
            .or_default()
            .push(path);
        counts
            .entry(range)
            .or_default()
            .entry(report.shard.count)
            .or_insert(path);
    }
    (ranges, counts)
}

/// The problems of one range's shards: split in more than one way, a shard in two
/// reports, or shards in none.
fn range_problems(
    range: &str,
    shards: &BTreeMap<u64, Vec<&Path>>,
    shard_counts: &BTreeMap<u64, &Path>,
    problems: &mut Vec<String>,
) {
    if shard_counts.len() > 1 {
        let split: Vec<String> = shard_counts
            .iter()
            .map(|(count, path)| format!("{} into {count}", path.display()))
            .collect();
        problems.push(format!(
            "{range} is split in different ways ({}): shards of different splits overlap",
            split.join(", ")
        ));
        return;
    }
    let count = *shard_counts.keys().next().expect("a range has a report");
    for (index, paths) in shards {
        if paths.len() > 1 {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            problems.push(format!(
                "overlap: shard {index}/{count} of {range} is in {}",
                names.join(" and ")
            ));
        }
    }
    let missing: Vec<String> = (1..=count)
        .filter(|index| !shards.contains_key(index))
        .take(10)
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        let more = (count as usize - shards.len()).saturating_sub(missing.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        problems.push(format!(
            "gap: no report for shard {}{more} of {range}",
            missing.join(", ")
        ));
    }
}

/// Every overlap and gap between consecutive `spans`, which are in order of start.
fn tiling_problems(spans: &[(u128, u128)], problems: &mut Vec<String>) {
    for pair in spans.windows(2) {
        let ((start_a, end_a), (start_b, end_b)) = (pair[0], pair[1]);
        if start_b < end_a {
            problems.push(format!(
                "overlap: {} and {} share {}",
                range_text(start_a, end_a),
                range_text(start_b, end_b),
                range_text(start_b, end_a.min(end_b))
            ));
        } else if start_b > end_a {
            problems.push(format!(
                "gap: {} are in no report",
                range_text(end_a, start_b)
            ));
        }
    }
}

/// The union of reports already known to tile `spans`: counts and fingerprints summed,
/// the first divergences by seed kept.
fn union(
    reports: &[(PathBuf, ShardReport)],
    spans: &[(u128, u128)],
) -> Result<ShardReport, MergeProblems> {
    let first = &reports[0].1;
    let (start, _) = spans[0];
    let end = spans.iter().map(|&(_, end)| end).max().unwrap_or(start);
    let mut divergences: Vec<DivergenceEntry> = reports
        .iter()
        .flat_map(|(_, report)| report.divergences.iter().cloned())
        .collect();
    divergences.sort_by_key(|entry| entry.seed);
    // Each shard lists its smallest seeds, so the union's smallest are among them.
    divergences.truncate(DIVERGENCES_LISTED_MAX);
    let fingerprint = reports.iter().try_fold(0u64, |sum, (path, report)| {
        u64::from_str_radix(&report.outcome_fingerprint, 16)
            .map(|bits| sum.wrapping_add(bits))
            .map_err(|_| {
                format!(
                    "{}: outcome_fingerprint {:?} is not 16 hex digits",
                    path.display(),
                    report.outcome_fingerprint
                )
            })
    });
    let fingerprint = fingerprint.map_err(|line| MergeProblems(vec![line]))?;
    Ok(ShardReport {
        format: REPORT_FORMAT.to_string(),
        kvroute_version: first.kvroute_version.clone(),
        generator_version: first.generator_version,
        mode: first.mode.clone(),
        start: u64::try_from(start).expect("a range starts at a u64 seed"),
        // Only a sweep of all 2^64 seeds would not fit, and no report can hold one.
        seeds: u64::try_from(end - start).unwrap_or(u64::MAX),
        shard: Shard { index: 1, count: 1 },
        seeds_run: reports.iter().map(|(_, r)| r.seeds_run).sum(),
        outcome_fingerprint: format!("{fingerprint:016x}"),
        divergent_seeds: reports.iter().map(|(_, r)| r.divergent_seeds).sum(),
        divergences,
    })
}

/// `kvroute swarm merge FILE...`: the union on stdout, a summary and every listed
/// divergence's reproducer on stderr.
pub fn merge_command(paths: &[PathBuf]) -> Result<(), Failure> {
    let mut reports = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        // `-` is stdin, as for every FILE (at most one, checked before this runs).
        let read = if path.as_os_str() == "-" {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes).map(|_| bytes)
        } else {
            std::fs::read(path)
        };
        match read {
            Err(e) => unreadable.push(format!("{}: cannot read report: {e}", path.display())),
            Ok(bytes) => match serde_json::from_slice::<ShardReport>(&bytes) {
                Err(e) => unreadable.push(format!(
                    "{}: not a {REPORT_FORMAT} report: {e}",
                    path.display()
                )),
                Ok(report) => reports.push((path.clone(), report)),
            },
        }
    }
    if !unreadable.is_empty() {
        return Err(Failure::invalid(unreadable));
    }
    let merged = merge(&reports).map_err(|MergeProblems(lines)| {
        let mut lines: Vec<String> = lines
            .into_iter()
            .map(|line| format!("swarm merge: {line}"))
            .collect();
        lines.push(format!(
            "swarm merge: {} not merged",
            counted(reports.len() as u64, "report", "reports")
        ));
        Failure::invalid(lines)
    })?;
    crate::out::emit(&merged.to_bytes(), None)?;
    for entry in &merged.divergences {
        // The report's strings are the reader's input: escaped, so none can rewrite the
        // terminal (the reproduce line and the file name were checked by `merge`).
        note!(
            "seed {}: core and oracle diverge {}\n  reproduce: {}{}",
            entry.seed,
            printable(&entry.first_difference),
            printable(&entry.reproduce),
            entry
                .shrunk_trace
                .as_ref()
                .map_or(String::new(), |name| format!(
                    "\n  shrunk trace: {}",
                    printable(name)
                ))
        );
    }
    note!(
        "swarm merge: {}, {}, {} run, {}",
        counted(reports.len() as u64, "report", "reports"),
        range_text(merged.start.into(), merged.end()),
        counted(merged.seeds_run, "seed", "seeds"),
        counted(merged.divergent_seeds, "divergence", "divergences")
    );
    if merged.divergent_seeds == 0 {
        Ok(())
    } else {
        Err(Failure::other(format!(
            "swarm merge: {}",
            counted(merged.divergent_seeds, "divergent seed", "divergent seeds")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(start: u64, seeds: u64, index: u64, count: u64) -> ShardReport {
        let mut report = ShardReport {
            format: REPORT_FORMAT.to_string(),
            kvroute_version: "0.1.0".to_string(),
            generator_version: 1,
            mode: "receipts".to_string(),
            start,
            seeds,
            shard: Shard { index, count },
            seeds_run: 0,
            outcome_fingerprint: format!("{:016x}", index),
            divergent_seeds: 0,
            divergences: Vec::new(),
        };
        report.seeds_run = report.expected_seeds_run();
        report
    }

    fn named(reports: Vec<ShardReport>) -> Vec<(PathBuf, ShardReport)> {
        reports
            .into_iter()
            .enumerate()
            .map(|(i, r)| (PathBuf::from(format!("r{i}.json")), r))
            .collect()
    }

    fn problems(reports: Vec<ShardReport>) -> String {
        merge(&named(reports)).unwrap_err().0.join("\n")
    }

    #[test]
    fn the_shards_of_a_range_merge_into_the_whole_range() {
        let merged = merge(&named(vec![report(10, 7, 2, 2), report(10, 7, 1, 2)])).unwrap();
        assert_eq!((merged.start, merged.seeds, merged.seeds_run), (10, 7, 7));
        assert_eq!(merged.shard, Shard { index: 1, count: 1 });
        assert_eq!(merged.outcome_fingerprint, "0000000000000003");
    }

    #[test]
    fn consecutive_ranges_merge_and_separated_ones_do_not() {
        let merged = merge(&named(vec![report(100, 50, 1, 1), report(0, 100, 1, 1)])).unwrap();
        assert_eq!(
            (merged.start, merged.seeds, merged.seeds_run),
            (0, 150, 150)
        );
        assert!(problems(vec![report(0, 100, 1, 1), report(101, 5, 1, 1)])
            .contains("gap: seeds 100..100 are in no report"));
        assert!(problems(vec![report(0, 100, 1, 1), report(99, 5, 1, 1)])
            .contains("overlap: seeds 0..99 and seeds 99..103 share seeds 99..99"));
    }

    #[test]
    fn a_missing_or_repeated_shard_is_named() {
        assert!(problems(vec![report(0, 9, 1, 3), report(0, 9, 3, 3)])
            .contains("gap: no report for shard 2/3 of seeds 0..8"));
        assert!(problems(vec![
            report(0, 9, 1, 2),
            report(0, 9, 1, 2),
            report(0, 9, 2, 2)
        ])
        .contains("overlap: shard 1/2 of seeds 0..8 is in r0.json and r1.json"));
        assert!(problems(vec![report(0, 9, 1, 2), report(0, 9, 2, 3)])
            .contains("split in different ways"));
    }

    #[test]
    fn reports_of_different_versions_do_not_merge() {
        let mut newer = report(0, 9, 2, 2);
        newer.generator_version = 2;
        assert!(problems(vec![report(0, 9, 1, 2), newer])
            .contains("r1.json: run by kvroute 0.1.0 with generator 2, but r0.json"));
        let mut short = report(0, 9, 2, 2);
        short.seeds_run -= 1;
        assert!(problems(vec![report(0, 9, 1, 2), short]).contains("3 seeds run"));
    }

    #[test]
    fn divergences_are_joined_in_seed_order() {
        let entry = |seed| DivergenceEntry {
            seed,
            first_difference: "at /runs/0".to_string(),
            reproduce: reproduce_line(seed, SweepMode::Receipts),
            shrunk_trace: None,
        };
        let mut one = report(0, 10, 1, 2);
        one.divergences = vec![entry(4)];
        one.divergent_seeds = 1;
        let mut two = report(0, 10, 2, 2);
        two.divergences = vec![entry(1), entry(9)];
        two.divergent_seeds = 2;
        let merged = merge(&named(vec![one, two])).unwrap();
        let seeds: Vec<u64> = merged.divergences.iter().map(|d| d.seed).collect();
        assert_eq!((seeds, merged.divergent_seeds), (vec![1, 4, 9], 3));
    }

    /// Each claim a report makes about itself that `swarm` could not have written is
    /// bad input, named with the report's file: an edited report with
    /// `divergent_seeds: 0` beside a listed divergence must not merge as a pass.
    #[test]
    fn a_report_that_contradicts_itself_does_not_merge() {
        let entry = |seed| DivergenceEntry {
            seed,
            first_difference: "at /runs/0".to_string(),
            reproduce: reproduce_line(seed, SweepMode::Receipts),
            shrunk_trace: None,
        };
        let with = |divergent_seeds, divergences: Vec<DivergenceEntry>| {
            let mut one = report(0, 10, 2, 2);
            one.divergent_seeds = divergent_seeds;
            one.divergences = divergences;
            problems(vec![report(0, 10, 1, 2), one])
        };
        let cases = [
            (
                with(0, vec![entry(1)]),
                "r1.json: 1 divergence listed, but divergent_seeds is 0 (a report lists the first 0)",
            ),
            (
                with(2, vec![entry(1)]),
                "r1.json: 1 divergence listed, but divergent_seeds is 2 (a report lists the first 2)",
            ),
            (
                with(6, vec![entry(1)]),
                "r1.json: divergent_seeds is 6, more than the 5 seeds run\n\
                 r1.json: 1 divergence listed, but divergent_seeds is 6 (a report lists the first 6)",
            ),
            (
                with(2, vec![entry(3), entry(3)]),
                "r1.json: seed 3 is listed twice",
            ),
            (
                with(2, vec![entry(5), entry(3)]),
                "r1.json: divergences are not in seed order: seed 3 after seed 5",
            ),
            (
                with(1, vec![entry(2)]),
                "r1.json: a divergence at seed 2, which is not in shard 2/2 of seeds 0..9",
            ),
            (
                with(1, vec![entry(11)]),
                "r1.json: a divergence at seed 11, which is not in shard 2/2 of seeds 0..9",
            ),
            (
                with(
                    1,
                    vec![DivergenceEntry {
                        reproduce: "rm -rf ~".to_string(),
                        ..entry(1)
                    }],
                ),
                "r1.json: seed 1's reproduce line is \"rm -rf ~\", expected \"kvroute swarm --seeds 1 --start 1\"",
            ),
            (
                with(
                    1,
                    vec![DivergenceEntry {
                        shrunk_trace: Some("../../etc/passwd".to_string()),
                        ..entry(1)
                    }],
                ),
                "r1.json: seed 1's shrunk_trace \"../../etc/passwd\" is not a plain file name",
            ),
        ];
        for (problems, expected) in cases {
            assert_eq!(problems, expected);
        }
        // The same edits on a consistent report merge.
        let mut one = report(0, 10, 2, 2);
        one.divergent_seeds = 2;
        one.divergences = vec![entry(1), entry(3)];
        assert!(merge(&named(vec![report(0, 10, 1, 2), one])).is_ok());
    }
}
