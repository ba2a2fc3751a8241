//! Wire format shared by the TCP client and the memory server.
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
//! | `Hello`     | u16 len + token, u16 len + namespace, optional u8 [`Lane`] | `HelloOk`: u32 page size, u64 capacity pages |
//! | `Read`      | u32 count, count x u64 page id          | `ReadOk`: count x PAGE_SIZE bytes |
//! | `Write`     | u32 count, count x u64 page id, data    | `WriteOk`: empty              |
//! | `Free`      | u32 count, count x u64 page id          | `FreeOk`: empty               |
//! | `Stats`     | empty                                   | `StatsOk`: [`ServerStats`]    |
//! | any         |                                         | `Error`: u16 code, utf-8 text |
//!
//! A frame with a bad magic, an unknown version or op, or a length over [`MAX_PAYLOAD`] is
//! malformed: the server logs why and closes that connection only.

use std::io::{self, Read, Write};

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
/// Largest payload accepted: a full write batch plus its ids, with room to spare.
pub const MAX_PAYLOAD: usize = 4 + MAX_BATCH * (8 + PAGE_SIZE) + 4096;

/// Frame operation codes. Replies have the high bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Hello = 0x01,
    Read = 0x02,
    Write = 0x03,
    Free = 0x04,
    Stats = 0x05,
    HelloOk = 0x81,
    ReadOk = 0x82,
    WriteOk = 0x83,
    FreeOk = 0x84,
    StatsOk = 0x85,
    Error = 0xFF,
}

impl Op {
    /// Decodes an op byte; `None` for codes this version does not know.
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            0x01 => Op::Hello,
            0x02 => Op::Read,
            0x03 => Op::Write,
            0x04 => Op::Free,
            0x05 => Op::Stats,
            0x81 => Op::HelloOk,
            0x82 => Op::ReadOk,
            0x83 => Op::WriteOk,
            0x84 => Op::FreeOk,
            0x85 => Op::StatsOk,
            0xFF => Op::Error,
            _ => return None,
        })
    }
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
#[derive(Debug)]
pub enum FrameError {
    /// The stream ended or failed.
    Io(io::Error),
    /// The bytes are not a frame of this protocol version.
    Malformed(String),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Malformed(m) => write!(f, "malformed frame: {m}"),
        }
    }
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
        let op = Op::from_u8(b[5])
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
