//! The command line's arguments and their bounds, as a library: the `kvroute` binary
//! parses with it, and the `cli_options` fuzz target feeds it arbitrary argument
//! vectors (`fuzz/fuzz_targets/cli_options.rs`). Every numeric option is bounded here,
//! by a clap range or a value parser, with the bound stated in `--help` (SPEC.md §7);
//! [`check`] adds the bounds that span options (a swarm's seed range).

use clap::builder::PossibleValue;
use clap::{Parser, Subcommand, ValueEnum};
use kvroute_core::input::JSON_INTEGER_MAX;
use kvroute_core::input::{EpochsMode, StaleRule};
use kvroute_core::simulate;
use kvroute_core::Policy;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The largest `--lag`, `--jitter`, `--cache-tokens` and `--cache-blocks`: 2^53 - 1,
/// SPEC.md's `B`, so their sums stay far inside 64 bits (SPEC.md §11).
pub const OPTION_TICKS_MAX: u64 = JSON_INTEGER_MAX;

#[derive(Parser)]
#[command(
    name = "kvroute",
    version,
    about = "Replay a KV-aware routing trace under four policies and explain every decision",
    long_about = "Replay a KV-aware routing trace under four policies and explain every \
                  decision. With no command, replays the built-in lab trace as a table. \
                  A TRACE or FILE of `-` is read from stdin.",
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Replay a trace (default: the built-in lab trace) and print or write the receipt.
    Replay {
        /// Trace file (kvroute-trace/1 JSON); omit for the built-in lab trace.
        trace: Option<InputPath>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write to FILE instead of stdout (atomically: nothing is left on failure; a
        /// link is followed, a FIFO or device written in place, a read-only file refused).
        #[arg(long, value_name = "FILE")]
        out: Option<OutputPath>,
        #[command(flatten)]
        export: ExportArgs,
    },
    /// Route a request-only trace in closed loop: a modelled engine per worker stores
    /// each prefill's blocks in an LRU cache and publishes store/evict events back to
    /// the router (SPEC.md §11). Prints the four-policy comparison.
    Simulate {
        /// Trace file (kvroute-trace/1 JSON); its cache and load events are dropped.
        trace: InputPath,
        /// Replace the trace's workers by N copies of its first worker (1 to 4096).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
        workers: Option<u32>,
        /// KV cache capacity per worker, in tokens (0 to 9007199254740991).
        #[arg(long, value_name = "TOKENS", conflicts_with = "cache_blocks",
              default_value_t = simulate::DEFAULT_CACHE_TOKENS,
              value_parser = clap::value_parser!(u64).range(..=OPTION_TICKS_MAX))]
        cache_tokens: u64,
        /// KV cache capacity per worker, in blocks (any size), instead of tokens (0 to
        /// 9007199254740991).
        #[arg(long, value_name = "BLOCKS",
              value_parser = clap::value_parser!(u64).range(..=OPTION_TICKS_MAX))]
        cache_blocks: Option<u64>,
        /// Ticks from a prefill completing to its cache events reaching the router (0 to
        /// 9007199254740991).
        #[arg(long, value_name = "TICKS", default_value_t = simulate::DEFAULT_PUBLICATION_LAG_TICKS,
              value_parser = clap::value_parser!(u64).range(..=OPTION_TICKS_MAX))]
        lag: u64,
        /// Up to this many extra ticks per event, seeded (reorders events: stale epochs;
        /// 0 to 9007199254740991).
        #[arg(long, value_name = "TICKS", default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(..=OPTION_TICKS_MAX))]
        jitter: u64,
        /// Per mille of published cache events the bus loses before delivery (0 to 1000).
        #[arg(long, value_name = "PER_MILLE", default_value_t = 0)]
        loss: u64,
        /// Seed of the jitter and of the loss (any 64-bit value).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Replace the trace's policy.stale_rule (SPEC.md §3.2).
        #[arg(long, value_enum, value_name = "RULE")]
        stale_rule: Option<StaleRuleArg>,
        /// Replace the trace's policy.epochs (SPEC.md §3.6); `sequential` detects gaps and
        /// re-queries the worker.
        #[arg(long, value_enum, value_name = "MODE")]
        epochs: Option<EpochsArg>,
        /// Write each policy's generated trace (requests plus the cache events its loop
        /// produced) to DIR/<policy>.trace.json; `kvroute replay` reproduces the run.
        /// Each is validated first: when one would be rejected, none is written (exit 2).
        #[arg(long, value_name = "DIR")]
        events_out: Option<OutputDir>,
        /// Write each policy's AIPerf completion records (one per routed request, times
        /// from the engine model) to DIR/<policy>.completions.jsonl, for `kvroute join`
        /// (SPEC.md §14.4).
        #[arg(long, value_name = "DIR")]
        completions_out: Option<OutputDir>,
        /// With --completions-out: ticks per millisecond (1 to 1000000).
        #[arg(long, value_name = "N", default_value_t = 1, requires = "completions_out",
              value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        ticks_per_ms: u64,
        /// With --completions-out: the records' layout, AIPerf's profile_export.jsonl or
        /// Dynamo's request_end records, which also name the serving worker (SPEC.md
        /// §14.4.1; every worker must then be named dynamo|<id>|dp<rank>).
        #[arg(long, value_enum, value_name = "LAYOUT", default_value_t = CompletionsFormatArg::Aiperf,
              requires = "completions_out")]
        completions_format: CompletionsFormatArg,
        /// With --workers: name the copies w0… or dynamo|0|dp0…, as Dynamo names its
        /// workers (SPEC.md §14.4.1).
        #[arg(long, value_enum, value_name = "NAMES", default_value_t = WorkerNamesArg::W,
              requires = "workers")]
        worker_names: WorkerNamesArg,
        /// Output format: the comparison table, or the canonical kvroute-simulate/1
        /// document of SPEC.md §11.1 (figures plus each generated trace's digest).
        #[arg(long, value_enum, default_value_t = SimulateFormat::Table)]
        format: SimulateFormat,
    },
    /// Check a trace against the contract and print its digest.
    Validate {
        /// Trace file (kvroute-trace/1 JSON).
        trace: InputPath,
    },
    /// Check a receipt against the trace it claims to explain, byte for byte, by
    /// recomputing it with the independent oracle as the receipt streams in; without a
    /// receipt, replay the trace in core and in the oracle side by side. Exit 0 when
    /// they match, 1 with the first problem, 2 for an invalid trace or unreadable input.
    Verify {
        /// The trace the receipt was produced from.
        #[arg(long, value_name = "TRACE")]
        trace: InputPath,
        /// The receipt (kvroute-receipt/1 JSON, as `replay --format json` writes it);
        /// omit it to compare core's receipt of TRACE with the oracle's.
        receipt: Option<InputPath>,
        /// The receipt was written with `replay --id-key FILE`: key the recomputed
        /// request ids with the same FILE before comparing.
        #[arg(long, value_name = "FILE")]
        id_key: Option<InputPath>,
    },
    /// Generate one trace per seed and compare core with the oracle on each, in parallel;
    /// `swarm merge` checks and joins the reports of a sharded sweep.
    Swarm(SwarmArgs),
    /// Write the lab report: one self-contained HTML page (opens offline) with the
    /// four-policy comparison, a Pareto view of each decision's candidates, assigned
    /// work over time, a shadow diff, the stale and boundary logs and cohort metrics.
    Report {
        /// A trace or a receipt (kvroute-receipt/1 JSON); omit for the built-in lab trace.
        input: Option<InputPath>,
        /// With a receipt: its trace, for cohort metrics and latency proxies.
        #[arg(long, value_name = "TRACE")]
        trace: Option<InputPath>,
        /// With --trace: the key of a receipt written with replay --id-key, to match cohorts.
        #[arg(long, value_name = "FILE")]
        id_key: Option<InputPath>,
        /// Where to write the page (atomically: nothing is left on failure).
        #[arg(
            short = 'o',
            long = "out",
            value_name = "OUT",
            default_value = "report.html"
        )]
        out: OutputPath,
        /// The serving policy of the shadow-diff section.
        #[arg(long, value_name = "POLICY", value_parser = parse_policy,
              default_value = "least_load")]
        baseline: Policy,
        /// The shadowed policy of the shadow-diff section.
        #[arg(long, value_name = "POLICY", value_parser = parse_policy,
              default_value = "cache_plus_load")]
        candidate: Policy,
        /// On a large trace, decisions per policy kept in detail besides the
        /// interesting ones, evenly spaced.
        #[arg(long, value_name = "N", default_value_t = 60,
              value_parser = clap::value_parser!(u64).range(..=SAMPLE_MAX as u64))]
        sample: u64,
        /// Completion records to join with the receipt, as `kvroute join` does: adds the
        /// Completions panel (counts, goodput, per-worker calibration).
        #[arg(long, value_name = "FILE")]
        completions: Option<InputPath>,
        /// With --completions: their layout; told from their first line when omitted.
        #[arg(long, value_enum, requires = "completions")]
        completions_format: Option<CompletionsFormat>,
        /// With --completions: latency objectives in milliseconds (up to three decimals),
        /// `ttft_ms=X,tpot_ms=Y` or vLLM's `ttft:X,tpot:Y`, either alone.
        #[arg(long, value_name = "OBJECTIVES", value_parser = parse_slo, requires = "completions")]
        slo: Option<kvroute_core::join::Slo>,
        /// With --completions: the run that served the traffic [default: cache_plus_load].
        #[arg(long, value_name = "POLICY", value_parser = parse_policy, requires = "completions")]
        run: Option<Policy>,
    },
    /// Shadow mode: the decisions where a candidate policy chooses differently from the
    /// baseline, with both chosen rows and the predicted deltas. One input (trace or
    /// receipt) compares two of its runs; two receipts compare the first's baseline run
    /// with the second's candidate run (default cache_plus_load for both).
    Diff {
        /// A trace or receipt.
        first: InputPath,
        /// A second receipt of the same requests (e.g. other policy settings).
        second: Option<InputPath>,
        /// The serving policy: required with one input; with two receipts the default
        /// is cache_plus_load.
        #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
        baseline: Option<Policy>,
        /// The shadowed policy: required with one input; with two receipts the default
        /// is cache_plus_load.
        #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
        candidate: Option<Policy>,
        /// With receipts: their trace, for latency proxy deltas.
        #[arg(long, value_name = "TRACE")]
        trace: Option<InputPath>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = DiffFormat::Table)]
        format: DiffFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(long, value_name = "FILE")]
        out: Option<OutputPath>,
        /// CSV only: write ids exactly as in the receipt. By default an id starting with
        /// `=`, `+`, `-`, `@`, tab or CR gets a leading `'`, so spreadsheets do not run it.
        #[arg(long)]
        csv_plain: bool,
    },
    /// A receipt's run against measured completion records (AIPerf's
    /// profile_export.jsonl): what was dropped, never routed, retried, cancelled or
    /// failed; whether the predicted work ranks TTFT; per-worker calibration; and
    /// goodput under declared latency objectives (SPEC.md §14).
    Join(JoinArgs),
    /// Put a router or KV indexer that is a child process under the comparison of
    /// SPEC.md §12 over the peer protocol kvroute-peer/1 (SPEC.md §15).
    Peer {
        #[command(subcommand)]
        action: PeerAction,
    },
    /// Put a real KV-aware router under the conformance cases of SPEC.md §16: start
    /// it, feed it engine KV events over ZeroMQ, route each case's request the way its
    /// clients do, and judge its answer.
    Conform(ConformArgs),
    /// Be an engine fleet on the wire (SPEC.md §17): publish a trace's cache events as
    /// vLLM KV event batches on one ZeroMQ PUB socket per worker, with a replay socket
    /// each when asked and the faults of a --wire file.
    Publish(PublishArgs),
    /// Subscribe to vLLM or SGLang KV event publishers and write a capture for
    /// `import vllm-events` (SPEC.md §13.6). Stops after --count messages, after
    /// --seconds, or on Ctrl-C, and keeps what it received.
    Record {
        /// ZeroMQ PUB endpoints, such as tcp://127.0.0.1:5557.
        #[arg(required = true)]
        endpoints: Vec<String>,
        /// Where to write the capture (atomically, when recording stops).
        #[arg(short = 'o', long = "out", value_name = "CAPTURE")]
        out: OutputPath,
        /// Stop after this many messages (0 to 9007199254740991).
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        count: Option<u64>,
        /// Stop after this many seconds (0 to 9007199254740991).
        #[arg(long, value_name = "S",
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        seconds: Option<u64>,
        /// A publisher's replay socket, as ENDPOINT=REPLAY (ENDPOINT one of those
        /// recorded): on a sequence gap, the missing messages are asked for there.
        #[arg(long = "replay", value_name = "ENDPOINT=REPLAY")]
        replay: Vec<String>,
        /// How long a replay socket's answer is waited for (1 to 60000).
        #[arg(long, value_name = "MS", default_value_t = 1000,
              value_parser = clap::value_parser!(u64).range(1..=60_000))]
        replay_wait_ms: u64,
    },
    /// Convert a trace from another format into a kvroute-trace/1 file.
    Import {
        #[command(subcommand)]
        format: ImportFormat,
    },
    /// Print this message or the help of the given command (`kvroute help swarm merge`).
    Help {
        /// The command, and its subcommands.
        command: Vec<String>,
    },
}

