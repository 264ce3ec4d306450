//! Two routers from other ecosystems under `kvroute peer run` (SPEC.md §15): Ray
//! Serve's `PrefixTree` (`peers/adapters/ray_prefix_tree/`, an indexer answering
//! `reuse`) and the SGLang router (`peers/adapters/sglang_router/`, a router answering
//! `choice`), each driven through its real code by a Python adapter, on the fixtures
//! that show each class of difference `docs/peers.md` describes.
//!
//! The adapters need a Python virtual environment with the pinned packages
//! (`peers/adapters/requirements.txt`), named by `KVROUTE_PEER_VENV`; `.ci/run
//! peer_adapters` builds one. Without the variable the tests say so and pass, as
//! `engine_record.rs` does, unless `KVROUTE_REQUIRE_PEER_VENV=1` (set by that stage).
//! With the variable set, an environment that is missing, cannot import the routers or
//! holds other versions than the pins is a failure, never a skip.

use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const ADAPTERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../peers/adapters");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../peers/fixtures");

/// The version `requirements.txt` pins for `package`.
fn pinned(package: &str) -> String {
    let requirements = std::fs::read_to_string(format!("{ADAPTERS}/requirements.txt")).unwrap();
    let prefix = format!("{package}==");
    requirements
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .unwrap_or_else(|| panic!("requirements.txt pins no {package}"))
}

/// The environment's Python when `venv` names a usable one; `Ok(None)` when no
/// environment is named (the tests are skipped, unless `required`); `Err` saying what
/// is wrong otherwise.
fn venv_python_from(venv: Option<&OsStr>, required: bool) -> Result<Option<PathBuf>, String> {
    let Some(venv) = venv else {
        let why = "no Python environment for the peer adapters: set KVROUTE_PEER_VENV to \
                   a venv made from peers/adapters/requirements.txt (`bash .ci/run \
                   peer_adapters` does)";
        if required {
            return Err(format!("KVROUTE_REQUIRE_PEER_VENV=1, but {why}"));
        }
        return Ok(None);
    };
    let python = Path::new(venv).join("bin/python");
    let named = format!("KVROUTE_PEER_VENV={}", Path::new(venv).display());
    let probe = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m, ray, sglang_router; \
             print(m.version('ray'), m.version('sglang-router'))",
        ])
        .output()
        .map_err(|e| format!("{named}: cannot run {}: {e}", python.display()))?;
    if !probe.status.success() {
        return Err(format!(
            "{named}: {} cannot import ray and sglang_router ({}): {}",
            python.display(),
            probe.status,
            String::from_utf8_lossy(&probe.stderr).trim_end()
        ));
    }
    let found = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    let want = format!("{} {}", pinned("ray"), pinned("sglang-router"));
    if found != want {
        return Err(format!(
            "{named}: ray and sglang-router are {found}, requirements.txt pins {want}"
        ));
    }
    Ok(Some(python))
}

fn venv_python() -> Option<PathBuf> {
    let required = std::env::var("KVROUTE_REQUIRE_PEER_VENV").is_ok_and(|v| v == "1");
    let python = venv_python_from(std::env::var_os("KVROUTE_PEER_VENV").as_deref(), required)
        .unwrap_or_else(|why| panic!("{why}"));
    if python.is_none() {
        eprintln!(
            "skipped: no Python environment for the peer adapters (KVROUTE_PEER_VENV unset; \
             `bash .ci/run peer_adapters` makes one)"
        );
    }
    python
}

/// `kvroute peer run FIXTURE --format json OPTIONS -- PYTHON ADAPTER ARGS`, which must
/// succeed; its JSON summary.
fn peer_run(python: &Path, fixture: &str, options: &[&str], adapter: &[&str]) -> Value {
    let trace = format!("{FIXTURES}/{fixture}/trace.json");
    let script = format!("{ADAPTERS}/{}", adapter[0]);
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["peer", "run", &trace, "--format", "json"])
        .args(options)
        .arg("--")
        .arg(python)
        .arg(&script)
        .args(&adapter[1..])
        .output()
        .expect("kvroute runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "peer run {fixture}: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("peer run {fixture}: not JSON ({e}): {stderr}"))
}

