//! Byte sizes as people type them: `4096`, `512k`, `512m`, `8g`, `1t` (binary multiples), and
//! durations: `500ns`, `3us`, `1.5ms`, `2s`.

/// Parses a size with an optional k/m/g/t suffix (case-insensitive, optional trailing `b`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (digits, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 4096, 512m, 8g)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// Formats bytes for people: `512.0 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Parses a duration with a unit: `ns`, `us`, `ms` or `s` (a bare `0` is zero).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let bad = || format!("'{s}' is not a duration (examples: 500ns, 3us, 1.5ms, 2s)");
    let split = t.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let ns_per = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    if !(v >= 0.0 && v * ns_per <= 3600e9) {
        return Err(format!("'{s}': a duration from 0 to an hour"));
    }
    Ok(std::time::Duration::from_nanos((v * ns_per).round() as u64))
}

/// Formats a duration the way [`parse_duration`] reads it back: `3us`, `1500us`.
pub fn format_duration(d: std::time::Duration) -> String {
    let ns = d.as_nanos();
    match ns {
        0 => "0".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("2gb").unwrap(), 2 << 30);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert!(parse_size("abc").unwrap_err().contains("not a size"));
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999t")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(format_size(512 << 20), "512.0 MiB");
        assert_eq!(format_size(10), "10 B");
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("3us").unwrap(), Duration::from_micros(3));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("500ns").unwrap(), Duration::from_nanos(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("3").unwrap_err().contains("not a duration"));
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("-1us").is_err());
        for d in ["3us", "1500us", "2s", "7ns", "40ms", "0"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }
}
