//! Importing WEKA's kv-cache-tester sessions as one `kvroute-trace/1` document (SPEC.md
//! §19). A session file is one JSON document of a Claude Code conversation: its requests
//! with their prompt's 64-token block ids in the session's own key space, and its
//! sub-agents nested inside it, sharing that space. Many sessions are laid on one clock
//! by seeded gaps between their starts, each keeping its own recorded times, and their
//! requests are merged in arrival order. Memory is the live sessions' requests and the
//! ids each adds to the one before it, plus one file being read, whatever the number of
//! files: a file is read only when the merged clock reaches its session's start.

mod clock;
mod json;
mod session;

pub use clock::{parse_session_rate, SESSION_RATE_MILLI_MAX, SESSION_RATE_MILLI_MIN};
pub use session::FILE_BYTES_MAX;

use crate::import::importer::{ImportError, Imported, Importer, Problem, Report, Source};
use crate::import::request_lines::{fleet_head, whole_input_reasons};
use crate::input::limits::{CostBound, LimitsProfile, ERROR_LINES_MAX, JSON_INTEGER_MAX};
use crate::input::trace::{Event, EventKind, Namespace, PolicyParams, Request, Segment, Trace};
use clock::{mean_gap_ms, session_rate_text, session_starts};
use session::{read_session, RequestRecord, SessionRequests};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most ids one segment may group.
pub const BLOCKS_PER_SEGMENT_MAX: u64 = 65_536;

/// The limits profile of every Weka import: its prompts pass the lab limits.
const PROFILE: LimitsProfile = LimitsProfile::Scale;

/// The namespace, fleet and clock of a Weka import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WekaOptions {
    pub tenant: String,
    pub model: String,
    /// How many identical workers to create.
    pub workers: u32,
    /// Sessions per 1000 s (`--session-rate` times 1000).
    pub session_rate_milli: u64,
    /// The SplitMix64 seed of the gaps between session starts.
    pub seed: u64,
    /// `policy.dynamo_block_tokens` of the trace (SPEC.md §4.8); unset by default.
    pub dynamo_block_tokens: Option<u64>,
    /// Consecutive ids of a request that make one prefix segment: 1 (the default) is
    /// one segment a block; more trades reuse at each request's last segment for a
    /// trace a replay can hold (SPEC.md §19.2).
    pub blocks_per_segment: u64,
}

impl Default for WekaOptions {
    fn default() -> Self {
        WekaOptions {
            tenant: "weka".to_owned(),
            model: "weka-model".to_owned(),
            workers: 8,
            session_rate_milli: 100,
            seed: 0,
            dynamo_block_tokens: None,
            blocks_per_segment: 1,
        }
    }
}

/// `kvroute import weka PATH...`: session files, a directory standing for its `.json`
/// files in the byte order of their names.
#[derive(Debug, Clone)]
pub struct WekaImport {
    /// The session files in session order, directories listed.
    pub files: Vec<PathBuf>,
    /// Problems found before any file is read (a directory that cannot be listed or
    /// holds no `.json` file, an output that is an input): the import reports these.
    pub refusals: Vec<Problem>,
    pub options: WekaOptions,
}

impl WekaImport {
    /// The import of `paths` as given, each directory replaced by its `.json` files.
    pub fn new(paths: &[PathBuf], options: WekaOptions) -> WekaImport {
        let (files, refusals) = session_files(paths);
        WekaImport {
            files,
            refusals,
            options,
        }
    }
}

/// `paths` with each directory replaced by its entries named `*.json` that are files,
/// in the byte order of their names; and the directories that gave none.
pub fn session_files(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<Problem>) {
    let (mut files, mut problems) = (Vec::new(), Vec::new());
    for path in paths {
        if !std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            files.push(path.clone());
            continue;
        }
        match json_entries(path) {
            Ok(entries) if entries.is_empty() => problems.push(Problem::of_input(
                path,
                "no .json file in the directory".to_owned(),
            )),
            Ok(entries) => files.extend(entries),
            Err(e) => problems.push(Problem::of_input(
                path,
                format!("cannot list the directory: {e}"),
            )),
        }
    }
    (files, problems)
}

fn json_entries(directory: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let path = entry?.path();
        let named_json = path
            .file_name()
            .is_some_and(|name| name.as_encoded_bytes().ends_with(b".json"));
        if named_json && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            entries.push(path);
        }
    }
    entries.sort_by(|a, b| {
        let name = |p: &PathBuf| p.file_name().map(|n| n.as_encoded_bytes().to_vec());
        name(a).cmp(&name(b))
    });
    Ok(entries)
}

