//! [`ShmComm`] on threads of one process, over a heap region standing in for the shared
//! one: the results against a reduction in rank order, bit-identical on every rank.

use super::*;
use crate::host_buf::HostBuf;
use std::alloc::{Layout, alloc, dealloc};

/// A page-aligned region holding `ranks` portions, their control blocks cleared.
struct Region {
    ptr: *mut u8,
    layout: Layout,
    portion: usize,
}

// SAFETY: the region is plain memory; the threads that share it synchronise through the
// `ShmComm` protocol.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: shared references only hand out the base address.
unsafe impl Sync for Region {}

impl Region {
    fn new(ranks: usize, capacity: usize) -> Region {
        let portion = ShmComm::portion_bytes(capacity);
        let layout = Layout::from_size_align(portion * ranks, 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        assert!(!ptr.is_null());
        for q in 0..ranks {
            // SAFETY: portion `q` lies in the fresh region, page-aligned; no rank runs yet.
            unsafe { ShmComm::clear_control(ptr.add(q * portion)) };
        }
        Region { ptr, layout, portion }
    }

    fn comm(&self, ranks: usize, rank: usize, capacity: usize) -> ShmComm {
        // SAFETY: the portions lie in the live region (dropped after the threads joined),
        // page-aligned, their control blocks cleared; every rank gets the same bases and capacity.
        let bases = (0..ranks).map(|q| unsafe { self.ptr.add(q * self.portion) }).collect();
        unsafe { ShmComm::new(bases, rank, capacity) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// Runs `f(rank, comm)` on `ranks` threads sharing one region; returns the results by rank.
fn on_ranks<R: Send>(ranks: usize, capacity: usize, f: impl Fn(usize, &mut ShmComm) -> R + Sync) -> Vec<R> {
    let capacity = ShmComm::round_capacity(capacity);
    let region = Region::new(ranks, capacity);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                let (region, f) = (&region, &f);
                s.spawn(move || f(r, &mut region.comm(ranks, r, capacity)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `r`'s values: distinct, with enough spread that the order of a float sum shows,
/// and a NaN in the middle for the max/min rule.
fn values(r: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if i == n / 2 && r == 1 {
                f64::NAN
            } else {
                ((i * 31 + r * 17) % 97) as f64 * 1e-3 + ((r + i) % 7) as f64 * 1e5 - 3e5
            }
        })
        .collect()
}

/// The reduction in rank order; an average is the sum divided afterwards, as the other
/// transports take it.
fn reference(ranks: usize, n: usize, op: ReduceOp, read: impl Fn(Vec<f64>) -> HostBuf) -> HostBuf {
    let mut acc = read(values(0, n));
    for r in 1..ranks {
        acc.combine(&read(values(r, n)), op);
    }
    if op == ReduceOp::Avg {
        acc.scale(1.0 / ranks as f64);
    }
    acc
}

fn same_bits(a: &HostBuf, b: &HostBuf) -> bool {
    match (a, b) {
        (HostBuf::F32(a), HostBuf::F32(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
        (HostBuf::F64(a), HostBuf::F64(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
        (HostBuf::I64(a), HostBuf::I64(b)) => a == b,
        _ => false,
    }
}

#[test]
fn all_reduce_matches_a_reduction_in_rank_order_on_every_rank() {
    // A 4 KiB buffer holds 1024 f32: the longer lengths go in several pieces, the odd ones
    // end in a short piece, and lengths below the ranks' count leave ranks without a chunk.
    // Averages divide as they reduce, and must round as a sum divided afterwards does.
    for ranks in [1, 2, 3] {
        for n in [0, 1, 2, 17, 1000, 1024, 3001, 5000] {
            for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
                let f32s = |v: Vec<f64>| HostBuf::F32(v.into_iter().map(|x| x as f32).collect());
                let f64s = HostBuf::F64;
                let i64s =
                    |v: Vec<f64>| HostBuf::I64(v.into_iter().map(|x| if x.is_nan() { 7 } else { x as i64 }).collect());
                let reads: [&(dyn Fn(Vec<f64>) -> HostBuf + Sync); 3] = [&f32s, &f64s, &i64s];
                // Integer averages are refused when issued.
                let reads = if op == ReduceOp::Avg { &reads[..2] } else { &reads[..] };
                for read in reads {
                    let want = reference(ranks, n, op, read);
                    let got = on_ranks(ranks, 4096, |r, comm| {
                        let mut buf = read(values(r, n));
                        match &mut buf {
                            HostBuf::F32(v) => comm.all_reduce(v, op),
                            HostBuf::F64(v) => comm.all_reduce(v, op),
                            HostBuf::I64(v) => comm.all_reduce(v, op),
                        }
                        buf
                    });
                    for (r, g) in got.iter().enumerate() {
                        assert!(same_bits(g, &want), "{ranks} ranks, n = {n}, {op:?}, rank {r}: {g:?} != {want:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn successive_all_reduces_and_headers_do_not_mix() {
    // Many small collectives back to back, alternating with header exchanges: a rank that
    // runs ahead must not overwrite what a slower one still reads.
    // 100 bytes round up to a page.
    let got = on_ranks(2, 100, |r, comm| {
        let mut seen = Vec::new();
        for k in 0..2000u64 {
            let mut h = [0u64; WORDS];
            h[0] = k;
            h[1] = r as u64;
            let all = comm.exchange_headers(h);
            seen.push(all.iter().all(|w| w[0] == k) && all[1][1] == 1);
            let mut v = vec![(k * 2 + r as u64) as i64; 1 + (k % 700) as usize];
            comm.all_reduce(&mut v, ReduceOp::Sum);
            seen.push(v.iter().all(|&x| x == (4 * k + 1) as i64));
            if k % 3 == 0 {
                comm.barrier();
            }
        }
        seen.iter().all(|&ok| ok)
    });
    assert_eq!(got, vec![true, true]);
}
