//! Wire format shared by the TCP client and the memory server: frames, and the typed
//! [`Request`]s and [`Reply`]s they carry, each encoded and decoded here only.
//!
//! Every frame is a fixed 20-byte header followed by `len` payload bytes, all little-endian:
//!
//! ```text
//!  0      4       5    6       8          16      20
//!  | magic | ver  | op | flags | request  | len   | payload ...
//!  | MLPG  | u8   | u8 | u16   | id u64   | u32   |
//! ```
//!
//! A client opens with `Hello` (token + namespace) and then sends any number of requests without
//! waiting for replies (pipelining); the server answers each request in order with the same
//! request id. Payloads:
//!
//! | op          | request payload                         | reply (op)                    |
//! |-------------|-----------------------------------------|-------------------------------|
//! | `Hello`     | u16 len + token, u16 len + namespace, optional u8 [`Lane`], optional 16-byte session key | `HelloOk`: u32 page size, u64 capacity pages, 16-byte session key |
//! | `Read`      | u32 count, count x u64 page id          | `ReadOk`: count x PAGE_SIZE bytes |
//! | `Write`     | u32 count, count x u64 page id, data    | `WriteOk`: empty              |
//! | `Free`      | u32 count, count x u64 page id          | `FreeOk`: empty               |
//! | `Stats`     | empty                                   | `StatsOk`: [`ServerStats`]    |
//! | `Attach`    | empty: this connection is a one-sided client's control channel | `AttachOk`: [`AttachOk`] |
//! | `Alloc`     | u32 need, u32 want                      | `AllocOk`: u32 n, n x [`Grant`] (need <= slots granted <= want) |
//! | `Release`   | u32 count, count x u64 grant's first slot | `ReleaseOk`: empty          |
//! | any         |                                         | `Error`: u16 code, utf-8 text |
//!
//! A frame with a bad magic, an unknown version or op, or a length over [`MAX_PAYLOAD`] is
//! malformed: the server logs why and closes that connection only.

use std::borrow::Cow;
use std::io::{self, Read, Write};

pub use crate::auth::SessionKey;

/// Size of one heap page on the wire.
pub const PAGE_SIZE: usize = 4096;
/// "MLPG" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"MLPG");
/// Bumped on any incompatible change of this module.
pub const VERSION: u8 = 1;
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 20;
/// Most pages one Read/Write/Free frame may carry.
pub const MAX_BATCH: usize = 256;
/// Most slots one alloc asks for (64 MiB: a `unix://` grant is one memory file, and a large
/// heap should need few).
pub const MAX_ALLOC: u32 = 16384;
/// Largest payload accepted: a full write batch plus its ids, with room to spare.
pub const MAX_PAYLOAD: usize = 4 + MAX_BATCH * (8 + PAGE_SIZE) + 4096;

/// Frame operation codes. Replies have the high bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::FromRepr)]
#[repr(u8)]
pub enum Op {
    Hello = 0x01,
    Read = 0x02,
    Write = 0x03,
    Free = 0x04,
    Stats = 0x05,
    Attach = 0x06,
    Alloc = 0x07,
    Release = 0x08,
    HelloOk = 0x81,
    ReadOk = 0x82,
    WriteOk = 0x83,
    FreeOk = 0x84,
    StatsOk = 0x85,
    AttachOk = 0x86,
    AllocOk = 0x87,
    ReleaseOk = 0x88,
    Error = 0xFF,
}

/// Error codes carried by `Error` frames.
pub mod code {
    /// The hello's token did not match the server's.
    pub const AUTH: u16 = 1;
    /// The server has no room for more pages.
    pub const CAPACITY: u16 = 2;
    /// A read named a page this namespace never wrote.
    pub const NOT_FOUND: u16 = 3;
    /// The request was well framed but made no sense (bad count, request before hello).
    pub const BAD_REQUEST: u16 = 4;
    /// The namespace's quota is used up.
    pub const QUOTA: u16 = 5;
    /// The namespace belongs to another client (no or a wrong session key), or is gone.
    pub const SESSION: u16 = 6;
    /// A limit of the server's: connections, connections of one client, the hello deadline.
    pub const LIMIT: u16 = 7;
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub op: Op,
    pub flags: u16,
    pub request: u64,
    pub len: u32,
}

