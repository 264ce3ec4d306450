//! Where every command's output goes: stdout, or a file named on the command line
//! (`replay --out`, `import -o`, `report -o`, `diff --out`, `swarm --report`,
//! `simulate --events-out`), under one set of rules (README, "Output files"; SPEC.md §7):
//!
//! - A new path, or an existing regular file, is written to a temporary file beside it,
//!   named `.NAME.kvroute-tmp-XXXXXX`, and renamed over it only when complete. A
//!   replaced file keeps its mode and owner; a file whose permissions do not let the user
//!   write it (as root: one with no write bit at all, such as 0444) is refused, since
//!   a rename would replace it anyway.
//! - A symbolic link is followed to its target, which is written by the same rules; the
//!   link itself is never replaced. A dangling link is refused, not created through.
//! - A FIFO or a character device (`/dev/stdout`, `/dev/null`) is written in place,
//!   without a temporary file. A directory or a block device is refused.
//! - On SIGINT or SIGTERM the temporary files (and the directories `--events-out`
//!   created) are removed and the process exits with 128 + the signal (130, 143);
//!   `record` alone takes the first signal as its cue to stop and keep its capture.
//! - Writing to stdout never panics: a closed pipe (the reader went away, as in
//!   `kvroute swarm ... | head -1`) ends the run quietly with status 141, the status
//!   of a process killed by SIGPIPE; any other write error is exit 1 with a message.
//!   (A closed descriptor 1 is reopened on /dev/null by Rust's runtime before `main`,
//!   so it discards the output as `> /dev/null` would.)
//!
//! Every failure names the path the user gave, never the temporary file.

use crate::failure::Failure;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The status of a run cut short by a closed stdout pipe: 128 + SIGPIPE, as a shell
/// reports a process SIGPIPE killed.
pub const BROKEN_PIPE_STATUS: u8 = 141;

/// What a signal must remove: temporary files and directories this run created.
enum Pending {
    File(PathBuf),
    Dir(PathBuf),
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

fn pending() -> MutexGuard<'static, Vec<Pending>> {
    PENDING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn forget(path: &Path) {
    pending().retain(|p| match p {
        Pending::File(f) | Pending::Dir(f) => f != path,
    });
}

/// Removes what a signal leaves behind and exits with 128 + the signal: SIGINT 130,
/// SIGTERM 143. The handler runs on its own thread (signal-hook), so it may take the
/// lock that a rename into place holds: an interrupted run either finished its rename
/// or leaves nothing.
pub fn install_signal_handlers() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        note("kvroute: cannot install signal handlers; an interrupted run may leave a .kvroute-tmp file");
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            // A command that stops cleanly (`record`) takes the first signal as its
            // cue; a second one ends the run as any signal ends the others.
            if STOP_CLEANLY.load(Ordering::SeqCst)
                && STOP_SIGNAL
                    .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                continue;
            }
            // Before the peer is killed: the main thread, seeing it gone, must not end
            // the run with a failure of its own first ([`yield_to_signal_handler`]).
            ENDING_ON_SIGNAL.store(true, Ordering::SeqCst);
            // A peer of `kvroute peer` is in a process group of its own, out of reach
            // of the terminal's SIGINT: it is killed and reaped here (SPEC.md §15.3).
            kvroute_peer_core::protocol::kill_live_peers();
            // So is a router of `kvroute conform` (SPEC.md §16.1).
            crate::conform::supervise::kill_live_routers();
            let pending = pending();
            for entry in pending.iter().rev() {
                let _ = match entry {
                    Pending::File(path) => fs::remove_file(path),
                    Pending::Dir(path) => fs::remove_dir(path),
                };
            }
            std::process::exit(128 + signal);
        }
    });
}

/// Set by the signal handler once it has begun to end the run, before it kills the
/// peers and removes what the run left.
static ENDING_ON_SIGNAL: AtomicBool = AtomicBool::new(false);

