//! Byte sizes as people type them: `4096`, `512k`, `512m`, `8g`, `1t` (binary multiples).

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
}
