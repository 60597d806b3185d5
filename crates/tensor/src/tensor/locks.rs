//! Taking the locks of several storages at once without deadlocks.
//!
//! An operation that reads one storage while writing another (`a.add_(&b)`) or reads
//! several (`a.add(&b)`) holds more than one lock. Two threads taking the same two locks in
//! opposite orders (`a.add_(&b)` beside `b.add_(&a)`) would each wait for the other forever;
//! and since `RwLock` makes new readers queue behind a waiting writer, even two reads in
//! opposite orders can deadlock once writers wait on both storages. So every operation takes
//! its locks in one global order, by the address of the storage cell, and takes each
//! storage's lock once (a second read lock on one thread could queue behind a writer that
//! waits for the first).

use crate::storage::{Storage, StorageCell};
use parking_lot::{RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;

fn addr(c: &StorageCell) -> usize {
    c as *const StorageCell as usize
}

/// Read guards on distinct storages, taken in address order, looked up by cell.
pub(crate) struct ReadSet<'a> {
    guards: SmallVec<[(&'a StorageCell, RwLockReadGuard<'a, Storage>); 4]>,
}

impl<'a> ReadSet<'a> {
    /// Read locks on every distinct cell of `cells`.
    pub(crate) fn new(cells: &[&'a StorageCell]) -> Self {
        let mut order: SmallVec<[&'a StorageCell; 4]> = SmallVec::from_slice(cells);
        order.sort_by_key(|c| addr(c));
        order.dedup_by_key(|c| addr(c));
        ReadSet { guards: order.into_iter().map(|c| (c, c.read())).collect() }
    }

    /// The storage of `cell`, which must be one of the cells the set was built from.
    pub(crate) fn get(&self, cell: &StorageCell) -> &Storage {
        let i = self.guards.iter().position(|(c, _)| addr(c) == addr(cell));
        // Every caller passes the cells it built the set from.
        &self.guards[i.unwrap_or_else(|| unreachable!("ember internal error: a storage was not locked"))].1
    }
}

/// Read locks on two storages (one lock when they are the same), in address order.
pub(crate) fn read_pair<'a>(
    a: &'a StorageCell,
    b: &'a StorageCell,
) -> (RwLockReadGuard<'a, Storage>, Option<RwLockReadGuard<'a, Storage>>) {
    if addr(a) == addr(b) {
        return (a.read(), None);
    }
    if addr(a) < addr(b) {
        let ga = a.read();
        (ga, Some(b.read()))
    } else {
        let gb = b.read();
        (a.read(), Some(gb))
    }
}

/// A write lock on `dst` and a read lock on `src` (another storage), in address order.
pub(crate) fn write_and_read_one<'a>(
    dst: &'a StorageCell,
    src: &'a StorageCell,
) -> (RwLockWriteGuard<'a, Storage>, RwLockReadGuard<'a, Storage>) {
    debug_assert!(addr(src) != addr(dst), "the source shares the written storage");
    if addr(src) < addr(dst) {
        let r = src.read();
        (dst.write(), r)
    } else {
        let w = dst.write();
        (w, src.read())
    }
}

/// A write lock on `dst` and read locks on the `srcs` (none of which may be `dst`), all taken
/// in address order.
pub(crate) fn write_and_read<'a>(
    dst: &'a StorageCell,
    srcs: &[&'a StorageCell],
) -> (RwLockWriteGuard<'a, Storage>, ReadSet<'a>) {
    debug_assert!(srcs.iter().all(|s| addr(s) != addr(dst)), "a source shares the written storage");
    let below: SmallVec<[&'a StorageCell; 4]> = srcs.iter().copied().filter(|s| addr(s) < addr(dst)).collect();
    let above: SmallVec<[&'a StorageCell; 4]> = srcs.iter().copied().filter(|s| addr(s) > addr(dst)).collect();
    let mut reads = ReadSet::new(&below);
    let w = dst.write();
    reads.guards.extend(ReadSet::new(&above).guards);
    (w, reads)
}

/// Read locks on the distinct storages of any number of cells, in address order, and for each
/// cell the position of its guard.
pub(crate) fn read_all<'a>(cells: &[&'a StorageCell]) -> (Vec<RwLockReadGuard<'a, Storage>>, Vec<usize>) {
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by_key(|&i| addr(cells[i]));
    let mut guards = Vec::with_capacity(cells.len());
    let mut slot = vec![0; cells.len()];
    let mut last = None;
    for i in order {
        let a = addr(cells[i]);
        if last != Some(a) {
            guards.push(cells[i].read());
            last = Some(a);
        }
        slot[i] = guards.len() - 1;
    }
    (guards, slot)
}

/// Write locks on distinct `dsts` and a read lock on `src` (none of them), all taken in
/// address order; the write guards come back in the order of `dsts`.
pub(crate) fn write_all_and_read<'a>(
    dsts: &[&'a StorageCell],
    src: &'a StorageCell,
) -> (SmallVec<[RwLockWriteGuard<'a, Storage>; 4]>, RwLockReadGuard<'a, Storage>) {
    let mut order: SmallVec<[&'a StorageCell; 4]> = SmallVec::from_slice(dsts);
    order.sort_by_key(|c| addr(c));
    debug_assert!(order.windows(2).all(|w| addr(w[0]) != addr(w[1])), "a storage is written twice");
    debug_assert!(dsts.iter().all(|d| addr(d) != addr(src)), "the source shares a written storage");
    let mut read = None;
    let mut taken: SmallVec<[(usize, RwLockWriteGuard<'a, Storage>); 4]> = SmallVec::new();
    for c in order {
        if read.is_none() && addr(src) < addr(c) {
            read = Some(src.read());
        }
        taken.push((addr(c), c.write()));
    }
    let read = read.unwrap_or_else(|| src.read());
    let mut writes = SmallVec::new();
    for d in dsts {
        let i = taken.iter().position(|(a, _)| *a == addr(d));
        // Every cell of `dsts` was locked above.
        let i = i.unwrap_or_else(|| unreachable!("ember internal error: a storage was not locked"));
        writes.push(taken.remove(i).1);
    }
    (writes, read)
}
