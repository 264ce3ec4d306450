//! `join` (SPEC.md §14) computed twice, core's and the oracle's, in the oracle's terms:
//! one place that maps core's errors onto the oracle's, for the join tests and for the
//! closed-loop sweep, which joins each policy's modelled completion records with its
//! own receipt.

use kvroute_core::join::ReceiptError;
use kvroute_core::join::Slo;
use kvroute_core::join::{self, join, CompletionsFormat, JoinError, JoinOptions, TraceCohorts};
use kvroute_core::{parse_trace, Policy};
use kvroute_oracle::JoinFailure;

/// One join to make: everything `kvroute join` takes but the output format and the key.
pub struct JoinCase<'a> {
    pub receipt: &'a [u8],
    pub completions: &'a [u8],
    pub format: Option<CompletionsFormat>,
    pub run: Policy,
    pub slo: Option<Slo>,
    /// `--trace`: a valid trace (the harness never hands an invalid one).
    pub trace: Option<&'a [u8]>,
}

/// A proptest strategy over one `--slo` objective in microseconds: whole milliseconds,
/// which records written to the millisecond meet exactly, or any microsecond up to
/// 1.5 s, as `--slo` takes up to three decimals.
pub fn objective_us() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::strategy::Strategy;
    proptest::prop_oneof![(0u64..1_500).prop_map(|ms| ms * 1000), 0u64..1_500_000]
}

/// What `kvroute join` would be given for the case.
fn core_options(case: &JoinCase) -> JoinOptions {
    JoinOptions {
        run: Some(case.run),
        slo: case.slo,
        format: case.format,
        trace: case.trace.map(|t| {
            Ok(TraceCohorts::of(
                &parse_trace(t).expect("a valid trace"),
                None,
            ))
        }),
        ..JoinOptions::default()
    }
}

/// Core's join, its document's bytes or its error in the oracle's terms.
pub fn core_join(case: &JoinCase) -> Result<Vec<u8>, JoinFailure> {
    let options = core_options(case);
    match join(case.receipt, case.completions, &options) {
        Ok(joined) => Ok(join::json_bytes(&joined)),
        Err(JoinError::Undetected { line }) => Err(JoinFailure::Undetectable(line)),
        Err(JoinError::Completions(errors)) => Err(JoinFailure::Lines(
            errors.into_iter().map(|e| (e.line, e.reason)).collect(),
        )),
        Err(JoinError::Document { mut reasons, more }) => {
            // The oracle keeps the count line as the last entry, as the CLI prints it.
            if more > 0 {
                reasons.push(format!("... and {more} more errors"));
            }
            Err(JoinFailure::Document(reasons))
        }
        Err(JoinError::Receipt(ReceiptError::NotAReceipt(_))) => Err(JoinFailure::NotAReceipt),
        Err(JoinError::Receipt(ReceiptError::NoSuchRun(runs))) => Err(JoinFailure::NoSuchRun(runs)),
        Err(JoinError::NoRecords) => Err(JoinFailure::NoRecords),
        Err(JoinError::TraceDigest { trace, receipt }) => {
            Err(JoinFailure::TraceDigest { trace, receipt })
        }
        Err(JoinError::UnknownRequest(id)) => Err(JoinFailure::NotInTrace(id)),
        Err(JoinError::NothingMatched {
            completion_id,
            request_id,
        }) => Err(JoinFailure::NothingMatched {
            completion_id,
            request_id,
        }),
        Err(JoinError::Trace(lines)) => panic!("the harness gives valid traces: {lines:?}"),
    }
}

/// The oracle's join of the same case.
pub fn oracle_join(case: &JoinCase) -> Result<Vec<u8>, JoinFailure> {
    kvroute_oracle::join_inputs(&kvroute_oracle::JoinInputs {
        receipt: case.receipt,
        completions: case.completions,
        format: case.format.map(CompletionsFormat::name),
        run: case.run.name(),
        slo: case.slo.map(|slo| kvroute_oracle::Slo {
            ttft_us: slo.ttft_us,
            tpot_us: slo.tpot_us,
        }),
        id_key: None,
        trace: case.trace,
    })
}

/// Both joins, `Ok` with core's result when they are the same, else both shown.
pub fn compare_join(case: &JoinCase) -> Result<Result<Vec<u8>, JoinFailure>, String> {
    let core = core_join(case);
    let oracle = oracle_join(case);
    if core == oracle {
        return Ok(core);
    }
    let show = |r: &Result<Vec<u8>, JoinFailure>| match r {
        Ok(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Err(e) => format!("{e:?}"),
    };
    Err(format!(
        "core and oracle joins differ\n  core:   {}\n  oracle: {}",
        show(&core),
        show(&oracle)
    ))
}

/// The stderr lines of `join`'s gates (SPEC.md §14.7), core's against the oracle's on
/// the same case: `Ok` with core's lines when they are the same, else both shown. A
/// case whose join fails has no lines on either side.
pub fn compare_gate_lines(
    case: &JoinCase,
    max_drift_pm: Option<u64>,
    max_elsewhere_pm: Option<u64>,
) -> Result<Vec<String>, String> {
    use kvroute_core::join::{gate_lines, Gates};
    let options = core_options(case);
    let core = join(case.receipt, case.completions, &options).map_or_else(
        |_| Vec::new(),
        |joined| {
            let gates = Gates {
                max_drift_pm,
                max_elsewhere_pm,
            };
            gate_lines(&joined, gates)
        },
    );
    let oracle = oracle_join(case).map_or_else(
        |_| Vec::new(),
        |document| kvroute_oracle::gate_lines(&document, max_drift_pm, max_elsewhere_pm),
    );
    if core == oracle {
        Ok(core)
    } else {
        Err(format!(
            "core and oracle gate lines differ\n  core:   {core:?}\n  oracle: {oracle:?}"
        ))
    }
}
