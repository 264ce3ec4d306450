//! Shadow mode: where two runs of the same requests choose differently (`kvroute diff`
//! and the report's shadow-diff section).
//!
//! The baseline run is the policy that serves; the candidate is the one being shadowed.
//! Decisions are paired by position and must name the same `seq` and request; each
//! differing pair lists both chosen rows and the predicted deltas (candidate minus
//! baseline) of recomputed tokens and, when the workers' prefill rates are known, of the
//! latency proxy.

use super::model::{DecisionDoc, RowDoc, RunDoc, TraceFacts};
use kvroute_cli::terminal::printable;
use kvroute_core::output::{id_cell, CsvIds};
use serde::Serialize;

/// The `format` member of `kvroute diff --format json`.
pub const DIFF_FORMAT: &str = "kvroute-diff/1";

/// One decision whose `chosen` differs.
#[derive(Debug, Clone, Serialize)]
pub struct DiffEntry {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub baseline: Option<RowDoc>,
    pub candidate: Option<RowDoc>,
    /// Candidate minus baseline; absent when either side rejected the request.
    pub recomputed_delta: Option<i64>,
    /// Candidate minus baseline, in milli-ticks; absent without prefill rates.
    pub latency_proxy_delta_milli: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffSummary {
    pub decisions: usize,
    pub differing: usize,
    /// Sums over the differing decisions of each side's chosen `recomputed`.
    pub baseline_recomputed: u64,
    pub candidate_recomputed: u64,
    /// Sums over the differing decisions of each side's latency proxy, when known.
    pub baseline_latency_proxy_milli: Option<u64>,
    pub candidate_latency_proxy_milli: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub baseline: String,
    pub candidate: String,
    pub entries: Vec<DiffEntry>,
    pub summary: DiffSummary,
}

fn delta(candidate: Option<u64>, baseline: Option<u64>) -> Option<i64> {
    Some(candidate? as i64 - baseline? as i64)
}

/// What the diff reads of one decision: its place, its request and its chosen row.
#[derive(Debug, Clone)]
pub struct ChosenDoc {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<String>,
    pub row: Option<RowDoc>,
}

impl ChosenDoc {
    pub fn of(decision: &DecisionDoc) -> ChosenDoc {
        ChosenDoc {
            seq: decision.seq,
            tick: decision.tick,
            request: decision.request.clone(),
            chosen: decision.chosen.clone(),
            row: decision.chosen_row().cloned(),
        }
    }
}

/// The decisions where `candidate` chooses differently from `baseline`, or an error
/// naming the first decision at which the two runs stop routing the same requests.
pub fn diff(
    baseline: (&str, &RunDoc),
    candidate: (&str, &RunDoc),
    facts: Option<&TraceFacts>,
) -> Result<Diff, String> {
    let chosen = |run: &RunDoc| run.decisions.iter().map(ChosenDoc::of).collect::<Vec<_>>();
    diff_chosen(
        (baseline.0, &chosen(baseline.1)),
        (candidate.0, &chosen(candidate.1)),
        facts,
    )
}

/// [`diff`] of two runs of which only the chosen rows were kept.
pub fn diff_chosen(
    baseline: (&str, &[ChosenDoc]),
    candidate: (&str, &[ChosenDoc]),
    facts: Option<&TraceFacts>,
) -> Result<Diff, String> {
    let (base_name, base) = baseline;
    let (cand_name, cand) = candidate;
    if base.len() != cand.len() {
        return Err(format!(
            "the runs do not route the same requests: {base_name} has {} decisions, {cand_name} {}",
            base.len(),
            cand.len()
        ));
    }
    let latency = |d: &ChosenDoc| facts.and_then(|f| f.latency_proxy_of_row(d.row.as_ref()?));
    let mut entries = Vec::new();
    let mut summary = DiffSummary {
        decisions: base.len(),
        differing: 0,
        baseline_recomputed: 0,
        candidate_recomputed: 0,
        baseline_latency_proxy_milli: facts.map(|_| 0),
        candidate_latency_proxy_milli: facts.map(|_| 0),
    };
    for (i, (b, c)) in base.iter().zip(cand).enumerate() {
        if b.seq != c.seq || b.request != c.request {
            return Err(format!(
                "the runs do not route the same requests: decision {i} is seq {} request {:?} in {base_name} but seq {} request {:?} in {cand_name}",
                b.seq, b.request, c.seq, c.request
            ));
        }
        if b.chosen == c.chosen {
            continue;
        }
        let (b_row, c_row) = (b.row.clone(), c.row.clone());
        let (b_lat, c_lat) = (latency(b), latency(c));
        summary.differing += 1;
        summary.baseline_recomputed += b_row.as_ref().map_or(0, |r| r.recomputed);
        summary.candidate_recomputed += c_row.as_ref().map_or(0, |r| r.recomputed);
        if let Some(sum) = summary.baseline_latency_proxy_milli.as_mut() {
            *sum += b_lat.unwrap_or(0);
        }
        if let Some(sum) = summary.candidate_latency_proxy_milli.as_mut() {
            *sum += c_lat.unwrap_or(0);
        }
        entries.push(DiffEntry {
            seq: b.seq,
            tick: b.tick,
            request: b.request.clone(),
            recomputed_delta: delta(
                c_row.as_ref().map(|r| r.recomputed),
                b_row.as_ref().map(|r| r.recomputed),
            ),
            latency_proxy_delta_milli: delta(c_lat, b_lat),
            baseline: b_row,
            candidate: c_row,
        });
    }
    Ok(Diff {
        baseline: base_name.to_owned(),
        candidate: cand_name.to_owned(),
        entries,
        summary,
    })
}

fn signed(value: i64) -> String {
    if value > 0 {
        format!("+{value}")
    } else {
        value.to_string()
    }
}

impl Diff {
    /// One line: how many decisions differ and what the candidate would change.
    pub fn summary_line(&self) -> String {
        let s = &self.summary;
        let mut line = format!(
            "diff: {} of {} decisions differ ({} -> {}); on those, recomputed tokens {} -> {} ({})",
            s.differing,
            s.decisions,
            self.baseline,
            self.candidate,
            s.baseline_recomputed,
            s.candidate_recomputed,
            signed(s.candidate_recomputed as i64 - s.baseline_recomputed as i64),
        );
        match (
            s.baseline_latency_proxy_milli,
            s.candidate_latency_proxy_milli,
        ) {
            (Some(b), Some(c)) if s.differing > 0 => line.push_str(&format!(
                ", latency proxy mean {} -> {} milli-ticks",
                b / s.differing as u64,
                c / s.differing as u64
            )),
            (Some(_), Some(_)) => {}
            _ => line.push_str(", latency proxy unknown (pass --trace for prefill rates)"),
        }
        line
    }

