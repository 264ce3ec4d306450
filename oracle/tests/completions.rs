//! SPEC §14.4 (`simulate --completions-out DIR [--ticks-per-ms N]`): the AIPerf completion
//! records of each policy's closed loop, through the public API, on a trace small enough
//! that every line is computed by hand from SPEC §11 *Prefill* and §14.4 below; then
//! Dynamo's layout (§14.4.1) on the same trace under Dynamo worker names, the names it
//! refuses, `--worker-names dynamo`, and its `cached_tokens` against §11.1's `phantom`
//! and `missed`.

use serde_json::{json, Value};

use kvroute_oracle::simulate::{
    completion_line, dynamo_line, dynamo_worker_numbers, ms_decimal, DYNAMO_MS_MAX,
    TICKS_PER_MS_MAX,
};
use kvroute_oracle::{
    join, join_inputs, replay, simulate, simulate_completions, simulate_with_completions,
    CompletionRecord, JoinInputs, SimCache, SimLayout, SimOptions, SimWorkerNames,
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
    tiny_trace_named("wA", "wB")
}

/// [`tiny_trace`] with its two workers named `a` and `b` (`a` before `b` in byte order,
/// so that every figure stays the same).
fn tiny_trace_named(a: &str, b: &str) -> Vec<u8> {
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
        "workers": [worker(a, "m1", 4, 3), worker(b, "m2", 5, 4)],
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

/// One file per policy, in receipt order, each holding `expected`'s lines.
fn assert_every_policy_writes(files: &[(String, Vec<u8>)], expected: &[&str], ticks_per_ms: u64) {
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, POLICIES, "one file per policy, in receipt order");
    let want = file_of(expected);
    for (policy, bytes) in files {
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&want),
            "{policy} at --ticks-per-ms {ticks_per_ms}"
        );
        assert_eq!(bytes, &want, "{policy}: byte for byte");
    }
}

