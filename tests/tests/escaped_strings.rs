//! The strings core and the oracle decode from escapes, compared. A trace's names
//! reach the receipt (worker and request ids) and its digest (every tenant, model,
//! adapter and key, through the canonical trace of SPEC.md §6.1), so a trace written
//! with its names escaped (`\ud83d\ude00` for U+1F600, `\u00e9`, `\/`, `\b`, letters
//! as `\u0061`) must give each implementation exactly the receipt the same trace gives
//! written plainly. The generated traces are written by serde_json, which never
//! escapes more than it must, so without this a decoding slip in either reader (a
//! surrogate pair read as two characters, a short escape mapped wrongly) would only
//! ever meet the other reader's identical output.

use kvroute_harness::differential::{self, Agreement};
use kvroute_harness::generators::TraceRecipe;
use serde_json::{json, Value};
use std::fmt::Write;

/// `text` as a JSON string literal with as much escaped as JSON allows, chosen per
/// character by `style` so one trace mixes the spellings: non-ASCII as `\uXXXX` (a
/// surrogate pair outside the Basic Multilingual Plane), in lowercase or uppercase
/// hex; the short escapes for what has one; ASCII as itself or `\u00XX`.
fn escaped_literal(text: &str, style: &mut u32) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        *style = style.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let upper = *style & 0x100 != 0;
        let unit = |out: &mut String, u: u16| {
            if upper {
                write!(out, "\\u{u:04X}").unwrap();
            } else {
                write!(out, "\\u{u:04x}").unwrap();
            }
        };
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && !c.is_ascii_control() && *style & 0x600 != 0 => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for &u in c.encode_utf16(&mut units).iter() {
                    unit(&mut out, u);
                }
            }
        }
    }
    out.push('"');
    out
}

/// `value` as JSON text with every string (member names included) escaped.
fn escaped_json(value: &Value, style: &mut u32) -> String {
    match value {
        Value::String(s) => escaped_literal(s, style),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| escaped_json(v, style)).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}:{}", escaped_literal(k, style), escaped_json(v, style)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        other => other.to_string(),
    }
}

/// Both implementations' receipts of `text`, which both must accept alike.
fn agreed_receipt(text: &str, what: &str) -> Vec<u8> {
    match differential::compare(text.as_bytes()) {
        Ok(Agreement::Accepted(receipt)) => receipt,
        Ok(Agreement::Rejected(errors)) => panic!("{what}: both reject: {errors:?}"),
        Err(divergence) => panic!("{what}: {divergence}"),
    }
}

/// The plain and the escaped spelling of `trace` give the same receipt, in both.
fn assert_escapes_decode_alike(trace: &Value, what: &str) {
    let plain = agreed_receipt(&trace.to_string(), what);
    let mut style = 7;
    let escaped = escaped_json(trace, &mut style);
    assert_ne!(escaped, trace.to_string());
    let from_escapes = agreed_receipt(&escaped, what);
    assert!(
        plain == from_escapes,
        "{what}: the escaped spelling changes the receipt\n  escaped: {escaped}"
    );
}

/// Names outside the Basic Multilingual Plane and with every short escape, in ids,
/// namespaces and keys: one request served from a cache entry under such a key.
fn hand_written_trace() -> Value {
    let (worker, tenant, key) = ("w\u{1F600}/\u{10FFFF}", "t\u{e9}\"\\", "k\u{1F600}\t\n");
    let cache = json!([{ "tenant": tenant, "model": "m\u{2028}", "adapter": "base",
                         "key": key, "tokens": 16 }]);
    json!({
        "format": "kvroute-trace/1",
        "workers": [
            { "id": worker, "model": "m\u{2028}", "adapters": ["a\u{8}\u{c}\r"],
              "prefill_rate": 100, "decode_rate": 10, "queued_prefill": 0,
              "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": cache },
            { "id": "w\u{E000}", "model": "m\u{2028}", "adapters": [],
              "prefill_rate": 100, "decode_rate": 10, "queued_prefill": 0,
              "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": [] },
        ],
        "events": [
            { "seq": 1, "tick": 1, "type": "request", "id": "r\u{1F600}\u{1F601}",
              "tenant": tenant, "model": "m\u{2028}", "adapter": "base",
              "prefix": [{ "key": key, "tokens": 16 }], "prompt_tokens": 32,
              "decode_tokens": 4 },
            { "seq": 2, "tick": 1, "type": "request", "id": "r/\u{7f}\u{0}",
              "tenant": tenant, "model": "m\u{2028}", "adapter": "a\u{8}\u{c}\r",
              "prefix": [], "prompt_tokens": 8, "decode_tokens": 4 },
        ],
    })
}

#[test]
fn escaped_names_decode_to_the_same_receipt_in_both() {
    let trace = hand_written_trace();
    assert_escapes_decode_alike(&trace, "hand-written");
    // The escaped request ids reach the receipt as the characters they stand for.
    let receipt: Value = serde_json::from_slice(&agreed_receipt(
        &escaped_json(&trace, &mut 7),
        "hand-written",
    ))
    .unwrap();
    let decision = &receipt["runs"][3]["decisions"][0];
    assert_eq!(decision["request"], "r\u{1F600}\u{1F601}");
    assert_eq!(decision["chosen"], "w\u{1F600}/\u{10FFFF}");
    assert_eq!(decision["route_kind"], "hit");
}

#[test]
fn generated_traces_decode_alike_escaped() {
    // Seeds whose traces have hard names (one in four does) and plain ones.
    for seed in 0..16 {
        let trace = TraceRecipe::from_seed(seed).build();
        assert_escapes_decode_alike(&trace, &format!("seed {seed}"));
    }
}
