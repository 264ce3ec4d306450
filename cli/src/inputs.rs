//! Reading a command's small inputs whole: a trace, an `--id-key` file (SPEC.md §6.5),
//! from a file or `-` (stdin), with the failure every command words the same way.

use crate::failure::Failure;
use std::io::Read;
use std::path::Path;

/// Reads a whole input file; `-` is stdin.
pub(crate) fn read_input(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    read_bytes(path)
        .map_err(|e| Failure::invalid(vec![format!("{}: cannot read {what}: {e}", path.display())]))
}

pub(crate) fn read_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().lock().read_to_end(&mut bytes)?;
        Ok(bytes)
    } else {
        std::fs::read(path)
    }
}

/// The bytes of an `--id-key` file (SPEC.md §6.5): unreadable or empty is bad usage.
pub(crate) fn read_id_key(path: &Path) -> Result<Vec<u8>, Failure> {
    let key = read_bytes(path).map_err(|e| {
        Failure::invalid(vec![format!("{}: cannot read id key: {e}", path.display())])
    })?;
    if key.is_empty() {
        return Err(Failure::invalid(vec![format!(
            "{}: the id key is empty",
            path.display()
        )]));
    }
    Ok(key)
}
