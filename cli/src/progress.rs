//! Progress of a long `replay`, `simulate`, `import` or `verify` on stderr, never on
//! stdout: an indicatif spinner when stderr is a terminal, otherwise one plain line every
//! few seconds (a CI log, a cluster job's captured output). Nothing at all is shown for
//! a run shorter than the quiet period, so short runs (and every golden and test of
//! their stderr) look as they always did.
//!
//! What is shown is what the command can say without slowing down: its phase, the
//! bytes of output written (or of input read, for `verify`) so far, and the time
//! elapsed. Where the input's size is known (a receipt file), the bytes read are shown
//! of that total, with the share done, the rate and an estimate of the time left; the
//! decisions a `replay` or `simulate` has routed are shown the same way, of the total
//! its trace makes them route (core counts them, one relaxed addition a decision).

use kvroute_core::route::DecisionsRouted;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A run shorter than this shows no progress.
const QUIET_PERIOD: Duration = Duration::from_secs(2);
/// How often the plain line is printed when stderr is not a terminal.
const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// Milliseconds from an environment variable, for tests that need progress on a short
/// run: `KVROUTE_PROGRESS_AFTER_MS` (the quiet period) and `KVROUTE_PROGRESS_EVERY_MS`
/// (the line interval).
fn duration_from_env(name: &str, default: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

struct Shared {
    command: &'static str,
    phase: Mutex<String>,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    /// The size of what is read, when known (0: unknown).
    bytes_read_total: AtomicU64,
    /// The decisions counted, how many the command routes in all, and since when.
    decisions: Mutex<Option<(DecisionsRouted, u64, Instant)>>,
    done: AtomicBool,
    started: Instant,
    quiet: Duration,
}

/// The progress of one command; dropping it (or [`Progress::finish`]) ends the display.
pub struct Progress {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts watching; shows nothing until the quiet period has passed.
    pub fn start(command: &'static str, phase: &str) -> Progress {
        let shared = Arc::new(Shared {
            command,
            phase: Mutex::new(phase.to_owned()),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_read_total: AtomicU64::new(0),
            decisions: Mutex::new(None),
            done: AtomicBool::new(false),
            started: Instant::now(),
            quiet: duration_from_env("KVROUTE_PROGRESS_AFTER_MS", QUIET_PERIOD),
        });
        let quiet = shared.quiet;
        let every = duration_from_env("KVROUTE_PROGRESS_EVERY_MS", LINE_INTERVAL);
        let watched = Arc::clone(&shared);
        let thread = std::thread::spawn(move || show(&watched, quiet, every));
        Progress {
            shared,
            thread: Some(thread),
        }
    }

    /// Names what the command is doing now.
    pub fn phase(&self, phase: &str) {
        let mut current = self.shared.phase.lock().unwrap_or_else(|e| e.into_inner());
        phase.clone_into(&mut current);
    }

    /// Wraps an output writer so that its bytes are counted.
    pub fn counting<'a>(&'a self, inner: &'a mut dyn Write) -> Counting<'a> {
        Counting {
            inner,
            bytes_written: &self.shared.bytes_written,
        }
    }

    /// Wraps an input reader so that its bytes are counted.
    /// Says how many bytes the reader of [`Progress::reading`] will pass in all, so the
    /// status can show the share done and an estimate of the time left.
    pub fn expect_read_total(&self, total_bytes: u64) {
        self.shared
            .bytes_read_total
            .store(total_bytes, Ordering::Relaxed);
    }

    /// Shows `routed` (from now on) as decisions done of `total`, with the rate and an
    /// estimate of the time left.
    pub fn count_decisions(&self, routed: &DecisionsRouted, total: u64) {
        let mut decisions = self
            .shared
            .decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *decisions = Some((routed.clone(), total, Instant::now()));
    }

    pub fn reading<R: io::Read>(&self, inner: R) -> Reading<'_, R> {
        Reading {
            inner,
            bytes_read: &self.shared.bytes_read,
        }
    }

    /// Ends the display (clears the spinner).
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
            // A run that outlasted the quiet period says once more, at its end, what it
            // did: a log then ends with the figures done, and a run the display thread
            // never got to show (a loaded machine) still shows them once.
            let shared = &self.shared;
            if shared.started.elapsed() >= shared.quiet && !io::stderr().is_terminal() {
                let _ = writeln!(
                    io::stderr().lock(),
                    "{}",
                    status_line(shared, shared.started)
                );
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A writer that counts the bytes it passes on.
pub struct Counting<'a> {
    inner: &'a mut dyn Write,
    bytes_written: &'a AtomicU64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that counts the bytes it passes on.
pub struct Reading<'a, R> {
    inner: R,
    bytes_read: &'a AtomicU64,
}

impl<R: io::Read> io::Read for Reading<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn status_line(shared: &Shared, started: Instant) -> String {
    let phase = shared
        .phase
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let bytes = shared.bytes_written.load(Ordering::Relaxed);
    let written = if bytes > 0 {
        format!(", {} written", indicatif::HumanBytes(bytes))
    } else {
        String::new()
    };
    let read = match shared.bytes_read.load(Ordering::Relaxed) {
        0 => String::new(),
        bytes => match shared.bytes_read_total.load(Ordering::Relaxed) {
            0 => format!(", {} read", indicatif::HumanBytes(bytes)),
            total => of_total(bytes, total, started.elapsed()),
        },
    };
    let decisions = match &*shared.decisions.lock().unwrap_or_else(|e| e.into_inner()) {
        Some((routed, total, since)) => decisions_of_total(routed.get(), *total, since.elapsed()),
        None => String::new(),
    };
    format!(
        "{}: {phase}{decisions}{written}{read}, {} elapsed",
        shared.command,
        indicatif::HumanDuration(started.elapsed())
    )
}

/// `, 1,200,000 of 4,800,000 decisions (25%), 410,000/s, about 9s left`.
fn decisions_of_total(done: u64, total: u64, elapsed: Duration) -> String {
    share_of_total(done, total, elapsed, "decisions", &|n| {
        indicatif::HumanCount(n).to_string()
    })
}

/// `, 32 MiB of 89 MiB read (36%), 41 MiB/s, about 2s left`.
fn of_total(bytes: u64, total: u64, elapsed: Duration) -> String {
    share_of_total(bytes, total, elapsed, "read", &|n| {
        indicatif::HumanBytes(n).to_string()
    })
}

/// The least share done, in per mille, and the least time measured before an
/// estimate of the time left is shown: before either, the mean rate still carries the
/// start-up (the trace read, the oracle started) and the estimate is far off.
const ESTIMATE_AFTER_SHARE_PM: u64 = 50;
const ESTIMATE_AFTER: Duration = Duration::from_secs(3);

/// `, DONE of TOTAL WHAT (share%), RATE/s, about T left`, amounts shown by `show`: the
/// rate is the mean so far, and the estimate (when [`time_left`] has one) the rest at
/// that rate.
fn share_of_total(
    done: u64,
    total: u64,
    elapsed: Duration,
    what: &str,
    show: &dyn Fn(u64) -> String,
) -> String {
    let share = done.min(total) * 100 / total.max(1);
    let elapsed_ms = elapsed.as_millis().max(1);
    let rate = u64::try_from(u128::from(done) * 1000 / elapsed_ms).unwrap_or(u64::MAX);
    let left = time_left(done, total, elapsed).map_or(String::new(), |left| {
        format!(", about {} left", indicatif::HumanDuration(left))
    });
    format!(
        ", {} of {} {what} ({share}%), {}/s{left}",
        show(done),
        show(total),
        show(rate)
    )
}

/// The time left at the mean rate so far, once that rate means something: at least
/// [`ESTIMATE_AFTER_SHARE_PM`] of the total done and [`ESTIMATE_AFTER`] elapsed.
fn time_left(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    let share_pm = u128::from(done.min(total)) * 1000 / u128::from(total.max(1));
    if share_pm < u128::from(ESTIMATE_AFTER_SHARE_PM) || elapsed < ESTIMATE_AFTER || done == 0 {
        return None;
    }
    let left_ms = elapsed.as_millis() * u128::from(total.saturating_sub(done)) / u128::from(done);
    Some(Duration::from_millis(
        u64::try_from(left_ms).unwrap_or(u64::MAX),
    ))
}

/// The display thread: waits out the quiet period, then shows the status until done.
fn show(shared: &Shared, quiet: Duration, every: Duration) {
    let started = shared.started;
    let wait_until = |deadline: Instant| {
        while !shared.done.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::park_timeout(deadline - now);
        }
        false
    };
    if !wait_until(started + quiet) {
        return;
    }
    if io::stderr().is_terminal() {
        let spinner = indicatif::ProgressBar::new_spinner();
        loop {
            spinner.set_message(status_line(shared, started));
            spinner.tick();
            if !wait_until(Instant::now() + Duration::from_millis(200)) {
                break;
            }
        }
        spinner.finish_and_clear();
    } else {
        loop {
            let _ = writeln!(io::stderr().lock(), "{}", status_line(shared, started));
            if !wait_until(Instant::now() + every) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{share_of_total, time_left};
    use std::time::Duration;

    #[test]
    fn no_estimate_until_enough_is_done_and_measured() {
        let secs = Duration::from_secs;
        // A slow start: 0.1% of a receipt read in the first seconds says nothing yet.
        assert_eq!(time_left(1_000, 1_000_000, secs(2)), None);
        assert_eq!(time_left(1_000, 1_000_000, secs(60)), None);
        // Enough done, but too soon to tell.
        assert_eq!(
            time_left(500_000, 1_000_000, Duration::from_millis(500)),
            None
        );
        // Enough of both: the rest at the mean rate.
        assert_eq!(time_left(100_000, 1_000_000, secs(4)), Some(secs(36)));
        assert_eq!(time_left(1_000_000, 1_000_000, secs(6)), Some(secs(0)));
        let line = share_of_total(1_000, 1_000_000, secs(2), "read", &|n| n.to_string());
        assert_eq!(line, ", 1000 of 1000000 read (0%), 500/s");
    }
}