/// The largest `report --sample`: more detail than a page can carry anyway.
pub const SAMPLE_MAX: usize = 1_000_000;

#[derive(Subcommand)]
pub enum ImportFormat {
    /// Mooncake FAST'25 JSONL (`timestamp` in ms, `input_length`, `output_length`,
    /// `hash_ids`): one request a line, under the `scale` limits (SPEC.md §10).
    Mooncake {
        /// The JSONL file.
        file: InputPath,
        /// Prompt tokens per hash id (the last block of a request may be partial), at most
        /// 2^53 - 1.
        #[arg(long, default_value_t = 512,
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        block_tokens: u64,
        /// The tenant of every request.
        #[arg(long, default_value = "mooncake")]
        tenant: String,
        /// The model of every request and worker.
        #[arg(long, default_value = "mooncake-model")]
        model: String,
        /// How many identical workers to create (1 to 4096).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
        workers: u32,
        /// Set policy.dynamo_block_tokens, so that the receipt has the dynamo_default
        /// run (SPEC.md §4.8); Mooncake's own block is 512. At most 2^53 - 1.
        #[arg(long, value_name = "B",
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        dynamo_block_tokens: Option<u64>,
        /// Where to write the trace (atomically: nothing is left on failure).
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: OutputPath,
    },
    /// Alibaba's Qwen-Bailian usage traces (`chat_id`, `timestamp` in seconds,
    /// `input_length`, `output_length`, per-block `hash_ids`): one request a line, each
    /// block re-chained on the blocks before it (SPEC.md §18).
    Bailian {
        /// The JSONL file (one trace: its ids are salted per file).
        file: InputPath,
        /// Prompt tokens per hash id (the last block of a request may be partial), at most
        /// 2^53 - 1; the published traces use 16.
        #[arg(long, default_value_t = 16,
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        block_tokens: u64,
        /// The tenant of every request.
        #[arg(long, default_value = "bailian")]
        tenant: String,
        /// The model of every request and worker.
        #[arg(long, default_value = "bailian-model")]
        model: String,
        /// How many identical workers to create (1 to 4096).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
        workers: u32,
        /// Where to write the trace (atomically: nothing is left on failure).
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: OutputPath,
    },
    /// WEKA kv-cache-tester session files (Claude Code conversations with nested
    /// sub-agents, 64-token blocks scoped per session), laid on one clock by seeded gaps
    /// between session starts (SPEC.md §19).
    Weka {
        /// Session files, or directories standing for their *.json files in name order.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<InputPath>,
        /// The tenant of every request.
        #[arg(long, default_value = "weka")]
        tenant: String,
        /// The model of every request and worker.
        #[arg(long, default_value = "weka-model")]
        model: String,
        /// How many identical workers to create (1 to 4096).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
        workers: u32,
        /// Sessions started per second on average (0.001 to 1000, at most three
        /// decimals); each gap is uniform from 0 to twice the mean.
        #[arg(long, value_name = "R", default_value = "0.1",
              value_parser = kvroute_core::import::parse_session_rate)]
        session_rate: u64,
        /// The seed of the gaps between session starts (SplitMix64).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Set policy.dynamo_block_tokens, so that the receipt has the dynamo_default
        /// run (SPEC.md §4.8); the sessions' own block is 64. At most 2^53 - 1.
        #[arg(long, value_name = "B",
              value_parser = clap::value_parser!(u64).range(1..=JSON_INTEGER_MAX))]
        dynamo_block_tokens: Option<u64>,
        /// Consecutive block ids of a request that make one prefix segment (1 to 65536):
        /// 1 is one segment a block; 16 makes a trace a replay holds in a tenth of the
        /// memory, reusing at most 15 blocks less a request (SPEC.md §19.2).
        #[arg(long, value_name = "G", default_value_t = 1,
              value_parser = clap::value_parser!(u64).range(1..=65_536))]
        blocks_per_segment: u64,
        /// Where to write the trace (atomically: nothing is left on failure).
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: OutputPath,
    },
    /// vLLM or SGLang KV events captured by `kvroute record`, with the requests the
    /// engines served: a worker per publisher, sequential epochs (SPEC.md §13). Both
    /// engines' layouts are read, each told apart by its values.
    #[command(name = "vllm-events")]
    VllmEvents(EngineImportArgs),
    /// SGLang or vLLM KV events captured by `kvroute record`: the same import as
    /// vllm-events, which reads both engines' layouts (SPEC.md §13).
    #[command(name = "sglang-events")]
    SglangEvents(EngineImportArgs),
    /// NVIDIA Dynamo's RouterEvent, one JSON object a line, with the requests the
    /// workers served: blocks keyed by Dynamo's tokens_hash (SPEC.md §13.7).
    #[command(name = "dynamo-events")]
    DynamoEvents(EngineImportArgs),
}

