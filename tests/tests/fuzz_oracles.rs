//! The fuzz oracles on seeded bytes, so their logic runs under plain `cargo test`
//! without a fuzzer, plus every committed fuzz seed and regression input. The
//! `receipt_verify` target's oracle runs the CLI's verifier, so its seeds and regressions
//! replay in `cli/tests/verify_fuzz.rs`.

use arbitrary::{Arbitrary, Unstructured};
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::oracles::{self, LoopCase};
use kvroute_harness::reorder::seeded_rng;
use proptest::prelude::Rng;
use std::path::PathBuf;

fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    seeded_rng(seed).fill_bytes(&mut bytes);
    bytes
}

#[test]
fn parse_trace_on_seeded_bytes_and_mangled_fixtures() {
    for seed in 0..200 {
        oracles::parse_trace(&seeded_bytes(seed, (seed as usize * 7) % 300));
    }
    // Valid JSON that is almost a trace reaches far deeper than random bytes do.
    let lab = kvroute_harness::fixtures::trace_bytes("stale_epoch");
    for seed in 0..300u64 {
        let mut mangled = lab.clone();
        let mut rng = seeded_rng(seed);
        for _ in 0..1 + seed % 3 {
            let i = (rng.next_u64() % mangled.len() as u64) as usize;
            mangled[i] = b"0-.e\"{}[],: x1"[(rng.next_u64() % 14) as usize];
        }
        oracles::parse_trace(&mangled);
    }
}

#[test]
fn differential_and_csv_export_on_seeded_recipes() {
    for seed in 0..60 {
        let recipe = TraceRecipe::from_seed(seed);
        oracles::differential(&recipe);
        oracles::csv_export(&recipe);
    }
}

#[test]
fn import_and_closed_loop_on_seeded_bytes() {
    let mooncake = std::fs::read(kvroute_harness::closed_loop::mooncake_path()).unwrap();
    for seed in 0..100u64 {
        // The head of the real trace, mangled a little: deep into the line rules.
        let mut bytes = vec![seed as u8];
        bytes.extend_from_slice(&mooncake[..2_000]);
        let mut rng = seeded_rng(seed);
        for _ in 0..seed % 4 {
            let i = 1 + (rng.next_u64() % 2_000) as usize;
            bytes[i] = b"0-.e\"{}[],: x1\n"[(rng.next_u64() % 15) as usize];
        }
        oracles::import_mooncake(&bytes);
    }
    for seed in 0..200 {
        oracles::import_engine_events(&seeded_bytes(seed, (seed as usize * 5) % 200));
    }
    let bailian = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/bailian/four-lines.jsonl"
    ))
    .unwrap();
    for seed in 0..200u64 {
        // The fixture mangled a little: deep into the line rules.
        let mut bytes = vec![seed as u8];
        bytes.extend_from_slice(&bailian);
        let mut rng = seeded_rng(seed);
        for _ in 0..seed % 5 {
            let i = 1 + (rng.next_u64() as usize % bailian.len());
            bytes[i] = b"0-.e\"{}[],: x1\n"[(rng.next_u64() % 15) as usize];
        }
        oracles::import_bailian(&bytes);
    }
    // Weka sessions: the fixture files, mangled a little, deep into the member rules.
    let weka = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/weka/sessions");
    let files: Vec<Vec<u8>> = ["trace_a.json", "trace_b.json"]
        .iter()
        .map(|name| std::fs::read(format!("{weka}/{name}")).unwrap())
        .collect();
    for seed in 0..200u64 {
        let mut bytes = vec![seed as u8];
        bytes.extend_from_slice(&files[0]);
        bytes.push(0);
        bytes.extend_from_slice(&files[1]);
        let mut rng = seeded_rng(seed);
        for _ in 0..seed % 4 {
            let i = 1 + (rng.next_u64() % (bytes.len() as u64 - 1)) as usize;
            bytes[i] = b"0-.e\"{}[],: x1\x00"[(rng.next_u64() % 15) as usize];
        }
        oracles::import_weka(&bytes);
    }
    for seed in 0..30 {
        let bytes = seeded_bytes(seed, 2048);
        let case = LoopCase::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        oracles::closed_loop(&case);
    }
}

