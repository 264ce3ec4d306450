//! Arbitrary bytes as trace JSON through core and oracle validation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvroute_harness::oracles::parse_trace(data));
