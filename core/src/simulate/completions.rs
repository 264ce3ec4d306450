//! The completion records of one closed-loop run (SPEC.md §14.4), so `join` can be
//! exercised end to end and a user sees what such a file looks like: AIPerf's
//! `profile_export.jsonl` records, or Dynamo's `request_end` records (§14.4.1), which
//! carry the engine model's truth: the prompt tokens it served from cache and the
//! worker that served the request. Times are the engine model's ticks read as
//! `1/N` ms; every figure is an integer, and milliseconds are written as exact
//! decimals, never through a binary float.

use crate::output::json_text::{milliseconds_text, push_str, push_u64};
use crate::simulate::closed_loop::SimCompletion;
use crate::simulate::options::dynamo_worker_numbers;

/// The largest nanosecond figure written: 10^19 - 1 (SPEC.md §14.1, §14.4).
const NANOS_MAX: u128 = 9_999_999_999_999_999_999;

/// The largest epoch-millisecond figure a Dynamo record is read with (SPEC.md
/// §14.1.1's `request_received_ms`), so the largest written (§14.4.1).
const EPOCH_MS_MAX: u128 = 9_999_999_999_999;

/// The largest `--ticks-per-ms`: a tick of one nanosecond.
pub const TICKS_PER_MS_MAX: u64 = 1_000_000;

/// The layout of the records (`--completions-format`, SPEC.md §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompletionsLayout {
    /// AIPerf's per-request records (§14.1).
    #[default]
    Aiperf,
    /// Dynamo's `request_end` records in the file sink's wrapper (§14.1.1, §14.4.1).
    Dynamo,
}

/// One record's figures, read off the engine model: times in ticks, then as the
/// record's own units.
struct Figures {
    start_tick: u64,
    end_tick: u64,
    ttft_us: u64,
    tpot_us: u64,
    total_us: u64,
}

impl Figures {
    fn of(c: &SimCompletion, n: u128) -> Figures {
        let decode_rate = c.decode_rate.max(1);
        let end_tick = c
            .prefill_done_tick
            .saturating_add(c.decode_tokens.div_ceil(decode_rate));
        let micros = |ticks: u64| (u128::from(ticks) * 1000 / n) as u64;
        Figures {
            start_tick: c.arrival_tick,
            end_tick,
            ttft_us: micros(c.prefill_done_tick - c.arrival_tick),
            tpot_us: (1000 / (n * u128::from(decode_rate))) as u64,
            total_us: micros(end_tick - c.arrival_tick),
        }
    }
}

/// The lines of `completions` in `layout` (one record and `\n` each), ticks read as
/// `1/ticks_per_ms` ms (at least 1); `worker_ids` are the simulated trace's, which a
/// completion's worker index points into.
pub fn completions_file<S: AsRef<str>>(
    completions: &[SimCompletion],
    ticks_per_ms: u64,
    layout: CompletionsLayout,
    worker_ids: &[S],
) -> Vec<u8> {
    let n = u128::from(ticks_per_ms.max(1));
    let mut out = Vec::new();
    for c in completions {
        let figures = Figures::of(c, n);
        match layout {
            CompletionsLayout::Aiperf => push_aiperf(&mut out, c, &figures, n),
            CompletionsLayout::Dynamo => {
                let worker_id = worker_ids[c.worker as usize].as_ref();
                push_dynamo(&mut out, c, worker_id, &figures, n)
            }
        }
    }
    out
}

/// The lines of `completions` as AIPerf records.
pub fn completion_lines(completions: &[SimCompletion], ticks_per_ms: u64) -> Vec<u8> {
    completions_file::<&str>(completions, ticks_per_ms, CompletionsLayout::Aiperf, &[])
}

