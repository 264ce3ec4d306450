//! The client side of `kvroute-peer/1` (SPEC.md §15): a peer is a child process spoken
//! to in JSON Lines over its stdin and stdout, in lock-step, every wait bounded.
//!
//! [`PeerProcess`] owns the child and everything that can outlive a run: it starts the
//! peer in a process group of its own, keeps the last lines of its stderr for error
//! messages, and reads and writes its ends of the pipes without blocking, each wait in
//! `poll` bounded by the timeout, so no peer (nor a process it started that holds a
//! pipe open) can make kvroute hang; on a timeout it kills the group. Every exit path
//! kills the group and reaps the peer (`Drop`, and [`kill_live_peers`] for a signal).
//! What a message must contain is checked by the caller ([`crate::run`]); this module
//! knows the transport, the hello, and how to turn a failure into one clear line.

use serde_json::Value;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The protocol's name, as both hellos carry it.
pub const PROTOCOL: &str = "kvroute-peer/1";
/// How many of the peer's last stderr lines an error quotes.
pub const STDERR_LINES: usize = 20;
/// Where a quoted stderr line is cut.
const STDERR_LINE_BYTES: usize = 500;
/// How long a failed or finished run waits for the rest of the peer's stderr.
const STDERR_DRAIN: Duration = Duration::from_millis(200);
/// The longest line the peer may write: a bound on what one answer can make kvroute hold.
pub const LINE_BYTES_MAX: u64 = 64 << 20;

/// The peers alive in this process, by process id (each its group's leader), for
/// [`kill_live_peers`].
static LIVE_PEERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills and reaps every peer this process started and has not reaped yet: what a
/// SIGINT or SIGTERM handler calls before exiting, so no peer outlives kvroute.
pub fn kill_live_peers() {
    let pids = LIVE_PEERS.lock().map(|p| p.clone()).unwrap_or_default();
    for pid in pids {
        // SAFETY: plain system calls on a process group and a child this process started
        // and has not reaped, so the ids cannot name another process.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
            libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
        }
    }
}

/// Which answers a peer gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerKinds {
    pub reuse: bool,
    pub choice: bool,
}

/// The peer's hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub name: String,
    pub version: String,
    pub answers: AnswerKinds,
    /// The peer takes `reset` between traces (SPEC.md §15.2, message 4), so one process
    /// can serve many.
    pub reset: bool,
}

/// The message kvroute waits on or sends, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    Hello,
    Fleet,
    Seq(u64),
    Reset,
    End,
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Message::Hello => write!(f, "hello"),
            Message::Fleet => write!(f, "fleet"),
            Message::Seq(seq) => write!(f, "seq {seq}"),
            Message::Reset => write!(f, "reset"),
            Message::End => write!(f, "end"),
        }
    }
}

/// A failed run, as SPEC.md §15.3 prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerError {
    /// The peer's name from its hello, or the command before it.
    pub peer: String,
    pub what: String,
    /// `(seq, tick)` of the last event sent.
    pub last_event: Option<(u64, u64)>,
    /// The peer's last stderr lines.
    pub stderr: Vec<String>,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "peer {}: {} ", self.peer, self.what)?;
        match self.last_event {
            Some((seq, tick)) => write!(f, "(last event sent: seq {seq}, tick {tick})")?,
            None => write!(f, "(before the first event)")?,
        }
        if !self.stderr.is_empty() {
            write!(f, "\npeer stderr (last {} lines):", self.stderr.len())?;
            for line in &self.stderr {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

/// Makes the child killed when kvroute dies, even by SIGKILL, where no handler runs to
/// kill it (Linux's parent-death signal). A parent already gone when the child sets it
/// is caught by comparing the parent's pid. Linux sends the signal when the thread that
/// spawned the child ends, so a peer must be driven and reaped on the thread that
/// started it, as every caller here does.
fn die_with_parent(command: &mut Command) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before exec and calls only prctl,
    // getppid and raise, which are async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Waits until `fd` is ready for `events` (`POLLIN`, `POLLOUT`) or `deadline` passes;
/// false on the deadline. A hang-up or an error counts as ready: the read or write that
/// follows reports it.
fn ready(fd: std::os::fd::RawFd, events: libc::c_short, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut poll = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, for a pipe this process owns.
        let n = unsafe { libc::poll(&mut poll, 1, ms) };
        if n > 0 {
            return true;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return true;
        }
    }
}

/// Makes our end of a pipe non-blocking: every read and write then waits in [`ready`],
/// bounded by a deadline, however the other end behaves (a process that left the
/// peer's group and holds the pipe open cannot make kvroute block).
fn set_nonblocking(fd: std::os::fd::RawFd) {
    // SAFETY: fcntl on a pipe this process owns.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
    }
}

