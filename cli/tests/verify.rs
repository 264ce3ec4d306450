//! `verify` accepts a genuine receipt and rejects doctored ones, each for its own reason:
//! re-signed semantic changes, and receipts whose bytes are not the canonical form
//! (repeated members, whitespace, reordered members, needless escapes), each named by
//! its JSON path (SPEC.md §7).

use kvroute_cli::verify::{verify, verify_stream, VerifyError};
use kvroute_core::output::{jcs_bytes, sha256_tag};
use kvroute_harness::fixtures;
use serde_json::Value;

fn genuine() -> (Vec<u8>, Value) {
    let trace = fixtures::trace_bytes("lab");
    let receipt = kvroute_core::replay_bytes(&trace).unwrap();
    (trace, serde_json::from_slice(&receipt).unwrap())
}

/// Re-signs a doctored receipt, as a careful forger would, so that only the semantic
/// checks can catch it.
fn resign(mut receipt: Value) -> Vec<u8> {
    let object = receipt.as_object_mut().unwrap();
    object.remove("receipt_digest");
    let digest = sha256_tag(&jcs_bytes(&receipt));
    receipt["receipt_digest"] = Value::String(digest);
    jcs_bytes(&receipt)
}

fn rejection(trace: &[u8], receipt: &[u8]) -> String {
    match verify(trace, receipt) {
        Err(VerifyError::Rejected(problem)) => problem,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn a_genuine_receipt_is_accepted() {
    let (trace, receipt) = genuine();
    let digest = verify(&trace, &jcs_bytes(&receipt)).unwrap();
    assert_eq!(receipt["receipt_digest"], digest.as_str());
}

#[test]
fn removed_candidate_rows_are_rejected() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][3]["decisions"][0]["candidates"]
        .as_array_mut()
        .unwrap()
        .retain(|row| row["worker"] == "w0");
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains("no candidate row for worker \"w1\""),
        "{problem}"
    );
}

#[test]
fn a_changed_metric_is_rejected() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][1]["metrics"]["routed"] = Value::from(99);
    let problem = rejection(&trace, &resign(receipt));
    assert!(problem.contains("least_load"), "{problem}");
    assert!(problem.contains(".metrics.routed"), "{problem}");
}

#[test]
fn a_swapped_chosen_worker_is_rejected() {
    let (trace, mut receipt) = genuine();
    let decision = &mut receipt["runs"][3]["decisions"][0];
    assert_eq!(decision["chosen"], "w0");
    decision["chosen"] = Value::from("w2");
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains("chosen is \"w2\", but its own rows justify \"w0\""),
        "{problem}"
    );
}

#[test]
fn an_altered_digest_is_rejected() {
    let (trace, mut receipt) = genuine();
    let digest = receipt["receipt_digest"].as_str().unwrap().to_owned();
    let flipped = format!(
        "{}{}",
        &digest[..digest.len() - 1],
        if digest.ends_with('0') { '1' } else { '0' }
    );
    receipt["receipt_digest"] = Value::from(flipped);
    let problem = rejection(&trace, &jcs_bytes(&receipt));
    assert!(
        problem.starts_with("receipt_digest is sha256:"),
        "{problem}"
    );
}

#[test]
fn a_receipt_for_another_trace_is_rejected() {
    let (_, receipt) = genuine();
    let other = fixtures::trace_bytes("stale_epoch");
    let problem = rejection(&other, &jcs_bytes(&receipt));
    let other_digest =
        kvroute_core::output::trace_digest(&kvroute_core::parse_trace(&other).unwrap());
    assert_eq!(
        problem,
        format!(
            "trace_digest is {}, but this trace's digest is \"{other_digest}\"",
            receipt["trace_digest"]
        )
    );
}

#[test]
fn an_invalid_trace_is_not_a_verdict_on_the_receipt() {
    let (_, receipt) = genuine();
    let result = verify(b"{}", &jcs_bytes(&receipt));
    assert!(
        matches!(result, Err(VerifyError::InvalidTrace(_))),
        "{result:?}"
    );
}

#[test]
fn a_changed_dominance_count_is_rejected() {
    let (trace, mut receipt) = genuine();
    // The first row of any decision, whatever its dominance, gets one more dominator.
    let row = &mut receipt["runs"][0]["decisions"][0]["candidates"][0];
    let count = row["dominated_count"].as_u64().unwrap();
    row["dominated_count"] = Value::from(count + 1);
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains(&format!("dominated_count {}", count + 1)),
        "{problem}"
    );
    assert!(
        problem.contains("but its decision's rows give"),
        "{problem}"
    );
}

// ---- type errors and reorders are named as such (SPEC.md §7) ----

