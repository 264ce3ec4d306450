//! The hostile-environment corpus: every line of `hostile_env/cases.txt` runs the
//! `kvroute` binary in a fresh scratch directory prepared by the case (links, FIFOs,
//! read-only files and directories, a full tmpfs, closed or full stdio, signals, huge
//! option values) and checks its exit status and stderr prefix, then the checks every
//! case shares: no panic (exit 101 or `panicked at`), no temporary file left anywhere in
//! the scratch directory, and nothing changed outside it (a sentinel directory beside
//! it, `/dev/null` and `/dev/full` still character devices). Cases that write to a
//! device write to one made in the scratch directory (`chardev`), never to the
//! machine's own.
//!
//! The file's format is in its header; a new case is one line. Cases that need a tmpfs
//! are skipped, with the reason printed, only when `mount` fails.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const CASES: &str = include_str!("hostile_env/cases.txt");

/// How long one case may run before it is killed and failed.
const CASE_TIMEOUT: Duration = Duration::from_secs(90);

/// The binary under test; `HOSTILE_BIN` runs the corpus against another build.
fn bin() -> String {
    std::env::var("HOSTILE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kvroute").to_owned())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One line of the cases file.
struct Case {
    line: usize,
    name: String,
    setup: Vec<Vec<String>>,
    stdio: Vec<String>,
    args: Vec<String>,
    status: i32,
    stderr_prefix: String,
    after: Vec<Vec<String>>,
}

fn ops(field: &str) -> Vec<Vec<String>> {
    field
        .split(';')
        .map(|op| op.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|op| !op.is_empty())
        .collect()
}

fn parse_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (index, line) in CASES.lines().enumerate() {
        let line_no = index + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(
            fields.len(),
            7,
            "cases.txt:{line_no}: expected 7 fields separated by |, found {}",
            fields.len()
        );
        cases.push(Case {
            line: line_no,
            name: fields[0].to_owned(),
            setup: ops(fields[1]),
            stdio: fields[2].split_whitespace().map(str::to_owned).collect(),
            args: fields[3].split_whitespace().map(str::to_owned).collect(),
            status: fields[4]
                .parse()
                .unwrap_or_else(|_| panic!("cases.txt:{line_no}: bad status {:?}", fields[4])),
            stderr_prefix: fields[5].to_owned(),
            after: ops(fields[6]),
        });
    }
    cases
}

/// The run's temporary directory (removed when the test ends), for the inputs that
/// several cases share.
static SHARED_DIR: OnceLock<PathBuf> = OnceLock::new();

fn shared_dir() -> &'static Path {
    SHARED_DIR.get().expect("set when the corpus starts")
}

