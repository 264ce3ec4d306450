//! The router under test as a child process: started in a process group of its own,
//! its output kept (the last lines, for the case's log), and stopped — SIGTERM to the
//! group, SIGKILL after a grace period, reaped — when dropped, whatever ended the case.
//! A SIGINT or SIGTERM to kvroute reaches [`kill_live_routers`] through the signal
//! handler of `out`, so no router outlives the run.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many lines of the router's output a case's log keeps.
const LOG_LINES: usize = 200;
/// How long a router is given to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The process groups alive in this process, by leader id.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills and reaps every router this process started and has not stopped yet.
pub(crate) fn kill_live_routers() {
    let pids = LIVE.lock().map(|p| p.clone()).unwrap_or_default();
    for pid in pids {
        // SAFETY: system calls on a process group and a child this process started and
        // has not reaped, so the ids cannot name another process.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
            libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
        }
    }
}

/// A running router.
pub struct Router {
    child: Child,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl Router {
    /// Starts `command` with `args` appended, its stdout and stderr collected.
    pub fn start(command: &[OsString], args: &[String]) -> Result<Router, String> {
        let (program, rest) = command.split_first().ok_or("no router command")?;
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        let mut child = Command::new(program)
            .args(rest)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.to_string_lossy()))?;
        live.push(child.id());
        drop(live);
        let log = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(out) = child.stdout.take() {
            collect(out, log.clone());
        }
        if let Some(err) = child.stderr.take() {
            collect(err, log.clone());
        }
        Ok(Router { child, log })
    }

    /// The router's output so far, at most [`LOG_LINES`] lines.
    pub fn log(&self) -> String {
        let lines = self.log.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Whether the router is still running; its exit status quoted when it is not.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("the router exited ({status})")),
            _ => None,
        }
    }
}

/// Keeps the last [`LOG_LINES`] lines read from `pipe`, without ANSI colour codes.
fn collect(pipe: impl Read + Send + 'static, log: Arc<Mutex<VecDeque<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).split(b'\n').map_while(Result::ok) {
            let text = strip_ansi(&String::from_utf8_lossy(&line));
            let mut lines = log.lock().unwrap_or_else(|p| p.into_inner());
            if lines.len() == LOG_LINES {
                lines.pop_front();
            }
            lines.push_back(text);
        }
    });
}

/// `text` without ANSI escape sequences (the routers colour their logs).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for Router {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: the group this router leads; it has not been reaped yet.
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; a group already gone makes this a no-op.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|&p| p != self.child.id());
    }
}

/// A port of 127.0.0.1 the system had free a moment ago.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// Polls `ready` every 50 ms until it holds or `timeout` runs out.
pub fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_router_and_its_children_are_gone() {
        let command: Vec<OsString> = ["sh", "-c", "sleep 30 & echo started; wait"]
            .iter()
            .map(OsString::from)
            .collect();
        let router = Router::start(&command, &[]).unwrap();
        let pid = router.child.id() as i32;
        assert!(wait_until(Duration::from_secs(5), || router
            .log()
            .contains("started")));
        drop(router);
        // SAFETY: signal 0 only asks whether the group still exists. An orphan of the
        // group is reaped by init, a moment after it died.
        let gone = wait_until(
            Duration::from_secs(3),
            || unsafe { libc::kill(-pid, 0) } != 0,
        );
        assert!(gone, "the router's process group outlived it");
        assert!(LIVE.lock().unwrap().iter().all(|&p| p as i32 != pid));
    }

    #[test]
    fn a_router_ignoring_sigterm_is_killed() {
        let command: Vec<OsString> = [
            "sh",
            "-c",
            "trap '' TERM; echo up; while :; do sleep 1; done",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let router = Router::start(&command, &[]).unwrap();
        assert!(wait_until(Duration::from_secs(5), || router
            .log()
            .contains("up")));
        let started = Instant::now();
        drop(router);
        assert!(started.elapsed() < STOP_GRACE + Duration::from_secs(2));
    }

    #[test]
    fn colour_codes_are_stripped() {
        assert_eq!(strip_ansi("\u{1b}[2mdim\u{1b}[0m WARN"), "dim WARN");
    }

    #[test]
    fn a_wait_is_bounded() {
        let started = Instant::now();
        assert!(!wait_until(Duration::from_millis(120), || false));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
