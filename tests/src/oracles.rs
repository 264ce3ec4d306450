//! Oracles for fuzzing (in wasmtime's sense): each takes one generated case and panics
//! if it exposes a bug. The cargo-fuzz targets in `fuzz/` are one-line calls into these,
//! and `tests/tests/fuzz_oracles.rs` runs them on seeded bytes under plain `cargo test`,
//! so the fuzz logic is tested without a fuzzer.

use crate::differential::{self, Agreement};
use crate::generators::{parse_error_path, TraceRecipe};
use arbitrary::Arbitrary;
use kvroute_core::output::CsvIds;
use kvroute_core::output::{jcs_bytes, sha256_tag};
use serde_json::Value;

/// Arbitrary bytes as a trace: never a panic, core and oracle agree on acceptance,
/// and every rejection names a JSON path.
pub fn parse_trace(data: &[u8]) {
    match differential::compare(data) {
        Ok(Agreement::Accepted(_)) => {}
        Ok(Agreement::Rejected(lines)) => {
            assert!(!lines.is_empty(), "a rejection without a reason");
            // Past 100 errors the last line is a count, not an error (SPEC.md §2.3).
            let errors = match lines.last() {
                Some(last) if last.starts_with("... and ") && lines.len() == 101 => &lines[..100],
                _ => &lines[..],
            };
            for line in errors {
                let path = parse_error_path(line);
                assert!(
                    path.is_some_and(|p| line.len() > p.len() + 2),
                    "an error line without a PATH: reason shape: {line:?}"
                );
            }
        }
        Err(divergence) => panic!("core and oracle disagree: {divergence}"),
    }
}

/// The typed writers' check: receipt bytes are exactly the RFC 8785 form of their own
/// parse, as the generic canonicalizer writes it, and their `receipt_digest` is the
/// digest of that form without the member.
///
/// The canonicalizer runs once. Once the bytes are known to be canonical, the form
/// without `receipt_digest` is those bytes with the member cut out (JCS writes each
/// member independently of the others), so the digest is checked on that slice rather
/// than on a second canonicalisation, which was a third of a fuzz execution. Returns
/// the parse, for callers that go on to read the receipt.
pub fn assert_canonical_receipt(bytes: &[u8], what: &str) -> Value {
    let parsed: Value = serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{what}: the receipt is not JSON: {e}"));
    let canonical = jcs_bytes(&parsed);
    assert!(
        canonical == bytes,
        "{what}: the receipt bytes are not the canonical form of their parse: {}",
        differential::first_receipt_difference(bytes, &canonical, "typed", "canonical")
    );
    let claimed = parsed["receipt_digest"].as_str();
    assert_eq!(
        claimed,
        without_member(&parsed, bytes, "receipt_digest")
            .map(|body| sha256_tag(&body))
            .as_deref(),
        "{what}: receipt_digest"
    );
    parsed
}

/// The canonical bytes of `parsed` without its top-level member `name`, cut from
/// `canonical` (which must be `parsed`'s canonical form); `None` if it has no such member.
pub fn without_member(parsed: &Value, canonical: &[u8], name: &str) -> Option<Vec<u8>> {
    let members = parsed.as_object()?;
    let value = members.get(name)?;
    // The members sorting before `name` (RFC 8785 orders by UTF-16 code units), written
    // canonically, are the bytes after `{`; then comes the member itself.
    let utf16 = |s: &str| s.encode_utf16().collect::<Vec<u16>>();
    let before: serde_json::Map<String, Value> = members
        .iter()
        .filter(|(key, _)| utf16(key) < utf16(name))
        .map(|(key, v)| (key.clone(), v.clone()))
        .collect();
    let head = jcs_bytes(&Value::Object(before));
    let head = &head[..head.len() - 1]; // without its closing `}`
    let member = jcs_bytes(&serde_json::json!({ name: value }));
    let member = &member[1..member.len() - 1]; // `"name":value`
    let mut out = head.to_vec();
    let rest = &canonical[head.len()..];
    let rest = if head.len() == 1 {
        // First member: cut it and the comma after it, if any.
        let after = rest.strip_prefix(member)?;
        after.strip_prefix(b",").unwrap_or(after)
    } else {
        rest.strip_prefix(b",")?.strip_prefix(member)?
    };
    out.extend_from_slice(rest);
    Some(out)
}

