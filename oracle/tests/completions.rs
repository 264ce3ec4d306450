//! SPEC §14.4 (`simulate --completions-out DIR [--ticks-per-ms N]`): the AIPerf completion
//! records of each policy's closed loop, through the public API, on a trace small enough
//! that every line is computed by hand from SPEC §11 *Prefill* and §14.4 below.

use serde_json::{json, Value};

use kvroute_oracle::simulate::{completion_line, ms_decimal, TICKS_PER_MS_MAX};
use kvroute_oracle::{
    join, simulate, simulate_completions, simulate_with_completions, CompletionRecord, SimOptions,
};

/// Two workers that serve different models, so every policy routes alike:
///
/// | worker | model | prefill_rate | decode_rate |
/// |---|---|---|---|
/// | `wA` | `m1` | 4 | 3 |
/// | `wB` | `m2` | 5 | 4 |
///
/// and five requests (tenant `t`, adapter `base`), in `(tick, seq)` order:
///
/// | seq | tick | id | model | prefix | prompt | decode |
/// |---|---|---|---|---|---|---|
/// | 1 | 0 | `q"1\` + LF + U+0001 + `é` | m1 | k1:8 | 40 | 10 |
/// | 2 | 1 | `r2` | m2 | — | 7 | 5 |
/// | 3 | 2 | `r3` | m3 | — | 3 | 1 |
/// | 4 | 3 | `r4` | m1 | k1:8 | 9 | 4 |
/// | 5 | 20 | `r5` | m1 | k1:8, k2:6 | 34 | 1 |
///
/// `r3` asks for a model no worker serves: rejected by every policy (§5), so it has no
/// record. The engine model (§11 *Prefill*; the default cache never evicts here):
///
/// - `r1` on `wA` at t = 0: the cache is empty, held 0, recomputed 40; starts at
///   max(0, 0) = 0, done = 0 + ceil(40/4) = 10. At 10 it stores k1:8.
/// - `r2` on `wB` at t = 1: held 0, recomputed 7; starts at max(1, 0) = 1,
///   done = 1 + ceil(7/5) = 3.
/// - `r4` on `wA` at t = 3: `r1` has not completed yet, so the engine holds nothing:
///   held 0, recomputed 9; FIFO, it starts at max(3, 10) = 10, done = 10 + ceil(9/4) = 13.
/// - `r5` on `wA` at t = 20: the engine holds k1:8 (stored at 10, again at 13); the walk
///   takes k1 whole (8), then k2 is absent: held 8, recomputed 26; starts at
///   max(20, 13) = 20, done = 20 + ceil(26/4) = 27.
///
/// Decode (§14.4, the chosen worker's rate): d = ceil(10/3) = 4 for `r1` (end tick 14),
/// ceil(5/4) = 2 for `r2` (end 5), ceil(4/3) = 2 for `r4` (end 15), ceil(1/3) = 1 for
/// `r5` (end 28). TTFT ticks (done − t): 10, 2, 10, 7.
fn tiny_trace() -> Vec<u8> {
    let worker = |id: &str, model: &str, prefill: u64, decode: u64| {
        json!({
            "id": id, "model": model, "adapters": [],
            "prefill_rate": prefill, "decode_rate": decode,
            "queued_prefill": 0, "active_decode": 0,
            "observed_tick": 0, "epoch": 0, "cache": [],
        })
    };
    let request = |seq: u64,
                   tick: u64,
                   id: &str,
                   model: &str,
                   prefix: &[(&str, u64)],
                   prompt: u64,
                   decode: u64| {
        let prefix: Vec<Value> = prefix
            .iter()
            .map(|(key, tokens)| json!({ "key": key, "tokens": tokens }))
            .collect();
        json!({
            "seq": seq, "tick": tick, "type": "request", "id": id,
            "tenant": "t", "model": model, "adapter": "base",
            "prefix": prefix, "prompt_tokens": prompt, "decode_tokens": decode,
        })
    };
    let trace = json!({
        "format": "kvroute-trace/1",
        "workers": [worker("wA", "m1", 4, 3), worker("wB", "m2", 5, 4)],
        "events": [
            request(1, 0, "q\"1\\\n\u{1}é", "m1", &[("k1", 8)], 40, 10),
            request(2, 1, "r2", "m2", &[], 7, 5),
            request(3, 2, "r3", "m3", &[], 3, 1),
            request(4, 3, "r4", "m1", &[("k1", 8)], 9, 4),
            request(5, 20, "r5", "m1", &[("k1", 8), ("k2", 6)], 34, 1),
        ],
    });
    serde_json::to_vec(&trace).expect("the trace serializes")
}

