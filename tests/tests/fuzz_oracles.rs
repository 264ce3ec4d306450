//! The fuzz oracles on seeded bytes, so their logic runs under plain `cargo test`
//! without a fuzzer, plus every committed fuzz seed and regression input.

use arbitrary::{Arbitrary, Unstructured};
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::oracles::{self, LoopCase, ReceiptCase};
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
    for seed in 0..30 {
        let bytes = seeded_bytes(seed, 2048);
        let case = LoopCase::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        oracles::closed_loop(&case);
    }
}

#[test]
fn receipt_verify_on_seeded_edits() {
    for seed in 0..60 {
        let bytes = seeded_bytes(seed, 4096);
        let case = ReceiptCase::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        oracles::receipt_verify(&case);
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
            "receipt_verify",
            "csv_export",
            "import_mooncake",
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
                    "closed_loop" => {
                        if let Ok(case) = LoopCase::arbitrary_take_rest(u) {
                            oracles::closed_loop(&case);
                        }
                    }
                    _ => {
                        if let Ok(case) = ReceiptCase::arbitrary_take_rest(u) {
                            oracles::receipt_verify(&case);
                        }
                    }
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