/// Replays every file under `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`.
#[test]
fn committed_fuzz_inputs_replay() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        for target in [
            "parse_trace",
            "differential",
            "csv_export",
            "import_mooncake",
            "import_engine_events",
            "import_bailian",
            "import_weka",
            "closed_loop",
        ] {
            let dir = fuzz.join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let u = Unstructured::new(&data);
                match target {
                    "parse_trace" => oracles::parse_trace(&data),
                    "differential" => {
                        if let Ok(recipe) = TraceRecipe::arbitrary_take_rest(u) {
                            oracles::differential(&recipe);
                        }
                    }
                    "csv_export" => {
                        if let Ok(recipe) = TraceRecipe::arbitrary_take_rest(u) {
                            oracles::csv_export(&recipe);
                        }
                    }
                    "import_mooncake" => oracles::import_mooncake(&data),
                    "import_engine_events" => oracles::import_engine_events(&data),
                    "import_bailian" => oracles::import_bailian(&data),
                    "import_weka" => oracles::import_weka(&data),
                    "closed_loop" => {
                        if let Ok(case) = LoopCase::arbitrary_take_rest(u) {
                            oracles::closed_loop(&case);
                        }
                    }
                    _ => unreachable!("a target listed above"),
                }
                replayed += 1;
            }
        }
    }
    assert!(
        replayed > 0,
        "no committed fuzz inputs under {}",
        fuzz.display()
    );
}

/// The digest check cuts `receipt_digest` out of the canonical bytes instead of
/// canonicalising a second time: the cut must be the canonical form of the object
/// without the member, wherever the member sorts, and nothing when it is absent.
#[test]
fn cutting_a_member_from_canonical_bytes_is_the_canonical_form_without_it() {
    use kvroute_core::output::jcs_bytes;
    use serde_json::json;
    let cases = [
        json!({"format": "f", "receipt_digest": "d", "runs": [1, {"receipt_digest": 2}]}),
        json!({"receipt_digest": "d", "z": 1}),
        json!({"a": [], "receipt_digest": {"x": "y"}}),
        json!({"receipt_digest": 7}),
        json!({"a": "\u{e9}", "b": 1, "receipt_digest": null, "s": "receipt_digest"}),
    ];
    for case in cases {
        let canonical = jcs_bytes(&case);
        let mut expected = case.clone();
        expected.as_object_mut().unwrap().remove("receipt_digest");
        assert_eq!(
            oracles::without_member(&case, &canonical, "receipt_digest").as_deref(),
            Some(jcs_bytes(&expected).as_slice()),
            "{case}"
        );
    }
    let absent = json!({"format": "f", "runs": []});
    assert_eq!(
        oracles::without_member(&absent, &jcs_bytes(&absent), "receipt_digest"),
        None
    );
}

/// A receipt whose digest is not that of its body fails the canonical check, and so
/// does one whose bytes are not canonical.
#[test]
fn the_canonical_receipt_check_rejects_a_wrong_digest_and_non_canonical_bytes() {
    let genuine = kvroute_core::replay_bytes(&kvroute_harness::fixtures::trace_bytes("lab"))
        .expect("the lab trace is valid");
    oracles::assert_canonical_receipt(&genuine, "genuine");
    let text = String::from_utf8(genuine.clone()).unwrap();
    let at = text.find("\"sha256:").expect("a digest") + 8;
    let flipped = if text.as_bytes()[at] == b'0' {
        "1"
    } else {
        "0"
    };
    let wrong_digest = format!("{}{flipped}{}", &text[..at], &text[at + 1..]);
    let spaced = text.replacen(",", ", ", 1);
    for (bad, name) in [(wrong_digest, "wrong digest"), (spaced, "not canonical")] {
        let caught =
            std::panic::catch_unwind(|| oracles::assert_canonical_receipt(bad.as_bytes(), name));
        assert!(caught.is_err(), "{name}: the check passed");
    }
}
