//! Resource quantities with Kubernetes' grammar and canonical form.
//!
//! ```text
//! <quantity>       ::= <signedNumber><suffix>
//! <signedNumber>   ::= [+-] <digits> | [+-] <digits>.<digits> | [+-] .<digits> | [+-] <digits>.
//! <suffix>         ::= <binarySI> | <decimalSI> | <decimalExponent>
//! <binarySI>       ::= Ki | Mi | Gi | Ti | Pi | Ei                       (powers of 1024)
//! <decimalSI>      ::= n | u | m | "" | k | M | G | T | P | E             (powers of 1000)
//! <decimalExponent>::= e <signedInt> | E <signedInt>
//! ```
//!
//! The value is kept exactly, as a count of nano-units (10^-9) in an `i128`; like Kubernetes,
//! anything finer than a nano-unit is rounded up (away from zero). Magnitudes above 2^63-1 base
//! units are rejected rather than silently capped: a control plane should not guess.
//!
//! The canonical form (what [`Quantity`]'s `Display` and serialisation print) follows
//! Kubernetes: the suffix family of the input is kept; a binary quantity that is not a whole
//! number or is below 1024 prints in decimal SI; otherwise the largest suffix that keeps the
//! mantissa a whole number is chosen (`1024Mi` → `1Gi`, `0.5` → `500m`, `1000` → `1k`).
//!
//! One deliberate difference: Kubernetes prints a binary quantity that no binary suffix divides
//! as a bare number (2000 bytes → `2000`), which then reads back as decimal and prints `2k`.
//! Skiff prints `2k` at once, so printing what it read back never changes the text: stored
//! objects re-encode byte for byte.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

const NANO: i128 = 1_000_000_000;
/// Largest magnitude accepted, in base units (Kubernetes' bound: 2^63-1).
const MAX_BASE: i128 = i64::MAX as i128;

/// Which suffix family a quantity was written in; decides how it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// Ki, Mi, Gi, ... (powers of 2^10).
    BinarySi,
    /// n, u, m, "", k, M, G, ... (powers of 10^3).
    #[default]
    DecimalSi,
    /// e3, E-6, ... (any power of 10).
    DecimalExponent,
}

/// An exact resource amount such as `250m` CPU or `1Gi` of memory.
///
/// Equality and ordering compare values, not spelling: `1Gi == 1024Mi`, `0.5 == 500m`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("invalid quantity {input:?}: {reason}")]
    Invalid { input: String, reason: &'static str },
    #[error("quantity {input:?} is too large (the limit is 2^63-1)")]
    TooLarge { input: String },
}