/// How many bytes of unsent messages kvroute holds before it writes them out (events
/// that need no answer are sent in batches; the lock-step wait always writes first).
const SEND_BATCH_BYTES: usize = 64 * 1024;

/// A running peer.
pub struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    /// Bytes not yet written to stdin.
    pending: Vec<u8>,
    /// Bytes read from stdout, not yet taken as lines; `scanned` of them hold no `\n`.
    received: Vec<u8>,
    scanned: usize,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_thread: Option<JoinHandle<()>>,
    timeout: Duration,
    name: String,
    last_event: Option<(u64, u64)>,
    reaped: Option<ExitStatus>,
    finished: bool,
}

/// A thread that reads the peer's stderr until it closes, keeping its last
/// [`STDERR_LINES`] lines in `tail`, each cut to at most [`STDERR_LINE_BYTES`].
fn keep_stderr_tail(
    stderr: std::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
) -> JoinHandle<()> {
    let mut pipe = BufReader::new(stderr);
    std::thread::spawn(move || {
        let mut line = Vec::new();
        loop {
            line.clear();
            // A line longer than the bound is quoted in pieces, never held whole.
            match (&mut pipe).take(64 * 1024).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            let mut cut = text.len().min(STDERR_LINE_BYTES);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == STDERR_LINES {
                tail.pop_front();
            }
            tail.push_back(text[..cut].to_string());
        }
    })
}

impl PeerProcess {
    /// Starts `command` (program and arguments) as a peer.
    pub fn spawn(command: &[OsString], timeout: Duration) -> Result<Self, PeerError> {
        let name = command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let fail = |what: String| PeerError {
            peer: name.clone(),
            what,
            last_event: None,
            stderr: Vec::new(),
        };
        let Some(program) = command.first() else {
            return Err(fail("cannot start: no command".into()));
        };
        // The registry's lock is held from spawn to registration, so a signal handler
        // that kills the live peers cannot run in between and miss this one.
        let mut live = LIVE_PEERS.lock().unwrap_or_else(|e| e.into_inner());
        let mut spawning = Command::new(program);
        spawning
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        die_with_parent(&mut spawning);
        let mut child = spawning
            .spawn()
            .map_err(|e| fail(format!("cannot start: {e}")))?;
        live.push(child.id());
        drop(live);
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        {
            use std::os::fd::AsRawFd;
            set_nonblocking(stdin.as_raw_fd());
            set_nonblocking(stdout.as_raw_fd());
        }
        let stdin = Some(stdin);
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_thread = keep_stderr_tail(
            child.stderr.take().expect("stderr is piped"),
            stderr.clone(),
        );
        Ok(PeerProcess {
            child,
            stdin,
            stdout,
            pending: Vec::new(),
            received: Vec::new(),
            scanned: 0,
            stderr,
            stderr_thread: Some(stderr_thread),
            timeout,
            name,
            last_event: None,
            reaped: None,
            finished: false,
        })
    }

