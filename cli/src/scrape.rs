//! Reading a `/metrics` page (a paged JVM's `metrics=ADDR`, a memory server's `--metrics`):
//! one HTTP GET over a plain socket and a parser for the Prometheus text format, enough for
//! the pages this project serves (`memliner stats PID --every`, `memliner top`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One sample line: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A page's samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    pub samples: Vec<Sample>,
}

/// Why a page could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("cannot reach {addr}: {error}")]
    Unreachable { addr: String, error: std::io::Error },
    #[error("{addr} answered {status}, not 200")]
    Status { addr: String, status: String },
    #[error("{addr}: line {line} of its page is not a sample: {text}")]
    Malformed {
        addr: String,
        line: usize,
        text: String,
    },
}

/// `GET http://addr/metrics`, parsed.
pub fn get(addr: &str, timeout: Duration) -> Result<Page, ScrapeError> {
    let unreachable = |error| ScrapeError::Unreachable {
        addr: addr.to_string(),
        error,
    };
    let sock = addr
        .to_socket_addrs()
        .map_err(unreachable)?
        .next()
        .ok_or_else(|| unreachable(std::io::ErrorKind::NotFound.into()))?;
    let mut s = TcpStream::connect_timeout(&sock, timeout).map_err(unreachable)?;
    s.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(unreachable)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(unreachable)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ScrapeError::Status {
            addr: addr.to_string(),
            status,
        });
    }
    parse(body).map_err(|(line, text)| ScrapeError::Malformed {
        addr: addr.to_string(),
        line,
        text,
    })
}

/// The samples of a page in the text format; `Err((line number, line))` for a line that is
/// neither a comment nor a sample.
pub fn parse(text: &str) -> Result<Page, (usize, String)> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples.push(sample(line).ok_or_else(|| (i + 1, line.to_string()))?);
    }
    Ok(Page { samples })
}

fn sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        let mut key = String::new();
        let close = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                c => key.push(c),
            }
        };
        rest = &r[close + 1..];
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

impl Page {
    /// The samples of `name` whose labels include all of `with`.
    pub fn find<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    /// The sum of [`Page::find`]'s values (0 when there are none).
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.find(name, with).map(|s| s.value).sum()
    }

    /// The first such sample's value.
    pub fn value(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        self.find(name, with).next().map(|s| s.value)
    }

    /// Histogram `name`'s cumulative buckets (upper bound, count) with labels `with`, in
    /// ascending order, `+Inf` last.
    pub fn buckets(&self, name: &str, with: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut b: Vec<(f64, f64)> = self
            .find(&bucket, with)
            .filter_map(|s| {
                let le = match s.label("le")? {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().ok()?,
                };
                Some((le, s.value))
            })
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    }
}

/// The `q` quantile of cumulative `buckets` (as [`Page::buckets`] gives them), interpolated
/// within its bucket as Prometheus's `histogram_quantile` does; `None` without observations.
/// A quantile in the `+Inf` bucket is the largest finite bound.
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, n) in buckets {
        if n >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let within = if n > prev.1 {
                (rank - prev.1) / (n - prev.1)
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * within);
        }
        prev = (le, n);
    }
    Some(prev.0)
}

/// `now - before`, bucket by bucket (the observations between two scrapes).
pub fn bucket_delta(now: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, n)| {
            let b = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, v)| *v);
            (le, (n - b).max(0.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_and_escapes_are_read() {
        let p = parse(
            "# HELP x y\n# TYPE x counter\nx 3\ny{a=\"1\",b=\"q\\\"uote\\\\\"} 2.5\nz_bucket{le=\"+Inf\"} +Inf\n",
        )
        .unwrap();
        assert_eq!(p.samples.len(), 3);
        assert_eq!(p.value("x", &[]), Some(3.0));
        assert_eq!(p.value("y", &[("b", "q\"uote\\")]), Some(2.5));
        assert_eq!(p.value("y", &[("a", "2")]), None);
        assert_eq!(p.samples[2].value, f64::INFINITY);
        assert_eq!(parse("x\n").unwrap_err(), (1, "x".to_string()));
        assert!(parse("x{a=1} 2\n").is_err());
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let b = [(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(0.5, &b), Some(1.0));
        assert_eq!(quantile(0.75, &b), Some(1.5));
        assert_eq!(quantile(0.25, &b), Some(0.5));
        assert_eq!(quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(
            quantile(0.99, &[(1.0, 1.0), (f64::INFINITY, 5.0)]),
            Some(1.0)
        );
        let d = bucket_delta(&b, &[(1.0, 4.0), (2.0, 4.0)]);
        assert_eq!(d, [(1.0, 6.0), (2.0, 16.0), (f64::INFINITY, 20.0)]);
    }
}
