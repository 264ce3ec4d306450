//! The library half of `kvroute-cli`: the argument definitions ([`args`]), shared by the
//! `kvroute` binary and the fuzz target over option parsing, and the receipt verifier
//! ([`verify`]), shared by `kvroute verify` and the fuzz target over verification.

pub mod args;
pub mod verify;
