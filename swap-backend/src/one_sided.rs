//! What the two one-sided clients share, `fabric://` (grants are registered memory with a key)
//! and `unix://` (grants are memory files): the control channel, and the page -> slot table.
//! The server hands out slots in grants and never learns page ids; the client keeps which slot
//! holds which page, a stock of free slots, and gives whole grants back once none of their
//! slots is used.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::protocol::{read_frame, AttachOk, Grant, Hello, Lane, Reply, Request, PAGE_SIZE};
use crate::store::{ClientOptions, StoreError};

/// A failed control call as the store's error: a refusal stays one; a broken or malformed
/// channel calls `lost` (the session, and the pages, are gone with it).
pub fn call_error(
    store: &str,
    e: Result<(u16, String), String>,
    lost: impl FnOnce(),
) -> StoreError {
    match e {
        Ok((code, message)) => StoreError::Refused {
            store: store.to_string(),
            code,
            message,
        },
        Err(m) => {
            lost();
            StoreError::Io {
                store: store.to_string(),
                error: std::io::Error::other(format!("control channel lost: {m}")),
            }
        }
    }
}

/// What a broken control channel says: the server's end closing, or no answer within
/// `deadline`, in words.
fn closed(e: std::io::Error, deadline: Option<std::time::Duration>) -> String {
    use std::io::ErrorKind::*;
    let e = crate::tcp::name_timeout(e, deadline);
    match e.kind() {
        UnexpectedEof | ConnectionReset | BrokenPipe => {
            format!("the server closed the connection ({e})")
        }
        _ => e.to_string(),
    }
}

/// Whether the server hung up on a client: set by its [`Watcher`] (blocked in `poll` on the
/// control socket, no CPU meanwhile) microseconds after the server's end closes, or by a failed
/// control request. Every request after it fails, so that a replicated store fails over and a
/// single server's pager stops the JVM; a transfer waiting on a server that will never answer
/// gives up instead of waiting out its deadline.
#[derive(Clone, Debug, Default)]
pub struct Hangup(Arc<(AtomicBool, Mutex<()>, Condvar)>);

impl Hangup {
    pub(crate) fn set(&self) {
        self.0 .0.store(true, Ordering::Release);
        // Taken so that a waiter between its check and its sleep cannot miss the notify.
        drop(self.0 .1.lock().unwrap_or_else(|e| e.into_inner()));
        self.0 .2.notify_all();
    }

    /// Whether the server has hung up (one atomic load).
    pub fn is_set(&self) -> bool {
        self.0 .0.load(Ordering::Acquire)
    }

    /// Waits until the server has hung up, at most `timeout`; `true` if it has.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.0 .1.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .0
             .2
            .wait_timeout_while(guard, timeout, |_| !self.is_set())
            .unwrap_or_else(|e| e.into_inner());
        self.is_set()
    }
}

