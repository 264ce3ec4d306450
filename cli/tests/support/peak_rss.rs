//! The peak memory of a finished child, for the memory tests: `ru_maxrss` of
//! `getrusage(RUSAGE_CHILDREN)`, read after the child is waited for. That figure is the
//! largest of every waited child of the calling process, so a test file that uses it
//! holds one test and runs one child.

/// The largest resident set, in bytes, of any child this process has waited for.
pub fn waited_children_peak_bytes() -> u64 {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        usage.ru_maxrss as u64 * 1024
    }
}

/// The resident set, in bytes, of `kvroute ARGS` once it has started and waits on an
/// empty stdin that stays open (`-` among `args`): the binary's own pages, which grow
/// with the binary and the build, measured on this machine and build rather than
/// assumed. The child is then given end of input and waited for (its small peak joins
/// [`waited_children_peak_bytes`], below any real run's).
pub fn idle_resident_bytes(args: &[&str]) -> u64 {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the kvroute binary starts");
    let status = format!("/proc/{}/status", child.id());
    let high_water = || -> Option<u64> {
        let text = std::fs::read_to_string(&status).ok()?;
        let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    // Settled once the high-water mark holds still for a quarter of a second: the
    // binary is loaded and blocked on its input.
    let (mut last, mut steady_since) = (0, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && steady_since.elapsed() < Duration::from_millis(250) {
        std::thread::sleep(Duration::from_millis(25));
        let now = high_water().unwrap_or(last);
        if now != last {
            (last, steady_since) = (now, Instant::now());
        }
    }
    drop(child.stdin.take());
    let _ = child.wait();
    last
}
