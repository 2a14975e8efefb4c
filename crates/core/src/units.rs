//! Sizes with units, as the command line takes them: `126s`, `64k`, `1M`, `2G`.

/// Bytes in one sector, the unit of `s` and the granularity of every layout.
pub const SECTOR_BYTES: u64 = 512;

/// Parses a size. A bare number is bytes; `s` is 512-byte sectors; `k`, `m`,
/// `g`, `t` (either case, optional trailing `b`/`iB`) are powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{text}': expected a number with an optional unit (s, k, M, G, T)"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{text}': number too large"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "s" => SECTOR_BYTES,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "invalid size '{text}': unknown unit '{unit}' (use s, k, M, G or T)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("invalid size '{text}': too large"))
}

/// Formats bytes for people: exact in the largest binary unit that divides
/// evenly, otherwise to one decimal in the largest unit that fits.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("k", 1 << 10),
    ];
    let Some((name, mult)) = UNITS.into_iter().find(|(_, m)| bytes >= *m) else {
        return format!("{bytes}B");
    };
    if bytes.is_multiple_of(mult) {
        format!("{}{name}", bytes / mult)
    } else {
        format!("{:.1}{name}", bytes as f64 / mult as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("126s"), Ok(126 * 512));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(126 * 512), "63k");
        assert_eq!(format_size(127 * 512), "63.5k");
        assert_eq!(format_size(311_399_424), "297.0M");
        assert_eq!(format_size(1 << 20), "1M");
        assert_eq!(format_size(3 << 30), "3G");
        assert_eq!(format_size(1000), "1000B");
    }
}
