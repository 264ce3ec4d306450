//! `join`'s two rules at their edges (SPEC.md §14.2), on the lab trace's
//! `cache_plus_load` run with AIPerf records written here: a latency exactly at its
//! objective is good (`ttft_us` and `tpot_us` at most the objective's microseconds) and
//! one microsecond over is not, whether the objective is whole milliseconds or has
//! decimals, and a pair of records tied in TTFT counts in neither `C` nor `D` of the
//! rank correlation, as a pair tied in prediction does.

use kvroute_core::join::Slo;
use kvroute_core::join::{join, JoinOptions};
use kvroute_core::{replay_bytes, Policy, LAB_TRACE_JSON};

const SLO: Slo = Slo {
    ttft_us: Some(200_000),
    tpot_us: Some(20_000),
};

fn lab_receipt() -> Vec<u8> {
    replay_bytes(LAB_TRACE_JSON.as_bytes()).expect("the lab trace is valid")
}

/// One completed AIPerf record of `id`, started `offset_ms` after a fixed time.
fn record(id: &str, offset_ms: u64, ttft_ms: &str, itl_ms: &str) -> String {
    let start_ns = 1_759_813_207_000_000_000u64 + offset_ms * 1_000_000;
    format!(
        "{{\"metadata\": {{\"x_request_id\": \"{id}\", \"request_start_ns\": {start_ns}, \
         \"request_end_ns\": {}, \"was_cancelled\": false}}, \"metrics\": \
         {{\"time_to_first_token\": {{\"value\": {ttft_ms}, \"unit\": \"ms\"}}, \
         \"inter_token_latency\": {{\"value\": {itl_ms}, \"unit\": \"ms\"}}}}, \
         \"error\": null}}\n",
        start_ns + 500_000_000
    )
}

/// Predictions (fixtures/join/README.md): acme-01 552,000, acme-02 1,232,000, acme-06
/// and acme-08 2,600,000 each.
///
/// - TTFT: acme-01 and acme-02 tie at 100 ms; acme-06 200 ms, acme-08 50 ms.
///   Pairs: (01, 02) tied in TTFT, (06, 08) tied in prediction: neither. (01, 06) and
///   (02, 06) concordant, (01, 08) and (02, 08) discordant: C = 2, D = 2, gamma 0.
///   Counting the TTFT tie either way would give ±200.
/// - Against 200 ms and 20 ms: acme-06 is exactly at both objectives (good), acme-02
///   one microsecond over the TPOT one (not good), acme-01 and acme-08 well within:
///   good 3.
fn completions() -> String {
    [
        record("acme-01", 0, "100", "10"),
        record("acme-02", 10, "100", "20.001"),
        record("acme-06", 20, "200", "20"),
        record("acme-08", 30, "50", "5"),
    ]
    .concat()
}

fn options(slo: Slo) -> JoinOptions {
    JoinOptions {
        run: Some(Policy::CachePlusLoad),
        slo: Some(slo),
        ..JoinOptions::default()
    }
}

#[test]
fn a_latency_equal_to_its_objective_is_good_and_one_microsecond_over_is_not() {
    let joined = join(&lab_receipt()[..], completions().as_bytes(), &options(SLO)).unwrap();
    assert_eq!(joined.figures.counts.completed, 4);
    let goodput = joined.figures.goodput.expect("objectives were declared");
    assert_eq!(goodput.good, 3);
    // Each objective alone: at 200 ms every TTFT is within; at 20 ms only acme-02's
    // TPOT is over.
    for (slo, good) in [
        (
            Slo {
                ttft_us: Some(200_000),
                tpot_us: None,
            },
            4,
        ),
        (
            Slo {
                ttft_us: None,
                tpot_us: Some(20_000),
            },
            3,
        ),
        // One millisecond tighter: acme-06 is over both, acme-02 still over TPOT.
        (
            Slo {
                ttft_us: Some(199_000),
                tpot_us: Some(19_000),
            },
            2,
        ),
    ] {
        let joined = join(&lab_receipt()[..], completions().as_bytes(), &options(slo)).unwrap();
        assert_eq!(joined.figures.goodput.unwrap().good, good, "{slo:?}");
    }
}

/// An objective between whole milliseconds is held to the microsecond: under 300.5 ms a
/// TTFT of exactly 300.5 ms is good and one of 300.501 ms is not. Objectives of whole
/// milliseconds (300 or 301) would call both bad or both good.
#[test]
fn an_objective_with_decimals_is_held_to_the_microsecond() {
    let records = [
        record("acme-01", 0, "300.5", "10"),
        record("acme-02", 10, "300.501", "10"),
    ]
    .concat();
    for (ttft_us, good) in [(300_499, 0), (300_500, 1), (300_501, 2)] {
        let slo = Slo {
            ttft_us: Some(ttft_us),
            tpot_us: None,
        };
        let joined = join(&lab_receipt()[..], records.as_bytes(), &options(slo)).unwrap();
        assert_eq!(joined.figures.counts.completed, 2);
        assert_eq!(joined.figures.goodput.unwrap().good, good, "{slo:?}");
    }
}

#[test]
fn pairs_tied_in_ttft_or_in_prediction_count_in_neither_direction() {
    let joined = join(&lab_receipt()[..], completions().as_bytes(), &options(SLO)).unwrap();
    assert_eq!(joined.figures.ttft_rank_gamma_pm, Some(0));
    // Only ties: no pair counts, so there is no figure.
    let all_tied = [
        record("acme-01", 0, "100", "10"),
        record("acme-02", 10, "100", "10"),
        record("acme-06", 20, "70", "10"),
        record("acme-08", 30, "70", "10"),
    ]
    .concat();
    let joined = join(&lab_receipt()[..], all_tied.as_bytes(), &options(SLO)).unwrap();
    // (01, 02) tie in TTFT, (06, 08) in prediction and TTFT; the other four pairs are
    // discordant (a larger prediction, a smaller TTFT): D = 4, gamma −1000.
    assert_eq!(joined.figures.ttft_rank_gamma_pm, Some(-1000));
    let only_ties = [
        record("acme-01", 0, "100", "10"),
        record("acme-02", 10, "100", "10"),
    ]
    .concat();
    let joined = join(&lab_receipt()[..], only_ties.as_bytes(), &options(SLO)).unwrap();
    assert_eq!(joined.figures.ttft_rank_gamma_pm, None);
}