/// The options of the engine-event imports (SPEC.md §13).
#[derive(clap::Args)]
pub struct EngineImportArgs {
    /// The events: a capture of ZeroMQ messages (SPEC.md §13.2) for vllm-events,
    /// RouterEvent lines (§13.7) for dynamo-events.
    pub capture: InputPath,
    /// The request log: one request a line (SPEC.md §13.3).
    #[arg(long, value_name = "REQUESTS")]
    pub requests: InputPath,
    /// The engines' KV block size in tokens (vLLM's default on GPUs is 16).
    #[arg(long, default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(1..=JSON_INTEGER_MAX))]
    pub block_tokens: u64,
    /// The tenant of the engines' stores, and of requests that name none.
    #[arg(long, default_value = "default",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub tenant: String,
    /// The workers' model; by default the one model the request log names.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub model: Option<String>,
    /// Where to write the trace (atomically: nothing is left on failure).
    #[arg(short = 'o', long = "out", value_name = "OUT")]
    pub out: OutputPath,
}

/// How `replay` exports ids (SPEC.md §6.3, §6.5).
#[derive(clap::Args, Default)]
pub struct ExportArgs {
    /// Write every request id as the first 16 bytes of HMAC-SHA-256 under the bytes of
    /// FILE, in hex (32 digits), so the export can be shared without the ids. Worker ids
    /// stay as written; keep FILE private (anyone with it can test a guessed id).
    #[arg(long, value_name = "FILE")]
    pub id_key: Option<InputPath>,
    /// CSV only: write ids exactly as in the receipt. By default an id starting with
    /// `=`, `+`, `-`, `@`, tab or CR gets a leading `'`, so spreadsheets do not run it.
    #[arg(long)]
    pub csv_plain: bool,
}

