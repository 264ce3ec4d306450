//! The Bailian import on hand-built lines: the worked fixture (ticks, ids, keys and
//! tokens computed by hand from SPEC.md §18.1), the exact seconds-to-milliseconds
//! rule, the report's two matchers, and each reason of §18.2.

use super::*;
use crate::output::canonical::canonical_trace_bytes;
use crate::parse_trace;

/// Four lines, shared with the CLI tests.
const FOUR_LINES: &str = include_str!("../../../../fixtures/bailian/four-lines.jsonl");

fn import(text: &str) -> Result<(Trace, Vec<String>), Vec<String>> {
    let mut events = Vec::new();
    let mut keep = |event| events.push(event);
    let options = BailianOptions::default();
    match convert(text.as_bytes(), &options, Some(&mut keep), LINE_BYTES_MAX) {
        Ok((head, tallies)) => Ok((Trace { events, ..head }, tallies.lines())),
        Err(errors) => Err(errors.iter().map(ToString::to_string).collect()),
    }
}

fn errors(text: &str) -> Vec<String> {
    import(text)
        .err()
        .unwrap_or_else(|| panic!("expected errors for {text:?}"))
}

/// A request as `(tick, id, [(key, tokens)], prompt, decode)`.
type Seen = (u64, String, Vec<(String, u64)>, u64, u64);

/// Each request of `trace`, in order.
fn requests(trace: &Trace) -> Vec<Seen> {
    trace
        .events
        .iter()
        .map(|event| match &event.kind {
            EventKind::Request(r) => (
                event.tick,
                r.id.to_string(),
                r.prefix
                    .iter()
                    .map(|s| (s.key.to_string(), s.tokens))
                    .collect(),
                r.prompt_tokens,
                r.decode_tokens,
            ),
            other => panic!("only requests are imported, found {other:?}"),
        })
        .collect()
}

fn keys(tokens: &[(&str, u64)]) -> Vec<(String, u64)> {
    tokens.iter().map(|&(k, t)| (k.to_owned(), t)).collect()
}

#[test]
fn the_key_chains_each_id_on_the_key_before() {
    // Python: "k" + hashlib.sha256(parent.encode() + b"\0" + id.to_bytes(8, "big"))
    // .hexdigest()[:16], from the empty parent.
    assert_eq!(&*chained_key("", &[10]), "ka39dfac87605acce");
    assert_eq!(
        &*chained_key("ka39dfac87605acce", &[11]),
        "k4da782d615857664"
    );
}

#[test]
fn four_lines_map_exactly() {
    let (trace, report) = import(FOUR_LINES).unwrap();
    let (a, b, c) = (
        "ka39dfac87605acce",
        "k4da782d615857664",
        "k6e69ef83be533c0c",
    );
    assert_eq!(
        requests(&trace),
        vec![
            // 40 tokens at 16 a block: 16, 16 and 8.
            (
                500,
                "r1-c1".into(),
                keys(&[(a, 16), (b, 16), (c, 8)]),
                40,
                8
            ),
            (
                1250,
                "r2-c2".into(),
                keys(&[(a, 16), (b, 16), (c, 16), ("kbc86d3bd08a1aac2", 12)]),
                60,
                4
            ),
            // Id 11 after 20 is another block than 11 after 10.
            (
                2000,
                "r3-c3".into(),
                keys(&[("kdb65e536c20869b7", 16), ("ka920c7bb2d25b478", 16)]),
                32,
                1
            ),
            // 3.0005 s is 3,000.5 ms, rounded down; 17 tokens are 16 and 1.
            (
                3000,
                "r4-c4".into(),
                keys(&[("k5ea3b4961c4b7ffd", 16), ("k0dade570e43c442e", 1)]),
                17,
                2
            ),
        ]
    );
    assert_eq!(trace.workers.len(), 8);
    assert_eq!(&*trace.workers[0].id, "w0");
    assert!(trace.sharing.is_empty());
    // Line 2 meets ids 10, 11, 12 as line 1 chained them: 3 blocks both ways. Line 4's
    // ids 11 and 12 were seen, but never at the root: 2 naive, 0 chained.
    assert_eq!(
        report,
        vec![
            "sessions: 3 root requests (parent_chat_id -1), 1 later turns".to_owned(),
            r#"types: "search" x1, "text" x2"#.to_owned(),
            "re-chained: a naive matcher credits 5 blocks, a prefix cache could reuse 3; 2 (40.00%) credited wrongly".to_owned(),
        ]
    );
}

#[test]
fn the_output_round_trips_through_validation() {
    let (trace, _) = import(FOUR_LINES).unwrap();
    let reparsed = parse_trace(&canonical_trace_bytes(&trace)).unwrap();
    assert_eq!(reparsed, trace);
}

#[test]
fn seconds_become_milliseconds_from_the_exact_decimal() {
    let cases = [
        ("61.114", Some(61_114)),
        ("0", Some(0)),
        ("-0", Some(0)),
        ("-0.0e7", Some(0)),
        ("1e-05", Some(0)),
        ("5e-3", Some(5)),
        ("2.0005", Some(2_000)),
        ("1.5e3", Some(1_500_000)),
        ("0.0001e4", Some(1_000)),
        (
            "123456789012345678901234567890e-20",
            Some(1_234_567_890_123),
        ),
        ("9007199254740.991", Some(JSON_INTEGER_MAX)),
        ("9007199254740.992", None),
        ("9007199254741", None),
        ("1e400", None),
        ("-0.5", None),
        ("-3", None),
        ("", None),
    ];
    for (literal, ms) in cases {
        assert_eq!(seconds_to_ms(literal), ms, "{literal}");
    }
}

