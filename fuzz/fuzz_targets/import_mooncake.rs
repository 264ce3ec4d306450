//! Arbitrary bytes as a Mooncake JSONL file: no panic, and what imports validates.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvroute_harness::oracles::import_mooncake(data));