#[test]
fn a_type_error_is_reported_at_its_path() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][3]["decisions"][0]["candidates"][1]["cost_milli"] = Value::from("x");
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs[3].decisions[0].candidates[1].cost_milli: expected a non-negative integer, found \"x\""
    );
}

#[test]
fn runs_of_the_wrong_type_are_named() {
    let (trace, mut receipt) = genuine();
    receipt["runs"] = Value::from(5);
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs: expected an array, found 5"
    );
    let (trace, mut receipt) = genuine();
    receipt.as_object_mut().unwrap().remove("runs");
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs: missing required member \"runs\""
    );
}

#[test]
fn reordered_decisions_are_reported_as_a_reorder() {
    let (trace, mut receipt) = genuine();
    let decisions = receipt["runs"][2]["decisions"].as_array_mut().unwrap();
    let (first, third) = (decisions[0]["seq"].clone(), decisions[2]["seq"].clone());
    decisions.swap(0, 2);
    assert_ne!(first, third);
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        format!("runs[2].decisions[0]: decision for seq {third} is out of order: it belongs at decisions[2]")
    );
}

// ---- byte equality, read as a stream (SPEC.md §7) ----

/// The lab receipt exactly as `replay --format json` writes it: canonical bytes and `\n`.
fn written() -> (Vec<u8>, String) {
    let (trace, receipt) = genuine();
    let mut text = String::from_utf8(jcs_bytes(&receipt)).unwrap();
    text.push('\n');
    (trace, text)
}

#[test]
fn the_receipt_replay_writes_is_accepted_with_or_without_its_newline() {
    let (trace, text) = written();
    assert!(verify(&trace, text.as_bytes()).is_ok());
    assert!(verify(&trace, text.trim_end().as_bytes()).is_ok());
    for tail in ["\n", " ", "{}", "\r\n"] {
        let problem = rejection(&trace, format!("{text}{tail}").as_bytes());
        assert!(
            problem.contains("goes on after its closing brace"),
            "{tail:?}: {problem}"
        );
    }
}

#[test]
fn an_empty_runs_member_before_the_real_members_is_a_repeated_member() {
    // `sed 's/^{"format"/{"runs":[],"format"/'`: a first-wins reader sees no runs.
    let (trace, text) = written();
    let doctored = text.replacen("{\"format\"", "{\"runs\":[],\"format\"", 1);
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with("runs: repeated member \"runs\""),
        "{problem}"
    );
}

#[test]
fn a_chosen_worker_written_twice_is_a_repeated_member_at_its_path() {
    // `sed 's/"chosen":"w0"/"chosen":"w3","chosen":"w0"/'`.
    let (trace, text) = written();
    let doctored = text.replace("\"chosen\":\"w0\"", "\"chosen\":\"w3\",\"chosen\":\"w0\"");
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with("runs[0].decisions[0].chosen: repeated member \"chosen\""),
        "{problem}"
    );
}

#[test]
fn a_second_receipt_digest_is_a_repeated_member_wherever_it_is() {
    let (trace, text) = written();
    let at_end = text.trim_end().strip_suffix('}').unwrap().to_owned()
        + ",\"receipt_digest\":\"sha256:00\"}\n";
    let problem = rejection(&trace, at_end.as_bytes());
    assert!(
        problem.starts_with("receipt_digest: repeated member"),
        "{problem}"
    );
    // One placed before the real one: the first is read as the claim, the second repeats.
    let digest_member = &text[30..30 + 91];
    assert!(
        digest_member.starts_with("\"receipt_digest\":"),
        "{digest_member}"
    );
    let before = text.replacen(digest_member, &format!("{digest_member}{digest_member}"), 1);
    let problem = rejection(&trace, before.as_bytes());
    assert!(
        problem.starts_with("receipt_digest: repeated member"),
        "{problem}"
    );
}

#[test]
fn a_pretty_printed_receipt_is_rejected_where_its_first_whitespace_is() {
    let (trace, receipt) = genuine();
    let pretty = serde_json::to_vec_pretty(&receipt).unwrap();
    let problem = rejection(&trace, &pretty);
    assert!(
        problem.starts_with("$: non-canonical bytes at byte offset 1: whitespace"),
        "{problem}"
    );
    assert!(
        problem.contains("replay --format json writes the canonical form"),
        "{problem}"
    );
}

