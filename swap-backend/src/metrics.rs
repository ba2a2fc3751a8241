//! The Prometheus text format and the HTTP listener that serves it (`GET /metrics`): the
//! memory server's counters (`memliner server --metrics ADDR`) and, through [`Exposition`]
//! and [`MetricsListener::start_text`], each paged JVM's (the agent's `metrics=ADDR`).
//!
//! The server hands a snapshot function over; this module only formats and serves.

use memliner_contracts::metrics::server;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

/// One namespace (one client JVM) as the server sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceFigures {
    pub name: String,
    /// Pages held: stored over TCP, and one-sided slots granted.
    pub pages: u64,
    pub connections: u64,
    pub pages_read: u64,
    pub pages_written: u64,
    pub pages_freed: u64,
    /// Requests refused with an error frame (not found, quota, capacity, bad request).
    pub errors: u64,
}

/// The whole server at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    pub capacity_pages: u64,
    pub used_pages: u64,
    pub connections: u64,
    pub pages_read: u64,
    pub pages_written: u64,
    pub namespaces: Vec<NamespaceFigures>,
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

type PerNamespace = fn(&NamespaceFigures) -> u64;

/// The per-namespace families: name, type, help, value.
const NAMESPACE_FAMILIES: [(&str, &str, &str, PerNamespace); 8] = [
    (
        server::NAMESPACE_PAGES,
        "gauge",
        "Pages a namespace holds (stored, and one-sided slots granted).",
        |n| n.pages,
    ),
    (
        server::NAMESPACE_CONNECTIONS,
        "gauge",
        "Connections open in a namespace.",
        |n| n.connections,
    ),
    (
        server::NAMESPACE_READ_PAGES_TOTAL,
        "counter",
        "Pages a namespace read over TCP.",
        |n| n.pages_read,
    ),
    (
        server::NAMESPACE_WRITTEN_PAGES_TOTAL,
        "counter",
        "Pages a namespace wrote over TCP.",
        |n| n.pages_written,
    ),
    (
        server::NAMESPACE_READ_BYTES_TOTAL,
        "counter",
        "Page bytes a namespace read over TCP.",
        |n| n.pages_read * crate::protocol::PAGE_SIZE as u64,
    ),
    (
        server::NAMESPACE_WRITTEN_BYTES_TOTAL,
        "counter",
        "Page bytes a namespace wrote over TCP.",
        |n| n.pages_written * crate::protocol::PAGE_SIZE as u64,
    ),
    (
        server::NAMESPACE_FREED_PAGES_TOTAL,
        "counter",
        "Pages a namespace freed.",
        |n| n.pages_freed,
    ),
    (
        server::NAMESPACE_ERRORS_TOTAL,
        "counter",
        "Requests of a namespace the server refused.",
        |n| n.errors,
    ),
];

/// `f` in the Prometheus text exposition format (version 0.0.4).
pub fn render(f: &Figures) -> String {
    let page = crate::protocol::PAGE_SIZE as u64;
    let server = [
        (
            server::CAPACITY_BYTES,
            "gauge",
            "Bytes of page storage for all clients together.",
            f.capacity_pages * page,
        ),
        (
            server::USED_BYTES,
            "gauge",
            "Bytes of page storage held by clients.",
            f.used_pages * page,
        ),
        (
            server::CONNECTIONS,
            "gauge",
            "Client connections open.",
            f.connections,
        ),
        (
            server::NAMESPACES,
            "gauge",
            "Namespaces held (one per client JVM).",
            f.namespaces.len() as u64,
        ),
        (
            server::READ_BYTES_TOTAL,
            "counter",
            "Page bytes read by clients over TCP.",
            f.pages_read * page,
        ),
        (
            server::WRITTEN_BYTES_TOTAL,
            "counter",
            "Page bytes written by clients over TCP.",
            f.pages_written * page,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, v) in server {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    for (name, kind, help, get) in NAMESPACE_FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for n in &f.namespaces {
            let _ = writeln!(out, "{name}{{namespace=\"{}\"}} {}", label(&n.name), get(n));
        }
    }
    out
}

/// A metrics page being written: families, each declared once, with their samples, every
/// sample carrying the page's common labels first.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    /// `k="v",...` of the labels every sample carries (escaped).
    common: String,
}

impl Exposition {
    /// A page whose every sample carries `common` labels.
    pub fn new(common: &[(&str, &str)]) -> Exposition {
        Exposition {
            out: String::with_capacity(16 << 10),
            common: common
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// Declares family `name` of `kind` (`counter`, `gauge`, `histogram`).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        self
    }

    /// One sample of `name` (the family's name, or a histogram's `_bucket`/`_sum`/`_count`).
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl Into<f64>,
    ) -> &mut Self {
        let mut all = self.common.clone();
        for (k, v) in labels {
            if !all.is_empty() {
                all.push(',');
            }
            let _ = write!(all, "{k}=\"{}\"", label(v));
        }
        let v: f64 = value.into();
        if all.is_empty() {
            let _ = writeln!(self.out, "{name} {v}");
        } else {
            let _ = writeln!(self.out, "{name}{{{all}}} {v}");
        }
        self
    }

