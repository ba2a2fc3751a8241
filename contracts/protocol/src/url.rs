//! Memory server addresses as URLs: `tcp://HOST:PORT`, or a bare `HOST:PORT` (TCP, as before
//! URLs), `fabric://HOST:PORT` for one-sided RDMA through libfabric (the port is the server's
//! control channel; its data endpoints listen where that channel says), and `unix:///PATH` for
//! one-sided pages in memory files of a server on this host (the swap backend's `memfile`). One type for
//! every place that names a server: the agent's `server=`, `memliner run --server`, `memliner
//! server --listen`, and the stats (which print it back).

use std::fmt;
use std::str::FromStr;

/// Servers one replicated store can spread over (its masks of copies are 16 bits): the most
/// URLs `server=A+B+...` takes.
pub const MAX_SERVERS: usize = 16;

/// How the pages travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Two-sided requests over a TCP connection (`tcp://`).
    Tcp,
    /// One-sided reads and writes through libfabric (`fabric://`).
    Fabric,
    /// One-sided copies in memory files a server on this host hands out (`unix://`).
    Unix,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Tcp => "tcp",
            Scheme::Fabric => "fabric",
            Scheme::Unix => "unix",
        }
    }
}

/// A memory server's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    pub scheme: Scheme,
    /// A host name, an IPv4 address, or an IPv6 address without its brackets; under
    /// [`Scheme::Unix`], the socket's absolute path.
    pub host: String,
    /// The port; 0 under [`Scheme::Unix`].
    pub port: u16,
}

impl ServerUrl {
    /// `HOST:PORT` as socket calls take it (IPv6 in brackets); a Unix socket's path.
    pub fn authority(&self) -> String {
        if self.scheme == Scheme::Unix {
            self.host.clone()
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Whether the host is a loopback address (or `localhost`).
    pub fn is_loopback(&self) -> bool {
        self.scheme == Scheme::Unix
            || self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A Unix path's "authority" is the path: unix:///run/x.sock.
        write!(f, "{}://{}", self.scheme.name(), self.authority())
    }
}

impl FromStr for ServerUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<ServerUrl, String> {
        const EXPECTED: &str =
            "expected tcp://HOST:PORT, fabric://HOST:PORT, unix:///PATH, or HOST:PORT";
        let (scheme, rest) = match s.split_once("://") {
            Some(("tcp", rest)) => (Scheme::Tcp, rest),
            Some(("fabric", rest)) => (Scheme::Fabric, rest),
            Some(("unix", path)) => {
                if !path.starts_with('/') || path.len() < 2 {
                    return Err(format!(
                        "'{s}': a unix:// address is the server socket's absolute path, as in unix:///run/memliner.sock"
                    ));
                }
                return Ok(ServerUrl {
                    scheme: Scheme::Unix,
                    host: path.to_string(),
                    port: 0,
                });
            }
            Some((other, _)) => {
                return Err(format!("'{s}': unknown scheme '{other}://' ({EXPECTED})"))
            }
            None => (Scheme::Tcp, s),
        };
        let bad = |why: &str| format!("'{s}': {why} ({EXPECTED})");
        if rest.contains('/') {
            return Err(bad("a server address has no path"));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (h, p) = v6
                .split_once("]:")
                .ok_or_else(|| bad("an IPv6 address is written [ADDR]:PORT"))?;
            h.parse::<std::net::Ipv6Addr>()
                .map_err(|_| bad("not an IPv6 address in the brackets"))?;
            (h, p)
        } else {
            rest.rsplit_once(':').ok_or_else(|| bad("no port"))?
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if host.contains(':') && !rest.starts_with('[') {
            return Err(bad("an IPv6 address is written [ADDR]:PORT"));
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?;
        Ok(ServerUrl {
            scheme,
            host: host.to_string(),
            port,
        })
    }
}

/// A listening address: like [`ServerUrl`], but port 0 (any free port) is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenUrl(pub ServerUrl);

impl FromStr for ListenUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<ListenUrl, String> {
        if s.starts_with("unix://") {
            return s.parse().map(ListenUrl);
        }
        // Port 0 is the one difference: parse with a stand-in port, then put 0 back.
        if let Some(head) = s.strip_suffix(":0") {
            let mut u: ServerUrl = format!("{head}:1").parse()?;
            u.port = 0;
            return Ok(ListenUrl(u));
        }
        s.parse().map(ListenUrl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> ServerUrl {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn bare_addresses_are_tcp_and_print_as_urls() {
        let u = url("mem1:7070");
        assert_eq!(
            (u.scheme, u.host.as_str(), u.port),
            (Scheme::Tcp, "mem1", 7070)
        );
        assert_eq!(u.to_string(), "tcp://mem1:7070");
        assert_eq!(url("tcp://10.0.0.2:1").authority(), "10.0.0.2:1");
        let v6 = url("tcp://[::1]:7070");
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.to_string(), "tcp://[::1]:7070");
        assert!(v6.is_loopback() && url("localhost:1").is_loopback());
        assert!(!url("10.1.1.1:9").is_loopback());
        // What Display prints parses back to the same address.
        for s in ["a:1", "tcp://h.example:65535", "[fe80::1]:80"] {
            assert_eq!(url(&url(s).to_string()), url(s));
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        let err = |s: &str| s.parse::<ServerUrl>().unwrap_err();
        assert!(err("rdma://h:1").contains("unknown scheme 'rdma://'"));
        assert_eq!(url("fabric://10.0.0.2:7070").scheme, Scheme::Fabric);
        assert_eq!(url("fabric://[::1]:7").to_string(), "fabric://[::1]:7");
        assert!(err("h").contains("no port"));
        assert!(err(":7070").contains("no host"));
        assert!(err("h:0").contains("1 to 65535"));
        assert!(err("h:70000").contains("1 to 65535"));
        assert!(err("tcp://h:1/x").contains("no path"));
        assert!(err("::1:7070").contains("[ADDR]:PORT"));
        assert!(err("[zz]:1").contains("IPv6"));
        assert!(err("unix://run/x.sock").contains("absolute path"));
        assert!(err("unix://").contains("absolute path"));
    }

    #[test]
    fn unix_addresses_are_socket_paths() {
        let u = url("unix:///run/memliner.sock");
        assert_eq!(
            (u.scheme, u.authority().as_str()),
            (Scheme::Unix, "/run/memliner.sock")
        );
        assert_eq!(u.to_string(), "unix:///run/memliner.sock");
        assert!(u.is_loopback());
        let l: ListenUrl = "unix:///tmp/a:0".parse().unwrap();
        assert_eq!(l.0.authority(), "/tmp/a:0", "a path is not a port");
    }

    #[test]
    fn listeners_may_take_any_free_port() {
        let l: ListenUrl = "tcp://127.0.0.1:0".parse().unwrap();
        assert_eq!(l.0.port, 0);
        assert_eq!(l.0.authority(), "127.0.0.1:0");
        assert!("127.0.0.1:x".parse::<ListenUrl>().is_err());
    }
}