/// A generated trace through core and oracle: canonical bytes equal, and they are the
/// canonical form of their own parse (each side writes them without a canonicalizer).
pub fn differential(recipe: &TraceRecipe) {
    let bytes = recipe.build_bytes();
    let reproduce = "cargo fuzz run differential --sanitizer none <the crash file>";
    match differential::assert_agree("fuzz-differential", &bytes, reproduce) {
        Agreement::Rejected(lines) => panic!("a generated trace was rejected: {lines:?}"),
        Agreement::Accepted(receipt) => {
            assert_canonical_receipt(&receipt, "fuzz-differential");
        }
    }
}

/// One edit to a receipt, aimed at a location chosen among its values.
#[derive(Arbitrary, Debug, Clone)]
pub struct ReceiptEdit {
    location: u16,
    kind: u8,
    amount: u32,
}

/// A genuine receipt and edits to apply to it; `resign` recomputes the digest after
/// editing, as a careful forger would, so only the semantic checks can catch it.
#[derive(Arbitrary, Debug, Clone)]
pub struct ReceiptCase {
    pub recipe: TraceRecipe,
    pub edits: Vec<ReceiptEdit>,
    pub resign: bool,
}

/// Every value location in `value`, as JSON pointers, in document order.
fn locations(value: &Value, pointer: String, out: &mut Vec<String>) {
    out.push(pointer.clone());
    match value {
        Value::Object(members) => {
            for (key, child) in members {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                locations(child, format!("{pointer}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                locations(child, format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn apply(receipt: &mut Value, edit: &ReceiptEdit) {
    let mut all = Vec::new();
    locations(receipt, String::new(), &mut all);
    let pointer = all[edit.location as usize % all.len()].clone();
    let Some(target) = receipt.pointer_mut(&pointer) else {
        return;
    };
    match (edit.kind % 4, &mut *target) {
        (0, Value::Number(n)) => {
            let v = n.as_u64().unwrap_or(0);
            *n = serde_json::Number::from((v + edit.amount as u64 % 3 + 1) % (1 << 53));
        }
        (1, Value::Array(items)) if !items.is_empty() => {
            items.remove(edit.amount as usize % items.len());
        }
        (2, Value::Array(items)) if !items.is_empty() => {
            let copy = items[edit.amount as usize % items.len()].clone();
            items.push(copy);
        }
        (_, Value::Bool(b)) => *b = !*b,
        (_, Value::String(s)) => s.push(char::from(b'a' + (edit.amount % 26) as u8)),
        (_, Value::Null) => *target = Value::from("w0"),
        (_, Value::Number(n)) => *n = serde_json::Number::from(edit.amount),
        (_, Value::Object(members)) => {
            let key = members
                .keys()
                .nth(edit.amount as usize % members.len().max(1))
                .cloned();
            if let Some(key) = key {
                members.remove(&key);
            }
        }
        (_, other) => *other = Value::Null,
    }
}

/// A receipt case's three inputs: the generated trace, core's genuine receipt (checked
/// canonical) and the receipt after the case's edits (re-signed when `resign`), written
/// canonically. The verifier under test lives in the CLI, which depends on this crate,
/// so the fuzz oracle that runs it is `kvroute_cli::verify::fuzz::receipt_verify`.
pub fn receipt_case_bytes(case: &ReceiptCase) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let trace = case.recipe.build_bytes();
    let genuine_bytes = kvroute_core::replay_bytes(&trace).expect("generated traces are valid");
    let genuine = assert_canonical_receipt(&genuine_bytes, "fuzz-receipt-verify");
    let mut edited = genuine;
    for edit in case.edits.iter().take(4) {
        apply(&mut edited, edit);
    }
    if case.resign {
        if let Some(object) = edited.as_object_mut() {
            object.remove("receipt_digest");
            let digest = sha256_tag(&jcs_bytes(&edited));
            edited["receipt_digest"] = Value::String(digest);
        }
    }
    let edited_bytes = jcs_bytes(&edited);
    (trace, genuine_bytes, edited_bytes)
}

/// The CSV records a receipt's JSON gives, one a candidate row, in the column order of
/// SPEC.md §6.3, built from the JSON alone.
fn expected_csv_records(json: &Value) -> Vec<Vec<String>> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let joined = |v: &Value| {
        v.as_array()
            .map(|items| items.iter().map(text).collect::<Vec<_>>().join(";"))
            .unwrap_or_default()
    };
    let mut expected: Vec<Vec<String>> = Vec::new();
    for run in json["runs"].as_array().into_iter().flatten() {
        for d in run["decisions"].as_array().into_iter().flatten() {
            for r in d["candidates"].as_array().into_iter().flatten() {
                let mut record = vec![
                    text(&run["policy"]),
                    text(&d["seq"]),
                    text(&d["tick"]),
                    text(&d["request"]),
                    text(&d["chosen"]),
                    text(&d["route_kind"]),
                    text(&r["worker"]),
                    text(&r["eligible"]),
                    joined(&r["reasons"]),
                ];
                for field in [
                    "reuse",
                    "recomputed",
                    "queued_prefill",
                    "active_decode",
                    "work_milli",
                    "after_milli",
                    "cost_milli",
                ] {
                    record.push(text(&r[field]));
                }
                record.push(text(&r["dominated_by"]));
                record.push(text(&r["dominated_count"]));
                expected.push(record);
            }
        }
    }
    expected
}

/// The CSV export parses back, with the `csv` crate, into exactly the receipt's
/// candidate rows (rebuilt here from the receipt JSON, not from core's exporter).
pub fn csv_export(recipe: &TraceRecipe) {
    let trace =
        kvroute_core::parse_trace(&recipe.build_bytes()).expect("generated traces are valid");
    let receipt = kvroute_core::replay::receipt(&trace);
    // Plain ids: this checks the CSV reads back into the receipt's own values.
    let csv_bytes =
        kvroute_core::output::csv_bytes(&receipt.worker_ids, &receipt.runs, CsvIds::Plain)
            .expect("CSV into memory");
    let json: Value =
        serde_json::from_slice(&receipt.canonical_bytes()).expect("receipts are JSON");

    let expected = expected_csv_records(&json);

    let mut reader = csv::Reader::from_reader(csv_bytes.as_slice());
    let header: Vec<String> = reader
        .headers()
        .expect("the CSV has a header")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(header, kvroute_core::output::CSV_COLUMNS.to_vec());
    let parsed: Vec<Vec<String>> = reader
        .records()
        .map(|r| {
            r.expect("every CSV record parses")
                .iter()
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(
        parsed.len(),
        expected.len(),
        "one CSV line per candidate row"
    );
    for (i, (got, want)) in parsed.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "CSV record {i}");
    }
}

/// The request log every fuzzed engine-event capture is imported with: one request of
/// two blocks of 16 tokens, so that the imported trace has a model and a prefix.
const ENGINE_REQUESTS: &str = r#"{"arrival_ms":1789095808000,"id":"r","model":"m","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"output_tokens":4}"#;

/// Arbitrary bytes as an engine-event import (SPEC.md §13): with the first byte even,
/// the rest is one MessagePack payload, wrapped in a capture line whose seq is the
/// byte's half (so both decoders' layouts are reached without base64 in the way); odd,
/// the rest is the capture's text. The import never panics, and every trace it
/// accepts validates in core and in the oracle to the same canonical bytes.
pub fn import_engine_events(data: &[u8]) {
    use base64::Engine as _;
    use kvroute_core::import::{self, EventsOptions};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let capture = match mode % 2 {
        0 => format!(
            r#"{{"endpoint":"tcp://e:1","topic":"t","seq":{},"payload_b64":"{}"}}"#,
            mode / 2,
            base64::engine::general_purpose::STANDARD.encode(rest)
        )
        .into_bytes(),
        _ => rest.to_vec(),
    };
    let options = EventsOptions {
        block_tokens: [16, 2, 1, 32][(mode as usize >> 1) % 4],
        ..EventsOptions::default()
    };
    let Ok((trace, _report)) =
        import::import_engine_events(&capture[..], ENGINE_REQUESTS.as_bytes(), &options)
    else {
        return;
    };
    let bytes = kvroute_core::output::canonical_trace_bytes(&trace);
    // More than 4,096 publishers, or figures past the overflow bound, are the
    // validation errors an import may meet (SPEC.md §13.5): both readers must agree.
    let core = kvroute_core::parse_trace(&bytes)
        .map(|t| kvroute_core::output::canonical_trace_bytes(&t))
        .map_err(|e| e.lines());
    assert_eq!(
        core,
        kvroute_oracle::validate(&bytes),
        "core and the oracle disagree"
    );
    if let Ok(canonical) = core {
        assert_eq!(
            canonical, bytes,
            "an imported trace is canonical as written"
        );
    }
}

/// Arbitrary bytes as a Mooncake JSONL file (the first byte picks the worker count, the
/// block size and `--dynamo-block-tokens`, 0 included): the import never panics, and
/// every trace it accepts validates.
pub fn import_mooncake(data: &[u8]) {
    use kvroute_core::harness::{check_mooncake, import_mooncake_each};
    use kvroute_core::import::{import_mooncake, MooncakeOptions};
    use kvroute_core::output::{canonical_trace_bytes, CanonicalTraceStream};
    let (options, input) = match data.split_first() {
        Some((&b, rest)) => (
            MooncakeOptions {
                workers: 1 + (b % 16) as u32,
                block_tokens: [1, 16, 512, 4096][(b >> 4) as usize % 4],
                dynamo_block_tokens: [None, Some(0), Some(512), Some(1000)][(b >> 6) as usize],
                ..MooncakeOptions::default()
            },
            rest,
        ),
        None => (MooncakeOptions::default(), data),
    };
    let whole = import_mooncake(input, &options);
    // The CLI's import streams: its checking pass must agree with the whole import on
    // acceptance and errors, and its writer must produce the same bytes.
    let checked = check_mooncake(input, &options);
    let mut stream = CanonicalTraceStream::new(Vec::new()).expect("writing into memory");
    let streamed = import_mooncake_each(input, &options, |event| {
        stream
            .event(&event)
            .expect("events come in canonical order")
    });
    match whole {
        Ok(trace) => {
            let bytes = canonical_trace_bytes(&trace);
            if let Err(errors) = kvroute_core::parse_trace(&bytes) {
                panic!("an imported trace does not validate: {errors}");
            }
            assert!(
                checked.is_ok(),
                "the checking pass rejects an accepted import"
            );
            let head = streamed.expect("the streamed import accepts it too");
            let (streamed_bytes, _) = stream.finish(&head).expect("writing into memory");
            assert!(
                streamed_bytes == bytes,
                "the streamed import writes other bytes"
            );
        }
        Err(errors) => {
            assert_eq!(checked.as_ref().err(), Some(&errors), "the checking pass");
            assert_eq!(
                streamed.as_ref().err(),
                Some(&errors),
                "the streamed import"
            );
        }
    }
}

/// Arbitrary bytes as Weka session files (SPEC.md §19): the first byte picks the
/// options, the rest is split into up to four files at each `0x00`. No panic; an
/// accepted import validates and is canonical; the checking pass agrees with it.
pub fn import_weka(data: &[u8]) {
    use kvroute_core::import::{Source, WekaImport, WekaOptions};
    let (options, rest) = match data.split_first() {
        Some((&b, rest)) => (
            WekaOptions {
                workers: 1 + u32::from(b % 4),
                blocks_per_segment: [1, 2, 16, 0][usize::from(b >> 2) % 4],
                session_rate_milli: [100, 1_000_000, 1, 0][usize::from(b >> 4) % 4],
                seed: u64::from(b >> 6),
                ..WekaOptions::default()
            },
            rest,
        ),
        None => (WekaOptions::default(), data),
    };
    let files: Vec<&[u8]> = rest.splitn(4, |&byte| byte == 0).collect();
    let import = WekaImport {
        files: (0..files.len())
            .map(|i| format!("f{i}.json").into())
            .collect(),
        refusals: Vec::new(),
        options,
    };
    let sources = || -> Vec<Source<'_>> {
        files
            .iter()
            .map(|bytes| Box::new(*bytes) as Source<'_>)
            .collect()
    };
    through_the_trait(&import, sources);
}

/// Arbitrary bytes as a Qwen-Bailian JSONL file (the first byte picks the worker
/// count and the block size, 0 included): the import never panics, and passes
/// [`through_the_trait`]'s checks.
pub fn import_bailian(data: &[u8]) {
    use kvroute_core::import::{BailianImport, BailianOptions, Source};
    let (options, input) = match data.split_first() {
        Some((&b, rest)) => (
            BailianOptions {
                workers: (b % 16) as u32,
                block_tokens: [0, 1, 16, 512][(b >> 4) as usize % 4],
                ..BailianOptions::default()
            },
            rest,
        ),
        None => (BailianOptions::default(), data),
    };
    let importer = BailianImport {
        file: "fuzz.jsonl".into(),
        options,
    };
    let sources = || -> Vec<Source<'_>> { vec![Box::new(input)] };
    through_the_trait(&importer, sources);
}

/// An importer's checks on `sources` (called once for the check, once for the import):
/// the checking pass accepts and refuses what the import does, with the same errors,
/// and an accepted import's streamed bytes validate, are canonical and are the events
/// it handed on.
fn through_the_trait<'s>(
    importer: &dyn kvroute_core::import::Importer,
    sources: impl Fn() -> Vec<kvroute_core::import::Source<'s>>,
) {
    use kvroute_core::output::{canonical_trace_bytes, CanonicalTraceStream};
    let checked = importer.check(sources());
    let mut stream = CanonicalTraceStream::new(Vec::new()).expect("writing into memory");
    let mut events = Vec::new();
    let imported = importer.import(sources(), &mut |event| {
        stream
            .event(&event)
            .expect("events come in canonical order");
        events.push(event);
    });
    match imported {
        Ok(imported) => {
            assert!(
                checked.is_ok(),
                "the checking pass rejects an accepted import"
            );
            let (bytes, _) = stream.finish(&imported.head).expect("writing into memory");
            let trace = kvroute_core::parse_trace(&bytes)
                .unwrap_or_else(|errors| panic!("an imported trace does not validate: {errors}"));
            assert!(
                canonical_trace_bytes(&trace) == bytes,
                "the import is not canonical"
            );
            assert_eq!(
                trace.events, events,
                "the trace is not the events handed on"
            );
        }
        Err(error) => assert_eq!(checked.err(), Some(error), "the checking pass"),
    }
}

/// A generated trace run closed-loop under engine settings drawn from the bytes.
#[derive(Debug, Arbitrary)]
pub struct LoopCase {
    pub recipe: TraceRecipe,
    pub capacity_in_blocks: bool,
    pub capacity: u16,
    pub lag_ticks: u8,
    pub jitter_ticks: u8,
    pub jitter_seed: u8,
}

/// Every policy's generated trace replays open-loop to the loop's own run, core and the
/// oracle agree on it byte for byte, and the oracle's own engine model generates the
/// same traces and figures (SPEC.md §11).
pub fn closed_loop(case: &LoopCase) {
    use kvroute_core::simulate::{self, Capacity, SimulateOptions};
    let trace =
        kvroute_core::parse_trace(&case.recipe.build_bytes()).expect("generated traces are valid");
    let (sim, _) = simulate::simulation_trace(&trace, None).expect("the recipe has workers");
    let options = SimulateOptions {
        capacity: if case.capacity_in_blocks {
            Capacity::Blocks(case.capacity as u64 % 64)
        } else {
            Capacity::Tokens(case.capacity as u64)
        },
        publication_lag_ticks: case.lag_ticks as u64 % 8,
        jitter_ticks: case.jitter_ticks as u64 % 16,
        jitter_seed: case.jitter_seed as u64,
        loss_per_mille: 0,
    };
    let settings = crate::engine_model::SimSettings {
        workers: None,
        options: options.clone(),
        // 1 to 256 ticks a ms: floors at every step of the record arithmetic.
        ticks_per_ms: 1 + u64::from(case.jitter_seed),
        worker_names: kvroute_core::simulate::WorkerNames::W,
    };
    crate::engine_model::assert_simulations_agree(
        "fuzz-closed-loop",
        &case.recipe.build_bytes(),
        &settings,
    );
    for reproduced in crate::closed_loop::check_reproduction(&sim, &options, "fuzz-closed-loop") {
        differential::assert_agree(
            "fuzz-closed-loop",
            &reproduced.trace_bytes,
            "cargo fuzz run closed_loop --sanitizer none <the crash file>",
        );
    }
}
