//! kvroute's test harness: fixtures, generators, the differential runner and the seed
//! sweep, shared by the integration tests, the CLI's `swarm` and `verify` and the fuzz
//! targets. Modules are named by role, after wasmtime's fuzzing crate: `fixtures` loads
//! committed cases, `generators` build valid traces from bytes or seeds, `differential`
//! decides whether core and oracle disagree (`engine_model` does so for the closed
//! loop), `sweep` runs many seeds in parallel.

pub mod closed_loop;
pub mod costly;
pub mod differential;
pub mod engine_model;
pub mod fixtures;
pub mod generators;
pub mod join;
pub mod oracles;
pub mod receipt_tree;
pub mod reorder;
pub mod sweep;
