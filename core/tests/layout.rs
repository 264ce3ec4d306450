//! The shape of `core/src/`, checked: which file imports which, measured from the
//! `crate::`, `super::` and `self::` paths of the non-test code.
//!
//! The folders follow the parts of SPEC.md, and they may only depend on each other in
//! one direction: `input` (reading and validating) ← `route` (the rules that decide) ←
//! `output` (the bytes written) ← `import` (other formats as traces) ← `replay` (the driver: which runs, into which output)
//! ← `simulate` (the closed loop, which drives routing and writes traces) ← `join` (a
//! receipt against measured completions). No two files
//! of core may import each other, directly or through others, and `output` only writes:
//! none of its files imports the engine or runs a replay. No folder (directory) holds
//! more than ten files and no import chain is longer than ten files.
//! `cargo test -p kvroute-core --test layout -- --nocapture` prints the figures (files
//! per folder, the import graph's depth and its cycles).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folders in dependency order: each may import only from itself and those before it.
const LAYERS: [&str; 7] = [
    "input", "route", "output", "import", "replay", "simulate", "join",
];

/// The most `.rs` files one folder of core may hold, so a newcomer can take it in.
const FOLDER_FILES_MAX: usize = 10;

/// The longest chain of imports allowed, from an importer down to a leaf, in files.
const IMPORT_CHAIN_MAX: usize = 10;

/// One source file of core: its module path (`route::candidate`) and its text.
struct SourceFile {
    module: Vec<String>,
    text: String,
}

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn collect(dir: &Path, files: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("core/src is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            files.push((path, text));
        }
    }
}

/// `route/mod.rs` → `[route]`, `route/candidate.rs` → `[route, candidate]`, `lib.rs` → `[]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn sources() -> Vec<SourceFile> {
    let root = source_root();
    let mut files = Vec::new();
    collect(&root, &mut files);
    files
        .into_iter()
        .map(|(path, text)| SourceFile {
            module: module_of(path.strip_prefix(&root).expect("under src")),
            // Unit tests may reach anywhere; only the code itself counts.
            text: match text
                .find("#[cfg(test)]\nmod tests")
                .or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests"))
            {
                Some(end) => text[..end].to_owned(),
                None => text,
            },
        })
        .collect()
}

/// Every module path the text names through `crate::`, `super::` or `self::`, with
/// `use` groups (`crate::a::{b, c::d}`) expanded, resolved against `here`.
fn named_paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    // `use name::…` with a name that is not `crate`, `super` or `self` is relative to
    // this module (a child module, or an external crate that resolves to no file). A
    // `pub use` of a child is a folder's façade re-exporting the child's items for
    // other crates (`core/src/lib.rs`), not a dependency of the folder on its child, so
    // it is no edge: the child may still import its parent.
    for line in code.lines() {
        let line = line.trim_start();
        let rest = line
            .strip_prefix("pub(crate) use ")
            .or_else(|| line.strip_prefix("use "));
        if let Some(rest) = rest {
            if !rest.starts_with("crate::")
                && !rest.starts_with("super::")
                && !rest.starts_with("self::")
            {
                expand(rest, here.to_vec(), &mut paths);
            }
        }
    }
    for (start, _) in code.match_indices("::") {
        // The segment just before this `::`; only a path's first segment counts.
        let mut begin = start;
        while begin > 0 && (bytes[begin - 1].is_ascii_alphanumeric() || bytes[begin - 1] == b'_') {
            begin -= 1;
        }
        if begin > 0 && bytes[begin - 1] == b':' {
            continue;
        }
        let head = &code[begin..start];
        if !matches!(head, "crate" | "super" | "self") {
            continue;
        }
        let base: Vec<String> = match head {
            "crate" => Vec::new(),
            // In `a/mod.rs` and `a.rs` alike, `self` is module `a`; `super` is its parent.
            "self" => here.to_vec(),
            _ => {
                let mut parent = here.to_vec();
                parent.pop();
                parent
            }
        };
        expand(&code[start + 2..], base, &mut paths);
    }
    paths
}

/// Expands the rest of a path (after `head::`) into the full paths it names.
fn expand(rest: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut chars = rest.char_indices().peekable();
    let mut segment = String::new();
    while let Some((i, c)) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            segment.push(c);
        } else if c == ':' && rest[i..].starts_with("::") {
            chars.next();
            path.push(std::mem::take(&mut segment));
        } else if c == '{' {
            // A group: split its top-level items and expand each.
            let mut depth = 1;
            let mut item_start = i + 1;
            let mut end = i + 1;
            for (j, d) in rest[i + 1..].char_indices() {
                let j = i + 1 + j;
                match d {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        expand(&rest[item_start..j], path.clone(), out);
                        item_start = j + 1;
                    }
                    _ => {}
                }
            }
            expand(&rest[item_start..end], path.clone(), out);
            return;
        } else if c.is_whitespace() && segment.is_empty() {
            continue;
        } else {
            break;
        }
    }
    if !segment.is_empty() {
        path.push(segment);
    }
    out.push(path);
}

