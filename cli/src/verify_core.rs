//! `kvroute verify --trace TRACE` without a receipt: core and the oracle replay the
//! user's own trace side by side. Core's `--format json` writer runs in a thread into a
//! bounded in-memory pipe, which the verifier reads as the receipt while the oracle
//! produces its own, so neither receipt is held. It prints the agreement, or the first
//! divergent decision and a shrunk trace that still diverges, written next to TRACE
//! (as `swarm` does for generated traces).

use crate::{progress, read_id_key, read_input, Failure};
use kvroute_cli::verify::{verify_stream, VerifyError};
use kvroute_core::output;
use kvroute_core::replay;
use kvroute_core::route::Compiled;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// Chunks of core's receipt in flight (64 KiB each).
const CHUNKS_IN_FLIGHT: usize = 16;
const CHUNK_BYTES: usize = 64 * 1024;

/// The writing end of the pipe: a closed reader makes every write fail.
struct PipeWriter(mpsc::SyncSender<Vec<u8>>);

impl Write for PipeWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.send(buf.to_vec()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the verifier stopped")
        })?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The reading end of the pipe.
struct PipeReader {
    receiver: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for PipeReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let buf = self.fill_buf()?;
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for PipeReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.pos == self.chunk.len() {
            match self.receiver.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.chunk[self.pos..])
    }
    fn consume(&mut self, n: usize) {
        self.pos += n;
    }
}

/// Core's name and the oracle's in a verifier message about a receipt.
fn as_core_and_oracle(problem: &str) -> String {
    problem
        .replace("the receipt's", "core's")
        .replace("the receipt", "core")
        .replace("the recomputation", "the oracle")
}

pub fn verify_core(trace_path: &Path, id_key: Option<&Path>) -> Result<(), Failure> {
    let key = id_key.map(read_id_key).transpose()?;
    let progress = progress::Progress::start("verify", "reading the trace");
    let trace_bytes = read_input(trace_path, "trace")?;
    let mut trace = kvroute_core::parse_trace(&trace_bytes)
        .map_err(|errors| Failure::invalid(errors.lines()))?;
    let digest = output::trace_digest(&trace);
    if let Some(key) = &key {
        kvroute_core::output::key_request_ids(&mut trace, key);
    }
    let (sender, receiver) = mpsc::sync_channel(CHUNKS_IN_FLIGHT);
    let verdict = std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut out = std::io::BufWriter::with_capacity(CHUNK_BYTES, PipeWriter(sender));
            // A write error only means the verifier stopped reading: its verdict stands.
            let _ = replay::write_json(&Compiled::new(&trace), &digest, &mut out)
                .and_then(|_| out.flush());
        });
        let mut core_receipt = PipeReader {
            receiver,
            chunk: Vec::new(),
            pos: 0,
        };
        let phase = |name: &str| progress.phase(name);
        verify_stream(&trace_bytes, &mut core_receipt, key.as_deref(), &phase)
    });
    progress.finish();
    match verdict {
        Ok(verified) => outln!(
            "ok: core and the oracle agree on {} decisions ({})",
            verified.decisions,
            verified.receipt_digest
        ),
        Err(VerifyError::InvalidTrace(lines)) => Err(Failure::invalid(lines)),
        Err(VerifyError::Unreadable(reason)) => Err(Failure::other(format!(
            "kvroute verify: internal error: core's receipt: {reason}"
        ))),
        Err(VerifyError::Rejected(problem)) => {
            let mut lines = vec![format!(
                "kvroute verify: core and the oracle diverge on {}: {}",
                trace_path.display(),
                as_core_and_oracle(&problem)
            )];
            lines.push(reproducer_line(trace_path, &trace_bytes));
            Err(Failure { status: 1, lines })
        }
    }
}