impl Importer for WekaImport {
    fn name(&self) -> &'static str {
        "weka"
    }

    fn inputs(&self) -> Vec<&Path> {
        self.files.iter().map(PathBuf::as_path).collect()
    }

    fn input_kind(&self) -> Option<&'static str> {
        Some("session file")
    }

    fn import(
        &self,
        sources: Vec<Source<'_>>,
        sink: &mut dyn FnMut(Event),
    ) -> Result<Imported, ImportError> {
        if !self.refusals.is_empty() {
            return Err(ImportError::Rejected(self.refusals.clone()));
        }
        let option_reasons = option_errors(&self.options, self.files.len());
        if !option_reasons.is_empty() {
            let problem = |reason| Problem::of_import(self.command(), reason);
            return Err(ImportError::Rejected(
                option_reasons.into_iter().map(problem).collect(),
            ));
        }
        let mut merge = Merge::new(self, sources);
        merge.run(sink);
        merge.finish()
    }
}

fn option_errors(options: &WekaOptions, files: usize) -> Vec<String> {
    let mut reasons = Vec::new();
    let workers_max = PROFILE.workers_max();
    if options.workers == 0 || u64::from(options.workers) > workers_max {
        reasons.push(format!(
            "workers: expected 1 to {workers_max} (the scale limit), found {}",
            options.workers
        ));
    }
    if options.tenant.is_empty() {
        reasons.push("tenant: expected a non-empty string".to_owned());
    }
    if options.model.is_empty() {
        reasons.push("model: expected a non-empty string".to_owned());
    }
    if options.dynamo_block_tokens == Some(0) {
        reasons.push("dynamo_block_tokens: expected a positive integer, found 0".to_owned());
    }
    if !(1..=BLOCKS_PER_SEGMENT_MAX).contains(&options.blocks_per_segment) {
        reasons.push(format!(
            "blocks_per_segment: expected 1 to {BLOCKS_PER_SEGMENT_MAX}, found {}",
            options.blocks_per_segment
        ));
    }
    let rates = SESSION_RATE_MILLI_MIN..=SESSION_RATE_MILLI_MAX;
    if !rates.contains(&options.session_rate_milli) {
        reasons.push(format!(
            "session_rate: expected 0.001 to 1000 sessions per second, found {}",
            session_rate_text(options.session_rate_milli)
        ));
    }
    if files == 0 {
        reasons.push("no session file given".to_owned());
    }
    reasons
}

/// A session being written: its requests, and the ids of the last request written in
/// each of its contexts.
struct Live {
    start: u64,
    requests: SessionRequests,
    current_ids: Vec<Vec<u64>>,
}

/// What the report counts.
#[derive(Default)]
struct Totals {
    requests: u64,
    segments: u64,
    empty_sessions: u64,
    subagents: u64,
    subagent_requests: u64,
    distinct_blocks: u64,
    last_tick: u64,
    bound: CostBound,
}

/// The k-way merge of the sessions' requests in `(tick, session, k)` order.
struct Merge<'i, 's> {
    import: &'i WekaImport,
    sources: Vec<Option<Source<'s>>>,
    starts: Vec<u64>,
    /// The next session to read.
    unread: usize,
    live: Vec<Option<Live>>,
    /// Each live session's next request: `(tick, session, place)`.
    heap: BinaryHeap<Reverse<(u64, usize, usize)>>,
    namespace: Namespace,
    problems: Vec<Problem>,
    more_problems: u64,
    totals: Totals,
    seq: u64,
}

impl<'i, 's> Merge<'i, 's> {
    fn new(import: &'i WekaImport, sources: Vec<Source<'s>>) -> Merge<'i, 's> {
        let options = &import.options;
        let sessions = import.files.len();
        Merge {
            import,
            sources: sources.into_iter().map(Some).collect(),
            starts: session_starts(sessions, options.session_rate_milli, options.seed),
            unread: 0,
            live: (0..sessions).map(|_| None).collect(),
            heap: BinaryHeap::new(),
            namespace: Namespace {
                tenant: options.tenant.as_str().into(),
                model: options.model.as_str().into(),
                adapter: "base".into(),
            },
            problems: Vec::new(),
            more_problems: 0,
            totals: Totals::default(),
            seq: 0,
        }
    }

    /// Reads every session, writing each request to `sink` in order while no problem
    /// has been found.
    fn run(&mut self, sink: &mut dyn FnMut(Event)) {
        loop {
            let next_tick = self.heap.peek().map(|Reverse((tick, _, _))| *tick);
            let due = self.unread < self.starts.len()
                && next_tick.is_none_or(|tick| self.starts[self.unread] <= tick);
            if due {
                self.read_next_session();
                continue;
            }
            let Some(Reverse((_, session, place))) = self.heap.pop() else {
                return;
            };
            let event = self.event(session, place);
            sink(event);
        }
    }

