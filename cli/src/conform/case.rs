//! A conformance case (`kvroute-conform-case/1`, SPEC.md §16.2): a trace that is the
//! truth, the question put to the router, the expected answer, and the answer a router
//! with the field report's defect gives. Loading checks the shape; [`super::reference`]
//! checks that the expected answer is the policy-neutral one.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The block size every case is written in, and the one every router is told.
pub(crate) use crate::publish::BLOCK_TOKENS;
pub const FORMAT: &str = "kvroute-conform-case/1";

/// What the router is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Question {
    Choice,
    Overlap,
    Refusal,
}

/// An answer: what a case expects, what a defect gives, and what a router said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// One worker chosen.
    Worker(String),
    /// Any one of these workers (an exact tie, or a defect's set of picks).
    AnyOf(Vec<String>),
    /// Whole blocks of overlap per worker.
    Overlap(BTreeMap<String, u64>),
    /// A refusal case: whether the router refused visibly.
    Reported(bool),
}

impl Answer {
    /// The answer written as a report cell.
    pub fn text(&self) -> String {
        match self {
            Answer::Worker(w) => w.clone(),
            Answer::AnyOf(ws) => format!("one of {}", ws.join(", ")),
            Answer::Overlap(m) => m
                .iter()
                .map(|(w, b)| format!("{w}={b}"))
                .collect::<Vec<_>>()
                .join(" "),
            Answer::Reported(true) => "reported".into(),
            Answer::Reported(false) => "silent".into(),
        }
    }

    /// Whether `given` (a router's answer) is this answer: a set holds its members.
    pub fn admits(&self, given: &Answer) -> bool {
        match (self, given) {
            (Answer::AnyOf(set), Answer::Worker(w)) => set.contains(w),
            _ => self == given,
        }
    }
}

/// The defect a field report describes: its cause and the answer it gives.
#[derive(Debug, Clone)]
pub struct Defect {
    pub cause: String,
    pub answer: Answer,
}

pub use crate::publish::plan::Wire;

impl Wire {
    /// The faults, as one line for the per-case table (empty for a faithful wire).
    pub fn describe(&self) -> String {
        let seqs = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let mut parts = Vec::new();
        if !self.lost.is_empty() {
            let kept = if self.replayable {
                "kept for replay"
            } else {
                "not replayable"
            };
            parts.push(format!("lost {} ({kept})", seqs(&self.lost)));
        }
        if !self.restart.is_empty() {
            parts.push(format!("restart at {}", seqs(&self.restart)));
        }
        for (worker, size) in &self.block_size {
            parts.push(format!("{worker} block size {size}"));
        }
        for copy in &self.host_copies {
            parts.push(format!(
                "{} CPU copy of {} after {}",
                copy.worker,
                copy.keys.join(","),
                copy.after
            ));
        }
        for [a, b] in &self.swap {
            parts.push(format!("{a} and {b} swapped"));
        }
        parts.join("; ")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    format: String,
    name: String,
    #[serde(default)]
    summary: String,
    rule: String,
    report: String,
    question: Question,
    expect: Value,
    defect: DefectFile,
    #[serde(default)]
    wire: Wire,
    trace: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DefectFile {
    cause: String,
    answer: Value,
}

/// One loaded case.
#[derive(Debug, Clone)]
pub struct Case {
    pub path: PathBuf,
    pub name: String,
    pub summary: String,
    pub rule: String,
    pub report: String,
    pub question: Question,
    pub expect: Answer,
    pub defect: Defect,
    pub wire: Wire,
    /// The trace as written, for the drivers that publish it.
    pub trace_json: Value,
    pub trace: kvroute_core::Trace,
}

/// Every `*.json` in `dir`, in byte order of file name, loaded; `only` keeps those named.
pub fn load_dir(dir: &Path, only: &[String]) -> Result<Vec<Case>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let case = load(&path)?;
        if only.is_empty() || only.contains(&case.name) {
            cases.push(case);
        }
    }
    if let Some(missing) = only.iter().find(|n| !cases.iter().any(|c| &c.name == *n)) {
        return Err(format!(
            "--only {missing}: no such case in {}",
            dir.display()
        ));
    }
    if cases.is_empty() {
        return Err(format!("{}: no cases (*.json)", dir.display()));
    }
    Ok(cases)
}

