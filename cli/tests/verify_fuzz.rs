//! The `receipt_verify` fuzz oracle (`kvroute_cli::verify::fuzz`) on seeded bytes, and
//! on every committed seed and regression input of that target, under plain `cargo test`.

use arbitrary::{Arbitrary, Unstructured};
use kvroute_cli::verify::fuzz::receipt_verify;
use kvroute_harness::oracles::ReceiptCase;
use std::path::PathBuf;

/// Deterministic bytes for a seed (xorshift64*).
fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn receipt_verify_on_seeded_edits() {
    for seed in 0..60 {
        let bytes = seeded_bytes(seed, 4096);
        let case = ReceiptCase::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        receipt_verify(&case);
    }
}

#[test]
fn committed_receipt_verify_inputs_replay() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("receipt_verify")) else {
            continue;
        };
        for entry in entries {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(case) = ReceiptCase::arbitrary_take_rest(Unstructured::new(&data)) {
                receipt_verify(&case);
            }
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no committed receipt_verify inputs");
}
