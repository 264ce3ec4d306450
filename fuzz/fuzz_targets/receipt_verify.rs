//! A genuine receipt, then arbitrary edits, through the verifier.
#![no_main]
use kvroute_harness::oracles::ReceiptCase;
libfuzzer_sys::fuzz_target!(|case: ReceiptCase| kvroute_cli::verify::fuzz::receipt_verify(&case));