fn assert_files(ticks_per_ms: u64, expected: &[&str]) {
    let files = simulate_completions(&tiny_trace(), &SimOptions::default(), ticks_per_ms)
        .unwrap_or_else(|e| panic!("simulate failed: {e}"));
    assert_every_policy_writes(&files, expected, ticks_per_ms);
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
    let record =
        |request: &str, worker: &str, t, done, prompt, decode, rate, held| CompletionRecord {
            request: request.to_owned(),
            worker: worker.to_owned(),
            arrival_tick: t,
            prefill_done_tick: done,
            prompt_tokens: prompt,
            decode_tokens: decode,
            decode_rate: rate,
            held,
        };
    // `held` is 0 but for `r5`, which finds k1:8 on wA (see `tiny_trace`).
    let want = vec![
        record("q\"1\\\n\u{1}é", "wA", 0, 10, 40, 10, 3, 0),
        record("r2", "wB", 1, 3, 7, 5, 4, 0),
        record("r4", "wA", 3, 13, 9, 4, 3, 0),
        record("r5", "wA", 20, 27, 34, 1, 3, 8),
    ];
    assert_eq!(
        completions.workers,
        ["wA", "wB"],
        "every worker, in id order"
    );
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
        held: 0,
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
            held: 1,
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

// ---------------------------------------------------------------------------------
// Dynamo's layout (SPEC §14.4.1)

/// [`tiny_trace`]'s workers under Dynamo names: `wA` is `dynamo|12|dp3` and `wB`
/// `dynamo|4|dp0` (`1` sorts before `4`, so `wA` stays first and every figure of
/// [`tiny_trace`] holds).
fn dynamo_trace() -> Vec<u8> {
    tiny_trace_named("dynamo|12|dp3", "dynamo|4|dp0")
}

/// N = 1, from [`tiny_trace`]'s figures (t, done, end = done + d, held): `r1` 0, 10, 14,
/// 0; `r2` 1, 3, 5, 0; `r4` 3, 13, 15, 0; `r5` 20, 27, 28, 8. `timestamp` = end,
/// `request_received_ms` = t; TTFT (done − t)·1000 µs: `10`, `2`, `10`, `7`; ITL
/// floor(1000/3) = 333 → `0.333` on `dynamo|12|dp3` (I 12, R 3), floor(1000/4) = 250 →
/// `0.25` on `dynamo|4|dp0` (I 4, R 0); TOTAL (end − t)·1000 µs: 14,000 → `14`, 4,000 →
/// `4`, 12,000 → `12`, 8,000 → `8`. The id is written in both members as §6.1 writes it.
const DYNAMO_N1: [&str; 4] = [
    r#"{"timestamp":14,"event":{"event_type":"request_end","request":{"request_id":"q\"1\\\n\u0001é","x_request_id":"q\"1\\\n\u0001é","request_received_ms":0,"ttft_ms":10,"avg_itl_ms":0.333,"total_time_ms":14,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":5,"event":{"event_type":"request_end","request":{"request_id":"r2","x_request_id":"r2","request_received_ms":1,"ttft_ms":2,"avg_itl_ms":0.25,"total_time_ms":4,"cached_tokens":0,"worker":{"prefill_worker_id":4,"prefill_dp_rank":0}}}}"#,
    r#"{"timestamp":15,"event":{"event_type":"request_end","request":{"request_id":"r4","x_request_id":"r4","request_received_ms":3,"ttft_ms":10,"avg_itl_ms":0.333,"total_time_ms":12,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":28,"event":{"event_type":"request_end","request":{"request_id":"r5","x_request_id":"r5","request_received_ms":20,"ttft_ms":7,"avg_itl_ms":0.333,"total_time_ms":8,"cached_tokens":8,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
];

/// N = 1000 (a tick is 1 µs): `timestamp` floor(end/1000) and `request_received_ms`
/// floor(t/1000) are 0 throughout; TTFT (done − t) µs: 10 → `0.01`, 2 → `0.002`, 7 →
/// `0.007`; ITL floor(1000/3000) = floor(1000/4000) = 0 → `0`; TOTAL (end − t) µs: 14 →
/// `0.014`, 4 → `0.004`, 12 → `0.012`, 8 → `0.008`.
const DYNAMO_N1000: [&str; 4] = [
    r#"{"timestamp":0,"event":{"event_type":"request_end","request":{"request_id":"q\"1\\\n\u0001é","x_request_id":"q\"1\\\n\u0001é","request_received_ms":0,"ttft_ms":0.01,"avg_itl_ms":0,"total_time_ms":0.014,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":0,"event":{"event_type":"request_end","request":{"request_id":"r2","x_request_id":"r2","request_received_ms":0,"ttft_ms":0.002,"avg_itl_ms":0,"total_time_ms":0.004,"cached_tokens":0,"worker":{"prefill_worker_id":4,"prefill_dp_rank":0}}}}"#,
    r#"{"timestamp":0,"event":{"event_type":"request_end","request":{"request_id":"r4","x_request_id":"r4","request_received_ms":0,"ttft_ms":0.01,"avg_itl_ms":0,"total_time_ms":0.012,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":0,"event":{"event_type":"request_end","request":{"request_id":"r5","x_request_id":"r5","request_received_ms":0,"ttft_ms":0.007,"avg_itl_ms":0,"total_time_ms":0.008,"cached_tokens":8,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
];

/// N = 7, where every floor bites: `timestamp` floor(end/7): 14 → 2, 5 → 0, 15 → 2,
/// 28 → 4; `request_received_ms` floor(t/7): 0, 0, 0, 2; TTFT floor((done − t)·1000/7)
/// µs: 10 → 1,428 (`1.428`), 2 → 285 (`0.285`), 7 → 1,000 (`1`); ITL floor(1000/21) =
/// 47 (`0.047`), floor(1000/28) = 35 (`0.035`); TOTAL floor((end − t)·1000/7) µs: 14 →
/// 2,000 (`2`), 4 → 571 (`0.571`), 12 → 1,714 (`1.714`), 8 → 1,142 (`1.142`).
const DYNAMO_N7: [&str; 4] = [
    r#"{"timestamp":2,"event":{"event_type":"request_end","request":{"request_id":"q\"1\\\n\u0001é","x_request_id":"q\"1\\\n\u0001é","request_received_ms":0,"ttft_ms":1.428,"avg_itl_ms":0.047,"total_time_ms":2,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":0,"event":{"event_type":"request_end","request":{"request_id":"r2","x_request_id":"r2","request_received_ms":0,"ttft_ms":0.285,"avg_itl_ms":0.035,"total_time_ms":0.571,"cached_tokens":0,"worker":{"prefill_worker_id":4,"prefill_dp_rank":0}}}}"#,
    r#"{"timestamp":2,"event":{"event_type":"request_end","request":{"request_id":"r4","x_request_id":"r4","request_received_ms":0,"ttft_ms":1.428,"avg_itl_ms":0.047,"total_time_ms":1.714,"cached_tokens":0,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
    r#"{"timestamp":4,"event":{"event_type":"request_end","request":{"request_id":"r5","x_request_id":"r5","request_received_ms":2,"ttft_ms":1,"avg_itl_ms":0.047,"total_time_ms":1.142,"cached_tokens":8,"worker":{"prefill_worker_id":12,"prefill_dp_rank":3}}}}"#,
];

fn assert_dynamo_files(ticks_per_ms: u64, expected: &[&str]) {
    let (_, completions) =
        simulate_with_completions(&dynamo_trace(), &SimOptions::default()).expect("simulates");
    let files = completions
        .jsonl_in(ticks_per_ms, SimLayout::Dynamo)
        .unwrap_or_else(|e| panic!("the Dynamo layout is refused: {e}"));
    assert_every_policy_writes(&files, expected, ticks_per_ms);
}

#[test]
fn dynamo_one_tick_per_ms() {
    assert_dynamo_files(1, &DYNAMO_N1);
}

#[test]
fn dynamo_a_thousand_ticks_per_ms() {
    assert_dynamo_files(1000, &DYNAMO_N1000);
}

#[test]
fn dynamo_seven_ticks_per_ms() {
    assert_dynamo_files(7, &DYNAMO_N7);
}

/// `jsonl` is the AIPerf layout, and the AIPerf layout takes any worker name: the
/// Dynamo-named trace writes [`EXPECTED_N1`] (AIPerf's record names no worker).
#[test]
fn aiperf_is_the_default_layout_and_takes_any_name() {
    let (_, plain) =
        simulate_with_completions(&tiny_trace(), &SimOptions::default()).expect("simulates");
    assert_eq!(plain.jsonl(1), plain.jsonl_in(1, SimLayout::Aiperf));
    let (_, named) =
        simulate_with_completions(&dynamo_trace(), &SimOptions::default()).expect("simulates");
    for (policy, bytes) in named.jsonl_in(1, SimLayout::Aiperf).expect("aiperf") {
        assert_eq!(bytes, file_of(&EXPECTED_N1), "{policy}");
    }
}

/// The refusal's wording, with the id quoted as §2.2 quotes a string.
fn refusal(quoted: &str) -> String {
    format!(
        "kvroute simulate: --completions-format dynamo: worker {quoted} is not named \
         dynamo|<worker_id>|dp<rank>, so a Dynamo record cannot name it (give --workers N \
         --worker-names dynamo)"
    )
}

/// Every worker of the simulated trace must carry a Dynamo name, served or not; the
/// first one that does not, in id byte order, is named. In the first trace `wB` (model
/// m2) serves `r2`; in the second it is renamed `dynamo|x|dp0` and given a model no
/// request asks for, so it serves nothing and is still refused. The third has two bad
/// names: `c"é` + 45 `x` sorts first (`c` before `d`), and its quote is cut at 40
/// characters: `"`, `c`, `\`, `"`, `é` and 35 `x`, then `...`. `--ticks-per-ms` is
/// judged first.
#[test]
fn dynamo_refuses_a_worker_it_cannot_name() {
    let refused = |trace: &[u8]| {
        let (_, completions) =
            simulate_with_completions(trace, &SimOptions::default()).expect("simulates");
        assert_eq!(
            completions.jsonl_in(0, SimLayout::Dynamo).unwrap_err(),
            "kvroute simulate: --ticks-per-ms 0: expected an integer from 1 to 1000000"
        );
        completions.jsonl_in(1, SimLayout::Dynamo).unwrap_err()
    };
    assert_eq!(
        refused(&tiny_trace_named("dynamo|12|dp3", "wB")),
        refusal("\"wB\"")
    );

    let idle: Value = serde_json::from_slice(&tiny_trace_named("dynamo|12|dp3", "dynamo|x|dp0"))
        .expect("the trace is JSON");
    let mut idle = idle;
    idle["workers"][1]["model"] = json!("m9");
    let idle = serde_json::to_vec(&idle).expect("serializes");
    let (_, completions) =
        simulate_with_completions(&idle, &SimOptions::default()).expect("simulates");
    for (_, records) in &completions.runs {
        assert!(records.iter().all(|r| r.worker == "dynamo|12|dp3"));
    }
    assert_eq!(refused(&idle), refusal("\"dynamo|x|dp0\""));

    let long = format!("c\"é{}", "x".repeat(45));
    assert_eq!(
        refused(&tiny_trace_named(&long, "wB")),
        refusal(&format!("\"c\\\"é{}...", "x".repeat(35)))
    );
}

/// §14.4.1's rule for a name, digit by digit: decimal without a leading zero, `I` to
/// 2^64 − 1, `R` to 2^32 − 1, nothing before, between or after.
#[test]
fn dynamo_worker_names_and_their_numbers() {
    for (id, numbers) in [
        ("dynamo|0|dp0", (0, 0)),
        ("dynamo|12|dp3", (12, 3)),
        ("dynamo|10|dp0", (10, 0)),
        (
            "dynamo|18446744073709551615|dp4294967295",
            (u64::MAX, u32::MAX),
        ),
    ] {
        assert_eq!(dynamo_worker_numbers(id), Some(numbers), "{id}");
    }
    for id in [
        "dynamo|18446744073709551616|dp0",
        "dynamo|0|dp4294967296",
        "dynamo|01|dp0",
        "dynamo|0|dp00",
        "dynamo|00|dp0",
        "dynamo|+1|dp0",
        "dynamo|-0|dp0",
        "dynamo||dp0",
        "dynamo|0|dp",
        "dynamo|0|dp+1",
        "dynamo|0|dp0|",
        "dynamo|0|dp0 ",
        "dynamo|0|0",
        "dynamo|0|DP0",
        "Dynamo|0|dp0",
        "dynamo|0",
        "dynamo|1|2|dp0",
        "dynamo|\u{663}|dp0",
        "xdynamo|0|dp0",
        "w0",
    ] {
        assert_eq!(dynamo_worker_numbers(id), None, "{id}");
    }
}

/// §14.4.1's caps: `timestamp` and `request_received_ms` are at most 9,999,999,999,999;
/// the µs figures are exact. At N = 1, t = done = 9,999,999,999,999 ticks with 3 decode
/// tokens at rate 3 (d = 1): received = t exactly (the cap itself), timestamp t + 1 =
/// 10^13, written as the cap; TTFT 0, ITL 333 → `0.333`, TOTAL 1,000 µs → `1`. At
/// t = 2^64 − 1 (a tick no trace holds, the record's own range) and N = 1 both are
/// written as the cap, and TOTAL (d = 1) is still `1`. The largest worker numbers are
/// written as they are.
#[test]
fn dynamo_milliseconds_are_capped() {
    let record = |t: u64| CompletionRecord {
        request: "s".to_owned(),
        worker: "dynamo|18446744073709551615|dp4294967295".to_owned(),
        arrival_tick: t,
        prefill_done_tick: t,
        prompt_tokens: 5,
        decode_tokens: 3,
        decode_rate: 3,
        held: 5,
    };
    let expected = |timestamp: &str, received: &str| {
        format!(
            "{{\"timestamp\":{timestamp},\"event\":{{\"event_type\":\"request_end\",\
             \"request\":{{\"request_id\":\"s\",\"x_request_id\":\"s\",\
             \"request_received_ms\":{received},\"ttft_ms\":0,\"avg_itl_ms\":0.333,\
             \"total_time_ms\":1,\"cached_tokens\":5,\"worker\":{{\
             \"prefill_worker_id\":18446744073709551615,\"prefill_dp_rank\":4294967295}}}}}}}}\n"
        )
    };
    let line =
        |t: u64| String::from_utf8(dynamo_line(&record(t), 1, u64::MAX, u32::MAX)).expect("UTF-8");
    assert_eq!(DYNAMO_MS_MAX, 9_999_999_999_999);
    assert_eq!(
        line(9_999_999_999_998),
        expected("9999999999999", "9999999999998")
    );
    assert_eq!(
        line(9_999_999_999_999),
        expected("9999999999999", "9999999999999")
    );
    assert_eq!(line(u64::MAX), expected("9999999999999", "9999999999999"));
    // N = 10^6, t = 10^6 · 9,999,999,999,999 ticks: exactly the cap again, TOTAL
    // floor(1·1000/10^6) = 0 µs and ITL floor(1000/(3·10^6)) = 0.
    let big = String::from_utf8(dynamo_line(
        &record(9_999_999_999_999_000_000),
        TICKS_PER_MS_MAX,
        0,
        0,
    ))
    .expect("UTF-8");
    assert!(
        big.starts_with("{\"timestamp\":9999999999999,")
            && big.contains("\"request_received_ms\":9999999999999,\"ttft_ms\":0,\"avg_itl_ms\":0,\"total_time_ms\":0,"),
        "{big}"
    );
}

/// `--worker-names dynamo`: `--workers 12` names its copies `dynamo|0|dp0` …
/// `dynamo|11|dp0`, and byte order puts `dynamo|10|dp0` and `dynamo|11|dp0` before
/// `dynamo|1|dp0` (`0` is 0x30, `|` 0x7C), as SPEC's `dynamo|10|dp0` before
/// `dynamo|2|dp0`. Round robin (§5) walks the workers in that order; the copies serve
/// model m1 only, so of [`tiny_trace`]'s requests `r1`, `r4` and `r5` are routed (a
/// rejected one leaves the cursor), to `dynamo|0|dp0`, `dynamo|10|dp0` and
/// `dynamo|11|dp0`. Without `--workers` the option is refused, before the trace is
/// read.
#[test]
fn worker_names_dynamo_names_the_copies() {
    let options = SimOptions {
        workers: Some(12),
        worker_names: SimWorkerNames::Dynamo,
        ..SimOptions::default()
    };
    let (outcome, completions) =
        simulate_with_completions(&tiny_trace(), &options).expect("simulates");
    let mut want: Vec<String> = (0..12).map(|i| format!("dynamo|{i}|dp0")).collect();
    want.sort();
    assert_eq!(
        &want[..5],
        [
            "dynamo|0|dp0",
            "dynamo|10|dp0",
            "dynamo|11|dp0",
            "dynamo|1|dp0",
            "dynamo|2|dp0"
        ]
    );
    assert_eq!(completions.workers, want);
    let generated: Value =
        serde_json::from_slice(&outcome.generated_traces[0].1).expect("the trace is JSON");
    let ids: Vec<&str> = generated["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["id"].as_str().expect("an id"))
        .collect();
    assert_eq!(ids, want, "the simulated trace's workers");
    let (policy, records) = &completions.runs[0];
    assert_eq!(policy, "round_robin");
    let served: Vec<&str> = records.iter().map(|r| r.worker.as_str()).collect();
    assert_eq!(served, ["dynamo|0|dp0", "dynamo|10|dp0", "dynamo|11|dp0"]);
    assert!(completions.jsonl_in(1, SimLayout::Dynamo).is_ok());
    let plain = simulate(
        &tiny_trace(),
        &SimOptions {
            workers: Some(12),
            ..SimOptions::default()
        },
    )
    .expect("simulates");
    assert_ne!(
        plain.result, outcome.result,
        "the names enter the trace digest"
    );

    let unnamed = SimOptions {
        worker_names: SimWorkerNames::Dynamo,
        ..SimOptions::default()
    };
    let error = simulate(b"not JSON", &unnamed).unwrap_err();
    assert!(
        error.starts_with("kvroute simulate: --worker-names dynamo:")
            && error.contains("--workers"),
        "{error}"
    );
}

/// A trace whose closed loop gets the router's view wrong both ways: one worker `w`
/// (copied by `--workers`), 60 requests two ticks apart, each a chain of 16-token
/// blocks from one of three families (`a`, `b`, `c`, 1 to 4 blocks long, chosen by a
/// fixed linear congruential sequence), 10 tokens past its prefix.
fn churning_trace() -> Vec<u8> {
    let mut state: u64 = 12_345;
    let mut next = |m: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) % m
    };
    let events: Vec<Value> = (0..60u64)
        .map(|i| {
            let family = ["a", "b", "c"][next(3) as usize];
            let blocks = 1 + next(4);
            let prefix: Vec<Value> = (0..blocks)
                .map(|b| json!({ "key": format!("{family}{b}"), "tokens": 16 }))
                .collect();
            json!({
                "seq": i + 1, "tick": 2 * i, "type": "request", "id": format!("q{i}"),
                "tenant": "t", "model": "m", "adapter": "base", "prefix": prefix,
                "prompt_tokens": 16 * blocks + 10, "decode_tokens": 5,
            })
        })
        .collect();
    serde_json::to_vec(&json!({
        "format": "kvroute-trace/1",
        "workers": [{
            "id": "w", "model": "m", "adapters": [], "prefill_rate": 4, "decode_rate": 2,
            "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0,
            "cache": [],
        }],
        "events": events,
    }))
    .expect("the trace serializes")
}