const RAY: &[&str] = &["ray_prefix_tree/adapter.py"];
const RAY_LRU: &[&str] = &["ray_prefix_tree/adapter.py", "--evictions", "lru"];
const SGLANG: &[&str] = &["sglang_router/adapter.py"];

/// The reuse summary's rows, differing rows and causes with a count above 0.
fn reuse(summary: &Value) -> (u64, u64, Vec<(String, u64)>) {
    let reuse = &summary["reuse"];
    let causes = reuse["causes"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, n)| n.as_u64() != Some(0))
        .map(|(cause, n)| (cause.clone(), n.as_u64().unwrap()))
        .collect();
    (
        reuse["rows"].as_u64().unwrap(),
        reuse["differing"].as_u64().unwrap(),
        causes,
    )
}

#[test]
fn a_named_environment_that_is_broken_fails_instead_of_skipping() {
    let scratch = tempfile::tempdir().unwrap();
    // No bin/python at all.
    let missing = venv_python_from(Some(scratch.path().as_os_str()), false).unwrap_err();
    assert!(
        missing.contains("cannot run") && missing.contains("bin/python"),
        "{missing}"
    );
    // A Python that cannot import the routers: the system one, in a venv of its own.
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(scratch.path())
        .status()
        .expect("python3 runs");
    assert!(made.success());
    let broken = venv_python_from(Some(scratch.path().as_os_str()), false).unwrap_err();
    assert!(
        broken.contains("cannot import ray and sglang_router")
            && broken.contains("ModuleNotFoundError"),
        "{broken}"
    );
    // No environment named: a skip, or with KVROUTE_REQUIRE_PEER_VENV=1 a failure.
    assert_eq!(venv_python_from(None, false), Ok(None));
    let required = venv_python_from(None, true).unwrap_err();
    assert!(
        required.starts_with("KVROUTE_REQUIRE_PEER_VENV=1, but"),
        "{required}"
    );
}

#[test]
fn each_adapter_reports_the_pinned_version_of_the_code_it_loaded() {
    let Some(python) = venv_python() else {
        return;
    };
    for (adapter, package) in [(RAY, "ray"), (SGLANG, "sglang-router")] {
        let version = pinned(package);
        let summary = peer_run(
            &python,
            "ray_evict_unseen",
            &["--expect-version", &version],
            adapter,
        );
        assert_eq!(summary["version"], version.as_str(), "{summary}");
        assert_eq!(summary["requests"], 2, "{summary}");
    }
}

#[test]
fn ray_keeps_what_an_evict_removed_because_it_never_sees_evicts() {
    let Some(python) = venv_python() else {
        return;
    };
    // w0 stores k0 k1, evicts k1: kvroute reuses 16 tokens of r2 on w0, Ray's tree 32,
    // the walk of SPEC §12's no-eviction model.
    let summary = peer_run(&python, "ray_evict_unseen", &[], RAY);
    assert_eq!(summary["peer"], "ray-serve-prefix-tree");
    assert_eq!(
        reuse(&summary),
        (4, 1, vec![("evict_unseen".into(), 1)]),
        "{summary}"
    );
}

#[test]
fn ray_holds_the_ancestors_of_every_block_it_stores() {
    let Some(python) = venv_python() else {
        return;
    };
    // w1 stores only k1, whose chain parent is k0: kvroute's walk of [k0, k1] on w1
    // stops at k0 (0 tokens), Ray's insert of k1's text marks k0's node too (32), the
    // walk of SPEC §12's ancestor model.
    let summary = peer_run(&python, "ray_ancestors_implied", &[], RAY);
    assert_eq!(
        reuse(&summary),
        (4, 1, vec![("ancestors_implied".into(), 1)]),
        "{summary}"
    );
}

