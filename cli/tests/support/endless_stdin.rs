//! A command fed an input with no end: a head, then one byte repeated, piped to stdin
//! from a thread, for the tests of the caps that keep such an input from growing a
//! reader without bound (a Mooncake line, a trace's string).

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// What the run gave: the child's output and how the feeding ended (an error when the
/// child stopped reading and closed the pipe, which is what a cap does).
pub struct EndlessRun {
    pub output: Output,
    pub fed: std::io::Result<()>,
}

/// Runs `kvroute ARGS` with `head` followed by `filler_bytes` copies of `filler` on
/// stdin.
pub fn run_with_endless_stdin(
    args: &[&std::ffi::OsStr],
    head: &[u8],
    filler: u8,
    filler_bytes: usize,
) -> EndlessRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let head = head.to_vec();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&head)?;
        let block = vec![filler; 1 << 20];
        for _ in 0..filler_bytes / block.len() {
            stdin.write_all(&block)?;
        }
        Ok::<(), std::io::Error>(())
    });
    let output = child.wait_with_output().unwrap();
    let fed = writer.join().unwrap();
    EndlessRun { output, fed }
}
