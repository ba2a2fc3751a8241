//! TCP client for the memory server: a small pool of connections, each pipelining up to
//! [`WINDOW`] frames before it waits for the first reply.

use std::io::{BufReader, BufWriter, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use crate::protocol::{
    self, code, read_frame, Hello, Lane, Op, Reply, Request, MAX_BATCH, PAGE_SIZE,
};
use crate::store::{thread_lane, ClientOptions, PageStore, StoreError};

/// Frames in flight per connection. Replies to reads are large and requests to writes are large,
/// never both, so a bounded window cannot deadlock on full socket buffers.
pub const WINDOW: usize = 8;

struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    next_request: u64,
    lane: Lane,
}

/// A [`PageStore`] on a memory server reached over TCP.
pub struct TcpStore {
    addr: String,
    options: ClientOptions,
    /// The namespace's session key, from the first hello's reply: every later connection
    /// presents it.
    key: Mutex<Option<protocol::SessionKey>>,
    pool: Vec<Mutex<Option<Conn>>>,
    capacity_pages: u64,
}

impl TcpStore {
    /// Connects (one connection now, the rest on first use) and says hello.
    pub fn connect(addr: &str, options: ClientOptions) -> Result<TcpStore, StoreError> {
        let mut store = TcpStore {
            addr: addr.to_string(),
            pool: (0..options.connections.max(1) + 2)
                .map(|_| Mutex::new(None))
                .collect(),
            options,
            key: Mutex::new(None),
            capacity_pages: 0,
        };
        let (conn, capacity) = store.open(Lane::Demand)?;
        store.capacity_pages = capacity;
        *store.pool[0].lock().unwrap() = Some(conn);
        Ok(store)
    }

    /// Pages the server can hold in all (across all its clients).
    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    fn io(&self, error: std::io::Error) -> StoreError {
        let error = name_timeout(error, self.options.deadline);
        StoreError::Io {
            store: self.describe(),
            error,
        }
    }

    fn protocol_error(&self, message: String) -> StoreError {
        StoreError::Protocol {
            store: self.describe(),
            message,
        }
    }

    fn frame_error(&self, e: protocol::FrameError) -> StoreError {
        match e {
            protocol::FrameError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => self
                .io(std::io::Error::new(
                    e.kind(),
                    "the server closed the connection",
                )),
            protocol::FrameError::Io(e) => self.io(e),
            protocol::FrameError::Malformed(m) => self.protocol_error(m),
        }
    }

    fn refused(&self, code: u16, message: String) -> StoreError {
        StoreError::Refused {
            store: self.describe(),
            code,
            message,
        }
    }

    fn open(&self, lane: Lane) -> Result<(Conn, u64), StoreError> {
        let addrs: Vec<_> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.io(e))?
            .collect();
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in addrs {
            let wait = self.options.deadline.unwrap_or(Duration::from_secs(5));
            match TcpStream::connect_timeout(&a, wait) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let stream = stream.ok_or_else(|| self.io(last))?;
        stream.set_nodelay(true).map_err(|e| self.io(e))?;
        // Every wait for this server is bounded: a silent server (a hung host, a pulled cable,
        // a stopped process) fails the request like a closed connection, and a replicated
        // store reads the other copy.
        bound_waits(&stream, self.options.deadline).map_err(|e| self.io(e))?;
        let mut conn = Conn {
            reader: BufReader::with_capacity(
                256 << 10,
                stream.try_clone().map_err(|e| self.io(e))?,
            ),
            writer: BufWriter::with_capacity(256 << 10, stream),
            next_request: 1,
            lane,
        };
        Request::Hello(Hello {
            token: self.options.token.clone(),
            namespace: self.options.namespace.clone(),
            lane,
            key: *self.key.lock().unwrap(),
        })
        .write_to(&mut conn.writer, 0)
        .map_err(|e| self.io(e))?;
        conn.writer.flush().map_err(|e| self.io(e))?;
        let mut payload = Vec::new();
        let h = read_frame(&mut conn.reader, &mut payload).map_err(|e| self.frame_error(e))?;
        match Reply::decode(h.op, &payload).map_err(|e| self.protocol_error(e))? {
            Reply::HelloOk(ok) => {
                if ok.page_size as usize != PAGE_SIZE {
                    return Err(self.protocol_error(format!(
                        "server pages are {} bytes, this client's are {PAGE_SIZE}",
                        ok.page_size
                    )));
                }
                if let Some(k) = ok.key {
                    *self.key.lock().unwrap() = Some(k);
                }
                Ok((conn, ok.capacity_pages))
            }
            Reply::Error { code, message } => Err(self.refused(code, message)),
            other => {
                Err(self.protocol_error(format!("unexpected {:?} in reply to hello", other.op())))
            }
        }
    }

