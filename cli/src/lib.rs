//! The library half of `kvroute-cli`: the argument definitions ([`args`]), shared by the
//! `kvroute` binary and the fuzz target over option parsing, [`overwrite`], which refuses an output that is
//! also an input, and [`terminal`], how text from an input is printed.

pub mod args;
pub mod overwrite;
pub mod terminal;