/// A big trace (an import of generated Mooncake lines), made once: its replay takes long
/// enough to be interrupted while the output is being written.
fn big_trace() -> &'static Path {
    static BIG: OnceLock<PathBuf> = OnceLock::new();
    BIG.get_or_init(|| {
        let dir = shared_dir().join("big");
        fs::create_dir_all(&dir).unwrap();
        let mut jsonl = String::new();
        for i in 0..10_000u64 {
            let ids: Vec<String> = (0..4).map(|b| ((i % 97) * 10 + b).to_string()).collect();
            jsonl.push_str(&format!(
                "{{\"timestamp\": {i}, \"input_length\": 2000, \"output_length\": 20, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            ));
        }
        let input = dir.join("big.jsonl");
        fs::write(&input, jsonl).unwrap();
        let trace = dir.join("big.json");
        let out = Command::new(bin())
            .args(["import", "mooncake"])
            .arg(&input)
            .arg("-o")
            .arg(&trace)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        trace
    })
}

fn receipt_of_lab() -> &'static Path {
    static RECEIPT: OnceLock<PathBuf> = OnceLock::new();
    RECEIPT.get_or_init(|| {
        let dir = shared_dir().join("receipt");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lab.receipt.json");
        let out = Command::new(bin())
            .args(["replay", "--format", "json", "--out"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        path
    })
}

fn substitute(text: &str, scratch: &Path) -> String {
    let fixtures = repo().join("fixtures");
    text.replace("{s}", &scratch.display().to_string())
        .replace(
            "{lab}",
            &fixtures.join("lab/trace.json").display().to_string(),
        )
        .replace("{fixtures}", &fixtures.display().to_string())
        .replace("{receipt}", &receipt_of_lab().display().to_string())
        .replace("{big}", &big_trace().display().to_string())
}

/// A mounted tmpfs, unmounted when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mode(text: &str) -> u32 {
    u32::from_str_radix(text, 8).expect("modes are octal")
}

/// Prepares the scratch directory; `Err` is a reason to skip the case.
fn set_up(case: &Case, scratch: &Path, mounts: &mut Vec<Mount>) -> Result<(), String> {
    for op in &case.setup {
        let path = |i: usize| scratch.join(&op[i]);
        match op[0].as_str() {
            // file PATH MODE [CONTENT]: a file holding CONTENT (default "old\n").
            "file" => {
                let content = match op.get(3).map(String::as_str) {
                    None => "old\n".to_owned(),
                    Some("EMPTY") => String::new(),
                    Some(text) => text.replace("\\n", "\n"),
                };
                fs::write(path(1), content).unwrap();
                fs::set_permissions(path(1), fs::Permissions::from_mode(mode(&op[2]))).unwrap();
            }
            // copy PATH SOURCE: a copy of a fixture or `{big}`.
            "copy" => {
                fs::copy(substitute(&op[2], scratch), path(1)).unwrap();
            }
            "dir" => {
                fs::create_dir_all(path(1)).unwrap();
                fs::set_permissions(path(1), fs::Permissions::from_mode(mode(&op[2]))).unwrap();
            }
            "link" => std::os::unix::fs::symlink(substitute(&op[2], scratch), path(1)).unwrap(),
            // chardev PATH null|full: a character device like /dev/null or /dev/full, made
            // in the scratch directory so that a kvroute that replaced its target could
            // never replace the machine's own devices.
            "chardev" => {
                let minor = match op[2].as_str() {
                    "null" => "3",
                    "full" => "7",
                    other => panic!("cases.txt:{}: chardev {other:?}", case.line),
                };
                let out = Command::new("mknod")
                    .args(["-m", "666"])
                    .arg(path(1))
                    .args(["c", "1", minor])
                    .output()
                    .map_err(|e| format!("cannot run mknod: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "cannot make a character device: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            }
            "fifo" => {
                let status = Command::new("mkfifo").arg(path(1)).status().unwrap();
                assert!(status.success());
            }
            "tmpfs" => {
                fs::create_dir_all(path(1)).unwrap();
                let out = Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={}", op[2]), "tmpfs"])
                    .arg(path(1))
                    .output()
                    .map_err(|e| format!("cannot run mount: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "cannot mount a tmpfs: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                mounts.push(Mount(path(1)));
            }
            // fill PATH: fills the filesystem holding PATH (a tmpfs) with a file PATH.
            "fill" => {
                let mut file = fs::File::create(path(1)).unwrap();
                let block = vec![b'x'; 4096];
                while std::io::Write::write_all(&mut file, &block).is_ok() {}
            }
            other => panic!("cases.txt:{}: unknown setup op {other:?}", case.line),
        }
    }
    Ok(())
}

/// A snapshot of a directory tree: path -> (kind, mode, content or link target).
/// Every file under a directory: its kind, mode and bytes.
type Snapshot = BTreeMap<PathBuf, (String, u32, Vec<u8>)>;

fn snapshot(root: &Path) -> Snapshot {
    let mut map = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let kind = meta.file_type();
            let (label, content) = if kind.is_symlink() {
                (
                    "link",
                    fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            } else if kind.is_dir() {
                stack.push(path.clone());
                ("dir", Vec::new())
            } else if kind.is_file() {
                ("file", fs::read(&path).unwrap_or_default())
            } else {
                ("special", Vec::new())
            };
            map.insert(path, (label.to_owned(), meta.mode(), content));
        }
    }
    map
}

/// Every temporary file left in the tree: kvroute's `.NAME.kvroute-tmp-*`, and the
/// `tempfile` default `.tmp*` names it used to leave.
fn temp_files(root: &Path) -> Vec<PathBuf> {
    snapshot(root)
        .into_keys()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.contains("kvroute-tmp") || name.starts_with(".tmp")
        })
        .collect()
}

fn is_char_device(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

struct Outcome {
    status: i32,
    stdout: Vec<u8>,
    stderr: String,
    fifo_bytes: Option<usize>,
}

/// How a case's stdio tokens set up the run: descriptors the shell closes, which
/// streams are piped back, and what happens while it runs.
struct StdioPlan {
    closes: Vec<&'static str>,
    stdout_piped: bool,
    stderr_piped: bool,
    broken: bool,
    signal: Option<String>,
    reader: Option<PathBuf>,
}

fn run(case: &Case, scratch: &Path) -> Outcome {
    let args: Vec<String> = case.args.iter().map(|a| substitute(a, scratch)).collect();
    let mut command = Command::new(bin());
    command
        .args(&args)
        .current_dir(scratch)
        .stdin(Stdio::null());
    let stdio = apply_stdio(case, scratch, &mut command);
    if !stdio.closes.is_empty() {
        // The shell closes the descriptors, then becomes kvroute.
        let script = format!("exec \"$0\" \"$@\" {}", stdio.closes.join(" "));
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            .arg(script)
            .arg(bin())
            .args(&args)
            .current_dir(scratch);
        shell.stdin(Stdio::null());
        command = shell;
    }
    if stdio.stdout_piped {
        command.stdout(Stdio::piped());
    }
    if stdio.stderr_piped {
        command.stderr(Stdio::piped());
    }
    let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fifo_reader = stdio.reader.map(|path| drain_fifo(path, exited.clone()));
    let mut child = command.spawn().unwrap();
    if stdio.broken {
        // The reader goes away before kvroute writes: its first write gets EPIPE.
        drop(child.stdout.take());
    }
    let stdout_thread = child.stdout.take().map(read_all);
    let stderr_thread = child.stderr.take().map(read_all);
    if let Some(name) = stdio.signal {
        interrupt_while_writing(case, scratch, &mut child, &name);
    }
    let status = wait_bounded(&mut child);
    exited.store(true, std::sync::atomic::Ordering::SeqCst);
    let stdout = stdout_thread.map(|t| t.join().unwrap()).unwrap_or_default();
    let stderr = stderr_thread.map(|t| t.join().unwrap()).unwrap_or_default();
    let fifo_bytes = fifo_reader.map(|t| t.join().unwrap());
    use std::os::unix::process::ExitStatusExt;
    Outcome {
        status: status
            .code()
            .unwrap_or_else(|| -status.signal().unwrap_or(0)),
        stdout,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        fifo_bytes,
    }
}

/// Reads the case's stdio tokens, giving `command` the files they name.
fn apply_stdio(case: &Case, scratch: &Path, command: &mut Command) -> StdioPlan {
    let mut stdio = StdioPlan {
        closes: Vec::new(),
        stdout_piped: true,
        stderr_piped: true,
        broken: false,
        signal: None,
        reader: None,
    };
    let dev_full = || {
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    for token in &case.stdio {
        match token.split_once('=').unwrap_or((token, "")) {
            ("stdin", "closed") => stdio.closes.push("0<&-"),
            ("stdin", path) => {
                command.stdin(fs::File::open(substitute(path, scratch)).unwrap());
            }
            ("stdout", "closed") => stdio.closes.push("1>&-"),
            ("stdout", "full") => {
                command.stdout(dev_full());
                stdio.stdout_piped = false;
            }
            ("stdout", "broken") => stdio.broken = true,
            ("stderr", "closed") => {
                stdio.closes.push("2>&-");
                stdio.stderr_piped = false;
            }
            ("stderr", "full") => {
                command.stderr(dev_full());
                stdio.stderr_piped = false;
            }
            ("signal", name) => stdio.signal = Some(name.to_owned()),
            ("reader", path) => stdio.reader = Some(scratch.join(path)),
            _ => panic!("cases.txt:{}: unknown stdio token {token:?}", case.line),
        }
    }
    stdio
}

/// Opened without blocking (a FIFO with no writer yet), drained until kvroute has
/// exited and nothing is left, so a run that replaced the FIFO cannot hang the test.
fn drain_fifo(
    path: PathBuf,
    exited: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut fifo = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap();
    std::thread::spawn(move || {
        let mut total = 0;
        let mut buffer = vec![0u8; 65536];
        loop {
            let done = exited.load(std::sync::atomic::Ordering::SeqCst);
            match fifo.read(&mut buffer) {
                Ok(0) | Err(_) if done => return total,
                Ok(0) | Err(_) => std::thread::sleep(Duration::from_millis(1)),
                Ok(n) => total += n,
            }
        }
    })
}

fn read_all(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        bytes
    })
}

/// Waits until the output is being written (a temporary file exists, or for a blocked
/// FIFO a moment), then sends signal `name`.
fn interrupt_while_writing(
    case: &Case,
    scratch: &Path,
    child: &mut std::process::Child,
    name: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    if case.setup.iter().any(|op| op[0] == "fifo") {
        std::thread::sleep(Duration::from_millis(500));
    } else {
        while temp_files(scratch).is_empty() && Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // The run may have ended already (then the status check says so).
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status();
}

/// A case that hangs (a FIFO nobody opens, a lost signal) fails instead of the run.
fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + CASE_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The case's own checks after the run; each failure is one line.
fn check_after(
    case: &Case,
    scratch: &Path,
    before: &BTreeMap<PathBuf, (String, u32, Vec<u8>)>,
    outcome: &Outcome,
) -> Vec<String> {
    let mut problems = Vec::new();
    for op in &case.after {
        let path = || scratch.join(&op[1]);
        let ok = match op[0].as_str() {
            "absent" => fs::symlink_metadata(path()).is_err(),
            "symlink" => fs::symlink_metadata(path()).is_ok_and(|m| m.file_type().is_symlink()),
            "fifo" => fs::symlink_metadata(path()).is_ok_and(|m| m.file_type().is_fifo()),
            "chardev" => is_char_device(&path()),
            "mode" => fs::metadata(path()).is_ok_and(|m| m.mode() & 0o7777 == mode(&op[2])),
            // The file holds a complete output (not the setup's "old\n").
            "written" => fs::read(path()).is_ok_and(|b| !b.is_empty() && b != b"old\n"),
            "unchanged" => {
                let now = fs::read(path()).ok();
                now.as_deref() == before.get(&path()).map(|(_, _, c)| c.as_slice())
            }
            "validates" => Command::new(bin())
                .arg("validate")
                .arg(path())
                .output()
                .is_ok_and(|o| o.status.success()),
            "stdout" => match op[1].as_str() {
                "empty" => outcome.stdout.is_empty(),
                "nonempty" => !outcome.stdout.is_empty(),
                other => panic!("cases.txt:{}: stdout {other:?}", case.line),
            },
            "fifo-read" => outcome.fifo_bytes.is_some_and(|n| n > 0),
            "fifo-unwritten" => outcome.fifo_bytes == Some(0),
            "only" => {
                let mut names: Vec<String> = fs::read_dir(path())
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                names.join(",") == op.get(2).cloned().unwrap_or_default()
            }
            other => panic!("cases.txt:{}: unknown check {other:?}", case.line),
        };
        if !ok {
            problems.push(format!("check failed: {}", op.join(" ")));
        }
    }
    problems
}

/// The checks every case shares: its status and stderr prefix, no panic, no temporary
/// file left, nothing changed outside the scratch directory, the devices intact.
fn shared_checks(
    case: &Case,
    scratch: &Path,
    outside_before: &Snapshot,
    outside: &Path,
    outcome: &Outcome,
) -> Vec<String> {
    let mut problems = Vec::new();
    if outcome.status != case.status {
        problems.push(format!(
            "exit status {}, expected {}",
            outcome.status, case.status
        ));
    }
    let prefix = substitute(&case.stderr_prefix, scratch);
    match prefix.as_str() {
        "*" => {}
        "-" => {
            if !outcome.stderr.is_empty() {
                problems.push("stderr is not empty".to_owned());
            }
        }
        prefix => {
            if !outcome.stderr.starts_with(prefix) {
                problems.push(format!("stderr does not start with {prefix:?}"));
            }
        }
    }
    if outcome.status == 101 || outcome.stderr.contains("panicked at") {
        problems.push("panicked".to_owned());
    }
    let left = temp_files(scratch);
    if !left.is_empty() {
        problems.push(format!("temporary files left: {left:?}"));
    }
    if snapshot(outside) != *outside_before {
        problems.push("the directory outside the scratch directory changed".to_owned());
    }
    for device in ["/dev/null", "/dev/full"] {
        if !is_char_device(Path::new(device)) {
            problems.push(format!("{device} is no longer a character device"));
        }
    }
    problems
}

/// How one case of the corpus went.
enum CaseResult {
    /// Its set-up could not be made here (the reason is printed).
    Skipped,
    Passed,
    /// The case, its problems and the start of its stderr.
    Failed(String),
}

/// Sets up, runs and checks one case in `case_root`, then makes the directory
/// removable again.
fn run_case(case: &Case, case_root: &Path) -> CaseResult {
    let scratch = case_root.join("s");
    let outside = case_root.join("outside");
    fs::create_dir_all(&scratch).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("sentinel"), "sentinel\n").unwrap();
    let mut mounts = Vec::new();
    if let Err(reason) = set_up(case, &scratch, &mut mounts) {
        println!(
            "hostile_env: skipping {} (cases.txt:{}): {reason}",
            case.name, case.line
        );
        return CaseResult::Skipped;
    }
    println!("hostile_env: {} (cases.txt:{})", case.name, case.line);
    let before = snapshot(&scratch);
    let outside_before = snapshot(&outside);
    let started = Instant::now();
    let outcome = run(case, &scratch);
    println!(
        "hostile_env: {} took {} ms",
        case.name,
        started.elapsed().as_millis()
    );
    let mut problems = shared_checks(case, &scratch, &outside_before, &outside, &outcome);
    problems.extend(check_after(case, &scratch, &before, &outcome));
    drop(mounts);
    let result = if problems.is_empty() {
        CaseResult::Passed
    } else {
        CaseResult::Failed(format!(
            "{} (cases.txt:{}): {}\n    stderr: {}",
            case.name,
            case.line,
            problems.join("; "),
            outcome
                .stderr
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ")
        ))
    };
    // Read-only directories must be writable again for the scratch to be removed.
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("u+rwx")
        .arg(case_root)
        .status();
    result
}

#[test]
fn the_hostile_environment_corpus() {
    let cases = parse_cases();
    assert!(cases.len() >= 50, "the corpus has {} cases", cases.len());
    let filter = std::env::var("HOSTILE_CASE").ok();
    let root = tempfile::Builder::new()
        .prefix("kvroute-hostile-")
        .tempdir()
        .unwrap();
    let shared = root.path().join("shared");
    fs::create_dir_all(&shared).unwrap();
    SHARED_DIR.set(shared).unwrap();
    let mut failures = Vec::new();
    let mut skipped = 0;
    for case in &cases {
        if filter
            .as_ref()
            .is_some_and(|f| !case.name.contains(f.as_str()))
        {
            continue;
        }
        match run_case(case, &root.path().join(&case.name)) {
            CaseResult::Skipped => skipped += 1,
            CaseResult::Passed => {}
            CaseResult::Failed(failure) => failures.push(failure),
        }
    }
    println!("hostile_env: {} cases, {skipped} skipped", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