#[test]
fn reordered_members_are_rejected_at_their_path() {
    let (trace, text) = written();
    let row = "\"active_decode\":0,\"after_milli\":680000,";
    assert!(text.contains(row));
    let doctored = text.replacen(row, "\"after_milli\":680000,\"active_decode\":0,", 1);
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with(
            "runs[0].decisions[0].candidates[0].active_decode: non-canonical bytes at byte offset"
        ),
        "{problem}"
    );
    assert!(
        problem.contains("RFC 8785 sorts members by name"),
        "{problem}"
    );
    // At the top level too: `trace_digest` moved before `runs`.
    let (_, receipt) = genuine();
    let digest = receipt["trace_digest"].as_str().unwrap();
    let member = format!(",\"trace_digest\":\"{digest}\"");
    let moved = text.replacen(&member, "", 1).replacen(
        "\"runs\":[",
        &format!(
            "{}\"runs\":[",
            &member[1..].to_owned().replace("\"}", "\"},")
        ),
        1,
    );
    let moved = moved.replacen(
        &format!("\"{digest}\"\"runs\""),
        &format!("\"{digest}\",\"runs\""),
        1,
    );
    let problem = rejection(&trace, moved.as_bytes());
    assert!(
        problem.starts_with("trace_digest: non-canonical bytes"),
        "{problem}"
    );
}

#[test]
fn needless_escapes_are_rejected_at_their_path() {
    let (trace, text) = written();
    let doctored = text.replacen(
        "\"policy\":\"least_load\"",
        "\"policy\":\"\\u006ceast_load\"",
        1,
    );
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with("runs[1].policy: non-canonical bytes at byte offset"),
        "{problem}"
    );
    let doctored = text.replacen("\"worker\":\"w0\"", "\"worker\":\"\\u0077\\u0030\"", 1);
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with("runs[0].cache_log[0].worker: non-canonical bytes"),
        "{problem}"
    );
    let doctored = text.replacen("\"epoch\":1,", "\"epoch\":1e0,", 1);
    let problem = rejection(&trace, doctored.as_bytes());
    assert!(
        problem.starts_with("runs[0].cache_log[0].epoch: non-canonical bytes"),
        "{problem}"
    );
}

#[test]
fn a_change_only_in_a_row_that_is_not_eligible_is_rejected() {
    let (trace, mut receipt) = genuine();
    let mut target = None;
    'find: for (r, run) in receipt["runs"].as_array().unwrap().iter().enumerate() {
        for (d, decision) in run["decisions"].as_array().unwrap().iter().enumerate() {
            for (c, row) in decision["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                if row["eligible"] == false {
                    target = Some((r, d, c));
                    break 'find;
                }
            }
        }
    }
    let (r, d, c) = target.expect("the lab trace has rows that are not eligible");
    let row = &mut receipt["runs"][r]["decisions"][d]["candidates"][c];
    let recomputed = row["recomputed"].as_u64().unwrap();
    row["recomputed"] = Value::from(recomputed + 1);
    let problem = rejection(&trace, &resign(receipt));
    assert_eq!(
        problem,
        format!(
            "runs[{r}].decisions[{d}].candidates[{c}].recomputed: the receipt has {}, the \
             recomputation has {recomputed} (run {})",
            recomputed + 1,
            [
                "round_robin",
                "least_load",
                "longest_prefix",
                "cache_plus_load"
            ][r]
        )
    );
}

#[test]
fn a_truncated_receipt_is_not_json_and_says_where() {
    let (trace, text) = written();
    let cut = &text.as_bytes()[..text.len() / 2];
    let problem = rejection(&trace, cut);
    assert!(
        problem.starts_with("the receipt is not JSON at byte offset"),
        "{problem}"
    );
    assert_eq!(rejection(&trace, b""), "the receipt is empty");
    assert_eq!(rejection(&trace, b"[]"), "$: expected an object, found []");
}

#[test]
fn a_missing_or_extra_decision_names_its_position() {
    let (trace, mut receipt) = genuine();
    let decisions = receipt["runs"][1]["decisions"].as_array_mut().unwrap();
    let last = decisions.len() - 1;
    let seq = decisions[last]["seq"].clone();
    decisions.pop();
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.starts_with(&format!(
            "runs[1].decisions[{last}]: missing: the receipt's array ends here, but the recomputation has a decision for seq {seq}"
        )),
        "{problem}"
    );
    let (trace, mut receipt) = genuine();
    let decisions = receipt["runs"][1]["decisions"].as_array_mut().unwrap();
    let copy = decisions[0].clone();
    decisions.push(copy);
    let n = decisions.len() - 1;
    let problem = rejection(&trace, &resign(receipt));
    assert_eq!(
        problem,
        format!("runs[1].decisions[{n}]: the recomputation has no such item (it has {n})")
    );
}