/// Waits, when a signal handler has begun to end the run, for it to exit with 128 +
/// the signal; returns at once otherwise. Called before `main` reports its own outcome:
/// killing the peer makes the main thread's wait on it fail, and that failure (exit 1)
/// must not win the race against the signal's exit code.
pub fn yield_to_signal_handler() {
    while ENDING_ON_SIGNAL.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether the first SIGINT or SIGTERM asks the command to stop and keep its output
/// instead of ending the run.
static STOP_CLEANLY: AtomicBool = AtomicBool::new(false);
/// The signal that asked to stop; 0 for none yet.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// From now on, the first SIGINT or SIGTERM is a request to stop (read with
/// [`stop_signal`]), not the end of the run: `record`'s normal way to end.
pub fn stop_on_signal() {
    STOP_CLEANLY.store(true, Ordering::SeqCst);
}

/// The signal that asked this command to stop, once one did.
pub fn stop_signal() -> Option<i32> {
    Some(STOP_SIGNAL.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// A line on stderr; a closed or full stderr is ignored rather than a panic.
pub fn note(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Maps a CSV writer's error to the I/O error under it, so a full disk or a closed
/// pipe is reported as such.
pub fn csv_io(error: csv::Error) -> io::Error {
    let text = error.to_string();
    match error.into_kind() {
        csv::ErrorKind::Io(e) => e,
        _ => io::Error::other(text),
    }
}

fn stdout_failure(error: &io::Error) -> Failure {
    if error.kind() == io::ErrorKind::BrokenPipe {
        Failure {
            status: BROKEN_PIPE_STATUS,
            lines: Vec::new(),
        }
    } else {
        Failure::other(format!("kvroute: cannot write to stdout: {error}"))
    }
}

/// Runs `write` against stdout (buffered, flushed before returning).
pub fn write_stdout(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut stdout = io::BufWriter::new(stdout.lock());
    write(&mut stdout)
        .and_then(|()| stdout.flush())
        .map_err(|e| stdout_failure(&e))
}

/// Prints `text` on stdout.
pub fn print(text: &str) -> Result<(), Failure> {
    write_stdout(|w| w.write_all(text.as_bytes()))
}

/// Whether the user may write `meta`'s file or directory. As root every permission
/// check passes, so the rule is the file's own mode: some write bit must be set.
pub fn may_write(path: &Path, meta: &fs::Metadata) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return meta.mode() & 0o222 != 0;
    }
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string; access only queries.
    unsafe { libc::access(c_path.as_ptr(), libc::W_OK) == 0 }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Where the bytes go, decided before any is produced.
enum Target {
    /// Through a temporary file in `dir`, renamed to `path`; `keep` is the replaced
    /// file's metadata (mode and owner to carry over).
    Replace {
        path: PathBuf,
        keep: Option<fs::Metadata>,
    },
    /// Opened for writing as it is: a FIFO or a character device.
    InPlace,
}

/// Whether writing to `out` goes through a temporary file renamed into place, so that a
/// write abandoned midway leaves nothing behind (`false` for a FIFO or a device, which
/// are written in place, and for an `out` that cannot be written at all).
pub fn writes_through_temp_file(out: &Path) -> bool {
    matches!(resolve(out), Ok(Target::Replace { .. }))
}

fn resolve(out: &Path) -> Result<Target, String> {
    let link_meta = match fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = parent_dir(out);
            let dir_meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if !dir_meta.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            if !may_write(dir, &dir_meta) {
                return Err(format!(
                    "the directory {} is read-only (mode {:04o})",
                    dir.display(),
                    dir_meta.mode() & 0o7777
                ));
            }
            return Ok(Target::Replace {
                path: out.to_path_buf(),
                keep: None,
            });
        }
        Err(e) => return Err(e.to_string()),
    };
    let is_link = link_meta.file_type().is_symlink();
    let meta = if is_link {
        fs::metadata(out).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => "a symbolic link to a missing file (kvroute follows a \
                                        link to an existing target, but does not create one)"
                .to_owned(),
            _ => e.to_string(),
        })?
    } else {
        link_meta
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        return Err("is a directory".to_owned());
    }
    if kind.is_block_device() {
        return Err("is a block device (kvroute does not write to one)".to_owned());
    }
    if !kind.is_file() {
        return Ok(Target::InPlace);
    }
    let path = if is_link {
        fs::canonicalize(out).map_err(|e| e.to_string())?
    } else {
        out.to_path_buf()
    };
    if !may_write(&path, &meta) {
        return Err(format!(
            "the file is read-only (mode {:04o}); kvroute does not replace a file you \
             could not write",
            meta.mode() & 0o7777
        ));
    }
    let dir = parent_dir(&path);
    let dir_meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !may_write(dir, &dir_meta) {
        return Err(format!(
            "the directory {} is read-only (mode {:04o})",
            dir.display(),
            dir_meta.mode() & 0o7777
        ));
    }
    Ok(Target::Replace {
        path,
        keep: Some(meta),
    })
}

/// A complete output waiting to be renamed into place (or already written in place).
pub struct Staged {
    out: PathBuf,
    temp: Option<(tempfile::NamedTempFile, PathBuf)>,
}

impl Staged {
    /// Renames the temporary file over the target.
    pub fn commit(mut self) -> Result<(), Failure> {
        let Some((file, target)) = self.temp.take() else {
            return Ok(());
        };
        let temp_path = file.path().to_path_buf();
        // Under the lock, so a signal sees either the temporary file or the result.
        let mut pending = pending();
        let result = file.persist(&target);
        pending.retain(|p| !matches!(p, Pending::File(f) if *f == temp_path));
        drop(pending);
        result
            .map(|_| ())
            .map_err(|e| cannot_write(&self.out, &e.error))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some((file, _)) = &self.temp {
            forget(file.path());
        }
    }
}

fn cannot_write(out: &Path, reason: &dyn std::fmt::Display) -> Failure {
    Failure::other(format!("{}: cannot write: {reason}", out.display()))
}