/// The import graph between files: file index → the files it imports.
fn graph(files: &[SourceFile]) -> Vec<BTreeSet<usize>> {
    let modules: BTreeMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let mut targets = BTreeSet::new();
            for path in named_paths(&file.text, &file.module) {
                // The longest prefix of the path that is a file of core.
                let target = (1..=path.len())
                    .rev()
                    .find_map(|n| modules.get(&path[..n]).copied());
                if let Some(t) = target {
                    if t != i {
                        targets.insert(t);
                    }
                }
            }
            targets
        })
        .collect()
}

fn name(file: &SourceFile) -> String {
    if file.module.is_empty() {
        "lib".to_owned()
    } else {
        file.module.join("::")
    }
}

/// Strongly connected components with more than one file (Tarjan's algorithm).
fn cycles(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Tarjan<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let n = edges.len();
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.found
}

/// The longest import chain, as file indexes from importer to leaf (one file for a
/// file importing nothing); a file already on the chain is not entered again.
fn longest_chain(edges: &[BTreeSet<usize>]) -> Vec<usize> {
    fn longest(
        v: usize,
        edges: &[BTreeSet<usize>],
        memo: &mut Vec<Option<Vec<usize>>>,
        visiting: &mut Vec<bool>,
    ) -> Vec<usize> {
        if let Some(chain) = &memo[v] {
            return chain.clone();
        }
        visiting[v] = true;
        let mut best: Vec<usize> = Vec::new();
        for &w in &edges[v] {
            if !visiting[w] {
                let chain = longest(w, edges, memo, visiting);
                if chain.len() > best.len() {
                    best = chain;
                }
            }
        }
        visiting[v] = false;
        best.insert(0, v);
        memo[v] = Some(best.clone());
        best
    }
    let mut memo = vec![None; edges.len()];
    let mut visiting = vec![false; edges.len()];
    (0..edges.len())
        .map(|v| longest(v, edges, &mut memo, &mut visiting))
        .max_by_key(Vec::len)
        .unwrap_or_default()
}

/// Files directly under `src/` besides `lib.rs`: leaves that every folder may import
/// (the planted-bug switch is read at decision sites in all of them).
const ROOT_LEAVES: [&str; 1] = ["mutant"];

/// The layer of a file: its top folder's position in [`LAYERS`]; `None` for `lib.rs`
/// and the root leaves.
fn layer(file: &SourceFile) -> Option<usize> {
    let top = file.module.first()?;
    if file.module.len() == 1 && ROOT_LEAVES.contains(&top.as_str()) {
        return None;
    }
    Some(LAYERS.iter().position(|l| l == top).unwrap_or_else(|| {
        panic!("core/src/{top}: every file of core lives in one of the folders {LAYERS:?}")
    }))
}

/// How many `.rs` files each folder holds; a folder is a directory, its own files
/// and not those of its subfolders.
fn files_per_folder(files: &[SourceFile]) -> BTreeMap<String, usize> {
    let mut per_folder: BTreeMap<String, usize> = BTreeMap::new();
    for file in files {
        let mut folder = file.module.clone();
        if !source_root().join(folder.join("/")).is_dir() {
            folder.pop();
        }
        let folder = if folder.is_empty() {
            "src".to_owned()
        } else {
            folder.join("/")
        };
        *per_folder.entry(folder).or_default() += 1;
    }
    per_folder
}

/// Every import of a file from a later layer than its own, as `a imports b`.
fn upward_imports(files: &[SourceFile], edges: &[BTreeSet<usize>]) -> Vec<String> {
    let mut upward = Vec::new();
    for (i, targets) in edges.iter().enumerate() {
        for &t in targets {
            if let (Some(from), Some(to)) = (layer(&files[i]), layer(&files[t])) {
                if to > from {
                    upward.push(format!("{} imports {}", name(&files[i]), name(&files[t])));
                }
            }
        }
    }
    upward
}