/// A thread blocked in `poll(POLLRDHUP)` on a control socket until the server's end closes,
/// which then sets the [`Hangup`]; closing the watcher (or dropping it) shuts the socket down,
/// which ends the session on the server, and joins the thread.
#[derive(Debug)]
pub struct Watcher {
    hangup: Hangup,
    closing: Arc<AtomicBool>,
    socket: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Watches `socket` (a descriptor of the control channel's socket).
    pub fn start(socket: OwnedFd) -> std::io::Result<Watcher> {
        let hangup = Hangup::default();
        let closing = Arc::new(AtomicBool::new(false));
        let watched = socket.try_clone()?;
        let (h, c) = (hangup.clone(), closing.clone());
        let thread = std::thread::Builder::new()
            .name("memliner-watch".into())
            .stack_size(64 << 10)
            .spawn(move || {
                wait_for_hangup(&watched);
                if !c.load(Ordering::SeqCst) {
                    h.set();
                }
            })?;
        Ok(Watcher {
            hangup,
            closing,
            socket,
            thread: Some(thread),
        })
    }

    pub fn hangup(&self) -> &Hangup {
        &self.hangup
    }

    /// Ends the session from this side (not a hang-up) and the thread.
    pub fn close(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        let _ = rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.close();
    }
}

/// Blocks until the peer of `socket` closes its end (or the socket is shut down here).
fn wait_for_hangup(socket: &OwnedFd) {
    use rustix::event::{PollFd, PollFlags};
    loop {
        let mut fds = [PollFd::new(socket, PollFlags::RDHUP)];
        match rustix::event::poll(&mut fds, None) {
            Err(rustix::io::Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// Slots for `ids` from `table`, asking `refill` for as many more free ones as are missing
/// (without the table's lock held: it asks the server) until the stock suffices.
pub fn assign<T, E>(
    table: &std::sync::Mutex<SlotTable<T>>,
    ids: &[u64],
    mut refill: impl FnMut(usize) -> Result<(), E>,
) -> Result<Vec<u64>, E> {
    loop {
        let missing = match table.lock().unwrap_or_else(|e| e.into_inner()).assign(ids) {
            Ok(slots) => return Ok(slots),
            Err(missing) => missing,
        };
        refill(missing)?;
    }
}

/// The requests that give back the grants starting at `firsts`, a frame's worth each.
pub fn releases(firsts: &[u64]) -> impl Iterator<Item = Request<'_>> {
    firsts
        .chunks(crate::protocol::MAX_BATCH)
        .map(|chunk| Request::Release {
            grants: chunk.into(),
        })
}

/// Checks a release's reply.
pub fn release_ok(r: Reply<'_>) -> Result<(), String> {
    match r {
        Reply::ReleaseOk => Ok(()),
        other => Err(format!("unexpected {:?} in reply to release", other.op())),
    }
}

/// The control channel: one request at a time, answered in order.
#[derive(Debug)]
pub struct Control<R, W> {
    pub reader: R,
    pub writer: W,
    next_request: u64,
    payload: Vec<u8>,
    /// What bounds the channel's waits, to name a timeout as such.
    deadline: Option<std::time::Duration>,
}

impl<R: Read, W: Write> Control<R, W> {
    /// A channel over `reader` and `writer`, whose waits the caller bounded by `deadline`.
    pub fn new(reader: R, writer: W, deadline: Option<std::time::Duration>) -> Self {
        Control {
            reader,
            writer,
            next_request: 0,
            payload: Vec::new(),
            deadline,
        }
    }

    /// Says hello as `options` say and attaches for one-sided access: the server's capacity in
    /// pages, and its attach reply. `store` names the server in errors.
    pub fn open_session(
        &mut self,
        store: &str,
        options: &ClientOptions,
    ) -> Result<(u64, AttachOk), StoreError> {
        let refused = |r: Result<(u16, String), String>| match r {
            Ok((code, message)) => StoreError::Refused {
                store: store.to_string(),
                code,
                message,
            },
            Err(message) => StoreError::Protocol {
                store: store.to_string(),
                message,
            },
        };
        let hello = Request::Hello(Hello {
            token: options.token.clone(),
            namespace: options.namespace.clone(),
            lane: Lane::Demand,
            key: None,
        });
        let capacity_pages = self
            .call(&hello, |r| match r {
                Reply::HelloOk(ok) if ok.page_size as usize == PAGE_SIZE => Ok(ok.capacity_pages),
                Reply::HelloOk(ok) => Err(format!(
                    "server pages are {} bytes, this client's are {PAGE_SIZE}",
                    ok.page_size
                )),
                other => Err(format!("unexpected {:?} in reply to hello", other.op())),
            })
            .map_err(refused)?;
        let attach = self
            .call(&Request::Attach, |r| match r {
                Reply::AttachOk(a) => Ok(a),
                other => Err(format!("unexpected {:?} in reply to attach", other.op())),
            })
            .map_err(refused)?;
        Ok((capacity_pages, attach))
    }

    /// Sends `request` and hands its reply to `f`; a refusal comes back as `Err(Ok((code,
    /// message)))`, a broken stream or a malformed reply as `Err(Err(text))`.
    pub fn call<T>(
        &mut self,
        request: &Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<T, String>,
    ) -> Result<T, Result<(u16, String), String>> {
        let id = self.next_request;
        self.next_request += 1;
        request
            .write_to(&mut self.writer, id)
            .and_then(|()| self.writer.flush())
            .map_err(|e| Err(closed(e, self.deadline)))?;
        let h = read_frame(&mut self.reader, &mut self.payload).map_err(|e| match e {
            crate::protocol::FrameError::Io(e) => Err(closed(e, self.deadline)),
            e => Err(e.to_string()),
        })?;
        if h.request != id {
            return Err(Err(format!(
                "reply for request {} to request {id}",
                h.request
            )));
        }
        match Reply::decode(h.op, &self.payload).map_err(Err)? {
            Reply::Error { code, message } => Err(Ok((code, message))),
            reply => f(reply).map_err(Err),
        }
    }
}

/// A grant this client holds, with how many of its slots hold pages or are lost to a failed
/// write (it goes back to the server only when that is none), and what the transport keeps
/// with it (`T`: a mapping, or nothing).
#[derive(Debug)]
pub struct Held<T> {
    pub grant: Grant,
    pub used: u64,
    pub data: T,
}

/// Page -> slot. A heap's page ids are dense from 0: four bytes each, in segments of
/// [`PageSlots::SEGMENT`] ids made when a page of theirs is first stored (a 16 GiB heap,
/// 16 MiB at most). Segments, not one vector grown to the highest id: a vector's doubling left
/// up to twice that allocated, and a map spent about 40 bytes a stored page. Ids from 2^30 and
/// slots from 2^32 (no heap has them; tests do) go to a map.
#[derive(Debug, Default)]
struct PageSlots {
    dense: Vec<Option<Box<[u32]>>>,
    beyond: HashMap<u64, u64>,
}

impl PageSlots {
    const NONE: u32 = u32::MAX;
    const DENSE_IDS: u64 = 1 << 30;
    /// Ids a segment holds: 64 KiB of slots, 64 MiB of heap.
    const SEGMENT: usize = 1 << 14;

    fn dense_at(&self, id: u64) -> Option<&u32> {
        if id >= Self::DENSE_IDS {
            return None;
        }
        let i = id as usize;
        self.dense
            .get(i / Self::SEGMENT)?
            .as_ref()?
            .get(i % Self::SEGMENT)
    }

    fn dense_at_mut(&mut self, id: u64) -> Option<&mut u32> {
        if id >= Self::DENSE_IDS {
            return None;
        }
        let i = id as usize;
        self.dense
            .get_mut(i / Self::SEGMENT)?
            .as_mut()?
            .get_mut(i % Self::SEGMENT)
    }

    fn get(&self, id: u64) -> Option<u64> {
        match self.dense_at(id) {
            Some(&s) if s != Self::NONE => Some(u64::from(s)),
            _ if self.beyond.is_empty() => None,
            _ => self.beyond.get(&id).copied(),
        }
    }

    fn insert(&mut self, id: u64, slot: u64) {
        match u32::try_from(slot) {
            Ok(s) if id < Self::DENSE_IDS && s != Self::NONE => {
                let (seg, at) = (id as usize / Self::SEGMENT, id as usize % Self::SEGMENT);
                if self.dense.len() <= seg {
                    self.dense.resize_with(seg + 1, || None);
                }
                self.dense[seg].get_or_insert_with(|| vec![Self::NONE; Self::SEGMENT].into())[at] =
                    s;
            }
            _ => {
                self.beyond.insert(id, slot);
            }
        }
    }

    fn remove(&mut self, id: u64) -> Option<u64> {
        if let Some(s) = self.dense_at_mut(id).filter(|s| **s != Self::NONE) {
            return Some(u64::from(std::mem::replace(s, Self::NONE)));
        }
        if self.beyond.is_empty() {
            return None;
        }
        self.beyond.remove(&id)
    }

    /// Segments made (what the table holds for dense ids is this times [`Self::SEGMENT`]).
    #[cfg(test)]
    fn segments(&self) -> usize {
        self.dense.iter().filter(|s| s.is_some()).count()
    }
}

/// Page -> slot, free slots and held grants.
#[derive(Debug)]
pub struct SlotTable<T> {
    /// Page -> slot.
    slots: PageSlots,
    /// Free slots, the next one to use last.
    free: Vec<u64>,
    /// By first slot.
    grants: BTreeMap<u64, Held<T>>,
    /// Free slots kept for later writes before whole grants go back.
    keep_free: usize,
    /// Pages a grant is asked for with (the slack a trim leaves above `keep_free`).
    chunk: usize,
}

impl<T> SlotTable<T> {
    pub fn new(chunk: usize, keep_free: usize) -> Self {
        SlotTable {
            slots: PageSlots::default(),
            free: Vec::new(),
            grants: BTreeMap::new(),
            keep_free,
            chunk,
        }
    }

    /// The slot holding page `id`.
    pub fn slot(&self, id: u64) -> Option<u64> {
        self.slots.get(id)
    }

    /// The grant slot `s` belongs to.
    pub fn held(&self, s: u64) -> Option<&Held<T>> {
        self.grants
            .range(..=s)
            .next_back()
            .map(|(_, h)| h)
            .filter(|h| h.grant.holds(s))
    }

    fn held_mut(&mut self, s: u64) -> Option<&mut Held<T>> {
        self.grants
            .range_mut(..=s)
            .next_back()
            .map(|(_, h)| h)
            .filter(|h| h.grant.holds(s))
    }

    /// Every grant held, by first slot.
    pub fn grants(&self) -> impl Iterator<Item = &Held<T>> {
        self.grants.values()
    }

    /// Free slots in stock.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Slots for `ids`, taking free ones for pages not yet stored; or, when the stock is
    /// short, how many more free slots are needed (nothing taken then).
    pub fn assign(&mut self, ids: &[u64]) -> Result<Vec<u64>, usize> {
        let new = ids
            .iter()
            .filter(|&&id| self.slots.get(id).is_none())
            .count();
        if self.free.len() < new {
            return Err(new - self.free.len());
        }
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let s = match self.slots.get(id) {
                Some(s) => s,
                None => {
                    let s = self.free.pop().expect("counted above");
                    self.slots.insert(id, s);
                    if let Some(g) = self.held_mut(s) {
                        g.used += 1;
                    }
                    s
                }
            };
            out.push(s);
        }
        Ok(out)
    }

    /// Takes a new grant's slots into the stock, lowest slot used first, so that
    /// neighbouring pages get neighbouring slots.
    pub fn add(&mut self, grant: Grant, data: T) {
        // Kept in descending order overall: a later, higher grant goes under the rest. Grown
        // in place by exactly the grant: the stock can be a few bytes a page of the heap, and
        // a new vector beside the old one doubled that at its peak.
        self.free.reserve_exact(grant.pages as usize);
        self.free
            .extend((grant.slot..grant.slot + grant.pages).rev());
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        self.grants.insert(
            grant.slot,
            Held {
                grant,
                used: 0,
                data,
            },
        );
    }

    /// Forgets pages whose write failed: what their slots hold is unknown (a read of one is
    /// an error, never stale bytes), and the slots stay used until the session ends.
    pub fn forget(&mut self, ids: &[u64]) {
        for &id in ids {
            self.slots.remove(id);
        }
    }

    /// Frees the slots of `ids` (a missing id is not an error).
    pub fn free(&mut self, ids: &[u64]) {
        for &id in ids {
            if let Some(s) = self.slots.remove(id) {
                self.free.push(s);
                if let Some(g) = self.held_mut(s) {
                    g.used -= 1;
                }
            }
        }
    }

    /// Takes out the grants to give back: whole grants none of whose slots are used, while
    /// more than `keep_free` slots are free.
    pub fn trim(&mut self) -> Vec<Held<T>> {
        if self.free.len() <= self.keep_free + self.chunk {
            return Vec::new();
        }
        let mut excess = self.free.len() - self.keep_free;
        let mut back = Vec::new();
        for (&first, h) in &self.grants {
            if excess == 0 {
                break;
            }
            if h.used == 0 {
                back.push(first);
                excess = excess.saturating_sub(h.grant.pages as usize);
            }
        }
        let gone: Vec<Held<T>> = back
            .iter()
            .map(|f| self.grants.remove(f).expect("listed above"))
            .collect();
        self.free
            .retain(|&s| !gone.iter().any(|g| g.grant.holds(s)));
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(slot: u64, pages: u64) -> Grant {
        Grant {
            slot,
            pages,
            addr: 0,
            key: slot,
        }
    }

    #[test]
    fn page_slots_hold_dense_ids_in_segments_and_far_ids_in_a_map() {
        let mut m = PageSlots::default();
        m.insert(3, 7);
        m.insert(1 << 40, 9);
        m.insert(5, u64::from(u32::MAX) + 1);
        assert_eq!(m.segments(), 1, "one segment for id 3");
        m.insert(PageSlots::SEGMENT as u64 * 9 + 2, 11);
        assert_eq!(m.segments(), 2, "segments only where ids were stored");
        assert_eq!(m.get(PageSlots::SEGMENT as u64 * 9 + 2), Some(11));
        assert_eq!(m.get(PageSlots::SEGMENT as u64 * 5), None);
        assert_eq!(m.get(3), Some(7));
        assert_eq!(m.get(1 << 40), Some(9));
        assert_eq!(m.get(5), Some(u64::from(u32::MAX) + 1));
        assert_eq!(m.get(2), None);
        assert_eq!(m.get(100), None);
        assert_eq!(m.remove(3), Some(7));
        assert_eq!(m.get(3), None);
        assert_eq!(m.remove(3), None);
        assert_eq!(m.remove(5), Some(u64::from(u32::MAX) + 1));
        assert_eq!(m.remove(1 << 40), Some(9));
        assert!(m.beyond.is_empty());
    }

    #[test]
    fn a_control_call_the_server_leaves_unanswered_names_the_deadline() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let deadline = std::time::Duration::from_millis(50);
        ours.set_read_timeout(Some(deadline)).unwrap();
        let mut control = Control::new(ours.try_clone().unwrap(), ours, Some(deadline));
        let e = control
            .call(&Request::Attach, |_| Ok(()))
            .expect_err("nothing answers");
        assert_eq!(e, Err("no answer within the 50ms deadline".to_string()));
        // The server's end closing is said as such.
        drop(theirs);
        let e = control.call(&Request::Attach, |_| Ok(())).unwrap_err();
        assert!(
            matches!(&e, Err(m) if m.starts_with("the server closed the connection")),
            "{e:?}"
        );
    }

    #[test]
    fn slots_come_lowest_first_and_grants_go_back_whole_once_unused() {
        let mut t: SlotTable<()> = SlotTable::new(4, 2);
        assert_eq!(t.assign(&[1, 2]), Err(2), "an empty stock asks for two");
        t.add(grant(8, 4), ());
        t.add(grant(0, 4), ());
        assert_eq!(t.assign(&[1, 2, 3]).unwrap(), vec![0, 1, 2]);
        assert_eq!(
            t.assign(&[2]).unwrap(),
            vec![1],
            "a stored page keeps its slot"
        );
        assert_eq!(t.held(9).map(|h| h.grant.slot), Some(8));
        assert!(t.held(5).is_none(), "slot 5 is in no grant");
        t.add(grant(16, 4), ());
        // 9 free: above keep_free + chunk, and grants 8 and 16 are unused.
        let back: Vec<u64> = t.trim().iter().map(|h| h.grant.slot).collect();
        assert_eq!(back, vec![8, 16]);
        assert_eq!(t.free_slots(), 1);
        t.free(&[1, 2, 3, 99]);
        assert_eq!(t.grants().next().unwrap().used, 0);
        assert!(t.trim().is_empty(), "4 free is not above 2 + 4");
    }

    #[test]
    fn a_forgotten_page_keeps_its_grant_from_going_back() {
        let mut t: SlotTable<()> = SlotTable::new(1, 0);
        t.add(grant(0, 2), ());
        t.add(grant(2, 2), ());
        t.assign(&[7]).unwrap();
        t.forget(&[7]);
        assert_eq!(t.slot(7), None);
        let back: Vec<u64> = t.trim().iter().map(|h| h.grant.slot).collect();
        assert_eq!(back, vec![2], "the grant with the lost slot stays");
    }
}