/// The chosen row's `reuse` of every routed decision of the receipt's run `policy`
/// (0 on a `stale_view` or `evidence_gap` row, as the receipt writes it): request id →
/// (chosen worker, reuse).
fn router_reuse(receipt: &Value, policy: &str) -> Vec<(String, String, u64)> {
    let run = receipt["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|run| run["policy"] == policy)
        .expect("the run");
    let mut chosen = Vec::new();
    for decision in run["decisions"].as_array().expect("decisions") {
        let Some(worker) = decision["chosen"].as_str() else {
            continue;
        };
        let row = decision["candidates"]
            .as_array()
            .expect("candidates")
            .iter()
            .find(|row| row["worker"] == worker)
            .expect("the chosen row");
        let request = decision["request"].as_str().expect("an id").to_owned();
        chosen.push((
            request,
            worker.to_owned(),
            row["reuse"].as_u64().expect("reuse"),
        ));
    }
    chosen
}

/// §14.4 and §11.1: the Dynamo records' `cached_tokens` is the engine's `held`, so
/// against the router's `reuse` on the chosen row (read from the oracle's own receipt
/// of the policy's generated trace) Σ max(0, reuse − cached) is the simulate document's
/// `phantom` and Σ max(0, cached − reuse) its `missed`, policy by policy, with lag,
/// jitter, loss and evictions; every record names the chosen worker; and `join
/// --completions-format dynamo` attributes every routed decision with the same sums.
/// The trace is made so that both figures are above 0 in some run.
#[test]
fn dynamo_cached_tokens_give_phantom_and_missed() {
    let options = SimOptions {
        workers: Some(3),
        worker_names: SimWorkerNames::Dynamo,
        cache: SimCache::Tokens(48),
        lag_ticks: 6,
        jitter_ticks: 4,
        seed: 7,
        loss_per_mille: 150,
        ..SimOptions::default()
    };
    let (outcome, completions) =
        simulate_with_completions(&churning_trace(), &options).expect("simulates");
    let document: Value = serde_json::from_slice(&outcome.result).expect("the document");
    let files = completions
        .jsonl_in(1, SimLayout::Dynamo)
        .expect("Dynamo names");
    let (mut any_phantom, mut any_missed) = (false, false);
    for (i, (policy, lines)) in files.iter().enumerate() {
        let receipt = replay(&outcome.generated_traces[i].1).expect("the generated trace replays");
        let chosen = router_reuse(&serde_json::from_slice(&receipt).expect("receipt"), policy);
        let records: Vec<Value> = lines
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).expect("a record line"))
            .collect();
        assert_eq!(
            records.len(),
            chosen.len(),
            "{policy}: one record per routed decision"
        );
        let (mut phantom, mut missed) = (0u64, 0u64);
        for (record, (request, worker, reuse)) in records.iter().zip(&chosen) {
            let r = &record["event"]["request"];
            assert_eq!(
                r["x_request_id"],
                request.as_str(),
                "{policy}: routing order"
            );
            let named = format!(
                "dynamo|{}|dp{}",
                r["worker"]["prefill_worker_id"], r["worker"]["prefill_dp_rank"]
            );
            assert_eq!(&named, worker, "{policy} {request}: served where chosen");
            let cached = r["cached_tokens"].as_u64().expect("cached_tokens");
            phantom += reuse.saturating_sub(cached);
            missed += cached.saturating_sub(*reuse);
        }
        let run = &document["runs"][i];
        assert_eq!(run["policy"], policy.as_str());
        assert_eq!(run["phantom"], phantom, "{policy}: Σ phantom");
        assert_eq!(run["missed"], missed, "{policy}: Σ missed");
        any_phantom |= phantom > 0;
        any_missed |= missed > 0;

        let joined = join_inputs(&JoinInputs {
            receipt: &receipt,
            completions: lines,
            format: Some("dynamo"),
            run: policy,
            slo: None,
            id_key: None,
            trace: None,
        })
        .unwrap_or_else(|_| panic!("{policy}: the join fails"));
        let joined: Value = serde_json::from_slice(&joined).expect("join json");
        let attribution = &joined["attribution"];
        assert_eq!(attribution["attributed"], chosen.len(), "{policy}");
        assert_eq!(attribution["unknown"], 0, "{policy}");
        assert_eq!(attribution["phantom"], phantom, "{policy}");
        assert_eq!(attribution["missed"], missed, "{policy}");
        assert_eq!(attribution["served_elsewhere"], 0, "{policy}");
    }
    assert!(
        any_phantom && any_missed,
        "the trace exercises both figures"
    );
}
