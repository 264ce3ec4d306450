//! The library half of `kvroute-cli`: the argument definitions ([`args`]), shared by the
//! `kvroute` binary and the fuzz target over option parsing.

pub mod args;
