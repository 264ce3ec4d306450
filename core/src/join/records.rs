//! The completion records of a join, one entry per request id (SPEC.md §14.2): the first
//! record of each id in file order and how many lines the id had. Both the figures and
//! the attribution read them, so they sit apart from either.

use crate::join::aiperf::Completion;
use std::collections::BTreeMap;

/// The first record of each id, and how many lines each id had.
#[derive(Debug, Default)]
pub struct Records {
    pub(super) first: BTreeMap<String, (Completion, u64)>,
    pub(super) lines: u64,
    /// The id of the first record in file order.
    pub(super) first_in_file: Option<String>,
    /// Records that have no id and no decision (`vllm-bench` entries past the run's
    /// last decision, SPEC.md §14.1.2): each is `unrouted`.
    pub(super) unrouted_without_id: u64,
    /// The span when anything matched, for a layout whose records carry no times.
    pub(super) span_when_matched_ns: Option<u128>,
}

impl Records {
    pub fn add(&mut self, completion: Completion) {
        self.lines += 1;
        if self.first_in_file.is_none() {
            self.first_in_file = Some(completion.request_id.clone());
        }
        self.first
            .entry(completion.request_id.clone())
            .and_modify(|(_, seen)| *seen += 1)
            .or_insert((completion, 1));
    }

    /// The record of `id`: its first line.
    pub fn record(&self, id: &str) -> Option<&Completion> {
        self.first.get(id).map(|(completion, _)| completion)
    }

    /// The first record's id in file order, for the error when nothing matches.
    pub fn first_id(&self) -> Option<&str> {
        self.first_in_file.as_deref()
    }

    /// The records of a layout joined by position (SPEC.md §14.1.2): entry `i` takes
    /// the id of decision `i`; entries past the last decision are unrouted.
    pub fn by_position(
        entries: impl IntoIterator<Item = Completion>,
        request_ids: &[&str],
        span_when_matched_ns: u128,
    ) -> Records {
        let mut records = Records {
            span_when_matched_ns: Some(span_when_matched_ns),
            ..Records::default()
        };
        for (i, mut entry) in entries.into_iter().enumerate() {
            match request_ids.get(i) {
                Some(&request) => {
                    entry.request_id = request.to_owned();
                    records.add(entry);
                }
                None => {
                    records.lines += 1;
                    records.unrouted_without_id += 1;
                }
            }
        }
        records
    }

    /// The records whose id is one of `ids`, every line of them (SPEC.md §14.2.1).
    pub fn restricted_to(&self, ids: &[&str]) -> Records {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        let first: BTreeMap<String, (Completion, u64)> = self
            .first
            .iter()
            .filter(|(id, _)| ids.binary_search(&id.as_str()).is_ok())
            .map(|(id, record)| (id.clone(), record.clone()))
            .collect();
        Records {
            lines: first.values().map(|(_, seen)| seen).sum(),
            first,
            first_in_file: None,
            unrouted_without_id: 0,
            span_when_matched_ns: self.span_when_matched_ns,
        }
    }
}
