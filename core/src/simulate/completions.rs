//! The AIPerf completion records of one closed-loop run (SPEC.md §14.4), so `join` can
//! be exercised end to end and a user sees what such a file looks like. Times are the
//! engine model's ticks read as `1/N` ms; every figure is an integer, and milliseconds
//! are written as exact decimals, never through a binary float.

use crate::output::json_text::{milliseconds_text, push_str, push_u64};
use crate::simulate::closed_loop::SimCompletion;

/// The largest nanosecond figure written: 10^19 - 1 (SPEC.md §14.1, §14.4).
const NANOS_MAX: u128 = 9_999_999_999_999_999_999;

/// The largest `--ticks-per-ms`: a tick of one nanosecond.
pub const TICKS_PER_MS_MAX: u64 = 1_000_000;

/// The lines of `completions` (one record and `\n` each), ticks read as `1/ticks_per_ms`
/// ms (at least 1).
pub fn completion_lines(completions: &[SimCompletion], ticks_per_ms: u64) -> Vec<u8> {
    let n = u128::from(ticks_per_ms.max(1));
    // At most 10^19 - 1, the largest nanosecond figure a record is read with (SPEC.md
    // §14.4): ticks near 2^53 at 1 tick a ms would pass it.
    let nanos = |tick: u64| (u128::from(tick) * 1_000_000 / n).min(NANOS_MAX) as u64;
    let mut out = Vec::new();
    for c in completions {
        let decode_rate = c.decode_rate.max(1);
        let decode_ticks = c.decode_tokens.div_ceil(decode_rate);
        let end_tick = c.prefill_done_tick.saturating_add(decode_ticks);
        let ttft_us = (u128::from(c.prefill_done_tick - c.arrival_tick) * 1000 / n) as u64;
        let tpot_us = (1000 / (n * u128::from(decode_rate))) as u64;
        out.extend_from_slice(br#"{"metadata":{"x_request_id":"#);
        push_str(&mut out, &c.request_id);
        out.extend_from_slice(br#","request_start_ns":"#);
        push_u64(&mut out, nanos(c.arrival_tick));
        out.extend_from_slice(br#","request_end_ns":"#);
        push_u64(&mut out, nanos(end_tick));
        out.extend_from_slice(br#","was_cancelled":false},"metrics":{"input_sequence_length":"#);
        push_tokens(&mut out, c.prompt_tokens);
        out.extend_from_slice(br#","time_to_first_token":"#);
        push_milliseconds(&mut out, ttft_us);
        out.extend_from_slice(br#","inter_token_latency":"#);
        push_milliseconds(&mut out, tpot_us);
        out.extend_from_slice(br#","output_sequence_length":"#);
        push_tokens(&mut out, c.decode_tokens);
        out.extend_from_slice(b"},\"error\":null}\n");
    }
    out
}

fn push_tokens(out: &mut Vec<u8>, tokens: u64) {
    out.extend_from_slice(br#"{"value":"#);
    push_u64(out, tokens);
    out.extend_from_slice(br#","unit":"tokens"}"#);
}

/// `{"value":<µs / 1000 as an exact decimal>,"unit":"ms"}`: `12.345`, `12.3`, `12`.
fn push_milliseconds(out: &mut Vec<u8>, micros: u64) {
    out.extend_from_slice(br#"{"value":"#);
    out.extend_from_slice(milliseconds_text(micros).as_bytes());
    out.extend_from_slice(br#","unit":"ms"}"#);
}
