//! The `cli_options` fuzz target's check under `cargo test`: every committed input under
//! `fuzz/seeds/cli_options/` and `fuzz/regressions/cli_options/`, and seeded random
//! argument vectors built from option names and extreme numbers, parse or are rejected
//! without a panic.

use kvroute_cli::args::parse_fuzz_input;
use std::path::PathBuf;

#[test]
fn committed_cli_options_inputs_parse_without_panic() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("cli_options")) else {
            continue;
        };
        for entry in entries {
            parse_fuzz_input(&std::fs::read(entry.unwrap().path()).unwrap());
            replayed += 1;
        }
    }
    assert!(replayed >= 5, "only {replayed} committed inputs");
}

#[test]
fn seeded_argument_vectors_parse_without_panic() {
    const WORDS: &[&str] = &[
        "--lag",
        "--jitter",
        "--seed",
        "--workers",
        "--cache-tokens",
        "--cache-blocks",
        "--events-out",
        "--format",
        "json",
        "--seeds",
        "--start",
        "--jobs",
        "--shard",
        "--shard-from-env",
        "--closed-loop",
        "--report",
        "merge",
        "0",
        "1",
        "4096",
        "4097",
        "9007199254740991",
        "9007199254740992",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "1/0",
        "2/1",
        "3/3",
        "",
        "--help",
        "help",
    ];
    // A fixed xorshift: the same vectors every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut data = vec![(next() % 4) as u8];
        for _ in 0..next() % 8 {
            data.extend_from_slice(WORDS[(next() % WORDS.len() as u64) as usize].as_bytes());
            data.push(0);
        }
        data.pop();
        parse_fuzz_input(&data);
    }
}