const POLICIES: [&str; 4] = [
    "round_robin",
    "least_load",
    "longest_prefix",
    "cache_plus_load",
];

/// N = 1 (a tick is 1 ms): start = t·10^6 ns, end = (done + d)·10^6 ns; TTFT
/// (done − t)·1000 µs: 10,000 → `10` (an integer keeps its zeros), 2,000 → `2`, 7,000 →
/// `7`; ITL floor(1000/(1·3)) = 333 → `0.333` on wA, floor(1000/(1·4)) = 250 → `0.25`
/// on wB (trailing zero removed). The id: `"` and `\` escaped, LF as `\n`, U+0001 as
/// `\u0001`, `é` as itself (RFC 8785 §3.2.2.2, §6.1).
const EXPECTED_N1: [&str; 4] = [
    r#"{"metadata":{"x_request_id":"q\"1\\\n\u0001é","request_start_ns":0,"request_end_ns":14000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":40,"unit":"tokens"},"time_to_first_token":{"value":10,"unit":"ms"},"inter_token_latency":{"value":0.333,"unit":"ms"},"output_sequence_length":{"value":10,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r2","request_start_ns":1000000,"request_end_ns":5000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":7,"unit":"tokens"},"time_to_first_token":{"value":2,"unit":"ms"},"inter_token_latency":{"value":0.25,"unit":"ms"},"output_sequence_length":{"value":5,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r4","request_start_ns":3000000,"request_end_ns":15000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":9,"unit":"tokens"},"time_to_first_token":{"value":10,"unit":"ms"},"inter_token_latency":{"value":0.333,"unit":"ms"},"output_sequence_length":{"value":4,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r5","request_start_ns":20000000,"request_end_ns":28000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":34,"unit":"tokens"},"time_to_first_token":{"value":7,"unit":"ms"},"inter_token_latency":{"value":0.333,"unit":"ms"},"output_sequence_length":{"value":1,"unit":"tokens"}},"error":null}"#,
];

/// N = 1000 (a tick is 1 µs): start = t·1000 ns, end = (done + d)·1000 ns; TTFT
/// (done − t) µs: 10 → `0.01` (trailing zero removed), 2 → `0.002`, 7 → `0.007`; ITL
/// floor(1000/3000) = floor(1000/4000) = 0 → `0`.
const EXPECTED_N1000: [&str; 4] = [
    r#"{"metadata":{"x_request_id":"q\"1\\\n\u0001é","request_start_ns":0,"request_end_ns":14000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":40,"unit":"tokens"},"time_to_first_token":{"value":0.01,"unit":"ms"},"inter_token_latency":{"value":0,"unit":"ms"},"output_sequence_length":{"value":10,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r2","request_start_ns":1000,"request_end_ns":5000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":7,"unit":"tokens"},"time_to_first_token":{"value":0.002,"unit":"ms"},"inter_token_latency":{"value":0,"unit":"ms"},"output_sequence_length":{"value":5,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r4","request_start_ns":3000,"request_end_ns":15000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":9,"unit":"tokens"},"time_to_first_token":{"value":0.01,"unit":"ms"},"inter_token_latency":{"value":0,"unit":"ms"},"output_sequence_length":{"value":4,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r5","request_start_ns":20000,"request_end_ns":28000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":34,"unit":"tokens"},"time_to_first_token":{"value":0.007,"unit":"ms"},"inter_token_latency":{"value":0,"unit":"ms"},"output_sequence_length":{"value":1,"unit":"tokens"}},"error":null}"#,
];

