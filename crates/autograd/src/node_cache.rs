//! A per-thread cache of the memory of freed nodes, for the next nodes made on the thread.
//!
//! A recorded operation allocates its node; a chain of operations keeps its nodes alive
//! until the graph drops, and then frees them all. Glibc keeps only seven freed blocks of a
//! size in its per-thread cache, so most of those went through its general bins, which
//! merge and split blocks on the way: a few hundred instructions per node. The teardown
//! loop in `Node::drop` hands each node it frees here instead: its contents are dropped and
//! its allocation, reference counts still at one, waits in a list per size for `new_node`
//! to write a node of that size into it.
//!
//! `Arc::from_raw` allows a pointer from `Arc<U>::into_raw` to come back as `Arc<T>` when
//! `U`'s value has `T`'s size and alignment, so the allocation of a node of one operation
//! serves a node of another operation of the same size. Memory is freed through a function
//! registered by the first node type of each size (the allocation's layout depends on
//! nothing else), on the thread that holds it: when the cache is full, and when the thread
//! exits. Each thread keeps at most [`THREAD_LIMIT_BYTES`].
//!
//! The cache is written for any `Arc` allocation and knows nothing of nodes, so that it
//! stays out of the core's import circle; `node.rs` is its only user.

use std::cell::RefCell;
use std::mem::{MaybeUninit, align_of, size_of, size_of_val};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Cached values are 8-aligned (every node holds `u64`s; a node whose operation needs more
/// is not cached), so sizes are multiples of 8 and the size classes are 8 bytes apart.
const WORD: usize = 8;
/// Larger nodes are not cached.
const MAX_NODE_BYTES: usize = 1024;
const CLASSES: usize = MAX_NODE_BYTES / WORD + 1;

/// The most bytes of nodes one thread keeps: the nodes of a few thousand operations (a
/// 2,000-op chain of scalar operations holds about 600 KiB).
pub(crate) const THREAD_LIMIT_BYTES: usize = 1 << 20;

/// Frees the allocation of a dropped value of one size class.
type Free = unsafe fn(NonNull<u8>);

/// Per size class, how to free an allocation of that size: set by the first allocation of
/// that size [`alloc`] made, on any thread (every node is made by `new_node` through
/// `alloc`, so a node that is freed finds it set; a value that does not is freed as usual).
static FREE: [OnceLock<Free>; CLASSES] = [const { OnceLock::new() }; CLASSES];

/// Frees an allocation made for an `Arc<T>` (or a value of the same size and alignment)
/// whose value was already dropped.
///
/// # Safety
/// `p` must be the data pointer of such an allocation, with both reference counts at one,
/// owned by the caller.
unsafe fn free_as<T>(p: NonNull<u8>) {
    // SAFETY: guaranteed by the caller; `MaybeUninit` makes the dead value valid and drops
    // nothing, and dropping the only `Arc` returns the allocation with its layout.
    drop(unsafe { Arc::from_raw(p.as_ptr() as *const MaybeUninit<T>) });
}

/// The size class of a value of `size` bytes and alignment `align`, if it is cached (it
/// must hold the link word while it waits).
#[inline(always)]
const fn class(size: usize, align: usize) -> Option<usize> {
    if align == WORD && size >= WORD && size <= MAX_NODE_BYTES { Some(size / WORD) } else { None }
}

/// Dropped values' allocations, one list per size class, linked through their first word.
struct NodeCache {
    heads: [Option<NonNull<u8>>; CLASSES],
    bytes: usize,
}

impl NodeCache {
    fn pop(&mut self, class: usize) -> Option<NonNull<u8>> {
        let p = self.heads[class]?;
        // SAFETY: a listed allocation's data is at least a word, 8-aligned and dead; `push`
        // wrote the next link into its first word.
        self.heads[class] = unsafe { p.cast::<Option<NonNull<u8>>>().read() };
        self.bytes -= class * WORD;
        Some(p)
    }

    fn push(&mut self, class: usize, p: NonNull<u8>) -> bool {
        if self.bytes + class * WORD > THREAD_LIMIT_BYTES {
            return false;
        }
        // SAFETY: the caller hands over a dead node's data of `class` words (8-aligned).
        unsafe { p.cast::<Option<NonNull<u8>>>().write(self.heads[class]) };
        self.heads[class] = Some(p);
        self.bytes += class * WORD;
        true
    }
}

impl Drop for NodeCache {
    /// A thread's cached allocations are freed when it exits.
    fn drop(&mut self) {
        for (class, free) in FREE.iter().enumerate().skip(1) {
            while let Some(p) = self.pop(class) {
                if let Some(free) = free.get() {
                    // SAFETY: a cached allocation is a dead node of this class, owned here.
                    unsafe { free(p) };
                }
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<NodeCache> = const { RefCell::new(NodeCache { heads: [None; CLASSES], bytes: 0 }) };
}

/// An allocation for an `Arc<T>` (a node): a cached one of its size when this thread has
/// one, else a fresh one. Its reference counts are those of a new `Arc`.
#[inline]
pub(crate) fn alloc<T>() -> Arc<MaybeUninit<T>> {
    let Some(class) = class(size_of::<T>(), align_of::<T>()) else {
        return Arc::new_uninit();
    };
    FREE[class].get_or_init(|| free_as::<T>);
    match CACHE.try_with(|c| c.try_borrow_mut().ok()?.pop(class)).ok().flatten() {
        // SAFETY: the allocation came from `Arc::into_raw` of a value of this size and
        // alignment (what `Arc::from_raw` requires of a pointer from another type), that
        // value was dropped and both counts are still one: this `Arc` is its only owner.
        Some(p) => unsafe { Arc::from_raw(p.as_ptr() as *const MaybeUninit<T>) },
        None => Arc::new_uninit(),
    }
}

/// Drops the value of `n` (a node) and keeps its allocation for [`alloc`] when its size is
/// cached and there is room; otherwise drops it as usual.
///
/// # Safety
/// `n` must be the only handle to its value: no other `Arc`, no `Weak` (as
/// `Arc::get_mut(&mut n)` succeeding proves).
pub(crate) unsafe fn recycle<T: ?Sized>(n: Arc<T>) {
    let Some(class) = class(size_of_val(&*n), std::mem::align_of_val(&*n)) else { return };
    if FREE[class].get().is_none() {
        return;
    }
    let full = CACHE.try_with(|c| c.try_borrow().map_or(true, |c| c.bytes + class * WORD > THREAD_LIMIT_BYTES));
    if full.unwrap_or(true) {
        return;
    }
    let p = Arc::into_raw(n) as *mut T;
    // SAFETY: `n` was the only handle (guaranteed by the caller), so its value is dropped
    // here exactly as the last `Arc` would drop it, and nothing reads it afterwards; the
    // allocation stays owned by the counts of one that `into_raw` kept.
    unsafe { std::ptr::drop_in_place(p) };
    let Some(p) = NonNull::new(p as *mut u8) else { return };
    let kept = CACHE.try_with(|c| c.try_borrow_mut().is_ok_and(|mut c| c.push(class, p)));
    if !kept.unwrap_or(false) {
        // Dropping the value reentered the cache (a node's drop can free another graph),
        // filling it meanwhile: the allocation is freed instead.
        if let Some(free) = FREE[class].get() {
            // SAFETY: a dead node of this class, owned here.
            unsafe { free(p) };
        }
    }
}

/// Drops a handle `n` (a node's): when it is the last, as [`recycle`] does, else as usual.
#[inline]
pub(crate) fn release<T: ?Sized>(mut n: Arc<T>) {
    // The plain count first: a handle that is not the last pays one load, not `get_mut`'s
    // read-modify-write of the weak count.
    if Arc::strong_count(&n) == 1 && Arc::get_mut(&mut n).is_some() {
        // SAFETY: `get_mut` just found `n` the only handle to its value.
        unsafe { recycle(n) };
    }
}

/// The bytes of node allocations the calling thread holds.
#[cfg(test)]
pub(crate) fn thread_bytes() -> usize {
    CACHE.try_with(|c| c.borrow().bytes).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Var;
    use ember_tensor::{DType, Tensor};

    /// Runs `f` on a fresh thread, whose cache starts empty.
    fn on_new_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(f).join().unwrap()
    }

    fn chain(x: &Var, n: usize) -> Var {
        let mut y = x.clone();
        for _ in 0..n {
            y = y.mul_scalar(2.0).add_scalar(1.0);
        }
        y
    }

    #[test]
    fn a_dropped_graph_lends_its_nodes_to_the_next_one() {
        on_new_thread(|| {
            let x = Var::param(Tensor::from_vec(vec![1.0f64, -2.0], [2]).unwrap());
            drop(chain(&x, 50));
            let kept = thread_bytes();
            assert!(kept > 0, "the chain's nodes (all but the head) are kept");
            // The next graph is built in them, with the same values and gradients as the
            // first: (((x * 2 + 1) * 2 + 1) ...) = 2^n x + 2^n - 1.
            for _ in 0..3 {
                let y = chain(&x, 10);
                assert!(thread_bytes() < kept);
                assert_eq!(y.value().to_vec::<f64>().unwrap(), vec![1024.0 + 1023.0, -2048.0 + 1023.0]);
                y.sum_all().backward().unwrap();
                assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![1024.0, 1024.0]);
                x.zero_grad();
            }
        });
    }

    /// A leaf's node (a result made outside grad mode, a gradient passed along in backward)
    /// goes to the cache when its last handle drops, and serves the next leaf; a handle that
    /// is not the last leaves the node alone.
    #[test]
    fn the_last_handle_to_a_leaf_lends_its_node_to_the_next_one() {
        on_new_thread(|| {
            let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap());
            let y = crate::no_grad(|| x.mul_scalar(3.0));
            let other = y.clone();
            let at = Arc::as_ptr(&y.node) as *const u8;
            drop(y);
            assert_eq!(thread_bytes(), 0, "another handle still holds the node");
            assert_eq!(other.value().to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
            drop(other);
            let kept = thread_bytes();
            assert!(kept > 0);
            let z = crate::no_grad(|| x.add_scalar(1.0));
            assert_eq!(Arc::as_ptr(&z.node) as *const u8, at);
            assert_eq!(thread_bytes(), 0);
            assert_eq!(z.value().to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
            assert!(z.is_leaf() && !z.requires_grad());
        });
    }

    #[test]
    fn a_thread_keeps_at_most_its_limit() {
        on_new_thread(|| {
            let x = Var::param(Tensor::ones([1], DType::F32).unwrap());
            drop(chain(&x, 10_000));
            let kept = thread_bytes();
            assert!(kept > THREAD_LIMIT_BYTES / 2 && kept <= THREAD_LIMIT_BYTES, "{kept}");
        });
    }

    #[test]
    fn a_graph_freed_on_another_thread_is_kept_there_and_freed_when_it_exits() {
        let x = Var::param(Tensor::ones([3], DType::F32).unwrap());
        let y = chain(&x, 100);
        let kept = on_new_thread(move || {
            drop(y);
            thread_bytes()
        });
        assert!(kept > 0);
        // Nodes made after that thread exited are whole.
        let z = chain(&x, 3);
        z.sum_all().backward().unwrap();
        assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![8.0; 3]);
    }
}
