//! How a command fails: the lines it prints on stderr and the exit status (2 bad
//! input or usage, 1 anything else, 3 a declared gate that did not pass), shared by
//! every command module and the output helpers (`out`), which therefore need not
//! import the binary's `main`.

/// A failure with its exit status.
pub(crate) struct Failure {
    pub(crate) status: u8,
    pub(crate) lines: Vec<String>,
}

impl Failure {
    /// Invalid input or usage: status 2.
    pub(crate) fn invalid(lines: Vec<String>) -> Self {
        Failure { status: 2, lines }
    }

    /// A gate the command was given did not pass, after its output was written:
    /// status 3 (SPEC.md §7), which no other failure uses.
    pub(crate) fn gate(lines: Vec<String>) -> Self {
        Failure { status: 3, lines }
    }

    /// Anything else that went wrong: status 1.
    pub(crate) fn other(line: String) -> Self {
        Failure {
            status: 1,
            lines: vec![line],
        }
    }
}

impl Failure {
    /// The same failure with each line that does not name `path` yet prefixed by it, for
    /// a command with more than one input file.
    pub(crate) fn in_file(mut self, path: &std::path::Path) -> Self {
        let name = format!("{}: ", path.display());
        for line in &mut self.lines {
            if !line.starts_with(&name) {
                line.insert_str(0, &name);
            }
        }
        self
    }
}
