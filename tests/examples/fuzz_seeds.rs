//! Writes the committed fuzz seed corpora under `fuzz/seeds/<target>/` (`just fuzz-seed`).
//!
//! `parse_trace` starts from every fixture trace, valid and invalid; `import_mooncake`
//! from the first lines of the real Mooncake trace; `import_engine_events` from the
//! engine-event fixtures, each payload alone and each capture whole. The structured
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
    // `import_mooncake` starts from the head of the real trace: one option byte, then lines.
    let mooncake = std::fs::read_to_string(kvroute_harness::closed_loop::mooncake_path())?;
    let import = root.join("import_mooncake");
    std::fs::create_dir_all(&import)?;
    for (i, lines) in [1usize, 3, 12].into_iter().enumerate() {
        let head: String = mooncake
            .lines()
            .take(lines)
            .map(|l| format!("{l}\n"))
            .collect();
        let mut bytes = vec![(i as u8) * 0x13];
        bytes.extend_from_slice(head.as_bytes());
        std::fs::write(import.join(format!("head-{lines}")), bytes)?;
    }
    // `import_engine_events` starts from the engine fixtures: each payload alone (an
    // even option byte) and each capture whole (an odd one).
    let engines = root.join("import_engine_events");
    std::fs::create_dir_all(&engines)?;
    let fixtures_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/engine_events");
    for name in [
        "vllm",
        "sglang",
        "kthena-1535",
        "chain-replayed",
        "two-publishers",
    ] {
        let capture = std::fs::read(fixtures_dir.join(format!("{name}.capture.jsonl")))?;
        let mut whole = vec![1u8];
        whole.extend_from_slice(&capture);
        std::fs::write(engines.join(format!("{name}-capture")), whole)?;
        for (i, line) in String::from_utf8_lossy(&capture).lines().enumerate() {
            let message = kvroute_core::import::capture_line(line.as_bytes())
                .map_err(std::io::Error::other)?;
            let mut bytes = vec![0u8];
            bytes.extend_from_slice(&message.payload);
            std::fs::write(engines.join(format!("{name}-payload-{i}")), bytes)?;
        }
    }
    for target in [
        "differential",
        "receipt_verify",
        "csv_export",
        "closed_loop",
    ] {
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