/// Shrinks the trace and writes it next to TRACE; the line that says where.
fn reproducer_line(trace_path: &Path, trace_bytes: &[u8]) -> String {
    let diverges = |bytes: &[u8]| kvroute_harness::differential::compare(bytes).is_err();
    let shrunk = shrink(trace_bytes, &diverges);
    let path = reproducer_path(trace_path);
    match crate::out::emit(&shrunk, Some(&path)) {
        Ok(()) => format!(
            "  shrunk trace: {} (reproduce: kvroute verify --trace {})",
            path.display(),
            path.display()
        ),
        Err(_) => format!("  shrunk trace: could not write {}", path.display()),
    }
}

/// `DIR/NAME.divergent.json` beside TRACE (the current directory for stdin).
fn reproducer_path(trace_path: &Path) -> PathBuf {
    if trace_path.as_os_str() == "-" {
        return PathBuf::from("stdin.divergent.json");
    }
    let stem = trace_path
        .file_stem()
        .map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    trace_path.with_file_name(format!("{stem}.divergent.json"))
}

/// Traces up to this many events are shrunk event by event (each try replays both
/// implementations); a longer one is first cut to its shortest diverging prefix.
const GREEDY_SHRINK_EVENTS: usize = 400;

/// A smaller trace on which `diverges` still holds: the shortest diverging prefix of
/// its events in `(tick, seq)` order (a decision depends only on the events before it),
/// then, when that is short, the harness's greedy shrinker. The input itself when it
/// is not a JSON object with events.
pub fn shrink(trace_bytes: &[u8], diverges: &dyn Fn(&[u8]) -> bool) -> Vec<u8> {
    let Ok(mut trace) = serde_json::from_slice::<serde_json::Value>(trace_bytes) else {
        return trace_bytes.to_vec();
    };
    let Some(events) = trace.get_mut("events").and_then(|e| e.as_array_mut()) else {
        return trace_bytes.to_vec();
    };
    let key = |e: &serde_json::Value| (e["tick"].as_u64(), e["seq"].as_u64());
    events.sort_by_key(key);
    let all = std::mem::take(events);
    let with_prefix = |n: usize| {
        let mut copy = trace.clone();
        copy["events"] = serde_json::Value::Array(all[..n].to_vec());
        serde_json::to_vec(&copy).unwrap_or_default()
    };
    // The shortest prefix that diverges, by bisection: the whole trace diverges.
    let (mut low, mut high) = (0usize, all.len());
    while low < high {
        let mid = low + (high - low) / 2;
        if diverges(&with_prefix(mid)) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let prefix = with_prefix(high);
    if !diverges(&prefix) {
        return trace_bytes.to_vec();
    }
    if high <= GREEDY_SHRINK_EVENTS {
        return kvroute_harness::sweep::shrink(&prefix);
    }
    let value: serde_json::Value = serde_json::from_slice(&prefix).unwrap_or_default();
    serde_json::to_vec_pretty(&value).unwrap_or(prefix)
}

#[cfg(test)]
mod tests {
    use super::shrink;

    #[test]
    fn shrinking_keeps_the_shortest_diverging_prefix_of_events() {
        let events: Vec<String> = (1..=1000)
            .map(|seq| format!(r#"{{"seq":{seq},"tick":{}}}"#, seq / 3))
            .collect();
        let trace = format!(r#"{{"workers":[],"events":[{}]}}"#, events.join(","));
        // "Diverges" once the event with seq 700 is in: the cut keeps exactly 1..=700.
        let diverges = |bytes: &[u8]| {
            let value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            value["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["seq"] == 700)
        };
        let shrunk: serde_json::Value =
            serde_json::from_slice(&shrink(trace.as_bytes(), &diverges)).unwrap();
        let seqs: Vec<u64> = shrunk["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (1..=700).collect::<Vec<_>>());
        // Nothing diverges: the input comes back unchanged.
        assert_eq!(shrink(trace.as_bytes(), &|_| false), trace.as_bytes());
    }
}
