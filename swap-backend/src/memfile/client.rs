//! The `unix://` [`PageStore`]: pages copied in and out of memory files the server handed this
//! client, with no request per page and no server CPU per read.

use std::io::BufWriter;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::sys::{FdReader, Mapping};
use crate::one_sided::{
    assign, call_error, release_ok, releases, Control, Hangup, SlotTable, Watcher,
};
use crate::protocol::{code, Reply, Request, ServerStats, PAGE_SIZE};
use crate::store::{ClientOptions, PageStore, StoreError};

/// The smallest grant asked for (1 MiB): a small heap reserves little on the server.
pub const MIN_GRANT: u64 = 256;
/// The largest (64 MiB): a 16 GiB heap holds 256 files, far from any descriptor limit.
pub const MAX_GRANT: u64 = crate::protocol::MAX_ALLOC as u64;
/// Free slots kept for later writes before whole grants go back.
pub const KEEP_FREE: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The next grant's size: a quarter of what is held, so that the slack stays under a quarter
/// and the number of files grows with the logarithm of the heap, within the bounds above.
pub fn grant_pages(held: u64) -> u64 {
    (held / 4).clamp(MIN_GRANT, MAX_GRANT)
}

/// A [`PageStore`] in memory files of a memory server on this host (`unix://PATH`).
pub struct MemfileStore {
    name: String,
    /// `name`, kept for the life of the process: a signal handler may name it (`server_at`).
    named: &'static &'static str,
    control: Mutex<Control<FdReader, BufWriter<UnixStream>>>,
    /// Its hang-up is set when the server closes the session (or by a failed control
    /// request): the session, and this client's pages there, are gone then.
    watcher: Watcher,
    capacity_pages: u64,
    table: Mutex<SlotTable<Arc<Mapping>>>,
}

impl MemfileStore {
    /// Connects to the server listening at `path`, says hello and attaches.
    pub fn connect(path: &str, options: ClientOptions) -> Result<MemfileStore, StoreError> {
        let name = format!("unix://{path}");
        let io = |error: std::io::Error| StoreError::Io {
            store: name.clone(),
            error,
        };
        let socket = UnixStream::connect(path).map_err(|e| {
            io(match e.kind() {
                std::io::ErrorKind::NotFound => std::io::Error::new(
                    e.kind(),
                    format!("no server listens at {path} (start one with `memliner server --listen unix://{path}`)"),
                ),
                _ => e,
            })
        })?;
        // The control channel's waits are bounded as a TCP store's are; pages never wait.
        let wait = options.deadline.or(Some(Duration::from_secs(30)));
        socket.set_read_timeout(wait).map_err(io)?;
        socket.set_write_timeout(wait).map_err(io)?;
        let mut control = Control::new(
            FdReader::new(socket.try_clone().map_err(io)?),
            BufWriter::new(socket.try_clone().map_err(io)?),
            wait,
        );
        let (capacity_pages, attach) = control.open_session(&name, &options)?;
        if attach.provider != super::PROVIDER {
            return Err(StoreError::Protocol {
                store: name,
                message: format!(
                    "the server attached this client to '{}', not to its memory files",
                    attach.provider
                ),
            });
        }
        let watcher = Watcher::start(socket.try_clone().map_err(io)?.into()).map_err(io)?;
        let named: &'static &'static str = Box::leak(Box::new(&*name.clone().leak()));
        Ok(MemfileStore {
            named,
            name,
            control: Mutex::new(control),
            watcher,
            capacity_pages,
            table: Mutex::new(SlotTable::new(MIN_GRANT as usize, KEEP_FREE)),
        })
    }

    /// The server's hang-up, to wait for (a test that stops a server).
    pub fn hangup(&self) -> Hangup {
        self.lost().clone()
    }

    /// Pages the server can hold in all (across all its clients).
    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    fn io(&self, error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Io {
            store: self.name.clone(),
            error: std::io::Error::other(error),
        }
    }

    /// Whether the server hung up (or the control channel broke).
    fn lost(&self) -> &Hangup {
        self.watcher.hangup()
    }

    fn check_alive(&self) -> Result<(), StoreError> {
        if self.lost().is_set() {
            return Err(self.io(
                "the server closed this client's session (it stopped or restarted), and with it the pages it held",
            ));
        }
        Ok(())
    }

    /// A control request; a broken control channel marks the store lost for good.
    fn control<T>(
        &self,
        request: &Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        self.control_then(request, f, |t, _| Ok(t))
    }

    /// [`Self::control`], then `then` with the descriptors that came with the reply (taken
    /// under the same lock: they are another caller's otherwise).
    fn control_then<T, U>(
        &self,
        request: &Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<T, String>,
        then: impl FnOnce(T, &mut FdReader) -> Result<U, String>,
    ) -> Result<U, StoreError> {
        self.check_alive()?;
        let mut c = lock(&self.control);
        let result = c
            .call(request, f)
            .and_then(|t| then(t, &mut c.reader).map_err(Err));
        drop(c);
        result.map_err(|e| call_error(&self.name, e, || self.lost().set()))
    }