/// Why a frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended or failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bytes are not a frame of this protocol version.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.op as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.request.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
        if magic != MAGIC {
            return Err(FrameError::Malformed(format!("bad magic {magic:#010x}")));
        }
        if b[4] != VERSION {
            return Err(FrameError::Malformed(format!(
                "protocol version {} (this side speaks {VERSION})",
                b[4]
            )));
        }
        let op = Op::from_repr(b[5])
            .ok_or_else(|| FrameError::Malformed(format!("unknown op {:#04x}", b[5])))?;
        let len = u32::from_le_bytes(b[16..20].try_into().unwrap());
        if len as usize > MAX_PAYLOAD {
            return Err(FrameError::Malformed(format!(
                "payload of {len} bytes exceeds the limit of {MAX_PAYLOAD}"
            )));
        }
        Ok(Header {
            op,
            flags: u16::from_le_bytes(b[6..8].try_into().unwrap()),
            request: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            len,
        })
    }
}

/// Reads one frame; `payload` is resized to the payload length and reused across calls.
pub fn read_frame(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Header, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    r.read_exact(&mut hb)?;
    let h = Header::decode(&hb)?;
    payload.resize(h.len as usize, 0);
    r.read_exact(payload)?;
    Ok(h)
}

/// Writes one frame made of a header and payload pieces (not flushed).
pub fn write_frame(w: &mut impl Write, op: Op, request: u64, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    debug_assert!(len <= MAX_PAYLOAD);
    let h = Header {
        op,
        flags: 0,
        request,
        len: len as u32,
    };
    w.write_all(&h.encode())?;
    for p in parts {
        w.write_all(p)?;
    }
    Ok(())
}

/// Encodes a page-id list as `u32 count, count x u64`.
pub fn encode_ids(ids: &[u64]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + ids.len() * 8);
    v.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// Decodes `u32 count, count x u64` from the front of `p`; returns the ids and the rest.
pub fn decode_ids(p: &[u8]) -> Result<(Vec<u64>, &[u8]), String> {
    if p.len() < 4 {
        return Err("payload too short for a page count".into());
    }
    let n = u32::from_le_bytes(p[0..4].try_into().unwrap()) as usize;
    if n > MAX_BATCH {
        return Err(format!(
            "batch of {n} pages exceeds the limit of {MAX_BATCH}"
        ));
    }
    let end = 4 + n * 8;
    if p.len() < end {
        return Err(format!("payload too short for {n} page ids"));
    }
    let ids = p[4..end]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    Ok((ids, &p[end..]))
}

/// Encodes a length-prefixed (u16) string.
pub fn encode_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// Which traffic a connection carries. Each lane has connections of its own, so a demand
/// read never waits behind a prefetch window or a write-back on the same socket; only the
/// demand lane is latency-bound, so only there do the client and the server spin for the
/// next frame. Sent as one byte after the hello's namespace (absent: demand, which is what
/// clients before lanes were).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Fault handlers: the faulting thread waits for these.
    Demand = 0,
    /// Prefetch workers.
    Prefetch = 1,
    /// The background reclaimer's write-backs.
    Reclaim = 2,
}

impl Lane {
    /// The lane byte of a hello's tail (empty: demand).
    pub fn decode(tail: &[u8]) -> Result<Lane, String> {
        match tail.first() {
            None | Some(0) => Ok(Lane::Demand),
            Some(1) => Ok(Lane::Prefetch),
            Some(2) => Ok(Lane::Reclaim),
            Some(b) => Err(format!("unknown lane {b} in hello")),
        }
    }
}

/// Decodes a length-prefixed (u16) string from the front of `p`; returns it and the rest.
pub fn decode_str(p: &[u8]) -> Result<(String, &[u8]), String> {
    if p.len() < 2 {
        return Err("payload too short for a string length".into());
    }
    let n = u16::from_le_bytes([p[0], p[1]]) as usize;
    if p.len() < 2 + n {
        return Err("payload too short for its string".into());
    }
    let s = std::str::from_utf8(&p[2..2 + n]).map_err(|_| "string is not utf-8".to_string())?;
    Ok((s.to_string(), &p[2 + n..]))
}

