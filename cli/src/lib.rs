//! The library half of `kvroute-cli`: the argument definitions ([`args`]), shared by the
//! `kvroute` binary and the fuzz target over option parsing; [`paths`], which checks the
//! paths a command reads and writes; [`terminal`], how text from an input is printed;
//! and the receipt verifier ([`verify`]), shared by `kvroute verify` and the fuzz target
//! over verification.

pub mod args;
pub mod paths;
pub mod terminal;
pub mod verify;