    /// Reads the next session's file and, while the import is accepted, puts its first
    /// request on the heap.
    fn read_next_session(&mut self) {
        let index = self.unread;
        self.unread += 1;
        let path = &self.import.files[index];
        let source = self.sources.get_mut(index).and_then(Option::take);
        let Some(mut source) = source else {
            return self.problem(Problem::of_import(
                self.import.command(),
                format!("no input was opened for {}", path.display()),
            ));
        };
        let mut bytes = Vec::new();
        let read = (&mut source)
            .take(FILE_BYTES_MAX as u64 + 1)
            .read_to_end(&mut bytes);
        drop(source);
        if let Err(e) = read {
            return self.problem(Problem::of_input(
                path,
                format!("cannot read session file: {e}"),
            ));
        }
        if bytes.len() > FILE_BYTES_MAX {
            let reason =
                format!("longer than {FILE_BYTES_MAX} bytes (the cap of one session file)");
            return self.problem(Problem::of_input(path, reason));
        }
        match read_session(&bytes) {
            Ok(requests) => self.accept(index, requests),
            Err(reasons) => {
                for (line, reason) in reasons {
                    self.problem(Problem::at_line(path, line, reason));
                }
            }
        }
    }

    /// Counts a checked session and, while nothing was refused, makes it live.
    fn accept(&mut self, index: usize, requests: SessionRequests) {
        let start = self.starts[index];
        let path = &self.import.files[index];
        for record in &requests.records {
            let tick = u128::from(start) + u128::from(record.offset_ms);
            if tick > u128::from(JSON_INTEGER_MAX) {
                let reason = format!(
                    "request {} (s{}-r{}) arrives at tick {tick}, past {JSON_INTEGER_MAX}",
                    record.k,
                    index + 1,
                    record.k
                );
                self.problem(Problem::of_input(path, reason));
                return;
            }
        }
        let totals = &mut self.totals;
        totals.requests += requests.records.len() as u64;
        totals.empty_sessions += u64::from(requests.records.is_empty());
        totals.subagents += requests.subagents;
        totals.subagent_requests += requests.subagent_requests;
        totals.distinct_blocks += requests.distinct_blocks;
        for record in &requests.records {
            let ids = u64::from(record.kept_ids) + u64::from(record.added_len);
            totals.segments += ids.div_ceil(self.import.options.blocks_per_segment);
            totals
                .bound
                .add_request(record.prompt_tokens, record.decode_tokens);
            totals.last_tick = totals.last_tick.max(start + record.offset_ms);
        }
        let over_limit = totals.requests > PROFILE.requests_max();
        if !self.problems.is_empty() || over_limit || requests.records.is_empty() {
            return;
        }
        let first_tick = start + requests.records[0].offset_ms;
        self.heap.push(Reverse((first_tick, index, 0)));
        self.live[index] = Some(Live {
            start,
            current_ids: vec![Vec::new(); requests.contexts as usize],
            requests,
        });
    }

    /// The event of request `place` of live session `session`; the session's next
    /// request goes on the heap, or the session is dropped after its last.
    fn event(&mut self, session: usize, place: usize) -> Event {
        let live = self.live[session]
            .as_mut()
            .expect("a session on the heap is live");
        let record = live.requests.records[place];
        let ids = &mut live.current_ids[record.context as usize];
        ids.truncate(record.kept_ids as usize);
        let added = record.added_start as usize..(record.added_start + record.added_len) as usize;
        ids.extend_from_slice(&live.requests.added_ids[added]);
        let grouping = Grouping {
            block_tokens: live.requests.block_tokens,
            blocks_per_segment: self.import.options.blocks_per_segment,
        };
        let prefix = prefix(session + 1, ids, &record, grouping);
        let tick = live.start + record.offset_ms;
        match live.requests.records.get(place + 1) {
            Some(next) => {
                self.heap
                    .push(Reverse((live.start + next.offset_ms, session, place + 1)))
            }
            None => self.live[session] = None,
        }
        self.seq += 1;
        Event {
            seq: self.seq,
            tick,
            kind: EventKind::Request(Request {
                id: format!("s{}-r{}", session + 1, record.k).into(),
                namespace: self.namespace.clone(),
                prefix,
                prompt_tokens: record.prompt_tokens,
                decode_tokens: record.decode_tokens,
            }),
        }
    }