    /// Runs `f` on a free pooled connection (opening it if needed). A connection that failed is
    /// dropped, so that a later call reconnects rather than read a stale reply.
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // The lane's own connections: demand callers share the first ones (a free one if
        // there is one, else wait for the first), prefetch and reclaim have one each.
        let demand = self.pool.len() - 2;
        let lane = thread_lane();
        let conns = match lane {
            Lane::Demand => &self.pool[..demand],
            Lane::Prefetch => &self.pool[demand..demand + 1],
            Lane::Reclaim => &self.pool[demand + 1..],
        };
        let mut slot = conns
            .iter()
            .find_map(|m| m.try_lock().ok())
            .unwrap_or_else(|| conns[0].lock().unwrap());
        if slot.is_none() {
            *slot = Some(self.open(lane)?.0);
        }
        let result = f(slot.as_mut().unwrap());
        // A refusal is an answer: the stream is in step (see `pipeline`) and the namespace
        // must not lose its connection over it. Anything else may have left replies unread.
        if matches!(result, Err(ref e) if !matches!(e, StoreError::Refused { .. })) {
            *slot = None;
        }
        result
    }

    /// Sends `requests` with at most [`WINDOW`] in flight and hands each reply, in order, to
    /// `on_reply` after checking it answers its request with the `expect`ed op (a refusal is
    /// the server's error).
    fn pipeline(
        &self,
        conn: &mut Conn,
        requests: &[Request<'_>],
        expect: Op,
        mut on_reply: impl FnMut(usize, Reply<'_>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let first = conn.next_request;
        conn.next_request += requests.len() as u64;
        let mut sent = 0;
        let mut payload = Vec::new();
        for done in 0..requests.len() {
            while sent < requests.len() && sent < done + WINDOW {
                requests[sent]
                    .write_to(&mut conn.writer, first + sent as u64)
                    .map_err(|e| self.io(e))?;
                sent += 1;
            }
            conn.writer.flush().map_err(|e| self.io(e))?;
            // Only a demand read has a thread waiting on it: the other lanes block.
            if conn.lane == Lane::Demand && conn.reader.buffer().is_empty() {
                spin_until_readable(conn.reader.get_ref());
            }
            let h = read_frame(&mut conn.reader, &mut payload).map_err(|e| self.frame_error(e))?;
            let reply = Reply::decode(h.op, &payload).map_err(|e| self.protocol_error(e))?;
            if let Reply::Error { code, message } = reply {
                // Read the replies of the requests already sent, so the connection stays in
                // step for the next caller.
                for _ in done + 1..sent {
                    read_frame(&mut conn.reader, &mut payload).map_err(|e| self.frame_error(e))?;
                }
                return Err(self.refused(code, message));
            }
            if h.op != expect || h.request != first + done as u64 {
                return Err(self.protocol_error(format!(
                    "expected {expect:?} for request {}, got {:?} for {}",
                    first + done as u64,
                    h.op,
                    h.request
                )));
            }
            on_reply(done, reply)?;
        }
        Ok(())
    }

    /// Server-side counters.
    pub fn server_stats(&self) -> Result<protocol::ServerStats, StoreError> {
        self.with_conn(|conn| {
            let mut stats = None;
            self.pipeline(conn, &[Request::Stats], Op::StatsOk, |_, r| {
                if let Reply::StatsOk(s) = r {
                    stats = Some(s);
                }
                Ok(())
            })?;
            stats.ok_or_else(|| self.protocol_error("no stats in the stats reply".into()))
        })
    }
}

impl PageStore for TcpStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        assert_eq!(out.len(), ids.len() * PAGE_SIZE);
        let requests: Vec<Request<'_>> = ids
            .chunks(MAX_BATCH)
            .map(|c| Request::Read { ids: c.into() })
            .collect();
        self.with_conn(|conn| {
            let mut chunks = out.chunks_mut(MAX_BATCH * PAGE_SIZE);
            self.pipeline(conn, &requests, Op::ReadOk, |_, reply| {
                let dst = chunks.next().unwrap();
                let Reply::ReadOk(data) = reply else {
                    unreachable!("pipeline checked the op")
                };
                if data.len() != dst.len() {
                    return Err(self.protocol_error(format!(
                        "read reply of {} bytes for {} pages",
                        data.len(),
                        dst.len() / PAGE_SIZE
                    )));
                }
                dst.copy_from_slice(data);
                Ok(())
            })
        })
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        assert_eq!(data.len(), ids.len() * PAGE_SIZE);
        let requests: Vec<Request<'_>> = ids
            .chunks(MAX_BATCH)
            .zip(data.chunks(MAX_BATCH * PAGE_SIZE))
            .map(|(c, d)| Request::Write {
                ids: c.into(),
                data: d,
            })
            .collect();
        self.with_conn(|conn| self.pipeline(conn, &requests, Op::WriteOk, |_, _| Ok(())))
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        let requests: Vec<Request<'_>> = ids
            .chunks(MAX_BATCH)
            .map(|c| Request::Free { ids: c.into() })
            .collect();
        self.with_conn(|conn| self.pipeline(conn, &requests, Op::FreeOk, |_, _| Ok(())))
    }

    fn describe(&self) -> String {
        format!("tcp://{}", self.addr)
    }
}

