//! The CSV of a generated trace parses back into exactly the receipt's candidate rows.
#![no_main]
use kvroute_harness::generators::TraceRecipe;
libfuzzer_sys::fuzz_target!(|recipe: TraceRecipe| kvroute_harness::oracles::csv_export(&recipe));