/// `--stale-rule`: one of core's [`StaleRule`]s, by the name the trace uses (the names
/// are core's, so they are spelled once).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StaleRuleArg(pub StaleRule);

impl ValueEnum for StaleRuleArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [StaleRuleArg; 3] = [
            StaleRuleArg(StaleRule::ALL[0]),
            StaleRuleArg(StaleRule::ALL[1]),
            StaleRuleArg(StaleRule::ALL[2]),
        ];
        &ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()))
    }
}

/// `--epochs`: one of core's [`EpochsMode`]s, by the name the trace uses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EpochsArg(pub EpochsMode);

impl ValueEnum for EpochsArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [EpochsArg; 2] = [EpochsArg(EpochsMode::ALL[0]), EpochsArg(EpochsMode::ALL[1])];
        &ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()))
    }
}

/// `--stale-rule` and `--epochs`, which replace the trace's own policy members.
#[derive(Clone, Copy, Default)]
pub struct PolicyOverrides {
    pub stale_rule: Option<StaleRuleArg>,
    pub epochs: Option<EpochsArg>,
}

impl PolicyOverrides {
    pub fn apply(self, policy: &mut kvroute_core::input::PolicyParams) {
        if let Some(StaleRuleArg(rule)) = self.stale_rule {
            policy.stale_rule = rule;
        }
        if let Some(EpochsArg(mode)) = self.epochs {
            policy.epochs = mode;
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// One row of headline metrics per policy, then the digests.
    Table,
    /// The canonical receipt (RFC 8785) plus a newline.
    Json,
    /// One row per (policy, decision, candidate), written as the runs replay.
    Csv,
    /// The receipt as JSON Lines, written as the runs replay (SPEC.md §6.4); ends with
    /// the same receipt_digest as `json`.
    Jsonl,
}

/// `simulate --completions-format` (SPEC.md §14.4).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionsFormatArg {
    /// AIPerf's per-request records.
    Aiperf,
    /// Dynamo's request_end records in the file sink's wrapper.
    Dynamo,
}

impl CompletionsFormatArg {
    pub fn layout(self) -> simulate::CompletionsLayout {
        match self {
            CompletionsFormatArg::Aiperf => simulate::CompletionsLayout::Aiperf,
            CompletionsFormatArg::Dynamo => simulate::CompletionsLayout::Dynamo,
        }
    }
}

/// `simulate --worker-names` (SPEC.md §14.4.1).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkerNamesArg {
    /// w0, w1, … zero-padded.
    W,
    /// dynamo|0|dp0, dynamo|1|dp0, …
    Dynamo,
}

