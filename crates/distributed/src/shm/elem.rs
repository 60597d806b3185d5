//! The element types a shared-memory all-reduce carries, and how two ranks' values
//! combine: the same rules as [`HostBuf::combine`](crate::host_buf::HostBuf::combine), so
//! that every transport gives the same result.

use crate::reduce_op::ReduceOp;

/// An element of a shared-memory all-reduce: plain old data of a fixed size.
pub(crate) trait ShmElem: Copy + PartialOrd + std::ops::Add<Output = Self> + Send + Sync + 'static {
    fn is_nan(self) -> bool;
    /// `self * factor`, rounded as [`HostBuf::scale`](crate::host_buf::HostBuf::scale) rounds
    /// it, so that an average taken here equals a sum divided afterwards, bit for
    /// bit.
    fn scaled(self, factor: f64) -> Self;
}

impl ShmElem for f32 {
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn scaled(self, factor: f64) -> f32 {
        (f64::from(self) * factor) as f32
    }
}

impl ShmElem for f64 {
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn scaled(self, factor: f64) -> f64 {
        self * factor
    }
}

impl ShmElem for i64 {
    fn is_nan(self) -> bool {
        false
    }
    /// Integer averages are refused when a collective is issued; never reached.
    fn scaled(self, _factor: f64) -> i64 {
        self
    }
}

/// `a` (the lower rank's value, or the combination of the lower ranks') combined with `b`.
#[inline(always)]
fn sum<T: ShmElem>(a: T, b: T) -> T {
    a + b
}

/// NaN wins, as in PyTorch's max/min reductions.
#[inline(always)]
fn max<T: ShmElem>(a: T, b: T) -> T {
    if b > a || b.is_nan() { b } else { a }
}

#[inline(always)]
fn min<T: ShmElem>(a: T, b: T) -> T {
    if b < a || b.is_nan() { b } else { a }
}

/// Combines one chunk of every rank's values in rank order, `((x0 ∘ x1) ∘ x2) ∘ ...`.
/// `peer(q)` holds rank `q`'s values for the `p` ranks other than `rank`, whose values are
/// `own`; the result replaces `own` and is also written to `out` (where the other ranks
/// copy it from). `Avg` divides the sum by `p` in the same pass.
pub(crate) fn reduce_chunk<'a, T: ShmElem>(
    op: ReduceOp,
    p: usize,
    rank: usize,
    own: &mut [T],
    peer: impl Fn(usize) -> &'a [T] + Copy,
    out: &mut [T],
) {
    let same = |x: T| x;
    match op {
        ReduceOp::Sum => combine_all(sum, same, p, rank, own, peer, out),
        ReduceOp::Avg => {
            let factor = 1.0 / p as f64;
            combine_all(sum, |x: T| x.scaled(factor), p, rank, own, peer, out)
        }
        ReduceOp::Max => combine_all(max, same, p, rank, own, peer, out),
        ReduceOp::Min => combine_all(min, same, p, rank, own, peer, out),
    }
}

/// [`reduce_chunk`] for one combining function `f`, whose final result goes through
/// `finish` (the average's division), in whole-slice passes (which vectorise) rather than a
/// loop over ranks per element. Two ranks take one fused pass.
#[inline(always)]
fn combine_all<'a, T: ShmElem>(
    f: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
    p: usize,
    rank: usize,
    own: &mut [T],
    peer: impl Fn(usize) -> &'a [T] + Copy,
    out: &mut [T],
) {
    if p == 1 {
        for (o, d) in own.iter_mut().zip(out.iter_mut()) {
            *o = finish(*o);
            *d = *o;
        }
        return;
    }
    if p == 2 {
        let other = peer(1 - rank);
        // Two loops rather than a branch per element, so that each vectorises.
        if rank == 0 {
            for ((o, &x), d) in own.iter_mut().zip(other).zip(out.iter_mut()) {
                let s = finish(f(*o, x));
                *o = s;
                *d = s;
            }
        } else {
            for ((o, &x), d) in own.iter_mut().zip(other).zip(out.iter_mut()) {
                let s = finish(f(x, *o));
                *o = s;
                *d = s;
            }
        }
        return;
    }
    // Three or more ranks: accumulate the first p - 1 contributions in `out`, then the last
    // one fused with the write-back into `own`.
    {
        let x = |q: usize| -> &[T] { if q == rank { own } else { peer(q) } };
        for ((d, &a), &b) in out.iter_mut().zip(x(0)).zip(x(1)) {
            *d = f(a, b);
        }
        for q in 2..p - 1 {
            for (d, &b) in out.iter_mut().zip(x(q)) {
                *d = f(*d, b);
            }
        }
    }
    let last = p - 1;
    if last == rank {
        for (o, d) in own.iter_mut().zip(out.iter_mut()) {
            let s = finish(f(*d, *o));
            *o = s;
            *d = s;
        }
    } else {
        for ((o, d), &b) in own.iter_mut().zip(out.iter_mut()).zip(peer(last)) {
            let s = finish(f(*d, b));
            *o = s;
            *d = s;
        }
    }
}
