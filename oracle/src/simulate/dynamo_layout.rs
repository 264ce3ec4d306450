//! SPEC.md §14.4.1: a closed loop's completion record written as Dynamo's file sink
//! writes a `request_end` record, and the worker names such a record can carry
//! (`dynamo|<I>|dp<R>`, §13.7). The line is assembled by hand, member by member in the
//! order §14.4.1 shows, so that no JSON writer's member order or number format can
//! creep in; every figure is computed exactly in 128 bits.

use super::{ms_decimal, CompletionRecord};
use crate::json::quote_str;

/// The largest millisecond figure a Dynamo record carries (`timestamp`,
/// `request_received_ms`): 9,999,999,999,999, §14.1.1's largest `request_received_ms`.
pub const DYNAMO_MS_MAX: u128 = 9_999_999_999_999;

/// `(I, R)` when `id` is `dynamo|<I>|dp<R>` with `I` from 0 to 2^64 − 1 and `R` from 0
/// to 2^32 − 1, each decimal ASCII digits without a leading zero (`0` itself is `0`);
/// `None` for any other id (SPEC §14.4.1 *Worker names*).
pub fn dynamo_worker_numbers(id: &str) -> Option<(u64, u32)> {
    let rest = id.strip_prefix("dynamo|")?;
    let (worker, rank) = rest.split_once('|')?;
    let rank = rank.strip_prefix("dp")?;
    Some((plain_decimal(worker)?, plain_decimal(rank)?))
}

/// A decimal without sign, leading zero or anything but ASCII digits, in `T`'s range.
fn plain_decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if !digits_only || leading_zero {
        return None;
    }
    // Only digits are left, so the parse fails exactly when the value is out of range.
    text.parse().ok()
}

/// §14.4.1's refusal of a worker whose id a Dynamo record cannot carry, the id quoted
/// as §2.2 quotes a string.
pub(super) fn unnamed_worker(id: &str) -> String {
    format!(
        "kvroute simulate: --completions-format dynamo: worker {} is not named \
         dynamo|<worker_id>|dp<rank>, so a Dynamo record cannot name it (give --workers N \
         --worker-names dynamo)",
        quote_str(id)
    )
}

/// One §14.4.1 line, `\n` included, for `ticks_per_ms = N` (the caller keeps N from 1
/// to 1,000,000; 0 is taken as 1), the serving worker being `dynamo|<worker_id>|dp<dp_rank>`.
/// With `t`, `done` and `d = ceil(decode_tokens / decode_rate)` as in the AIPerf record:
/// `timestamp` `floor((done + d)/N)` and `request_received_ms` `floor(t/N)`, each at
/// most [`DYNAMO_MS_MAX`]; `ttft_ms` `floor((done − t)·1000/N)` µs, `avg_itl_ms`
/// `floor(1000/(N·decode_rate))` µs and `total_time_ms` `floor((done + d − t)·1000/N)`
/// µs, written as exact decimal milliseconds ([`ms_decimal`]); `cached_tokens` the
/// record's `held`.
pub fn dynamo_line(
    record: &CompletionRecord,
    ticks_per_ms: u64,
    worker_id: u64,
    dp_rank: u32,
) -> Vec<u8> {
    let n = u128::from(ticks_per_ms.max(1));
    let rate = u128::from(record.decode_rate.max(1));
    let t = u128::from(record.arrival_tick);
    let done = u128::from(record.prefill_done_tick);
    let end = done + u128::from(record.decode_tokens).div_ceil(rate);
    let timestamp_ms = (end / n).min(DYNAMO_MS_MAX);
    let received_ms = (t / n).min(DYNAMO_MS_MAX);
    let ttft_us = done.saturating_sub(t) * 1000 / n;
    let itl_us = 1000 / (n * rate);
    let total_us = end.saturating_sub(t) * 1000 / n;

    let mut id = Vec::new();
    crate::jcs::write_string(&record.request, &mut id);
    let mut out = Vec::new();
    out.extend_from_slice(
        format!(
            "{{\"timestamp\":{timestamp_ms},\"event\":{{\"event_type\":\"request_end\",\
             \"request\":{{\"request_id\":"
        )
        .as_bytes(),
    );
    out.extend_from_slice(&id);
    out.extend_from_slice(b",\"x_request_id\":");
    out.extend_from_slice(&id);
    out.extend_from_slice(
        format!(
            ",\"request_received_ms\":{received_ms},\"ttft_ms\":{},\"avg_itl_ms\":{},\
             \"total_time_ms\":{},\"cached_tokens\":{},\
             \"worker\":{{\"prefill_worker_id\":{worker_id},\"prefill_dp_rank\":{dp_rank}}}}}}}}}\n",
            ms_decimal(ttft_us),
            ms_decimal(itl_us),
            ms_decimal(total_us),
            record.held,
        )
        .as_bytes(),
    );
    out
}