impl WorkerNamesArg {
    pub fn names(self) -> simulate::WorkerNames {
        match self {
            WorkerNamesArg::W => simulate::WorkerNames::W,
            WorkerNamesArg::Dynamo => simulate::WorkerNames::Dynamo,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimulateFormat {
    /// One row per policy: the table in README.
    Table,
    /// The canonical kvroute-simulate/1 document plus a newline.
    Json,
}

/// The most `--jobs`: far more threads than seeds run at once on any machine, and few
/// enough that spawning them cannot exhaust the process's threads.
pub const JOBS_MAX: usize = 1024;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SwarmArgs {
    #[command(subcommand)]
    pub action: Option<SwarmAction>,
    /// How many seeds to run.
    #[arg(long, required = true)]
    pub seeds: Option<u64>,
    /// The first seed; the last, START + SEEDS - 1, must fit in 64 bits.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Worker threads, 1 to 1024 (default: every core).
    #[arg(long, value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Run only shard K of M (1-based), e.g. `--shard 2/4`.
    #[arg(long, value_name = "K/M", value_parser = parse_shard)]
    pub shard: Option<(u64, u64)>,
    /// Take the shard from a cluster scheduler's environment: a Kubernetes Indexed Job's
    /// JOB_COMPLETION_INDEX (with KVROUTE_SHARD_COUNT set to its completions), or a Slurm
    /// job array's SLURM_ARRAY_TASK_ID, _MIN and _COUNT (a contiguous array such as
    /// `--array=0-7`).
    #[arg(long, conflicts_with = "shard")]
    pub shard_from_env: bool,
    /// Compare the closed loop instead of receipts: core's `simulate` against the
    /// oracle's independent engine model, on each seed's trace under engine settings
    /// drawn from the seed (small caches, lags and jitter).
    #[arg(long)]
    pub closed_loop: bool,
    /// Also write a JSON summary of this run to FILE (atomically), for `swarm merge`.
    #[arg(long, value_name = "FILE")]
    pub report: Option<OutputPath>,
}

#[derive(clap::Subcommand)]
pub enum SwarmAction {
    /// Check that shard reports cover their seed range exactly once and were written by
    /// the same kvroute and generator versions, then print their union as one report.
    /// Exit 2 on a gap, an overlap or mismatched reports; 1 when any seed diverged.
    Merge {
        /// The reports written by `kvroute swarm --report`.
        #[arg(required = true, value_name = "FILE")]
        reports: Vec<InputPath>,
    },
}

fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("expected at least 1 worker thread, found 0".to_string()),
        Ok(jobs) if jobs > JOBS_MAX => Err(format!(
            "expected at most {JOBS_MAX} worker threads, found {jobs}"
        )),
        Ok(jobs) => Ok(jobs),
        Err(_) => Err(format!(
            "expected a positive number of threads, found {text:?}"
        )),
    }
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (k, m) = text
        .split_once('/')
        .ok_or_else(|| format!("expected K/M, found {text:?}"))?;
    let k: u64 = k
        .parse()
        .map_err(|_| format!("shard K is not a number: {k:?}"))?;
    let m: u64 = m
        .parse()
        .map_err(|_| format!("shard M is not a number: {m:?}"))?;
    if m == 0 || k == 0 || k > m {
        return Err(format!("expected 1 <= K <= M, found {k}/{m}"));
    }
    Ok((k, m))
}

/// Parses a policy name as the receipt spells it (`round_robin`, ...).
pub fn parse_policy(text: &str) -> Result<Policy, String> {
    Policy::ALL
        .iter()
        .copied()
        .find(|p| p.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("expected one of {}, found {text:?}", names.join(", "))
        })
}

/// `kvroute peer`'s commands (SPEC.md §15).
#[derive(Subcommand)]
pub enum PeerAction {
    /// Drive the peer COMMAND over TRACE and print the agreement table of its reuse
    /// answers (and of its choices against --policy).
    Run {
        /// Trace file (kvroute-trace/1 JSON).
        trace: InputPath,
        #[command(flatten)]
        peer: PeerArgs,
        /// Tokens of a whole block, told to the peer in the hello (1 to 9007199254740991).
        #[arg(long, value_name = "B", default_value_t = 16,
              value_parser = clap::value_parser!(u64).range(1..=JSON_INTEGER_MAX))]
        block_tokens: u64,
        /// Cut the trace to whole blocks first (SPEC.md §12).
        #[arg(long)]
        full_blocks_only: bool,
        /// Do not send the cache events kvroute's epoch rule drops.
        #[arg(long)]
        withhold_stale: bool,
        /// The policy a `choice` answer is compared with.
        #[arg(long, value_name = "POLICY", value_parser = parse_policy,
              default_value = "cache_plus_load")]
        policy: Policy,
        /// Output format.
        #[arg(long, value_enum, default_value_t = PeerFormat::Table)]
        format: PeerFormat,
        /// Write the first difference, cut and shrunk by re-running the peer, as a
        /// trace that reproduces it.
        #[arg(long, value_name = "FILE")]
        diff_out: Option<OutputPath>,
    },
    /// Drive the peer COMMAND over the seed sweep's generated chain traces (both
    /// delivery modes; one peer process for all when the peer offers reset, else one
    /// per trace).
    Sweep {
        /// How many seeds (1 to 1000000).
        #[arg(long, value_name = "N", default_value_t = 100,
              value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        seeds: u64,
        /// The first seed.
        #[arg(long, value_name = "S", default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(..=JSON_INTEGER_MAX))]
        start: u64,
        /// Start a fresh peer process for every trace even when the peer offers reset.
        #[arg(long)]
        process_per_trace: bool,
        /// Write the first new finding's trace, cut and shrunk by re-running the peer
        /// in that finding's delivery mode, as a trace that reproduces it.
        #[arg(long, value_name = "FILE")]
        diff_out: Option<OutputPath>,
        #[command(flatten)]
        peer: PeerArgs,
    },
}

/// How a peer is started and waited on.
#[derive(clap::Args)]
pub struct PeerArgs {
    /// Longest wait for one message to be written or answered, in ms (1 to 86400000).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub timeout_ms: u64,
    /// Fail unless the peer's hello reports this version.
    #[arg(long, value_name = "V")]
    pub expect_version: Option<String>,
    /// The peer's program and arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `kvroute peer run`'s output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PeerFormat {
    /// The agreement tables.
    Table,
    /// One JSON object (SPEC.md §15.4).
    Json,
}

/// `kvroute join`'s arguments (SPEC.md §14).
#[derive(clap::Args)]
pub struct JoinArgs {
    /// The receipt (`replay --format json` or `--format jsonl`); `-` is stdin.
    pub receipt: InputPath,
    /// The completion records; `-` is stdin.
    pub completions: InputPath,
    /// The layout of the completion records; told from their first line when omitted.
    #[arg(long, value_enum)]
    pub completions_format: Option<CompletionsFormat>,
    /// The run that served the traffic.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy,
          default_value = "cache_plus_load")]
    pub run: Policy,
    /// The trace the receipt was replayed from (its digest must be the receipt's
    /// trace_digest): adds the per-(tenant, model, adapter) cohorts.
    #[arg(long, value_name = "TRACE")]
    pub trace: Option<InputPath>,
    /// The key the receipt's request ids were keyed with (`replay --id-key`):
    /// completion ids are keyed the same way before they are matched.
    #[arg(long, value_name = "FILE")]
    pub id_key: Option<InputPath>,
    /// Latency objectives in milliseconds with up to three decimals, `ttft_ms=X,tpot_ms=Y`
    /// or `vllm bench serve --goodput`'s `ttft:X,tpot:Y` (either alone, the spellings may
    /// be mixed): e.g. `--slo ttft_ms=300,tpot_ms=12.5`.
    #[arg(long, value_name = "OBJECTIVES", value_parser = parse_slo)]
    pub slo: Option<kvroute_core::join::Slo>,
    /// Exit 3, after the output is written, when more than N per mille of the records
    /// that carry cached tokens drifted from the router's picture of their worker's
    /// cache (in the run, a cohort or a serving worker); N from 0 to 1000.
    #[arg(long, value_name = "N", value_parser = parse_per_mille)]
    pub max_drift_pm: Option<u64>,
    /// Exit 3, after the output is written, when more than N per mille of the records
    /// that carry cached tokens ran on another worker than the chosen one (in the run
    /// or a cohort); N from 0 to 1000.
    #[arg(long, value_name = "N", value_parser = parse_per_mille)]
    pub max_elsewhere_pm: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Table)]
    pub format: DiffFormat,
    /// Write to FILE instead of stdout (atomically).
    #[arg(long, value_name = "FILE")]
    pub out: Option<OutputPath>,
    /// CSV only: write worker ids exactly as in the receipt. By default an id
    /// starting with `=`, `+`, `-`, `@`, tab or CR gets a leading `'`.
    #[arg(long)]
    pub csv_plain: bool,
}

