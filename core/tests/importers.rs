//! Every input format through the one [`Importer`] trait: the events it hands to the
//! sink, written by the streaming canonical writer with the head it returns, are the
//! canonical bytes of the trace its own whole-trace function builds, and its errors are
//! one type whose lines name the input file and line (or the command, for the inputs
//! as a whole).

use kvroute_core::import::{
    import_dynamo_events, import_engine_events, EngineEventsImport, EngineFormat, EventsOptions,
};
use kvroute_core::import::{import_mooncake, MooncakeImport, MooncakeOptions};
use kvroute_core::import::{BailianImport, BailianOptions};
use kvroute_core::import::{ImportError, Importer, Source};
use kvroute_core::output::{canonical_trace_bytes, CanonicalTraceStream};
use std::path::PathBuf;

const ENGINE_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/engine_events");
const MOONCAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/mooncake/three-lines.jsonl"
);

const BAILIAN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/bailian/four-lines.jsonl"
);
const BAILIAN_GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/bailian/four-lines.trace.json"
);

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Runs `importer` on `inputs` as its sources: the canonical bytes the CLI would write,
/// and the report's first-line counts; or the error's lines.
fn run(importer: &dyn Importer, inputs: &[&[u8]]) -> Result<(Vec<u8>, String), Vec<String>> {
    let sources: Vec<Source<'_>> = inputs
        .iter()
        .map(|bytes| Box::new(*bytes) as Source<'_>)
        .collect();
    let mut stream = CanonicalTraceStream::new(Vec::new()).unwrap();
    let imported = importer
        .import(sources, &mut |event| stream.event(&event).unwrap())
        .map_err(|e| e.lines())?;
    let (bytes, _digest) = stream.finish(&imported.head).unwrap();
    Ok((bytes, imported.report.counted()))
}

fn engine(format: EngineFormat, capture: &str, requests: &str) -> EngineEventsImport {
    EngineEventsImport {
        format,
        capture: PathBuf::from(capture),
        requests: PathBuf::from(requests),
        options: EventsOptions::default(),
    }
}

#[test]
fn mooncake_through_the_trait_writes_the_whole_imports_trace() {
    let lines = read(MOONCAKE);
    let importer = MooncakeImport {
        file: PathBuf::from("three-lines.jsonl"),
        options: MooncakeOptions::default(),
    };
    assert_eq!(importer.name(), "mooncake");
    let (bytes, counts) = run(&importer, &[&lines]).unwrap();
    let whole = import_mooncake(&lines[..], &MooncakeOptions::default()).unwrap();
    assert_eq!(bytes, canonical_trace_bytes(&whole));
    assert_eq!(counts, "3 requests, 8 workers, 4 segments");
}

#[test]
fn bailian_through_the_trait_writes_its_golden_trace() {
    // The golden was checked by hand against SPEC.md §18.1 (cli/tests/bailian.rs says
    // what); the streamed bytes are the canonical trace followed by one newline.
    let importer = BailianImport {
        file: PathBuf::from("four-lines.jsonl"),
        options: BailianOptions::default(),
    };
    assert_eq!(importer.name(), "bailian");
    let (bytes, counts) = run(&importer, &[&read(BAILIAN)]).unwrap();
    let golden = read(BAILIAN_GOLDEN);
    assert_eq!(bytes, golden.strip_suffix(b"\n").unwrap_or(&golden));
    assert_eq!(counts, "4 requests, 8 workers, 11 segments");
}

#[test]
fn engine_events_through_the_trait_write_the_whole_imports_trace() {
    let requests = read(&format!("{ENGINE_FIXTURES}/requests.jsonl"));
    for (format, capture) in [
        (EngineFormat::Vllm, "vllm.capture.jsonl"),
        (EngineFormat::Sglang, "sglang.capture.jsonl"),
        (EngineFormat::Dynamo, "dynamo.events.jsonl"),
    ] {
        let events = read(&format!("{ENGINE_FIXTURES}/{capture}"));
        let importer = engine(format, capture, "requests.jsonl");
        let (bytes, _) = run(&importer, &[&events, &requests]).unwrap();
        let options = EventsOptions::default();
        let whole = match format {
            EngineFormat::Dynamo => import_dynamo_events(&events[..], &requests[..], &options),
            _ => import_engine_events(&events[..], &requests[..], &options),
        };
        let (trace, _report) = whole.unwrap();
        assert_eq!(bytes, canonical_trace_bytes(&trace), "{}", importer.name());
    }
}

#[test]
fn errors_name_the_input_and_its_line_or_the_command() {
    let importer = MooncakeImport {
        file: PathBuf::from("in.jsonl"),
        options: MooncakeOptions::default(),
    };
    let lines = read(MOONCAKE);
    let first = lines.split(|&b| b == b'\n').next().unwrap();
    let bad = [first, b"\n{}\n"].concat();
    let errors = run(&importer, &[&bad]).unwrap_err();
    assert!(errors[0].starts_with("in.jsonl:2: "), "{errors:?}");
    assert_eq!(
        run(&importer, &[b""]).unwrap_err(),
        ["in.jsonl: no requests: the file is empty"]
    );

    let capture = read(&format!("{ENGINE_FIXTURES}/vllm.capture.jsonl"));
    let importer = engine(EngineFormat::Vllm, "cap.jsonl", "req.jsonl");
    let errors = run(&importer, &[&capture, b"{}\n"]).unwrap_err();
    assert!(errors[0].starts_with("req.jsonl:1: "), "{errors:?}");
    let errors = run(&importer, &[b"\n", b"{}\n"]).unwrap_err();
    assert!(errors[0].starts_with("req.jsonl:1: "), "{errors:?}");
    assert!(
        errors.contains(&"cap.jsonl:1: empty line".to_owned()),
        "{errors:?}"
    );
    assert_eq!(
        run(&importer, &[&capture]).unwrap_err(),
        ["kvroute import vllm-events: 2 inputs are read, 1 were opened"]
    );
}

#[test]
fn inputs_with_nothing_to_route_are_empty_not_rejected() {
    let capture = read(&format!("{ENGINE_FIXTURES}/vllm.capture.jsonl"));
    let importer = engine(EngineFormat::Sglang, "cap.jsonl", "req.jsonl");
    let sources: Vec<Source<'_>> = vec![Box::new(&capture[..]), Box::new(&b""[..])];
    match importer.import(sources, &mut |_| {}) {
        Err(ImportError::Empty(problem)) => assert_eq!(
            problem.to_string(),
            "kvroute import sglang-events: req.jsonl: nothing to route: no request"
        ),
        other => panic!("expected nothing to import, got {other:?}"),
    }
}

#[test]
fn an_input_that_cannot_be_read_is_named_with_what_the_format_calls_it() {
    let mooncake = MooncakeImport {
        file: PathBuf::from("gone.jsonl"),
        options: MooncakeOptions::default(),
    };
    let missing = || std::io::Error::from(std::io::ErrorKind::NotFound);
    let path = PathBuf::from("gone.jsonl");
    assert_eq!(
        mooncake.cannot_read(&path, missing()).lines(),
        ["gone.jsonl: cannot read Mooncake trace: entity not found"]
    );
    let events = engine(EngineFormat::Dynamo, "gone.jsonl", "req.jsonl");
    assert_eq!(
        events.cannot_read(&path, missing()).lines(),
        ["gone.jsonl: cannot read: entity not found"]
    );
}

#[test]
fn the_check_accepts_and_refuses_what_the_import_does_with_the_same_errors() {
    let lines = read(MOONCAKE);
    let bad_last_line = [&lines[..], b"{\"timestamp\": 6}\n"].concat();
    let mooncake = MooncakeImport {
        file: PathBuf::from("in.jsonl"),
        options: MooncakeOptions::default(),
    };
    let capture = read(&format!("{ENGINE_FIXTURES}/vllm.capture.jsonl"));
    let requests = read(&format!("{ENGINE_FIXTURES}/requests.jsonl"));
    let engine = engine(EngineFormat::Vllm, "cap.jsonl", "req.jsonl");
    let bailian_lines = read(BAILIAN);
    let bailian_bad_last = [&bailian_lines[..], b"{\"chat_id\": 9}\n"].concat();
    let bailian = BailianImport {
        file: PathBuf::from("in.jsonl"),
        options: BailianOptions::default(),
    };
    let cases: [(&dyn Importer, Vec<&[u8]>); 9] = [
        (&mooncake, vec![&lines]),
        (&mooncake, vec![&bad_last_line]),
        (&mooncake, vec![b""]),
        (&engine, vec![&capture, &requests]),
        (&engine, vec![&capture, b"{}\n"]),
        (&engine, vec![&capture, b""]),
        (&bailian, vec![&bailian_lines]),
        (&bailian, vec![&bailian_bad_last]),
        (&bailian, vec![b""]),
    ];
    for (importer, inputs) in cases {
        let sources = || -> Vec<Source<'_>> {
            inputs
                .iter()
                .map(|bytes| Box::new(*bytes) as Source<'_>)
                .collect()
        };
        let checked = importer.check(sources());
        let imported = importer.import(sources(), &mut |_| {}).map(|_| ());
        assert_eq!(checked, imported, "{}", importer.name());
    }
    assert!(mooncake.check(vec![Box::new(&bad_last_line[..])]).is_err());
}

#[test]
fn weka_through_the_trait_writes_the_trace_its_events_make() {
    use kvroute_core::import::{WekaImport, WekaOptions};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/weka/sessions");
    let sessions: Vec<Vec<u8>> = ["trace_a.json", "trace_b.json", "trace_c.json"]
        .iter()
        .map(|name| read(&format!("{dir}/{name}")))
        .collect();
    let importer = WekaImport::new(&[PathBuf::from(dir)], WekaOptions::default());
    assert_eq!(importer.name(), "weka");
    assert_eq!(importer.inputs().len(), 3);
    let inputs: Vec<&[u8]> = sessions.iter().map(Vec::as_slice).collect();
    let (bytes, counts) = run(&importer, &inputs).unwrap();
    assert_eq!(counts, "7 requests, 8 workers, 17 segments");
    let trace = kvroute_core::parse_trace(&bytes).expect("an accepted import validates");
    assert_eq!(bytes, canonical_trace_bytes(&trace));
    // The check pass refuses what the import refuses, with the same lines.
    let bad: Vec<&[u8]> = vec![inputs[0], b"{}", inputs[2]];
    let sources = || -> Vec<Source<'_>> {
        bad.iter()
            .map(|bytes| Box::new(*bytes) as Source<'_>)
            .collect()
    };
    let checked = importer.check(sources()).unwrap_err();
    assert_eq!(
        checked,
        importer.import(sources(), &mut |_| {}).unwrap_err()
    );
    assert!(checked.lines()[0].ends_with("trace_b.json: $: missing member \"block_size\""));
}
