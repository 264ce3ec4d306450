//! The planted bugs cannot leak or go unchecked: the catalogue names exactly the bugs
//! core compiles in, and no manifest turns them on (only the mutant runner's command
//! line does, with `--features kvroute-core/mutants`).

use kvroute_core::harness::Mutant;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_catalogue_names_each_planted_bug_of_core_once() {
    let text = std::fs::read_to_string(repo().join("mutants/MUTANTS.toml")).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        .collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "a name appears twice: {names:?}");
    let known: BTreeSet<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(unique, known, "MUTANTS.toml against core's Mutant::ALL");
}

/// Every `Cargo.toml` of the repository, outside build output.
fn manifests(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git") {
                manifests(&path, found);
            }
        } else if name == "Cargo.toml" {
            found.push(path);
        }
    }
}

#[test]
fn no_manifest_enables_the_planted_bugs() {
    let mut found = Vec::new();
    manifests(&repo(), &mut found);
    assert!(found.len() >= 7, "the workspace's manifests: {found:?}");
    for path in found {
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            // `features = ["mutants"]` on a dependency, or `default = ["mutants"]`.
            let key = line.split('=').next().unwrap_or_default().trim();
            let enables = (key == "features" || key == "default" || line.contains("features ="))
                && line.contains("mutants");
            assert!(!enables, "{}: {line}", path.display());
        }
    }
}