/// `error` as the user should read it: a socket timeout (SO_RCVTIMEO, SO_SNDTIMEO) reads as
/// EAGAIN, which says nothing; with a `deadline` set, it means the server did not answer in time.
pub(crate) fn name_timeout(error: std::io::Error, deadline: Option<Duration>) -> std::io::Error {
    match (error.kind(), deadline) {
        (std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut, Some(d)) => {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer within the {} deadline",
                    crate::units::format_duration(d)
                ),
            )
        }
        _ => error,
    }
}

/// Bounds every wait on a connection to a server by `deadline` (`None`: TCP's own): a read or
/// a write that blocks longer fails (SO_RCVTIMEO, SO_SNDTIMEO), so does data the server's host
/// leaves unacknowledged that long (TCP_USER_TIMEOUT: a write the kernel took is no proof of
/// delivery), and an idle connection is probed every second or `deadline`, whichever is
/// longer (keepalive), so that a host gone between requests is found before the next request
/// waits on it.
pub(crate) fn bound_waits(stream: &TcpStream, deadline: Option<Duration>) -> std::io::Result<()> {
    stream.set_read_timeout(deadline)?;
    stream.set_write_timeout(deadline)?;
    let Some(d) = deadline else {
        return Ok(());
    };
    let sock = socket2::SockRef::from(stream);
    sock.set_tcp_user_timeout(Some(d))?;
    let probe = d.max(Duration::from_secs(1));
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(probe)
            .with_interval(probe)
            .with_retries(3),
    )
}