/// Counters the server reports in a `StatsOk` frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub pages_stored: u64,
    pub capacity_pages: u64,
    pub namespaces: u64,
    pub pages_read: u64,
    pub pages_written: u64,
}

impl ServerStats {
    pub fn encode(&self) -> Vec<u8> {
        [
            self.pages_stored,
            self.capacity_pages,
            self.namespaces,
            self.pages_read,
            self.pages_written,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }

    pub fn decode(p: &[u8]) -> Option<ServerStats> {
        if p.len() < 40 {
            return None;
        }
        let f = |i: usize| u64::from_le_bytes(p[i * 8..i * 8 + 8].try_into().unwrap());
        Some(ServerStats {
            pages_stored: f(0),
            capacity_pages: f(1),
            namespaces: f(2),
            pages_read: f(3),
            pages_written: f(4),
        })
    }
}

/// A client's first frame: its token, its namespace, the lane the connection serves, and the
/// namespace's session key when the client holds one (its later connections, a reconnect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub token: String,
    pub namespace: String,
    pub lane: Lane,
    pub key: Option<SessionKey>,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        encode_str(&mut v, &self.token);
        encode_str(&mut v, &self.namespace);
        v.push(self.lane as u8);
        if let Some(k) = &self.key {
            v.extend_from_slice(&k.0);
        }
        v
    }

    pub fn decode(p: &[u8]) -> Result<Hello, String> {
        let (token, rest) = decode_str(p)?;
        let (namespace, rest) = decode_str(rest)?;
        let lane = Lane::decode(rest)?;
        let key = match rest.get(1..) {
            None | Some([]) => None,
            Some(k) => Some(SessionKey(k.try_into().map_err(|_| {
                format!("hello's session key has {} bytes, not 16", k.len())
            })?)),
        };
        Ok(Hello {
            token,
            namespace,
            lane,
            key,
        })
    }
}

/// The server's answer to a hello: its page size, its capacity, and the namespace's session
/// key (absent from servers before keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloOk {
    pub page_size: u32,
    pub capacity_pages: u64,
    pub key: Option<SessionKey>,
}

impl HelloOk {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(28);
        b.extend_from_slice(&self.page_size.to_le_bytes());
        b.extend_from_slice(&self.capacity_pages.to_le_bytes());
        if let Some(k) = &self.key {
            b.extend_from_slice(&k.0);
        }
        b
    }

    pub fn decode(p: &[u8]) -> Result<HelloOk, String> {
        if p.len() != 12 && p.len() != 28 {
            return Err(format!(
                "hello reply of {} bytes, expected 12 or 28",
                p.len()
            ));
        }
        Ok(HelloOk {
            page_size: u32::from_le_bytes(p[0..4].try_into().unwrap()),
            capacity_pages: u64::from_le_bytes(p[4..12].try_into().unwrap()),
            key: p.get(12..28).map(|k| SessionKey(k.try_into().unwrap())),
        })
    }
}

/// Slots of a one-sided server's pool handed to one client: consecutive slots from `slot` on,
/// registered for that client alone (its own key, revoked when the grant is given back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The first slot.
    pub slot: u64,
    pub pages: u64,
    /// The remote address of the first slot's first byte: its virtual address where the
    /// provider wants those (`FI_MR_VIRT_ADDR`), else 0 (offsets into the grant).
    pub addr: u64,
    pub key: u64,
}

impl Grant {
    const LEN: usize = 32;

    /// Whether slot `s` is one of this grant's.
    pub fn holds(&self, s: u64) -> bool {
        s >= self.slot && s - self.slot < self.pages
    }

    fn encode_all(grants: &[Grant]) -> Vec<u8> {
        let mut v = (grants.len() as u32).to_le_bytes().to_vec();
        for g in grants {
            for x in [g.slot, g.pages, g.addr, g.key] {
                v.extend_from_slice(&x.to_le_bytes());
            }
        }
        v
    }

