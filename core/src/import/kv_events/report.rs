//! What an engine-event import counted, and its lines on stderr (SPEC.md §13.5).
//!
//! Everything the mapping leaves out or cannot place is counted here rather than
//! dropped silently, so a user can tell an import that kept the engines' evidence from
//! one that kept little of it. Lists are in byte order and every figure is an
//! integer, so the report is the same on every run.

use std::collections::BTreeMap;
use std::sync::Arc;

/// How many restart and gap lines the report prints; the counts cover them all.
pub const SEQUENCE_NOTES_MAX: usize = 100;

/// Engine events left out of the trace, by reason, in the order SPEC.md §13.4 checks
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    pub not_on_gpu: u64,
    pub other_cache_group: u64,
    pub extra_keys: u64,
    pub other_block_size: u64,
    pub no_token_ids: u64,
    pub token_count: u64,
    pub unknown_parent: u64,
    /// Hashes of removals the publisher's table did not know (not whole events).
    pub unknown_removed_hashes: u64,
}

/// A restart or a sequence gap of one publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceNote {
    /// The capture line of the message where it was seen.
    pub line: usize,
    pub worker: String,
    pub restart: bool,
    pub seq: u64,
    pub previous_seq: u64,
}

/// The counts of one import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub messages: u64,
    pub stored: u64,
    pub removed: u64,
    pub cleared: u64,
    pub unknown_type: u64,
    pub restarts: u64,
    pub gaps: u64,
    pub joined_mid_stream: u64,
    /// Messages whose batch time was earlier than their publisher's previous one, and
    /// which took that time instead (SPEC.md §13.4, *Order*).
    pub earlier_than_own: u64,
    /// Messages whose batch time was earlier than that of a message of another
    /// publisher before them in the capture; their time stands.
    pub earlier_than_other: u64,
    pub left_out: LeftOut,
    pub unknown_types: BTreeMap<String, u64>,
    pub unknown_fields: BTreeMap<String, u64>,
    /// The first [`SEQUENCE_NOTES_MAX`] restarts and gaps, in capture order.
    pub notes: Vec<SequenceNote>,
    /// How the request log meets the capture (SPEC.md §13.5, the warnings).
    pub requests: RequestsSeen,
    /// Salted stores by the tenant their salt names (SPEC.md §13.4, *Extra keys*).
    pub salted: BTreeMap<Arc<str>, u64>,
    /// `--tenant`, when some salt names it: those chains share the unsalted blocks'
    /// namespace.
    pub salted_default_tenant: Option<Arc<str>>,
}

/// What the request log holds that the capture's workers cannot use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestsSeen {
    pub requests: u64,
    /// The workers' model, which every request should name.
    pub workers_model: String,
    /// Requests naming another model: no worker serves them.
    pub of_other_model: u64,
    /// Requests that arrive before the capture's first message, and how far before it
    /// the earliest of them does: on another clock, they all do, by years.
    pub before_capture: u64,
    pub earliest_before_ms: u64,
}

impl ImportReport {
    pub(crate) fn note(&mut self, note: SequenceNote) {
        if note.restart {
            self.restarts += 1;
        } else {
            self.gaps += 1;
        }
        if self.notes.len() < SEQUENCE_NOTES_MAX {
            self.notes.push(note);
        }
    }

    /// Why the import holds nothing worth writing (SPEC.md §13.5), `capture` and
    /// `requests` being the inputs' names as given, or `None`.
    pub fn nothing_to_import(
        &self,
        workers: usize,
        capture: &str,
        requests: &str,
    ) -> Option<String> {
        let seen = &self.requests;
        if workers == 0 {
            return Some(format!(
                "{capture}: nothing recorded: no message from any publisher, so the trace would have no worker"
            ));
        }
        if seen.requests == 0 {
            return Some(format!("{requests}: nothing to route: no request"));
        }
        (seen.of_other_model == seen.requests).then(|| {
            format!(
                "{requests}: nothing to route: none of the {} requests names the workers' model {}",
                seen.requests,
                crate::input::json::quote_str(&seen.workers_model)
            )
        })
    }

