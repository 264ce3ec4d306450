//! The fuzz workspace (`fuzz/`) has its own `Cargo.lock`, which nothing updates when
//! the main workspace's dependencies change: `cargo fuzz run` then rewrites it, and a
//! fuzz build on CI resolves other versions than the tests ran. This checks that it
//! locks every package it shares with the workspace at the same version, and that
//! kvroute's own crates have every (non-dev) dependency the workspace lock gives them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A lockfile's packages: name -> (versions, dependency names of each version).
fn packages(lockfile: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut packages: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for block in read(lockfile).split("[[package]]").skip(1) {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{key} = \"")))
                .and_then(|rest| rest.strip_suffix('"'))
                .unwrap_or_default()
                .to_string()
        };
        // `dependencies = [ "a", "b 1.0", ]`: the names, without disambiguating versions.
        let dependencies = block
            .split_once("dependencies = [")
            .map(|(_, rest)| rest.split(']').next().unwrap_or_default())
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().trim_end_matches(',').strip_prefix('"'))
            .map(|dep| {
                dep.trim_end_matches('"')
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        packages
            .entry(field("name"))
            .or_default()
            .insert(field("version"), dependencies);
    }
    packages
}

/// The names under `[dev-dependencies]` of one of kvroute's manifests.
fn dev_dependencies(manifest: &str) -> BTreeSet<String> {
    let text = read(manifest);
    let Some((_, section)) = text.split_once("[dev-dependencies]") else {
        return BTreeSet::new();
    };
    section
        .lines()
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split(['=', '.', ' ']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_fuzz_lockfile_agrees_with_the_workspace_lockfile() {
    let workspace = packages("Cargo.lock");
    let fuzz = packages("fuzz/Cargo.lock");
    let mut problems = Vec::new();
    for (name, versions) in &fuzz {
        if let Some(workspace_versions) = workspace.get(name) {
            for version in versions.keys() {
                if !workspace_versions.contains_key(version) {
                    problems.push(format!(
                        "{name} {version}, but the workspace locks {:?}",
                        workspace_versions.keys().collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    for (name, manifest) in [
        ("kvroute-core", "core/Cargo.toml"),
        ("kvroute-oracle", "oracle/Cargo.toml"),
        ("kvroute-harness", "tests/Cargo.toml"),
    ] {
        let dev = dev_dependencies(manifest);
        let wanted = workspace[name].values().next().unwrap();
        let locked = fuzz
            .get(name)
            .and_then(|versions| versions.values().next())
            .cloned()
            .unwrap_or_default();
        for dependency in wanted.difference(&locked) {
            if !dev.contains(dependency) {
                problems.push(format!("{name} lacks its dependency {dependency}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "fuzz/Cargo.lock is stale; run `cargo update -w --manifest-path fuzz/Cargo.toml`:\n  {}",
        problems.join("\n  ")
    );
}