/// The layouts of completion records `join` reads (SPEC.md §14.1).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CompletionsFormat {
    /// AIPerf's profile_export.jsonl, one record a line.
    Aiperf,
    /// Dynamo's request trace (DYN_REQUEST_TRACE_SINKS file sink), request_end lines.
    Dynamo,
    /// The JSON `vllm bench serve --save-result --save-detailed` writes, joined by position.
    VllmBench,
}

impl CompletionsFormat {
    /// Core's name of the layout.
    pub fn core(self) -> kvroute_core::join::CompletionsFormat {
        match self {
            Self::Aiperf => kvroute_core::join::CompletionsFormat::Aiperf,
            Self::Dynamo => kvroute_core::join::CompletionsFormat::Dynamo,
            Self::VllmBench => kvroute_core::join::CompletionsFormat::VllmBench,
        }
    }
}

/// A per-mille gate (SPEC.md §14.7): an integer from 0 to 1000.
pub fn parse_per_mille(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|&pm| pm <= 1000 && text.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("expected an integer from 0 to 1000, found {text:?}"))
}

/// `--slo` (SPEC.md §14.2): items separated by `,`, each `ttft_ms=X` or `tpot_ms=Y`, or
/// in the spelling of `vllm bench serve --goodput`, `ttft:X` or `tpot:Y` (the two
/// spellings mix; each name keeps its own separator). Each objective at most once,
/// whichever its spelling. A value is milliseconds with up to three decimals, held in
/// whole microseconds up to 2^53 - 1; the error (clap adds the option's name) says
/// which item is wrong and why.
pub fn parse_slo(text: &str) -> Result<kvroute_core::join::Slo, String> {
    let mut slo = kvroute_core::join::Slo::default();
    for item in text.split(',') {
        let (name, objective, value) = SLO_SPELLINGS
            .into_iter()
            .find_map(|(name, objective)| {
                item.strip_prefix(name)
                    .map(|value| (name, objective, value))
            })
            .ok_or_else(|| {
                format!(
                    "expected ttft_ms=X, tpot_ms=Y, ttft:X or tpot:Y (milliseconds), \
                     separated by \",\", found {item:?}"
                )
            })?;
        let name = name.trim_end_matches(['=', ':']);
        let us =
            slo_microseconds(value).map_err(|why| format!("{name}: {why}, found {value:?}"))?;
        let (declared, objective_name) = match objective {
            SloObjective::Ttft => (&mut slo.ttft_us, "ttft"),
            SloObjective::Tpot => (&mut slo.tpot_us, "tpot"),
        };
        if declared.replace(us).is_some() {
            return Err(format!(
                "the {objective_name} objective is given twice \
                 ({objective_name}_ms and {objective_name} are one name)"
            ));
        }
    }
    Ok(slo)
}

/// Which latency an item of `--slo` holds to an objective.
#[derive(Clone, Copy)]
enum SloObjective {
    Ttft,
    Tpot,
}

/// The start of each item `--slo` takes, name and separator together: `ttft=X` and
/// `ttft_ms:X` are neither spelling (SPEC.md §14.2).
const SLO_SPELLINGS: [(&str, SloObjective); 4] = [
    ("ttft_ms=", SloObjective::Ttft),
    ("tpot_ms=", SloObjective::Tpot),
    ("ttft:", SloObjective::Ttft),
    ("tpot:", SloObjective::Tpot),
];

/// `value`, milliseconds as ASCII digits with optionally `.` and one to three more, in
/// whole microseconds from 0 to 2^53 - 1; else why not. A fourth decimal is refused,
/// not rounded: a microsecond is the finest objective a record can be held to. The
/// digits are read as written, never through a float, and checked against the bound
/// one at a time, so no number of digits overflows.
fn slo_microseconds(value: &str) -> Result<u64, &'static str> {
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let (whole, decimals) = value.split_once('.').unwrap_or((value, "000"));
    if !digits(whole) || !digits(decimals) {
        return Err("expected milliseconds: digits, optionally then '.' and 1 to 3 digits");
    }
    if decimals.len() > 3 {
        return Err("at most three decimals: a microsecond is the finest objective");
    }
    let padding = "000"[decimals.len()..].bytes();
    whole
        .bytes()
        .chain(decimals.bytes())
        .chain(padding)
        .try_fold(0u64, |us, digit| {
            us.checked_mul(10)
                .and_then(|us| us.checked_add(u64::from(digit - b'0')))
                .filter(|&us| us <= JSON_INTEGER_MAX)
        })
        .ok_or("expected at most 9007199254740.991 milliseconds (2^53 - 1 microseconds)")
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DiffFormat {
    /// One line per differing decision, then the summary line.
    Table,
    /// One `kvroute-diff/1` JSON document.
    Json,
    /// One line per differing decision, both chosen rows side by side (summary on stderr).
    Csv,
}