/// One AIPerf record (SPEC.md §14.4).
fn push_aiperf(out: &mut Vec<u8>, c: &SimCompletion, figures: &Figures, n: u128) {
    // At most 10^19 - 1, the largest nanosecond figure a record is read with (SPEC.md
    // §14.4): ticks near 2^53 at 1 tick a ms would pass it.
    let nanos = |tick: u64| (u128::from(tick) * 1_000_000 / n).min(NANOS_MAX) as u64;
    out.extend_from_slice(br#"{"metadata":{"x_request_id":"#);
    push_str(out, &c.request_id);
    out.extend_from_slice(br#","request_start_ns":"#);
    push_u64(out, nanos(figures.start_tick));
    out.extend_from_slice(br#","request_end_ns":"#);
    push_u64(out, nanos(figures.end_tick));
    out.extend_from_slice(br#","was_cancelled":false},"metrics":{"input_sequence_length":"#);
    push_tokens(out, c.prompt_tokens);
    out.extend_from_slice(br#","time_to_first_token":"#);
    push_milliseconds(out, figures.ttft_us);
    out.extend_from_slice(br#","inter_token_latency":"#);
    push_milliseconds(out, figures.tpot_us);
    out.extend_from_slice(br#","output_sequence_length":"#);
    push_tokens(out, c.decode_tokens);
    out.extend_from_slice(b"},\"error\":null}\n");
}

/// One Dynamo `request_end` record in the file sink's wrapper (SPEC.md §14.4.1). The
/// serving worker's numbers come from its `dynamo|<I>|dp<R>` id, which simulate checks
/// before it runs ([`dynamo_worker_numbers`]).
fn push_dynamo(out: &mut Vec<u8>, c: &SimCompletion, worker_id: &str, figures: &Figures, n: u128) {
    let epoch_ms = |tick: u64| (u128::from(tick) / n).min(EPOCH_MS_MAX) as u64;
    let (worker_id, dp_rank) = dynamo_worker_numbers(worker_id)
        .expect("simulate checks every worker's name before a Dynamo layout is written");
    out.extend_from_slice(br#"{"timestamp":"#);
    push_u64(out, epoch_ms(figures.end_tick));
    out.extend_from_slice(br#","event":{"event_type":"request_end","request":{"request_id":"#);
    push_str(out, &c.request_id);
    out.extend_from_slice(br#","x_request_id":"#);
    push_str(out, &c.request_id);
    out.extend_from_slice(br#","request_received_ms":"#);
    push_u64(out, epoch_ms(figures.start_tick));
    out.extend_from_slice(br#","ttft_ms":"#);
    out.extend_from_slice(milliseconds_text(figures.ttft_us).as_bytes());
    out.extend_from_slice(br#","avg_itl_ms":"#);
    out.extend_from_slice(milliseconds_text(figures.tpot_us).as_bytes());
    out.extend_from_slice(br#","total_time_ms":"#);
    out.extend_from_slice(milliseconds_text(figures.total_us).as_bytes());
    out.extend_from_slice(br#","cached_tokens":"#);
    push_u64(out, c.cached_tokens);
    out.extend_from_slice(br#","worker":{"prefill_worker_id":"#);
    push_u64(out, worker_id);
    out.extend_from_slice(br#","prefill_dp_rank":"#);
    push_u64(out, u64::from(dp_rank));
    out.extend_from_slice(b"}}}}\n");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> SimCompletion {
        SimCompletion {
            request_id: "r\"1".into(),
            arrival_tick: 2_500,
            prefill_done_tick: 2_750,
            worker: 0,
            decode_rate: 3,
            prompt_tokens: 1_200,
            decode_tokens: 10,
            cached_tokens: 512,
        }
    }

    /// SPEC.md §14.4.1 at 2 ticks a ms: start 1250 ms, prefill done 250 ticks later
    /// (125 ms), decode ceil(10 / 3) = 4 ticks, so the end is tick 2754 (1377 ms) and
    /// the total 254 ticks (127 ms); the TPOT is floor(1000 / (2 × 3)) = 166 µs.
    #[test]
    fn a_dynamo_record_is_the_request_end_wrapper_with_the_engine_truth() {
        let bytes = completions_file(&[served()], 2, CompletionsLayout::Dynamo, &["dynamo|7|dp2"]);
        let expected = concat!(
            r#"{"timestamp":1377,"event":{"event_type":"request_end","request":{"#,
            r#""request_id":"r\"1","x_request_id":"r\"1","request_received_ms":1250,"#,
            r#""ttft_ms":125,"avg_itl_ms":0.166,"total_time_ms":127,"cached_tokens":512,"#,
            r#""worker":{"prefill_worker_id":7,"prefill_dp_rank":2}}}}"#,
            "\n"
        );
        assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    }

    #[test]
    fn only_dynamo_named_workers_have_numbers() {
        assert_eq!(dynamo_worker_numbers("dynamo|0|dp0"), Some((0, 0)));
        assert_eq!(
            dynamo_worker_numbers("dynamo|18446744073709551615|dp4294967295"),
            Some((u64::MAX, u32::MAX))
        );
        for id in [
            "w0",
            "dynamo|01|dp0",
            "dynamo|1|dp00",
            "dynamo||dp0",
            "dynamo|1|dp",
            "dynamo|+1|dp0",
            "dynamo|18446744073709551616|dp0",
            "dynamo|1|dp4294967296",
            "dynamo|1|dp0|x",
        ] {
            assert_eq!(dynamo_worker_numbers(id), None, "{id}");
        }
    }
}