/// N = 7: start floor(t·10^6/7): 0, floor(1,000,000/7) = 142,857, floor(3,000,000/7) =
/// 428,571, floor(20,000,000/7) = 2,857,142; end floor(end·10^6/7): 14 → 2,000,000,
/// 5 → 714,285, 15 → 2,142,857, 28 → 4,000,000; TTFT floor((done − t)·1000/7) µs:
/// 10 → 1,428 (`1.428`), 2 → 285 (`0.285`), 7 → 1,000 (`1`: the fraction vanishes);
/// ITL floor(1000/21) = 47 (`0.047`) on wA, floor(1000/28) = 35 (`0.035`) on wB.
const EXPECTED_N7: [&str; 4] = [
    r#"{"metadata":{"x_request_id":"q\"1\\\n\u0001é","request_start_ns":0,"request_end_ns":2000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":40,"unit":"tokens"},"time_to_first_token":{"value":1.428,"unit":"ms"},"inter_token_latency":{"value":0.047,"unit":"ms"},"output_sequence_length":{"value":10,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r2","request_start_ns":142857,"request_end_ns":714285,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":7,"unit":"tokens"},"time_to_first_token":{"value":0.285,"unit":"ms"},"inter_token_latency":{"value":0.035,"unit":"ms"},"output_sequence_length":{"value":5,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r4","request_start_ns":428571,"request_end_ns":2142857,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":9,"unit":"tokens"},"time_to_first_token":{"value":1.428,"unit":"ms"},"inter_token_latency":{"value":0.047,"unit":"ms"},"output_sequence_length":{"value":4,"unit":"tokens"}},"error":null}"#,
    r#"{"metadata":{"x_request_id":"r5","request_start_ns":2857142,"request_end_ns":4000000,"was_cancelled":false},"metrics":{"input_sequence_length":{"value":34,"unit":"tokens"},"time_to_first_token":{"value":1,"unit":"ms"},"inter_token_latency":{"value":0.047,"unit":"ms"},"output_sequence_length":{"value":1,"unit":"tokens"}},"error":null}"#,
];

fn file_of(lines: &[&str]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    bytes
}

fn assert_files(ticks_per_ms: u64, expected: &[&str]) {
    let files = simulate_completions(&tiny_trace(), &SimOptions::default(), ticks_per_ms)
        .unwrap_or_else(|e| panic!("simulate failed: {e}"));
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, POLICIES, "one file per policy, in receipt order");
    let want = file_of(expected);
    for (policy, bytes) in &files {
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&want),
            "{policy} at --ticks-per-ms {ticks_per_ms}"
        );
        assert_eq!(bytes, &want, "{policy}: byte for byte");
    }
}

#[test]
fn one_tick_per_ms() {
    assert_files(1, &EXPECTED_N1);
}

#[test]
fn a_thousand_ticks_per_ms() {
    assert_files(1000, &EXPECTED_N1000);
}

#[test]
fn seven_ticks_per_ms() {
    assert_files(7, &EXPECTED_N7);
}

/// The records in ticks, as the engine model gave them (see [`tiny_trace`]).
#[test]
fn records_in_ticks() {
    let (outcome, completions) =
        simulate_with_completions(&tiny_trace(), &SimOptions::default()).expect("simulates");
    let plain = simulate(&tiny_trace(), &SimOptions::default()).expect("simulates");
    assert_eq!(outcome.result, plain.result, "simulate is unchanged");
    assert_eq!(outcome.generated_traces, plain.generated_traces);
    let record = |request: &str, worker: &str, t, done, prompt, decode, rate| CompletionRecord {
        request: request.to_owned(),
        worker: worker.to_owned(),
        arrival_tick: t,
        prefill_done_tick: done,
        prompt_tokens: prompt,
        decode_tokens: decode,
        decode_rate: rate,
    };
    let want = vec![
        record("q\"1\\\n\u{1}é", "wA", 0, 10, 40, 10, 3),
        record("r2", "wB", 1, 3, 7, 5, 4),
        record("r4", "wA", 3, 13, 9, 4, 3),
        record("r5", "wA", 20, 27, 34, 1, 3),
    ];
    assert_eq!(completions.runs.len(), 4);
    for ((policy, records), name) in completions.runs.iter().zip(POLICIES) {
        assert_eq!(policy, name);
        assert_eq!(records, &want, "{policy}");
    }
}

