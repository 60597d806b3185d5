//! A per-thread cache of storage cells whose tensors are gone, for the next tensor made on
//! the thread.
//!
//! Every tensor an operation returns gets a fresh `StorageCell` in its own `Arc`: with the
//! value's buffer and the autograd node, one of the three allocations of a recorded
//! operation. A tensor's `Drop` hands its cell to [`recycle`]: a cell that was the last
//! handle to its storage gives up its data at once (the buffer goes back to its own cache
//! or the system) and waits here, empty, for [`StorageCell::shared`] to fill it again. A
//! graph freed after backward, the gradients backward drops and the values of a no-grad
//! chain all come back this way.
//!
//! Only unique cells enter (`Arc::get_mut` proves it: no other `Arc`, no `Weak`), and the
//! cache never hands out a second handle to one, so a cell taken back is the caller's
//! alone. Each thread keeps at most [`THREAD_LIMIT_CELLS`]; the rest are freed as before,
//! and a thread's cells are freed when it exits. The buffer pool's switch
//! (`set_pool_enabled`) turns this cache off too; the cells it holds hold no data, so
//! `clear_pool` leaves them (they go when the thread exits).

use super::{Storage, StorageCell};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The most cells one thread keeps: those of a few thousand operations' values (a cell is
/// under 100 bytes, so at most about 400 KiB).
pub(crate) const THREAD_LIMIT_CELLS: usize = 4096;

thread_local! {
    static CELLS: RefCell<Vec<Arc<StorageCell>>> = const { RefCell::new(Vec::new()) };
}

/// An empty cell at version 0, untouched by anyone else, if this thread has one.
#[inline]
pub(crate) fn take() -> Option<Arc<StorageCell>> {
    if !super::cache::pool_enabled() {
        return None;
    }
    CELLS.try_with(|c| c.try_borrow_mut().ok()?.pop()).ok().flatten()
}

/// Keeps `cell` for reuse when it is the last handle to its storage (its data is dropped
/// now); otherwise just drops this handle. Every tensor's `Drop` calls it.
#[inline]
pub(crate) fn recycle(cell: Arc<StorageCell>) {
    // A plain load first: a shared cell (a view's, a saved value's) is merely released,
    // without the read-modify-write `get_mut` costs.
    if Arc::strong_count(&cell) == 1 {
        keep(cell);
    }
}

/// `recycle` for a cell that looked unique: kept out of line, so that dropping a view or a
/// shared handle costs one load more than before.
#[inline(never)]
fn keep(mut cell: Arc<StorageCell>) {
    if !super::cache::pool_enabled() {
        return;
    }
    let Some(c) = Arc::get_mut(&mut cell) else { return };
    // The data goes now, as it would have with the cell; an empty host storage takes its
    // place (no allocation: an empty buffer lives inline).
    *c.data.get_mut() = Storage::Cpu(super::CpuStorage::U8(super::Buffer::empty()));
    *c.version.get_mut() = 0;
    *c.watched.get_mut() = false;
    *c.untracked.get_mut() = false;
    let _ = CELLS.try_with(|cells| {
        if let Ok(mut cells) = cells.try_borrow_mut()
            && cells.len() < THREAD_LIMIT_CELLS
        {
            cells.push(cell);
        }
    });
}

/// Drops the calling thread's cached cells; how many there were.
#[cfg(test)]
fn clear_thread() -> usize {
    let cells = CELLS.try_with(|c| c.try_borrow_mut().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default());
    cells.map_or(0, |c| c.len())
}

/// Puts `storage` into a cell taken from [`take`]: the cell is the caller's alone.
#[inline]
pub(crate) fn refill(cell: &Arc<StorageCell>, storage: Storage) {
    debug_assert!(Arc::strong_count(cell) == 1 && cell.version.load(Ordering::Relaxed) == 0);
    // SAFETY: a cached cell is unique (checked by `get_mut` when it entered, and the cache
    // hands out no second handle), and it is not locked, so nothing else reads or writes
    // its data while it is replaced. What it held is the empty inline buffer `keep` put
    // there, which owns nothing: written over without dropping it, the refill calls no drop
    // glue.
    unsafe { std::ptr::write(cell.data.data_ptr(), storage) };
}

/// How many cells the calling thread holds.
#[cfg(test)]
fn thread_cells() -> usize {
    CELLS.with(|c| c.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Tensor};

    /// Runs `f` on a fresh thread, whose cache starts empty.
    fn on_new_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn a_recycled_cell_serves_the_next_tensor_as_new() {
        on_new_thread(|| {
            let t = Tensor::ones([64], DType::F32).unwrap();
            t.add_scalar_(1.0).unwrap();
            t.storage().watch();
            assert_eq!(t.version(), 1);
            let cell = Arc::as_ptr(t.storage());
            drop(t);
            assert_eq!(thread_cells(), 1);
            let u = Tensor::zeros([3], DType::I64).unwrap();
            assert_eq!(Arc::as_ptr(u.storage()), cell);
            assert_eq!(thread_cells(), 0);
            assert_eq!((u.version(), u.storage().is_tracked()), (0, true));
            assert_eq!(u.to_vec::<i64>().unwrap(), vec![0, 0, 0]);
            u.add_scalar_(2).unwrap();
            assert_eq!((u.version(), u.to_vec::<i64>().unwrap()), (1, vec![2, 2, 2]));
        });
    }

    #[test]
    fn a_cell_someone_else_holds_is_only_released() {
        on_new_thread(|| {
            let t = Tensor::ones([4], DType::F32).unwrap();
            let view = t.narrow(0, 1, 2).unwrap();
            drop(t);
            assert_eq!(thread_cells(), 0);
            assert_eq!(view.to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
            // A weak handle keeps the cell out too, and sees it freed.
            let weak = Arc::downgrade(view.storage());
            drop(view);
            assert_eq!(thread_cells(), 0);
            assert!(weak.upgrade().is_none());
        });
    }

    #[test]
    fn a_thread_keeps_at_most_its_limit() {
        on_new_thread(|| {
            let many: Vec<Tensor> =
                (0..THREAD_LIMIT_CELLS + 100).map(|_| Tensor::ones([2], DType::F32).unwrap()).collect();
            drop(many);
            assert_eq!(thread_cells(), THREAD_LIMIT_CELLS);
            assert_eq!(clear_thread(), THREAD_LIMIT_CELLS);
            assert_eq!(thread_cells(), 0);
        });
    }
}
