//! Arbitrary bytes as Weka session files: no panic, and what imports validates.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvroute_harness::oracles::import_weka(data));
