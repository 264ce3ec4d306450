//! A tiny unsigned big integer, used only by the overflow rule (SPEC.md §1.4).
//!
//! SPEC asks for the cost bound "computed without overflow (128-bit)", but with
//! `imbalance_penalty_milli` and `decode_weight_milli` both near 2^53 the product
//! `ip·W` reaches about 2^161, past u128. So that the quoted `cost bound <bound>` is
//! always the exact number, the oracle does this one computation on base-2^32 limbs.
//! It only needs add, multiply by a u64, divide by a small number, compare and print.

use std::cmp::Ordering;

/// Little-endian base-2^32 limbs, without trailing zero limbs (zero is `[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wide {
    limbs: Vec<u32>,
}

impl Wide {
    pub fn from_u128(mut value: u128) -> Wide {
        let mut limbs = Vec::new();
        while value > 0 {
            // Truncation is the point: take the low 32 bits.
            limbs.push((value & 0xFFFF_FFFF) as u32);
            value >>= 32;
        }
        Wide { limbs }
    }

    fn trimmed(mut limbs: Vec<u32>) -> Wide {
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
        Wide { limbs }
    }

    pub fn add(&self, other: &Wide) -> Wide {
        let len = self.limbs.len().max(other.limbs.len());
        let mut out = Vec::with_capacity(len + 1);
        let mut carry: u64 = 0;
        for i in 0..len {
            let a = u64::from(self.limbs.get(i).copied().unwrap_or(0));
            let b = u64::from(other.limbs.get(i).copied().unwrap_or(0));
            // At most 2·(2^32 − 1) + 1, no overflow in u64.
            let sum = a + b + carry;
            out.push((sum & 0xFFFF_FFFF) as u32);
            carry = sum >> 32;
        }
        out.push((carry & 0xFFFF_FFFF) as u32);
        Wide::trimmed(out)
    }

    pub fn mul_u64(&self, factor: u64) -> Wide {
        let mut out = Vec::with_capacity(self.limbs.len() + 3);
        let mut carry: u128 = 0;
        for limb in &self.limbs {
            // (2^32 − 1)(2^64 − 1) + carry < 2^97: fits u128.
            let product = u128::from(*limb) * u128::from(factor) + carry;
            out.push((product & 0xFFFF_FFFF) as u32);
            carry = product >> 32;
        }
        while carry > 0 {
            out.push((carry & 0xFFFF_FFFF) as u32);
            carry >>= 32;
        }
        Wide::trimmed(out)
    }

    /// Floor division by a non-zero small divisor; division by zero yields zero.
    pub fn div_u32(&self, divisor: u32) -> Wide {
        if divisor == 0 {
            return Wide { limbs: Vec::new() };
        }
        let mut out = vec![0u32; self.limbs.len()];
        let mut rem: u64 = 0;
        for i in (0..self.limbs.len()).rev() {
            let current = (rem << 32) | u64::from(self.limbs[i]);
            out[i] = (current / u64::from(divisor)) as u32;
            rem = current % u64::from(divisor);
        }
        Wide::trimmed(out)
    }

    #[cfg(test)]
    fn rem_u32(&self, divisor: u32) -> u32 {
        if divisor == 0 {
            return 0;
        }
        let mut rem: u64 = 0;
        for limb in self.limbs.iter().rev() {
            rem = ((rem << 32) | u64::from(*limb)) % u64::from(divisor);
        }
        rem as u32
    }

    pub fn cmp_u64(&self, other: u64) -> Ordering {
        if self.limbs.len() > 2 {
            return Ordering::Greater;
        }
        let low = u64::from(self.limbs.first().copied().unwrap_or(0));
        let high = u64::from(self.limbs.get(1).copied().unwrap_or(0));
        ((high << 32) | low).cmp(&other)
    }

    /// Decimal digits, by repeated division by ten (naive, the numbers are short).
    /// Only the tests print a bound; error messages quote the limit instead.
    #[cfg(test)]
    pub fn to_decimal(&self) -> String {
        if self.limbs.is_empty() {
            return "0".to_owned();
        }
        let mut digits = Vec::new();
        let mut rest = self.clone();
        while !rest.limbs.is_empty() {
            let digit = rest.rem_u32(10);
            digits.push(char::from(b'0' + (digit as u8)));
            rest = rest.div_u32(10);
        }
        digits.iter().rev().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Wide;

    #[test]
    fn arithmetic_matches_u128_where_it_fits() {
        let a = Wide::from_u128(123_456_789_012_345_678_901_234);
        assert_eq!(a.to_decimal(), "123456789012345678901234");
        assert_eq!(a.mul_u64(1000).to_decimal(), "123456789012345678901234000");
        assert_eq!(a.div_u32(1000).to_decimal(), "123456789012345678901");
        assert_eq!(
            // Expected values computed with Python big integers.
            a.add(&Wide::from_u128(u128::MAX)).to_decimal(),
            "340282366920938586920163619777447112689"
        );
        assert_eq!(Wide::from_u128(0).to_decimal(), "0");
    }

    #[test]
    fn products_past_u128_are_exact() {
        // (2^53 − 1)^3, about 2^159, computed independently with Python big integers.
        let b: u64 = 9_007_199_254_740_991;
        let cube = Wide::from_u128(u128::from(b)).mul_u64(b).mul_u64(b);
        let expected = "730750818665451215712927172538123444058715062271";
        assert_eq!(cube.to_decimal(), expected);
    }
}
