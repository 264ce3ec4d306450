//! What attribution computes (SPEC.md §14.7), apart from how: one record's parts and
//! the sums over a run or a cohort. The figures and the document hold these; the rule
//! that fills them is [`crate::join::attribution`].

/// One attributed record's parts, each from 0 to `prompt`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordParts {
    pub prompt: u64,
    pub cached: u64,
    pub workload: u64,
    pub boundary: u64,
    pub routing_paid_for_load: u64,
    pub routing_other: u64,
    pub elsewhere_lost: u64,
    pub elsewhere_gained: u64,
    pub phantom: u64,
    pub missed: u64,
}

impl RecordParts {
    /// Whether the router's picture of the serving worker's cache and the record
    /// disagree.
    pub fn drifts(&self) -> bool {
        self.phantom > 0 || self.missed > 0
    }
}

impl RecordParts {
    /// `prompt − cached` equals the parts, credits taken off (SPEC.md §14.7).
    pub(crate) fn add_up(&self) -> bool {
        let lost = i128::from(self.prompt) - i128::from(self.cached);
        let parts = i128::from(self.workload)
            + i128::from(self.boundary)
            + i128::from(self.routing_paid_for_load)
            + i128::from(self.routing_other)
            + i128::from(self.elsewhere_lost)
            - i128::from(self.elsewhere_gained)
            + i128::from(self.phantom)
            - i128::from(self.missed);
        lost == parts
    }
}

/// One serving worker's drift figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerDrift {
    pub worker: String,
    pub attributed: u64,
    pub phantom: u128,
    pub missed: u128,
    pub drifted: u64,
    pub drift_pm: u64,
}

/// The attribution of a run or a cohort (SPEC.md §14.7): counts, token sums and the
/// summed parts (exact; the document saturates them at `B`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub attributed: u64,
    pub unknown: u64,
    pub cached_over_prompt: u64,
    pub served_elsewhere: u64,
    pub served_outside_fleet: u64,
    pub served_unknown: u64,
    pub prompt_tokens: u128,
    pub cached_tokens: u128,
    pub lost_tokens: u128,
    pub workload: u128,
    pub boundary: u128,
    pub routing_paid_for_load: u128,
    pub routing_other: u128,
    pub elsewhere_lost: u128,
    pub elsewhere_gained: u128,
    pub phantom: u128,
    pub missed: u128,
    pub hidden: u64,
    pub drifted: u64,
    pub drift_pm: u64,
    pub elsewhere_pm: u64,
    pub workers: Vec<WorkerDrift>,
}

impl Attribution {
    pub(crate) fn add(&mut self, parts: &RecordParts) {
        self.attributed += 1;
        self.prompt_tokens += u128::from(parts.prompt);
        self.cached_tokens += u128::from(parts.cached);
        self.lost_tokens += u128::from(parts.prompt - parts.cached);
        self.workload += u128::from(parts.workload);
        self.boundary += u128::from(parts.boundary);
        self.routing_paid_for_load += u128::from(parts.routing_paid_for_load);
        self.routing_other += u128::from(parts.routing_other);
        self.elsewhere_lost += u128::from(parts.elsewhere_lost);
        self.elsewhere_gained += u128::from(parts.elsewhere_gained);
        self.phantom += u128::from(parts.phantom);
        self.missed += u128::from(parts.missed);
        self.drifted += u64::from(parts.drifts());
    }
}

/// One attributed record as a per-record view reads it: its decision's tick, the worker
/// of its serving row (`None` when the run has no row for it) and its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributedRecord {
    pub tick: u64,
    pub serving_worker: Option<String>,
    pub parts: RecordParts,
}