#[test]
fn core_has_no_import_cycle_and_folders_depend_one_way() {
    let files = sources();
    let edges = graph(&files);
    let per_folder = files_per_folder(&files);
    let found = cycles(&edges);
    println!("files of core: {}", files.len());
    println!("files per folder: {per_folder:?}");
    println!(
        "largest folder: {} files",
        per_folder.values().max().unwrap_or(&0)
    );
    let chain = longest_chain(&edges);
    let chain_names: Vec<String> = chain.iter().map(|&i| name(&files[i])).collect();
    println!(
        "import graph depth: {} files ({})",
        chain.len(),
        chain_names.join(" -> ")
    );
    println!("cycles: {}", found.len());
    for component in &found {
        let names: Vec<String> = component.iter().map(|&i| name(&files[i])).collect();
        println!("  cycle: {}", names.join(" <-> "));
    }
    assert!(
        found.is_empty(),
        "core's files import each other in a cycle: {found:?}"
    );
    let crowded: Vec<_> = per_folder
        .iter()
        .filter(|(_, &count)| count > FOLDER_FILES_MAX)
        .collect();
    assert!(
        crowded.is_empty(),
        "a folder of core holds more than {FOLDER_FILES_MAX} files: {crowded:?}"
    );
    assert!(
        chain.len() <= IMPORT_CHAIN_MAX,
        "the longest import chain is {} files, over {IMPORT_CHAIN_MAX}: {}",
        chain.len(),
        chain_names.join(" -> ")
    );
    let upward = upward_imports(&files, &edges);
    for (i, file) in files.iter().enumerate() {
        if file.module.len() == 1 && ROOT_LEAVES.contains(&file.module[0].as_str()) {
            assert!(
                edges[i].is_empty(),
                "core/src/{}.rs is a root leaf and may import nothing of core",
                file.module[0]
            );
        }
    }
    assert!(
        upward.is_empty(),
        "a folder imports from a later one ({LAYERS:?} is the only direction): {upward:#?}"
    );
}