/// One case file, checked (SPEC.md §16.2).
pub fn load(path: &Path) -> Result<Case, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| at(e.to_string()))?;
    let file: CaseFile = serde_json::from_slice(&bytes).map_err(|e| at(e.to_string()))?;
    if file.format != FORMAT {
        return Err(at(format!(
            "format: expected \"{FORMAT}\", found {:?}",
            file.format
        )));
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if file.name != stem {
        return Err(at(format!(
            "name: {:?} is not the file's name {stem:?}",
            file.name
        )));
    }
    let trace_bytes = serde_json::to_vec(&file.trace).map_err(|e| at(e.to_string()))?;
    let trace = kvroute_core::parse_trace(&trace_bytes).map_err(|errors| {
        at(format!(
            "trace: {}",
            errors.to_string().lines().next().unwrap_or("invalid")
        ))
    })?;
    let expect = answer(file.question, &file.expect).map_err(|e| at(format!("expect: {e}")))?;
    let defect_answer = answer(file.question, &file.defect.answer)
        .map_err(|e| at(format!("defect.answer: {e}")))?;
    let case = Case {
        path: path.to_path_buf(),
        name: file.name,
        summary: file.summary,
        rule: file.rule,
        report: file.report,
        question: file.question,
        expect,
        defect: Defect {
            cause: file.defect.cause,
            answer: defect_answer,
        },
        wire: file.wire,
        trace_json: file.trace,
        trace,
    };
    check_blocks(&case).map_err(at)?;
    Ok(case)
}

/// An `expect` or `defect.answer` value read for its question.
fn answer(question: Question, value: &Value) -> Result<Answer, String> {
    match (question, value) {
        (Question::Choice, Value::String(w)) => Ok(Answer::Worker(w.clone())),
        (Question::Choice, Value::Array(ws)) => ws
            .iter()
            .map(|w| w.as_str().map(str::to_string).ok_or("expected worker ids"))
            .collect::<Result<Vec<_>, _>>()
            .map(Answer::AnyOf)
            .map_err(str::to_string),
        (Question::Overlap, Value::Object(m)) => m
            .iter()
            .map(|(w, b)| {
                b.as_u64()
                    .map(|b| (w.clone(), b))
                    .ok_or("expected whole blocks")
            })
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(Answer::Overlap)
            .map_err(str::to_string),
        (Question::Refusal, Value::String(s)) if s == "reported" || s == "silent" => {
            Ok(Answer::Reported(s == "reported"))
        }
        _ => Err(format!("not an answer to a {question:?} question: {value}")),
    }
}

/// Every store and prefix segment is one block of [`BLOCK_TOKENS`], there are two
/// workers or more, and a request to judge.
fn check_blocks(case: &Case) -> Result<(), String> {
    let events = case.trace_json["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let workers = case.trace_json["workers"].as_array().map_or(0, Vec::len);
    if workers < 2 {
        return Err("trace: a case needs two workers or more".into());
    }
    if !events.iter().any(|e| e["type"] == "request") {
        return Err("trace: a case needs a request to judge".into());
    }
    for (i, event) in events.iter().enumerate() {
        for member in ["segments", "prefix"] {
            for segment in event[member].as_array().into_iter().flatten() {
                if segment["tokens"].as_u64() != Some(BLOCK_TOKENS) {
                    return Err(format!(
                        "trace.events[{i}].{member}: every segment of a case is one block of {BLOCK_TOKENS} tokens"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The trace's requests in `(tick, seq)` order: load requests first, the judged one last.
pub fn requests(case: &Case) -> Vec<&Value> {
    let mut requests: Vec<&Value> = case.trace_json["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "request")
        .collect();
    requests.sort_by_key(|e| (e["tick"].as_u64(), e["seq"].as_u64()));
    requests
}

/// The workers' ids in byte order, as the trace's rows index them.
pub fn worker_ids(case: &Case) -> Vec<String> {
    crate::publish::plan::worker_ids(&case.trace_json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../peers/conformance/cases")
    }

    #[test]
    fn every_committed_case_loads() {
        let cases = load_dir(&cases_dir(), &[]).unwrap();
        assert!(cases.len() >= 20, "{} cases", cases.len());
    }

    #[test]
    fn the_wire_is_described_fault_by_fault() {
        let wire = Wire {
            lost: vec![2],
            replayable: true,
            swap: vec![[1, 2]],
            ..Wire::default()
        };
        assert_eq!(wire.describe(), "lost 2 (kept for replay); 1 and 2 swapped");
        assert_eq!(Wire::default().describe(), "");
    }

    #[test]
    fn a_set_admits_its_members_only() {
        let tie = Answer::AnyOf(vec!["w0".into(), "w1".into()]);
        assert!(tie.admits(&Answer::Worker("w1".into())));
        assert!(!tie.admits(&Answer::Worker("w2".into())));
        assert!(!Answer::Worker("w0".into()).admits(&Answer::Worker("w1".into())));
    }

    #[test]
    fn a_misnamed_case_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(cases_dir().join("exact_tie.json")).unwrap();
        let path = dir.path().join("renamed.json");
        std::fs::write(&path, text).unwrap();
        let error = load(&path).unwrap_err();
        assert!(
            error.contains("renamed.json") && error.contains("name"),
            "{error}"
        );
    }

    #[test]
    fn a_segment_of_another_size_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(cases_dir().join("exact_tie.json")).unwrap();
        let path = dir.path().join("exact_tie.json");
        std::fs::write(&path, text.replacen("\"tokens\": 16", "\"tokens\": 15", 1)).unwrap();
        let error = load(&path).unwrap_err();
        assert!(error.contains("one block of 16"), "{error}");
    }
}
