//! The memory server's counters in the Prometheus text format, on an opt-in HTTP listener
//! (`memliner server --metrics ADDR`, `GET /metrics`): where cluster operators look first.
//!
//! The server hands a snapshot function over; this module only formats and serves.

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
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

type PerNamespace = fn(&NamespaceFigures) -> u64;

/// The per-namespace families: name, type, help, value.
const NAMESPACE_FAMILIES: [(&str, &str, &str, PerNamespace); 8] = [
    (
        "memliner_namespace_pages",
        "gauge",
        "Pages a namespace holds (stored, and one-sided slots granted).",
        |n| n.pages,
    ),
    (
        "memliner_namespace_connections",
        "gauge",
        "Connections open in a namespace.",
        |n| n.connections,
    ),
    (
        "memliner_namespace_read_pages_total",
        "counter",
        "Pages a namespace read over TCP.",
        |n| n.pages_read,
    ),
    (
        "memliner_namespace_written_pages_total",
        "counter",
        "Pages a namespace wrote over TCP.",
        |n| n.pages_written,
    ),
    (
        "memliner_namespace_read_bytes_total",
        "counter",
        "Page bytes a namespace read over TCP.",
        |n| n.pages_read * crate::protocol::PAGE_SIZE as u64,
    ),
    (
        "memliner_namespace_written_bytes_total",
        "counter",
        "Page bytes a namespace wrote over TCP.",
        |n| n.pages_written * crate::protocol::PAGE_SIZE as u64,
    ),
    (
        "memliner_namespace_freed_pages_total",
        "counter",
        "Pages a namespace freed.",
        |n| n.pages_freed,
    ),
    (
        "memliner_namespace_errors_total",
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
            "memliner_server_capacity_bytes",
            "gauge",
            "Bytes of page storage for all clients together.",
            f.capacity_pages * page,
        ),
        (
            "memliner_server_used_bytes",
            "gauge",
            "Bytes of page storage held by clients.",
            f.used_pages * page,
        ),
        (
            "memliner_server_connections",
            "gauge",
            "Client connections open.",
            f.connections,
        ),
        (
            "memliner_server_namespaces",
            "gauge",
            "Namespaces held (one per client JVM).",
            f.namespaces.len() as u64,
        ),
        (
            "memliner_server_read_bytes_total",
            "counter",
            "Page bytes read by clients over TCP.",
            f.pages_read * page,
        ),
        (
            "memliner_server_written_bytes_total",
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

/// A running metrics listener; [`MetricsListener::stop`] ends it.
pub struct MetricsListener {
    addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsListener {
    /// Serves `GET /metrics` on `listen` (`HOST:PORT`; port 0: any free one) with the figures
    /// `snapshot` gives at each scrape; anything else is a 404.
    pub fn start(
        listen: &str,
        snapshot: impl Fn() -> Figures + Send + 'static,
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
            .name("memliner-metrics".into())
            .stack_size(256 << 10)
            .spawn(move || {
                for request in h.incoming_requests() {
                    let path = request.url().split('?').next().unwrap_or("");
                    let response =
                        if *request.method() == tiny_http::Method::Get && path == "/metrics" {
                            tiny_http::Response::from_string(render(&snapshot())).with_header(
                                tiny_http::Header::from_bytes(
                                    &b"Content-Type"[..],
                                    &b"text/plain; version=0.0.4; charset=utf-8"[..],
                                )
                                .expect("a valid header"),
                            )
                        } else {
                            tiny_http::Response::from_string("memliner-server: GET /metrics\n")
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
}