/// The bounds no single option's parser can check. `Err` is a usage error (exit 2),
/// found before any input is read.
pub fn check(cli: &Cli) -> Result<(), String> {
    if let Some(Command::Diff {
        second: None,
        baseline,
        candidate,
        ..
    }) = &cli.command
    {
        if baseline.is_none() || candidate.is_none() {
            return Err(
                "kvroute diff: with one input, name both --baseline and --candidate".into(),
            );
        }
    }
    if let Some(Command::Swarm(swarm)) = &cli.command {
        if let (Some(seeds), None) = (swarm.seeds, &swarm.action) {
            let config = kvroute_harness::sweep::SweepConfig {
                start: swarm.start,
                seeds,
                jobs: swarm.jobs.unwrap_or(1),
                shard: swarm.shard,
            };
            config.check().map_err(|e| format!("kvroute swarm: {e}"))?;
        }
    }
    Ok(())
}

/// One fuzz input (the `cli_options` target, and `cargo test` on its committed seeds):
/// split on NUL bytes into arguments after a command picked by the first byte, then
/// parsed and checked. Must return, never panic; nothing is run, so a huge `--seeds`
/// costs nothing. Asserts the bounds SPEC.md §11 relies on for what it accepts.
pub fn parse_fuzz_input(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let command: &[&str] = match selector % 4 {
        0 => &["simulate", "trace.json"],
        1 => &["swarm"],
        2 => &["swarm", "merge"],
        _ => &[],
    };
    let mut argv: Vec<String> = vec!["kvroute".to_owned()];
    argv.extend(command.iter().map(|s| (*s).to_owned()));
    argv.extend(
        rest.split(|&b| b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned()),
    );
    match Cli::try_parse_from(&argv) {
        // Rendering the error (or the help it carries) must not panic either.
        Err(error) => drop(error.render().to_string()),
        Ok(cli) => {
            let checked = check(&cli);
            if let (
                Some(Command::Simulate {
                    lag,
                    jitter,
                    cache_tokens,
                    cache_blocks,
                    workers,
                    ..
                }),
                Ok(()),
            ) = (&cli.command, &checked)
            {
                let bound = JSON_INTEGER_MAX;
                assert!(*lag <= bound && *jitter <= bound && *cache_tokens <= bound);
                assert!(cache_blocks.is_none_or(|b| b <= bound));
                assert!(workers.is_none_or(|w| (1..=4096).contains(&w)));
                assert!(lag.checked_add(*jitter).is_some());
            }
            if let (Some(Command::Swarm(swarm)), Ok(())) = (&cli.command, &checked) {
                assert!(swarm.jobs.is_none_or(|j| (1..=JOBS_MAX).contains(&j)));
                if let (Some(seeds), None) = (swarm.seeds, &swarm.action) {
                    assert!(seeds == 0 || swarm.start.checked_add(seeds - 1).is_some());
                }
            }
        }
    }
}

/// Declares a path argument's role: parsed from the command line as is, and found by
/// [`crate::paths::check`] through its type, so that no command's list of inputs and
/// outputs is written by hand.
macro_rules! path_argument {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name(pub PathBuf);

        impl From<OsString> for $name {
            fn from(text: OsString) -> Self {
                $name(PathBuf::from(text))
            }
        }

        impl std::ops::Deref for $name {
            type Target = Path;
            fn deref(&self) -> &Path {
                &self.0
            }
        }

        impl AsRef<Path> for $name {
            fn as_ref(&self) -> &Path {
                &self.0
            }
        }
    };
}

path_argument!(
    /// A file a command reads (`-` is stdin).
    InputPath
);
path_argument!(
    /// A file a command writes.
    OutputPath
);
path_argument!(
    /// A directory a command writes files into (`DIR/<policy>.<suffix>`).
    OutputDir
);

#[cfg(test)]
mod tests {
    use super::parse_slo;
    use kvroute_core::join::Slo;

    fn slo(ttft_us: Option<u64>, tpot_us: Option<u64>) -> Slo {
        Slo { ttft_us, tpot_us }
    }