/// Polls the socket without blocking until data is there, while [`memliner_cpu::spin`] allows it
/// (a core is idle, at most [`memliner_cpu::spin::SPIN`]); the caller then blocks in `read`.
#[allow(unsafe_code)]
pub fn spin_until_readable(stream: &impl std::os::fd::AsFd) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_fd().as_raw_fd();
    let mut b = 0u8;
    memliner_cpu::spin::spin_until(|| {
        // SAFETY: a one-byte peek into a local; MSG_DONTWAIT never blocks.
        let n = unsafe {
            libc::recv(
                fd,
                (&mut b as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n != -1
    });
}

/// True if `e` is the server saying it is out of room.
pub fn is_capacity_error(e: &StoreError) -> bool {
    matches!(e, StoreError::Refused { code: c, .. } if *c == code::CAPACITY)
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStore")
            .field("addr", &self.addr)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Header, HelloOk, SessionKey};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_deadline_bounds_reads_writes_unacknowledged_data_and_idle_connections() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let d = Duration::from_millis(500);
        bound_waits(&s, Some(d)).unwrap();
        let sock = socket2::SockRef::from(&s);
        assert_eq!(
            (s.read_timeout().unwrap(), s.write_timeout().unwrap()),
            (Some(d), Some(d))
        );
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(d));
        assert!(sock.keepalive().unwrap());
        let second = Duration::from_secs(1);
        assert_eq!(sock.tcp_keepalive_time().unwrap(), second);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), second);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
        // No deadline: TCP's own waits, nothing probed.
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        bound_waits(&s, None).unwrap();
        assert_eq!(s.read_timeout().unwrap(), None);
        assert!(!socket2::SockRef::from(&s).keepalive().unwrap());
    }

    /// A server that says hello to every connection and answers each request with what
    /// `script` writes (given the request's header and its number among all requests); the
    /// hellos are counted.
    fn scripted(
        script: impl Fn(&Header, usize, &mut TcpStream) + Send + Sync + 'static,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let hellos = Arc::new(AtomicUsize::new(0));
        let (script, counted) = (Arc::new(script), hellos.clone());
        std::thread::spawn(move || {
            let requests = Arc::new(AtomicUsize::new(0));
            for stream in listener.incoming() {
                let (mut s, script, counted, requests) = (
                    stream.unwrap(),
                    script.clone(),
                    counted.clone(),
                    requests.clone(),
                );
                std::thread::spawn(move || {
                    let mut payload = Vec::new();
                    while let Ok(h) = read_frame(&mut s, &mut payload) {
                        if h.op == Op::Hello {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let ok = Reply::HelloOk(HelloOk {
                                page_size: PAGE_SIZE as u32,
                                capacity_pages: 100,
                                key: Some(SessionKey([1; 16])),
                            });
                            ok.write_to(&mut s, h.request).unwrap();
                        } else {
                            script(&h, requests.fetch_add(1, Ordering::SeqCst), &mut s);
                        }
                    }
                });
            }
        });
        (addr, hellos)
    }

    fn client(addr: &str) -> TcpStore {
        TcpStore::connect(
            addr,
            ClientOptions {
                token: String::new(),
                namespace: "test".into(),
                connections: 1,
                deadline: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn a_server_that_stops_answering_fails_the_request_at_the_deadline() {
        // Answers the first read, then reads requests and never answers (a hung server: the
        // connection stays open).
        let (addr, hellos) = scripted(|h, n, s| {
            if n == 0 {
                Reply::ReadOk(&[5u8; PAGE_SIZE])
                    .write_to(s, h.request)
                    .unwrap();
            }
        });
        let c = TcpStore::connect(
            &addr,
            ClientOptions {
                namespace: "test".into(),
                connections: 1,
                deadline: Some(Duration::from_millis(200)),
                ..Default::default()
            },
        )
        .unwrap();
        let mut out = vec![0u8; PAGE_SIZE];
        c.read_pages(&[1], &mut out).unwrap();
        assert_eq!(out, vec![5u8; PAGE_SIZE]);
        let e = c.read_pages(&[1], &mut out).unwrap_err();
        assert!(
            matches!(&e, StoreError::Io { error, .. } if error.kind() == std::io::ErrorKind::TimedOut),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("no answer within the 200ms deadline"),
            "{e}"
        );
        // The connection was dropped: the next request says hello on a new one.
        let _ = c.read_pages(&[1], &mut out);
        assert_eq!(hellos.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_reply_to_another_request_is_a_protocol_error_and_the_connection_is_replaced() {
        let (addr, hellos) = scripted(|h, n, s| {
            // The first answer names the wrong request; later ones are right.
            let request = if n == 0 { h.request + 7 } else { h.request };
            Reply::ReadOk(&[3u8; PAGE_SIZE])
                .write_to(s, request)
                .unwrap();
        });
        let store = client(&addr);
        let mut page = vec![0u8; PAGE_SIZE];
        let e = store.read_pages(&[5], &mut page).unwrap_err();
        assert!(
            matches!(&e, StoreError::Protocol { message, .. } if message.contains("expected ReadOk for request 1, got ReadOk for 8")),
            "{e}"
        );
        // The next call does not read the stale stream: it says hello on a new connection.
        store.read_pages(&[5], &mut page).unwrap();
        assert_eq!(page, vec![3u8; PAGE_SIZE]);
        assert_eq!(hellos.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_refusal_inside_a_pipelined_batch_keeps_the_connection_in_step() {
        let (addr, hellos) = scripted(|h, n, s| {
            if n == 1 {
                Reply::Error {
                    code: code::CAPACITY,
                    message: "capacity of 1 pages exhausted".into(),
                }
                .write_to(s, h.request)
                .unwrap();
            } else if h.op == Op::Write {
                Reply::WriteOk.write_to(s, h.request).unwrap();
            } else {
                Reply::FreeOk.write_to(s, h.request).unwrap();
            }
        });
        let store = client(&addr);
        // Three frames in flight (MAX_BATCH pages each, and one more); the second is refused.
        let ids: Vec<u64> = (0..2 * MAX_BATCH as u64 + 1).collect();
        let data = vec![0u8; ids.len() * PAGE_SIZE];
        let e = store.write_pages(&ids, &data).unwrap_err();
        assert!(is_capacity_error(&e), "{e}");
        assert_eq!(
            e.to_string(),
            format!("memory server tcp://{addr} refused: capacity of 1 pages exhausted")
        );
        // The third reply was read with it: the same connection answers the next request.
        store.free_pages(&[1]).unwrap();
        assert_eq!(hellos.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_short_read_reply_and_a_server_gone_mid_reply_are_errors() {
        let (addr, _) = scripted(|h, n, s| {
            if n == 0 {
                Reply::ReadOk(&[0u8; 100]).write_to(s, h.request).unwrap();
            } else {
                // Half a frame, then the connection goes.
                let mut frame = Vec::new();
                Reply::ReadOk(&[0u8; PAGE_SIZE])
                    .write_to(&mut frame, h.request)
                    .unwrap();
                s.write_all(&frame[..frame.len() / 2]).unwrap();
                s.shutdown(std::net::Shutdown::Both).unwrap();
            }
        });
        let store = client(&addr);
        let mut page = vec![0u8; PAGE_SIZE];
        let e = store.read_pages(&[1], &mut page).unwrap_err();
        assert!(
            matches!(&e, StoreError::Protocol { message, .. } if message == "read reply of 100 bytes for 1 pages"),
            "{e}"
        );
        let e = store.read_pages(&[1], &mut page).unwrap_err();
        assert!(
            matches!(&e, StoreError::Io { error, .. } if error.to_string() == "the server closed the connection"),
            "{e}"
        );
    }
}