impl Quantity {
    /// Zero, printed as `0`.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSi,
    };

    /// A whole number of base units (`Quantity::from_units(3)` is `3`).
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: i128::from(units) * NANO,
            format: Format::DecimalSi,
        }
    }

    /// Thousandths of a unit (`Quantity::from_milli(250)` is `250m`).
    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            nanos: i128::from(milli) * 1_000_000,
            format: Format::DecimalSi,
        }
    }

    /// A byte count printed with binary suffixes where they are exact.
    pub fn from_bytes(bytes: i64) -> Self {
        Quantity {
            nanos: i128::from(bytes) * NANO,
            format: Format::BinarySi,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (away from zero), as Kubernetes' `MilliValue`.
    /// This is how CPU is counted.
    pub fn milli_value(&self) -> i64 {
        clamp_i64(div_away_from_zero(self.nanos, 1_000_000))
    }

    /// The value in whole units, rounded up (away from zero), as Kubernetes' `Value`.
    /// This is how memory, storage and counts are counted.
    pub fn value(&self) -> i64 {
        clamp_i64(div_away_from_zero(self.nanos, NANO))
    }

    /// The exact value in nano-units.
    pub fn nano_value(&self) -> i128 {
        self.nanos
    }

    /// Sum of two quantities; keeps the left-hand format, or the right-hand one when the left is
    /// zero (as Kubernetes' `Add`), so summing memory from zero still prints `Mi`/`Gi`.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        let format = if self.nanos == 0 {
            other.format
        } else {
            self.format
        };
        (nanos.abs() <= MAX_BASE * NANO).then_some(Quantity { nanos, format })
    }

    /// Difference of two quantities; keeps the left-hand format.
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        self.checked_add(&Quantity {
            nanos: -other.nanos,
            format: other.format,
        })
    }

    /// Parses the Kubernetes quantity grammar (see the module docs).
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let invalid = |reason| QuantityError::Invalid {
            input: input.to_owned(),
            reason,
        };
        if input.is_empty() {
            return Err(invalid("empty string"));
        }
        let bytes = input.as_bytes();
        let mut pos = 0;
        let negative = match bytes[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };

        // Digits, at most one decimal point.
        let mut mantissa: i128 = 0;
        let mut frac_digits: u32 = 0;
        let mut digits = 0usize;
        let mut seen_point = false;
        // Digits past what an i128 can hold only matter if non-zero past nano precision;
        // 40 significant digits already exceeds any accepted value, so refuse them.
        while pos < bytes.len() {
            let c = bytes[pos];
            if c.is_ascii_digit() {
                digits += 1;
                if mantissa == 0 && c == b'0' && !seen_point {
                    // leading zeros carry no value
                } else {
                    // Past what an i128 holds (39 digits; found by the fuzz targets).
                    mantissa = mantissa
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(i128::from(c - b'0')))
                        .filter(|_| digits <= 40)
                        .ok_or_else(|| QuantityError::TooLarge {
                            input: input.to_owned(),
                        })?;
                    if seen_point {
                        frac_digits += 1;
                    }
                }
            } else if c == b'.' && !seen_point {
                seen_point = true;
            } else {
                break;
            }
            pos += 1;
        }
        if digits == 0 {
            return Err(invalid("expected a number"));
        }

        let suffix = &input[pos..];
        let (format, scale) = parse_suffix(suffix).ok_or_else(|| {
            invalid("unknown suffix (use n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)")
        })?;

        // value = mantissa * 10^-frac_digits * scale, in nano-units.
        let too_large = || QuantityError::TooLarge {
            input: input.to_owned(),
        };
        let mut num = mantissa; // numerator, denominator as powers of ten
        let mut den_pow10: i64 = i64::from(frac_digits);
        match scale {
            Scale::Binary(pow) => {
                for _ in 0..pow {
                    num = num.checked_mul(1024).ok_or_else(too_large)?;
                }
            }
            Scale::Decimal(exp) => den_pow10 -= exp,
        }
        // Convert to nano-units: multiply by 10^9.
        den_pow10 -= 9;
        let nanos = if den_pow10 <= 0 {
            let mut n = num;
            for _ in 0..(-den_pow10) {
                if n == 0 {
                    break;
                }
                n = n.checked_mul(10).ok_or_else(too_large)?;
            }
            n
        } else if den_pow10 > 40 {
            // Far below one nano-unit: rounds up to one unless zero.
            i128::from(num != 0)
        } else {
            let den = 10i128.pow(den_pow10 as u32);
            num / den + i128::from(num % den != 0)
        };
        if nanos > MAX_BASE * NANO {
            return Err(too_large());
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// Mantissa and suffix of the canonical form.
    fn canonical_parts(&self) -> (i128, Suffix) {
        if self.nanos == 0 {
            return (0, Suffix::Decimal(0));
        }
        let mut format = self.format;
        if format == Format::BinarySi && (self.nanos % NANO != 0 || self.nanos.abs() < 1024 * NANO)
        {
            format = Format::DecimalSi;
        }
        if format == Format::BinarySi && (self.nanos / NANO) % 1024 != 0 {
            // No binary suffix divides it: print it in decimal SI, which is what reading the
            // bare number back would give, so the canonical form is a fixed point.
            format = Format::DecimalSi;
        }
        match format {
            Format::BinarySi => {
                let mut m = self.nanos / NANO;
                let mut pow = 0u8;
                while pow < 6 && m % 1024 == 0 {
                    m /= 1024;
                    pow += 1;
                }
                (m, Suffix::Binary(pow))
            }
            Format::DecimalSi | Format::DecimalExponent => {
                // nanos = m * 10^-9; strip factors of ten, then move the exponent down to a
                // multiple of three for SI suffixes.
                let mut m = self.nanos;
                let mut exp: i32 = -9;
                while m % 10 == 0 {
                    m /= 10;
                    exp += 1;
                }
                // Both decimal formats use exponents that are multiples of three.
                while exp.rem_euclid(3) != 0 {
                    m *= 10;
                    exp -= 1;
                }
                if format == Format::DecimalSi {
                    (m, Suffix::Decimal(exp))
                } else {
                    (m, Suffix::Exponent(exp))
                }
            }
        }
    }
}

