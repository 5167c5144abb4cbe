// Test code: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

fn p(s: &str) -> ParsedQuantity {
    parse(&q(s)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn bare_integers_are_bytes() {
    assert_eq!(to_bytes(&q("1")), Some(1));
    assert_eq!(to_bytes(&q("1Gi")), Some(1 << 30));
    assert_eq!(to_bytes(&q("1G")), Some(1_000_000_000));
}

#[test]
fn garbage_is_an_error_naming_the_value() {
    let err = parse(&q("ten gigs")).unwrap_err();
    assert!(err.contains("ten gigs") && err.contains("1Gi"), "{err}");
}

#[test]
fn an_enormous_value_is_quoted_shortened() {
    let err = parse(&q(&"x".repeat(10_000))).unwrap_err();
    assert!(err.len() < 400 && err.contains('…'), "{err}");
}

#[test]
fn add_renders_in_binary_units() {
    assert_eq!(add(&q("256Mi"), &q("256Mi")), Some(q("512Mi")));
    assert_eq!(add(&q("1Gi"), &q("256Mi")), Some(q("1280Mi")));
    assert_eq!(add(&q("1"), &q("1")), Some(q("2")));
    assert_eq!(add(&q("1Ei"), &q("1Ei")), Some(q("2Ei")));
    assert_eq!(add(&q("x"), &q("1")), None);
}

#[test]
fn add_saturates_instead_of_overflowing() {
    let max = Some(q(&i64::MAX.to_string()));
    assert_eq!(add(&q("100000000000000P"), &q("256Mi")), max);
    assert_eq!(add(&q("7Ei"), &q("7Ei")), max);
    assert_eq!(add(&q("1e999999999"), &q("1e999999999")), max);
}

#[test]
fn accepts_what_kubernetes_accepts() {
    for (s, bytes) in [
        ("1Ei", Some(1i64 << 60)),
        ("2E", Some(2_000_000_000_000_000_000)),
        ("1E3", Some(1000)),
        ("1e3", Some(1000)),
        ("1E+3", Some(1000)),
        ("1.5Gi", Some(3 << 29)),
        ("1.", Some(1)),
        (".5", Some(1)),
        ("+2k", Some(2000)),
        ("-2k", Some(-2000)),
        ("100m", Some(1)),
        ("1n", Some(1)),
        ("1u", Some(1)),
        ("0Mi", Some(0)),
        ("1e007", Some(10_000_000)),
        // A bare suffix or sign is 0 to apimachinery (kubernetes/apimachinery#165).
        ("Gi", Some(0)),
        ("Ti", Some(0)),
        ("-", Some(0)),
        ("+", Some(0)),
        (".", Some(0)),
        ("k", Some(0)),
        ("m", Some(0)),
        ("e-9", Some(0)),
        ("-.e5", Some(0)),
        // The exponent is truncated to int32 after parsing as int64.
        ("1e4294967296", Some(1)),
        ("1e4294967299", Some(1000)),
    ] {
        assert_eq!(to_bytes(&q(s)), bytes, "{s}");
    }
}

#[test]
fn rejects_what_kubernetes_rejects() {
    for s in [
        "",
        "1e3Mi",
        "1Gi3",
        "1ki",
        "1KI",
        "1 Gi",
        " 1",
        "1 ",
        "1e",
        "1e+",
        "1E-",
        "1ee3",
        "1e3.5",
        "1..2",
        "--1",
        "+-1",
        "1-",
        "0x10",
        "1_000",
        "١",
        "1Gib",
        "1EiB",
        "Pi",
        "Ei",
        "-Pi",
        ".Ei",
        "e-10",
        ".e-12",
        "+e-10",
        "1e9223372036854775808",
        "1e-9223372036854775809",
    ] {
        assert!(parse(&q(s)).is_err(), "{s:?} parsed as {:?}", parse(&q(s)));
    }
}

#[test]
fn binary_quantities_are_capped_and_decimal_ones_are_not() {
    let cap = p("9223372036854775807");
    assert_eq!(p("8Ei"), cap);
    assert_eq!(p("100000Ei"), cap);
    assert_eq!(p(&format!("{}Ki", "9".repeat(10_000))), cap);
    assert_eq!(p("-8Ei"), p("-9223372036854775807"));
    assert!(p("7.99999Ei") < cap);
    // 9223372036854775807 = 8Ei - 1: exactly at the cap, in nano-units.
    assert_eq!(
        p("7.9999999999999999991326382620115964527335017919540405273437500000001Ei"),
        cap
    );
    assert!(p("9223372036854775808") > cap);
    assert!(p("100000000000000P") > p("9E"));
    assert!(p("200000000000000P") > p("100000000000000P"));
    assert!(p("1e999999999") > p("1e999999998"));
    assert!(p("-1e999999999") < p("-1e999999998"));
    assert_eq!(p("100000000000000P").to_i64(), None);
    assert_eq!(p("100000000000000P").to_i64_saturating(), i64::MAX);
    assert_eq!(p("-1e30").to_i64_saturating(), i64::MIN);
}

#[test]
fn values_round_up_to_nano_in_magnitude() {
    assert_eq!(p("0.1n"), p("1n"));
    assert_eq!(p("1.000000001"), p("1000000001n"));
    assert_eq!(p("1.0000000001"), p("1000000001n"));
    assert_eq!(p("-1.0000000001"), p("-1000000001n"));
    assert_eq!(p("0.9999999999"), p("1"));
    assert_eq!(p("1e-2147483647"), p("1n"));
    // Go negates the int32 exponent on its slow path, and -(-2^31) wraps to -2^31.
    assert_eq!(p("1e-2147483648"), p("1e2147483648"));
    assert!(p("1e-2147483648") > p("1e2147483647"));
    assert_eq!(p(&format!("0.{}1", "0".repeat(10_000))), p("1n"));
    assert_eq!(p("1.5Ki"), p("1536"));
    assert_eq!(p("0.1Ki"), p("102.4"));
    assert_eq!(p("0.0000000000001Ki"), p("1n"));
    assert!(p("1n") > p("0"));
    assert!(p("-1n") < p("0"));
}

#[test]
fn equal_amounts_compare_equal_across_formats() {
    for (a, b) in [
        ("1Gi", "1024Mi"),
        ("1Gi", "1073741824"),
        ("1G", "1e9"),
        ("1G", "1000M"),
        ("1500m", "1.5"),
        ("0", "-0"),
        ("0", "0Ei"),
        ("1Ti", "1099511627776"),
        ("100000000000000P", "1e29"),
        ("00012.3400k", "12340"),
    ] {
        assert_eq!(p(a), p(b), "{a} vs {b}");
        assert_eq!(p(a).cmp(&p(b)), Ordering::Equal, "{a} vs {b}");
    }
}

#[test]
fn near_misses_across_formats_are_ordered_exactly() {
    assert!(p("1073741810") < p("1Gi"));
    assert!(p("1073741823") < p("1Gi"));
    assert!(p("1073741825") > p("1Gi"));
    assert!(p("1099511700000") > p("1Ti"));
    assert!(p("1023.999999999Mi") < p("1Gi"));
}

#[test]
fn absurd_inputs_are_fast() {
    let started = Instant::now();
    for s in [
        "9".repeat(100_000),
        format!("0.{}", "9".repeat(100_000)),
        format!("{}Ei", "9".repeat(100_000)),
        format!("0.{}Ki", "3".repeat(100_000)),
        format!("1e{}", "0".repeat(100_000)),
        format!("1e{}1", "0".repeat(100_000)),
        "1e9223372036854775807".to_string(),
        "1e-9223372036854775808".to_string(),
    ] {
        let _ = parse(&q(&s));
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn display_is_short_scientific() {
    assert_eq!(p("1Gi").to_string(), "1.073741824e9");
    assert_eq!(p("-1n").to_string(), "-1e-9");
    assert_eq!(p("1").to_string(), "1");
    assert_eq!(p("0").to_string(), "0");
    assert_eq!(p("1e999999999").to_string(), "1e999999999");
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Acceptance as read from apimachinery (grammar, then the no-digit slow-path rule), written as
/// a regex so it is independent of the scanner above. Only for strings too short for an
/// exponent to leave int64.
fn accepted_by_grammar(s: &str) -> bool {
    static GRAMMAR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"^[+-]?([0-9]*)(\.([0-9]*))?(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE]([+-]?[0-9]+))$",
        )
        .unwrap()
    });
    let Some(caps) = GRAMMAR.captures(s) else {
        return false;
    };
    if s.is_empty() {
        return false;
    }
    let has_digit = !caps[1].is_empty() || caps.get(3).is_some_and(|f| !f.as_str().is_empty());
    if has_digit {
        return true;
    }
    match (&caps[4], caps.get(5)) {
        ("Pi" | "Ei", _) => false,
        (_, Some(exponent)) => exponent.as_str().parse::<i64>().unwrap() >= -9,
        _ => true,
    }
}

/// One structured quantity: sign, integer digits, optional fraction, suffix.
fn structured() -> impl Strategy<Value = String> {
    let suffix = prop_oneof![
        prop::sample::select(vec![
            "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
        ])
        .prop_map(str::to_string),
        (
            prop::sample::select(vec!["e", "E"]),
            prop::sample::select(vec!["", "+", "-"]),
            0u32..=15
        )
            .prop_map(|(e, sign, n)| format!("{e}{sign}{n}")),
    ];
    (
        prop::sample::select(vec!["", "+", "-"]),
        "[0-9]{0,6}",
        prop::option::of("[0-9]{0,6}"),
        suffix,
    )
        .prop_map(|(sign, int, frac, suffix)| match frac {
            Some(frac) => format!("{sign}{int}.{frac}{suffix}"),
            None => format!("{sign}{int}{suffix}"),
        })
}

/// The exact value of a structured quantity in nano-units, by plain integer arithmetic on the
/// rational it denotes; `None` when it does not fit a u128 on the way (the case is skipped).
fn reference_nanos(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = rest
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int}{frac}");
    let unscaled: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let frac_len = i64::try_from(frac.len()).ok()?;
    let pow10 = |n: i64| 10u128.checked_pow(u32::try_from(n).ok()?);
    let binary = |k: u32| -> Option<u128> {
        // ceil(unscaled × 2^k × 10^9 / 10^frac_len), capped at 2^63-1 units.
        let numerator = unscaled.checked_mul(1 << k)?.checked_mul(1_000_000_000)?;
        let nanos = numerator.div_ceil(pow10(frac_len)?);
        Some(nanos.min(u128::from(i64::MAX.unsigned_abs()) * 1_000_000_000))
    };
    let decimal = |exponent: i64| -> Option<u128> {
        let shift = exponent - frac_len + 9;
        if shift >= 0 {
            unscaled.checked_mul(pow10(shift)?)
        } else {
            Some(match pow10(-shift) {
                Some(d) => unscaled.div_ceil(d),
                None => u128::from(unscaled != 0),
            })
        }
    };
    let magnitude = match suffix {
        "" => decimal(0)?,
        "n" => decimal(-9)?,
        "u" => decimal(-6)?,
        "m" => decimal(-3)?,
        "k" => decimal(3)?,
        "M" => decimal(6)?,
        "G" => decimal(9)?,
        "T" => decimal(12)?,
        "P" => decimal(15)?,
        "E" => decimal(18)?,
        "Ki" => binary(10)?,
        "Mi" => binary(20)?,
        "Gi" => binary(30)?,
        "Ti" => binary(40)?,
        "Pi" => binary(50)?,
        "Ei" => binary(60)?,
        exponent => decimal(exponent[1..].parse().ok()?)?,
    };
    let magnitude = i128::try_from(magnitude).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

fn from_nanos(nanos: i128) -> ParsedQuantity {
    p(&format!("{nanos}n"))
}

/// A quantity of moderate magnitude as an f64: the number, scaled by its suffix (binary ones
/// capped at 2^63-1).
fn approximate(s: &str) -> f64 {
    let binary = [("Ki", 10), ("Mi", 20), ("Gi", 30)];
    for (suffix, k) in binary {
        if let Some(number) = s.strip_suffix(suffix) {
            return (number.parse::<f64>().unwrap() * 2f64.powi(k)).min(i64::MAX as f64);
        }
    }
    for (suffix, factor) in [("k", 1e3), ("M", 1e6), ("G", 1e9)] {
        if let Some(number) = s.strip_suffix(suffix) {
            return number.parse::<f64>().unwrap() * factor;
        }
    }
    s.parse().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,40}") {
        let _ = parse(&q(&s));
        let _ = to_bytes(&q(&s));
        let _ = add(&q(&s), &q(&s));
    }

    #[test]
    fn acceptance_follows_the_grammar(s in "[0-9.+eEinumkKMGTPx -]{0,8}") {
        prop_assert_eq!(parse(&q(&s)).is_ok(), accepted_by_grammar(&s), "{:?}", s);
    }

    #[test]
    fn huge_exponents_and_mantissas_never_panic_and_stay_ordered(
        sign in prop::sample::select(vec!["", "-"]),
        digits in "[1-9][0-9]{0,300}",
        exponent in prop_oneof![any::<i64>(), -3_000_000_000i64..3_000_000_000],
        suffix in prop::sample::select(vec!["", "Ki", "Ei", "P"]),
    ) {
        let exact = format!("{sign}{digits}e{exponent}");
        let _ = parse(&q(&exact));
        let _ = to_bytes(&q(&exact));
        let suffixed = format!("{sign}{digits}.{digits}{suffix}");
        let bigger = format!("{sign}{digits}9.{digits}{suffix}");
        let (a, b) = (p(&suffixed), p(&bigger));
        prop_assert!(if sign == "-" { b <= a } else { a <= b }, "{} vs {}", suffixed, bigger);
    }

    #[test]
    fn structured_values_are_exact(a in structured(), b in structured()) {
        let (pa, pb) = (parse(&q(&a)), parse(&q(&b)));
        prop_assert_eq!(pa.is_ok(), accepted_by_grammar(&a), "{:?}", a);
        let (Ok(pa), Ok(pb)) = (pa, pb) else { return Ok(()) };
        let (Some(ra), Some(rb)) = (reference_nanos(&a), reference_nanos(&b)) else {
            return Ok(());
        };
        prop_assert_eq!(&pa, &from_nanos(ra), "{:?}", a);
        prop_assert_eq!(pa.cmp(&pb), ra.cmp(&rb), "{:?} vs {:?}", a, b);
    }

    #[test]
    fn ordering_agrees_with_f64_on_moderate_values(
        a in (1u64..1_000_000_000_000, 0u32..6, prop::sample::select(vec!["", "k", "M", "G", "Ki", "Mi", "Gi"])),
        b in (1u64..1_000_000_000_000, 0u32..6, prop::sample::select(vec!["", "k", "M", "G", "Ki", "Mi", "Gi"])),
    ) {
        let render = |(n, point, suffix): (u64, u32, &str)| {
            let scale = 10u64.pow(point);
            format!("{}.{:0width$}{suffix}", n / scale, n % scale, width = point as usize)
        };
        let (a, b) = (render(a), render(b));
        let (fa, fb) = (approximate(&a), approximate(&b));
        // Only where f64 is unambiguous.
        prop_assume!((fa - fb).abs() > 1e-6 * fa.abs().max(fb.abs()));
        prop_assert_eq!(p(&a).cmp(&p(&b)), fa.partial_cmp(&fb).unwrap(), "{} vs {}", a, b);
    }
}
