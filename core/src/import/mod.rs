//! Importing: other formats' data as `kvroute-trace/1` documents (SPEC.md §10, §13).
//!
//! Every format sits behind one trait, [`importer::Importer`]: its name as
//! `kvroute import NAME` spells it, the input files it reads, and a reader that turns
//! those inputs into the trace's events (handed to a sink in canonical order, so a
//! format that can stream never holds the trace), the rest of the trace and a
//! [`importer::Report`], or one [`importer::ImportError`] whose lines name the input
//! file and line. The formats: [`mooncake`] (Mooncake FAST'25 JSONL, streamed),
//! [`bailian`] (Alibaba's Qwen-Bailian JSONL, its per-block ids re-chained, streamed),
//! [`weka`] (WEKA kv-cache-tester session files) and [`kv_events`] (vLLM and SGLang
//! ZeroMQ captures, and Dynamo's RouterEvent lines, each with a request log). What
//! more than one format uses lives in [`shared`], and what the formats of one request
//! a line share in [`request_lines`].
//!
//! # Adding an input format
//!
//! 1. Write `core/src/import/NAME.rs` (a folder `NAME/` when it needs more than one
//!    file) with a struct of the format's inputs and options, and
//!    `impl Importer for ThatStruct`: `name`, `inputs`, and `import`, which reads
//!    the opened inputs line by line, hands each event to the sink in `(tick, seq)`
//!    order, and returns [`importer::Imported`] or an [`importer::ImportError`] built
//!    from [`importer::Problem`]s (`Problem::at_line(input, line, reason)`). Take
//!    defaults that another format also uses from [`shared`], never from that format's
//!    file; import nothing from the other formats. Add `pub(crate) mod NAME;` below,
//!    and the struct and its options to the `pub use` block (the façade other crates
//!    import from: `kvroute_core::import::ThatStruct`).
//! 2. In `cli/src/args.rs`, add a variant to `ImportFormat` with the format's flags, and
//!    in `importer_of` in `cli/src/import.rs` one arm that builds the struct from them.
//!    `run_import` there does the rest for every format: opening the inputs (`-` is
//!    stdin), the checking pass a FIFO output needs, the atomic write, the digest and
//!    the printed report.
//! 3. Test the conversion in the format's own `#[cfg(test)]` module (bytes in, trace
//!    or problems out), add it to `core/tests/importers.rs` (what the trait hands on is
//!    the canonical trace), and test the command end to end with a fixture and a golden
//!    under `cli/tests/` (see `cli/tests/engine_events.rs`); add a line for each way
//!    its input can be bad to `cli/tests/hostile_input/cases.txt`.
//!
//! `docs/importers.md` says the same at more length.

pub(crate) mod bailian;
pub(crate) mod importer;
pub(crate) mod kv_events;
pub(crate) mod mooncake;
pub(crate) mod request_lines;
pub(crate) mod shared;
pub(crate) mod weka;

// The public part of importing: the `Importer` trait and what it hands back, and each
// format's importer with its options. Two formats cap a line differently, so their caps
// are named by format.
pub use bailian::{BailianImport, BailianOptions, LINE_BYTES_MAX as BAILIAN_LINE_BYTES_MAX};
pub use importer::{ImportError, Imported, Importer, Problem, Report, Source};
pub use kv_events::lines::capture_line;
pub use kv_events::wire::{decode_batch, BlockHash, EngineEvent, PAYLOAD_BYTES_MAX};
pub use kv_events::{
    import_dynamo_events, import_engine_events, EngineEventsImport, EngineFormat,
    EventsImportError, EventsOptions, ImportReport, Keying,
    LINE_BYTES_MAX as ENGINE_EVENTS_LINE_BYTES_MAX,
};
pub use mooncake::{
    import_mooncake, MooncakeImport, MooncakeOptions, LINE_BYTES_MAX as MOONCAKE_LINE_BYTES_MAX,
};
pub use weka::{
    parse_session_rate, session_files, WekaImport, WekaOptions,
    FILE_BYTES_MAX as WEKA_FILE_BYTES_MAX,
};