    /// A fixed-width table of the differing decisions, then the summary line.
    pub fn table(&self) -> String {
        // Nothing differs: the summary says so, and a header over no rows says nothing.
        if self.entries.is_empty() {
            return format!("{}\n", self.summary_line());
        }
        let mut out = format!(
            "{:>8} {:>8} {:<16} | {:<27} | {:<27} | {:>10} {:>12}\n",
            "seq",
            "tick",
            "request",
            "baseline worker reuse cost",
            "candidate worker reuse cost",
            "d_recomp",
            "d_latency_m"
        );
        // 27 columns a side: worker (8), reuse (7) and cost (10), a space between.
        let side = |row: &Option<RowDoc>| match row {
            None => "rejected".to_owned(),
            Some(r) => format!(
                "{:<8} {:>7} {:>10}",
                printable(&r.worker),
                r.reuse,
                r.cost_milli
            ),
        };
        let opt = |v: Option<i64>| v.map_or("-".to_owned(), signed);
        for e in &self.entries {
            out.push_str(&format!(
                "{:>8} {:>8} {:<16} | {:<27} | {:<27} | {:>10} {:>12}\n",
                e.seq,
                e.tick,
                printable(&e.request),
                side(&e.baseline),
                side(&e.candidate),
                opt(e.recomputed_delta),
                opt(e.latency_proxy_delta_milli),
            ));
        }
        out.push_str(&self.summary_line());
        out.push('\n');
        out
    }

    /// The diff as one JSON document plus a newline.
    pub fn json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(&serde_json::json!({
            "format": DIFF_FORMAT,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "decisions": self.entries,
            "summary": self.summary,
        }))
        .expect("a diff serialises");
        bytes.push(b'\n');
        bytes
    }

    /// One CSV line per differing decision, both chosen rows side by side. The id
    /// columns (`request` and both `worker`s) follow SPEC.md §6.3's rule, as `replay
    /// --format csv` does: spreadsheet-safe unless `ids` is [`CsvIds::Plain`].
    pub fn csv(&self, ids: CsvIds) -> Result<Vec<u8>, csv::Error> {
        let id = |text: &str| id_cell(text, ids).into_owned();
        let mut writer = csv::Writer::from_writer(Vec::new());
        let mut header: Vec<String> = ["seq", "tick", "request"].map(String::from).to_vec();
        for side in ["baseline", "candidate"] {
            for column in [
                "worker",
                "reuse",
                "recomputed",
                "work_milli",
                "after_milli",
                "cost_milli",
                "reasons",
            ] {
                header.push(format!("{side}_{column}"));
            }
        }
        header.extend(["recomputed_delta", "latency_proxy_delta_milli"].map(String::from));
        writer.write_record(&header)?;
        let side = |row: &Option<RowDoc>| -> Vec<String> {
            match row {
                None => vec![String::new(); 7],
                Some(r) => vec![
                    id(&r.worker),
                    r.reuse.to_string(),
                    r.recomputed.to_string(),
                    r.work_milli.to_string(),
                    r.after_milli.to_string(),
                    r.cost_milli.to_string(),
                    r.reasons.join(";"),
                ],
            }
        };
        let opt = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        for e in &self.entries {
            let mut record = vec![e.seq.to_string(), e.tick.to_string(), id(&e.request)];
            record.extend(side(&e.baseline));
            record.extend(side(&e.candidate));
            record.push(opt(e.recomputed_delta));
            record.push(opt(e.latency_proxy_delta_milli));
            writer.write_record(&record)?;
        }
        Ok(writer.into_inner().map_err(|e| e.into_error())?)
    }
}
