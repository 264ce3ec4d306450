//! The library half of `kvroute-cli`: the argument definitions ([`args`]), shared by the
//! `kvroute` binary and the fuzz target over option parsing; [`paths`], which checks the
//! paths a command reads and writes; and [`terminal`], how text from an input is printed.

pub mod args;
pub mod paths;
pub mod terminal;
