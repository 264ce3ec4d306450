//! Bytes in, trace or problems out: the Weka import's rules one by one (SPEC.md §19).

use super::*;
use crate::output::canonical::canonical_trace_bytes;
use crate::parse_trace;

/// The fixture sessions, shared with the CLI's end-to-end test.
const TRACE_A: &str = include_str!("../../../../cli/tests/weka/sessions/trace_a.json");
const TRACE_B: &str = include_str!("../../../../cli/tests/weka/sessions/trace_b.json");
const TRACE_C: &str = include_str!("../../../../cli/tests/weka/sessions/trace_c.json");

fn import_with(files: &[&str], options: WekaOptions) -> Result<(Trace, Report), ImportError> {
    let import = WekaImport {
        files: (1..=files.len())
            .map(|i| PathBuf::from(format!("f{i}.json")))
            .collect(),
        refusals: Vec::new(),
        options,
    };
    let sources: Vec<Source<'_>> = files
        .iter()
        .map(|text| Box::new(text.as_bytes()) as Source<'_>)
        .collect();
    let mut events = Vec::new();
    let imported = import.import(sources, &mut |event| events.push(event))?;
    Ok((
        Trace {
            events,
            ..imported.head
        },
        imported.report,
    ))
}

fn import(files: &[&str]) -> Result<(Trace, Report), ImportError> {
    import_with(files, WekaOptions::default())
}

/// The problems as printed.
fn problems(files: &[&str]) -> Vec<String> {
    match import(files) {
        Ok(_) => panic!("expected problems for {files:?}"),
        Err(error) => error.lines(),
    }
}

/// `(id, tick, keys)` of each request in order.
fn requests(trace: &Trace) -> Vec<(String, u64, Vec<String>)> {
    trace
        .events
        .iter()
        .map(|event| match &event.kind {
            EventKind::Request(r) => (
                r.id.to_string(),
                event.tick,
                r.prefix
                    .iter()
                    .map(|s| format!("{}:{}", s.key, s.tokens))
                    .collect(),
            ),
            other => panic!("not a request: {other:?}"),
        })
        .collect()
}

/// A one-session file around `requests` (the JSON text of the array's entries).
fn session(requests: &str) -> String {
    format!(r#"{{"id":"x","block_size":64,"hash_id_scope":"local","requests":[{requests}]}}"#)
}

fn request(t: &str, input: &str, ids: &str) -> String {
    format!(r#"{{"t":{t},"type":"n","in":{input},"out":3,"hash_ids":{ids}}}"#)
}

#[test]
fn the_fixture_maps_as_the_worked_example_says() {
    let (trace, report) = import(&[TRACE_A, TRACE_B, TRACE_C]).unwrap();
    let keys = |list: &[&str]| list.iter().map(|k| format!("{k}:64")).collect::<Vec<_>>();
    assert_eq!(
        requests(&trace),
        vec![
            ("s1-r1".to_owned(), 0, keys(&["s1-b1", "s1-b2"])),
            ("s1-r2".to_owned(), 3_500, keys(&["s1-b5", "s1-b6"])),
            (
                "s1-r3".to_owned(),
                5_750,
                keys(&["s1-b5", "s1-b6", "s1-b7"])
            ),
            (
                "s1-r4".to_owned(),
                8_000,
                keys(&["s1-b1", "s1-b2", "s1-b3", "s1-b4"])
            ),
            ("s2-r1".to_owned(), 18_973, keys(&["s2-b1", "s2-b2"])),
            ("s3-r1".to_owned(), 26_275, keys(&["s3-b1"])),
            (
                "s2-r2".to_owned(),
                27_973,
                keys(&["s2-b1", "s2-b2", "s2-b4"])
            ),
        ]
    );
    let seqs: Vec<u64> = trace.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    assert_eq!(report.counted(), "7 requests, 8 workers, 17 segments");
    assert_eq!(
        report.lines,
        vec![
            "sessions: 3 (0 with no request), 1 sub-agent with 2 of the requests, 11 distinct blocks",
            "clock: sessions start from tick 0 to 26275 (mean gap 10000 ms, --session-rate 0.1, \
             --seed 0); the last request arrives at tick 27973",
        ]
    );
    // What is handed on is a trace that validates as it is.
    let bytes = canonical_trace_bytes(&trace);
    assert_eq!(parse_trace(&bytes).unwrap(), trace);
}

#[test]
fn the_seed_and_the_rate_move_the_starts_and_nothing_else() {
    let options = WekaOptions {
        seed: 7,
        session_rate_milli: 1_000_000,
        ..WekaOptions::default()
    };
    let (trace, report) = import_with(&[TRACE_A, TRACE_B], options).unwrap();
    let ticks: Vec<u64> = trace.events.iter().map(|e| e.tick).collect();
    // At 1000 sessions a second the gap is 0 to 2 ms: session 2 starts at once.
    assert!(ticks[0] == 0 && ticks.len() == 6);
    assert!(report.lines[1].contains("mean gap 1 ms, --session-rate 1000, --seed 7"));
    let again = import_with(
        &[TRACE_A, TRACE_B],
        WekaOptions {
            seed: 7,
            session_rate_milli: 1_000_000,
            ..WekaOptions::default()
        },
    );
    assert_eq!(again.unwrap().0, trace);
}

#[test]
fn a_named_partial_last_block_carries_the_rest_of_the_prompt() {
    let text = session(&request("0", "150", "[1, 2, 3]"));
    let (trace, _) = import(&[&text]).unwrap();
    assert_eq!(
        requests(&trace)[0].2,
        vec!["s1-b1:64", "s1-b2:64", "s1-b3:22"]
    );
    assert_eq!(
        problems(&[&session(&request("0", "150", "[1]"))]),
        vec!["f1.json: requests[0].hash_ids: in 150 at 64 tokens a block names 2 ids (or 3 with a partial last block), found 1"]
    );
    assert_eq!(
        problems(&[&session(&request("0", "128", "[1, 2, 3]"))]),
        vec!["f1.json: requests[0].hash_ids: in 128 at 64 tokens a block names 2 ids, found 3"]
    );
}

#[test]
fn requests_of_one_session_are_ordered_by_time_then_by_their_place() {
    // A sub-agent's request at 1.0 + 0.5 s comes before the parent's at 2 s, and two
    // requests at the same tick keep their walk order.
    let sub = r#"{"t":1.0,"type":"subagent","requests":[{"t":0.5,"type":"s","in":64,"out":1,"hash_ids":[9]}]}"#;
    let text = session(&format!(
        "{},{sub},{}",
        request("2", "64", "[1]"),
        request("2", "64", "[1]")
    ));
    let (trace, report) = import(&[&text]).unwrap();
    let order: Vec<(String, u64)> = requests(&trace)
        .into_iter()
        .map(|(id, tick, _)| (id, tick))
        .collect();
    assert_eq!(
        order,
        vec![
            ("s1-r2".into(), 1_500),
            ("s1-r1".into(), 2_000),
            ("s1-r3".into(), 2_000)
        ]
    );
    assert!(report.lines[0].contains("1 sub-agent with 1 of the requests, 2 distinct blocks"));
}

#[test]
fn ids_are_rebuilt_from_what_each_request_adds_in_its_own_context() {
    // The parent shrinks (a compaction), the sub-agent grows, interleaved in time.
    let sub = format!(
        r#"{{"t":0.5,"type":"subagent","requests":[{},{}]}}"#,
        request("0", "128", "[7, 8]"),
        request("2", "192", "[7, 8, 9]")
    );
    let text = session(&format!(
        "{},{sub},{},{}",
        request("0", "192", "[1, 2, 3]"),
        request("1", "128", "[1, 4]"),
        request("4", "256", "[1, 4, 5, 6]")
    ));
    let (trace, _) = import(&[&text]).unwrap();
    let keys: Vec<Vec<String>> = requests(&trace).into_iter().map(|(_, _, k)| k).collect();
    let ids = |list: &[u64]| {
        list.iter()
            .map(|id| format!("s1-b{id}:64"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys,
        vec![
            ids(&[1, 2, 3]),
            ids(&[7, 8]),
            ids(&[1, 4]),
            ids(&[7, 8, 9]),
            ids(&[1, 4, 5, 6])
        ]
    );
}

#[test]
fn every_bad_member_is_named_by_its_path() {
    let bad = [
        (r#"{"t":-1,"type":"n","in":64,"out":1,"hash_ids":[1]}"#, "requests[0].t: expected a non-negative number of seconds, found -1"),
        (r#"{"t":"0","type":"n","in":64,"out":1,"hash_ids":[1]}"#, r#"requests[0].t: expected a non-negative number of seconds, found "0""#),
        (r#"{"t":0,"type":"x","in":64,"out":1,"hash_ids":[1]}"#, r#"requests[0].type: expected "n", "s" or "subagent", found "x""#),
        (r#"{"t":0,"in":64,"out":1,"hash_ids":[1]}"#, r#"requests[0]: missing member "type""#),
        (r#"{"t":0,"type":"n","in":64.0,"out":1,"hash_ids":[1]}"#, "requests[0].in: expected an integer from 0 to 9007199254740991, found 64.0"),
        (r#"{"t":0,"type":"n","in":64,"out":9007199254740992,"hash_ids":[1]}"#, "requests[0].out: expected an integer from 0 to 9007199254740991, found 9007199254740992"),
        (r#"{"t":0,"type":"n","in":64,"out":1,"hash_ids":[true, -2]}"#, "requests[0].hash_ids[0]: expected an integer from 0 to 9007199254740991, found true"),
        (r#"{"t":0,"type":"n","in":64,"out":1,"hash_ids":{}}"#, "requests[0].hash_ids: expected an array, found an object"),
        (r#"{"t":0,"type":"n","in":640,"out":1,"hash_ids":[]}"#, "requests[0].hash_ids: in 640 at 64 tokens a block names 10 ids, found 0"),
        (r#"{"t":0,"t":1,"type":"n","in":0,"out":1,"hash_ids":[]}"#, r#"requests[0]: repeated member "t""#),
        (r#"{"t":9007199254741,"type":"n","in":0,"out":1,"hash_ids":[]}"#, "requests[0].t: 9007199254741 s is past 9007199254740991 ms"),
        (r#"{"t":0,"type":"subagent"}"#, r#"requests[0]: missing member "requests""#),
        (r#"{"t":0,"type":"subagent","requests":[7]}"#, "requests[0].requests[0]: expected an object, found a number"),
        ("[]", "requests[0]: expected an object, found an array"),
    ];
    for (entry, reason) in bad {
        assert_eq!(
            problems(&[&session(entry)]),
            vec![format!("f1.json: {reason}")],
            "{entry}"
        );
    }
    let over = r#"{"t":0,"type":"n","in":2097152,"out":1,"hash_ids":[]}"#
        .replace("[]", &format!("[{}]", vec!["1"; 32768].join(",")));
    assert_eq!(
        problems(&[&session(&over)]),
        vec!["f1.json: requests[0]: 2097153 tokens (in + out) exceed the scale limit of 2097152"]
    );
}

#[test]
fn the_document_members_and_the_syntax_are_checked() {
    let cases = [
        ("", "f1.json:1: invalid JSON: EOF while parsing a value at column 0"),
        ("{\"requests\": [", "f1.json:1: invalid JSON: EOF while parsing a list at column 14"),
        ("\u{feff}{}", "f1.json: invalid JSON: the file starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry"),
        ("[]", "f1.json: $: expected an object, found an array"),
        (r#"{"block_size":64,"hash_id_scope":"global","requests":[]}"#, r#"f1.json: hash_id_scope: only "local" is read, found "global""#),
        (r#"{"block_size":0,"hash_id_scope":"local","requests":[]}"#, "f1.json: block_size: expected an integer from 1 to 2097152, found 0"),
        (r#"{"block_size":64,"hash_id_scope":"local","requests":{}}"#, "f1.json: requests: expected an array, found an object"),
        (r#"{"block_size":64,"hash_id_scope":"local"}"#, r#"f1.json: $: missing member "requests""#),
        (r#"{"block_size":64,"requests":[]}"#, r#"f1.json: $: missing member "hash_id_scope""#),
        (r#"{"block_size":64,"hash_id_scope":"local","requests":[{"t":1e400}]}"#, "f1.json:1: invalid JSON: number out of range at column 63"),
    ];
    for (text, line) in cases {
        assert_eq!(problems(&[text]), vec![line.to_owned()], "{text:?}");
    }
}

#[test]
fn every_file_is_checked_and_nothing_is_handed_on_after_a_refusal() {
    let bad = session(&request("-1", "64", "[1]"));
    let good = session(&request("0", "64", "[1]"));
    let import = WekaImport {
        files: vec!["a.json".into(), "b.json".into(), "c.json".into()],
        refusals: Vec::new(),
        options: WekaOptions::default(),
    };
    let sources: Vec<Source<'_>> = [&good, &bad, &bad]
        .iter()
        .map(|t| Box::new(t.as_bytes()) as Source<'_>)
        .collect();
    let mut handed = 0;
    let error = import.import(sources, &mut |_| handed += 1).unwrap_err();
    assert_eq!(error.lines().len(), 2, "{error}");
    assert!(error.lines()[1].starts_with("c.json: requests[0].t"));
    // Session 1 starts at 0, before session 2 is read, so its request was handed on:
    // the caller discards it, as every rejected import's events.
    assert!(handed <= 1);
}

#[test]
fn sessions_without_requests_are_counted_and_none_at_all_is_nothing_to_route() {
    let empty = session("");
    let error = import(&[&empty, &empty]).unwrap_err();
    assert_eq!(
        error.lines(),
        vec!["kvroute import weka: nothing to route: the 2 sessions hold no request"]
    );
    assert!(matches!(error, ImportError::Empty(_)));
    let (_, report) = import(&[&empty, TRACE_C]).unwrap();
    assert!(report.lines[0].starts_with("sessions: 2 (1 with no request), 0 sub-agents"));
}

#[test]
fn the_options_are_checked_before_any_file() {
    let options = WekaOptions {
        workers: 0,
        tenant: String::new(),
        session_rate_milli: 0,
        ..WekaOptions::default()
    };
    let error = import_with(&["not json"], options).unwrap_err();
    assert_eq!(
        error.lines(),
        vec![
            "kvroute import weka: workers: expected 1 to 4096 (the scale limit), found 0",
            "kvroute import weka: tenant: expected a non-empty string",
            "kvroute import weka: session_rate: expected 0.001 to 1000 sessions per second, found 0",
        ]
    );
}

#[test]
fn at_most_a_hundred_problems_are_listed() {
    let entries = vec![request("-1", "64", "[1]"); 150].join(",");
    let lines = problems(&[&session(&entries)]);
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[100], "kvroute import weka: ... and 50 more errors");
}

#[test]
fn a_directory_stands_for_its_json_files_in_name_order() {
    let dir = std::env::temp_dir().join(format!("kvroute-weka-listing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub.json")).unwrap();
    for name in ["b.json", "a.json", "B.json", "notes.txt"] {
        std::fs::write(dir.join(name), "{}").unwrap();
    }
    let (files, problems) = session_files(&[dir.clone(), PathBuf::from("-")]);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["B.json", "a.json", "b.json", "-"]);
    assert!(problems.is_empty());
    let empty = dir.join("sub.json");
    let (files, problems) = session_files(std::slice::from_ref(&empty));
    assert!(files.is_empty());
    assert_eq!(
        problems[0].to_string(),
        format!("{}: no .json file in the directory", empty.display())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn runs_of_ids_group_into_segments_keyed_by_their_hash() {
    let options = WekaOptions {
        blocks_per_segment: 2,
        ..WekaOptions::default()
    };
    let (trace, report) = import_with(&[TRACE_A], options.clone()).unwrap();
    let keys = requests(&trace);
    // s1-r1's ids [1, 2] and s1-r4's first run are the same run: the same key.
    let run_1_2 = format!(
        "s1-g{:016x}",
        xxhash_rust::xxh3::xxh3_64(&[1u64.to_le_bytes(), 2u64.to_le_bytes()].concat())
    );
    assert_eq!(keys[0].2, vec![format!("{run_1_2}:128")]);
    assert_eq!(keys[3].2[0], format!("{run_1_2}:128"));
    assert_eq!(keys[3].2.len(), 2);
    // The sub-agent's [5, 6, 7] is a run of two and a run of one.
    assert_eq!(keys[2].2.len(), 2);
    assert!(keys[2].2[1].ends_with(":64"));
    assert_eq!(report.counted(), "4 requests, 8 workers, 6 segments");
    // A named partial last block ends the last run's tokens.
    let text = session(&request("0", "150", "[1, 2, 3]"));
    let (trace, _) = import_with(&[&text], options).unwrap();
    let tokens: Vec<String> = requests(&trace)[0]
        .2
        .iter()
        .map(|k| k.rsplit(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(tokens, vec!["128", "22"]);
    let bad = WekaOptions {
        blocks_per_segment: 0,
        ..WekaOptions::default()
    };
    assert!(import_with(&[TRACE_C], bad).unwrap_err().lines()[0]
        .contains("blocks_per_segment: expected 1 to 65536, found 0"));
}
