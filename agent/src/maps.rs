//! /proc/self/maps: the mappings of this process and the anonymous spans of a range (the
//! pager registers each anonymous span of the heap on its own).

/// One anonymous mapping inside the paged region, registered separately (the region may also
/// hold file-backed mappings, e.g. the CDS archive, which stay unmanaged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// One line of /proc/self/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub perms: String,
    pub path: String,
}

/// Parses /proc/self/maps text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?.to_string();
            let path = it.nth(3).unwrap_or("").to_string();
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: usize::from_str_radix(a, 16).ok()?,
                end: usize::from_str_radix(b, 16).ok()?,
                perms,
                path,
            })
        })
        .collect()
}

/// The anonymous parts of `[start, start+bytes)`, clipped to it, neighbours merged.
pub fn anonymous_spans(maps: &[Mapping], start: usize, bytes: usize) -> Vec<Span> {
    let end = start + bytes;
    let mut spans: Vec<Span> = Vec::new();
    for m in maps {
        if m.end <= start || m.start >= end || !m.path.is_empty() {
            continue;
        }
        let s = Span {
            start: m.start.max(start),
            end: m.end.min(end),
        };
        match spans.last_mut() {
            Some(last) if last.end == s.start => last.end = s.end,
            _ => spans.push(s),
        }
    }
    spans
}

/// `spans` less the range `[lo, hi)`.
pub fn subtract(spans: &[Span], lo: usize, hi: usize) -> Vec<Span> {
    let mut out = Vec::new();
    for s in spans {
        if s.end <= lo || s.start >= hi {
            out.push(*s);
            continue;
        }
        if s.start < lo {
            out.push(Span {
                start: s.start,
                end: lo,
            });
        }
        if s.end > hi {
            out.push(Span {
                start: hi,
                end: s.end,
            });
        }
    }
    out
}

/// A /proc/self/maps excerpt for tests: two anonymous mappings, the CDS archive file-backed
/// between them and a reserved (---p) one after it, then a library.
#[cfg(test)]
pub(crate) const TEST_MAPS: &str = "\
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
7f0000200000-7f0000300000 rw-p 00001000 fd:01 1234 /usr/lib/jvm/lib/server/classes.jsa
7f0000300000-7f0000400000 ---p 00000000 00:00 0
7f1000000000-7f1000001000 r-xp 00000000 fd:01 99 /usr/lib/libc.so.6
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_skip_file_backed_mappings_and_merge_neighbours() {
        let maps = parse_maps(TEST_MAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[2].path, "/usr/lib/jvm/lib/server/classes.jsa");
        let spans = anonymous_spans(&maps, 0x7f0000080000, 0x300000);
        assert_eq!(
            spans,
            vec![
                Span {
                    start: 0x7f0000080000,
                    end: 0x7f0000200000
                },
                Span {
                    start: 0x7f0000300000,
                    end: 0x7f0000380000
                },
            ]
        );
    }

    #[test]
    fn subtracting_ranges_from_spans() {
        let spans = [
            Span { start: 0, end: 100 },
            Span {
                start: 200,
                end: 300,
            },
        ];
        assert_eq!(
            subtract(&spans, 50, 250),
            vec![
                Span { start: 0, end: 50 },
                Span {
                    start: 250,
                    end: 300
                }
            ]
        );
        assert_eq!(subtract(&spans, 0, 400), vec![]);
        assert_eq!(subtract(&spans, 120, 180), spans.to_vec());
        assert_eq!(
            subtract(&spans, 10, 20),
            vec![
                Span { start: 0, end: 10 },
                Span {
                    start: 20,
                    end: 100
                },
                Span {
                    start: 200,
                    end: 300
                }
            ]
        );
    }
}
