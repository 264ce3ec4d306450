//! SPEC §14 (`kvroute join`): a receipt the oracle's own `replay` writes for a small
//! trace, joined with AIPerf lines written here, every figure computed by hand below.
//!
//! The trace: three workers `w0`, `w1`, `w2` serving model `m` (prefill and decode rates
//! 1000, `active_decode` 0, no cache), with `queued_prefill` 0, 100 and 150. Every event
//! is at tick 0 (no drain, §3.1); requests have no prefix (reuse 0, `recomputed =
//! prompt_tokens`) and no decode tokens, so in `cache_plus_load` (default policy, no
//! imbalance penalty) `work_milli = 1000 × queued_prefill` and `cost_milli = 1000 ×
//! prompt + work_milli`: the least-loaded worker wins, ties by id, and placement adds the
//! prompt to its queue (§3.4). A store on `w2` (seq 1) and a load event on `w0` (seq 20,
//! after every request) give the receipt a cache and an observation log and change no
//! decision. `r4` asks for model `other`, served by no worker: rejected in every run.
//!
//! | seq | request | prompt | queues before (w0, w1, w2) | chosen | work_milli | recomputed | predicted_milli |
//! |---|---|---|---|---|---|---|---|
//! | 2 | r1 | 100 | 0, 100, 150 | w0 | 0 | 100 | 100,000 |
//! | 3 | r2 | 50 | 100, 100, 150 | w0 (tie with w1, by id) | 100,000 | 50 | 150,000 |
//! | 4 | r3 | 50 | 150, 100, 150 | w1 | 100,000 | 50 | 150,000 |
//! | 5 | r4 | 10 | — | rejected | | | |
//! | 6 | r5 | 200 | 150, 150, 150 | w0 | 150,000 | 200 | 350,000 |
//! | 7 | r6 | 10 | 350, 150, 150 | w1 | 150,000 | 10 | 160,000 |
//! | 8 | r7 | 10 | 350, 160, 150 | w2 | 150,000 | 10 | 160,000 |
//! | 9 | r8 | 30 | 350, 160, 160 | w1 (tie with w2, by id) | 160,000 | 30 | 190,000 |
//! | 10 | r9 | 5 | 350, 190, 160 | w2 | 160,000 | 5 | 165,000 |
//!
//! `a_receipt_as_the_tests_assume` checks this table against the replayed receipt.

use std::ops::ControlFlow;

use kvroute_oracle::{
    join, keyed_request_id, parse_slo, replay, replay_streaming, JoinFailure, ReceiptPiece, Slo,
};
use serde_json::Value;

const RUN: &str = "cache_plus_load";
const POLICIES: [&str; 4] = [
    "round_robin",
    "least_load",
    "longest_prefix",
    "cache_plus_load",
];

fn worker(id: &str, queued_prefill: u64) -> String {
    format!(
        r#"{{"id":"{id}","model":"m","adapters":[],"prefill_rate":1000,"decode_rate":1000,
            "queued_prefill":{queued_prefill},"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
    )
}

fn request(seq: u64, id: &str, model: &str, prompt: u64) -> String {
    format!(
        r#"{{"seq":{seq},"tick":0,"type":"request","id":"{id}","tenant":"t","model":"{model}",
            "adapter":"base","prefix":[],"prompt_tokens":{prompt},"decode_tokens":0}}"#
    )
}

fn trace() -> String {
    let mut events = vec![
        r#"{"seq":1,"tick":0,"type":"cache","op":"store","worker":"w2","epoch":1,
        "tenant":"t","model":"m","adapter":"base","segments":[{"key":"unused","tokens":16}]}"#
            .to_owned(),
    ];
    let requests = [
        ("r1", "m", 100),
        ("r2", "m", 50),
        ("r3", "m", 50),
        ("r4", "other", 10),
        ("r5", "m", 200),
        ("r6", "m", 10),
        ("r7", "m", 10),
        ("r8", "m", 30),
        ("r9", "m", 5),
    ];
    for (i, (id, model, prompt)) in requests.iter().enumerate() {
        events.push(request(2 + i as u64, id, model, *prompt));
    }
    events.push(
        r#"{"seq":20,"tick":0,"type":"load","worker":"w0","observed_tick":0,
            "queued_prefill":0,"active_decode":0}"#
            .to_owned(),
    );
    format!(
        r#"{{"format":"kvroute-trace/1","workers":[{},{},{}],"events":[{}]}}"#,
        worker("w0", 0),
        worker("w1", 100),
        worker("w2", 150),
        events.join(",")
    )
}

fn receipt() -> Vec<u8> {
    replay(trace().as_bytes()).expect("the test trace is valid")
}

fn receipt_digest(receipt: &[u8]) -> String {
    let value: Value = serde_json::from_slice(receipt).unwrap();
    value["receipt_digest"].as_str().unwrap().to_owned()
}

