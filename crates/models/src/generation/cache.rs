//! [`KvCache`]: the keys and values a decoder has already computed, per layer, so that
//! each generated token costs one position's work instead of the whole sequence's.

use ember_tensor::{Error, Result, Tensor};

/// The keys and values of every attention layer of a decoder, for the positions seen so
/// far: `[batch, kv_heads, positions, head_dim]` per layer.
///
/// Storage grows by doubling, so appending one position per step copies each cached
/// position O(1) times on average instead of once per step (as concatenation would).
///
/// ```
/// use ember_models::generation::KvCache;
/// use ember_tensor::Tensor;
/// let mut cache = KvCache::new(2);
/// let k = Tensor::randn([1, 4, 3, 8])?;
/// let (keys, _values) = cache.append(0, &k, &k)?;
/// assert_eq!(keys.shape().dims(), &[1, 4, 3, 8]);
/// let step = Tensor::randn([1, 4, 1, 8])?;
/// let (keys, _) = cache.append(0, &step, &step)?;
/// assert_eq!(keys.shape().dims(), &[1, 4, 4, 8]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<LayerCache>,
}

/// One layer's buffers; `len` positions of `keys`/`values` (capacity along dimension 2)
/// are filled.
#[derive(Debug, Default)]
struct LayerCache {
    keys: Option<Tensor>,
    values: Option<Tensor>,
    len: usize,
}

/// The dimension positions run along in `[batch, heads, positions, head_dim]`.
const POSITIONS: usize = 2;

impl KvCache {
    /// An empty cache for a decoder of `num_layers` attention layers.
    pub fn new(num_layers: usize) -> KvCache {
        KvCache { layers: (0..num_layers).map(|_| LayerCache::default()).collect() }
    }

    /// The number of layers the cache was made for.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// The number of positions cached (in layer 0; every layer holds the same after a full
    /// forward step).
    pub fn seq_len(&self) -> usize {
        self.layers.first().map_or(0, |l| l.len)
    }

    /// Forgets every cached position, keeping the storage for the next sequence.
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            l.len = 0;
        }
    }

    /// Appends the keys and values of new positions, `[batch, kv_heads, new, head_dim]`, to
    /// layer `layer`, and returns all of that layer's keys and values so far
    /// (`[batch, kv_heads, past + new, head_dim]`, views of the cache's storage).
    ///
    /// Errors: a layer out of range, keys and values of different shapes, or a batch, head
    /// count, head size, dtype or device that differs from what the layer holds.
    pub fn append(&mut self, layer: usize, keys: &Tensor, values: &Tensor) -> Result<(Tensor, Tensor)> {
        const OP: &str = "KvCache::append";
        let n_layers = self.layers.len();
        let cache = self
            .layers
            .get_mut(layer)
            .ok_or_else(|| Error::index(OP, format!("layer {layer} of a cache of {n_layers} layers")))?;
        let dims = keys.shape().dims();
        if dims.len() != 4
            || values.shape().dims().len() != 4
            || dims[..2] != values.shape().dims()[..2]
            || dims[2] != values.shape().dims()[2]
        {
            return Err(Error::shape(
                OP,
                format!(
                    "keys {:?} and values {:?} must be [batch, heads, positions, head_dim] with the same first three sizes",
                    dims,
                    values.shape().dims()
                ),
            ));
        }
        let new = dims[POSITIONS];
        let keys = cache_into(&mut cache.keys, cache.len, keys)?;
        let values = cache_into(&mut cache.values, cache.len, values)?;
        cache.len += new;
        Ok((keys, values))
    }
}

/// Writes `src` after the first `len` positions of `slot`'s buffer (growing it by doubling
/// when full) and returns the filled part.
fn cache_into(slot: &mut Option<Tensor>, len: usize, src: &Tensor) -> Result<Tensor> {
    const OP: &str = "KvCache::append";
    let dims = src.shape().dims();
    let new = dims[POSITIONS];
    let needed = len + new;
    if let Some(buf) = slot.as_ref() {
        let held = buf.shape().dims();
        let fits = [0, 1, 3].iter().all(|&d| held[d] == dims[d]);
        if !fits || buf.dtype() != src.dtype() || buf.device() != src.device() {
            return Err(Error::shape(
                OP,
                format!(
                    "appending {:?} {} on {:?} to a layer holding {:?} {} on {:?}",
                    dims,
                    src.dtype(),
                    src.device(),
                    held,
                    buf.dtype(),
                    buf.device()
                ),
            ));
        }
    }
    let capacity = slot.as_ref().map_or(0, |b| b.shape().dims()[POSITIONS]);
    if needed > capacity {
        let grown = needed.max(capacity * 2).max(16);
        let fresh = Tensor::zeros([dims[0], dims[1], grown, dims[3]], src.dtype())?.to_device(src.device())?;
        if let Some(old) = slot.as_ref().filter(|_| len > 0) {
            fresh.narrow(POSITIONS, 0, len)?.copy_(&old.narrow(POSITIONS, 0, len)?)?;
        }
        *slot = Some(fresh);
    }
    let buf = slot.as_ref().ok_or_else(|| Error::invalid(OP, "cache buffer missing after growth"))?;
    buf.narrow(POSITIONS, len, new)?.copy_(src)?;
    buf.narrow(POSITIONS, 0, needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_positions_come_back_in_order_across_growth() {
        let mut cache = KvCache::new(1);
        let mut all = Vec::new();
        for step in 0..40 {
            let len = if step == 0 { 5 } else { 1 };
            let k = Tensor::randn([2, 3, len, 4]).unwrap();
            all.push(k.clone());
            let (keys, values) = cache.append(0, &k, &k).unwrap();
            let want = Tensor::cat(&all.iter().collect::<Vec<_>>(), 2).unwrap();
            assert_eq!(keys.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            assert_eq!(values.shape().dims(), want.shape().dims());
        }
        assert_eq!(cache.seq_len(), 44);
        cache.clear();
        assert_eq!(cache.seq_len(), 0);
    }

    #[test]
    fn mismatched_appends_are_errors_naming_the_shapes() {
        let mut cache = KvCache::new(1);
        let k = Tensor::randn([1, 2, 3, 4]).unwrap();
        cache.append(0, &k, &k).unwrap();
        let other = Tensor::randn([1, 3, 1, 4]).unwrap();
        let err = cache.append(0, &other, &other).unwrap_err().to_string();
        assert!(err.contains("[1, 3, 1, 4]"), "{err}");
        assert!(cache.append(1, &k, &k).is_err());
        let v = Tensor::randn([1, 2, 2, 4]).unwrap();
        assert!(cache.append(0, &k, &v).is_err());
    }
}
