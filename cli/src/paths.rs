//! The paths a command reads and writes, checked once before anything runs: at most
//! one of its inputs is `-` (stdin can be read once), and no output is one of its
//! inputs. Every output is written to a temporary file and renamed over its target, so
//! `replay t.json --out t.json` used to replace the trace with its own receipt and exit
//! 0; `import mooncake m.jsonl -o m.jsonl` and `--id-key k --out k` did the same to
//! their inputs. Files are compared by device and inode after following links, so a
//! symbolic or hard link to an input is caught as well as the same name.

use crate::args::{Command, ImportFormat, PeerAction, SwarmAction, SwarmArgs};
use kvroute_core::Policy;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The files a command reads and the files it writes (`-` and absent options left out).
fn inputs_and_outputs(command: &Command) -> (Vec<&Path>, Vec<PathBuf>) {
    fn some<'a>(paths: &[Option<&'a PathBuf>]) -> Vec<&'a Path> {
        paths.iter().flatten().map(|p| p.as_path()).collect()
    }
    match command {
        Command::Replay {
            trace, out, export, ..
        } => (
            some(&[trace.as_ref(), export.id_key.as_ref()]),
            out.iter().cloned().collect(),
        ),
        Command::Report {
            input,
            trace,
            id_key,
            out,
            ..
        } => (
            some(&[input.as_ref(), trace.as_ref(), id_key.as_ref()]),
            vec![out.clone()],
        ),
        Command::Diff {
            first,
            second,
            trace,
            out,
            ..
        } => (
            some(&[Some(first), second.as_ref(), trace.as_ref()]),
            out.iter().cloned().collect(),
        ),
        Command::Join(args) => (
            some(&[
                Some(&args.receipt),
                Some(&args.completions),
                args.id_key.as_ref(),
            ]),
            args.out.iter().cloned().collect(),
        ),
        Command::Import {
            format: ImportFormat::Mooncake { file, out, .. },
        } => (vec![file.as_path()], vec![out.clone()]),
        Command::Record { out, .. } => (Vec::new(), vec![out.clone()]),
        Command::Peer {
            action: PeerAction::Run {
                trace, diff_out, ..
            },
        } => (vec![trace.as_path()], diff_out.iter().cloned().collect()),
        Command::Peer {
            action: PeerAction::Sweep { diff_out, .. },
        } => (Vec::new(), diff_out.iter().cloned().collect()),
        Command::Import {
            format:
                ImportFormat::VllmEvents(args)
                | ImportFormat::SglangEvents(args)
                | ImportFormat::DynamoEvents(args),
        } => (
            vec![args.capture.as_path(), args.requests.as_path()],
            vec![args.out.clone()],
        ),
        Command::Simulate {
            trace,
            events_out,
            completions_out,
            ..
        } => (
            vec![trace.as_path()],
            [
                (events_out, "trace.json"),
                (completions_out, "completions.jsonl"),
            ]
            .into_iter()
            .flat_map(|(dir, suffix)| {
                dir.iter().flat_map(move |dir| {
                    Policy::STANDARD.map(|p| dir.join(format!("{}.{suffix}", p.name())))
                })
            })
            .collect(),
        ),
        Command::Verify {
            trace,
            receipt,
            id_key,
        } => (
            some(&[Some(trace), receipt.as_ref(), id_key.as_ref()]),
            vec![],
        ),
        Command::Swarm(SwarmArgs {
            action: Some(SwarmAction::Merge { reports }),
            ..
        }) => (reports.iter().map(PathBuf::as_path).collect(), vec![]),
        Command::Swarm(SwarmArgs {
            report: Some(report),
            ..
        }) => (vec![], vec![report.clone()]),
        _ => (vec![], vec![]),
    }
}

/// The command's name as the user typed it, for messages.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Replay { .. } => "replay",
        Command::Report { .. } => "report",
        Command::Diff { .. } => "diff",
        Command::Join(_) => "join",
        Command::Import {
            format: ImportFormat::Mooncake { .. },
        } => "import mooncake",
        Command::Import {
            format: ImportFormat::VllmEvents(_),
        } => "import vllm-events",
        Command::Import {
            format: ImportFormat::SglangEvents(_),
        } => "import sglang-events",
        Command::Import {
            format: ImportFormat::DynamoEvents(_),
        } => "import dynamo-events",
        Command::Simulate { .. } => "simulate",
        Command::Record { .. } => "record",
        Command::Peer {
            action: PeerAction::Run { .. },
        } => "peer run",
        Command::Peer {
            action: PeerAction::Sweep { .. },
        } => "peer sweep",
        Command::Verify { .. } => "verify",
        Command::Swarm(SwarmArgs {
            action: Some(SwarmAction::Merge { .. }),
            ..
        }) => "swarm merge",
        Command::Swarm(_) => "swarm",
        Command::Validate { .. } => "validate",
        Command::Help { .. } => "help",
    }
}

/// `Err` when two inputs are `-`, or when a regular file the command would write is one
/// it reads (naming the output and the input). Paths that do not exist yet, or cannot
/// be looked at, are left to the reading and writing code, which reports them in its
/// own words.
pub fn check(command: &Command) -> Result<(), String> {
    let (inputs, outputs) = inputs_and_outputs(command);
    if inputs.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(format!(
            "kvroute {}: only one input can be - (stdin)",
            command_name(command)
        ));
    }
    let identity = |path: &Path| {
        if path.as_os_str() == "-" {
            return None;
        }
        std::fs::metadata(path)
            .ok()
            .filter(|meta| meta.is_file())
            .map(|meta| (meta.dev(), meta.ino()))
    };
    for out in &outputs {
        let Some(written) = identity(out) else {
            continue;
        };
        if let Some(input) = inputs.iter().find(|input| identity(input) == Some(written)) {
            return Err(format!(
                "{}: is also an input of this command ({}); kvroute does not write over \
                 its own input",
                out.display(),
                input.display()
            ));
        }
    }
    Ok(())
}
