//! The reasons a candidate row lists (SPEC.md §4.7): why a worker is ineligible, why
//! its cache evidence was not used, or why the overload cap or the cold reserve excluded
//! it.
//!
//! A leaf: candidate rows, the tenant rule and the policies all record reasons, and
//! none of them owns the list.

/// Why a row is ineligible, lost its cache evidence, or was excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ModelNotServed,
    AdapterNotLoaded,
    StaleView,
    EvidenceGap,
    TenantMismatch,
    ModelMismatch,
    AdapterMismatch,
    Overloaded,
    ColdReserve,
}

impl Reason {
    /// Every reason, in the order a row lists them.
    pub const ALL: [Reason; 9] = [
        Reason::ModelNotServed,
        Reason::AdapterNotLoaded,
        Reason::StaleView,
        Reason::EvidenceGap,
        Reason::TenantMismatch,
        Reason::ModelMismatch,
        Reason::AdapterMismatch,
        Reason::Overloaded,
        Reason::ColdReserve,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::ModelNotServed => "model_not_served",
            Reason::AdapterNotLoaded => "adapter_not_loaded",
            Reason::StaleView => "stale_view",
            Reason::EvidenceGap => "evidence_gap",
            Reason::TenantMismatch => "tenant_mismatch",
            Reason::ModelMismatch => "model_mismatch",
            Reason::AdapterMismatch => "adapter_mismatch",
            Reason::Overloaded => "overloaded",
            Reason::ColdReserve => "cold_reserve",
        }
    }

    /// The reason a receipt row lists under `name`, if any.
    pub fn from_name(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.name() == name)
    }

    const fn bit(self) -> u16 {
        1 << (self as u8)
    }
}

/// A set of reasons that iterates in the fixed listing order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reasons(u16);

impl Reasons {
    /// The reasons that make a row ineligible (SPEC.md §4.1): a row is eligible exactly
    /// when it lists neither, so eligibility is read off the reasons, never kept apart
    /// from them.
    pub const INELIGIBLE: Reasons =
        Reasons(Reason::ModelNotServed.bit() | Reason::AdapterNotLoaded.bit());

    /// The reasons that keep a row out of the front set (SPEC.md §4.6): ineligible, or
    /// cut by the overload cap or the cold reserve.
    pub const OUTSIDE_FRONT_SET: Reasons =
        Reasons(Reasons::INELIGIBLE.0 | Reason::Overloaded.bit() | Reason::ColdReserve.bit());

    /// The reasons under which a row's cache evidence was not consulted or not usable
    /// (SPEC.md §4.2, §4.3): a receipt keeps no figure of what such a row held.
    pub const EVIDENCE_REFUSED: Reasons = Reasons(
        Reason::StaleView.bit()
            | Reason::EvidenceGap.bit()
            | Reason::TenantMismatch.bit()
            | Reason::ModelMismatch.bit()
            | Reason::AdapterMismatch.bit(),
    );

    pub fn insert(&mut self, reason: Reason) {
        self.0 |= reason.bit();
    }

    pub fn contains(self, reason: Reason) -> bool {
        self.0 & reason.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the two sets share a reason: one test of a row against a whole class of
    /// reasons, such as [`Reasons::INELIGIBLE`].
    pub fn intersects(self, other: Reasons) -> bool {
        self.0 & other.0 != 0
    }

    /// Every reason of either set.
    pub fn union(self, other: Reasons) -> Reasons {
        Reasons(self.0 | other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = Reason> {
        Reason::ALL.into_iter().filter(move |r| self.contains(*r))
    }

    pub fn boundary_count(self) -> u64 {
        const BOUNDARY: u16 = 1 << (Reason::TenantMismatch as u8)
            | 1 << (Reason::ModelMismatch as u8)
            | 1 << (Reason::AdapterMismatch as u8);
        (self.0 & BOUNDARY).count_ones() as u64
    }
}
