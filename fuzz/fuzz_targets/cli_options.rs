//! The command line's option parsing for `simulate` and `swarm`: arbitrary argument
//! vectors through the clap parser and the cross-option checks
//! (`kvroute_cli::args::parse_fuzz_input`), which must reject, never panic. Only parses:
//! no simulation or sweep runs, whatever the sizes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kvroute_cli::args::parse_fuzz_input(data));