#[test]
fn an_evict_that_names_a_key_first_does_not_place_it() {
    let Some(python) = venv_python() else {
        return;
    };
    // Seed 601 of the sweep, shrunk: w0 evicts k2 before anything names it, r6 asks for
    // [k0, k2] (k2's place: after k0), w0 stores only k2, r11 asks for [k0]. kvroute
    // holds k2 alone (0 tokens of r11 on w0); Ray's insert of k2's text marks k0 too
    // (16). When the evict placed k2 at the root, no model held k0 and the row was a
    // `new_finding`; placed by r6, as the tree's text places it, it is the ancestor
    // model's figure.
    let summary = peer_run(&python, "ray_evict_names_key_first", &[], RAY);
    assert_eq!(
        reuse(&summary),
        (2, 1, vec![("ancestors_implied".into(), 1)]),
        "{summary}"
    );
}

#[test]
fn ray_applies_a_late_store_the_epoch_rule_drops() {
    let Some(python) = venv_python() else {
        return;
    };
    let summary = peer_run(&python, "ray_stale_store", &[], RAY);
    assert_eq!(
        reuse(&summary),
        (4, 1, vec![("stale_epoch".into(), 1)]),
        "{summary}"
    );
    // Withheld, the late store never reaches the tree and nothing differs.
    let withheld = peer_run(&python, "ray_stale_store", &["--withhold-stale"], RAY);
    assert_eq!(reuse(&withheld), (4, 0, vec![]), "{withheld}");
}

#[test]
fn ray_lru_eviction_drops_every_block_inserted_at_the_oldest_time_together() {
    let Some(python) = venv_python() else {
        return;
    };
    // w0 stores k0 k1 k2 in one insert and evicts k2; r2 asks for k0 k1. Without
    // evictions the tree still has them (as kvroute), so nothing differs; with Ray's
    // LRU eviction of k2's 16 characters, the whole chain goes (all three nodes carry
    // the insert's time), and r2 matches nothing on w0: less than either model of
    // SPEC §12 holds, so it stays a finding.
    let none = peer_run(&python, "ray_lru_same_tick", &[], RAY);
    assert_eq!(reuse(&none), (4, 0, vec![]), "{none}");
    let lru = peer_run(&python, "ray_lru_same_tick", &[], RAY_LRU);
    assert_eq!(
        reuse(&lru),
        (4, 1, vec![("new_finding".into(), 1)]),
        "{lru}"
    );
}

#[test]
fn sglang_follows_its_own_history_not_the_cache_events() {
    let Some(python) = venv_python() else {
        return;
    };
    // kvroute follows the stores: r1 w0 (nothing cached, ties to the smallest id), r2
    // w1 (stored there), r3 w0 (w1 cleared, stored on w0). The router sees only the
    // requests: r2 and r3 match r1's text fully, so all three go where r1 went, one
    // worker, which makes one or two choices differ.
    let summary = peer_run(&python, "sglang_cache_events_unseen", &[], SGLANG);
    assert_eq!(summary["peer"], "sglang-router");
    let choice = &summary["choice"];
    assert_eq!(choice["decisions"], 3, "{summary}");
    let differing = choice["differing"].as_u64().unwrap();
    assert!((1..=2).contains(&differing), "{summary}");
}

#[test]
fn sglang_routes_a_request_no_worker_serves() {
    let Some(python) = venv_python() else {
        return;
    };
    // r1 names model "other", which no worker serves: kvroute routes nowhere (null),
    // the router (one model, no inference-gateway mode) sends it to a worker anyway.
    let summary = peer_run(&python, "sglang_eligibility_unseen", &[], SGLANG);
    let choice = &summary["choice"];
    assert_eq!(
        (choice["decisions"].as_u64(), choice["same"].as_u64()),
        (Some(1), Some(0)),
        "{summary}"
    );
}