    /// The salted stores by tenant and the warning of a salt that is `--tenant`, each
    /// only when it has something to say.
    fn salt_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.salted.is_empty() {
            let stores: u64 = self.salted.values().sum();
            let listed: Vec<String> = self
                .salted
                .iter()
                .map(|(tenant, n)| format!("{} x{n}", crate::input::json::quote_str(tenant)))
                .collect();
            lines.push(format!(
                "salted: {stores} stores under {} tenants: {}",
                self.salted.len(),
                listed.join(", ")
            ));
        }
        if let Some(tenant) = &self.salted_default_tenant {
            lines.push(format!(
                "warning: {} stores carry a salt naming {}, which is also --tenant, so their blocks share the unsalted blocks' namespace",
                self.salted.get(tenant).copied().unwrap_or_default(),
                crate::input::json::quote_str(tenant)
            ));
        }
        lines
    }

    /// The warnings about the request log, each line only when it has something to say.
    fn request_warnings(&self) -> Vec<String> {
        let seen = &self.requests;
        let mut lines = Vec::new();
        if seen.of_other_model > 0 {
            lines.push(format!(
                "warning: {} of {} requests name a model other than the workers' {}; no worker serves them",
                seen.of_other_model,
                seen.requests,
                crate::input::json::quote_str(&seen.workers_model)
            ));
        }
        if seen.before_capture > 0 {
            lines.push(format!(
                "warning: {} of {} requests arrive before the capture's first message, the earliest {} ms before it, so they reuse nothing it records; arrival_ms must be the engines' clock (ms since the Unix epoch)",
                seen.before_capture, seen.requests, seen.earliest_before_ms
            ));
        }
        lines
    }

    /// The report's lines after the first (which names the output and its digest),
    /// `capture` being the capture's name as the user gave it.
    pub fn lines(&self, capture: &str) -> Vec<String> {
        let l = &self.left_out;
        let mut lines = vec![
            format!(
                "engine events: {} BlockStored, {} BlockRemoved, {} AllBlocksCleared, {} of unknown type in {} messages",
                self.stored, self.removed, self.cleared, self.unknown_type, self.messages
            ),
            format!(
                "publishers: {} restarts, {} sequence gaps, {} joined mid-stream",
                self.restarts, self.gaps, self.joined_mid_stream
            ),
            format!(
                "order: {} earlier than its publisher's previous, {} earlier than another publisher's before it",
                self.earlier_than_own, self.earlier_than_other
            ),
            format!(
                "left out: {} not on GPU, {} other cache group, {} extra keys, {} other block size, {} no token ids, {} token count, {} unknown parent, {} unknown removed hashes",
                l.not_on_gpu, l.other_cache_group, l.extra_keys, l.other_block_size,
                l.no_token_ids, l.token_count, l.unknown_parent, l.unknown_removed_hashes
            ),
        ];
        lines.extend(self.salt_lines());
        lines.extend(self.request_warnings());
        // Tags and field names come from the payload, so they are escaped (and cut)
        // as every quoted value is (SPEC.md §2.2); a field is shown without its quotes,
        // since `Type.name` is a path, not a value.
        for (title, counts, quote) in [
            ("unknown event types", &self.unknown_types, true),
            ("unknown fields", &self.unknown_fields, false),
        ] {
            if !counts.is_empty() {
                let listed: Vec<String> = counts
                    .iter()
                    .map(|(name, n)| match quote {
                        true => format!("{} x{n}", crate::input::json::quote_str(name)),
                        false => format!(
                            "{} x{n}",
                            crate::input::json::quote_str(name).trim_matches('"')
                        ),
                    })
                    .collect();
                lines.push(format!("{title}: {}", listed.join(", ")));
            }
        }
        for note in &self.notes {
            lines.push(format!(
                "{capture}:{}: worker {}: {}: seq {} after {}",
                note.line,
                crate::input::json::quote_str(&note.worker),
                if note.restart {
                    "restart"
                } else {
                    "sequence gap"
                },
                note.seq,
                note.previous_seq
            ));
        }
        lines
    }
}
