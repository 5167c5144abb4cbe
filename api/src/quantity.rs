//! Kubernetes quantities as the API uses them: `size: 1Gi`, and also `size: 1` (a bare integer is
//! a quantity of bytes). Parsing is delegated to `kube_quantity`.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

/// Parse a quantity; `Err` carries a message suitable for a user (what was wrong, not where).
pub fn parse(q: &Quantity) -> Result<ParsedQuantity, String> {
    ParsedQuantity::try_from(q).map_err(|_| {
        format!(
            "{:?} is not a Kubernetes quantity (examples: 1Gi, 512Mi, 1000000)",
            q.0
        )
    })
}

/// Bytes of a quantity, rounded up; `None` when it does not parse or does not fit.
pub fn to_bytes(q: &Quantity) -> Option<i64> {
    parse(q).ok()?.to_bytes_i64()
}

/// `a + b` rendered as a quantity string in the larger binary unit that represents it exactly
/// (used for defaulting memory limits from the tmpfs size).
pub fn add(a: &Quantity, b: &Quantity) -> Option<Quantity> {
    let sum = parse(a)
        .ok()?
        .to_bytes_i64()?
        .checked_add(parse(b).ok()?.to_bytes_i64()?)?;
    Some(Quantity(format_bytes(sum)))
}

/// Bytes as the largest binary suffix that divides them exactly (`268435456` → `256Mi`).
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
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
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
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
        assert!(err.contains("ten gigs"), "{err}");
    }

    #[test]
    fn add_renders_in_binary_units() {
        assert_eq!(add(&q("256Mi"), &q("256Mi")), Some(q("512Mi")));
        assert_eq!(add(&q("1Gi"), &q("256Mi")), Some(q("1280Mi")));
        assert_eq!(add(&q("1"), &q("1")), Some(q("2")));
    }
}
