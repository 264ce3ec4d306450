//! SPEC §14.2 "Goodput": the text of `--slo`, read into objectives in whole
//! microseconds. The text is items separated by `,`, each `ttft_ms=X`, `tpot_ms=Y`,
//! `ttft:X` or `tpot:Y` (the second pair is `vllm bench serve --goodput`'s spelling; the
//! two mix), each objective at most once whatever its spelling. A value is ASCII digits,
//! optionally `.` and one to three more: milliseconds, exact to the microsecond, so the
//! microseconds are computed from the digits as written, never through a float, and a
//! fourth decimal is refused rather than rounded. Anything else is bad usage, an error
//! line naming `--slo`.
//!
//! Reading of §14.2 where it leaves a choice (a guess, to be settled by SPEC): each name
//! goes with its own separator, `ttft_ms=` and `ttft:`; `ttft=300` and `ttft_ms:300` are
//! neither spelling, so they are refused as text that is not an objective.

use super::B;

/// The objectives `--slo` declares, in microseconds; `None` for one not declared.
/// `--slo` always declares at least one; both `None` is goodput over no objective (every
/// completed record good), which only a caller building this by hand can ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slo {
    pub ttft_us: Option<u64>,
    pub tpot_us: Option<u64>,
}

/// Which latency an item of `--slo` holds to an objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Objective {
    Ttft,
    Tpot,
}

impl Objective {
    fn name(self) -> &'static str {
        match self {
            Objective::Ttft => "ttft",
            Objective::Tpot => "tpot",
        }
    }
}

/// The four spellings of an item's start, each with the objective it names.
const SPELLINGS: [(&str, Objective); 4] = [
    ("ttft_ms=", Objective::Ttft),
    ("tpot_ms=", Objective::Tpot),
    ("ttft:", Objective::Ttft),
    ("tpot:", Objective::Tpot),
];

/// SPEC §14.2: the objectives of `--slo TEXT`, or the usage error line (naming `--slo`)
/// for text the option does not take.
pub fn parse_slo(text: &str) -> Result<Slo, String> {
    let mut slo = Slo::default();
    for item in text.split(',') {
        let (objective, value) = objective_and_value(item)?;
        let microseconds = microseconds(value).map_err(|problem| {
            format!("--slo: {}: {problem}, found {value:?}", objective.name())
        })?;
        let declared = match objective {
            Objective::Ttft => &mut slo.ttft_us,
            Objective::Tpot => &mut slo.tpot_us,
        };
        if declared.is_some() {
            return Err(format!(
                "--slo: the {0} objective is given twice ({0}_ms and {0} are one name)",
                objective.name()
            ));
        }
        *declared = Some(microseconds);
    }
    Ok(slo)
}

/// One item's objective and the value text after its `=` or `:`.
fn objective_and_value(item: &str) -> Result<(Objective, &str), String> {
    for (start, objective) in SPELLINGS {
        if let Some(value) = item.strip_prefix(start) {
            return Ok((objective, value));
        }
    }
    Err(format!(
        "--slo: expected ttft_ms=X, tpot_ms=Y, ttft:X or tpot:Y (milliseconds) separated \
         by \",\", found {item:?}"
    ))
}

/// A value of milliseconds (digits, then optionally `.` and one to three digits) in
/// whole microseconds, at most `B`; else why not.
fn microseconds(value: &str) -> Result<u64, &'static str> {
    let (whole, decimals) = match value.split_once('.') {
        Some((whole, decimals)) => (whole, Some(decimals)),
        None => (value, None),
    };
    let digits_only = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let well_formed = digits_only(whole)
        && decimals.is_none_or(|decimals| digits_only(decimals) && decimals.len() <= 3);
    if !well_formed {
        return Err("expected milliseconds as digits with at most three decimals");
    }
    let above_b = "expected at most 9007199254740.991 milliseconds (2^53 - 1 microseconds)";
    let mut microseconds: u128 = 0;
    for digit in whole.bytes() {
        microseconds = microseconds * 10 + u128::from(digit - b'0');
        // Checked digit by digit so that no length of digits overflows.
        if microseconds * 1000 > u128::from(B) {
            return Err(above_b);
        }
    }
    microseconds *= 1000;
    let mut place: u128 = 100;
    for digit in decimals.unwrap_or("").bytes() {
        microseconds += u128::from(digit - b'0') * place;
        place /= 10;
    }
    if microseconds > u128::from(B) {
        return Err(above_b);
    }
    Ok(microseconds as u64)
}
