//! Stage 5: the static bound of SPEC.md §1.4, that no exported figure can overflow.

use crate::input::compact::EventsView;
use crate::input::limits::{CostBound, JSON_INTEGER_MAX};
use crate::input::trace::*;

/// Stage 5: the static bound of SPEC.md §1.4 on every exported figure.
pub(super) fn overflow_error<E: EventsView + ?Sized>(trace: &Trace, events: &E) -> Option<String> {
    let mut bound = CostBound::default();
    for worker in &trace.workers {
        bound.add_load(worker.queued_prefill, worker.active_decode);
    }
    for i in 0..events.count() {
        events.with_event(i, |event| match &event.kind {
            EventKind::Load {
                queued_prefill,
                active_decode,
                ..
            } => bound.add_load(*queued_prefill, *active_decode),
            EventKind::Request(request) => {
                bound.add_request(request.prompt_tokens, request.decode_tokens)
            }
            EventKind::Cache { .. } => {}
        });
    }
    let policy = &trace.policy;
    let dynamo_over = policy
        .dynamo_block_tokens
        .is_some_and(|block_tokens| bound.dynamo_exceeds_integer_max(block_tokens));
    (bound.exceeds_integer_max(policy.decode_weight_milli, policy.imbalance_penalty_milli)
        || dynamo_over)
        .then(|| {
            format!(
                "$: figures could overflow: the cost bound exceeds {}",
                JSON_INTEGER_MAX
            )
        })
}
