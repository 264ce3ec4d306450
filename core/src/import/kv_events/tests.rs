//! The engine-event import on hand-built captures: both layouts, both hash forms, the
//! sequence rules and every counted or rejected case of SPEC.md §13.4 and §13.5.

use super::*;
use crate::import::shared::chained_key;
use crate::input::trace::{CacheOp, EventKind};
use base64::Engine as _;
use rmpv::Value;

fn s(text: &str) -> Value {
    Value::from(text)
}

fn ints(values: &[u64]) -> Value {
    Value::Array(values.iter().map(|&v| Value::from(v)).collect())
}

fn map(members: Vec<(&str, Value)>) -> Value {
    Value::Map(members.into_iter().map(|(k, v)| (s(k), v)).collect())
}

/// A capture line for one message of `value` from `tcp://e:1` with `topic` `t`.
fn line(seq: u64, value: &Value) -> String {
    let mut payload = Vec::new();
    rmpv::encode::write_value(&mut payload, value).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(payload);
    format!(r#"{{"endpoint":"tcp://e:1","topic":"t","seq":{seq},"payload_b64":"{encoded}"}}"#)
}

/// A positional batch at `ts` seconds.
fn batch(ts: f64, events: Vec<Value>) -> Value {
    Value::Array(vec![Value::F64(ts), Value::Array(events)])
}

fn stored_array(hashes: &[u64], parent: Option<u64>, tokens: &[u64]) -> Value {
    Value::Array(vec![
        s("BlockStored"),
        ints(hashes),
        parent.map_or(Value::Nil, Value::from),
        ints(tokens),
        Value::from(2),
        Value::Nil,
        s("GPU"),
    ])
}

fn options() -> EventsOptions {
    EventsOptions {
        block_tokens: 2,
        tenant: "default".to_owned(),
        model: None,
        ..EventsOptions::default()
    }
}

const REQUEST: &str =
    r#"{"arrival_ms":1000,"id":"r1","model":"m","token_ids":[1,2,3,4,5],"output_tokens":3}"#;

fn import(
    capture: &[String],
    requests: &str,
) -> Result<(Trace, ImportReport), Vec<EventsImportError>> {
    let capture = capture.join("\n");
    import_engine_events(capture.as_bytes(), requests.as_bytes(), &options())
}

fn cache_ops(trace: &Trace) -> Vec<(u64, u64, String)> {
    trace
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Cache { epoch, op, .. } => {
                let what = match op {
                    CacheOp::Store { segments, .. } => format!(
                        "store {}",
                        segments
                            .iter()
                            .map(|s| &*s.key)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    CacheOp::Evict { keys, .. } => format!(
                        "evict {}",
                        keys.iter().map(|k| &**k).collect::<Vec<_>>().join(",")
                    ),
                    CacheOp::Clear => "clear".to_owned(),
                };
                Some((e.tick, *epoch, what))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_positional_store_chains_keys_and_the_request_shares_them() {
    let capture = [line(
        0,
        &batch(1.0, vec![stored_array(&[10, 11], None, &[1, 2, 3, 4])]),
    )];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    let k1 = chained_key("", &[1, 2]);
    let k2 = chained_key(&k1, &[3, 4]);
    assert_eq!(cache_ops(&trace), vec![(0, 1, format!("store {k1},{k2}"))]);
    let EventKind::Request(request) = &trace.events[1].kind else {
        panic!()
    };
    let keys: Vec<&str> = request.prefix.iter().map(|s| &*s.key).collect();
    assert_eq!(
        keys,
        vec![&*k1, &*k2],
        "the partial fifth token is no segment"
    );
    assert_eq!((trace.events[1].seq, trace.events[1].tick), (2, 0));
    assert_eq!(request.prompt_tokens, 5);
    assert_eq!(trace.workers.len(), 1);
    assert_eq!(&*trace.workers[0].id, "tcp://e:1|t|dp0");
    assert_eq!(report.stored, 1);
    assert_eq!(
        trace.policy.epochs,
        crate::input::trace::EpochsMode::Sequential
    );
}

#[test]
fn the_key_is_the_documented_hash() {
    // SHA-256 of 0x00 then 1 and 2 as 8-byte big-endian: hand-checked with Python's
    // hashlib.sha256(b"\0" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")).
    assert_eq!(&*chained_key("", &[1, 2]), "k9be0647981d65969");
}

#[test]
fn a_map_layout_batch_and_a_signed_hash_name_the_same_block() {
    let hash = 15760518052499183552u64;
    let store = map(vec![
        ("type", s("BlockStored")),
        ("block_hashes", ints(&[hash])),
        ("parent_block_hash", Value::Nil),
        ("token_ids", ints(&[7, 8])),
        ("block_size", Value::from(2)),
        ("lora_id", Value::Nil),
        ("medium", s("GPU")),
        ("lora_name", Value::Nil),
        ("extra_keys", Value::Array(vec![Value::Nil])),
        ("group_idx", Value::from(0)),
        ("kv_cache_spec_kind", s("full_attention")),
        ("locality", s("local")),
    ]);
    let remove = Value::Array(vec![
        s("BlockRemoved"),
        Value::Array(vec![Value::from(hash as i64)]),
        s("GPU"),
    ]);
    let first = map(vec![
        ("ts", Value::F64(2.0)),
        ("events", Value::Array(vec![store])),
        ("data_parallel_rank", Value::from(1)),
    ]);
    let second = Value::Array(vec![
        Value::F64(2.5),
        Value::Array(vec![remove]),
        Value::from(1),
    ]);
    let (trace, report) = import(&[line(0, &first), line(1, &second)], REQUEST).unwrap();
    let k = chained_key("", &[7, 8]);
    assert_eq!(
        cache_ops(&trace),
        vec![
            (1000, 1, format!("store {k}")),
            (1500, 2, format!("evict {k}"))
        ]
    );
    assert_eq!(&*trace.workers[0].id, "tcp://e:1|t|dp1");
    assert_eq!(report.unknown_fields.get("BlockStored.locality"), Some(&1));
}

#[test]
fn a_gap_skips_an_epoch_and_a_restart_is_a_clear() {
    let store = |h: u64| batch(1.0, vec![stored_array(&[h], None, &[1, 2])]);
    let capture = [
        line(0, &store(1)),
        line(2, &store(2)),
        line(0, &store(3)),
        line(3, &store(4)),
    ];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    let epochs: Vec<(u64, String)> = cache_ops(&trace)
        .into_iter()
        .map(|(_, e, w)| (e, w.split(' ').next().unwrap().to_owned()))
        .collect();
    let store = |e| (e, "store".to_owned());
    // seq 0: epoch 1; seq 2 (1 lost): 2 skipped, 3; seq 0 again: clear 4, store 5;
    // seq 3 (1 and 2 lost): 6 skipped, 7.
    assert_eq!(
        epochs,
        vec![
            store(1),
            store(3),
            (4, "clear".to_owned()),
            store(5),
            store(7)
        ]
    );
    assert_eq!((report.restarts, report.gaps), (1, 2));
    assert_eq!(report.notes.len(), 3);
    assert!(report.notes[1].restart);
}

#[test]
fn a_restart_that_lost_its_first_messages_also_opens_a_gap() {
    let store = |h: u64| batch(1.0, vec![stored_array(&[h], None, &[1, 2])]);
    let capture = [line(5, &store(1)), line(6, &store(2)), line(2, &store(3))];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    let epochs: Vec<u64> = cache_ops(&trace).into_iter().map(|(_, e, _)| e).collect();
    assert_eq!(
        epochs,
        vec![1, 2, 3, 5],
        "clear 3, then 4 skipped for seqs 0 and 1"
    );
    assert_eq!(
        (report.joined_mid_stream, report.restarts, report.gaps),
        (1, 1, 0)
    );
}

/// A capture line of `value` from endpoint `tcp://<endpoint>:1`.
fn line_from(endpoint: &str, seq: u64, value: &Value) -> String {
    line(seq, value).replace("tcp://e:1", &format!("tcp://{endpoint}:1"))
}

#[test]
fn batches_of_two_publishers_received_out_of_time_order_replay_in_time_order() {
    let store = |ts: f64, h: u64| batch(ts, vec![stored_array(&[h], None, &[1, 2])]);
    // A's two batches arrive first, then B's, both made before A's last (times in
    // binary fractions of a second, so every millisecond is exact).
    let capture = [
        line_from("a", 0, &store(1.5, 1)),
        line_from("a", 1, &store(1.625, 2)),
        line_from("b", 0, &store(1.0, 3)),
        line_from("b", 1, &store(1.25, 4)),
    ];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    assert_eq!(
        (report.earlier_than_own, report.earlier_than_other),
        (0, 2),
        "both of B's batches are earlier than A's before them"
    );
    assert_eq!(report.gaps, 0);
    let mut order: Vec<(u64, u64, String, u64)> = trace
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Cache { worker, epoch, .. } => {
                Some((e.tick, e.seq, worker.to_string(), *epoch))
            }
            _ => None,
        })
        .collect();
    // Seqs in capture order, ticks from each batch's own time (origin 1.000 s)...
    assert_eq!(
        order
            .iter()
            .map(|(t, q, _, _)| (*t, *q))
            .collect::<Vec<_>>(),
        vec![(500, 1), (625, 2), (0, 3), (250, 4)]
    );
    // ... so the replay, in (tick, seq) order, takes B's first, and each publisher's
    // epochs still come in sequence.
    order.sort();
    let replayed: Vec<(&str, u64)> = order.iter().map(|(_, _, w, e)| (&w[6..7], *e)).collect();
    assert_eq!(replayed, vec![("b", 1), ("b", 2), ("a", 1), ("a", 2)]);
}

#[test]
fn a_batch_earlier_than_its_publishers_previous_takes_that_time() {
    let store = |ts: f64, h: u64| batch(ts, vec![stored_array(&[h], None, &[1, 2])]);
    let capture = [
        line(0, &store(1.050, 1)),
        line(1, &store(1.020, 2)),
        line(2, &store(1.060, 3)),
    ];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    assert_eq!((report.earlier_than_own, report.earlier_than_other), (1, 0));
    let ticks: Vec<(u64, u64)> = cache_ops(&trace)
        .into_iter()
        .map(|(t, e, _)| (t, e))
        .collect();
    // The origin is the request's arrival, 1.000 s; the second batch keeps the
    // first's 1.050 s, so the replay order is the sequence order.
    assert_eq!(ticks, vec![(50, 1), (50, 2), (60, 3)]);
    assert!(report
        .lines("c")
        .contains(&"order: 1 earlier than its publisher's previous, 0 earlier than another publisher's before it".to_owned()));
}

#[test]
fn a_replayed_line_imports_as_a_live_one() {
    let store = |h: u64| batch(1.0, vec![stored_array(&[h], None, &[1, 2])]);
    let live = [line(0, &store(1)), line(1, &store(2))];
    let replayed = [
        live[0].clone(),
        live[1].replace(r#""seq":1"#, r#""replayed":true,"seq":1"#),
    ];
    assert_ne!(live[1], replayed[1]);
    let (from_live, _) = import(&live, REQUEST).unwrap();
    let (from_replayed, report) = import(&replayed, REQUEST).unwrap();
    assert_eq!(from_live, from_replayed);
    assert_eq!(report.gaps, 0);
    let wrong = [live[0].replace(r#""seq":0"#, r#""replayed":1,"seq":0"#)];
    let errors = import(&wrong, REQUEST).unwrap_err();
    assert!(
        errors[0]
            .reason
            .starts_with("invalid capture line: invalid type: integer `1`, expected a boolean"),
        "{}",
        errors[0].reason
    );
}

#[test]
fn left_out_events_are_counted_and_take_no_epoch() {
    let cpu = Value::Array(vec![
        s("BlockStored"),
        ints(&[1]),
        Value::Nil,
        ints(&[1, 2]),
        Value::from(2),
        Value::Nil,
        s("CPU_TIER1"),
    ]);
    let orphan = stored_array(&[2], Some(99), &[1, 2]);
    let wrong_size = Value::Array(vec![
        s("BlockStored"),
        ints(&[3]),
        Value::Nil,
        ints(&[1, 2, 3]),
        Value::from(3),
    ]);
    let no_tokens = Value::Array(vec![
        s("BlockStored"),
        ints(&[4]),
        Value::Nil,
        ints(&[]),
        Value::from(2),
    ]);
    let sliding = map(vec![
        ("type", s("BlockStored")),
        ("block_hashes", ints(&[5])),
        ("token_ids", ints(&[1, 2])),
        ("block_size", Value::from(2)),
        ("kv_cache_spec_sliding_window", Value::from(128)),
    ]);
    let unknown_removal = Value::Array(vec![s("BlockRemoved"), ints(&[42])]);
    let other = Value::Array(vec![s("BlockUpdated"), ints(&[1])]);
    let kept = stored_array(&[6], None, &[5, 6]);
    let events = vec![
        cpu,
        orphan,
        wrong_size,
        no_tokens,
        sliding,
        unknown_removal,
        other,
        kept,
    ];
    let (trace, report) = import(&[line(0, &batch(1.0, events))], REQUEST).unwrap();
    assert_eq!(cache_ops(&trace).len(), 1);
    assert_eq!(cache_ops(&trace)[0].1, 1);
    let l = &report.left_out;
    assert_eq!(
        (
            l.not_on_gpu,
            l.unknown_parent,
            l.other_block_size,
            l.no_token_ids,
            l.other_cache_group,
            l.unknown_removed_hashes
        ),
        (1, 1, 1, 1, 1, 1)
    );
    assert_eq!(report.unknown_types.get("BlockUpdated"), Some(&1));
    assert_eq!(
        (report.stored, report.removed, report.unknown_type),
        (6, 1, 1)
    );
}

#[test]
fn an_unknown_shape_is_an_error_with_its_path() {
    let bad_hash = Value::Array(vec![s("BlockStored"), Value::Array(vec![s("x")])]);
    let errors = import(&[line(0, &batch(1.0, vec![bad_hash]))], REQUEST).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].to_string(), "capture line 1: payload.events[0].block_hashes[0]: expected an integer or bytes, found a string");
    let not_a_batch = line(0, &s("hello"));
    let errors = import(&[not_a_batch], REQUEST).unwrap_err();
    assert_eq!(
        errors[0].reason,
        "payload: expected an array or a map, found a string"
    );
}

#[test]
fn bad_lines_of_both_inputs_are_all_reported() {
    let capture = [
        "{}".to_owned(),
        "".to_owned(),
        r#"{"endpoint":"e","topic":"t","seq":0,"payload_b64":"!!"}"#.to_owned(),
    ];
    let requests = format!("{REQUEST}\n{REQUEST}\n");
    let errors = import(&capture, &requests).unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        shown[0],
        "request line 2: duplicate request id \"r1\" (first on line 1)"
    );
    assert!(
        shown[1].starts_with("capture line 1: invalid capture line: missing field"),
        "{shown:?}"
    );
    assert_eq!(shown[2], "capture line 2: empty line");
    assert!(
        shown[3].starts_with("capture line 3: payload_b64: invalid base64"),
        "{shown:?}"
    );
}

#[test]
fn an_over_long_capture_line_is_read_past() {
    let long = format!("{}\n{REQUEST}", " ".repeat(100));
    let errors = import_capped(
        long.as_bytes(),
        REQUEST.as_bytes(),
        &options(),
        50,
        vllm_line,
    )
    .unwrap_err();
    assert_eq!(errors[0].reason, "line longer than 50 bytes");
    assert_eq!(
        errors.len(),
        2,
        "the next line is read as a line: {errors:?}"
    );
}

#[test]
fn dynamos_tokens_hash_is_xxh3_of_32_bit_ids() {
    // Hand-checked with Python's xxhash 3.6.0:
    // xxh3_64_intdigest(b"".join(struct.pack("<I", t) for t in range(1, 17)), seed=1337).
    let tokens: Vec<u64> = (1..=16).collect();
    assert_eq!(convert::dynamo_tokens_hash(&tokens), 16863443419780771464);
}

fn dynamo_stored(id: u64, parent: &str, blocks: &[(u64, u64)], extra: &str) -> String {
    let blocks: Vec<String> = blocks
        .iter()
        .map(|(b, t)| format!(r#"{{"block_hash":{b},"tokens_hash":{t},"mm_extra_info":null}}"#))
        .collect();
    format!(
        r#"{{"worker_id":7,{extra}"event":{{"event_id":{id},"data":{{"stored":{{"parent_hash":{parent},"start_position":null,"blocks":[{}]}}}},"dp_rank":0}}}}"#,
        blocks.join(",")
    )
}

#[test]
fn a_dynamo_stream_keys_blocks_by_tokens_hash_as_requests_are_keyed() {
    let first: Vec<u64> = (1..=16).collect();
    let second: Vec<u64> = (17..=32).collect();
    let (h1, h2) = (
        convert::dynamo_tokens_hash(&first),
        convert::dynamo_tokens_hash(&second),
    );
    let lines = [
        dynamo_stored(
            0,
            "null",
            &[(100, h1), (101, h2)],
            r#""received_ms":1000,"session_id":"s","colour":1,"#,
        ),
        r#"{"worker_id":7,"event":{"event_id":1,"data":{"removed":{"block_hashes":[101]}}}}"#
            .to_owned(),
        dynamo_stored(3, "100", &[(102, 5)], r#""received_ms":1030,"#),
        dynamo_stored(4, "null", &[(103, 6)], r#""storage_tier":"host_pinned","#),
        r#"{"worker_id":7,"event":{"event_id":0,"data":"cleared"}}"#.to_owned(),
    ];
    let request = format!(
        r#"{{"arrival_ms":1010,"id":"r","model":"m","token_ids":{:?},"output_tokens":1}}"#,
        (1..=33).collect::<Vec<u64>>()
    );
    let options = EventsOptions::default();
    let (trace, report) =
        import_dynamo_events(lines.join("\n").as_bytes(), request.as_bytes(), &options).unwrap();
    let k1 = chained_key("", &[h1]);
    let k2 = chained_key(&k1, &[h2]);
    let k3 = chained_key(&k1, &[5]);
    // event 0 at 1000 ms (tick 0), 1 at the same time (no received_ms), 2 lost (3 is
    // skipped), 3 at 1030 ms; 4 not on GPU; 0 again: the restart's clear, then the
    // stream's own.
    assert_eq!(
        cache_ops(&trace),
        vec![
            (0, 1, format!("store {k1},{k2}")),
            (0, 2, format!("evict {k2}")),
            (30, 4, format!("store {k3}")),
            (30, 5, "clear".to_owned()),
            (30, 6, "clear".to_owned()),
        ]
    );
    let EventKind::Request(request) = &trace.events.last().unwrap().kind else {
        panic!()
    };
    let keys: Vec<&str> = request.prefix.iter().map(|s| &*s.key).collect();
    assert_eq!(keys, vec![&*k1, &*k2]);
    assert_eq!(&*trace.workers[0].id, "dynamo|7|dp0");
    assert_eq!(
        (report.gaps, report.restarts, report.left_out.not_on_gpu),
        (1, 1, 1)
    );
    assert_eq!(report.unknown_fields.get("RouterEvent.colour"), Some(&1));
}

#[test]
fn a_dynamo_line_of_the_wrong_shape_or_a_request_with_an_adapter_is_refused() {
    let bad = r#"{"worker_id":"x","event":{"event_id":0,"data":"cleared"}}"#;
    let request =
        r#"{"arrival_ms":0,"id":"r","model":"m","adapter":"a","token_ids":[],"output_tokens":1}"#;
    let errors = import_dynamo_events(
        bad.as_bytes(),
        request.as_bytes(),
        &EventsOptions::default(),
    )
    .unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(shown[0], "request line 1: adapter: Dynamo's events do not name adapters, so dynamo-events imports base-model requests only");
    assert_eq!(shown.len(), 2, "no spurious give --model: {shown:?}");
    assert_eq!(shown[1], "capture line 1: worker_id: expected an integer from 0 to 18446744073709551615, found a string");
}

#[test]
fn a_dynamo_member_written_twice_is_refused_with_its_path() {
    let request = r#"{"arrival_ms":0,"id":"r","model":"m","token_ids":[],"output_tokens":1}"#;
    let lines = [
        r#"{"worker_id":7,"worker_id":8,"event":{"event_id":0,"data":"cleared"}}"#,
        r#"{"worker_id":7,"event":{"event_id":0,"data":{"removed":{"block_hashes":[1],"block_hashes":[2]}}}}"#,
    ];
    let errors = import_dynamo_events(
        lines.join("\n").as_bytes(),
        request.as_bytes(),
        &EventsOptions::default(),
    )
    .unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        shown,
        [
            "capture line 1: worker_id: repeated member \"worker_id\"",
            "capture line 2: event.data.removed.block_hashes: repeated member \"block_hashes\"",
        ]
    );
}

#[test]
fn messagepacks_reserved_byte_is_malformed_not_nil() {
    // [1.0, [], 0xC1]: the rank would read as nil, so as rank 0.
    let mut payload = vec![0x93, 0xcb];
    payload.extend_from_slice(&1.0f64.to_be_bytes());
    payload.extend_from_slice(&[0x90, 0xc1]);
    let encoded = base64::engine::general_purpose::STANDARD.encode(&payload);
    let capture =
        format!(r#"{{"endpoint":"tcp://e:1","topic":"t","seq":0,"payload_b64":"{encoded}"}}"#);
    let errors = import(&[capture], REQUEST).unwrap_err();
    assert_eq!(
        errors[0].reason,
        "payload: invalid MessagePack: the reserved byte 0xC1 at byte 11"
    );
}

#[test]
fn an_empty_lora_name_is_an_error_of_its_capture_line() {
    let store = map(vec![
        ("type", s("BlockStored")),
        ("block_hashes", ints(&[1])),
        ("token_ids", ints(&[1, 2])),
        ("block_size", Value::from(2)),
        ("lora_name", s("")),
    ]);
    let errors = import(&[line(0, &batch(1.0, vec![store]))], REQUEST).unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        shown,
        ["capture line 1: payload.events[0].lora_name: expected a non-empty string, found an empty string"]
    );
}

#[test]
fn a_bad_request_line_is_not_followed_by_give_model() {
    let store = batch(1.0, vec![stored_array(&[1], None, &[1, 2])]);
    let errors = import(&[line(0, &store)], "{bad").unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].starts_with("request line 1: invalid request line:"),
        "{shown:?}"
    );
}

/// Each cache event's epoch and kind (`store`, `evict`, `clear`), in the trace's order.
fn epochs_and_kinds(trace: &Trace) -> Vec<(u64, String)> {
    cache_ops(trace)
        .into_iter()
        .map(|(_, e, w)| (e, w.split(' ').next().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_restart_that_lost_only_its_first_message_skips_one_epoch() {
    let store = |h: u64| batch(1.0, vec![stored_array(&[h], None, &[1, 2])]);
    // Seqs 0, 1, 2, then 1: the engine restarted and its new message 0 was lost.
    let capture = [
        line(0, &store(1)),
        line(1, &store(2)),
        line(2, &store(3)),
        line(1, &store(4)),
    ];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    // SPEC §13.4: s = 1 <= s' = 2 is a restart: the clear takes 4, then since s > 0
    // one number (5) is skipped for the lost seq 0, and the store takes 6.
    let kind = |e, k: &str| (e, k.to_owned());
    assert_eq!(
        epochs_and_kinds(&trace),
        vec![
            kind(1, "store"),
            kind(2, "store"),
            kind(3, "store"),
            kind(4, "clear"),
            kind(6, "store")
        ]
    );
    assert_eq!((report.restarts, report.gaps), (1, 0));
    assert_eq!((report.notes[0].seq, report.notes[0].previous_seq), (1, 2));
}

#[test]
fn a_removal_on_another_tier_or_group_leaves_the_gpu_block_in_the_table() {
    let removal = |medium: Value, group: Value| {
        Value::Array(vec![s("BlockRemoved"), ints(&[10]), medium, group])
    };
    let events = vec![
        stored_array(&[10], None, &[1, 2]),
        removal(s("CPU_TIER1"), Value::Nil),
        removal(s("GPU"), Value::from(1)),
        removal(s("GPU"), Value::Nil),
    ];
    let (trace, report) = import(&[line(0, &batch(1.0, events))], REQUEST).unwrap();
    let k = chained_key("", &[1, 2]);
    // SPEC §13.4: a removal whose medium or group_idx is not the GPU's full-attention
    // cache is left out, the table untouched, so the GPU removal still knows hash 10.
    assert_eq!(
        cache_ops(&trace),
        vec![(0, 1, format!("store {k}")), (0, 2, format!("evict {k}"))]
    );
    let l = &report.left_out;
    assert_eq!(
        (l.not_on_gpu, l.other_cache_group, l.unknown_removed_hashes),
        (1, 1, 0)
    );
    assert_eq!(report.removed, 3);
}

#[test]
fn two_batches_of_one_publisher_at_the_same_time_keep_sequence_order() {
    let store = |h: u64, tokens: &[u64]| batch(1.0, vec![stored_array(&[h], None, tokens)]);
    let capture = [line(0, &store(1, &[1, 2])), line(1, &store(2, &[3, 4]))];
    let (trace, report) = import(&capture, REQUEST).unwrap();
    // SPEC §13.4: only a time earlier than the publisher's previous is counted; an
    // equal one keeps its time, and the capture's order gives the seqs.
    assert_eq!((report.earlier_than_own, report.earlier_than_other), (0, 0));
    let placed: Vec<(u64, u64, u64)> = trace
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Cache { epoch, .. } => Some((e.tick, e.seq, *epoch)),
            _ => None,
        })
        .collect();
    assert_eq!(placed, vec![(0, 1, 1), (0, 2, 2)]);
}

#[test]
fn a_store_with_both_lora_name_and_lora_id_is_under_the_name() {
    let store = map(vec![
        ("type", s("BlockStored")),
        ("block_hashes", ints(&[1])),
        ("token_ids", ints(&[1, 2])),
        ("block_size", Value::from(2)),
        ("lora_id", Value::from(7)),
        ("lora_name", s("sql-lora")),
    ]);
    let (trace, _) = import(&[line(0, &batch(1.0, vec![store]))], REQUEST).unwrap();
    // SPEC §13.4: the adapter is lora_name, else lora-id:<n>.
    let adapters: Vec<&str> = trace.workers[0].adapters.iter().map(|a| &**a).collect();
    assert_eq!(adapters, vec!["sql-lora"]);
    let Some(EventKind::Cache {
        op: CacheOp::Store { namespace, .. },
        ..
    }) = trace.events.first().map(|e| &e.kind)
    else {
        panic!("a store first")
    };
    assert_eq!(&*namespace.adapter, "sql-lora");
}

#[test]
fn more_sequence_gaps_than_notes_are_all_counted() {
    let store = |h: u64| batch(1.0, vec![stored_array(&[h], None, &[1, 2])]);
    // Seqs 0, 2, 4, ..., 204: 102 gaps, each losing one message.
    let capture: Vec<String> = (0..=102).map(|i| line(2 * i, &store(i))).collect();
    let (trace, report) = import(&capture, REQUEST).unwrap();
    assert_eq!(report.gaps, 102);
    assert_eq!(report.notes.len(), report::SEQUENCE_NOTES_MAX);
    let last = report.notes.last().unwrap();
    assert_eq!((last.line, last.seq, last.previous_seq), (101, 200, 198));
    let lines = report.lines("c");
    assert!(lines
        .contains(&"publishers: 0 restarts, 102 sequence gaps, 0 joined mid-stream".to_owned()));
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(": sequence gap: "))
            .count(),
        100
    );
    // Every gap skips an epoch, noted or not: the last store is 1 + 2 * 102.
    assert_eq!(epochs_and_kinds(&trace).last().unwrap().0, 205);
}

/// A store of two-token blocks as vLLM 0.33.0 writes one (positional, with the members
/// after `lora_name`), with `extra_keys` as given.
fn stored_with_keys(
    hashes: &[u64],
    parent: Option<u64>,
    tokens: &[u64],
    lora_name: Option<&str>,
    extra_keys: Value,
) -> Value {
    Value::Array(vec![
        s("BlockStored"),
        ints(hashes),
        parent.map_or(Value::Nil, Value::from),
        ints(tokens),
        Value::from(2),
        Value::Nil,
        s("GPU"),
        lora_name.map_or(Value::Nil, s),
        extra_keys,
    ])
}

fn entries(entries: Vec<Option<Vec<Value>>>) -> Value {
    Value::Array(
        entries
            .into_iter()
            .map(|e| e.map_or(Value::Nil, Value::Array))
            .collect(),
    )
}

/// Each cache event's namespace as `tenant/adapter` and its keys, in trace order.
fn namespaced_ops(trace: &Trace) -> Vec<(String, String)> {
    let keys = |keys: Vec<&str>| keys.join(",");
    trace
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Cache {
                op:
                    CacheOp::Store {
                        namespace,
                        segments,
                    },
                ..
            } => Some((
                format!("{}/{}", namespace.tenant, namespace.adapter),
                format!("store {}", keys(segments.iter().map(|s| &*s.key).collect())),
            )),
            EventKind::Cache {
                op: CacheOp::Evict { namespace, keys: k },
                ..
            } => Some((
                format!("{}/{}", namespace.tenant, namespace.adapter),
                format!("evict {}", keys(k.iter().map(|k| &**k).collect())),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_salt_on_the_root_block_names_the_chain_s_tenant_and_its_later_stores_keep_it() {
    // vLLM 0.33.0: the salt on the request's first block only, the adapter's name on
    // every block, first; a later store of the chain carries the adapter alone.
    let lora = || s("ad");
    let root = stored_with_keys(
        &[10, 11],
        None,
        &[1, 2, 3, 4],
        Some("ad"),
        entries(vec![Some(vec![lora(), s("acme")]), Some(vec![lora()])]),
    );
    let child = stored_with_keys(
        &[12],
        Some(11),
        &[5, 6],
        Some("ad"),
        entries(vec![Some(vec![lora()])]),
    );
    let plain = stored_array(&[20], None, &[1, 2]);
    let removal = Value::Array(vec![s("BlockRemoved"), ints(&[12, 20, 10]), s("GPU")]);
    let capture = [
        line(0, &batch(1.0, vec![root, child, plain])),
        line(1, &batch(2.0, vec![removal])),
    ];
    let requests = [
        r#"{"arrival_ms":3000,"id":"a","model":"m","tenant":"acme","adapter":"ad","token_ids":[1,2,3,4,5,6],"output_tokens":1}"#,
        r#"{"arrival_ms":3000,"id":"b","model":"m","tenant":"other","token_ids":[1,2],"output_tokens":1}"#,
    ]
    .join("\n");
    let (trace, report) = import(&capture, &requests).unwrap();
    let (k1, k2) = (chained_key("", &[1, 2]), chained_key("", &[1, 2]));
    let k2 = chained_key(&k2, &[3, 4]);
    let k3 = chained_key(&k2, &[5, 6]);
    assert_eq!(
        namespaced_ops(&trace),
        vec![
            ("acme/ad".to_owned(), format!("store {k1},{k2}")),
            ("acme/ad".to_owned(), format!("store {k3}")),
            ("default/base".to_owned(), format!("store {k1}")),
            ("acme/ad".to_owned(), format!("evict {k3},{k1}")),
            ("default/base".to_owned(), format!("evict {k1}")),
        ]
    );
    assert_eq!(report.left_out.extra_keys, 0);
    assert_eq!(report.salted.get("acme"), Some(&1));
    // The salted tenant reuses only its own blocks: only "other" shares the unsalted.
    let granted: Vec<(String, Vec<String>)> = trace
        .sharing
        .iter()
        .map(|g| {
            (
                g.adapter.to_string(),
                g.tenants.iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        granted,
        vec![(
            "base".to_owned(),
            vec!["default".to_owned(), "other".to_owned()]
        )]
    );
    assert!(report
        .lines("c")
        .contains(&r#"salted: 1 stores under 1 tenants: "acme" x1"#.to_owned()));
}

#[test]
fn keys_that_tokens_and_one_root_salt_do_not_explain_leave_the_store_out() {
    let mm = || Value::Array(vec![s("mm-hash"), Value::from(0)]);
    let cases = [
        // A multimodal input's [identifier, offset].
        (None, entries(vec![Some(vec![mm()])])),
        // Prompt embeddings' digest.
        (None, entries(vec![Some(vec![Value::Binary(vec![1, 2])])])),
        // Two strings and no adapter to account for one.
        (None, entries(vec![Some(vec![s("x"), s("y")])])),
        // A salt on the second block.
        (None, entries(vec![None, Some(vec![s("acme")])])),
        // The empty salt, bare or tagged.
        (None, entries(vec![Some(vec![s("")])])),
        (None, entries(vec![Some(vec![s("dynamo-cache-salt:")])])),
        // An adapter's store whose key is not its name.
        (Some("ad"), entries(vec![Some(vec![s("other"), s("acme")])])),
    ];
    for (lora, keys) in cases {
        let store = stored_with_keys(&[10, 11], None, &[1, 2, 3, 4], lora, keys.clone());
        let (trace, report) = import(&[line(0, &batch(1.0, vec![store]))], REQUEST).unwrap();
        assert_eq!(report.left_out.extra_keys, 1, "{keys:?}");
        assert!(namespaced_ops(&trace).is_empty(), "{keys:?}");
    }
}

#[test]
fn a_salt_under_a_parent_is_not_a_salt() {
    // vLLM publishes a salt only on a request's first block, which has no parent.
    let root = stored_array(&[10], None, &[1, 2]);
    let child = stored_with_keys(
        &[11],
        Some(10),
        &[3, 4],
        None,
        entries(vec![Some(vec![s("acme")])]),
    );
    let (trace, report) = import(&[line(0, &batch(1.0, vec![root, child]))], REQUEST).unwrap();
    assert_eq!(report.left_out.extra_keys, 1);
    assert_eq!(namespaced_ops(&trace).len(), 1);
}

#[test]
fn dynamo_s_tagged_salt_names_the_tenant_after_the_tag_and_a_salt_of_the_tenant_warns() {
    for (salt, tenant) in [("dynamo-cache-salt:acme", "acme"), ("default", "default")] {
        let store = stored_with_keys(
            &[10],
            None,
            &[1, 2],
            None,
            entries(vec![Some(vec![s(salt)])]),
        );
        let (trace, report) = import(&[line(0, &batch(1.0, vec![store]))], REQUEST).unwrap();
        assert_eq!(namespaced_ops(&trace)[0].0, format!("{tenant}/base"));
        let warned = report.lines("c").iter().any(|l| {
            l == r#"warning: 1 stores carry a salt naming "default", which is also --tenant, so their blocks share the unsalted blocks' namespace"#
        });
        assert_eq!(warned, tenant == "default", "{salt}");
    }
}