/// Produces the whole output for `out` (see the module's rules) without making it
/// visible yet: [`Staged::commit`] does. A failure leaves nothing behind.
pub fn stage(
    out: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<Staged, Failure> {
    let target = resolve(out).map_err(|reason| cannot_write(out, &reason))?;
    let fail = |e: io::Error| cannot_write(out, &e);
    match target {
        Target::InPlace => {
            let file = fs::OpenOptions::new().write(true).open(out).map_err(fail)?;
            let mut writer = io::BufWriter::new(file);
            write(&mut writer)
                .and_then(|()| writer.flush())
                .map_err(fail)?;
            Ok(Staged {
                out: out.to_path_buf(),
                temp: None,
            })
        }
        Target::Replace { path, keep } => {
            let name = path
                .file_name()
                .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
            let mut builder = tempfile::Builder::new();
            let prefix = format!(".{name}.kvroute-tmp-");
            builder.prefix(&prefix).suffix("");
            // A new file is created like any output (0666 less the umask), not with
            // tempfile's owner-only 0600, since it is renamed into place as the result.
            builder.permissions(fs::Permissions::from_mode(0o666));
            let file = {
                let mut pending = pending();
                let file = builder.tempfile_in(parent_dir(&path)).map_err(|e| {
                    // tempfile's error names the temporary path; the user's is OUT.
                    fail(io::Error::new(e.kind(), strip_path(&e)))
                })?;
                pending.push(Pending::File(file.path().to_path_buf()));
                file
            };
            let mut staged = Staged {
                out: out.to_path_buf(),
                temp: Some((file, path)),
            };
            let (file, _) = staged.temp.as_mut().expect("just set");
            if let Some(keep) = &keep {
                carry_over(file.as_file(), keep).map_err(|reason| cannot_write(out, &reason))?;
            }
            let mut writer = io::BufWriter::new(file.as_file_mut());
            write(&mut writer)
                .and_then(|()| writer.flush())
                .map_err(fail)?;
            drop(writer);
            file.as_file().sync_all().map_err(fail)?;
            Ok(staged)
        }
    }
}

/// The I/O error's own text, without the path tempfile appends.
fn strip_path(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code).to_string(),
        None => error.kind().to_string(),
    }
}

/// Gives the temporary file the replaced file's owner and mode.
fn carry_over(file: &fs::File, keep: &fs::Metadata) -> Result<(), String> {
    let ours = file.metadata().map_err(|e| e.to_string())?;
    if (ours.uid(), ours.gid()) != (keep.uid(), keep.gid()) {
        std::os::unix::fs::fchown(file, Some(keep.uid()), Some(keep.gid())).map_err(|e| {
            format!(
                "the file is owned by uid {} gid {} and replacing it would change its \
                 owner ({e})",
                keep.uid(),
                keep.gid()
            )
        })?;
    }
    file.set_permissions(fs::Permissions::from_mode(keep.mode() & 0o7777))
        .map_err(|e| e.to_string())
}

/// Writes `out` by the module's rules.
pub fn write_file(
    out: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    stage(out, write)?.commit()
}

/// Writes to `out`, or to stdout when there is none.
pub fn emit_with(
    out: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    match out {
        None => write_stdout(write),
        Some(out) => write_file(out, write),
    }
}

/// `bytes` to `out`, or to stdout when there is none.
pub fn emit(bytes: &[u8], out: Option<&Path>) -> Result<(), Failure> {
    emit_with(out, |w| w.write_all(bytes))
}

/// The directories of `dir` that do not exist yet, created outermost first and
/// removed again (innermost first) when dropped or on a signal, unless kept.
pub struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    pub fn create(dir: &Path) -> io::Result<CreatedDirs> {
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(path) = at {
            if path.as_os_str().is_empty() || fs::symlink_metadata(path).is_ok() {
                break;
            }
            missing.push(path.to_path_buf());
            at = path.parent();
        }
        // As root every directory is writable; the rule of `may_write` still applies.
        if let Some(outermost) = missing.last() {
            let existing = parent_dir(outermost);
            if let Ok(meta) = fs::metadata(existing) {
                if !may_write(existing, &meta) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "the directory {} is read-only (mode {:04o})",
                            existing.display(),
                            meta.mode() & 0o7777
                        ),
                    ));
                }
            }
        }
        let mut created = CreatedDirs(Vec::new());
        for path in missing.into_iter().rev() {
            let mut pending = pending();
            fs::create_dir(&path)?;
            pending.push(Pending::Dir(path.clone()));
            created.0.push(path);
        }
        Ok(created)
    }

    /// Keeps the directories: the run succeeded.
    pub fn keep(mut self) {
        for path in self.0.drain(..) {
            forget(&path);
        }
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        for path in self.0.drain(..).rev() {
            let _ = fs::remove_dir(&path);
            forget(&path);
        }
    }
}
