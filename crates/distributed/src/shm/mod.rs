//! An all-reduce among ranks that share memory (processes on one host): [`ShmComm`].
//!
//! Each rank owns a portion of one shared region: a control block ([`sync`]) and two data
//! buffers of `capacity` bytes, used by alternate pieces. An all-reduce of `n` elements
//! goes in pieces of at most `capacity` bytes; each piece is cut into one chunk per rank,
//! and
//!
//! 1. every rank copies the chunks it does not own into its own buffer;
//! 2. (barrier) rank `r` combines chunk `r` of every rank's values, in rank order, and
//!    writes the result both into its tensor and into its buffer;
//! 3. (barrier) every rank copies the other chunks' results from their owners' buffers.
//!
//! Each rank thus reads `(p-1)/p` of the data from its peers twice, the least a
//! reduce-scatter plus all-gather can move, and every element is combined by one rank in
//! one order, so all ranks get bit-identical results. The next piece uses the other buffer,
//! so a rank may start it while a slower peer still copies results out of the previous
//! one: reusing a buffer needs the barrier of the piece in between, which the slow peer
//! reaches only after its copies.

mod elem;
mod sync;

pub(crate) use elem::ShmElem;
use elem::reduce_chunk;
use sync::{CONTROL_BYTES, Control};

use crate::header::WORDS;
use crate::reduce_op::ReduceOp;
use std::sync::atomic::Ordering;

/// Chunk boundaries fall on multiples of this many bytes (a cache line), so that no two
/// ranks write one line.
const CHUNK_ALIGN: usize = 64;

/// One rank's view of a shared region (see the module documentation).
pub(crate) struct ShmComm {
    /// Every rank's portion, indexed by rank.
    bases: Vec<*mut u8>,
    rank: usize,
    /// Bytes of each data buffer.
    capacity: usize,
    /// Barriers passed so far (the same count on every rank).
    generation: u64,
    /// Pieces reduced so far; its parity picks the buffer.
    pieces: u64,
}

// SAFETY: the pointers address shared memory that outlives the `ShmComm` (the caller of
// `new` guarantees it), and a `ShmComm` is used by one thread at a time (it needs `&mut`).
unsafe impl Send for ShmComm {}

impl ShmComm {
    /// The bytes of one rank's portion for data buffers of `capacity` bytes.
    pub(crate) fn portion_bytes(capacity: usize) -> usize {
        CONTROL_BYTES + 2 * capacity
    }

    /// Rounds a requested buffer size to what [`ShmComm::new`] accepts: a positive multiple
    /// of a page.
    pub(crate) fn round_capacity(bytes: usize) -> usize {
        bytes.div_ceil(4096).max(1) * 4096
    }

    /// Zeroes the control block of a portion, before any rank uses the region.
    ///
    /// # Safety
    /// `base` is valid for writes of [`CONTROL_BYTES`], aligned to 64 bytes, and no other
    /// rank uses this portion yet.
    pub(crate) unsafe fn clear_control(base: *mut u8) {
        // SAFETY: as the caller guarantees.
        unsafe { std::ptr::write_bytes(base, 0, CONTROL_BYTES) };
    }

    /// This rank's view of a region whose portions start at `bases` (indexed by rank).
    ///
    /// # Safety
    /// Every base is aligned to 64 bytes and valid for reads and writes of
    /// [`ShmComm::portion_bytes`]`(capacity)` bytes for the life of the `ShmComm`; the
    /// control blocks were zeroed ([`ShmComm::clear_control`]) before any rank made its
    /// `ShmComm`; `capacity` is a multiple of 64 and the same on every rank; and nothing but
    /// the ranks' `ShmComm`s (one per rank, each given the same `bases`) touches the region.
    pub(crate) unsafe fn new(bases: Vec<*mut u8>, rank: usize, capacity: usize) -> ShmComm {
        debug_assert!(rank < bases.len() && capacity.is_multiple_of(CHUNK_ALIGN));
        debug_assert!(bases.iter().all(|b| (*b as usize).is_multiple_of(CHUNK_ALIGN)));
        ShmComm { bases, rank, capacity, generation: 0, pieces: 0 }
    }

    pub(crate) fn world_size(&self) -> usize {
        self.bases.len()
    }