/// The JSON Lines receipt of §6.4, assembled from the oracle's streamed pieces.
fn jsonl_receipt() -> Vec<u8> {
    let trace = trace();
    let mut elements: Vec<(String, Vec<u8>)> = Vec::new();
    let streamed = replay_streaming(trace.as_bytes(), &mut |piece| {
        if let ReceiptPiece::Element { path, bytes } = piece {
            elements.push((path.to_owned(), bytes.to_vec()));
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let kvroute_oracle::Streamed::Complete { receipt_digest } = streamed else {
        panic!("stopped")
    };
    let full: Value = serde_json::from_slice(&receipt()).unwrap();
    let mut out = format!(
        "{{\"format\":\"kvroute-receipt-stream/1\",\"receipt_format\":\"kvroute-receipt/1\",\"trace_digest\":\"{}\"}}\n",
        full["trace_digest"].as_str().unwrap()
    )
    .into_bytes();
    for (path, bytes) in elements {
        // `runs[<r>].<member>` or `runs[<r>].<member>[<i>]`.
        let run: usize = path[5..path.find(']').unwrap()].parse().unwrap();
        let rest = &path[path.find("].").unwrap() + 2..];
        let member = rest.split('[').next().unwrap();
        out.extend_from_slice(format!("{{\"{member}\":").as_bytes());
        out.extend_from_slice(&bytes);
        out.extend_from_slice(format!(",\"policy\":\"{}\"}}\n", POLICIES[run]).as_bytes());
    }
    out.extend_from_slice(format!("{{\"receipt_digest\":\"{receipt_digest}\"}}\n").as_bytes());
    out
}

const T: u64 = 1_700_000_000_000_000_000;

/// One AIPerf line (the members join reads, plus some it must ignore).
fn line(id: &str, start: u64, end: &str, extra_meta: &str, metrics: &str, error: &str) -> String {
    format!(
        r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":{start},"request_end_ns":{end},"conversation_id":"c-{id}"{extra_meta}}},"metrics":{metrics},"error":{error},"session_num":3}}"#
    )
}

fn metrics(ttft: &str, itl: &str) -> String {
    format!(
        r#"{{"time_to_first_token":{{"value":{ttft},"unit":"ms"}},"inter_token_latency":{{"value":{itl},"unit":"ms"}},"request_latency":{{"value":5,"unit":"sec"}}}}"#
    )
}

/// The completions, line by line:
///
/// | line | id | what | ttft_us | tpot_us | start, end (ns) |
/// |---|---|---|---|---|---|
/// | 1 | r1 | completed (w0, predicted 100,000) | 355,886 (`355.886567999`) | 10,000 | T, T+0.4 s |
/// | 2 | | blank | | | |
/// | 3 | zz | unknown id (unrouted), metrics null | | | 1, 99999999999999999 |
/// | 4 | r2 | completed (w0, 150,000) | 100,000 | 12,345 (`12.3456`) | T+0.1 s, T+0.3 s |
/// | 5 | r3 | completed (w1, 150,000: tied with r2) | 80,000 (`80.0`) | 30,000 | T+0.05 s, T+0.9 s |
/// | 6 | r4 | rejected but served | 1,000 | 1,000 | 0, 10^19 − 1 |
/// | 7 | | whitespace only | | | |
/// | 8 | r5 | cancelled, with an error too (counts as cancelled only) | 1,000 | 1,000 | T+0.2 s, null |
/// | 9 | r6 | error, metrics null | | | T − 0.9 s, absent |
/// | 10 | r8 | completed (w1, 190,000) | 250,000 (`0.25e3`) | 5,000 (`5E0`) | T+0.3 s, T+1 s |
/// | 11 | r9 | completed (w2, 165,000) | 300,000 (`3e2`) | 4,898 (`4.8984369999999995`) | T+0.4 s, T+1.5 s |
/// | 12 | r8 | a retry: counted, not read | 1,000 | 1,000 | T+2 s, T+9 s |
/// | 13 | zz | a retry of the unknown id | | | |
///
/// `r7` (routed to w2) has no line: dropped.
fn completions() -> String {
    let lines = [
        line("r1", T, &(T + 400_000_000).to_string(), r#","was_cancelled":false"#, &metrics("355.886567999", "10"), "null"),
        String::new(),
        r#"{"metadata":{"x_request_id":"zz","request_start_ns":1,"request_end_ns":99999999999999999},"metrics":null}"#.to_owned(),
        format!(
            r#"{{"metadata":{{"request_start_ns":{},"x_request_id":"r2","request_end_ns":{}}},"metrics":{}}}"#,
            T + 100_000_000,
            T + 300_000_000,
            metrics("100", "12.3456")
        ),
        line("r3", T + 50_000_000, &(T + 900_000_000).to_string(), "", &metrics("80.0", "30"), "null"),
        line("r4", 0, "9999999999999999999", "", &metrics("1", "1"), "null"),
        "   \t".to_owned(),
        line("r5", T + 200_000_000, "null", r#","was_cancelled":true"#, &metrics("1", "1"), r#"{"code":499}"#),
        format!(
            r#"{{"metadata":{{"x_request_id":"r6","request_start_ns":{}}},"metrics":null,"error":{{"code":500,"message":"boom"}}}}"#,
            T - 900_000_000
        ),
        line("r8", T + 300_000_000, &(T + 1_000_000_000).to_string(), "", &metrics("0.25e3", "5E0"), "null"),
        line("r9", T + 400_000_000, &(T + 1_500_000_000).to_string(), r#","was_cancelled":false"#, &metrics("3e2", "4.8984369999999995"), "null"),
        line("r8", T + 2_000_000_000, &(T + 9_000_000_000).to_string(), "", &metrics("1", "1"), "null"),
        r#"{"metadata":{"x_request_id":"zz","request_start_ns":1}}"#.to_owned(),
    ];
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Counts: decisions 9 (routed 8, rejected 1: r4); completion_lines 11 (13 lines, 2
/// blank); matched 7 (r1 r2 r3 r5 r6 r8 r9), dropped 1 (r7), rejected_served 1 (r4),
/// unrouted 1 (zz), retried 2 (r8, zz), cancelled 1 (r5), errors 1 (r6; r5 is cancelled),
/// completed 5 (r1 r2 r3 r8 r9), error_rate_pm floor(1000 × 1 / 7) = 142.
const COUNTS: &str = r#""counts":{"cancelled":1,"completed":5,"completion_lines":11,"decisions":9,"dropped":1,"error_rate_pm":142,"errors":1,"matched":7,"rejected":1,"rejected_served":1,"retried":2,"routed":8,"unrouted":1}"#;

/// Over the completed (predicted_milli, ttft_us): r1 (100,000, 355,886), r2 (150,000,
/// 100,000), r3 (150,000, 80,000), r8 (190,000, 250,000), r9 (165,000, 300,000).
/// Pairs: r1–r2, r1–r3, r1–r8, r1–r9 discordant (r1 predicts least, waits longest);
/// r2–r3 tied in prediction (neither); r2–r8, r2–r9, r3–r8, r3–r9 concordant; r8–r9
/// discordant (190,000 > 165,000 but 250,000 < 300,000). C = 4, D = 5:
/// gamma = floor(1000 × (−1) / 9) = floor(−111.1) = −112 (towards −∞, not −111).
/// Σ ttft = 1,085,886, Σ predicted = 755,000: floor(1,085,886,000 / 755,000) = 1438.
const PREDICTION: &str =
    r#""prediction":{"ttft_rank_gamma_pm":-112,"us_per_predicted_token":1438}"#;

/// Per worker:
/// - w0: r1, r2: ttft (355,886 + 100,000) / 2 = 227,943; tpot (10,000 + 12,345) / 2 =
///   11,172 (floor of 11,172.5); predicted (100,000 + 150,000) / 2 = 125,000;
///   floor(1000 × 455,886 / 250,000) = 1823.
/// - w1: r3, r8: ttft (80,000 + 250,000) / 2 = 165,000; tpot (30,000 + 5,000) / 2 =
///   17,500; predicted (150,000 + 190,000) / 2 = 170,000; floor(330,000,000 / 340,000) = 970.
/// - w2: r9: 300,000, 4,898, 165,000; floor(300,000,000 / 165,000) = 1818.
const WORKERS: &str = r#""workers":[{"completed":2,"predicted_mean_milli":125000,"tpot_mean_us":11172,"ttft_mean_us":227943,"us_per_predicted_token":1823,"worker":"w0"},{"completed":2,"predicted_mean_milli":170000,"tpot_mean_us":17500,"ttft_mean_us":165000,"us_per_predicted_token":970,"worker":"w1"},{"completed":1,"predicted_mean_milli":165000,"tpot_mean_us":4898,"ttft_mean_us":300000,"us_per_predicted_token":1818,"worker":"w2"}]"#;

/// The document of §14.3 with `goodput` and `slo` as given.
fn document(receipt_digest: &str, goodput: &str, slo: &str) -> String {
    format!(
        r#"{{{COUNTS},"format":"kvroute-join/2","goodput":{goodput},{PREDICTION},"receipt_digest":"{receipt_digest}","run":"cache_plus_load","slo":{slo},{WORKERS}}}"#
    )
}

/// `--slo ttft_ms=250,tpot_ms=20`: good are r2 (100,000 ≤ 250,000 and 12,345 ≤ 20,000)
/// and r8 (250,000 ≤ 250,000 exactly, 5,000); r1 and r9 miss TTFT, r3 meets TTFT
/// (80,000) but misses TPOT (30,000 > 20,000). good 2, good_pm floor(2000 / 8) = 250.
/// span over the matched records: max end T + 1.5 s (r9) − min start T − 0.9 s (r6) =
/// 2,400,000,000 ns (r4's and zz's figures are not matched records, r8's retry is not its
/// record, r5's null end is left out); good_per_second_milli floor(2·10^12 / 2.4·10^9) = 833.
const GOODPUT_BOTH: &str =
    r#"{"good":2,"good_per_second_milli":833,"good_pm":250,"span_ns":2400000000}"#;

/// The objectives `--slo TEXT` declares, as the join is given them.
fn declared(text: &str) -> Option<Slo> {
    Some(parse_slo(text).expect("the test's --slo is valid"))
}

fn text(bytes: Result<Vec<u8>, JoinFailure>) -> String {
    String::from_utf8(bytes.expect("the join succeeds")).unwrap()
}

#[test]
fn a_receipt_as_the_tests_assume() {
    let receipt: Value = serde_json::from_slice(&receipt()).unwrap();
    let runs = receipt["runs"].as_array().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(names, POLICIES);
    let run = &runs[3];
    let expected = [
        ("r1", Some(("w0", 0, 100))),
        ("r2", Some(("w0", 100_000, 50))),
        ("r3", Some(("w1", 100_000, 50))),
        ("r4", None),
        ("r5", Some(("w0", 150_000, 200))),
        ("r6", Some(("w1", 150_000, 10))),
        ("r7", Some(("w2", 150_000, 10))),
        ("r8", Some(("w1", 160_000, 30))),
        ("r9", Some(("w2", 160_000, 5))),
    ];
    let decisions = run["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), expected.len());
    for (d, (request, chosen)) in decisions.iter().zip(expected) {
        assert_eq!(d["request"], *request);
        match chosen {
            None => assert!(d["chosen"].is_null(), "{request}"),
            Some((worker, work, recomputed)) => {
                assert_eq!(d["chosen"], worker, "{request}");
                let row = d["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|row| row["worker"] == worker)
                    .unwrap();
                assert_eq!(row["work_milli"], work, "{request}");
                assert_eq!(row["recomputed"], recomputed, "{request}");
            }
        }
    }
    assert_eq!(run["cache_log"].as_array().unwrap().len(), 1);
    assert_eq!(run["observation_log"].as_array().unwrap().len(), 1);
}

#[test]
fn every_figure_as_computed_by_hand() {
    let receipt = receipt();
    let got = text(join(
        &receipt,
        completions().as_bytes(),
        RUN,
        declared("ttft_ms=250,tpot_ms=20"),
        None,
    ));
    let slo = r#"{"tpot_us":20000,"ttft_us":250000}"#;
    assert_eq!(got, document(&receipt_digest(&receipt), GOODPUT_BOTH, slo));
}

#[test]
fn without_slo_goodput_and_the_objectives_are_null() {
    let receipt = receipt();
    let got = text(join(&receipt, completions().as_bytes(), RUN, None, None));
    let slo = r#"{"tpot_us":null,"ttft_us":null}"#;
    assert_eq!(got, document(&receipt_digest(&receipt), "null", slo));
}

/// `--slo tpot_ms=20` alone: good are r1 (10,000), r2 (12,345), r8 (5,000), r9 (4,898),
/// not r3 (30,000): 4, good_pm floor(4000 / 8) = 500, floor(4·10^12 / 2.4·10^9) = 1666.
/// `--slo ttft_ms=0`: no completed record has a TTFT of 0: 0 good.
#[test]
fn one_objective_alone() {
    let receipt = receipt();
    let got = text(join(
        &receipt,
        completions().as_bytes(),
        RUN,
        declared("tpot_ms=20"),
        None,
    ));
    let goodput = r#"{"good":4,"good_per_second_milli":1666,"good_pm":500,"span_ns":2400000000}"#;
    let slo = r#"{"tpot_us":20000,"ttft_us":null}"#;
    assert_eq!(got, document(&receipt_digest(&receipt), goodput, slo));
    let got = text(join(
        &receipt,
        completions().as_bytes(),
        RUN,
        declared("ttft_ms=0"),
        None,
    ));
    let goodput = r#"{"good":0,"good_per_second_milli":0,"good_pm":0,"span_ns":2400000000}"#;
    let slo = r#"{"tpot_us":null,"ttft_us":0}"#;
    assert_eq!(got, document(&receipt_digest(&receipt), goodput, slo));
}

#[test]
fn a_json_lines_receipt_gives_the_same_document() {
    let receipt = receipt();
    let jsonl = jsonl_receipt();
    assert!(jsonl.starts_with(b"{\"format\":\"kvroute-receipt-stream/1\","));
    assert_eq!(
        jsonl.iter().filter(|b| **b == b'\n').count(),
        1 + 4 * (1 + 9 + 1 + 1) + 1
    );
    for slo in [None, declared("ttft_ms=250,tpot_ms=20")] {
        let from_json = text(join(&receipt, completions().as_bytes(), RUN, slo, None));
        let from_lines = text(join(&jsonl, completions().as_bytes(), RUN, slo, None));
        assert_eq!(from_json, from_lines);
    }
    // Without its last newline too.
    let trimmed = &jsonl[..jsonl.len() - 1];
    assert_eq!(
        text(join(trimmed, completions().as_bytes(), RUN, None, None)),
        text(join(&receipt, completions().as_bytes(), RUN, None, None))
    );
}

/// Another run of the same receipt: `round_robin` (cursor over w0, w1, w2, r4 rejected
/// and leaving the cursor) routes r1 w0, r2 w1, r3 w2, r5 w0, r6 w1, r7 w2, r8 w0, r9 w1;
/// the counts do not depend on which worker, so they are the same as above.
#[test]
fn run_selects_the_run() {
    let receipt = receipt();
    let got = text(join(
        &receipt,
        completions().as_bytes(),
        "round_robin",
        None,
        None,
    ));
    let value: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(value["run"], "round_robin");
    let counts: Value = serde_json::from_str(&format!("{{{COUNTS}}}")).unwrap();
    assert_eq!(value["counts"], counts["counts"]);
    let workers: Vec<(&str, u64)> = value["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["worker"].as_str().unwrap(),
                w["completed"].as_u64().unwrap(),
            )
        })
        .collect();
    // Completed: r1 (w0), r2 (w1), r3 (w2), r8 (w0), r9 (w1).
    assert_eq!(workers, [("w0", 2), ("w1", 2), ("w2", 1)]);
}

const KEY: &[u8] = b"join-test-key";

/// Each decision's `request` replaced by its keyed form, as `replay --id-key` writes it
/// (§6.5); the join reads the receipt's `receipt_digest` as it stands.
fn keyed_receipt() -> Vec<u8> {
    let mut text = String::from_utf8(receipt()).unwrap();
    for i in 1..=9 {
        let id = format!("r{i}");
        text = text.replace(
            &format!("\"request\":\"{id}\""),
            &format!("\"request\":\"{}\"", keyed_request_id(KEY, &id)),
        );
    }
    text.into_bytes()
}

#[test]
fn keyed_ids_are_hmac_sha256_cut_to_16_bytes() {
    // By `printf r1 | openssl dgst -sha256 -hmac join-test-key`, first 32 hex digits.
    assert_eq!(
        keyed_request_id(KEY, "r1"),
        "60dce32fdd4070b51269c83c8f100837"
    );
    assert_eq!(
        keyed_request_id(KEY, "r2"),
        "4ac608f9a8e0f3fb10ce9ad075f04440"
    );
    // RFC 4231 test cases 2 and 6 (a key longer than the block is hashed first).
    assert_eq!(
        keyed_request_id(b"Jefe", "what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c7"
    );
    assert_eq!(
        keyed_request_id(
            &[0xaa; 131],
            "Test Using Larger Than Block-Size Key - Hash Key First"
        ),
        "60e431591ee0b67f0d8a26aacbf5b77f"
    );
}

#[test]
fn a_keyed_receipt_joins_plain_completion_ids_under_the_key() {
    let keyed = keyed_receipt();
    assert!(!String::from_utf8_lossy(&keyed).contains("\"request\":\"r"));
    let got = text(join(
        &keyed,
        completions().as_bytes(),
        RUN,
        declared("ttft_ms=250,tpot_ms=20"),
        Some(KEY),
    ));
    let slo = r#"{"tpot_us":20000,"ttft_us":250000}"#;
    assert_eq!(got, document(&receipt_digest(&keyed), GOODPUT_BOTH, slo));
    // Without the key nothing matches: the first completion id as given, the run's
    // first request id as the receipt has it.
    assert_eq!(
        join(&keyed, completions().as_bytes(), RUN, None, None),
        Err(JoinFailure::NothingMatched {
            completion_id: "r1".to_owned(),
            request_id: "60dce32fdd4070b51269c83c8f100837".to_owned(),
        })
    );
    // A key with a plain receipt: the completion id as it was compared, keyed.
    assert_eq!(
        join(&receipt(), completions().as_bytes(), RUN, None, Some(KEY)),
        Err(JoinFailure::NothingMatched {
            completion_id: "60dce32fdd4070b51269c83c8f100837".to_owned(),
            request_id: "r1".to_owned(),
        })
    );
}

fn lines(completions: &str) -> Vec<(usize, String)> {
    match join(&receipt(), completions.as_bytes(), RUN, None, None) {
        Err(JoinFailure::Lines(lines)) => lines,
        other => panic!("expected line errors, got {other:?}"),
    }
}

fn one(completions: &str) -> String {
    let got = lines(completions);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 1);
    got[0].1.clone()
}

#[test]
fn a_line_that_is_not_the_layout() {
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":5,"request_start_ns":0}}"#),
        "metadata.x_request_id: expected a non-empty string, found 5"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"","request_start_ns":0}}"#),
        r#"metadata.x_request_id: expected a non-empty string, found """#
    );
    assert_eq!(
        one(r#"{"metadata":{"request_start_ns":0}}"#),
        r#"metadata: missing required member "x_request_id""#
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1"}}"#),
        r#"metadata: missing required member "request_start_ns""#
    );
    assert_eq!(
        one(r#"{"metrics":null}"#),
        r#"$: missing required member "metadata""#
    );
    assert_eq!(one("[1]"), "$: expected an object, found [1]");
    assert_eq!(
        one(r#"{"metadata":[]}"#),
        "metadata: expected an object, found []"
    );
    assert_eq!(
        one(
            r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"time_to_first_token":{"value":1,"unit":"s"}}}"#
        ),
        r#"metrics.time_to_first_token.unit: expected "ms", found "s""#
    );
    assert_eq!(
        one(
            r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"inter_token_latency":{"value":-1,"unit":"ms"}}}"#
        ),
        "metrics.inter_token_latency.value: expected a non-negative number, found -1"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0,"x_request_id":"r2"}}"#),
        r#"metadata.x_request_id: repeated member "x_request_id""#
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":1.5}}"#),
        "metadata.request_start_ns: expected a non-negative integer, found 1.5"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":10000000000000000000}}"#),
        "metadata.request_start_ns: expected a non-negative integer, found 10000000000000000000"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0,"request_end_ns":"x"}}"#),
        r#"metadata.request_end_ns: expected a non-negative integer or null, found "x""#
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0,"was_cancelled":1}}"#),
        "metadata.was_cancelled: expected a boolean, found 1"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":5}"#),
        "metrics: expected an object or null, found 5"
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"error":"boom"}"#),
        r#"error: expected an object or null, found "boom""#
    );
    assert_eq!(
        one(
            r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"time_to_first_token":null}}"#
        ),
        "metrics.time_to_first_token: expected an object, found null"
    );
    assert_eq!(
        one(
            r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"time_to_first_token":{"unit":"ms"}}}"#
        ),
        r#"metrics.time_to_first_token: missing required member "value""#
    );
    assert_eq!(
        one(r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"time_to_first_token":{"value":1e400,"unit":"ms"}}}"#),
        "metrics.time_to_first_token.value: expected a number of milliseconds below 9007199254740.992, found 1e400"
    );
    // Unknown members, and repeats of them, are ignored; so is the unit of a metric the
    // join does not read.
    let fine = r#"{"metadata":{"x_request_id":"r1","request_start_ns":0,"a":1,"a":2},"b":[],"b":{},"metrics":{"output_token_count":{"value":"x","unit":"tokens"}}}"#;
    assert!(join(&receipt(), fine.as_bytes(), RUN, None, None).is_ok());
}

