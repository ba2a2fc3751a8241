//! A namespace's pages on the server, in shards with a lock each.
//!
//! One lock over a namespace's map held a demand read behind whole write batches: a batch of
//! 64 evicted pages copies 256 KiB (and allocates the pages it adds) under it, and on a busy
//! machine the writer can be preempted while it holds it. Sharded, a reader waits at most for
//! one page's copy in its own shard. Shards are stripes of [`STRIPE`] neighbouring pages, so a
//! run of neighbours (a prefetch window) takes one shard's lock once per page without
//! bouncing between many.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use swap_backend::PAGE_SIZE;

/// Shards per namespace.
const SHARDS: usize = 64;
/// Neighbouring pages per stripe of a shard.
const STRIPE: u64 = 64;

type Shard = HashMap<u64, Box<[u8]>>;

/// The pages of one namespace: id -> bytes.
#[derive(Debug)]
pub struct PageMap {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for PageMap {
    fn default() -> Self {
        PageMap {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl PageMap {
    fn shard(&self, id: u64) -> MutexGuard<'_, Shard> {
        let m = &self.shards[((id / STRIPE) % SHARDS as u64) as usize];
        // A panic in one connection thread must not poison the server for the others.
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the bytes of `ids` to `out`, in order. `Err(id)`: the first page not stored
    /// (`out` then holds the pages before it).
    pub fn read_into(&self, ids: &[u64], out: &mut Vec<u8>) -> Result<(), u64> {
        for &id in ids {
            match self.shard(id).get(&id) {
                Some(p) => out.extend_from_slice(p),
                None => return Err(id),
            }
        }
        Ok(())
    }

    /// How many of `ids` are not stored (a write of them would add that many).
    pub fn missing(&self, ids: &[u64]) -> u64 {
        ids.iter()
            .filter(|&&id| !self.shard(id).contains_key(&id))
            .count() as u64
    }

    /// Stores `data` (a page per id, in order); returns how many pages were added.
    pub fn write(&self, ids: &[u64], data: &[u8]) -> u64 {
        let mut added = 0;
        for (&id, src) in ids.iter().zip(data.chunks_exact(PAGE_SIZE)) {
            let mut shard = self.shard(id);
            match shard.get_mut(&id) {
                Some(p) => p.copy_from_slice(src),
                None => {
                    shard.insert(id, src.into());
                    added += 1;
                }
            }
        }
        added
    }

    /// Forgets `ids`; returns how many were stored.
    pub fn free(&self, ids: &[u64]) -> u64 {
        ids.iter()
            .filter(|&&id| self.shard(id).remove(&id).is_some())
            .count() as u64
    }

    /// Forgets every page; returns how many there were.
    pub fn clear(&self) -> u64 {
        self.shards
            .iter()
            .map(|m| {
                let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
                let n = s.len() as u64;
                s.clear();
                n
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(b: u8) -> Vec<u8> {
        vec![b; PAGE_SIZE]
    }

    #[test]
    fn pages_are_written_read_rewritten_and_freed_across_shards() {
        let m = PageMap::default();
        // Ids in several stripes and shards; 64^3 + 1 shares the first page's shard.
        let ids = [0, 63, 64, 4101, 64 * 64 * 64 + 1, 7];
        let data: Vec<u8> = ids.iter().flat_map(|&i| page((i % 251) as u8)).collect();
        assert_eq!(m.missing(&ids), 6);
        assert_eq!(m.write(&ids, &data), 6);
        assert_eq!(m.missing(&ids), 0);
        let mut out = Vec::new();
        assert_eq!(m.read_into(&ids, &mut out), Ok(()));
        assert_eq!(out, data);
        assert_eq!(m.write(&[64], &page(1)), 0, "a rewrite adds no page");
        out.clear();
        m.read_into(&[64], &mut out).unwrap();
        assert_eq!(out, page(1));
        // A missing page is named; the pages before it were read.
        out.clear();
        assert_eq!(m.read_into(&[0, 5, 7], &mut out), Err(5));
        assert_eq!(out.len(), PAGE_SIZE);
        assert_eq!(m.free(&[0, 5, 63]), 2);
        assert_eq!(m.missing(&[0, 63, 64]), 2);
        assert_eq!(m.clear(), 4);
        assert_eq!(m.missing(&[64, 4096]), 2);
    }
}
