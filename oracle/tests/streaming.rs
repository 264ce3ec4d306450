//! `replay_streaming` (SPEC §6.1, §6.4): the pieces, concatenated, are the canonical
//! receipt without `receipt_digest`; each element is one canonical JSON value at its
//! path; the digest is the SHA-256 of the concatenation; `replay` is the same bytes with
//! the digest member inserted; a sink can stop the stream.

use std::ops::ControlFlow;
use std::path::PathBuf;

use kvroute_oracle::{replay, replay_streaming, ReceiptPiece, Streamed};
use serde_json::Value;

mod common;
use common::digest;

fn fixture(topic: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(topic)
        .join("trace.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One piece: its path (`None` for structure) and its bytes.
type Piece = (Option<String>, Vec<u8>);

/// Every piece, in order.
fn pieces(trace: &[u8]) -> (Vec<Piece>, Streamed) {
    let mut all = Vec::new();
    let streamed = replay_streaming(trace, &mut |piece| {
        all.push(match piece {
            ReceiptPiece::Structure(bytes) => (None, bytes.to_vec()),
            ReceiptPiece::Element { path, bytes } => (Some(path.to_owned()), bytes.to_vec()),
        });
        ControlFlow::Continue(())
    })
    .expect("valid trace");
    (all, streamed)
}

const TOPICS: &[&str] = &[
    "lab",
    "spec_example",
    "key_epoch",
    "evidence_gap",
    "cold_reserve",
    "dynamo_default_tie",
    "sharing_grant",
    "stale_epoch",
];

#[test]
fn the_pieces_are_the_receipt_without_its_digest() {
    for topic in TOPICS {
        let trace = fixture(topic);
        let (all, streamed) = pieces(&trace);
        let body: Vec<u8> = all.iter().flat_map(|(_, b)| b.clone()).collect();
        let Streamed::Complete { receipt_digest } = streamed else {
            panic!("{topic}: stopped without being asked to")
        };
        assert_eq!(receipt_digest, digest(&body), "{topic}");
        let full = replay(&trace).expect("valid");
        let mut receipt: Value = serde_json::from_slice(&full).expect("receipt is JSON");
        assert_eq!(
            receipt["receipt_digest"],
            Value::from(receipt_digest.clone()),
            "{topic}"
        );
        receipt.as_object_mut().unwrap().remove("receipt_digest");
        assert_eq!(
            serde_json_canonicalizer::to_vec(&receipt).unwrap(),
            body,
            "{topic}"
        );
        let member = format!("\"receipt_digest\":\"{receipt_digest}\",");
        let cut = String::from_utf8(full).unwrap().replacen(&member, "", 1);
        assert_eq!(
            cut.as_bytes(),
            body.as_slice(),
            "{topic}: replay inserts one member"
        );
    }
}

#[test]
fn each_element_is_the_canonical_value_at_its_path() {
    for topic in TOPICS {
        let trace = fixture(topic);
        let (all, _) = pieces(&trace);
        let receipt: Value = serde_json::from_slice(&replay(&trace).unwrap()).unwrap();
        let mut expected_paths = Vec::new();
        for (i, run) in receipt["runs"].as_array().unwrap().iter().enumerate() {
            for name in ["cache_log", "decisions"] {
                for j in 0..run[name].as_array().unwrap().len() {
                    expected_paths.push(format!("runs[{i}].{name}[{j}]"));
                }
            }
            expected_paths.push(format!("runs[{i}].metrics"));
            for j in 0..run["observation_log"].as_array().unwrap().len() {
                expected_paths.push(format!("runs[{i}].observation_log[{j}]"));
            }
        }
        let mut paths = Vec::new();
        let mut previous_was_structure = false;
        for (path, bytes) in &all {
            match path {
                None => {
                    assert!(
                        !previous_was_structure,
                        "{topic}: structure comes in one piece"
                    );
                    previous_was_structure = true;
                }
                Some(path) => {
                    previous_was_structure = false;
                    let value: Value = serde_json::from_slice(bytes).expect("an element is JSON");
                    assert_eq!(serde_json_canonicalizer::to_vec(&value).unwrap(), *bytes);
                    assert_eq!(value, at(&receipt, path), "{topic}: {path}");
                    paths.push(path.clone());
                }
            }
        }
        assert_eq!(paths, expected_paths, "{topic}");
    }
}

/// The value at a path such as `runs[1].decisions[3]` or `runs[0].metrics`.
fn at(receipt: &Value, path: &str) -> Value {
    let mut value = receipt;
    for part in path.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((name, rest)) => (
                name,
                Some(rest.trim_end_matches(']').parse::<usize>().unwrap()),
            ),
            None => (part, None),
        };
        value = &value[name];
        if let Some(index) = index {
            value = &value[index];
        }
    }
    value.clone()
}