    #[test]
    fn slo_values_are_milliseconds_with_up_to_three_decimals_held_in_microseconds() {
        for (text, expected) in [
            ("ttft_ms=0.5", slo(Some(500), None)),
            ("ttft_ms=300", slo(Some(300_000), None)),
            ("ttft_ms=300.125", slo(Some(300_125), None)),
            ("ttft_ms=300.1", slo(Some(300_100), None)),
            ("ttft_ms=300.10", slo(Some(300_100), None)),
            ("tpot_ms=0.001", slo(None, Some(1))),
            ("tpot_ms=0", slo(None, Some(0))),
            ("tpot_ms=007", slo(None, Some(7_000))),
            ("ttft_ms=300,tpot_ms=50", slo(Some(300_000), Some(50_000))),
            ("tpot_ms=50,ttft_ms=300", slo(Some(300_000), Some(50_000))),
            // vLLM's spelling, alone and mixed with ours.
            ("ttft:300,tpot:50", slo(Some(300_000), Some(50_000))),
            ("ttft:0.5", slo(Some(500), None)),
            ("ttft:300.5,tpot_ms=12.25", slo(Some(300_500), Some(12_250))),
            ("tpot:1,ttft_ms=2", slo(Some(2_000), Some(1_000))),
        ] {
            assert_eq!(parse_slo(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn slo_refuses_every_other_form_of_value() {
        for (value, why) in [
            ("300.1234", "at most three decimals"),
            ("0.0001", "at most three decimals"),
            ("1e3", "expected milliseconds"),
            ("-1", "expected milliseconds"),
            ("+1", "expected milliseconds"),
            (".5", "expected milliseconds"),
            ("5.", "expected milliseconds"),
            (" 5", "expected milliseconds"),
            ("5 ", "expected milliseconds"),
            ("", "expected milliseconds"),
            ("1.2.3", "expected milliseconds"),
            ("inf", "expected milliseconds"),
            ("５", "expected milliseconds"),
        ] {
            for name in ["ttft_ms=", "ttft:"] {
                let text = format!("{name}{value}");
                let error = parse_slo(&text).expect_err(&text);
                let shown_name = name.trim_end_matches(['=', ':']);
                assert!(
                    error.starts_with(&format!("{shown_name}: "))
                        && error.contains(why)
                        && error.ends_with(&format!("found {value:?}")),
                    "{text}: {error}"
                );
            }
        }
    }

    #[test]
    fn slo_objectives_run_to_2_pow_53_minus_1_microseconds() {
        let bound = "9007199254740.991";
        assert_eq!(
            parse_slo(&format!("ttft_ms={bound}")),
            Ok(slo(Some((1 << 53) - 1), None))
        );
        assert_eq!(
            parse_slo(&format!("tpot:{bound}")),
            Ok(slo(None, Some((1 << 53) - 1)))
        );
        for past in [
            "9007199254740.992",
            "9007199254741",
            "18446744073709551616",
            &"9".repeat(5000),
        ] {
            let error = parse_slo(&format!("ttft_ms={past}")).unwrap_err();
            assert!(
                error.contains("at most 9007199254740.991 milliseconds"),
                "{error}"
            );
        }
        // Leading zeros add no microseconds, however many.
        let zeros = format!("ttft_ms={}1.5", "0".repeat(5000));
        assert_eq!(parse_slo(&zeros), Ok(slo(Some(1_500), None)));
    }

    #[test]
    fn slo_names_go_with_their_own_separator_and_each_objective_once() {
        for text in [
            "ttft=5",
            "ttft_ms:5",
            "tpot=5",
            "tpot_ms:5",
            "TTFT_ms=5",
            "e2el:5",
            "ttft_ms",
            "ttft_ms=5,",
            ",ttft_ms=5",
            " ttft_ms=5",
            "",
        ] {
            let error = parse_slo(text).expect_err(text);
            assert!(
                error.starts_with("expected ttft_ms=X, tpot_ms=Y, ttft:X or tpot:Y"),
                "{text}: {error}"
            );
        }
        // Another separator than `,` is read as part of the value, which it spoils.
        for (text, value) in [
            ("ttft:300 tpot:50", "300 tpot:50"),
            ("ttft_ms=5;tpot_ms=5", "5;tpot_ms=5"),
        ] {
            let error = parse_slo(text).expect_err(text);
            assert!(error.ends_with(&format!("found {value:?}")), "{error}");
        }
        for (text, objective) in [
            ("ttft_ms=5,ttft_ms=6", "ttft"),
            ("ttft:5,ttft:5", "ttft"),
            ("ttft_ms=5,ttft:6", "ttft"),
            ("ttft:5,tpot_ms=1,ttft_ms=6", "ttft"),
            ("tpot_ms=5,tpot:6", "tpot"),
        ] {
            assert_eq!(
                parse_slo(text),
                Err(format!(
                    "the {objective} objective is given twice \
                     ({objective}_ms and {objective} are one name)"
                )),
                "{text}"
            );
        }
    }
}

/// `kvroute conform` (SPEC.md §16.1).
#[derive(clap::Args, Debug, Clone)]
pub struct ConformArgs {
    /// The driver: how the router is started, told its fleet and asked.
    #[arg(long, value_enum)]
    pub router: ConformRouter,
    /// The router's version, as the report names it.
    #[arg(long, value_name = "V")]
    pub router_version: Option<String>,
    /// The folder of cases (every *.json in it).
    #[arg(long, value_name = "DIR", default_value = "peers/conformance/cases")]
    pub cases: InputPath,
    /// A folder for report.yaml, cases.md and logs/ (stdout gets the table anyway).
    #[arg(long, value_name = "DIR")]
    pub out: Option<OutputDir>,
    /// Milliseconds the router is given to apply a case's events before the request.
    #[arg(long, value_name = "MS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub wait_ms: u64,
    /// The bound on every other wait: a start, a readiness check, an HTTP exchange.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Run only the named cases (repeatable).
    #[arg(long, value_name = "CASE")]
    pub only: Vec<String>,
    /// The router's command line, before the arguments the driver appends.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `kvroute publish` (SPEC.md §17.3).
#[derive(clap::Args, Debug, Clone)]
pub struct PublishArgs {
    /// The trace whose cache events are published (kvroute-trace/1).
    pub trace: InputPath,
    /// A JSON object of faults, SPEC.md §16.2's `wire`: lost, replayable, restart,
    /// block_size, host_copies, swap.
    #[arg(long, value_name = "FILE")]
    pub wire: Option<InputPath>,
    /// How a tenant's cache salt is written in vLLM's extra_keys: the tenant itself
    /// (vllm), or tagged as Dynamo's vLLM worker tags it (dynamo-tagged).
    #[arg(long, value_enum, default_value = "vllm")]
    pub salt: PublishSalt,
    /// Bind a ROUTER replay socket per worker, even when the wire loses nothing.
    #[arg(long)]
    pub replay: bool,
    /// Bind worker i's PUB socket on port P + i (and its replay socket on P + workers
    /// + i) instead of ports the system chooses.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Milliseconds to wait after binding, for subscribers to connect, before the
    /// first message (and after a restart).
    #[arg(long, value_name = "MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub wait_ms: u64,
    /// Milliseconds to keep the sockets after the last message, answering replays and
    /// letting queued messages reach the subscribers (what is queued at close is lost).
    #[arg(long, value_name = "MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub hold_ms: u64,
    /// The bound on each bind and each send.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
}

/// `kvroute publish --salt` (SPEC.md §17.1).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishSalt {
    Vllm,
    DynamoTagged,
    /// No salt: every tenant's blocks unsalted, as engines serving one tenant publish.
    None,
}

/// The routers `kvroute conform` knows how to drive (SPEC.md §16.4).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConformRouter {
    /// NVIDIA Dynamo's `python -m dynamo.select_service`.
    DynamoSelect,
    /// vLLM's router, `vllm-router --policy kv_aware`.
    VllmRouter,
    /// SGLang's model gateway, `smg`.
    Smg,
    /// kvroute's own replay: the reference.
    Kvroute,
}