#[test]
fn a_naive_matcher_credits_a_recurring_block_no_prefix_cache_holds() {
    // The same two blocks in the other order: every id was seen, no prefix was.
    let lines = [
        r#"{"chat_id":1,"timestamp":0,"input_length":32,"output_length":1,"hash_ids":[1,2]}"#,
        r#"{"chat_id":2,"timestamp":0,"input_length":32,"output_length":1,"hash_ids":[2,1]}"#,
        r#"{"chat_id":3,"timestamp":0,"input_length":32,"output_length":1,"hash_ids":[1,2]}"#,
    ];
    let (_, report) = import(&lines.join("\n")).unwrap();
    assert_eq!(
        report.last().unwrap(),
        "re-chained: a naive matcher credits 4 blocks, a prefix cache could reuse 2; 2 (50.00%) credited wrongly"
    );
}

#[test]
fn each_kind_of_bad_member_names_its_line_and_reason() {
    let good = r#"{"chat_id":1,"timestamp":1,"input_length":16,"output_length":1,"hash_ids":[1]}"#;
    let with =
        |member: &str, value: &str| good.replacen('{', &format!("{{\"{member}\":{value},"), 1);
    let cases = [
        (
            with("parent_chat_id", "-2"),
            "parent_chat_id: expected -1 or a non-negative integer, found -2",
        ),
        (
            with("turn", "0"),
            "turn: expected a positive integer, found 0",
        ),
        (
            with("type", "\"\""),
            r#"type: expected a non-empty string, found """#,
        ),
        (
            with("type", "3"),
            "type: expected a non-empty string, found 3",
        ),
        (with("extra", "1"), r#"unknown field "extra""#),
        (with("chat_id", "2"), r#"repeated field "chat_id""#),
        (
            good.replace("\"timestamp\":1", "\"timestamp\":-1.5"),
            "timestamp: expected seconds from 0 to 9007199254740.991, found -1.5",
        ),
        (
            good.replace("\"timestamp\":1", "\"timestamp\":\"1\""),
            r#"timestamp: expected seconds from 0 to 9007199254740.991, found "1""#,
        ),
        (
            good.replace("\"chat_id\":1", "\"chat_id\":1.5"),
            "chat_id: expected a non-negative integer, found 1.5",
        ),
        (
            good.replace(",\"hash_ids\":[1]", ""),
            r#"missing field "hash_ids""#,
        ),
        (
            good.replace("[1]", "[1,2]"),
            "hash_ids: input_length 16 at 16 tokens a block needs 1 id, found 2",
        ),
        (
            good.replace("[1]", "{}"),
            "hash_ids: expected an array, found {}",
        ),
        ("[]".to_owned(), "expected an object, found []"),
        ("  ".to_owned(), "empty line"),
    ];
    for (line, reason) in cases {
        assert_eq!(errors(&line), vec![format!("line 1: {reason}")], "{line}");
    }
}

#[test]
fn timestamps_must_not_decrease_but_one_millisecond_is_one_tick() {
    let line = |t: &str| {
        format!(
            r#"{{"chat_id":1,"timestamp":{t},"input_length":16,"output_length":1,"hash_ids":[1]}}"#
        )
    };
    let same_ms = [line("1.0009"), line("1.0001")].join("\n");
    assert!(import(&same_ms).is_ok());
    let back = [line("2.5"), line("bad"), line("2.25")].join("\n");
    let reasons = errors(&back);
    assert_eq!(reasons.len(), 2);
    assert_eq!(
        reasons[1],
        "line 3: timestamp: 2.25 s is before 2.5 s on line 1 (timestamps must not decrease)"
    );
}

#[test]
fn options_and_an_empty_input_are_refused() {
    let options = BailianOptions {
        block_tokens: 0,
        workers: 0,
        ..BailianOptions::default()
    };
    let refused = convert("".as_bytes(), &options, None, LINE_BYTES_MAX)
        .err()
        .unwrap();
    let reasons: Vec<String> = refused.iter().map(|e| e.reason.clone()).collect();
    assert_eq!(
        reasons,
        vec![
            "block_tokens: expected a positive integer, found 0".to_owned(),
            "workers: expected 1 to 4096 (the scale limit), found 0".to_owned(),
        ]
    );
}

#[test]
fn types_past_the_listed_ones_are_summed() {
    let lines: Vec<String> = (0..TYPES_LISTED_MAX + 3)
        .map(|i| {
            format!(r#"{{"chat_id":{i},"timestamp":0,"input_length":0,"output_length":1,"type":"t{i:03}","hash_ids":[]}}"#)
        })
        .collect();
    let (_, report) = import(&lines.join("\n")).unwrap();
    assert!(
        report[1].ends_with(r#""t063" x1, (other) x3"#),
        "{}",
        report[1]
    );
}

#[test]
fn a_line_over_the_cap_is_read_past() {
    let long = format!(
        r#"{{"chat_id":1,"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[],"type":"{}"}}"#,
        "x".repeat(200)
    );
    let good = r#"{"chat_id":2,"timestamp":0,"input_length":16,"output_length":1,"hash_ids":[1]}"#;
    let text = format!("{long}\n{good}\n");
    let refused = convert(text.as_bytes(), &BailianOptions::default(), None, 100)
        .err()
        .unwrap();
    let shown: Vec<String> = refused.iter().map(ToString::to_string).collect();
    assert_eq!(shown, vec!["line 1: line longer than 100 bytes".to_owned()]);
}
