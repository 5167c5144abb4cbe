//! Kubernetes resource quantities as the API uses them (`size: 1Gi`, and also `size: 1`: a bare
//! integer is a quantity of bytes), parsed to exactly the value the apiserver and CEL's
//! `quantity()` give them, so that the Rust mirror of a CEL rule reaches the same verdict.
//! Owns parsing, comparison and byte conversion; knows nothing of fields or messages.
//!
//! The grammar and its corner cases follow `resource.ParseQuantity` in
//! k8s.io/apimachinery/pkg/api/resource (quantity.go, suffix.go):
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= <number> | <sign><number>
//! <sign>            ::= "+" | "-"
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! ```
//!
//! What the Go code does beyond the grammar, and this module with it:
//! - The number may be empty: `Gi`, `-`, `+`, `.`, `k` parse as 0 (kubernetes/apimachinery#165).
//!   The exception is where Go takes its slow `inf.Dec` path, which needs a digit: a bare `Pi`
//!   or `Ei`, or a bare decimal scale below nano (`e-10`, `.e-12`) is an error. `""` is an error.
//! - `n` and `u` are decimal suffixes too; `E` alone is exa (`2E` = 2·10^18) while `E3` is an
//!   exponent (`1E3` = 1000). An exponent is an integer that must fit an int64 (else the
//!   quantity is an error) and is then truncated to int32 (`1e4294967296` is 1); the fraction
//!   length is subtracted in int32 as well, and Go's slow path negates it in int32 (so
//!   `1e-2147483648` is 10^2147483648). Exponents and suffixes do not mix (`1e3Mi`).
//! - No whitespace is trimmed: CEL hands the string over as it is.
//! - A non-zero magnitude is rounded up to a multiple of 10^-9 (`0.1n` is `1n`); the sign stays.
//! - Only binary-suffixed quantities are capped, at 2^63-1. A decimal quantity keeps its exact
//!   value however large (`100000000000000P`, `1e100`), and comparisons are exact.
//!
//! A parsed value is therefore an arbitrary-precision decimal, stored as its significant digits
//! and a decimal exponent: its size is bounded by the input's length, whatever the exponent.

use std::cmp::Ordering;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Digits after the decimal point a quantity keeps (nano); finer values are rounded up.
const NANO_DIGITS: i64 = 9;
/// The magnitude cap of a binary-suffixed quantity, in units.
const BINARY_CAP: u128 = i64::MAX as u128;
const NANOS_PER_UNIT: u128 = 1_000_000_000;

/// The exact value of a quantity: `±0.d₁d₂…dₙ × 10^exponent`. Canonical (no leading or trailing
/// zero digits; zero is no digits, positive, exponent 0), so derived equality is value equality.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ParsedQuantity {
    negative: bool,
    /// Significant decimal digits, each 0..=9.
    digits: Vec<u8>,
    exponent: i64,
}

impl ParsedQuantity {
    /// The value `±digits × 10^scale`, rounded up in magnitude to a multiple of 10^-9.
    /// `digits` are 0..=9 and may carry leading and trailing zeros.
    fn from_digits(negative: bool, digits: &[u8], scale: i64) -> Self {
        let Some(first) = digits.iter().position(|&d| d != 0) else {
            return Self::default();
        };
        let last = digits.iter().rposition(|&d| d != 0).unwrap_or(first);
        // Lengths are bounded by the input's, far inside i64.
        let exponent =
            scale.saturating_add(i64::try_from(digits.len() - first).unwrap_or(i64::MAX));
        let mut q = Self {
            negative,
            digits: digits[first..=last].to_vec(),
            exponent,
        };
        q.round_up_to_nano();
        q
    }

    fn round_up_to_nano(&mut self) {
        let keep = self.exponent.saturating_add(NANO_DIGITS);
        if keep <= 0 {
            // Below 1n altogether: the smallest non-zero quantity.
            self.digits = vec![1];
            self.exponent = 1 - NANO_DIGITS;
            return;
        }
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        if keep >= self.digits.len() {
            return;
        }
        // The dropped digits end in a non-zero one (canonical form), so the kept part goes up.
        self.digits.truncate(keep);
        while self.digits.last() == Some(&9) {
            self.digits.pop();
        }
        match self.digits.last_mut() {
            Some(d) => *d += 1,
            None => {
                self.digits.push(1);
                self.exponent += 1;
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    pub fn is_positive(&self) -> bool {
        !self.is_zero() && !self.negative
    }

    fn signum(&self) -> i8 {
        match (self.is_zero(), self.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        }
    }

    /// The value in whole units, rounded away from zero (as apimachinery's `Value()`);
    /// `None` when that does not fit an i64.
    pub fn to_i64(&self) -> Option<i64> {
        if self.is_zero() {
            return Some(0);
        }
        // 0.d × 10^20 ≥ 10^19 > i64::MAX.
        if self.exponent > 19 {
            return None;
        }
        let whole_digits = usize::try_from(self.exponent.max(0)).unwrap_or(0);
        let mut magnitude: i128 = 0;
        for i in 0..whole_digits {
            magnitude = magnitude * 10 + i128::from(self.digits.get(i).copied().unwrap_or(0));
        }
        if self.digits.len() > whole_digits {
            magnitude += 1;
        }
        i64::try_from(if self.negative { -magnitude } else { magnitude }).ok()
    }

    /// Like [`Self::to_i64`], but clamped to the i64 range instead of failing.
    pub fn to_i64_saturating(&self) -> i64 {
        self.to_i64()
            .unwrap_or(if self.negative { i64::MIN } else { i64::MAX })
    }
}

impl Ord for ParsedQuantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.signum().cmp(&other.signum()).then_with(|| {
            // Same sign; with no leading zeros, the larger exponent is the larger magnitude.
            let magnitude = self
                .exponent
                .cmp(&other.exponent)
                .then_with(|| self.digits.cmp(&other.digits));
            if self.negative {
                magnitude.reverse()
            } else {
                magnitude
            }
        })
    }
}

impl PartialOrd for ParsedQuantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Scientific notation (`1.5e9`, `-1e-9`, `0`): exact and short, whatever the magnitude.
impl fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((first, rest)) = self.digits.split_first() else {
            return f.write_str("0");
        };
        if self.negative {
            f.write_str("-")?;
        }
        write!(f, "{first}")?;
        if !rest.is_empty() {
            f.write_str(".")?;
            for d in rest {
                write!(f, "{d}")?;
            }
        }
        match self.exponent - 1 {
            0 => Ok(()),
            e => write!(f, "e{e}"),
        }
    }
}

/// Why a string is not a quantity (the reason only; the caller names the value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Invalid {
    Empty,
    /// Not `<number><suffix>` at all.
    Shape,
    /// `<number>` is fine, the suffix is neither an SI suffix nor an int64 exponent.
    Suffix,
    /// No digit where apimachinery's slow path needs one (`Pi`, `e-10`).
    NoDigits,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invalid::Empty => "it is empty",
            Invalid::Shape => "expected a number followed by at most one suffix",
            Invalid::Suffix => {
                "the suffix must be one of Ki Mi Gi Ti Pi Ei n u m k M G T P E, or e/E and an integer exponent"
            }
            Invalid::NoDigits => "the number has no digits",
        })
    }
}

/// What the suffix scales the number by.
#[derive(Clone, Copy)]
enum Scale {
    /// × 10^n (decimal SI or an exponent, already truncated to int32 as Go does).
    Decimal(i32),
    /// × 2^n (binary SI).
    Binary(u32),
}

fn scale_of(suffix: &str) -> Result<Scale, Invalid> {
    Ok(match suffix {
        "" => Scale::Decimal(0),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .filter(|rest| !rest.is_empty())
                .ok_or(Invalid::Suffix)?;
            // strconv.ParseInt(_, 10, 64) then int32(): same accepted forms as i64's FromStr
            // (optional sign, then digits), and the same truncation.
            let exponent: i64 = exponent.parse().map_err(|_| Invalid::Suffix)?;
            Scale::Decimal(exponent as i32)
        }
    })
}

/// Parse one quantity string the way `resource.ParseQuantity` does (see the module doc).
fn parse_str(s: &str) -> Result<ParsedQuantity, Invalid> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(Invalid::Empty);
    }
    let digits_from = |from: usize| {
        b[from..]
            .iter()
            .position(|c| !c.is_ascii_digit())
            .map_or(b.len(), |n| from + n)
    };
    let (negative, mut pos) = match b[0] {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    let number_start = pos;
    while b.get(pos) == Some(&b'0') {
        pos += 1;
    }
    if pos == b.len() {
        return Ok(ParsedQuantity::default()); // "0", "-000", and also "-" and "+"
    }
    let integer = &b[pos..digits_from(pos)];
    pos += integer.len();
    let mut fraction: &[u8] = &[];
    if b.get(pos) == Some(&b'.') {
        fraction = &b[pos + 1..digits_from(pos + 1)];
        pos += 1 + fraction.len();
    }
    let has_digit = b[number_start..pos].iter().any(u8::is_ascii_digit);

    let suffix_start = pos;
    while b.get(pos).is_some_and(|c| b"eEinumkKMGTP".contains(c)) {
        pos += 1;
    }
    if matches!(b.get(pos), Some(b'+' | b'-')) {
        pos += 1;
    }
    if digits_from(pos) != b.len() {
        return Err(Invalid::Shape);
    }
    let scale = scale_of(&s[suffix_start..])?;

    let digits: Vec<u8> = integer.iter().chain(fraction).map(|c| c - b'0').collect();
    // Go counts an empty integer part as "0" when judging its int64 fast path.
    let significant = integer.len().max(1).saturating_add(fraction.len());
    let fraction_len = fraction.len() as i32; // Go: int32(len(denom))
    match scale {
        Scale::Decimal(exponent) => {
            let fast_scale = exponent.wrapping_sub(fraction_len);
            let scale = if significant <= 18 && fast_scale >= -9 {
                i64::from(fast_scale)
            } else if !has_digit {
                return Err(Invalid::NoDigits); // inf.Dec.SetString("-.") fails
            } else {
                // inf.Dec: scale = len(denom) + (-exponent) in int32, value = unscaled × 10^-scale.
                -i64::from(fraction_len.wrapping_sub(exponent))
            };
            Ok(ParsedQuantity::from_digits(negative, &digits, scale))
        }
        Scale::Binary(power) => {
            // Go's int64 fast path for a whole number; its precision estimate decides, and the
            // slow path needs a digit.
            let fast = fraction.is_empty() && significant + (power as usize * 3 / 10) < 15;
            if !fast && !has_digit {
                return Err(Invalid::NoDigits);
            }
            let nanos = binary_nanos(integer, fraction, power);
            let nano_digits: Vec<u8> = nanos.to_string().bytes().map(|c| c - b'0').collect();
            Ok(ParsedQuantity::from_digits(
                negative,
                &nano_digits,
                -NANO_DIGITS,
            ))
        }
    }
}

/// `integer.fraction × 2^power` in nano-units, rounded up and capped at 2^63-1 units.
fn binary_nanos(integer: &[u8], fraction: &[u8], power: u32) -> u128 {
    const CAP: u128 = BINARY_CAP * NANOS_PER_UNIT;
    // `integer` has no leading zeros: 20 digits are ≥ 10^19, beyond the cap before scaling.
    if integer.len() > 19 {
        return CAP;
    }
    let whole = integer
        .iter()
        .fold(0u128, |n, &c| n * 10 + u128::from(c - b'0'));
    // ≤ (10^19 - 1) × 2^60 < 2^124.
    let units = whole << power;
    if units > BINARY_CAP {
        return CAP;
    }
    // The fraction times 2^power × 10^9, digit by digit from the right: each step is
    // digit × multiplier + carry < 10 × multiplier ≤ 10 × 2^60 × 10^9, far inside u128.
    let multiplier = (1u128 << power) * NANOS_PER_UNIT;
    let mut carry = 0u128;
    let mut remainder = false;
    for &c in fraction.iter().rev() {
        let x = u128::from(c - b'0') * multiplier + carry;
        remainder |= !x.is_multiple_of(10);
        carry = x / 10;
    }
    (units * NANOS_PER_UNIT + carry + u128::from(remainder)).min(CAP)
}

/// At most this many characters of an offending value are quoted back.
const SHOWN_CHARS: usize = 64;

/// Parse a quantity; `Err` carries a message suitable for a user (what was wrong, not where).
pub fn parse(q: &Quantity) -> Result<ParsedQuantity, String> {
    parse_str(&q.0).map_err(|why| {
        let shown: String = q.0.chars().take(SHOWN_CHARS).collect();
        let ellipsis = if shown.len() < q.0.len() { "…" } else { "" };
        format!(
            "\"{}{ellipsis}\" is not a Kubernetes quantity: {why} (examples: 1Gi, 512Mi, 1000000)",
            shown.escape_debug()
        )
    })
}

/// Bytes of a quantity, rounded up (away from zero); `None` when it does not parse or does not
/// fit an i64.
pub fn to_bytes(q: &Quantity) -> Option<i64> {
    parse(q).ok()?.to_i64()
}

/// `a + b` in bytes, saturating at the i64 range, rendered by [`format_bytes`] (used for
/// defaulting memory limits from the tmpfs size). `None` when either does not parse.
pub fn add(a: &Quantity, b: &Quantity) -> Option<Quantity> {
    let a = parse(a).ok()?.to_i64_saturating();
    let b = parse(b).ok()?.to_i64_saturating();
    Some(Quantity(format_bytes(a.saturating_add(b))))
}

/// Bytes as the largest binary suffix that divides them exactly (`268435456` → `256Mi`).
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests;