    fn decode_all(p: &[u8]) -> Result<Vec<Grant>, String> {
        let n = u32::from_le_bytes(
            p.get(0..4)
                .ok_or("alloc reply too short")?
                .try_into()
                .unwrap(),
        ) as usize;
        let body = &p[4..];
        if body.len() != n.saturating_mul(Grant::LEN) {
            return Err(format!("alloc reply: {} bytes for {n} grants", body.len()));
        }
        let at = |c: &[u8], i: usize| u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap());
        body.chunks_exact(Grant::LEN)
            .map(|c| {
                let g = Grant {
                    slot: at(c, 0),
                    pages: at(c, 1),
                    addr: at(c, 2),
                    key: at(c, 3),
                };
                if g.pages == 0 || g.pages > u64::from(MAX_ALLOC) {
                    return Err(format!("alloc reply: a grant of {} slots", g.pages));
                }
                Ok(g)
            })
            .collect()
    }
}

/// What a one-sided client's data endpoint sends with its connection request (libfabric's
/// connection data): this protocol's magic and version, then the session its control channel
/// was given in [`AttachOk`]. The server accepts a data connection only for a live session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectData {
    pub session: u64,
}

impl ConnectData {
    /// Bytes on the wire: magic (4), version (1), zeros (3), session (8).
    pub const LEN: usize = 16;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[8..16].copy_from_slice(&self.session.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<ConnectData, String> {
        if b.len() < Self::LEN {
            return Err(format!(
                "{} bytes of connection data, not {}",
                b.len(),
                Self::LEN
            ));
        }
        if b[0..4] != MAGIC.to_le_bytes() {
            return Err("connection data of another protocol".into());
        }
        if b[4] != VERSION {
            return Err(format!(
                "connection data of protocol version {}, this server speaks {VERSION}",
                b[4]
            ));
        }
        Ok(ConnectData {
            session: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        })
    }
}

/// The answer to `Attach`: where the one-sided endpoint listens. Slots come with `Alloc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachOk {
    /// The fabric listener's port, on the host the control channel reached.
    pub port: u16,
    /// Sent with every data connection: the server accepts only its live clients' sessions
    /// and tears a session's endpoints down before its slots can go to anyone else.
    pub session: u64,
    /// The provider the server listens with (`tcp`, `verbs`, `shm`, `verbs;ofi_rxm`).
    pub provider: String,
    /// The server's endpoint name where it listens with reliable datagrams (`FI_EP_RDM`),
    /// which the client inserts into its address vector; empty over connected endpoints
    /// (`FI_EP_MSG`, reached at `port`). Sent only when not empty (a u16 length, then the
    /// bytes), so clients from before it still read a connected server's reply.
    pub endpoint: Vec<u8>,
}

impl AttachOk {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&self.port.to_le_bytes());
        v.extend_from_slice(&self.session.to_le_bytes());
        encode_str(&mut v, &self.provider);
        if !self.endpoint.is_empty() {
            let b = &self.endpoint[..self.endpoint.len().min(u16::MAX as usize)];
            v.extend_from_slice(&(b.len() as u16).to_le_bytes());
            v.extend_from_slice(b);
        }
        v
    }

    pub fn decode(p: &[u8]) -> Result<AttachOk, String> {
        let short = || "attach reply too short".to_string();
        let port = u16::from_le_bytes(p.get(0..2).ok_or_else(short)?.try_into().unwrap());
        let session = u64::from_le_bytes(p.get(2..10).ok_or_else(short)?.try_into().unwrap());
        let (provider, rest) = decode_str(p.get(10..).ok_or_else(short)?)?;
        let endpoint = match rest {
            [] => Vec::new(),
            [a, b, name @ ..] if name.len() == u16::from_le_bytes([*a, *b]) as usize => {
                name.to_vec()
            }
            [_, _, name @ ..] if !name.is_empty() => {
                return Err(format!(
                    "attach reply: an endpoint name of {} bytes where its length says {}",
                    name.len(),
                    u16::from_le_bytes([rest[0], rest[1]])
                ))
            }
            _ => return Err(format!("attach reply: {} bytes too many", rest.len())),
        };
        Ok(AttachOk {
            port,
            session,
            provider,
            endpoint,
        })
    }
}

