//! A generated trace closed-loop: each policy's events replay to its run; core = oracle.
#![no_main]
use kvroute_harness::oracles::LoopCase;
libfuzzer_sys::fuzz_target!(|case: LoopCase| kvroute_harness::oracles::closed_loop(&case));
