//! The hostile-input corpus: every case in `hostile_input/cases.txt` runs the
//! binary in its own scratch directory and must exit with its expected status, print
//! its expected stderr prefix, never panic (exit 101 or `panicked at`), and leave no
//! file behind: a failing run leaves exactly its input files, a succeeding one only
//! what its arguments name as outputs.
//!
//! A case is one line of five tab-separated fields:
//! `name  exit  stderr-prefix  arguments  files`.
//! - `arguments` are split on spaces; `{in}`, `{out}`, `{dir}`, `{key}`, `{receipt}` and `{trace}`
//!   become paths in the scratch directory (so do they in the stderr prefix).
//! - `files` lists the inputs to create, `;;`-separated, each `NAME=SPEC` where SPEC is
//!   `text:ESCAPED` (`\n`, `\t`, `\r`, `\\`, `\xHH`), `lab` (the lab trace),
//!   `lab~OLD=>NEW` (the lab trace with the first OLD replaced by NEW, both escaped),
//!   `lab@POINTER=JSON` (the lab trace with the value at a JSON pointer set),
//!   `receipt` / `receipt@POINTER=JSON` (the lab receipt, likewise), or `gen:NAME` for
//!   the inputs too large or too regular to write out (see [`generated`]).
//!
//! Adding a case is adding a line.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const CASES: &str = include_str!("hostile_input/cases.txt");

fn lab_trace_text() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json"),
    )
    .expect("the lab fixture")
}

fn lab_receipt() -> Value {
    let bytes = kvroute_core::replay_bytes(lab_trace_text().as_bytes()).expect("the lab replays");
    serde_json::from_slice(&bytes).unwrap()
}

/// `\n`, `\t`, `\r`, `\\` and `\xHH` in a case's text.
fn unescape(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 2;
                }
                other => panic!("unknown escape \\{}", other as char),
            }
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn set_pointer(mut value: Value, edit: &str) -> Vec<u8> {
    let (pointer, json) = edit.split_once('=').expect("POINTER=JSON");
    let json: Value = serde_json::from_str(json).expect("the edit's JSON");
    match pointer.rsplit_once('/') {
        // Setting a member that may not exist yet: through its parent object.
        Some((parent, name)) if value.pointer(pointer).is_none() => {
            value.pointer_mut(parent).expect("the parent exists")[name] = json;
        }
        _ => *value.pointer_mut(pointer).expect("the pointer exists") = json,
    }
    kvroute_core::output::jcs_bytes(&value)
}

/// The inputs too large or too regular for a line of text.
fn generated(name: &str) -> Vec<u8> {
    let lab = lab_trace_text();
    if let Some(receipt) = generated_receipt(name, &lab) {
        return receipt;
    }
    match name {
        "bom-lab" => [b"\xEF\xBB\xBF".as_slice(), lab.as_bytes()].concat(),
        "bom-only" => b"\xEF\xBB\xBF".to_vec(),
        "deep-nesting" => format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
        "digits-5000" => lab
            .replacen(
                "\"queued_prefill\": 0",
                &format!("\"queued_prefill\": {}", "9".repeat(5000)),
                1,
            )
            .into_bytes(),
        "long-member-name" => lab
            .replacen(
                "\"limits\"",
                &format!("\"{}\": 1, \"limits\"", "n".repeat(1_000_000)),
                1,
            )
            .into_bytes(),
        "long-bracketed-name" => lab
            .replacen(
                "\"limits\"",
                &format!("\"{}\": 1, \"limits\"", "é-".repeat(500_000)),
                1,
            )
            .into_bytes(),
        "long-string-value" => lab
            .replacen(
                "\"model\": \"m1\"",
                &format!("\"model\": {}", "7".repeat(100_000)),
                1,
            )
            .into_bytes(),
        "many-errors" => {
            let workers = vec!["1"; 5_000].join(",");
            format!("{{\"format\":\"kvroute-trace/1\",\"workers\":[{workers}],\"events\":[]}}")
                .into_bytes()
        }
        "costly-issue" => {
            use kvroute_harness::costly::{costly_trace, CostlyShape};
            costly_trace(&CostlyShape::ISSUE_12_LAB)
                .to_string()
                .into_bytes()
        }
        "keys-33" => lab_with_33_keys(&lab),
        "nine-stores" => nine_stores(),
        // One byte past the cap of a Weka session file (SPEC.md §19.3).
        "weka-over-cap" => vec![b' '; kvroute_core::import::WEKA_FILE_BYTES_MAX + 1],
        other => panic!("no generator {other:?}"),
    }
}