/// §14.4's closing promise: the receipt of `<policy>.trace.json` joined with
/// `<policy>.completions.jsonl` under `--run <policy>` matches every routed decision, and
/// the join reads back the microseconds written. At N = 7 the TTFTs are wA 1,428, 1,428,
/// 1,000 (mean floor(3,856/3) = 1,285) and wB 285; the TPOTs 47 and 35.
#[test]
fn the_join_matches_every_routed_decision() {
    let (outcome, completions) =
        simulate_with_completions(&tiny_trace(), &SimOptions::default()).expect("simulates");
    let files = completions.jsonl(7).expect("N = 7 is allowed");
    for ((policy, trace), (file_policy, lines)) in outcome.generated_traces.iter().zip(&files) {
        assert_eq!(policy, file_policy);
        let receipt = kvroute_oracle::replay(trace).expect("the generated trace replays");
        let joined = join(&receipt, lines, policy, None, None)
            .unwrap_or_else(|_| panic!("{policy}: the join fails"));
        let joined: Value = serde_json::from_slice(&joined).expect("join json");
        let counts = &joined["counts"];
        assert_eq!(counts["decisions"], 5, "{policy}");
        assert_eq!(counts["routed"], 4, "{policy}");
        assert_eq!(counts["rejected"], 1, "{policy}");
        assert_eq!(counts["matched"], 4, "{policy}");
        assert_eq!(counts["completed"], 4, "{policy}");
        assert_eq!(counts["dropped"], 0, "{policy}");
        assert_eq!(counts["unrouted"], 0, "{policy}");
        assert_eq!(counts["rejected_served"], 0, "{policy}");
        let workers = joined["workers"].as_array().expect("workers");
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0]["worker"], "wA");
        assert_eq!(workers[0]["completed"], 3);
        assert_eq!(workers[0]["ttft_mean_us"], 1285);
        assert_eq!(workers[0]["tpot_mean_us"], 47);
        assert_eq!(workers[1]["worker"], "wB");
        assert_eq!(workers[1]["ttft_mean_us"], 285);
        assert_eq!(workers[1]["tpot_mean_us"], 35);
    }
}

/// SPEC §14.4's examples and the edges of the trailing-zero rule.
#[test]
fn milliseconds_as_exact_decimals() {
    for (us, ms) in [
        (12_345, "12.345"),
        (12_300, "12.3"),
        (12_000, "12"),
        (1, "0.001"),
        (0, "0"),
        (10, "0.01"),
        (100, "0.1"),
        (1_010, "1.01"),
        (120_000, "120"),
        (u128::from(u64::MAX), "18446744073709551.615"),
    ] {
        assert_eq!(ms_decimal(us), ms, "{us} µs");
    }
}

/// A record whose prefill took 0 ticks (everything reused, or nothing to prefill):
/// TTFT 0 → `0`; no decode tokens: d = 0, so the end is the prefill's completion; and
/// the largest N with a fast worker: ITL floor(1000/(10^6·5)) = 0. Ticks near `B`
/// (2^53 − 1) at N = 10^6 are exact: floor(B·10^6/10^6) = B.
#[test]
fn single_lines_at_the_edges() {
    let record = CompletionRecord {
        request: "x".to_owned(),
        worker: "w".to_owned(),
        arrival_tick: 9_007_199_254_740_991,
        prefill_done_tick: 9_007_199_254_740_991,
        prompt_tokens: 0,
        decode_tokens: 0,
        decode_rate: 5,
    };
    assert_eq!(
        String::from_utf8(completion_line(&record, TICKS_PER_MS_MAX)).unwrap(),
        "{\"metadata\":{\"x_request_id\":\"x\",\"request_start_ns\":9007199254740991,\
         \"request_end_ns\":9007199254740991,\"was_cancelled\":false},\"metrics\":{\
         \"input_sequence_length\":{\"value\":0,\"unit\":\"tokens\"},\
         \"time_to_first_token\":{\"value\":0,\"unit\":\"ms\"},\
         \"inter_token_latency\":{\"value\":0,\"unit\":\"ms\"},\
         \"output_sequence_length\":{\"value\":0,\"unit\":\"tokens\"}},\"error\":null}\n"
    );
    // N = 1 with B ticks: B·10^6 = 9,007,199,254,740,991,000,000 ns passes 10^19 − 1, so
    // both figures are written as 9,999,999,999,999,999,999 (§14.4).
    let line = String::from_utf8(completion_line(&record, 1)).unwrap();
    assert!(
        line.contains(
            "\"request_start_ns\":9999999999999999999,\"request_end_ns\":9999999999999999999,"
        ),
        "{line}"
    );
}