#[test]
fn a_line_gives_every_reason_in_table_order() {
    let got = lines(concat!(
        "\n",
        r#"{"error":1,"metrics":{"inter_token_latency":{"unit":"us","value":"1"},"time_to_first_token":7},"#,
        r#""metadata":{"was_cancelled":null,"request_end_ns":-0,"x_request_id":null,"x_request_id":"r1"},"metadata":{}}"#,
    ));
    let reasons: Vec<&str> = got
        .iter()
        .map(|(line, r)| {
            assert_eq!(*line, 2);
            r.as_str()
        })
        .collect();
    // §14.5: the members in §14.1's order (metadata and its four, metrics and its two
    // with value then unit, error), a member's own problems before the members inside
    // it: the repeated `metadata` (its own problem) comes first, before anything inside
    // the first `metadata`; x_request_id's type error (its first occurrence) before its
    // repeat (the later one); the missing request_start_ns, written at `metadata`, in
    // request_start_ns's place.
    assert_eq!(
        reasons,
        [
            r#"metadata: repeated member "metadata""#,
            "metadata.x_request_id: expected a non-empty string, found null",
            r#"metadata.x_request_id: repeated member "x_request_id""#,
            r#"metadata: missing required member "request_start_ns""#,
            "metadata.request_end_ns: expected a non-negative integer or null, found -0",
            "metadata.was_cancelled: expected a boolean, found null",
            "metrics.time_to_first_token: expected an object, found 7",
            r#"metrics.inter_token_latency.value: expected a non-negative number, found "1""#,
            r#"metrics.inter_token_latency.unit: expected "ms", found "us""#,
            "error: expected an object or null, found 1",
        ]
    );
}

