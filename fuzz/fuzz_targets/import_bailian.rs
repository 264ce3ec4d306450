//! Arbitrary bytes as a Qwen-Bailian JSONL file: no panic, the checking pass agrees
//! with the import, and what imports validates.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvroute_harness::oracles::import_bailian(data));
