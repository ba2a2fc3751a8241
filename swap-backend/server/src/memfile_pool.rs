//! The server's side of `unix://`: a session's grants, one memory file each.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use swap_backend::memfile::sys;
use swap_backend::protocol::Grant;

/// One client session's grants. Slots are numbered per session (no other client ever maps a
/// grant's file: the descriptor, handed to this client alone, is the grant's key).
#[derive(Debug)]
pub struct FileGrants {
    /// Names the files (`/proc/PID/fd` of either side shows it).
    label: String,
    next_slot: u64,
    /// By first slot: the file and its pages.
    grants: HashMap<u64, (OwnedFd, u64)>,
}

impl FileGrants {
    pub fn new(namespace: &str) -> FileGrants {
        FileGrants {
            label: format!("memliner pages of {namespace}"),
            next_slot: 0,
            grants: HashMap::new(),
        }
    }

    /// A new grant of `pages` pages, with the descriptor to hand the client.
    pub fn alloc(&mut self, pages: u64) -> std::io::Result<(Grant, OwnedFd)> {
        let fd = sys::grant_file(&self.label, pages)?;
        let theirs = fd.try_clone()?;
        let grant = Grant {
            slot: self.next_slot,
            pages,
            addr: 0,
            key: 0,
        };
        self.next_slot += pages;
        self.grants.insert(grant.slot, (fd, pages));
        Ok((grant, theirs))
    }

    /// Takes back the grants starting at `firsts` (the client unmapped them first): their
    /// memory goes at once, also from a client that kept a mapping. Returns the pages freed.
    pub fn release(&mut self, firsts: &[u64]) -> Result<u64, String> {
        if let Some(bad) = firsts.iter().find(|f| !self.grants.contains_key(f)) {
            return Err(format!("slot {bad} starts no grant of this client's"));
        }
        let mut pages = 0;
        for f in firsts {
            if let Some((fd, n)) = self.grants.remove(f) {
                let _ = sys::revoke(&fd);
                pages += n;
            }
        }
        Ok(pages)
    }

    /// Pages held in all.
    pub fn pages(&self) -> u64 {
        self.grants.values().map(|(_, n)| n).sum()
    }

    /// Ends the session, returning the pages it held. `revoke`: the client closed the
    /// session (it unmapped what it held, or its process is gone), so the memory goes now;
    /// otherwise (the server cut the connection) the files are only closed here, and a client
    /// still copying from them keeps its memory until it unmaps: never a fault in its
    /// threads.
    pub fn end(&mut self, revoke: bool) -> u64 {
        let pages = self.pages();
        for (fd, _) in std::mem::take(&mut self.grants).into_values() {
            if revoke {
                let _ = sys::revoke(&fd);
            }
        }
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_a_sealed_file_of_its_size_and_a_release_empties_it() {
        let mut g = FileGrants::new("t");
        let (a, fa) = g.alloc(3).unwrap();
        let (b, fb) = g.alloc(2).unwrap();
        assert_eq!((a.slot, a.pages, b.slot, b.pages), (0, 3, 3, 2));
        assert_eq!(
            sys::file_len(&fa).unwrap(),
            3 * swap_backend::PAGE_SIZE as u64
        );
        // The client cannot grow its grant past what the server reserved.
        let grow = rustix::fs::ftruncate(&fa, 1 << 30).unwrap_err();
        assert_eq!(grow, rustix::io::Errno::PERM, "{grow}");
        assert_eq!(g.release(&[a.slot]).unwrap(), 3);
        assert_eq!(
            sys::file_len(&fa).unwrap(),
            0,
            "the released grant's memory is gone"
        );
        assert!(g
            .release(&[a.slot])
            .unwrap_err()
            .contains("starts no grant"));
        assert_eq!(g.pages(), 2);
        // Cut by the server: the client's file stays whole.
        assert_eq!(g.end(false), 2);
        assert_eq!(
            sys::file_len(&fb).unwrap(),
            2 * swap_backend::PAGE_SIZE as u64
        );
    }
}