#[test]
fn sglang_sends_every_unmatched_request_at_equal_load_to_one_worker() {
    let Some(python) = venv_python() else {
        return;
    };
    // Four requests, distinct prefixes, each done before the next: every match rate is
    // 0 and every load 0, so each goes to the first worker of the router's registry
    // (which one differs from run to run: docs/peers.md). Against round_robin (w0 w1 w2
    // w3) exactly one choice agrees whichever worker that is; against cache_plus_load
    // (w0 four times) none or all four do.
    let round_robin = peer_run(
        &python,
        "sglang_registry_order",
        &["--policy", "round_robin"],
        SGLANG,
    );
    assert_eq!(round_robin["choice"]["same"], 1, "{round_robin}");
    let cache_plus_load = peer_run(&python, "sglang_registry_order", &[], SGLANG);
    let same = cache_plus_load["choice"]["same"].as_u64().unwrap();
    assert!(same == 0 || same == 4, "{cache_plus_load}");
}

/// `kvroute peer sweep --seeds N OPTIONS -- PYTHON ADAPTER`, which must succeed; its
/// table.
fn peer_sweep(python: &Path, seeds: u64, options: &[&str], adapter: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["peer", "sweep", "--seeds", &seeds.to_string()])
        .args(options)
        .arg("--")
        .arg(python)
        .arg(format!("{ADAPTERS}/{}", adapter[0]))
        .args(&adapter[1..])
        .output()
        .expect("kvroute runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "peer sweep: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// A sweep's table without its last line (how many processes served it).
fn figures(table: &str) -> &str {
    &table[..table.trim_end().rfind('\n').unwrap() + 1]
}

#[test]
fn ray_reset_between_traces_gives_a_fresh_processs_figures() {
    let Some(python) = venv_python() else {
        return;
    };
    // Ray's tree is deterministic, so one process reset between traces (a new
    // PrefixTree and TextMap) must give every figure fresh processes give.
    for adapter in [RAY, RAY_LRU] {
        let reset = peer_sweep(&python, 5, &[], adapter);
        assert!(
            reset.ends_with(
                "peer ray-serve-prefix-tree 2.49.0: 1 processes for 10 traces, reset between traces\n"
            ),
            "{reset}"
        );
        let fresh = peer_sweep(&python, 5, &["--process-per-trace"], adapter);
        assert!(
            fresh.ends_with(": 10 processes for 10 traces, one per trace (--process-per-trace)\n")
        );
        assert_eq!(figures(&reset), figures(&fresh), "{adapter:?}");
        assert!(!reset.starts_with("10 traces, 0 rows"), "{reset}");
    }
}

#[test]
fn the_sglang_router_serves_a_sweep_from_one_process_and_its_choices_are_summed() {
    let Some(python) = venv_python() else {
        return;
    };
    // One router for four traces: every worker removed and new ones added between
    // traces (the adapter waits until the router lists exactly the new workers, each
    // at load 0). The router's ties follow an order that changes with its registry, so
    // only the number of decisions is compared with fresh processes', and the split.
    let reset = peer_sweep(&python, 2, &[], SGLANG);
    assert!(
        reset.ends_with(
            "peer sglang-router 0.3.2: 1 processes for 4 traces, reset between traces\n"
        ),
        "{reset}"
    );
    let fresh = peer_sweep(&python, 2, &["--process-per-trace"], SGLANG);
    let choice_row = |table: &str| -> Vec<u64> {
        let row = table
            .lines()
            .find(|l| l.starts_with("sglang-router "))
            .unwrap_or_else(|| panic!("no choice row: {table}"));
        row.split_whitespace()
            .skip(1)
            .take(3)
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let (r, f) = (choice_row(&reset), choice_row(&fresh));
    assert_eq!(r[0], f[0], "decisions:\n{reset}\n{fresh}");
    assert!(r[0] > 0 && r[1] + r[2] == r[0], "{reset}");
}

#[test]
fn three_sglang_adapters_run_side_by_side() {
    let Some(python) = venv_python() else {
        return;
    };
    // The router's metrics exporter bound one fixed port (29000) and panicked when it
    // was taken, so parallel tests, or two sweeps on one machine, failed at random; two
    // of three routers started at once failed so before each was given its own port.
    let runs: Vec<Value> = std::thread::scope(|scope| {
        let started: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| peer_run(&python, "sglang_cache_events_unseen", &[], SGLANG)))
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for summary in runs {
        assert_eq!(summary["choice"]["decisions"], 3, "{summary}");
    }
}
