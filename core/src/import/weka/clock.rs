//! Time in a Weka import (SPEC.md §19.2): a request's `t` in seconds turned into whole
//! milliseconds with integer rounding, `--session-rate` read exactly, and the seeded
//! SplitMix64 gaps that lay many sessions on one clock. Everything here is integer
//! arithmetic on decimal digits, so the same files, rate and seed give the same ticks
//! on every machine.

use crate::input::limits::JSON_INTEGER_MAX;

/// The slowest and fastest `--session-rate`, in sessions per 1000 s.
pub const SESSION_RATE_MILLI_MIN: u64 = 1;
pub const SESSION_RATE_MILLI_MAX: u64 = 1_000_000;

/// `--session-rate R` (sessions per second, at most three fraction digits, 0.001 to
/// 1000) as `1000·R`, or why it is not one.
pub fn parse_session_rate(text: &str) -> Result<u64, String> {
    let expected = || {
        format!("expected sessions per second from 0.001 to 1000 with at most three decimals, found {text:?}")
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (text.contains('.') && !digits(fraction)) || fraction.len() > 3 {
        return Err(expected());
    }
    if whole.len() > 7 {
        return Err(expected());
    }
    let whole: u64 = whole.parse().map_err(|_| expected())?;
    let fraction_milli: u64 = format!("{fraction:0<3}").parse().map_err(|_| expected())?;
    let rate_milli = whole * 1000 + fraction_milli;
    if (SESSION_RATE_MILLI_MIN..=SESSION_RATE_MILLI_MAX).contains(&rate_milli) {
        Ok(rate_milli)
    } else {
        Err(expected())
    }
}

/// `1000·R` written back as `R` (`100` → `0.1`), for the report.
pub fn session_rate_text(rate_milli: u64) -> String {
    let (whole, fraction) = (rate_milli / 1000, rate_milli % 1000);
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:03}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// The mean gap between two session starts, `floor(1,000,000 / r)` ms.
pub fn mean_gap_ms(rate_milli: u64) -> u64 {
    1_000_000 / rate_milli.max(1)
}

/// SplitMix64 (Steele, Lea and Flood's generator), the one source of the gaps.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The start tick of each of `sessions` sessions: 0 for the first, then each gap
/// `x mod (2·m + 1)` after the one before (saturating at `u64::MAX`, which every check
/// of a tick refuses).
pub fn session_starts(sessions: usize, rate_milli: u64, seed: u64) -> Vec<u64> {
    let span = 2 * mean_gap_ms(rate_milli) + 1;
    let mut generator = SplitMix64 { state: seed };
    let mut start = 0u64;
    (0..sessions)
        .map(|index| {
            if index > 0 {
                start = start.saturating_add(generator.next() % span);
            }
            start
        })
        .collect()
}

/// A non-negative number of seconds as whole milliseconds (SPEC.md §19.2): the double's
/// shortest decimal, times 1000, rounded half up on the fourth fraction digit; `None`
/// when the result would pass 2^53 - 1.
pub fn seconds_to_ms(seconds: f64) -> Option<u64> {
    // `+ 0.0` turns -0.0 into 0.0; Display never writes an exponent for a double.
    let text = format!("{}", seconds + 0.0);
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    if whole.len() > 16 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let digit = |i: usize| u64::from(fraction.as_bytes().get(i).map_or(0, |b| b - b'0'));
    let milli = digit(0) * 100 + digit(1) * 10 + digit(2);
    let round_up = u64::from(digit(3) >= 5);
    let ms = whole.checked_mul(1000)?.checked_add(milli + round_up)?;
    (ms <= JSON_INTEGER_MAX).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_milliseconds_rounded_half_up_on_the_decimal_digits() {
        for (seconds, ms) in [
            (0.0, 0),
            (-0.0, 0),
            (134.227, 134_227),
            (9.0, 9_000),
            (0.0005, 1),
            (0.0004, 0),
            (2.9994, 2_999),
            (2.9995, 3_000),
            (440_243.409, 440_243_409),
            (5e-324, 0),
        ] {
            assert_eq!(seconds_to_ms(seconds), Some(ms), "{seconds}");
        }
        assert_eq!(
            seconds_to_ms(9_007_199_254_740.0),
            Some(9_007_199_254_740_000)
        );
        assert_eq!(seconds_to_ms(9_007_199_254_741.0), None);
        assert_eq!(seconds_to_ms(1e300), None);
    }

    #[test]
    fn the_session_rate_is_read_exactly_in_thousandths() {
        for (text, milli) in [
            ("0.1", 100),
            ("1", 1000),
            ("0.001", 1),
            ("1000", 1_000_000),
            ("2.50", 2500),
        ] {
            assert_eq!(parse_session_rate(text), Ok(milli), "{text}");
        }
        for text in [
            "0", "0.0004", "1000.001", "-1", "1e3", ".5", "5.", "", " 1", "0.0001", "99999999",
        ] {
            assert!(parse_session_rate(text).is_err(), "{text}");
        }
        assert_eq!(session_rate_text(100), "0.1");
        assert_eq!(session_rate_text(2500), "2.5");
        assert_eq!(session_rate_text(3000), "3");
    }

    #[test]
    fn starts_are_seeded_gaps_around_the_mean() {
        let starts = session_starts(1000, 100, 0);
        assert_eq!(starts[0], 0);
        assert!(starts.windows(2).all(|w| w[1] - w[0] <= 20_000));
        // 999 gaps of mean 10,000 ms: within 10% of 9,990,000.
        assert!(
            (8_991_000..=10_989_000).contains(&starts[999]),
            "{}",
            starts[999]
        );
        assert_eq!(starts, session_starts(1000, 100, 0));
        assert_ne!(starts, session_starts(1000, 100, 1));
        // SplitMix64's first output for seed 0 is the published 0xE220A8397B1DCDAF.
        let mut generator = SplitMix64 { state: 0 };
        assert_eq!(generator.next(), 0xE220_A839_7B1D_CDAF);
    }
}