/// The lab trace with its first request's prefix replaced by 33 segments of one key.
fn lab_with_33_keys(lab: &str) -> Vec<u8> {
    let segments = vec!["{\"key\":\"k\",\"tokens\":0}"; 33].join(",");
    let mut trace: Value = serde_json::from_str(lab).unwrap();
    let first_request = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["type"] == "request")
        .unwrap();
    trace["events"][first_request]["prefix"] =
        serde_json::from_str(&format!("[{segments}]")).unwrap();
    trace.to_string().into_bytes()
}

/// A one-worker trace of nine stores of 32 one-token keys each.
fn nine_stores() -> Vec<u8> {
    let stores: Vec<String> = (0..9)
        .map(|s| {
            let segments: Vec<String> = (0..32)
                .map(|k| format!("{{\"key\":\"s{s}k{k}\",\"tokens\":1}}"))
                .collect();
            format!(
                "{{\"seq\":{},\"tick\":{},\"type\":\"cache\",\"op\":\"store\",\"worker\":\"w0\",\"epoch\":{},\"tenant\":\"t\",\"model\":\"m\",\"adapter\":\"base\",\"segments\":[{}]}}",
                s + 1, s + 1, s + 1, segments.join(",")
            )
        })
        .collect();
    format!(
        "{{\"format\":\"kvroute-trace/1\",\"workers\":[{{\"id\":\"w0\",\"model\":\"m\",\"adapters\":[],\"prefill_rate\":1,\"decode_rate\":1,\"queued_prefill\":0,\"active_decode\":0,\"observed_tick\":0,\"epoch\":0,\"cache\":[]}}],\"events\":[{}]}}",
        stores.join(",")
    )
    .into_bytes()
}

/// The doctored receipts among [`generated`]'s inputs, made from the lab trace's.
fn generated_receipt(name: &str, lab: &str) -> Option<Vec<u8>> {
    let bytes = match name {
        "receipt-reordered" => {
            let mut receipt = lab_receipt();
            receipt["runs"][1]["decisions"]
                .as_array_mut()
                .unwrap()
                .swap(0, 1);
            resigned(receipt)
        }
        "receipt-runs-twice" => {
            let bytes = kvroute_core::replay_bytes(lab.as_bytes()).unwrap();
            [br#"{"runs":[],"#.as_slice(), &bytes[1..]].concat()
        }
        "receipt-chosen-twice" => {
            let bytes = kvroute_core::replay_bytes(lab.as_bytes()).unwrap();
            String::from_utf8(bytes)
                .unwrap()
                .replacen(r#""chosen":"w0""#, r#""chosen":"w3","chosen":"w0""#, 1)
                .into_bytes()
        }
        "receipt-pretty" => serde_json::to_vec_pretty(&lab_receipt()).unwrap(),
        "receipt-bom" => {
            let bytes = kvroute_core::replay_bytes(lab.as_bytes()).unwrap();
            [b"\xEF\xBB\xBF".as_slice(), &bytes].concat()
        }
        _ => return None,
    };
    Some(bytes)
}

/// A doctored receipt with its digest recomputed, so only the later checks can tell.
fn resigned(mut receipt: Value) -> Vec<u8> {
    use kvroute_core::output::{jcs_bytes, sha256_tag};
    receipt.as_object_mut().unwrap().remove("receipt_digest");
    let digest = sha256_tag(&jcs_bytes(&receipt));
    receipt["receipt_digest"] = Value::String(digest);
    jcs_bytes(&receipt)
}

fn input_bytes(spec: &str) -> Vec<u8> {
    if let Some(text) = spec.strip_prefix("text:") {
        unescape(text)
    } else if spec == "lab" {
        lab_trace_text().into_bytes()
    } else if let Some(edit) = spec.strip_prefix("lab~") {
        let (old, new) = edit.split_once("=>").expect("lab~OLD=>NEW");
        let (old, new) = (unescape(old), unescape(new));
        let (old, new) = (
            String::from_utf8(old).unwrap(),
            String::from_utf8(new).unwrap(),
        );
        let lab = lab_trace_text();
        assert!(lab.contains(&old), "the lab trace has no {old:?}");
        lab.replacen(&old, &new, 1).into_bytes()
    } else if let Some(edit) = spec.strip_prefix("lab@") {
        set_pointer(serde_json::from_str(&lab_trace_text()).unwrap(), edit)
    } else if spec == "receipt" {
        kvroute_core::output::jcs_bytes(&lab_receipt())
    } else if let Some(edit) = spec.strip_prefix("receipt@") {
        let bytes = set_pointer(lab_receipt(), edit);
        resigned(serde_json::from_slice(&bytes).unwrap())
    } else if let Some(name) = spec.strip_prefix("gen:") {
        generated(name)
    } else if let Some(path) = spec.strip_prefix("fixture:") {
        // A committed input of the cli's tests, such as a real capture.
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).expect("the fixture")
    } else {
        panic!("unknown input spec {spec:?}")
    }
}

struct Case<'a> {
    line: usize,
    name: &'a str,
    exit: i32,
    stderr_prefix: &'a str,
    arguments: &'a str,
    files: &'a str,
}