#[test]
fn a_sink_can_stop_the_stream() {
    let trace = fixture("lab");
    for stop_after in [1usize, 2, 5, 40] {
        let mut seen = 0usize;
        let streamed = replay_streaming(&trace, &mut |piece| {
            if let ReceiptPiece::Element { .. } = piece {
                seen += 1;
                if seen == stop_after {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })
        .expect("valid");
        assert_eq!(streamed, Streamed::Stopped);
        assert_eq!(
            seen, stop_after,
            "nothing is handed out after the sink stops"
        );
    }
}

#[test]
fn an_invalid_trace_gives_the_validation_lines_and_no_piece() {
    let mut called = false;
    let result = replay_streaming(b"{\"format\":1}", &mut |_| {
        called = true;
        ControlFlow::Continue(())
    });
    assert_eq!(result.err(), replay(b"{\"format\":1}").err());
    assert!(!called);
}

/// Ids with every kind of character JCS treats specially (RFC 8785 §3.2.2.2).
const HARD: &[&str] = &[
    "a\"b",
    "back\\slash",
    "\u{0}\u{1}\u{1f}",
    "\u{8}\u{c}\n\r\t",
    "\u{7f}\u{80}\u{2028}\u{2029}",
    "\u{1F600}\u{10FFFF}",
    "é/",
    "=HYPERLINK(\"x\")",
];

#[test]
fn hard_strings_in_ids_are_written_as_rfc_8785_writes_them() {
    let mut trace: Value = serde_json::from_slice(&fixture("lab")).unwrap();
    let old_worker = trace["workers"][0]["id"].as_str().unwrap().to_owned();
    let new_worker = "w\u{1}\u{2028}\"\\\u{1F600}";
    trace["workers"][0]["id"] = Value::from(new_worker);
    let mut hard = HARD.iter().cycle();
    for event in trace["events"].as_array_mut().unwrap() {
        if event["type"] == "request" {
            let id = format!("{}{}", hard.next().unwrap(), event["seq"]);
            event["id"] = Value::from(id);
        }
        if event.get("worker").and_then(Value::as_str) == Some(old_worker.as_str()) {
            event["worker"] = Value::from(new_worker);
        }
    }
    let bytes = serde_json::to_vec(&trace).unwrap();
    let out = replay(&bytes).expect("valid");
    let parsed: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(serde_json_canonicalizer::to_vec(&parsed).unwrap(), out);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("\"w\\u0001\u{2028}\\\"\\\\\u{1F600}\""),
        "the worker id"
    );
    assert!(
        text.contains("\\u0000\\u0001\\u001f"),
        "lower-case hex escapes"
    );
    assert!(text.contains("\\b\\f\\n\\r\\t"), "the short escapes");
    assert!(
        text.contains("\u{7f}\u{80}\u{2028}\u{2029}"),
        "written as themselves"
    );
    assert!(
        text.contains("\u{1F600}\u{10FFFF}"),
        "non-BMP characters as themselves"
    );
}