    /// Server-side counters.
    pub fn server_stats(&self) -> Result<ServerStats, StoreError> {
        self.control(&Request::Stats, |r| match r {
            Reply::StatsOk(s) => Ok(s),
            other => Err(format!("unexpected {:?} in reply to stats", other.op())),
        })
    }

    /// Asks the server for at least `missing` more free slots, a memory file at a time.
    fn refill(&self, missing: usize) -> Result<(), StoreError> {
        let mut left = missing as u64;
        while left > 0 {
            let held: u64 = lock(&self.table).grants().map(|h| h.grant.pages).sum();
            let want = grant_pages(held);
            let need = left.min(want);
            let (grant, mapping) = self.control_then(
                &Request::Alloc {
                    need: need as u32,
                    want: want as u32,
                },
                |r| match r {
                    Reply::AllocOk(grants) => match grants.as_slice() {
                        [g] if g.pages >= need => Ok(*g),
                        [g] => Err(format!("{} slots granted, {need} asked", g.pages)),
                        _ => Err(format!("{} grants in one reply, not one", grants.len())),
                    },
                    other => Err(format!("unexpected {:?} in reply to alloc", other.op())),
                },
                |g, reader| {
                    let fd = reader
                        .take_fd()
                        .ok_or("no memory file came with the grant")?;
                    // Mapped, the file needs no descriptor of ours.
                    let m = Mapping::new(&fd, g.pages, self.named).map_err(|e| e.to_string())?;
                    Ok((g, m))
                },
            )?;
            left = left.saturating_sub(grant.pages);
            lock(&self.table).add(grant, Arc::new(mapping));
        }
        Ok(())
    }

    /// Gives unused grants back beyond the stock kept: unmapped here first, then emptied by
    /// the server.
    fn trim(&self) -> Result<(), StoreError> {
        let back: Vec<u64> = lock(&self.table)
            .trim()
            .into_iter()
            .map(|h| h.grant.slot) // the mapping goes with `h`
            .collect();
        for r in releases(&back) {
            self.control(&r, release_ok)?;
        }
        Ok(())
    }

    /// Where each page of `ids` lives: its grant's mapping and its index there.
    fn locate(
        &self,
        ids: &[u64],
        slots: Option<&[u64]>,
    ) -> Result<Vec<(Arc<Mapping>, u64)>, StoreError> {
        let t = lock(&self.table);
        ids.iter()
            .enumerate()
            .map(|(i, &id)| {
                let s = match slots {
                    Some(s) => s[i],
                    None => t.slot(id).ok_or_else(|| StoreError::Refused {
                        store: self.name.clone(),
                        code: code::NOT_FOUND,
                        message: format!("page {id} is not stored there"),
                    })?,
                };
                let h = t.held(s).ok_or_else(|| StoreError::Protocol {
                    store: self.name.clone(),
                    message: format!("slot {s} is in no grant this client holds"),
                })?;
                Ok((h.data.clone(), s - h.grant.slot))
            })
            .collect()
    }
}

impl PageStore for MemfileStore {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        assert_eq!(out.len(), ids.len() * PAGE_SIZE);
        self.check_alive()?;
        for ((m, index), dst) in self
            .locate(ids, None)?
            .iter()
            .zip(out.chunks_exact_mut(PAGE_SIZE))
        {
            m.read(*index, dst);
        }
        Ok(())
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        assert_eq!(data.len(), ids.len() * PAGE_SIZE);
        self.check_alive()?;
        let slots = assign(&self.table, ids, |missing| self.refill(missing))?;
        for ((m, index), src) in self
            .locate(ids, Some(&slots))?
            .iter()
            .zip(data.chunks_exact(PAGE_SIZE))
        {
            m.write(*index, src);
        }
        Ok(())
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        lock(&self.table).free(ids);
        self.trim()
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

impl Drop for MemfileStore {
    fn drop(&mut self) {
        // Unmapped before the session closes (the watcher's end, below): the server then
        // empties the files.
        *lock(&self.table) = SlotTable::new(MIN_GRANT as usize, KEEP_FREE);
        self.watcher.close();
    }
}

impl std::fmt::Debug for MemfileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemfileStore")
            .field("server", &self.name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_grow_with_what_is_held_within_bounds() {
        assert_eq!(grant_pages(0), MIN_GRANT);
        assert_eq!(grant_pages(4 * 1000), 1000);
        assert_eq!(grant_pages(u64::MAX), MAX_GRANT);
        // A 16 GiB heap all remote: a few hundred files at most.
        let (mut held, mut files) = (0u64, 0);
        while held < (16u64 << 30) / PAGE_SIZE as u64 {
            held += grant_pages(held);
            files += 1;
        }
        assert!(files < 300, "{files} files");
    }
}