    /// A family of one sample.
    pub fn single(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        value: impl Into<f64>,
    ) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// The samples of histogram `name` (declared with [`Exposition::family`]): `buckets` are
    /// (upper bound, observations at or below it), cumulative; `+Inf` is `count`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) -> &mut Self {
        let bucket = format!("{name}_bucket");
        for &(le, n) in buckets {
            let le = le.to_string();
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, n as f64);
        }
        let mut l = labels.to_vec();
        l.push(("le", "+Inf"));
        self.sample(&bucket, &l, count as f64);
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count as f64)
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A running metrics listener; [`MetricsListener::stop`] ends it.
pub struct MetricsListener {
    addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsListener {
    /// Serves the server's `GET /metrics` on `listen` (`HOST:PORT`; port 0: any free one)
    /// with the figures `snapshot` gives at each scrape.
    pub fn start(
        listen: &str,
        snapshot: impl Fn() -> Figures + Send + 'static,
    ) -> Result<MetricsListener, String> {
        Self::start_text(listen, "memliner-metrics", move || render(&snapshot()))
    }

    /// Serves `GET /metrics` on `listen` with the page `page` writes at each scrape, from a
    /// thread named `thread`; anything else is a 404.
    pub fn start_text(
        listen: &str,
        thread: &str,
        page: impl Fn() -> String + Send + 'static,
    ) -> Result<MetricsListener, String> {
        let http = Arc::new(
            tiny_http::Server::http(listen)
                .map_err(|e| format!("cannot serve metrics on {listen}: {e}"))?,
        );
        let addr = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| format!("cannot serve metrics on {listen}: not an IP address"))?;
        let h = http.clone();
        let thread = std::thread::Builder::new()
            .name(thread.into())
            .stack_size(256 << 10)
            .spawn(move || {
                for request in h.incoming_requests() {
                    let path = request.url().split('?').next().unwrap_or("");
                    let response =
                        if *request.method() == tiny_http::Method::Get && path == "/metrics" {
                            tiny_http::Response::from_string(page()).with_header(
                                tiny_http::Header::from_bytes(
                                    &b"Content-Type"[..],
                                    &b"text/plain; version=0.0.4; charset=utf-8"[..],
                                )
                                .expect("a valid header"),
                            )
                        } else {
                            tiny_http::Response::from_string("memliner: GET /metrics\n")
                                .with_status_code(404)
                        };
                    let _ = request.respond(response);
                }
            })
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        Ok(MetricsListener {
            addr,
            http,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for MetricsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsListener")
            .field("addr", &self.addr)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_a_type_per_family_and_escaped_labels() {
        let f = Figures {
            capacity_pages: 10,
            used_pages: 3,
            connections: 2,
            pages_read: 5,
            pages_written: 7,
            namespaces: vec![NamespaceFigures {
                name: "host/12/\"x\"".into(),
                pages: 3,
                connections: 2,
                pages_read: 5,
                pages_written: 7,
                pages_freed: 1,
                errors: 4,
            }],
        };
        let t = render(&f);
        assert!(t.contains("# TYPE memliner_server_capacity_bytes gauge\nmemliner_server_capacity_bytes 40960\n"), "{t}");
        assert!(
            t.contains("memliner_namespace_pages{namespace=\"host/12/\\\"x\\\"\"} 3\n"),
            "{t}"
        );
        assert!(
            t.contains("memliner_namespace_errors_total{namespace=\"host/12/\\\"x\\\"\"} 4\n"),
            "{t}"
        );
        // Every server metric named in the contracts (what `memliner top` reads among them) is
        // on the page, and so is every one the dashboard in the repository draws.
        for name in server::ALL {
            assert!(
                t.contains(&format!("# TYPE {name} ")),
                "{name} is named but not served"
            );
        }
        let dashboard = include_str!("../../scripts/grafana/memliner.json");
        for prefix in ["memliner_server_", "memliner_namespace_"] {
            for (i, _) in dashboard.match_indices(prefix) {
                let rest = &dashboard[i..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                assert!(
                    t.lines().any(|l| l.starts_with(name)),
                    "the dashboard draws {name}, which the server does not serve"
                );
            }
        }
        // Every sample line belongs to a family declared just before it.
        let mut declared = String::new();
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared = rest.split(' ').next().unwrap().to_string();
            } else if !line.starts_with('#') {
                assert!(line.starts_with(&declared), "{line} outside {declared}");
            }
        }
    }

    #[test]
    fn an_exposition_puts_common_labels_first_and_writes_histograms_cumulatively() {
        let mut e = Exposition::new(&[("pid", "7"), ("host", "a\"b")]);
        e.single("x_total", "counter", "X.", 3u32);
        e.family("lat_seconds", "histogram", "L.");
        e.histogram(
            "lat_seconds",
            &[("source", "remote")],
            &[(0.001, 2), (0.01, 5)],
            0.02,
            6,
        );
        let t = e.finish();
        assert!(
            t.contains("# TYPE x_total counter\nx_total{pid=\"7\",host=\"a\\\"b\"} 3\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "lat_seconds_bucket{pid=\"7\",host=\"a\\\"b\",source=\"remote\",le=\"0.01\"} 5\n"
            ),
            "{t}"
        );
        assert!(t.contains("le=\"+Inf\"} 6\n"), "{t}");
        assert!(
            t.contains("lat_seconds_count{pid=\"7\",host=\"a\\\"b\",source=\"remote\"} 6\n"),
            "{t}"
        );
        let mut e = Exposition::new(&[]);
        e.single("y", "gauge", "Y.", 1.5);
        assert_eq!(e.finish(), "# HELP y Y.\n# TYPE y gauge\ny 1.5\n");
    }
}
