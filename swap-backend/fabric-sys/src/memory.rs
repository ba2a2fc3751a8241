//! Private anonymous memory owned by one value: the pager's reclaim slots, a memory server's
//! one-sided page pool, a one-sided channel's buffer. One of the narrow modules that make OS
//! calls.

#![allow(unsafe_code)]

use memliner_protocol::PAGE_SIZE;

/// A private anonymous mapping, page-aligned and zero until written, reserved lazily (it costs
/// only what it holds until written or pinned by an RDMA NIC), unmapped on drop.
#[derive(Debug)]
pub struct AnonMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by this value; who touches which bytes is decided by its owner
// (the slot allocator, the pool's sessions, the channel's transfer), through raw pointers.
unsafe impl Send for AnonMemory {}
// SAFETY: as above; the only `&self` method that writes, `zero`, writes a range its caller
// owns (documented there).
unsafe impl Sync for AnonMemory {}

impl AnonMemory {
    /// `len` bytes, rounded up to whole pages (at least one).
    pub fn new(len: usize) -> std::io::Result<AnonMemory> {
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        // SAFETY: a fresh private anonymous mapping; owned by the returned value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(AnonMemory { ptr: p.cast(), len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping's address (a one-sided region's base for `FI_MR_VIRT_ADDR` providers).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The address of byte `offset` (at most the length: one past the end is allowed).
    pub fn at(&self, offset: usize) -> *mut u8 {
        assert!(
            offset <= self.len,
            "offset {offset} past {} bytes",
            self.len
        );
        // SAFETY: in bounds or one past the end, checked above.
        unsafe { self.ptr.add(offset) }
    }

    /// The address of page `i`.
    pub fn page(&self, i: usize) -> *mut u8 {
        assert!((i + 1) * PAGE_SIZE <= self.len);
        self.at(i * PAGE_SIZE)
    }

    /// Zeroes `offset..offset + len`. The caller owns that range: nothing else may read or
    /// write it meanwhile. (Stored zeros, not `MADV_DONTNEED`: a NIC that pinned the range
    /// keeps using the old physical pages, and would never see the kernel's fresh zero pages.)
    pub fn zero(&self, offset: usize, len: usize) {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: a range inside our own mapping (checked above) that, by the contract, no
        // one else touches meanwhile; written through the raw pointer only.
        unsafe { std::ptr::write_bytes(self.ptr.add(offset), 0, len) };
    }
}

impl Drop for AnonMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns; whatever pointed into it (regions
        // registered on it) holds an Arc of it, so none is left when this runs.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_rounds_to_pages_reads_zero_and_zeroes_ranges() {
        let m = AnonMemory::new(PAGE_SIZE + 1).unwrap();
        assert_eq!(m.len(), 2 * PAGE_SIZE);
        // SAFETY: writes inside the mapping this test owns.
        unsafe { std::ptr::write_bytes(m.page(1), 7, PAGE_SIZE) };
        // SAFETY: reads inside the mapping.
        let (inside, first) = unsafe { (*m.at(PAGE_SIZE + 5), *m.at(0)) };
        assert_eq!((inside, first), (7, 0));
        m.zero(PAGE_SIZE, PAGE_SIZE);
        // SAFETY: as above.
        let zeroed = unsafe { *m.at(PAGE_SIZE + 5) };
        assert_eq!(zeroed, 0);
    }
}