    /// The peer's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends the hello and reads the peer's (SPEC.md §15.2, message 1).
    pub fn hello(
        &mut self,
        block_tokens: u64,
        expect_version: Option<&str>,
    ) -> Result<Hello, PeerError> {
        let line =
            format!(r#"{{"type":"hello","protocol":"{PROTOCOL}","block_tokens":{block_tokens}}}"#);
        self.send(Message::Hello, line.as_bytes(), true)?;
        let value = self.read(Message::Hello)?;
        let hello = parse_hello(&value).map_err(|e| self.fail(format!("hello: {e}")))?;
        self.name = hello.name.clone();
        if let Some(expected) = expect_version {
            if hello.version != expected {
                let found = render(&Value::String(hello.version.clone()));
                return Err(self.fail(format!(
                    "hello: $.version: expected {}, found {found}",
                    render(&Value::String(expected.into()))
                )));
            }
        }
        Ok(hello)
    }

    /// Sends the fleet (`members` are `"workers":[…],"sharing":[…]`) and waits for ready.
    pub fn fleet(&mut self, members: &[u8]) -> Result<(), PeerError> {
        let mut line = br#"{"type":"fleet","#.to_vec();
        line.extend_from_slice(members);
        line.push(b'}');
        self.send(Message::Fleet, &line, true)?;
        let value = self.read(Message::Fleet)?;
        expect_type(&value, "ready").map_err(|e| self.fail(format!("answer to fleet: {e}")))
    }

    /// Sends one event (`event` its canonical bytes); a request's answer is then read
    /// with [`PeerProcess::answer`].
    pub fn event(
        &mut self,
        seq: u64,
        tick: u64,
        event: &[u8],
        needs_answer: bool,
    ) -> Result<(), PeerError> {
        let mut line = Vec::with_capacity(event.len() + 32);
        line.extend_from_slice(br#"{"type":"event","event":"#);
        line.extend_from_slice(event);
        line.push(b'}');
        self.last_event = Some((seq, tick));
        self.send(Message::Seq(seq), &line, needs_answer)
    }

    /// Reads the answer to request `seq`: a JSON value whose shape the caller checks
    /// (an error message from the peer is already a failure).
    pub fn answer(&mut self, seq: u64) -> Result<Value, PeerError> {
        self.read(Message::Seq(seq))
    }

    /// Sends `reset` after a trace's last event and waits for ready (SPEC.md §15.2,
    /// message 4): the peer has dropped the trace's state and takes a `fleet` next. Only
    /// for a peer whose hello offered it. A failure names the last event of the trace
    /// just finished; after the reset, the next trace's failures name its own events.
    pub fn reset(&mut self) -> Result<(), PeerError> {
        self.send(Message::Reset, br#"{"type":"reset"}"#, true)?;
        let value = self.read(Message::Reset)?;
        expect_type(&value, "ready").map_err(|e| self.fail(format!("answer to reset: {e}")))?;
        self.last_event = None;
        Ok(())
    }

    /// Sends `end`, reads `bye`, and waits for the peer to exit with status 0.
    pub fn end(mut self) -> Result<(), PeerError> {
        self.send(Message::End, br#"{"type":"end"}"#, true)?;
        let value = self.read(Message::End)?;
        expect_type(&value, "bye").map_err(|e| self.fail(format!("answer to end: {e}")))?;
        drop(self.stdin.take());
        match self.wait_exit() {
            Some(status) if status.success() => {
                self.finish();
                Ok(())
            }
            Some(status) => Err(self.fail(format!("exited ({}) after bye", describe(status)))),
            None => Err(self.fail(format!(
                "did not exit within {} ms after bye; killed",
                self.timeout.as_millis()
            ))),
        }
    }

    /// A failure with `what`: kills the group, reaps the peer and quotes its stderr.
    pub fn fail(&mut self, what: String) -> PeerError {
        self.finish();
        PeerError {
            peer: self.name.clone(),
            what,
            last_event: self.last_event,
            stderr: self
                .stderr
                .lock()
                .map(|t| t.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    fn send(&mut self, message: Message, line: &[u8], flush: bool) -> Result<(), PeerError> {
        self.pending.extend_from_slice(line);
        self.pending.push(b'\n');
        if flush || self.pending.len() >= SEND_BATCH_BYTES {
            self.write_pending(message)?;
        }
        Ok(())
    }

    /// Writes out what is pending, each wait for the pipe bounded by the timeout.
    fn write_pending(&mut self, message: Message) -> Result<(), PeerError> {
        use std::os::fd::AsRawFd;
        let mut deadline = Instant::now() + self.timeout;
        let mut written = 0;
        while written < self.pending.len() {
            let Some(stdin) = self.stdin.as_mut() else {
                return Err(self.fail(format!("cannot send {message}: stdin closed")));
            };
            match stdin.write(&self.pending[written..]) {
                Ok(n) => {
                    written += n;
                    deadline = Instant::now() + self.timeout;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let fd = stdin.as_raw_fd();
                    if !ready(fd, libc::POLLOUT, deadline) {
                        return Err(self.timed_out(message));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(self.exited(message, "while kvroute sent")),
            }
        }
        self.pending.clear();
        Ok(())
    }

    fn read(&mut self, message: Message) -> Result<Value, PeerError> {
        use std::os::fd::AsRawFd;
        // What was sent in a batch must reach the peer before kvroute waits on it.
        self.write_pending(message)?;
        let deadline = Instant::now() + self.timeout;
        let end = loop {
            if let Some(at) = self.received[self.scanned..]
                .iter()
                .position(|&b| b == b'\n')
            {
                break self.scanned + at;
            }
            self.scanned = self.received.len();
            if self.received.len() as u64 > LINE_BYTES_MAX {
                return Err(self.fail(format!(
                    "answer to {message}: a line longer than {LINE_BYTES_MAX} bytes"
                )));
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stdout.read(&mut chunk) {
                Ok(0) if self.received.is_empty() => {
                    return Err(self.exited(message, "before answering"))
                }
                Ok(0) => return Err(self.exited(message, "in the middle of answering")),
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !ready(self.stdout.as_raw_fd(), libc::POLLIN, deadline) {
                        return Err(self.timed_out(message));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(self.fail(format!("cannot read the answer to {message}: {e}")))
                }
            }
        };
        let parsed = serde_json::from_slice::<Value>(&self.received[..end]);
        self.received.drain(..=end);
        self.scanned = 0;
        let value = match parsed {
            Ok(value) => value,
            Err(e) => return Err(self.fail(format!("answer to {message}: not JSON: {e}"))),
        };
        if let Some(text) = peer_error(&value) {
            return Err(self.fail(text));
        }
        Ok(value)
    }

    fn timed_out(&mut self, message: Message) -> PeerError {
        let what = format!(
            "no answer within {} ms to {message}; killed",
            self.timeout.as_millis()
        );
        self.fail(what)
    }

    /// The peer stopped reading or writing: its exit status, or the error message it
    /// wrote before going.
    fn exited(&mut self, message: Message, when: &str) -> PeerError {
        drop(self.stdin.take());
        let status = self.wait_exit();
        self.finish();
        // A last error message the peer wrote (message 5) is its own account of what
        // happened; what it wrote is already in the pipe, and the read does not block.
        let mut rest = std::mem::take(&mut self.received);
        let _ = (&mut self.stdout)
            .take(LINE_BYTES_MAX)
            .read_to_end(&mut rest);
        let said = rest
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
            .find_map(|v| peer_error(&v));
        let what = match (said, status) {
            (Some(text), _) => text,
            (None, Some(status)) => format!("exited ({}) {when} {message}", describe(status)),
            (None, None) => format!(
                "closed its stdout {when} {message} and did not exit within {} ms; killed",
                self.timeout.as_millis()
            ),
        };
        self.fail(what)
    }

    /// Waits up to the timeout for the peer to exit by itself.
    fn wait_exit(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.reaped {
            return Some(status);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.mark_reaped(status);
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => return None,
            }
        }
    }

    fn mark_reaped(&mut self, status: ExitStatus) {
        self.reaped = Some(status);
        let pid = self.child.id();
        if let Ok(mut live) = LIVE_PEERS.lock() {
            live.retain(|&p| p != pid);
        }
    }

    /// Kills the group (what the peer started too), reaps the peer, stops the watchdog
    /// and collects the rest of stderr. Idempotent.
    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        // The group outlives its leader while any member lives: kill it whether or not
        // the leader has exited, before the leader's id can be reused (it is reaped
        // below, or was reaped just now by `wait_exit` with the group still named by it).
        // SAFETY: a system call on this peer's own process group.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        if self.reaped.is_none() {
            let status = self
                .child
                .wait()
                .unwrap_or_else(|_| ExitStatus::from_raw(0));
            self.mark_reaped(status);
        }
        drop(self.stdin.take());
        // The stderr pipe ends when every process holding it is gone: the group's are,
        // but one that left the group may hold it for ever, so the wait for the last
        // lines is bounded and the reader then left to end on its own.
        if let Some(thread) = self.stderr_thread.take() {
            let deadline = Instant::now() + STDERR_DRAIN;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `exit status: N` or `signal: N`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status: {code}"),
        (None, Some(signal)) => format!("signal: {signal}"),
        _ => status.to_string(),
    }
}

/// A value as error messages quote it: compact JSON, cut at 80 bytes.
pub fn render(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 80 {
        return text;
    }
    let mut cut = 77;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// The peer's own error message (SPEC.md §15.2, message 5), if `value` is one.
fn peer_error(value: &Value) -> Option<String> {
    let object = value.as_object()?;
    if object.get("type")?.as_str()? != "error" {
        return None;
    }
    Some(match object.get("message") {
        Some(Value::String(m)) => m.clone(),
        Some(other) => format!("error (message not a string: {})", render(other)),
        None => "error (no message)".into(),
    })
}

fn expect_type(value: &Value, kind: &str) -> Result<(), String> {
    let Some(object) = value.as_object() else {
        return Err(format!("$: expected an object, found {}", render(value)));
    };
    match object.get("type") {
        Some(Value::String(t)) if t == kind => Ok(()),
        Some(other) => Err(format!(
            "$.type: expected \"{kind}\", found {}",
            render(other)
        )),
        None => Err("$: missing required member \"type\"".into()),
    }
}

/// Checks a peer's hello (SPEC.md §15.2, message 1).
pub fn parse_hello(value: &Value) -> Result<Hello, String> {
    expect_type(value, "hello")?;
    let object = value.as_object().expect("checked above");
    let member = |name: &str| {
        object
            .get(name)
            .ok_or_else(|| format!("$: missing required member \"{name}\""))
    };
    let protocol = member("protocol")?;
    if protocol.as_str() != Some(PROTOCOL) {
        return Err(format!(
            "$.protocol: expected \"{PROTOCOL}\", found {}",
            render(protocol)
        ));
    }
    let text = |name: &str| -> Result<String, String> {
        match member(name)? {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            other => Err(format!(
                "$.{name}: expected a non-empty string, found {}",
                render(other)
            )),
        }
    };
    let (name, version) = (text("peer")?, text("version")?);
    let bad_answers = || "$.answers: expected a non-empty array of \"reuse\" and \"choice\"";
    let Value::Array(answers) = member("answers")? else {
        return Err(bad_answers().into());
    };
    let mut kinds = AnswerKinds {
        reuse: false,
        choice: false,
    };
    for (i, answer) in answers.iter().enumerate() {
        let slot = match answer.as_str() {
            Some("reuse") => &mut kinds.reuse,
            Some("choice") => &mut kinds.choice,
            _ => {
                return Err(format!(
                    "$.answers[{i}]: expected \"reuse\" or \"choice\", found {}",
                    render(answer)
                ))
            }
        };
        if *slot {
            return Err(format!("$.answers[{i}]: repeated {}", render(answer)));
        }
        *slot = true;
    }
    if answers.is_empty() {
        return Err(bad_answers().into());
    }
    let reset = match object.get("reset") {
        None => false,
        Some(Value::Bool(reset)) => *reset,
        Some(other) => {
            return Err(format!(
                "$.reset: expected a boolean, found {}",
                render(other)
            ))
        }
    };
    Ok(Hello {
        name,
        version,
        answers: kinds,
        reset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hello_is_checked_member_by_member() {
        let good = json!({"type": "hello", "protocol": PROTOCOL, "peer": "p", "version": "1",
            "answers": ["choice", "reuse"]});
        let hello = parse_hello(&good).unwrap();
        assert_eq!(
            hello.answers,
            AnswerKinds {
                reuse: true,
                choice: true
            }
        );
        let with = |member: &str, v: Value| {
            let mut h = good.clone();
            h[member] = v;
            parse_hello(&h).unwrap_err()
        };
        assert_eq!(
            with("protocol", json!("kvroute-peer/2")),
            "$.protocol: expected \"kvroute-peer/1\", found \"kvroute-peer/2\""
        );
        assert_eq!(
            with("answers", json!([])),
            "$.answers: expected a non-empty array of \"reuse\" and \"choice\""
        );
        assert_eq!(
            with("answers", json!(["reuse", "reuse"])),
            "$.answers[1]: repeated \"reuse\""
        );
        assert_eq!(
            with("answers", json!(["route"])),
            "$.answers[0]: expected \"reuse\" or \"choice\", found \"route\""
        );
        assert_eq!(
            with("peer", json!("")),
            "$.peer: expected a non-empty string, found \"\""
        );
        assert_eq!(
            with("version", json!(1)),
            "$.version: expected a non-empty string, found 1"
        );
        assert!(!hello.reset, "a hello without the member offers no reset");
        let mut offers_reset = good.clone();
        offers_reset["reset"] = json!(true);
        assert!(parse_hello(&offers_reset).unwrap().reset);
        offers_reset["reset"] = json!(false);
        assert!(!parse_hello(&offers_reset).unwrap().reset);
        assert_eq!(
            with("reset", json!("yes")),
            "$.reset: expected a boolean, found \"yes\""
        );
        assert_eq!(
            with("type", json!("answer")),
            "$.type: expected \"hello\", found \"answer\""
        );
    }

    #[test]
    fn a_peer_that_cannot_start_is_one_line_and_no_process() {
        let e = PeerProcess::spawn(&["/nonexistent/peer".into()], Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("peer /nonexistent/peer: cannot start: "),
            "{e}"
        );
        assert!(e.to_string().ends_with("(before the first event)"), "{e}");
    }
}