#[test]
fn a_line_that_is_not_json() {
    assert_eq!(
        one("{\"metadata\":"),
        "invalid JSON: EOF while parsing a value at column 12"
    );
    assert_eq!(one("nope"), "invalid JSON: expected ident at column 2");
    assert_eq!(one("{} x"), "invalid JSON: trailing characters at column 4");
    assert_eq!(
        one("\u{feff}{}"),
        "invalid JSON: the line starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry"
    );
    // Lines are numbered in the file, blank ones included.
    let got = lines(&format!(
        "\n{}\n  \n[]\n",
        r#"{"metadata":{"x_request_id":"r1","request_start_ns":0}}"#
    ));
    assert_eq!(got, [(4, "$: expected an object, found []".to_owned())]);
}

#[test]
fn a_line_over_the_cap() {
    let mut long = vec![b' '; 67_108_865];
    long.extend_from_slice(b"\n");
    match join(&receipt(), &long, RUN, None, None) {
        Err(JoinFailure::Lines(got)) => {
            assert_eq!(got, [(1, "line longer than 67108864 bytes".to_owned())])
        }
        other => panic!("{other:?}"),
    }
    // At the cap exactly it is a blank line.
    long.truncate(67_108_864);
    assert_eq!(
        join(&receipt(), &long, RUN, None, None),
        Err(JoinFailure::NoRecords)
    );
}

#[test]
fn the_first_100_errors_then_a_count() {
    let text = "[]\n".repeat(130);
    let got = lines(&text);
    assert_eq!(got.len(), 101);
    for (i, (line, reason)) in got[..100].iter().enumerate() {
        assert_eq!(*line, i + 1);
        assert_eq!(reason, "$: expected an object, found []");
    }
    assert_eq!(got[100], (0, "... and 30 more errors".to_owned()));
    // Exactly 100: no count line.
    assert_eq!(lines(&"[]\n".repeat(100)).len(), 100);
}

/// One record for r1 (w0, predicted 100,000) with this TTFT literal: its ttft_mean_us.
fn ttft_us(literal: &str) -> Result<u64, String> {
    let line = format!(
        r#"{{"metadata":{{"x_request_id":"r1","request_start_ns":0}},"metrics":{{"time_to_first_token":{{"value":{literal},"unit":"ms"}},"inter_token_latency":{{"value":0,"unit":"ms"}}}}}}"#
    );
    match join(&receipt(), line.as_bytes(), RUN, None, None) {
        Ok(bytes) => {
            let value: Value = serde_json::from_slice(&bytes).unwrap();
            Ok(value["workers"][0]["ttft_mean_us"].as_u64().unwrap())
        }
        Err(JoinFailure::Lines(lines)) => Err(lines[0].1.clone()),
        Err(other) => panic!("{other:?}"),
    }
}

#[test]
fn milliseconds_become_whole_microseconds_from_the_digits() {
    for (literal, us) in [
        ("255.886567999", 255_886),
        ("4.8984369999999995", 4_898),
        ("1e-3", 1),
        ("0.0009", 0),
        ("-0", 0),
        ("-0.0e7", 0),
        ("0", 0),
        ("1e-400", 0),
        ("12", 12_000),
        ("1.5E+2", 150_000),
        ("0.001999", 1),
        ("100000000000e-8", 1_000_000),
        ("9007199254740.991", 9_007_199_254_740_991),
        ("9007199254740.9919999", 9_007_199_254_740_991),
        ("9007199254740991e-3", 9_007_199_254_740_991),
        ("0.00000000000000000000000000000000000000001e41", 1_000),
    ] {
        assert_eq!(ttft_us(literal), Ok(us), "{literal}");
    }
    for (literal, reason) in [
        ("-0.001", "expected a non-negative number"),
        ("-1e-400", "expected a non-negative number"),
        (
            "9007199254740.992",
            "expected a number of milliseconds below 9007199254740.992",
        ),
        (
            "1e13",
            "expected a number of milliseconds below 9007199254740.992",
        ),
        (
            "1e99999999999999999999999",
            "expected a number of milliseconds below 9007199254740.992",
        ),
    ] {
        assert_eq!(
            ttft_us(literal),
            Err(format!(
                "metrics.time_to_first_token.value: {reason}, found {literal}"
            )),
            "{literal}"
        );
    }
}