    fn control(&self, q: usize) -> &Control {
        // SAFETY: each portion starts with a zero-initialised control block (`new`'s
        // contract), whose fields are atomics and padding: shared references to it from
        // several processes are sound.
        unsafe { &*(self.bases[q] as *const Control) }
    }

    /// Rank `q`'s data buffer `set` (0 or 1).
    fn buffer<T>(&self, q: usize, set: usize) -> *mut T {
        // SAFETY: within the portion (`new`'s contract): CONTROL_BYTES + set * capacity
        // + capacity <= portion_bytes(capacity).
        unsafe { self.bases[q].add(CONTROL_BYTES + set * self.capacity).cast() }
    }

    /// Waits until every rank has reached this barrier.
    pub(crate) fn barrier(&mut self) {
        self.generation += 1;
        let g = self.generation;
        self.control(self.rank).arrive(g);
        for q in (0..self.world_size()).filter(|&q| q != self.rank) {
            self.control(q).wait_for(g);
        }
    }

    /// Every rank's header, indexed by rank (a barrier).
    pub(crate) fn exchange_headers(&mut self, header: [u64; WORDS]) -> Vec<[u64; WORDS]> {
        let slot = ((self.generation + 1) % 2) as usize;
        for (w, &h) in self.control(self.rank).headers[slot].iter().zip(&header) {
            w.store(h, Ordering::Relaxed);
        }
        self.barrier();
        (0..self.world_size())
            .map(|q| std::array::from_fn(|i| self.control(q).headers[slot][i].load(Ordering::Relaxed)))
            .collect()
    }

    /// All-reduces `v` in place with `op` (`Avg` divides the sum by the number of ranks as
    /// it writes it, rounded as a sum divided afterwards would be). Every rank must call it
    /// with the same length.
    pub(crate) fn all_reduce<T: ShmElem>(&mut self, v: &mut [T], op: ReduceOp) {
        let piece = self.capacity / std::mem::size_of::<T>();
        for start in (0..v.len()).step_by(piece.max(1)) {
            let end = (start + piece).min(v.len());
            self.all_reduce_piece(&mut v[start..end], op);
        }
    }

    /// The elements of `len` that rank `q` combines.
    fn chunk<T>(&self, len: usize, q: usize) -> std::ops::Range<usize> {
        let align = (CHUNK_ALIGN / std::mem::size_of::<T>()).max(1);
        let per = len.div_ceil(self.world_size()).div_ceil(align) * align;
        (q * per).min(len)..((q + 1) * per).min(len)
    }

    fn all_reduce_piece<T: ShmElem>(&mut self, v: &mut [T], op: ReduceOp) {
        let (p, r) = (self.world_size(), self.rank);
        let set = (self.pieces % 2) as usize;
        self.pieces += 1;
        let mine: *mut T = self.buffer(r, set);
        for q in (0..p).filter(|&q| q != r) {
            let c = self.chunk::<T>(v.len(), q);
            // SAFETY: `c` lies within `v` and, as v.len() * size_of::<T>() <= capacity,
            // within this rank's buffer, which no other rank reads before the barrier.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().add(c.start), mine.add(c.start), c.len()) };
        }
        self.barrier();
        let c = self.chunk::<T>(v.len(), r);
        // SAFETY: the peers wrote their copies of chunk `r` before the barrier and do not
        // write them again before the next barrier (the next piece uses the other buffer);
        // this rank's chunk `r` is written by this rank only, and read by the peers only
        // after the next barrier. Buffers of different ranks do not overlap.
        let out = unsafe { std::slice::from_raw_parts_mut(mine.add(c.start), c.len()) };
        let peer = |q: usize| -> &[T] {
            // SAFETY: as above; `q` is another rank, whose buffer is not `out`.
            unsafe { std::slice::from_raw_parts(self.buffer::<T>(q, set).add(c.start), c.len()) }
        };
        reduce_chunk(op, p, r, &mut v[c.clone()], peer, out);
        self.barrier();
        for q in (0..p).filter(|&q| q != r) {
            let c = self.chunk::<T>(v.len(), q);
            // SAFETY: rank `q` wrote its results into chunk `q` of its buffer before the
            // barrier and does not touch this buffer again until a later barrier that this
            // rank reaches only after the copy.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.buffer::<T>(q, set).add(c.start),
                    v.as_mut_ptr().add(c.start),
                    c.len(),
                )
            };
        }
    }
}

#[cfg(test)]
mod tests;
