//! What the join tests share: the lab receipt, the objectives `fixtures/join/README.md`
//! declares, and its hand-computed per-worker figures of the AIPerf fixture.

use kvroute_core::join::{Slo, WorkerFigures};
use kvroute_core::{replay_bytes, LAB_TRACE_JSON};

/// The objectives of the fixture README's goodput figures.
pub const SLO: Slo = Slo {
    ttft_us: Some(200_000),
    tpot_us: Some(20_000),
};

pub fn lab_receipt() -> Vec<u8> {
    replay_bytes(LAB_TRACE_JSON.as_bytes()).expect("the lab trace is valid")
}

/// One worker's figures: completed, TTFT and TPOT means (µs), predicted mean (milli),
/// µs per predicted token.
pub fn worker(name: &str, figures: [u64; 5]) -> WorkerFigures {
    let [completed, ttft, tpot, predicted, per_token] = figures;
    WorkerFigures {
        worker: name.to_owned(),
        completed,
        ttft_mean_us: ttft,
        tpot_mean_us: tpot,
        predicted_mean_milli: predicted,
        us_per_predicted_token: Some(per_token),
    }
}

/// The four workers of the AIPerf fixture (the README's table); the Dynamo fixture
/// completes the same five records on them.
pub fn lab_workers() -> Vec<WorkerFigures> {
    vec![
        worker("w0", [2, 210_250, 11_125, 892_000, 235]),
        worker("w1", [1, 50_000, 30_000, 2_600_000, 19]),
        worker("w2", [1, 100_000, 8_500, 2_600_000, 38]),
        worker("w3", [1, 400_250, 15_999, 2_600_000, 153]),
    ]
}
