//! The binary's own resident pages, for the memory tests whose bound grows with the
//! input: measured on the build and machine that run the test rather than assumed,
//! since the `kvroute` binary's pages grow with every feature it gains.

/// The resident set, in bytes, of `kvroute ARGS` once it has started and waits on an
/// empty stdin that stays open (`-` among `args`): the binary's own pages, which grow
/// with the binary and the build, measured on this machine and build rather than
/// assumed. The child is then given end of input and waited for (its small peak joins
/// the waited children's peak, below any real run's).
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

/// [`idle_resident_bytes`] of `kvroute import mooncake -` writing into `dir`: the
/// binary's own pages, which it holds whatever it imports.
pub fn idle_import_bytes(dir: &std::path::Path) -> u64 {
    let out = dir.join("idle.json");
    idle_resident_bytes(&["import", "mooncake", "-", "-o", out.to_str().unwrap()])
}
