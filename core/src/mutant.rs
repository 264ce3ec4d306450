//! The planted-bug switch of the mutant check (`mutants/MUTANTS.toml`).
//!
//! Every planted bug sits at its real decision site behind `mutant::active(Mutant::…)`,
//! so a misspelt bug does not compile. In a normal build (no `mutants` feature)
//! `active` is the constant `false`, so the bug branches compile away and nothing can
//! switch them on. With `--features kvroute-core/mutants` — given only on the command
//! line, never in a manifest — every bug is compiled in and stays off until the
//! environment variable `KVROUTE_MUTANT` names exactly one of them. One build therefore
//! serves the baseline and every mutant: the check compiles once instead of once per
//! bug, which was most of its time. Two names at once (or a name this list does not
//! know) would make a kill unattributable, so the first check refuses them and stops
//! the process.

/// Every planted bug. [`Mutant::name`] is the name the catalogue and `KVROUTE_MUTANT`
/// use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    TenantScopeRemoved,
    StaleEpochsAccepted,
    DecodeIgnored,
    SharedState,
    ChosenOnlyReceipt,
    TiesToLast,
    FreshnessIgnored,
    ReusePastPartial,
    NamespaceModelAdapterDropped,
    OverloadCapIgnored,
    PhantomReversed,
    LruRefreshIgnored,
    PublicationLagDropped,
    KeyEpochAsWorker,
    TombstonesForgotten,
    GapIgnored,
    ReserveOnCold,
    LossAfterDelivery,
    MissedOnlyOnHits,
    DynamoPartialBlocks,
}

impl Mutant {
    /// Every planted bug, in catalogue order.
    pub const ALL: [Mutant; 20] = [
        Mutant::TenantScopeRemoved,
        Mutant::StaleEpochsAccepted,
        Mutant::DecodeIgnored,
        Mutant::SharedState,
        Mutant::ChosenOnlyReceipt,
        Mutant::TiesToLast,
        Mutant::FreshnessIgnored,
        Mutant::ReusePastPartial,
        Mutant::NamespaceModelAdapterDropped,
        Mutant::OverloadCapIgnored,
        Mutant::PhantomReversed,
        Mutant::LruRefreshIgnored,
        Mutant::PublicationLagDropped,
        Mutant::KeyEpochAsWorker,
        Mutant::TombstonesForgotten,
        Mutant::GapIgnored,
        Mutant::ReserveOnCold,
        Mutant::LossAfterDelivery,
        Mutant::MissedOnlyOnHits,
        Mutant::DynamoPartialBlocks,
    ];

    /// The name the catalogue and `KVROUTE_MUTANT` use.
    pub const fn name(self) -> &'static str {
        match self {
            Mutant::TenantScopeRemoved => "mutant-tenant-scope-removed",
            Mutant::StaleEpochsAccepted => "mutant-stale-epochs-accepted",
            Mutant::DecodeIgnored => "mutant-decode-ignored",
            Mutant::SharedState => "mutant-shared-state",
            Mutant::ChosenOnlyReceipt => "mutant-chosen-only-receipt",
            Mutant::TiesToLast => "mutant-ties-to-last",
            Mutant::FreshnessIgnored => "mutant-freshness-ignored",
            Mutant::ReusePastPartial => "mutant-reuse-past-partial",
            Mutant::NamespaceModelAdapterDropped => "mutant-namespace-model-adapter-dropped",
            Mutant::OverloadCapIgnored => "mutant-overload-cap-ignored",
            Mutant::PhantomReversed => "mutant-phantom-reversed",
            Mutant::LruRefreshIgnored => "mutant-lru-refresh-ignored",
            Mutant::PublicationLagDropped => "mutant-publication-lag-dropped",
            Mutant::KeyEpochAsWorker => "mutant-key-epoch-as-worker",
            Mutant::TombstonesForgotten => "mutant-tombstones-forgotten",
            Mutant::GapIgnored => "mutant-gap-ignored",
            Mutant::ReserveOnCold => "mutant-reserve-on-cold",
            Mutant::LossAfterDelivery => "mutant-loss-after-delivery",
            Mutant::MissedOnlyOnHits => "mutant-missed-only-on-hits",
            Mutant::DynamoPartialBlocks => "mutant-dynamo-partial-blocks",
        }
    }

    /// The bug `name` names, if any.
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The environment variable that selects the one active bug in a `mutants` build.
pub const SELECTOR_ENV: &str = "KVROUTE_MUTANT";

/// Whether the planted bug `mutant` is active. Always `false` without the `mutants`
/// feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn active(_mutant: Mutant) -> bool {
    false
}

/// Whether the planted bug `mutant` is active: `KVROUTE_MUTANT` names it.
#[cfg(feature = "mutants")]
pub fn active(mutant: Mutant) -> bool {
    selected() == Some(mutant)
}

/// The selected bug, read and checked once per process.
#[cfg(feature = "mutants")]
fn selected() -> Option<Mutant> {
    static SELECTED: std::sync::OnceLock<Option<Mutant>> = std::sync::OnceLock::new();
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

/// `""` selects nothing; otherwise exactly one bug's name.
pub fn parse_selection(value: &str) -> Result<Option<Mutant>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    if value.contains([',', ' ', ';']) {
        return Err("names more than one planted bug; enable one at a time".to_owned());
    }
    Mutant::named(value).map(Some).ok_or_else(|| {
        let known: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        format!("no planted bug is called that; known: {}", known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_known_name_selects_and_anything_else_is_refused() {
        assert_eq!(parse_selection(""), Ok(None));
        assert_eq!(
            parse_selection("mutant-ties-to-last"),
            Ok(Some(Mutant::TiesToLast))
        );
        assert!(parse_selection("mutant-ties-to-last,mutant-decode-ignored").is_err());
        assert!(parse_selection("mutant-nonexistent").is_err());
    }

    #[test]
    fn every_bug_has_its_own_name_and_is_found_by_it() {
        for (i, mutant) in Mutant::ALL.into_iter().enumerate() {
            assert!(mutant.name().starts_with("mutant-"));
            assert_eq!(Mutant::named(mutant.name()), Some(mutant));
            assert!(Mutant::ALL[..i].iter().all(|m| m.name() != mutant.name()));
        }
    }
}