/// What a client asks, decoded from a frame's op and payload (page data is borrowed).
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Hello(Hello),
    Read {
        ids: Cow<'a, [u64]>,
    },
    /// `data` holds `ids.len()` pages.
    Write {
        ids: Cow<'a, [u64]>,
        data: &'a [u8],
    },
    Free {
        ids: Cow<'a, [u64]>,
    },
    Stats,
    /// Makes this connection a one-sided client's control channel.
    Attach,
    /// Between `need` and `want` (at most [`MAX_ALLOC`]) free pool slots.
    Alloc {
        need: u32,
        want: u32,
    },
    /// Gives grants back, each named by its first slot.
    Release {
        grants: Cow<'a, [u64]>,
    },
}

impl<'a> Request<'a> {
    pub fn op(&self) -> Op {
        match self {
            Request::Hello(_) => Op::Hello,
            Request::Read { .. } => Op::Read,
            Request::Write { .. } => Op::Write,
            Request::Free { .. } => Op::Free,
            Request::Stats => Op::Stats,
            Request::Attach => Op::Attach,
            Request::Alloc { .. } => Op::Alloc,
            Request::Release { .. } => Op::Release,
        }
    }

    /// Decodes a request frame; an error says what is wrong with it (a reply op, a short or
    /// inconsistent payload).
    pub fn decode(op: Op, payload: &'a [u8]) -> Result<Request<'a>, String> {
        let ids_only = |p: &'a [u8]| -> Result<Cow<'a, [u64]>, String> {
            let (ids, rest) = decode_ids(p)?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the page ids", rest.len()));
            }
            Ok(ids.into())
        };
        Ok(match op {
            Op::Hello => Request::Hello(Hello::decode(payload)?),
            Op::Read => Request::Read {
                ids: ids_only(payload)?,
            },
            Op::Write => {
                let (ids, data) = decode_ids(payload)?;
                if data.len() != ids.len() * PAGE_SIZE {
                    return Err(format!(
                        "write of {} pages carries {} data bytes",
                        ids.len(),
                        data.len()
                    ));
                }
                Request::Write {
                    ids: ids.into(),
                    data,
                }
            }
            Op::Free => Request::Free {
                ids: ids_only(payload)?,
            },
            Op::Stats => Request::Stats,
            Op::Attach => Request::Attach,
            Op::Alloc => {
                let b: [u8; 8] = payload
                    .try_into()
                    .map_err(|_| format!("alloc of {} bytes, expected 8", payload.len()))?;
                let need = u32::from_le_bytes(b[0..4].try_into().unwrap());
                let want = u32::from_le_bytes(b[4..8].try_into().unwrap());
                if need > want || want > MAX_ALLOC {
                    return Err(format!(
                        "alloc of {need}..{want} slots (at most {MAX_ALLOC}, need <= want)"
                    ));
                }
                Request::Alloc { need, want }
            }
            Op::Release => Request::Release {
                grants: ids_only(payload)?,
            },
            other => return Err(format!("{other:?} is not a request")),
        })
    }

    /// Writes the request as one frame (not flushed).
    pub fn write_to(&self, w: &mut impl Write, request: u64) -> io::Result<()> {
        match self {
            Request::Hello(h) => write_frame(w, Op::Hello, request, &[&h.encode()]),
            Request::Read { ids } | Request::Free { ids } | Request::Release { grants: ids } => {
                write_frame(w, self.op(), request, &[&encode_ids(ids)])
            }
            Request::Write { ids, data } => {
                debug_assert_eq!(data.len(), ids.len() * PAGE_SIZE);
                write_frame(w, Op::Write, request, &[&encode_ids(ids), data])
            }
            Request::Stats | Request::Attach => write_frame(w, self.op(), request, &[]),
            Request::Alloc { need, want } => write_frame(
                w,
                Op::Alloc,
                request,
                &[&need.to_le_bytes(), &want.to_le_bytes()],
            ),
        }
    }
}

