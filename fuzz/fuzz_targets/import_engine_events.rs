//! Arbitrary bytes as an engine-event capture or payload: no panic, and what imports
//! validates alike in core and the oracle.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvroute_harness::oracles::import_engine_events(data));
