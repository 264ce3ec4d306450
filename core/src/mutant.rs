//! The planted-bug switch of the mutant check (`mutants/MUTANTS.toml`).
//!
//! Every planted bug sits at its real decision site behind `mutant::active("mutant-…")`.
//! In a normal build (no `mutants` feature) `active` is the constant `false`, so the bug
//! branches compile away and nothing can switch them on. With `--features
//! kvroute-core/mutants` — given only on the command line, never in a manifest — every
//! bug is compiled in and stays off until the environment variable `KVROUTE_MUTANT`
//! names exactly one of them. One build therefore serves the baseline and every
//! mutant: the check compiles once instead of once per bug, which was most of its time.
//! Two names at once (or a name this list does not know) would make a kill
//! unattributable, so the first check refuses them and stops the process.

/// Every planted bug, by the name the catalogue and `KVROUTE_MUTANT` use.
pub const NAMES: [&str; 20] = [
    "mutant-tenant-scope-removed",
    "mutant-stale-epochs-accepted",
    "mutant-decode-ignored",
    "mutant-shared-state",
    "mutant-chosen-only-receipt",
    "mutant-ties-to-last",
    "mutant-freshness-ignored",
    "mutant-reuse-past-partial",
    "mutant-namespace-model-adapter-dropped",
    "mutant-overload-cap-ignored",
    "mutant-phantom-reversed",
    "mutant-lru-refresh-ignored",
    "mutant-publication-lag-dropped",
    "mutant-key-epoch-as-worker",
    "mutant-tombstones-forgotten",
    "mutant-gap-ignored",
    "mutant-reserve-on-cold",
    "mutant-loss-after-delivery",
    "mutant-missed-only-on-hits",
    "mutant-dynamo-partial-blocks",
];

/// The environment variable that selects the one active bug in a `mutants` build.
pub const SELECTOR_ENV: &str = "KVROUTE_MUTANT";

/// Whether the planted bug `name` is active. Always `false` without the `mutants`
/// feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn active(_name: &str) -> bool {
    false
}

/// Whether the planted bug `name` is active: `KVROUTE_MUTANT` names it.
#[cfg(feature = "mutants")]
pub fn active(name: &str) -> bool {
    debug_assert!(NAMES.contains(&name), "{name} is not in mutant::NAMES");
    selected() == Some(name)
}

/// The selected bug, read and checked once per process.
#[cfg(feature = "mutants")]
fn selected() -> Option<&'static str> {
    static SELECTED: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *SELECTED.get_or_init(|| {
        let value = std::env::var(SELECTOR_ENV).ok()?;
        match parse_selection(&value) {
            Ok(found) => found,
            // A test binary cannot run on an unattributable selection; stopping here is
            // the runtime form of "core refuses two at once".
            Err(reason) => panic!("kvroute-core: {SELECTOR_ENV}={value:?}: {reason}"),
        }
    })
}

/// `""` selects nothing; otherwise exactly one name of [`NAMES`].
pub fn parse_selection(value: &str) -> Result<Option<&'static str>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    if value.contains([',', ' ', ';']) {
        return Err("names more than one planted bug; enable one at a time".to_owned());
    }
    NAMES
        .iter()
        .find(|n| **n == value)
        .map(|n| Some(*n))
        .ok_or_else(|| format!("no planted bug is called that; known: {}", NAMES.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_known_name_selects_and_anything_else_is_refused() {
        assert_eq!(parse_selection(""), Ok(None));
        assert_eq!(
            parse_selection("mutant-ties-to-last"),
            Ok(Some("mutant-ties-to-last"))
        );
        assert!(parse_selection("mutant-ties-to-last,mutant-decode-ignored").is_err());
        assert!(parse_selection("mutant-nonexistent").is_err());
    }
}
