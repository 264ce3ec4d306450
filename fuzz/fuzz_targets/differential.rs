//! A generated valid trace through core and oracle: canonical receipts byte-equal.
#![no_main]
use kvroute_harness::generators::TraceRecipe;
libfuzzer_sys::fuzz_target!(|recipe: TraceRecipe| kvroute_harness::oracles::differential(&recipe));