/// A reader that hands out one byte per call, so every piece boundary falls mid-buffer.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = usize::from(!self.0.is_empty() && !out.is_empty());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn a_receipt_read_a_byte_at_a_time_is_verified_the_same() {
    let (trace, text) = written();
    let mut reader = std::io::BufReader::with_capacity(1, Trickle(text.as_bytes()));
    let verified = verify_stream(&trace, &mut reader, None, &|_| {}).unwrap();
    assert_eq!(
        Some(verified.receipt_digest),
        verify(&trace, text.as_bytes()).ok()
    );
    assert_eq!(verified.decisions, 116);
    let doctored = text.replace("\"chosen\":\"w0\"", "\"chosen\":\"w3\",\"chosen\":\"w0\"");
    let mut reader = std::io::BufReader::with_capacity(1, Trickle(doctored.as_bytes()));
    match verify_stream(&trace, &mut reader, None, &|_| {}) {
        Err(VerifyError::Rejected(problem)) => {
            assert!(
                problem.starts_with("runs[0].decisions[0].chosen: repeated member"),
                "{problem}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn control_characters_in_ids_never_reach_a_message_raw() {
    let trace = String::from_utf8(fixtures::trace_bytes("lab"))
        .unwrap()
        .replace("\"acme-01\"", "\"acme\\u001b[31m-01\"");
    let receipt = kvroute_core::replay_bytes(trace.as_bytes()).unwrap();
    let mut receipt: Value = serde_json::from_slice(&receipt).unwrap();
    let mut doctored = false;
    for decision in receipt["runs"][0]["decisions"].as_array_mut().unwrap() {
        if decision["request"] == "acme\u{1b}[31m-01" {
            decision["request"] = Value::from("acme\u{1b}[31m-02");
            doctored = true;
        }
    }
    assert!(doctored);
    let problem = rejection(trace.as_bytes(), &resign(receipt));
    assert!(problem.contains("\\u001b[31m-02"), "{problem}");
    assert!(problem.bytes().all(|b| b >= 0x20), "{problem:?}");
}

/// Deterministic pseudo-random numbers (xorshift64*), for byte mutations.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn mangled_receipt_bytes_are_rejected_with_a_reason_and_never_panic() {
    let (trace, text) = written();
    let parsed = kvroute_core::parse_trace(&trace).unwrap();
    let mut lines = Vec::new();
    kvroute_core::replay::write_jsonl(
        &kvroute_core::route::Compiled::new(&parsed),
        &kvroute_core::output::trace_digest(&parsed),
        &mut lines,
    )
    .unwrap();
    let mut state = 0x5EED_u64;
    for genuine in [text.into_bytes(), lines] {
        for _ in 0..150 {
            let mut bytes = genuine.clone();
            for _ in 0..1 + next_random(&mut state) % 3 {
                let at = (next_random(&mut state) % bytes.len() as u64) as usize;
                let with = b"0-.e\"{}[],: x1\n\\u"[(next_random(&mut state) % 17) as usize];
                match next_random(&mut state) % 3 {
                    0 => bytes[at] = with,
                    1 => bytes.insert(at, with),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
            match verify(&trace, &bytes) {
                Ok(_) => assert!(
                    bytes == genuine || genuine.strip_suffix(b"\n") == Some(bytes.as_slice()),
                    "a mangled receipt was accepted"
                ),
                Err(VerifyError::Rejected(problem)) => {
                    assert!(!problem.is_empty());
                    assert!(problem.bytes().all(|b| b >= 0x20), "{problem:?}");
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    }
}

/// Runs `kvroute verify --trace LAB -` with `head` and then an endless stream of `a` on
/// stdin; the exit status, or `None` when it was still reading after `limit`.
fn verify_with_endless_stdin(head: &'static [u8], limit: std::time::Duration) -> Option<i32> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["verify", "--trace"])
        .arg(&trace)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Writes until kvroute closes the pipe (or is killed below).
    let writer = std::thread::spawn(move || {
        let block = vec![b'a'; 64 * 1024];
        let _ = stdin.write_all(head);
        while stdin.write_all(&block).is_ok() {}
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    writer.join().unwrap();
    status
}

#[test]
fn a_receipt_wrong_at_its_first_bytes_is_rejected_without_reading_on() {
    // Not JSON at byte 0, and a wrong format whose receipt then stops being JSON: either
    // way nothing after can name another trace, so verify answers at once.
    for head in [&b"x"[..], br#"{"format":"kvroute-receipt/2""#] {
        let status = verify_with_endless_stdin(head, std::time::Duration::from_secs(30));
        assert_eq!(
            status,
            Some(1),
            "verify of {:?} and endless bytes",
            String::from_utf8_lossy(head)
        );
    }
}