#[test]
fn nanoseconds_pass_2_to_the_53() {
    // r1 alone, from 0 to 10^19 − 1: the whole span; r2 ends before its start: 0.
    let slo = Some(Slo::default());
    let line = |id: &str, start: &str, end: &str| {
        format!(
            r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":{start},"request_end_ns":{end}}},"metrics":{{"time_to_first_token":{{"value":1,"unit":"ms"}},"inter_token_latency":{{"value":1,"unit":"ms"}}}}}}"#
        )
    };
    let got = text(join(
        &receipt(),
        line("r1", "0", "9999999999999999999").as_bytes(),
        RUN,
        slo,
        None,
    ));
    let value: Value = serde_json::from_str(&got).unwrap();
    // good 1 of 8 routed: 125; 10^12 / (10^19 − 1) = 0; the span, 10^19 − 1 > B, is
    // written as B (§14.5, "Figures above B").
    assert!(got.contains(r#""goodput":{"good":1,"good_per_second_milli":0,"good_pm":125,"span_ns":9007199254740991}"#), "{got}");
    assert_eq!(
        value["slo"],
        serde_json::json!({"ttft_us": null, "tpot_us": null})
    );
    let got = text(join(
        &receipt(),
        line("r2", "9007199254740993", "9007199254740992").as_bytes(),
        RUN,
        slo,
        None,
    ));
    assert!(got.contains(r#""span_ns":0"#), "{got}");
    // All ends null: no max, span 0.
    let got = text(join(
        &receipt(),
        line("r2", "5", "null").as_bytes(),
        RUN,
        slo,
        None,
    ));
    assert!(got.contains(r#""span_ns":0"#), "{got}");
}

/// A matched record without `inter_token_latency` (or with `metrics: null` and no
/// error) is neither completed nor an error.
#[test]
fn completed_needs_both_latencies() {
    let text_in = concat!(
        r#"{"metadata":{"x_request_id":"r1","request_start_ns":0},"metrics":{"time_to_first_token":{"value":1,"unit":"ms"}}}"#,
        "\n",
        r#"{"metadata":{"x_request_id":"r2","request_start_ns":0},"metrics":null}"#,
    );
    let got = text(join(&receipt(), text_in.as_bytes(), RUN, None, None));
    assert!(got.starts_with(r#"{"counts":{"cancelled":0,"completed":0,"completion_lines":2,"decisions":9,"dropped":6,"error_rate_pm":0,"errors":0,"matched":2,"rejected":1,"rejected_served":0,"retried":0,"routed":8,"unrouted":0}"#), "{got}");
    assert!(
        got.contains(r#""prediction":{"ttft_rank_gamma_pm":null,"us_per_predicted_token":null}"#)
    );
    assert!(got.ends_with(r#""workers":[]}"#));
}

/// Only r4 (rejected) has a record: it matches a decision (§14.2's "matches"), so this
/// is a document with matched 0 and rejected_served 1, not the nothing-matched error.
#[test]
fn a_match_with_a_rejected_decision_is_a_match() {
    let only_r4 = r#"{"metadata":{"x_request_id":"r4","request_start_ns":0}}"#;
    let got = text(join(
        &receipt(),
        only_r4.as_bytes(),
        RUN,
        declared("ttft_ms=1,tpot_ms=1"),
        None,
    ));
    assert!(got.starts_with(r#"{"counts":{"cancelled":0,"completed":0,"completion_lines":1,"decisions":9,"dropped":8,"error_rate_pm":0,"errors":0,"matched":0,"rejected":1,"rejected_served":1,"retried":0,"routed":8,"unrouted":0}"#), "{got}");
    assert!(
        got.contains(r#""goodput":{"good":0,"good_per_second_milli":0,"good_pm":0,"span_ns":0}"#),
        "{got}"
    );
    // Only unknown ids: the error, with the first of each side.
    let unknown = "{\"metadata\":{\"x_request_id\":\"q\\n2\",\"request_start_ns\":0}}\n{\"metadata\":{\"x_request_id\":\"q1\",\"request_start_ns\":0}}";
    assert_eq!(
        join(&receipt(), unknown.as_bytes(), RUN, None, None),
        Err(JoinFailure::NothingMatched {
            completion_id: "q\n2".to_owned(),
            request_id: "r1".to_owned(),
        })
    );
}

#[test]
fn each_error_kind() {
    let receipt = receipt();
    let good = completions();
    assert_eq!(
        join(&receipt, b"", RUN, None, None),
        Err(JoinFailure::NoRecords)
    );
    assert_eq!(
        join(&receipt, b"\n \n\t\r\n", RUN, None, None),
        Err(JoinFailure::NoRecords)
    );
    assert_eq!(
        join(&receipt, good.as_bytes(), "dynamo_default", None, None),
        Err(JoinFailure::NoSuchRun(POLICIES.map(str::to_owned).to_vec()))
    );
    assert_eq!(
        join(&jsonl_receipt(), good.as_bytes(), "nope", None, None),
        Err(JoinFailure::NoSuchRun(POLICIES.map(str::to_owned).to_vec()))
    );
    let jsonl = jsonl_receipt();
    let without_last: Vec<u8> = {
        let text = String::from_utf8(jsonl.clone()).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.pop();
        lines.join("\n").into_bytes()
    };
    for not_a_receipt in [
        b"".to_vec(),
        b"{}".to_vec(),
        b"[1,2]".to_vec(),
        trace().into_bytes(),
        b"{\"format\":\"kvroute-receipt/1\",\"receipt_digest\":\"x\",\"runs\":5}".to_vec(),
        receipt[..receipt.len() - 1].to_vec(),
        without_last,
        // The last row of the last run (cache_plus_load's r9, its chosen w2).
        {
            let mut text = String::from_utf8(receipt.clone()).unwrap();
            let at = text.rfind("\"work_milli\":").unwrap();
            text.insert(at + "\"work_milli\":".len(), '-');
            text.into_bytes()
        },
    ] {
        assert_eq!(
            join(&not_a_receipt, good.as_bytes(), RUN, None, None),
            Err(JoinFailure::NotAReceipt),
            "{}",
            String::from_utf8_lossy(&not_a_receipt[..not_a_receipt.len().min(80)])
        );
    }
    // The completions are judged first: line errors, then no records, before the receipt.
    assert!(matches!(
        join(b"{}", b"[]", RUN, None, None),
        Err(JoinFailure::Lines(_))
    ));
    assert_eq!(
        join(b"{}", b"", RUN, None, None),
        Err(JoinFailure::NoRecords)
    );
    // A pretty-printed receipt is still a receipt (join reads it, it does not verify it).
    let pretty =
        serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&receipt).unwrap()).unwrap();
    assert_eq!(
        text(join(&pretty, good.as_bytes(), RUN, None, None)),
        text(join(&receipt, good.as_bytes(), RUN, None, None))
    );
}

/// Figures past 2^64, written as B (§14.5), and the nulls of an empty sum. Two workers
/// at tick 0:
/// `w0` with `active_decode 1` under `decode_weight_milli 1` (work_milli 1), `w1` idle;
/// four requests of 0 prompt tokens. `round_robin` routes z1 w0, z2 w1, z3 w0, z4 w1, so
/// predicted_milli is 1 on w0 (work 1, recomputed 0) and 0 on w1. Records for z1, z2,
/// z4 (z3 dropped), each with TTFT 9007199254740.991 ms = B µs:
/// - gamma: every TTFT is equal, every pair tied: `null`;
/// - fleet: floor(1000 × 3B / 1) = 3000 × B = 27021597764222973000 (past 2^64), written
///   as B = 9007199254740991;
/// - w0: floor(1000 × B / 1) = 9007199254740991000, written as B; w1: Σ predicted 0:
///   `null`; each worker's `ttft_mean_us` is B exactly (written as it is).
#[test]
fn figures_past_2_to_the_64_are_written_as_b_and_empty_sums() {
    let trace = r#"{"format":"kvroute-trace/1","policy":{"decode_weight_milli":1},"workers":[
        {"id":"w0","model":"m","adapters":[],"prefill_rate":1,"decode_rate":1,"queued_prefill":0,
         "active_decode":1,"observed_tick":0,"epoch":0,"cache":[]},
        {"id":"w1","model":"m","adapters":[],"prefill_rate":1,"decode_rate":1,"queued_prefill":0,
         "active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}],
      "events":[
        {"seq":1,"tick":0,"type":"request","id":"z1","tenant":"t","model":"m","adapter":"base","prefix":[],"prompt_tokens":0,"decode_tokens":0},
        {"seq":2,"tick":0,"type":"request","id":"z2","tenant":"t","model":"m","adapter":"base","prefix":[],"prompt_tokens":0,"decode_tokens":0},
        {"seq":3,"tick":0,"type":"request","id":"z3","tenant":"t","model":"m","adapter":"base","prefix":[],"prompt_tokens":0,"decode_tokens":0},
        {"seq":4,"tick":0,"type":"request","id":"z4","tenant":"t","model":"m","adapter":"base","prefix":[],"prompt_tokens":0,"decode_tokens":0}]}"#;
    let receipt = replay(trace.as_bytes()).unwrap();
    let record = |id: &str| {
        format!(
            r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":0}},"metrics":{{"time_to_first_token":{{"value":9007199254740.991,"unit":"ms"}},"inter_token_latency":{{"value":0,"unit":"ms"}}}}}}"#
        )
    };
    let completions = [record("z1"), record("z2"), record("z4")].join("\n");
    let got = text(join(
        &receipt,
        completions.as_bytes(),
        "round_robin",
        None,
        None,
    ));
    assert!(
        got.contains(
            r#""prediction":{"ttft_rank_gamma_pm":null,"us_per_predicted_token":9007199254740991}"#
        ),
        "{got}"
    );
    assert!(got.ends_with(r#""workers":[{"completed":1,"predicted_mean_milli":1,"tpot_mean_us":0,"ttft_mean_us":9007199254740991,"us_per_predicted_token":9007199254740991,"worker":"w0"},{"completed":2,"predicted_mean_milli":0,"tpot_mean_us":0,"ttft_mean_us":9007199254740991,"us_per_predicted_token":null,"worker":"w1"}]}"#), "{got}");
    assert!(
        got.contains(r#""dropped":1,"#) && got.contains(r#""completed":3,"#),
        "{got}"
    );
}

/// The reader's syntax messages for a line are serde_json's (`from_slice`), with the
/// position as a column alone.
#[test]
fn syntax_messages_are_serde_jsons() {
    for bad in [
        "{\"metadata\":",
        "nope",
        "{} x",
        "{\"a\" 1}",
        "[1,]",
        "{\"a\":\"\u{1}\"}",
        "tru",
    ] {
        let serde = serde_json::from_slice::<Value>(bad.as_bytes())
            .unwrap_err()
            .to_string();
        let (what, column) = serde.rsplit_once(" at line 1 column ").unwrap();
        assert_eq!(
            one(bad),
            format!("invalid JSON: {what} at column {column}"),
            "{bad}"
        );
    }
}

/// §14.5: a repeated member is reported in its own place (right after its own type
/// check), not after the object's other members; the repeat of an object comes before
/// the problems inside it. Every later occurrence is one error (§2.2).
#[test]
fn a_repeat_is_reported_in_its_members_place() {
    let got = lines(concat!(
        r#"{"metadata":{"x_request_id":"r1","request_start_ns":0,"request_start_ns":1,"#,
        r#""was_cancelled":true,"was_cancelled":5},"#,
        r#""metrics":{"time_to_first_token":{"value":1,"unit":"ms","value":2},"time_to_first_token":null,"#,
        r#""inter_token_latency":{"unit":"ms","unit":"s"}},"#,
        r#""error":null,"metrics":1,"error":{},"error":2}"#,
    ));
    let reasons: Vec<&str> = got.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            r#"metadata.request_start_ns: repeated member "request_start_ns""#,
            r#"metadata.was_cancelled: repeated member "was_cancelled""#,
            // metrics: its own repeat, then its members inside (the first occurrence's).
            r#"metrics: repeated member "metrics""#,
            r#"metrics.time_to_first_token: repeated member "time_to_first_token""#,
            r#"metrics.time_to_first_token.value: repeated member "value""#,
            r#"metrics.inter_token_latency: missing required member "value""#,
            r#"metrics.inter_token_latency.unit: repeated member "unit""#,
            r#"error: repeated member "error""#,
            r#"error: repeated member "error""#,
        ]
    );
    assert!(got.iter().all(|(line, _)| *line == 1));
    // A member's type error (its first occurrence) before its repeat (a later one).
    let got = lines(r#"{"metadata":5,"metadata":{}}"#);
    assert_eq!(
        got,
        [
            (1, "metadata: expected an object, found 5".to_owned()),
            (1, r#"metadata: repeated member "metadata""#.to_owned()),
        ]
    );
}

/// §14.5: a missing member at the object that lacks it, in the missing member's place.
#[test]
fn missing_members_at_the_object_that_lacks_them() {
    let got = lines(concat!(
        r#"{"metadata":{"request_end_ns":true},"#,
        r#""metrics":{"inter_token_latency":{},"time_to_first_token":{"unit":"ms"}}}"#,
        "\n",
        r#"{"error":null}"#,
    ));
    assert_eq!(
        got,
        [
            (
                1,
                r#"metadata: missing required member "x_request_id""#.to_owned()
            ),
            (
                1,
                r#"metadata: missing required member "request_start_ns""#.to_owned()
            ),
            (
                1,
                "metadata.request_end_ns: expected a non-negative integer or null, found true"
                    .to_owned()
            ),
            (
                1,
                r#"metrics.time_to_first_token: missing required member "value""#.to_owned()
            ),
            (
                1,
                r#"metrics.inter_token_latency: missing required member "value""#.to_owned()
            ),
            (
                1,
                r#"metrics.inter_token_latency: missing required member "unit""#.to_owned()
            ),
            (2, r#"$: missing required member "metadata""#.to_owned()),
        ]
    );
}

/// §14.5: the five kinds of error, the first that applies: line errors, then no
/// records, then the receipt, then `--run`, then the join that matches nothing.
#[test]
fn the_five_kinds_of_error_in_order() {
    let receipt = receipt();
    let unknown = r#"{"metadata":{"x_request_id":"q1","request_start_ns":0}}"#;
    // 1 before 2: a file whose only non-blank line is not the layout.
    assert_eq!(
        join(b"{}", b"\n[]\n\n", "nope", None, None),
        Err(JoinFailure::Lines(vec![(
            2,
            "$: expected an object, found []".to_owned()
        )]))
    );
    // 2 before 3.
    assert_eq!(
        join(b"{}", b" \n", "nope", None, None),
        Err(JoinFailure::NoRecords)
    );
    // 3 before 4, and before 5.
    assert_eq!(
        join(b"{}", unknown.as_bytes(), "nope", None, None),
        Err(JoinFailure::NotAReceipt)
    );
    // 4 before 5.
    assert_eq!(
        join(&receipt, unknown.as_bytes(), "nope", None, None),
        Err(JoinFailure::NoSuchRun(POLICIES.map(str::to_owned).to_vec()))
    );
    // 5.
    assert_eq!(
        join(&receipt, unknown.as_bytes(), RUN, None, None),
        Err(JoinFailure::NothingMatched {
            completion_id: "q1".to_owned(),
            request_id: "r1".to_owned(),
        })
    );
}

/// §14.5: the first completion id is the first record's in file order: blank lines are
/// no record, and a later line of an id (a retry) does not move it.
#[test]
fn the_first_completion_id_is_the_first_records() {
    let record =
        |id: &str| format!(r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":0}}}}"#);
    let text = format!(
        "\n \t\r\n{}\r\n{}\n{}\n",
        record("q2"),
        record("q1"),
        record("q2")
    );
    assert_eq!(
        join(&receipt(), text.as_bytes(), RUN, None, None),
        Err(JoinFailure::NothingMatched {
            completion_id: "q2".to_owned(),
            request_id: "r1".to_owned(),
        })
    );
    // Keyed: as compared, HMAC-SHA256 of "q2" under the key, first 16 bytes in hex.
    assert_eq!(
        join(&receipt(), text.as_bytes(), RUN, None, Some(KEY)),
        Err(JoinFailure::NothingMatched {
            completion_id: keyed_request_id(KEY, "q2"),
            request_id: "r1".to_owned(),
        })
    );
}

/// §14.5: a blank line holds only JSON whitespace (space, tab, `\n`, `\r`). CRLF line
/// ends and lines of `\r` are blank or part of a record; a form feed, a vertical tab or
/// a no-break space is not JSON whitespace, so such a line is a syntax error.
#[test]
fn what_a_blank_line_is() {
    let r1 = r#"{"metadata":{"x_request_id":"r1","request_start_ns":0}}"#;
    let text = format!("\r\n{r1}\r\n\t \r\n\r\r\n");
    let got = text_of(join(&receipt(), text.as_bytes(), RUN, None, None));
    assert!(got.contains(r#""completion_lines":1,"#), "{got}");
    assert!(got.contains(r#""matched":1,"#), "{got}");
    for not_blank in ["\u{c}", "\u{b}", " \u{a0}", "\u{c}\r"] {
        let serde = serde_json::from_slice::<Value>(not_blank.as_bytes())
            .unwrap_err()
            .to_string();
        let (what, column) = serde.rsplit_once(" at line 1 column ").unwrap();
        let got = lines(&format!("{r1}\n{not_blank}\n"));
        assert_eq!(
            got,
            [(2, format!("invalid JSON: {what} at column {column}"))],
            "{not_blank:?}"
        );
    }
}

fn text_of(bytes: Result<Vec<u8>, JoinFailure>) -> String {
    String::from_utf8(bytes.expect("the join succeeds")).unwrap()
}

/// A receipt written by hand, as join reads it (it does not verify, §14): one run,
/// `cache_plus_load`, whose decisions route each id to `w0` with the given
/// `recomputed` and `work_milli` (and every other member join reads, §14.1).
fn hand_receipt(decisions: &[(String, u64, u64)]) -> Vec<u8> {
    let decisions: Vec<String> = decisions
        .iter()
        .map(|(id, recomputed, work_milli)| {
            format!(
                r#"{{"request":"{id}","tick":0,"chosen":"w0","route_kind":"cold","candidates":[{{"worker":"w0","eligible":true,"reasons":[],"reuse":0,"recomputed":{recomputed},"work_milli":{work_milli},"after_milli":0,"cost_milli":0}}]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"format":"kvroute-receipt/1","receipt_digest":"d","runs":[{{"policy":"cache_plus_load","decisions":[{}]}}]}}"#,
        decisions.join(",")
    )
    .into_bytes()
}

/// §14.5 "Figures above B": `good_per_second_milli` divides by the exact span, not the
/// written (saturated) `span_ns`; and it saturates itself.
///
/// 9008 decisions q0 … q9007 on w0 (recomputed 0, work_milli 1: predicted 1 each), each
/// with a record of TTFT and TPOT 1 ms, start 0; `--slo ttft_ms=1`: all 9008 good,
/// good_pm 1000.
/// - q0 ends at 9,008,000,000,000,001 ns, the others `null`: the span is
///   9,008,000,000,000,001, above B, written B; good_per_second_milli =
///   floor(9008 × 10^12 / 9,008,000,000,000,001) = 0 (with the saturated span it would
///   be floor(9.008·10^15 / B) = 1).
/// - q0 ends at 1 ns: span 1; floor(9008 × 10^12 / 1) = 9.008·10^15 > B, written B.
///
/// Both: workers w0 completed 9008, ttft/tpot means 1000, predicted mean 1,
/// us_per_predicted_token floor(1000 × 9,008,000 / 9008) = 1,000,000 (fleet too);
/// gamma null (every prediction tied).
#[test]
fn good_per_second_divides_by_the_exact_span() {
    const N: usize = 9008;
    let ids: Vec<String> = (0..N).map(|i| format!("q{i}")).collect();
    let receipt = hand_receipt(&ids.iter().map(|id| (id.clone(), 0, 1)).collect::<Vec<_>>());
    let completions = |first_end: &str| {
        let mut text = String::new();
        for (i, id) in ids.iter().enumerate() {
            let end = if i == 0 { first_end } else { "null" };
            text.push_str(&format!(
                r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":0,"request_end_ns":{end}}},"metrics":{{"time_to_first_token":{{"value":1,"unit":"ms"}},"inter_token_latency":{{"value":1,"unit":"ms"}}}}}}"#
            ));
            text.push('\n');
        }
        text
    };
    let tail = r#""prediction":{"ttft_rank_gamma_pm":null,"us_per_predicted_token":1000000},"receipt_digest":"d","run":"cache_plus_load","slo":{"tpot_us":null,"ttft_us":1000},"workers":[{"completed":9008,"predicted_mean_milli":1,"tpot_mean_us":1000,"ttft_mean_us":1000,"us_per_predicted_token":1000000,"worker":"w0"}]}"#;
    let got = text_of(join(
        &receipt,
        completions("9008000000000001").as_bytes(),
        RUN,
        declared("ttft_ms=1"),
        None,
    ));
    assert_eq!(
        got,
        format!(
            r#"{{"counts":{{"cancelled":0,"completed":9008,"completion_lines":9008,"decisions":9008,"dropped":0,"error_rate_pm":0,"errors":0,"matched":9008,"rejected":0,"rejected_served":0,"retried":0,"routed":9008,"unrouted":0}},"format":"kvroute-join/2","goodput":{{"good":9008,"good_per_second_milli":0,"good_pm":1000,"span_ns":9007199254740991}},{tail}"#
        )
    );
    let got = text_of(join(
        &receipt,
        completions("1").as_bytes(),
        RUN,
        declared("ttft_ms=1"),
        None,
    ));
    assert!(
        got.contains(r#""goodput":{"good":9008,"good_per_second_milli":9007199254740991,"good_pm":1000,"span_ns":1}"#),
        "{}",
        &got[..400]
    );
}

/// §14.5 "Figures above B": a mean above B is written as B, and the ratio over it is
/// computed from the exact sums. One decision q0 with recomputed B and work_milli B:
/// predicted_milli = B + 1000 × B = 1001 × B, written B; its record's TTFT is
/// 9007199254740.991 ms = B µs (written as it is: not above B), TPOT 0;
/// us_per_predicted_token = floor(1000 × B / (1001 × B)) = 0, for the worker and the
/// fleet (from a saturated mean it would be 1000).
#[test]
fn a_mean_above_b_is_written_as_b() {
    const BIG: u64 = 9_007_199_254_740_991;
    let receipt = hand_receipt(&[("q0".to_owned(), BIG, BIG)]);
    let record = r#"{"metadata":{"x_request_id":"q0","request_start_ns":0},"metrics":{"time_to_first_token":{"value":9007199254740.991,"unit":"ms"},"inter_token_latency":{"value":0,"unit":"ms"}}}"#;
    let got = text_of(join(&receipt, record.as_bytes(), RUN, None, None));
    assert!(
        got.ends_with(r#""prediction":{"ttft_rank_gamma_pm":null,"us_per_predicted_token":0},"receipt_digest":"d","run":"cache_plus_load","slo":{"tpot_us":null,"ttft_us":null},"workers":[{"completed":1,"predicted_mean_milli":9007199254740991,"tpot_mean_us":0,"ttft_mean_us":9007199254740991,"us_per_predicted_token":0,"worker":"w0"}]}"#),
        "{got}"
    );
}

// ---------------------------------------------------------------------------------------
// `--slo` (SPEC §14.2 "Goodput"): milliseconds with up to three decimals, held in
// microseconds; `ttft_ms=` and `ttft:` are one name.
// ---------------------------------------------------------------------------------------

/// One AIPerf record of `id`, start 0 and no end, its TTFT and TPOT written as given (ms).
fn timed(id: &str, ttft_ms: &str, tpot_ms: &str) -> String {
    format!(
        r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":0}},"metrics":{{"time_to_first_token":{{"value":{ttft_ms},"unit":"ms"}},"inter_token_latency":{{"value":{tpot_ms},"unit":"ms"}}}}}}"#
    ) + "\n"
}

/// q0 takes 300.5 ms to its first token (300,500 µs), q1 300.501 ms (300,501 µs); both
/// a TPOT of 0.5 ms (500 µs). Both are routed to w0 (predicted 1 each). No record has an
/// end, so span_ns and good_per_second_milli are 0 in every case below.
///
/// - `ttft_ms=300.5` is 300,500 µs: q0 is good (300,500 ≤ 300,500, exactly at the
///   objective), q1 is not (300,501 > 300,500): good 1, good_pm floor(1000 / 2) = 500.
///   Were the objective rounded to whole milliseconds, 300 would make neither good and
///   301 both.
/// - `ttft:300.5` is the same objective: the same bytes.
/// - `ttft_ms=300.501` makes both good (1000); `ttft_ms=300.5,tpot_ms=0.499` none (500 >
///   499); `ttft_ms=300.5,tpot:0.5` q0 alone again.
#[test]
fn an_objective_with_decimals_is_met_to_the_microsecond() {
    let receipt = hand_receipt(&[("q0".to_owned(), 0, 1), ("q1".to_owned(), 0, 1)]);
    let records = timed("q0", "300.5", "0.5") + &timed("q1", "300.501", "0.5");
    let joined = |slo: &str| text_of(join(&receipt, records.as_bytes(), RUN, declared(slo), None));
    let goodput = |good: u64, good_pm: u64| {
        format!(
            r#""goodput":{{"good":{good},"good_per_second_milli":0,"good_pm":{good_pm},"span_ns":0}}"#
        )
    };

    let got = joined("ttft_ms=300.5");
    assert!(got.contains(r#""format":"kvroute-join/2""#), "{got}");
    assert!(got.contains(&goodput(1, 500)), "{got}");
    assert!(
        got.contains(r#""slo":{"tpot_us":null,"ttft_us":300500}"#),
        "{got}"
    );
    assert_eq!(joined("ttft:300.5"), got);

    let got = joined("ttft_ms=300.501");
    assert!(got.contains(&goodput(2, 1000)), "{got}");
    assert!(
        got.contains(r#""slo":{"tpot_us":null,"ttft_us":300501}"#),
        "{got}"
    );

    let got = joined("ttft_ms=300.5,tpot_ms=0.499");
    assert!(got.contains(&goodput(0, 0)), "{got}");
    assert!(
        got.contains(r#""slo":{"tpot_us":499,"ttft_us":300500}"#),
        "{got}"
    );

    let got = joined("ttft_ms=300.5,tpot:0.5");
    assert!(got.contains(&goodput(1, 500)), "{got}");
    assert!(
        got.contains(r#""slo":{"tpot_us":500,"ttft_us":300500}"#),
        "{got}"
    );
}

/// vLLM's spelling is the same option: `ttft:300` is `ttft_ms=300` (300,000 µs), and
/// the two spellings mix in either order. Over this file's completions,
/// `ttft:250,tpot:20` is `every_figure_as_computed_by_hand`'s document.
#[test]
fn the_vllm_spelling_is_the_same_objective() {
    let ttft_300 = Slo {
        ttft_us: Some(300_000),
        tpot_us: None,
    };
    assert_eq!(parse_slo("ttft:300"), Ok(ttft_300));
    assert_eq!(parse_slo("ttft_ms=300"), Ok(ttft_300));
    let receipt = receipt();
    let expected = document(
        &receipt_digest(&receipt),
        GOODPUT_BOTH,
        r#"{"tpot_us":20000,"ttft_us":250000}"#,
    );
    for spelled in [
        "ttft:250,tpot:20",
        "tpot:20,ttft:250",
        "ttft:250,tpot_ms=20",
        "tpot_ms=20,ttft:250",
        "ttft_ms=250,tpot:20",
    ] {
        let got = text(join(
            &receipt,
            completions().as_bytes(),
            RUN,
            declared(spelled),
            None,
        ));
        assert_eq!(got, expected, "{spelled}");
    }
}

/// A value is ASCII digits, optionally `.` and one to three digits, in whole
/// microseconds from 0 to B: leading zeros are digits like any other, and
/// 9007199254740.991 ms is B µs exactly.
#[test]
fn slo_values_in_microseconds() {
    for (value, microseconds) in [
        ("0", 0),
        ("0.000", 0),
        ("0.5", 500),
        ("0.001", 1),
        ("000.5", 500),
        ("12.3", 12_300),
        ("12.30", 12_300),
        ("12.345", 12_345),
        ("300", 300_000),
        ("9007199254740", 9_007_199_254_740_000),
        ("9007199254740.991", 9_007_199_254_740_991),
    ] {
        let expected = Slo {
            ttft_us: None,
            tpot_us: Some(microseconds),
        };
        assert_eq!(
            parse_slo(&format!("tpot_ms={value}")),
            Ok(expected),
            "{value}"
        );
        assert_eq!(parse_slo(&format!("tpot:{value}")), Ok(expected), "{value}");
    }
}

/// Everything else `--slo` refuses, as a usage error that names `--slo`: a fourth
/// decimal (not rounded), an exponent, a sign, a bare or trailing point, a space
/// anywhere, other digits, an objective twice in either spelling, a name other than
/// the four (or a name with the other spelling's separator), empty items, and a value
/// over B µs (however many digits).
#[test]
fn slo_refusals_name_the_option() {
    let refused = [
        "ttft_ms=300.1234",
        "ttft_ms=0.0005",
        "ttft_ms=1e3",
        "ttft:1E3",
        "ttft_ms=-1",
        "ttft_ms=-0",
        "tpot_ms=+1",
        "ttft_ms=.5",
        "ttft_ms=5.",
        "ttft_ms=1.2.3",
        "ttft_ms= 5",
        "ttft_ms=5 ",
        " ttft_ms=5",
        "ttft_ms =5",
        "ttft_ms=5, tpot_ms=5",
        "ttft:300 tpot:50",
        "ttft_ms=\u{ff15}",
        "ttft_ms=0x10",
        "ttft_ms=1_000",
        "ttft_ms=NaN",
        "ttft_ms=inf",
        "ttft_ms=",
        "ttft:",
        "ttft_ms=300,ttft:300",
        "ttft:300,ttft_ms=300",
        "ttft_ms=1,ttft_ms=2",
        "tpot:1,tpot:1",
        "tpot_ms=1,ttft_ms=1,tpot:1",
        "e2el:500",
        "itl_ms=5",
        "TTFT_MS=300",
        "ttft=300",
        "ttft_ms:300",
        "tpot_ms:300",
        "",
        ",",
        "ttft_ms=1,",
        ",ttft_ms=1",
        "ttft_ms=1,,tpot_ms=1",
        "ttft_ms=1;tpot_ms=1",
        "ttft_ms=9007199254740.992",
        "ttft_ms=9007199254741",
        "tpot:99999999999999999999999999999999999999999999",
        "tpot:99999999999999999999999999999999999999999999.999",
    ];
    for text in refused {
        let got = parse_slo(text);
        assert!(
            got.as_ref().is_err_and(|line| line.starts_with("--slo: ")),
            "{text:?}: {got:?}"
        );
    }
    assert_eq!(
        parse_slo("ttft_ms=300,ttft:300"),
        Err("--slo: the ttft objective is given twice (ttft_ms and ttft are one name)".to_owned())
    );
    assert_eq!(
        parse_slo("tpot_ms=1,ttft:2,tpot:3"),
        Err("--slo: the tpot objective is given twice (tpot_ms and tpot are one name)".to_owned())
    );
    assert_eq!(
        parse_slo("ttft_ms=300.1234"),
        Err(r#"--slo: ttft: expected milliseconds as digits with at most three decimals, found "300.1234""#.to_owned())
    );
    assert_eq!(
        parse_slo("ttft:9007199254740.992"),
        Err(r#"--slo: ttft: expected at most 9007199254740.991 milliseconds (2^53 - 1 microseconds), found "9007199254740.992""#.to_owned())
    );
    assert_eq!(
        parse_slo("e2el:500"),
        Err(r#"--slo: expected ttft_ms=X, tpot_ms=Y, ttft:X or tpot:Y (milliseconds) separated by ",", found "e2el:500""#.to_owned())
    );
}