fn cases() -> Vec<Case<'static>> {
    CASES
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                fields.len(),
                5,
                "cases.txt:{}: five tab-separated fields",
                i + 1
            );
            Case {
                line: i + 1,
                name: fields[0],
                exit: fields[1].parse().expect("an exit status"),
                stderr_prefix: fields[2],
                arguments: fields[3],
                files: fields[4],
            }
        })
        .collect()
}

/// Every file below `dir`, as paths relative to it.
fn files_below(dir: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.insert(path.strip_prefix(dir).unwrap().to_path_buf());
                stack.push(path);
            } else {
                found.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    found
}

fn run_case(case: &Case) -> Result<(), String> {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let place = |text: &str| {
        ["in", "out", "dir", "key", "receipt", "trace"]
            .iter()
            .fold(text.to_owned(), |t, name| {
                t.replace(&format!("{{{name}}}"), dir.join(name).to_str().unwrap())
            })
    };
    let mut inputs = BTreeSet::new();
    for file in case
        .files
        .split(";;")
        .filter(|f| !f.is_empty() && *f != "-")
    {
        let (name, spec) = file.split_once('=').expect("NAME=SPEC");
        if spec == "dir:" {
            std::fs::create_dir(dir.join(name)).unwrap();
        } else {
            std::fs::write(dir.join(name), input_bytes(spec)).unwrap();
        }
        inputs.insert(PathBuf::from(name));
    }
    let arguments: Vec<String> = case
        .arguments
        .split(' ')
        .filter(|a| !a.is_empty())
        .map(place)
        .collect();
    // `KVROUTE_CORPUS_BIN` runs the corpus against another build (an older one, to see
    // which cases it fails); by default, the binary of this package.
    let binary = std::env::var_os("KVROUTE_CORPUS_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_kvroute")),
        PathBuf::from,
    );
    let out = Command::new(binary)
        .args(&arguments)
        .current_dir(dir)
        .output()
        .expect("the kvroute binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    if code == Some(101) || stderr.contains("panicked at") {
        return Err(format!("panicked: {stderr}"));
    }
    if code != Some(case.exit) {
        return Err(format!("exit {code:?}, expected {}: {stderr}", case.exit));
    }
    let prefix = place(&String::from_utf8(unescape(case.stderr_prefix)).unwrap());
    if !stderr.starts_with(&prefix) {
        let shown: String = stderr.chars().take(400).collect();
        return Err(format!("stderr {shown:?} does not start with {prefix:?}"));
    }
    // No error line, however hostile the input, is longer than a few hundred bytes.
    if let Some(long) = stderr.lines().find(|l| l.len() > 1_000) {
        return Err(format!("a {}-byte stderr line", long.len()));
    }
    let mut allowed = inputs.clone();
    if case.exit == 0 {
        for name in ["out", "dir"] {
            if case.arguments.contains(&format!("{{{name}}}")) {
                allowed.insert(PathBuf::from(name));
            }
        }
    }
    let left: Vec<PathBuf> = files_below(dir)
        .into_iter()
        .filter(|p| !allowed.iter().any(|a| p.starts_with(a)))
        .collect();
    if !left.is_empty() {
        return Err(format!("left behind: {left:?}"));
    }
    Ok(())
}

#[test]
fn the_corpus_has_at_least_seventy_cases_with_unique_names() {
    let cases = cases();
    assert!(cases.len() >= 70, "{} cases", cases.len());
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique");
    let commands: BTreeSet<&str> = cases
        .iter()
        .filter_map(|c| c.arguments.split(' ').next())
        .collect();
    for command in ["validate", "replay", "verify", "import", "simulate"] {
        assert!(commands.contains(command), "no case runs {command}");
    }
}

#[test]
fn every_hostile_input_case_holds() {
    let failures: Vec<String> = cases()
        .iter()
        .filter_map(|case| {
            run_case(case)
                .err()
                .map(|why| format!("cases.txt:{} {}: {why}", case.line, case.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