/// §14.4: a nanosecond figure whose exact value would pass 10^19 − 1 is written as
/// 10^19 − 1; one at or below it is exact. At N = 1, t = done = 9,999,999,999,999 ticks:
/// start = 9,999,999,999,999·10^6 = 9,999,999,999,999,000,000 ns, just below the bound,
/// exact. `decode_tokens` 3 at rate 3: d = 1, end = 10^13·10^6 = 10^19, one past the
/// bound, written as 9,999,999,999,999,999,999. TTFT 0 → `0`; ITL floor(1000/3) = 333 →
/// `0.333`. With no decode tokens (d = 0) the end is the start, exact, and the ITL is
/// the same formula, `0.333`. At N = 1,000,000 with t = 9,999,999,999,999,999,999 ticks
/// the figures are exactly 10^19 − 1, the bound itself, exact (ITL floor(1000/(3·10^6))
/// = 0 → `0`).
#[test]
fn nanoseconds_saturate_at_ten_to_the_nineteen_minus_one() {
    let line = |t: u64, decode: u64, n: u64| {
        let record = CompletionRecord {
            request: "s".to_owned(),
            worker: "w".to_owned(),
            arrival_tick: t,
            prefill_done_tick: t,
            prompt_tokens: 1,
            decode_tokens: decode,
            decode_rate: 3,
        };
        String::from_utf8(completion_line(&record, n)).unwrap()
    };
    let expected = |start: &str, end: &str, itl: &str, decode: u64| {
        format!(
            "{{\"metadata\":{{\"x_request_id\":\"s\",\"request_start_ns\":{start},\
             \"request_end_ns\":{end},\"was_cancelled\":false}},\"metrics\":{{\
             \"input_sequence_length\":{{\"value\":1,\"unit\":\"tokens\"}},\
             \"time_to_first_token\":{{\"value\":0,\"unit\":\"ms\"}},\
             \"inter_token_latency\":{{\"value\":{itl},\"unit\":\"ms\"}},\
             \"output_sequence_length\":{{\"value\":{decode},\"unit\":\"tokens\"}}}},\
             \"error\":null}}\n"
        )
    };
    assert_eq!(
        line(9_999_999_999_999, 3, 1),
        expected("9999999999999000000", "9999999999999999999", "0.333", 3)
    );
    assert_eq!(
        line(9_999_999_999_999, 0, 1),
        expected("9999999999999000000", "9999999999999000000", "0.333", 0)
    );
    assert_eq!(
        line(9_999_999_999_999_999_999, 0, TICKS_PER_MS_MAX),
        expected("9999999999999999999", "9999999999999999999", "0", 0)
    );
}

#[test]
fn ticks_per_ms_out_of_range() {
    let (_, completions) =
        simulate_with_completions(&tiny_trace(), &SimOptions::default()).expect("simulates");
    for n in [0, TICKS_PER_MS_MAX + 1] {
        assert_eq!(
            completions.jsonl(n).unwrap_err(),
            format!("kvroute simulate: --ticks-per-ms {n}: expected an integer from 1 to 1000000")
        );
    }
    assert!(completions.jsonl(TICKS_PER_MS_MAX).is_ok());
}
