//! SPEC §14.2.1: cohorts through `--trace`. The trace is validated as `validate` does
//! (§2; its lines are error 5 of §14.5), its `trace_digest` (§6.1) must be the
//! receipt's, its request ids are then keyed under `--id-key` (§6.5), and each decision
//! of the run takes the `(tenant, model, adapter)` of the request whose id is its
//! `request` (none: error 6, for the first such decision in receipt order). A cohort is
//! a triple with at least one routed decision, in byte order of the triple compared
//! member by member (tenant, then model, then adapter), as a `BTreeMap` of `String`
//! tuples orders it.

use std::collections::BTreeMap;

use super::{Decision, JoinFailure};
use crate::model::EventKind;
use crate::{canonical, jcs, keyed, validate};

/// A request's `(tenant, model, adapter)`.
pub(super) type Triple = (String, String, String);

/// Each decision's triple, in the decisions' order, or error 5 or 6 of SPEC §14.5.
pub(super) fn triples(
    trace: &[u8],
    receipt_trace_digest: &str,
    id_key: Option<&[u8]>,
    decisions: &[Decision],
) -> Result<Vec<Triple>, JoinFailure> {
    let trace = validate::check(trace).map_err(JoinFailure::TraceInvalid)?;
    let canonical = canonical::canonical_trace_bytes(&trace).map_err(|message| {
        JoinFailure::TraceInvalid(vec![format!("$: internal error: {message}")])
    })?;
    let digest = jcs::digest(&canonical);
    if digest != receipt_trace_digest {
        return Err(JoinFailure::TraceDigest {
            trace: digest,
            receipt: receipt_trace_digest.to_owned(),
        });
    }
    let mut by_id: BTreeMap<String, Triple> = BTreeMap::new();
    for event in &trace.events {
        if let EventKind::Request {
            id,
            tenant,
            model,
            adapter,
            ..
        } = &event.kind
        {
            let id = match id_key {
                Some(key) => keyed::keyed_id(key, id),
                None => id.clone(),
            };
            by_id.insert(id, (tenant.clone(), model.clone(), adapter.clone()));
        }
    }
    let mut out = Vec::new();
    for d in decisions {
        match by_id.get(&d.request) {
            Some(triple) => out.push(triple.clone()),
            None => return Err(JoinFailure::NotInTrace(d.request.clone())),
        }
    }
    Ok(out)
}

/// The cohorts: each triple with at least one routed decision, with its decisions in
/// receipt order.
pub(super) fn group<'a>(
    decisions: &'a [Decision],
    triples: &[Triple],
) -> BTreeMap<Triple, Vec<&'a Decision>> {
    let mut groups: BTreeMap<Triple, Vec<&Decision>> = BTreeMap::new();
    for (d, triple) in decisions.iter().zip(triples) {
        groups.entry(triple.clone()).or_default().push(d);
    }
    groups.retain(|_, members| members.iter().any(|d| d.chosen.is_some()));
    groups
}
