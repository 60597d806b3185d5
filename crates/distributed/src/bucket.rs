//! How gradients are grouped into buckets for reduction, and the flat buffer each bucket's
//! gradients live in when there is something to reduce.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};

/// One bucket: parameters whose gradients are reduced together, by one all-reduce of one
/// dtype.
pub(crate) struct Bucket {
    /// The parameters (indices into the reducer's list), in packing order.
    pub(crate) members: Vec<usize>,
    /// The bytes of its gradients.
    pub(crate) bytes: u64,
}

impl Bucket {
    /// The bucket of `members` of `params`.
    pub(crate) fn new(members: Vec<usize>, params: &[(String, Var)]) -> Bucket {
        let bytes = members.iter().map(|&i| (params[i].1.numel() * params[i].1.dtype().size_in_bytes()) as u64).sum();
        Bucket { members, bytes }
    }

    /// A flat buffer that holds the members' gradients end to end, and the view of it that
    /// each member's `.grad` becomes, in `members` order (PyTorch's
    /// `gradient_as_bucket_view`): backward accumulates into the views, the all-reduce works
    /// on the buffer in place, and nothing is copied in or out. The views are `Var`s kept for
    /// the bucket's life, so that making one the gradient again allocates nothing. A
    /// gradient the parameters already hold is copied into its view, which becomes the
    /// gradient with `as_views`.
    pub(crate) fn pack(&self, params: &[(String, Var)], as_views: bool) -> Result<(Tensor, Vec<Var>)> {
        let first = &params[self.members[0]].1;
        let numel: usize = self.members.iter().map(|&i| params[i].1.numel()).sum();
        let flat = Tensor::zeros([numel], first.dtype())?.to_device(first.device())?;
        let mut views = Vec::with_capacity(self.members.len());
        let mut offset = 0;
        for &i in &self.members {
            let p = &params[i].1;
            let view = Var::new(flat.narrow(0, offset, p.numel())?.reshape(p.shape().dims())?);
            if as_views && let Some(g) = p.grad() {
                view.value().copy_(&g)?;
                p.set_grad_var(Some(view.clone()))?;
            }
            offset += p.numel();
            views.push(view);
        }
        Ok((flat, views))
    }
}

/// Whether `grad` is `view` itself (the same elements of the same storage), so that
/// backward accumulated into the bucket.
pub(crate) fn is_view(grad: &Tensor, view: &Tensor) -> bool {
    grad.shares_storage(view) && grad.layout() == view.layout()
}

/// The cap of the first bucket in MiB: small, so that the first all-reduce starts early in
/// backward (PyTorch's first-bucket size).
const FIRST_BUCKET_MIB: f64 = 1.0;

/// Groups parameters (given as `(numel, bytes per element)` and dtypes, in registration
/// order) into buckets: in reverse order, since backward produces the last layers'
/// gradients first; one dtype per bucket; a bucket closes once it holds `cap_mib` MiB or
/// more (the first at most [`FIRST_BUCKET_MIB`]), so a parameter larger than the cap gets a
/// bucket of its own. Returns the parameter indices of each bucket, in launch order.
pub(crate) fn assign_buckets(sizes: &[(usize, usize)], dtypes: &[DType], cap_mib: f64) -> Vec<Vec<usize>> {
    let mib = |x: f64| (x * 1024.0 * 1024.0) as usize;
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    // Open buckets by dtype: (dtype, members, bytes).
    let mut open: Vec<(DType, Vec<usize>, usize)> = Vec::new();
    for i in (0..sizes.len()).rev() {
        let (numel, elem) = sizes[i];
        let slot = match open.iter().position(|(d, _, _)| *d == dtypes[i]) {
            Some(s) => s,
            None => {
                open.push((dtypes[i], Vec::new(), 0));
                open.len() - 1
            }
        };
        let (_, members, bytes) = &mut open[slot];
        members.push(i);
        *bytes += numel * elem;
        let cap = if buckets.is_empty() { mib(FIRST_BUCKET_MIB.min(cap_mib)) } else { mib(cap_mib) };
        if *bytes >= cap.max(1) {
            let (_, members, _) = open.remove(slot);
            buckets.push(members);
        }
    }
    buckets.extend(open.into_iter().map(|(_, m, _)| m).filter(|m| !m.is_empty()));
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_run_in_reverse_order_and_close_at_the_cap() {
        const MIB: usize = 1024 * 1024;
        // Four f32 tensors of 0.5 MiB each, then one of 2 MiB.
        let sizes = [(MIB / 8, 4), (MIB / 8, 4), (MIB / 8, 4), (MIB / 8, 4), (MIB / 2, 4)];
        let dtypes = [DType::F32; 5];
        // The first bucket closes at 1 MiB (the 2 MiB tensor alone); then 1 MiB buckets.
        assert_eq!(assign_buckets(&sizes, &dtypes, 1.0), vec![vec![4], vec![3, 2], vec![1, 0]]);
        // With 25 MiB, everything after the first bucket shares one.
        assert_eq!(assign_buckets(&sizes, &dtypes, 25.0), vec![vec![4], vec![3, 2, 1, 0]]);
        // Dtypes never share a bucket.
        let mixed = [DType::F32, DType::F64, DType::F32];
        assert_eq!(assign_buckets(&[(1, 4), (1, 8), (1, 4)], &mixed, 25.0), vec![vec![2, 0], vec![1]]);
    }
}