/// What the server answers, decoded from a frame's op and payload (page data is borrowed).
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    HelloOk(HelloOk),
    /// The pages read, in the order asked.
    ReadOk(&'a [u8]),
    WriteOk,
    FreeOk,
    StatsOk(ServerStats),
    AttachOk(AttachOk),
    /// The slots granted.
    AllocOk(Vec<Grant>),
    ReleaseOk,
    /// The request was refused: a [`code`] and a message for people.
    Error {
        code: u16,
        message: String,
    },
}

impl<'a> Reply<'a> {
    pub fn op(&self) -> Op {
        match self {
            Reply::HelloOk(_) => Op::HelloOk,
            Reply::ReadOk(_) => Op::ReadOk,
            Reply::WriteOk => Op::WriteOk,
            Reply::FreeOk => Op::FreeOk,
            Reply::StatsOk(_) => Op::StatsOk,
            Reply::AttachOk(_) => Op::AttachOk,
            Reply::AllocOk(_) => Op::AllocOk,
            Reply::ReleaseOk => Op::ReleaseOk,
            Reply::Error { .. } => Op::Error,
        }
    }

    pub fn decode(op: Op, payload: &'a [u8]) -> Result<Reply<'a>, String> {
        Ok(match op {
            Op::HelloOk => Reply::HelloOk(HelloOk::decode(payload)?),
            Op::ReadOk => Reply::ReadOk(payload),
            Op::WriteOk => Reply::WriteOk,
            Op::FreeOk => Reply::FreeOk,
            Op::StatsOk => {
                Reply::StatsOk(ServerStats::decode(payload).ok_or("short stats reply".to_string())?)
            }
            Op::AttachOk => Reply::AttachOk(AttachOk::decode(payload)?),
            Op::AllocOk => Reply::AllocOk(Grant::decode_all(payload)?),
            Op::ReleaseOk => Reply::ReleaseOk,
            Op::Error => Reply::Error {
                code: payload
                    .get(0..2)
                    .map_or(0, |b| u16::from_le_bytes([b[0], b[1]])),
                message: String::from_utf8_lossy(payload.get(2..).unwrap_or(&[])).into_owned(),
            },
            other => return Err(format!("{other:?} is not a reply")),
        })
    }

    /// Writes the reply as one frame (not flushed).
    pub fn write_to(&self, w: &mut impl Write, request: u64) -> io::Result<()> {
        match self {
            Reply::HelloOk(h) => write_frame(w, Op::HelloOk, request, &[&h.encode()]),
            Reply::ReadOk(data) => write_frame(w, Op::ReadOk, request, &[data]),
            Reply::WriteOk | Reply::FreeOk | Reply::ReleaseOk => {
                write_frame(w, self.op(), request, &[])
            }
            Reply::AttachOk(a) => write_frame(w, Op::AttachOk, request, &[&a.encode()]),
            Reply::AllocOk(grants) => {
                write_frame(w, Op::AllocOk, request, &[&Grant::encode_all(grants)])
            }
            Reply::StatsOk(s) => write_frame(w, Op::StatsOk, request, &[&s.encode()]),
            Reply::Error { code, message } => write_frame(
                w,
                Op::Error,
                request,
                &[&code.to_le_bytes(), message.as_bytes()],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_data_round_trips_and_names_what_is_wrong() {
        let d = ConnectData {
            session: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(ConnectData::decode(&d.encode()), Ok(d));
        assert!(ConnectData::decode(&d.encode()[..8])
            .unwrap_err()
            .contains("8 bytes of connection data"));
        let mut other = d.encode();
        other[4] = VERSION + 1;
        assert!(ConnectData::decode(&other)
            .unwrap_err()
            .contains("protocol version"));
        other[0] ^= 1;
        assert!(ConnectData::decode(&other)
            .unwrap_err()
            .contains("another protocol"));
    }

    #[test]
    fn header_round_trips() {
        let h = Header {
            op: Op::Write,
            flags: 7,
            request: 0xdead_beef_1234,
            len: 4100,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn header_rejects_bad_magic_version_op_and_length() {
        let good = Header {
            op: Op::Read,
            flags: 0,
            request: 1,
            len: 12,
        }
        .encode();
        let mut b = good;
        b[0] = b'X';
        assert!(format!("{}", Header::decode(&b).unwrap_err()).contains("bad magic"));
        let mut b = good;
        b[4] = 9;
        assert!(format!("{}", Header::decode(&b).unwrap_err()).contains("version 9"));
        let mut b = good;
        b[5] = 0x42;
        assert!(format!("{}", Header::decode(&b).unwrap_err()).contains("unknown op"));
        let mut b = good;
        b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(format!("{}", Header::decode(&b).unwrap_err()).contains("exceeds"));
    }

    #[test]
    fn ids_and_strings_round_trip_and_reject_truncation() {
        let enc = encode_ids(&[1, 2, u64::MAX]);
        let (ids, rest) = decode_ids(&enc).unwrap();
        assert_eq!(ids, vec![1, 2, u64::MAX]);
        assert!(rest.is_empty());
        assert!(decode_ids(&enc[..enc.len() - 1]).is_err());
        let mut too_many = Vec::new();
        too_many.extend_from_slice(&((MAX_BATCH as u32) + 1).to_le_bytes());
        assert!(decode_ids(&too_many).unwrap_err().contains("exceeds"));

        let mut s = Vec::new();
        encode_str(&mut s, "héllo");
        let (got, rest) = decode_str(&s).unwrap();
        assert_eq!(got, "héllo");
        assert!(rest.is_empty());
        assert!(decode_str(&s[..3]).is_err());
    }

    #[test]
    fn stats_round_trip() {
        let s = ServerStats {
            pages_stored: 1,
            capacity_pages: 2,
            namespaces: 3,
            pages_read: 4,
            pages_written: 5,
        };
        assert_eq!(ServerStats::decode(&s.encode()), Some(s));
    }

    /// Writes `write` as a frame and decodes it back with `decode`.
    fn frame<T>(write: impl Fn(&mut Vec<u8>), decode: impl Fn(Op, &[u8]) -> T) -> T {
        let mut buf = Vec::new();
        write(&mut buf);
        let mut payload = Vec::new();
        let h = read_frame(&mut buf.as_slice(), &mut payload).unwrap();
        assert_eq!(h.request, 42);
        decode(h.op, &payload)
    }

    #[test]
    fn requests_and_replies_round_trip_through_frames() {
        let page = vec![7u8; PAGE_SIZE * 2];
        let requests = [
            Request::Hello(Hello {
                token: "t".into(),
                namespace: "host/1/ab".into(),
                lane: Lane::Reclaim,
                key: None,
            }),
            Request::Hello(Hello {
                token: String::new(),
                namespace: "n".into(),
                lane: Lane::Demand,
                key: Some(SessionKey([7; 16])),
            }),
            Request::Read {
                ids: vec![1, 2].into(),
            },
            Request::Write {
                ids: (&[3u64, 4][..]).into(),
                data: &page,
            },
            Request::Free { ids: vec![].into() },
            Request::Stats,
            Request::Attach,
            Request::Alloc { need: 1, want: 256 },
            Request::Release {
                grants: vec![9, 1 << 33].into(),
            },
        ];
        for r in &requests {
            let back = frame(
                |b| r.write_to(b, 42).unwrap(),
                |op, p| format!("{:?}", Request::decode(op, p).unwrap()),
            );
            assert_eq!(back, format!("{r:?}"));
        }
        let replies = [
            Reply::HelloOk(HelloOk {
                page_size: 4096,
                capacity_pages: 9,
                key: Some(SessionKey([3; 16])),
            }),
            Reply::HelloOk(HelloOk {
                page_size: 4096,
                capacity_pages: 9,
                key: None,
            }),
            Reply::ReadOk(&page),
            Reply::WriteOk,
            Reply::FreeOk,
            Reply::StatsOk(ServerStats::default()),
            Reply::AttachOk(AttachOk {
                port: 7071,
                session: u64::MAX - 3,
                provider: "tcp".into(),
                endpoint: Vec::new(),
            }),
            Reply::AttachOk(AttachOk {
                port: 0,
                session: 5,
                provider: "shm".into(),
                endpoint: b"fi_shm://1234".to_vec(),
            }),
            Reply::AllocOk(vec![Grant {
                slot: 256,
                pages: 256,
                addr: 0x7f00_0000_0000,
                key: 42,
            }]),
            Reply::ReleaseOk,
            Reply::Error {
                code: code::CAPACITY,
                message: "full".into(),
            },
        ];
        for r in &replies {
            let back = frame(
                |b| r.write_to(b, 42).unwrap(),
                |op, p| format!("{:?}", Reply::decode(op, p).unwrap()),
            );
            assert_eq!(back, format!("{r:?}"));
        }
    }

    #[test]
    fn inconsistent_messages_are_refused_with_a_reason() {
        let mut w = encode_ids(&[1, 2]);
        w.extend_from_slice(&[0u8; PAGE_SIZE]);
        assert!(Request::decode(Op::Write, &w)
            .unwrap_err()
            .contains("write of 2 pages carries 4096"));
        let mut r = encode_ids(&[1]);
        r.push(0);
        assert!(Request::decode(Op::Read, &r)
            .unwrap_err()
            .contains("after the page ids"));
        assert!(Request::decode(Op::ReadOk, &[])
            .unwrap_err()
            .contains("not a request"));
        assert!(Reply::decode(Op::Read, &[])
            .unwrap_err()
            .contains("not a reply"));
        assert!(Reply::decode(Op::HelloOk, &[0; 4]).is_err());
        assert!(Hello::decode(&[5, 0, b'a']).is_err());
        // Keys print as "SessionKey(..)": compare them directly.
        let with_key = Hello {
            token: "t".into(),
            namespace: "n".into(),
            lane: Lane::Prefetch,
            key: Some(SessionKey([5; 16])),
        };
        assert_eq!(Hello::decode(&with_key.encode()).unwrap(), with_key);
        let ok = HelloOk {
            page_size: 4096,
            capacity_pages: 1,
            key: Some(SessionKey([6; 16])),
        };
        assert_eq!(HelloOk::decode(&ok.encode()).unwrap(), ok);
        assert!(Hello::decode(&[0, 0, 0, 0, 0, 1, 2, 3])
            .unwrap_err()
            .contains("not 16"));
        assert!(Request::decode(Op::Alloc, &[1, 0, 0, 0, 0, 0, 0, 0])
            .unwrap_err()
            .contains("need <= want"));
        assert!(Request::decode(Op::Alloc, &[0; 7]).is_err());
        let most = |want: u32| [[0u8; 4], want.to_le_bytes()].concat();
        assert!(Request::decode(Op::Alloc, &most(MAX_ALLOC)).is_ok());
        assert!(Request::decode(Op::Alloc, &most(MAX_ALLOC + 1))
            .unwrap_err()
            .contains("at most 16384"));
        let mut a = AttachOk {
            port: 1,
            session: 2,
            provider: "tcp".into(),
            endpoint: Vec::new(),
        }
        .encode();
        a.push(0);
        assert!(AttachOk::decode(&a).unwrap_err().contains("too many"));
        let mut a = AttachOk {
            port: 0,
            session: 2,
            provider: "shm".into(),
            endpoint: vec![7; 9],
        }
        .encode();
        a.pop();
        assert!(AttachOk::decode(&a)
            .unwrap_err()
            .contains("name of 8 bytes where its length says 9"));
        let g = Grant {
            slot: 0,
            pages: 0,
            addr: 0,
            key: 0,
        };
        let e = Reply::decode(Op::AllocOk, &Grant::encode_all(&[g])).unwrap_err();
        assert!(e.contains("a grant of 0 slots"), "{e}");
        assert!(Reply::decode(Op::AllocOk, &[1, 0, 0, 0]).is_err());
    }
}