#[test]
fn the_path_reader_expands_groups_and_relative_paths() {
    let here = vec!["route".to_owned(), "candidate".to_owned()];
    let text = "use crate::input::{trace::Trace, limits};\nuse super::reason::Reason;\nfn f() { crate::output::canonical::digest(); }";
    let mut paths = named_paths(text, &here);
    paths.sort();
    let expected: Vec<Vec<String>> = [
        &["input", "limits"][..],
        &["input", "trace", "Trace"],
        &["output", "canonical", "digest"],
        &["route", "reason", "Reason"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(paths, expected);
    let mut a = BTreeSet::new();
    a.insert(1);
    let mut b = BTreeSet::new();
    b.insert(0);
    assert_eq!(cycles(&[a, b]).len(), 1);
}

/// What only the engine and the driver may call: a run, or the runner stepping one.
const RUNNER_CALLS: [&str; 6] = [
    "Runner::",
    "run_with_sink(",
    "run_events(",
    "run_policy(",
    "run_metrics(",
    "replay_runs(",
];

#[test]
fn output_writes_records_and_runs_nothing() {
    let files = sources();
    let edges = graph(&files);
    let engine = files
        .iter()
        .position(|f| f.module == ["route", "engine"])
        .expect("core/src/route/engine.rs exists");
    let mut found = Vec::new();
    for (i, file) in files.iter().enumerate() {
        if file.module.first().map(String::as_str) != Some("output") {
            continue;
        }
        if edges[i].contains(&engine) {
            found.push(format!("{} imports route::engine", name(file)));
        }
        for call in RUNNER_CALLS {
            if file.text.contains(call) {
                found.push(format!("{} calls {call}", name(file)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "output/ only turns records into bytes; the replay driver (core/src/replay.rs) runs \
         them: {found:#?}"
    );
}

#[test]
fn the_output_rule_sees_an_engine_import_and_a_runner_call() {
    let here = vec!["output".to_owned(), "csv".to_owned()];
    let text =
        "use crate::route::engine::run_with_sink;\nfn f() { run_with_sink(c, p, s, &mut ()); }";
    assert!(named_paths(text, &here).contains(&vec![
        "route".to_owned(),
        "engine".to_owned(),
        "run_with_sink".to_owned()
    ]));
    assert!(RUNNER_CALLS.iter().any(|c| text.contains(c)));
}

/// The crates built on core that must use only its documented API (`core/src/lib.rs`):
/// the CLI, the peers, the benchmarks and the fuzz targets. The harness (`tests/`,
/// `mutants/`) and core's own tests may also use `kvroute_core::harness`.
const API_USERS: [&str; 4] = ["cli", "peers", "bench", "fuzz"];

/// The module holding what only the harness may name.
const HARNESS: &str = "harness";

/// Core's API as `lib.rs` declares it: the façade modules (`pub mod NAME;`) and the
/// items re-exported or defined at the root (`pub use`, `pub fn`, `pub const`), the
/// hidden harness module left out.
fn api() -> (BTreeSet<String>, BTreeSet<String>) {
    let lib = std::fs::read_to_string(source_root().join("lib.rs")).expect("lib.rs is readable");
    let mut text = String::new();
    let mut depth = 0usize;
    for line in lib.lines() {
        let trimmed = line.trim_start();
        if depth > 0 || trimmed.starts_with(&format!("pub mod {HARNESS} {{")) {
            depth += line.matches('{').count();
            depth -= line.matches('}').count();
            continue;
        }
        if !trimmed.starts_with("//") {
            text.push_str(line);
            text.push('\n');
        }
    }
    let mut facades = BTreeSet::new();
    let mut items = BTreeSet::new();
    for statement in text.split(';') {
        let statement = statement.trim();
        let statement = statement.rsplit("\n\n").next().unwrap_or(statement).trim();
        if let Some(name) = statement.strip_prefix("pub mod ") {
            facades.insert(name.trim().to_owned());
        } else if let Some(tree) = statement.strip_prefix("pub use ") {
            let mut paths = Vec::new();
            expand(tree, Vec::new(), &mut paths);
            items.extend(paths.into_iter().filter_map(|p| p.last().cloned()));
        }
    }
    for line in text.lines() {
        for head in ["pub fn ", "pub const "] {
            if let Some(rest) = line.strip_prefix(head) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                items.insert(name);
            }
        }
    }
    (facades, items)
}

/// Whether a path below `kvroute_core::` stays inside the API: a root item (and what
/// follows it, a variant or an associated item), or a façade module and one item of it
/// (and what follows that item). A lowercase segment after a façade with more after it
/// is a module inside the façade.
fn within_api(path: &[String], facades: &BTreeSet<String>, items: &BTreeSet<String>) -> bool {
    match path {
        [] => true,
        [first, ..] if items.contains(first) => true,
        [facade] => facades.contains(facade),
        [facade, item, rest @ ..] => {
            facades.contains(facade)
                && (rest.is_empty() || item.starts_with(|c: char| c.is_ascii_uppercase()))
        }
    }
}

/// Every `kvroute_core::` path outside the API in the files under `dirs` (relative to
/// the workspace root), as `file:line: path`; also any renaming of the crate, which
/// would hide its paths from this check.
fn reaches_inside(dirs: &[&str]) -> Vec<String> {
    let (facades, items) = api();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("core sits in the workspace")
        .to_path_buf();
    let mut found = Vec::new();
    for dir in dirs {
        let mut files = Vec::new();
        collect_outside(&root.join(dir), &mut files);
        for (path, text) in files {
            let shown = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for (number, line) in text.lines().enumerate() {
                let code = match line.find("//") {
                    Some(i) => &line[..i],
                    None => line,
                };
                if code.contains("kvroute_core as ") {
                    found.push(format!("{shown}:{}: renames kvroute_core", number + 1));
                }
                for (start, _) in code.match_indices("kvroute_core::") {
                    // A path may run on over the following lines (a `use` group).
                    let offset: usize = text.lines().take(number).map(|l| l.len() + 1).sum();
                    let rest = &text[offset + start + "kvroute_core::".len()..];
                    let mut paths = Vec::new();
                    expand(rest, Vec::new(), &mut paths);
                    for p in paths {
                        if !within_api(&p, &facades, &items) {
                            found.push(format!(
                                "{shown}:{}: kvroute_core::{}",
                                number + 1,
                                p.join("::")
                            ));
                        }
                    }
                }
            }
        }
    }
    found
}

/// The `.rs` files under `dir`, build output (`target/`) left out.
fn collect_outside(dir: &Path, files: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                collect_outside(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            files.push((path, text));
        }
    }
}

#[test]
fn the_cli_peers_bench_and_fuzz_use_only_cores_api() {
    let (facades, items) = api();
    println!("façades: {facades:?}");
    println!("root items: {items:?}");
    assert!(
        !facades.contains(HARNESS),
        "the harness module is not a façade"
    );
    let found = reaches_inside(&API_USERS);
    assert!(
        found.is_empty(),
        "these name a path of kvroute_core outside its API (core/src/lib.rs lists the \
         façades and root items; docs/core-api.md says how to add one): {found:#?}"
    );
}

#[test]
fn the_api_rule_refuses_modules_inside_a_facade_and_the_harness() {
    let (facades, items) = api();
    let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    for good in [
        "route::Compiled",
        "route::Step::Cache",
        "join::self",
        "simulate",
        "Policy::CachePlusLoad",
        "parse_trace",
    ] {
        assert!(within_api(&path(good), &facades, &items), "{good}");
    }
    for bad in [
        "route::compiled::Compiled",
        "harness::Mutant",
        "input::trace::Trace",
        "mutant::Mutant",
    ] {
        assert!(!within_api(&path(bad), &facades, &items), "{bad}");
    }
}
