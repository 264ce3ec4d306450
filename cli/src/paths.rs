//! The paths a command reads and writes, checked once before anything runs: at most
//! one of its inputs is `-` (stdin can be read once), and no output is one of its
//! inputs. Every output is written to a temporary file and renamed over its target, so
//! an output naming an input would replace the input and exit 0. Files are compared by
//! device and inode after following links, so a symbolic or hard link to an input is
//! caught as well as the same name.
//!
//! Which arguments are inputs and which outputs is read from their types
//! ([`InputPath`], [`OutputPath`], [`OutputDir`] in `args`), walking the parsed command
//! line: a new path argument is checked as soon as it is declared with its role.

use crate::args::{InputPath, OutputDir, OutputPath};
use clap::ArgMatches;
use kvroute_core::Policy;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The files that every `DIR` argument may receive: `DIR/<policy>.<suffix>`.
const OUTPUT_DIR_SUFFIXES: [&str; 2] = ["trace.json", "completions.jsonl"];

/// The command's name as typed (`import mooncake`), its inputs and its outputs.
struct Paths {
    command: Vec<String>,
    inputs: Vec<PathBuf>,
    outputs: Vec<PathBuf>,
}

/// Every value of type `T` among the arguments given at this level of the command.
fn values_of<T: Clone + Send + Sync + 'static>(matches: &ArgMatches) -> Vec<T> {
    matches
        .ids()
        .filter_map(|id| matches.try_get_many::<T>(id.as_str()).ok().flatten())
        .flat_map(|values| values.cloned())
        .collect()
}

fn collect(matches: &ArgMatches) -> Paths {
    let mut paths = Paths {
        command: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    let mut level = Some(matches);
    while let Some(matches) = level {
        paths
            .inputs
            .extend(values_of::<InputPath>(matches).into_iter().map(|p| p.0));
        paths
            .outputs
            .extend(values_of::<OutputPath>(matches).into_iter().map(|p| p.0));
        for OutputDir(dir) in values_of::<OutputDir>(matches) {
            for suffix in OUTPUT_DIR_SUFFIXES {
                paths
                    .outputs
                    .extend(Policy::STANDARD.map(|p| dir.join(format!("{}.{suffix}", p.name()))));
            }
        }
        level = matches.subcommand().map(|(name, sub)| {
            paths.command.push(name.to_owned());
            sub
        });
    }
    paths
}

/// `Err` when two inputs are `-`, or when a regular file the command would write is one
/// it reads (naming the output and the input). Paths that do not exist yet, or cannot
/// be looked at, are left to the reading and writing code, which reports them in its
/// own words.
pub fn check(matches: &ArgMatches) -> Result<(), String> {
    let Paths {
        command,
        inputs,
        outputs,
    } = collect(matches);
    if inputs.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(format!(
            "kvroute {}: only one input can be - (stdin)",
            command.join(" ")
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

#[cfg(test)]
mod tests {
    use crate::args::Cli;
    use clap::builder::ValueParser;
    use clap::CommandFactory;

    /// Every argument of `command` and its subcommands, as `command path: --name`.
    fn arguments(command: &clap::Command, path: &str, found: &mut Vec<(String, clap::Arg)>) {
        for arg in command.get_arguments() {
            found.push((format!("{path} {}", arg.get_id()), arg.clone()));
        }
        for sub in command.get_subcommands() {
            arguments(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }

    #[test]
    fn no_path_argument_is_left_without_its_role() {
        let mut found = Vec::new();
        arguments(&Cli::command(), "kvroute", &mut found);
        let untyped: Vec<&String> = found
            .iter()
            .filter(|(_, arg)| {
                let parser = arg.get_value_parser().type_id();
                parser == ValueParser::path_buf().type_id()
            })
            .map(|(name, _)| name)
            .collect();
        assert!(
            untyped.is_empty(),
            "path arguments typed PathBuf, so the own-input check cannot see them: {untyped:?}"
        );
        let typed = found
            .iter()
            .filter(|(_, arg)| {
                arg.get_value_parser().type_id()
                    == ValueParser::from(clap::value_parser!(crate::args::InputPath)).type_id()
            })
            .count();
        assert!(typed >= 10, "the input paths are found: {typed}");
    }
}
