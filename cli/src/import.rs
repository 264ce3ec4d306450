//! `kvroute import FORMAT`: every format through one function, [`run_import`], which
//! opens the format's inputs, runs its [`Importer`], writes the canonical trace under
//! SPEC.md §7's file rules and prints the report. A format is wired by one match arm
//! that builds its importer from its arguments ([`importer_of`]); what the format
//! itself does is in `kvroute_core::import`.

use crate::failure::Failure;
use crate::inputs::read_bytes;
use crate::out::{self, emit_with};
use crate::progress::Progress;
use kvroute_cli::args::{EngineImportArgs, ImportFormat};
use kvroute_core::import::{BailianImport, BailianOptions, MooncakeImport, MooncakeOptions};
use kvroute_core::import::{EngineEventsImport, EngineFormat, EventsOptions, Keying};
use kvroute_core::import::{ImportError, Importer, Source};
use kvroute_core::import::{Problem, WekaImport, WekaOptions};
use kvroute_core::output::CanonicalTraceStream;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The importer of `format`'s arguments and the file it writes.
pub fn importer_of(format: ImportFormat) -> (Box<dyn Importer>, PathBuf) {
    match format {
        ImportFormat::Mooncake {
            file,
            block_tokens,
            tenant,
            model,
            workers,
            dynamo_block_tokens,
            out,
        } => {
            let options = MooncakeOptions {
                block_tokens,
                tenant,
                model,
                workers,
                dynamo_block_tokens,
            };
            let file = file.0;
            (Box::new(MooncakeImport { file, options }), out.0)
        }
        ImportFormat::Bailian {
            file,
            block_tokens,
            tenant,
            model,
            workers,
            out,
        } => {
            let options = BailianOptions {
                block_tokens,
                tenant,
                model,
                workers,
            };
            let file = file.0;
            (Box::new(BailianImport { file, options }), out.0)
        }
        ImportFormat::Weka {
            paths,
            tenant,
            model,
            workers,
            session_rate,
            seed,
            dynamo_block_tokens,
            blocks_per_segment,
            out,
        } => {
            let options = WekaOptions {
                blocks_per_segment,
                tenant,
                model,
                workers,
                session_rate_milli: session_rate,
                seed,
                dynamo_block_tokens,
            };
            let paths: Vec<PathBuf> = paths.into_iter().map(|p| p.0).collect();
            let mut import = WekaImport::new(&paths, options);
            import
                .refusals
                .extend(output_among_inputs(&out.0, &import.files));
            (Box::new(import), out.0)
        }
        ImportFormat::VllmEvents(args) => engine_events(EngineFormat::Vllm, args),
        ImportFormat::SglangEvents(args) => engine_events(EngineFormat::Sglang, args),
        ImportFormat::DynamoEvents(args) => engine_events(EngineFormat::Dynamo, args),
    }
}

/// The refusal of an output that is one of the files a directory input stands for
/// (the command line's own check sees only the paths as given).
fn output_among_inputs(out: &Path, files: &[PathBuf]) -> Option<Problem> {
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .filter(|meta| meta.is_file())
            .map(|meta| (meta.dev(), meta.ino()))
    };
    let written = identity(out)?;
    let input = files.iter().find(|file| identity(file) == Some(written))?;
    let reason = format!(
        "is also an input of this command ({}); kvroute does not write over its own input",
        input.display()
    );
    Some(Problem::of_input(out, reason))
}

fn engine_events(format: EngineFormat, args: EngineImportArgs) -> (Box<dyn Importer>, PathBuf) {
    let options = EventsOptions {
        block_tokens: args.block_tokens,
        tenant: args.tenant,
        model: args.model,
        keying: Keying::Tokens,
    };
    let importer = EngineEventsImport {
        format,
        capture: args.capture.0,
        requests: args.requests.0,
        options,
    };
    (Box::new(importer), args.out.0)
}