enum Scale {
    Binary(u8),
    Decimal(i64),
}

enum Suffix {
    Binary(u8),
    Decimal(i32),
    Exponent(i32),
}

fn parse_suffix(s: &str) -> Option<(Format, Scale)> {
    let decimal = |e| Some((Format::DecimalSi, Scale::Decimal(e)));
    match s {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((Format::BinarySi, Scale::Binary(1))),
        "Mi" => Some((Format::BinarySi, Scale::Binary(2))),
        "Gi" => Some((Format::BinarySi, Scale::Binary(3))),
        "Ti" => Some((Format::BinarySi, Scale::Binary(4))),
        "Pi" => Some((Format::BinarySi, Scale::Binary(5))),
        "Ei" => Some((Format::BinarySi, Scale::Binary(6))),
        _ => {
            let rest = s.strip_prefix('e').or_else(|| s.strip_prefix('E'))?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4
            {
                return None;
            }
            let exp: i64 = rest.parse().ok()?;
            Some((Format::DecimalExponent, Scale::Decimal(exp)))
        }
    }
}

fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, suffix) = self.canonical_parts();
        match suffix {
            Suffix::Binary(pow) => {
                let s = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][usize::from(pow)];
                write!(f, "{m}{s}")
            }
            Suffix::Decimal(exp) => {
                let s = match exp {
                    -9 => "n",
                    -6 => "u",
                    -3 => "m",
                    0 => "",
                    3 => "k",
                    6 => "M",
                    9 => "G",
                    12 => "T",
                    15 => "P",
                    18 => "E",
                    _ => unreachable!("invariant: decimal exponent is a multiple of 3 in -9..=18"),
                };
                write!(f, "{m}{s}")
            }
            Suffix::Exponent(0) => write!(f, "{m}"),
            Suffix::Exponent(exp) => write!(f, "{m}e{exp}"),
        }
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    /// Accepts strings and, like Kubernetes, bare numbers (`cpu: 1`, `cpu: 0.5` in YAML).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as \"100m\", \"1.5\" or \"2Gi\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Quantity::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!(
                        "invalid quantity {v}: not a finite number"
                    )));
                }
                // The shortest decimal that reads back as `v`, e.g. 0.1 -> "0.1".
                let text = format!("{v}");
                Quantity::parse(&text).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .to_string()
    }

    #[test]
    fn parses_and_canonicalises_like_kubernetes() {
        let cases = [
            ("100m", "100m"),
            ("0.5", "500m"),
            (".5", "500m"),
            ("1.", "1"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("1.5", "1500m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("1.5e3", "1500"),
            ("1e-3", "1e-3"),
            ("1e4", "10e3"),
            ("1e-4", "100e-6"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("1023Ki", "1023Ki"),
            ("500Mi", "500Mi"),
            ("2048", "2048"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-0", "0"),
            ("+1", "1"),
            ("-100m", "-100m"),
            ("-1Gi", "-1Gi"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("0.1m", "100u"),
            ("1u", "1u"),
            ("1M", "1M"),
            ("1E", "1E"),
            ("5Ei", "5Ei"),
            ("123456789", "123456789"),
            ("0.000000000001", "1n"),
            ("1.5Ki", "1536"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input), want, "canonical form of {input}");
        }
    }

    #[test]
    fn values_round_up_like_kubernetes() {
        let q = Quantity::parse("0.1m").unwrap();
        assert_eq!(q.milli_value(), 1);
        assert_eq!(Quantity::parse("1.5").unwrap().value(), 2);
        assert_eq!(Quantity::parse("-1.5").unwrap().value(), -2);
        assert_eq!(Quantity::parse("250m").unwrap().milli_value(), 250);
        assert_eq!(Quantity::parse("1Gi").unwrap().value(), 1 << 30);
        assert_eq!(Quantity::parse("500Mi").unwrap().value(), 500 << 20);
    }

    #[test]
    fn binary_values_without_a_binary_suffix_print_as_decimal() {
        assert_eq!(Quantity::from_bytes(2000).to_string(), "2k");
        assert_eq!(
            Quantity::from_bytes(94_188_193_000).to_string(),
            "94188193k"
        );
        assert_eq!(Quantity::from_bytes(3 << 30).to_string(), "3Gi");
        assert_eq!(Quantity::from_bytes(1025).to_string(), "1025");
    }

    #[test]
    fn sums_keep_a_useful_format() {
        let sum = Quantity::ZERO
            .checked_add(&Quantity::parse("128Mi").unwrap())
            .unwrap();
        let sum = sum.checked_add(&Quantity::parse("128Mi").unwrap()).unwrap();
        assert_eq!(sum.to_string(), "256Mi");
        let diff = sum.checked_sub(&Quantity::parse("1Gi").unwrap()).unwrap();
        assert_eq!(diff.to_string(), "-768Mi");
        assert_eq!(
            Quantity::from_units(i64::MAX).checked_add(&Quantity::from_units(1)),
            None
        );
    }

    #[test]
    fn equality_is_by_value() {
        assert_eq!(
            Quantity::parse("1Gi").unwrap(),
            Quantity::parse("1024Mi").unwrap()
        );
        assert_eq!(
            Quantity::parse("0.5").unwrap(),
            Quantity::parse("500m").unwrap()
        );
        assert!(Quantity::parse("1").unwrap() < Quantity::parse("1001m").unwrap());
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        for bad in [
            "", "abc", "1.2.3", "--1", "1 Gi", "1Ki ", "1KiB", "1K", "m", ".", "1e", "1e+", "0x10",
            "1gi", "1e99999",
        ] {
            let err = Quantity::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(matches!(
            Quantity::parse("10Ei"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            Quantity::parse("1e19"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(Quantity::parse("9223372036854775807").is_ok());
        assert!(Quantity::parse("9223372036854775808").is_err());
        // More digits than an i128 holds: refused, not overflowed (a fuzz finding).
        assert!(matches!(
            Quantity::parse(&"9".repeat(39)),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            Quantity::parse(&format!("0.{}", "9".repeat(39))),
            Err(QuantityError::TooLarge { .. })
        ));
    }

    #[test]
    fn deserialises_numbers_and_strings() {
        #[derive(serde::Deserialize)]
        struct R {
            a: Quantity,
            b: Quantity,
            c: Quantity,
        }
        let r: R = serde_yaml_ng::from_str("a: 1\nb: 0.5\nc: 2Gi\n").unwrap();
        assert_eq!(
            (r.a.to_string(), r.b.to_string(), r.c.to_string()),
            ("1".into(), "500m".into(), "2Gi".into())
        );
    }

    fn any_quantity() -> impl Strategy<Value = Quantity> {
        let nanos = prop_oneof![
            (-1_000_000i64..1_000_000).prop_map(i128::from),
            (0i64..1 << 40).prop_map(|v| i128::from(v) * NANO),
            any::<i64>().prop_map(|v| i128::from(v / 1000) * 1000),
        ];
        let format = prop_oneof![
            Just(Format::BinarySi),
            Just(Format::DecimalSi),
            Just(Format::DecimalExponent)
        ];
        (nanos, format).prop_map(|(nanos, format)| Quantity { nanos, format })
    }

    proptest! {
        #[test]
        fn canonical_form_reads_back_to_the_same_value(q in any_quantity()) {
            let text = q.to_string();
            let back = Quantity::parse(&text).unwrap();
            prop_assert_eq!(back, q);
            // and printing is idempotent
            prop_assert_eq!(back.to_string(), text);
        }

        #[test]
        fn suffixes_scale_exactly(m in 0i64..1_000_000, pow in 0u32..4) {
            let bin = Quantity::parse(&format!("{m}{}", ["", "Ki", "Mi", "Gi"][pow as usize])).unwrap();
            prop_assert_eq!(bin.value(), m * 1024i64.pow(pow));
            let dec = Quantity::parse(&format!("{m}{}", ["", "k", "M", "G"][pow as usize])).unwrap();
            prop_assert_eq!(dec.value(), m * 1000i64.pow(pow));
        }
    }
}
