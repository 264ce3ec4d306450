//! Writes the committed fuzz seed corpora under `fuzz/seeds/<target>/` (`just fuzz-seed`).
//!
//! `parse_trace` starts from every fixture trace, valid and invalid. The structured
//! targets read their input through `Arbitrary`, so their seeds are the byte blocks of
//! the sweep's first seeds: the same traces `kvroute swarm` starts from.

use kvroute_harness::fixtures;
use kvroute_harness::reorder::seeded_rng;
use proptest::prelude::Rng;
use std::path::PathBuf;

const STRUCTURED_SEEDS: u64 = 24;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let parse = root.join("parse_trace");
    std::fs::create_dir_all(&parse)?;
    for topic in fixtures::valid_topics() {
        std::fs::write(
            parse.join(format!("{topic}.json")),
            fixtures::trace_bytes(&topic),
        )?;
    }
    for case in fixtures::invalid_cases() {
        let trace = std::fs::read(fixtures::invalid_dir(&case).join("trace.json"))?;
        std::fs::write(parse.join(format!("invalid-{case}.json")), trace)?;
    }
    for target in ["differential", "receipt_verify", "csv_export"] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for seed in 0..STRUCTURED_SEEDS {
            let mut bytes = vec![0u8; 2048];
            seeded_rng(seed).fill_bytes(&mut bytes);
            std::fs::write(dir.join(format!("seed-{seed}")), bytes)?;
        }
    }
    println!("wrote fuzz seeds under {}", root.display());
    Ok(())
}