/// Imports through `importer` into `out`: the canonical trace is written event by
/// event as the importer hands them on, so a format that streams is never held.
/// Written through a temporary file (a regular OUT), a rejected input leaves nothing
/// behind however much was written, so one pass is enough. A FIFO or a device as OUT
/// is written in place, so a first pass checks the inputs and nothing is written for
/// a rejected one; its second pass reads a regular input file again from disk, and
/// holds stdin, a FIFO or a device input in memory, since those cannot be read twice.
pub fn run_import(importer: &dyn Importer, out: &Path) -> Result<(), Failure> {
    let progress = Progress::start("import", &format!("reading the {} input", importer.name()));
    let check_first = !out::writes_through_temp_file(out);
    let sources = importer
        .inputs()
        .into_iter()
        .map(|path| ImportSource::open(path, check_first))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|(path, e)| failure(importer.cannot_read(path, e)))?;
    let opened = || {
        sources
            .iter()
            .zip(importer.inputs())
            .map(|(source, path)| source.reader().map_err(|e| importer.cannot_read(path, e)))
            .collect::<Result<Vec<Source<'_>>, ImportError>>()
            .map_err(failure)
    };
    if check_first {
        importer.check(opened()?).map_err(failure)?;
        progress.phase("writing the trace");
    }
    let readers = opened()?;
    let mut written = None;
    let mut rejection = None;
    let emitted = emit_with(Some(out), |w| {
        let mut stream = CanonicalTraceStream::new(progress.counting(w))?;
        let mut write_error = None;
        let imported = importer.import(readers, &mut |event| {
            if write_error.is_none() {
                write_error = stream.event(&event).err();
            }
        });
        if let Some(e) = write_error {
            return Err(e);
        }
        match imported {
            Ok(imported) => {
                let (mut w, digest) = stream.finish(&imported.head)?;
                w.write_all(b"\n")?;
                written = Some((imported.report, digest));
                Ok(())
            }
            Err(error) => {
                rejection = Some(error);
                // Abandons the temporary file; the rejection is what gets reported.
                Err(std::io::Error::other("the input was rejected"))
            }
        }
    });
    if let Some(error) = rejection {
        return Err(failure(error));
    }
    emitted?;
    progress.finish();
    let (report, digest) = written.expect("a successful write records the trace");
    note!(
        "imported {} -> {} ({digest})",
        report.counted(),
        out.display()
    );
    for line in &report.lines {
        note!("{line}");
    }
    Ok(())
}

/// The failure of a refused import: exit status 2 for inputs that break a rule, 1 for
/// inputs that hold nothing to replay (as every command's "nothing to do" is).
fn failure(error: ImportError) -> Failure {
    match error {
        ImportError::Rejected(_) => Failure::invalid(error.lines()),
        ImportError::Empty(problem) => Failure::other(problem.to_string()),
    }
}

/// Where an import's lines come from.
enum ImportSource {
    /// A file opened for each pass: a regular file, which can be read twice, or a FIFO
    /// or device read once.
    Path(PathBuf),
    /// Stdin, a FIFO or a device that has to be read twice: read once, kept.
    Bytes(Vec<u8>),
    /// Stdin, read once as it streams.
    Stdin,
}

impl ImportSource {
    fn open(path: &Path, read_twice: bool) -> Result<ImportSource, (&Path, std::io::Error)> {
        let held = || {
            read_bytes(path)
                .map(ImportSource::Bytes)
                .map_err(|e| (path, e))
        };
        if path.as_os_str() == "-" {
            return if read_twice {
                held()
            } else {
                Ok(ImportSource::Stdin)
            };
        }
        let regular = std::fs::metadata(path).map_err(|e| (path, e))?.is_file();
        if regular || !read_twice {
            Ok(ImportSource::Path(path.to_path_buf()))
        } else {
            held()
        }
    }

    /// The lines from the start (a stream: from where it is).
    fn reader(&self) -> std::io::Result<Source<'_>> {
        Ok(match self {
            ImportSource::Path(path) => {
                Box::new(std::io::BufReader::new(std::fs::File::open(path)?))
            }
            ImportSource::Bytes(bytes) => Box::new(bytes.as_slice()),
            ImportSource::Stdin => Box::new(std::io::stdin().lock()),
        })
    }
}
