//! The routing policies by name (SPEC §5, in the receipt order of §6). A candidate row
//! needs to know the policy it is built for (§4.5 caps only `cache_plus_load`, §4.8
//! costs only `dynamo_default`), and a policy chooses among rows, so the kind sits
//! below both `candidates` and `policies`: each imports it from here, and `policies`
//! imports `candidates`, never the other way round.

/// The routing policies, in receipt order (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    RoundRobin,
    LeastLoad,
    LongestPrefix,
    CachePlusLoad,
    /// §4.8; only with `dynamo_block_tokens`.
    DynamoDefault,
}

impl PolicyKind {
    /// The four runs every receipt has, in receipt order; the closed loop's (§11).
    pub const FOUR: [PolicyKind; 4] = [
        PolicyKind::RoundRobin,
        PolicyKind::LeastLoad,
        PolicyKind::LongestPrefix,
        PolicyKind::CachePlusLoad,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::LeastLoad => "least_load",
            PolicyKind::LongestPrefix => "longest_prefix",
            PolicyKind::CachePlusLoad => "cache_plus_load",
            PolicyKind::DynamoDefault => "dynamo_default",
        }
    }
}