    fn problem(&mut self, problem: Problem) {
        if self.problems.len() < ERROR_LINES_MAX {
            self.problems.push(problem);
        } else {
            self.more_problems += 1;
        }
        // Nothing more is written once the import is refused.
        self.heap.clear();
        self.live.iter_mut().for_each(|live| *live = None);
    }

    /// The trace head and report, or every problem found.
    fn finish(mut self) -> Result<Imported, ImportError> {
        for reason in whole_input_reasons(
            self.totals.requests,
            &self.totals.bound,
            self.import.options.dynamo_block_tokens,
            "sessions",
        ) {
            self.problem(Problem::of_import(self.import.command(), reason));
        }
        if !self.problems.is_empty() {
            if self.more_problems > 0 {
                let reason = format!("... and {} more errors", self.more_problems);
                self.problems
                    .push(Problem::of_import(self.import.command(), reason));
            }
            return Err(ImportError::Rejected(self.problems));
        }
        if self.totals.requests == 0 {
            let sessions = self.starts.len();
            let noun = if sessions == 1 {
                "session holds"
            } else {
                "sessions hold"
            };
            let reason = format!("nothing to route: the {sessions} {noun} no request");
            return Err(ImportError::Empty(Problem::of_import(
                self.import.command(),
                reason,
            )));
        }
        let head = trace_head(&self.import.options, &self.namespace);
        let report = self.report(head.workers.len() as u64);
        Ok(Imported { head, report })
    }

    fn report(&self, workers: u64) -> Report {
        let t = &self.totals;
        let options = &self.import.options;
        let plural = |n: u64, one: &'static str, many: &'static str| {
            format!("{n} {}", if n == 1 { one } else { many })
        };
        let sessions = self.starts.len() as u64;
        let sessions_line = format!(
            "sessions: {} ({} with no request), {} with {} of the requests, {}",
            sessions,
            t.empty_sessions,
            plural(t.subagents, "sub-agent", "sub-agents"),
            t.subagent_requests,
            plural(t.distinct_blocks, "distinct block", "distinct blocks"),
        );
        let clock_line = format!(
            "clock: sessions start from tick 0 to {} (mean gap {} ms, --session-rate {}, --seed {}); \
             the last request arrives at tick {}",
            self.starts.last().copied().unwrap_or(0),
            mean_gap_ms(options.session_rate_milli),
            session_rate_text(options.session_rate_milli),
            options.seed,
            t.last_tick
        );
        Report {
            counts: vec![
                (t.requests, "request", "requests"),
                (workers, "worker", "workers"),
                (t.segments, "segment", "segments"),
            ],
            lines: vec![sessions_line, clock_line],
        }
    }
}

/// How a request's ids become segments.
#[derive(Clone, Copy)]
struct Grouping {
    block_tokens: u64,
    blocks_per_segment: u64,
}

/// A request's prefix (SPEC.md §19.2), in session `session`'s key space: each id `b`
/// tokens for the full blocks and the rest of the prompt for a named partial last
/// block; one segment an id keyed `s<i>-b<id>`, or each run of `blocks_per_segment`
/// ids one segment keyed `s<i>-g<xxh3 of the run's ids>` carrying their tokens.
fn prefix(session: usize, ids: &[u64], record: &RequestRecord, grouping: Grouping) -> Vec<Segment> {
    let b = grouping.block_tokens;
    let full = record.prompt_tokens / b;
    let tokens = |j: usize| {
        if (j as u64) < full {
            b
        } else {
            record.prompt_tokens - b * full
        }
    };
    if grouping.blocks_per_segment == 1 {
        let segment = |(j, id): (usize, &u64)| Segment {
            key: format!("s{session}-b{id}").into(),
            tokens: tokens(j),
        };
        return ids.iter().enumerate().map(segment).collect();
    }
    let run = grouping.blocks_per_segment as usize;
    ids.chunks(run)
        .enumerate()
        .map(|(c, chunk)| {
            let bytes: Vec<u8> = chunk.iter().flat_map(|id| id.to_le_bytes()).collect();
            let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
            Segment {
                key: format!("s{session}-g{hash:016x}").into(),
                tokens: (c * run..c * run + chunk.len()).map(tokens).sum(),
            }
        })
        .collect()
}

/// The imported trace without its events: the default policy (with
/// `dynamo_block_tokens` when asked for) and `options.workers` idle workers.
fn trace_head(options: &WekaOptions, namespace: &Namespace) -> Trace {
    let policy = PolicyParams {
        dynamo_block_tokens: options.dynamo_block_tokens,
        ..PolicyParams::default()
    };
    fleet_head(options.workers, &namespace.model, policy)
}

#[cfg(test)]
mod tests;
