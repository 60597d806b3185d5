//! [`StateDict`]: named tensors in insertion order, like PyTorch's `OrderedDict`.

use ember_tensor::{DType, Error, Result, Tensor};
use std::collections::HashMap;
use std::fmt;

/// A module's parameters and buffers by name, in the order the module lists them (PyTorch's
/// `state_dict()` layout): the unit that is saved, loaded and compared.
///
/// Inserting an existing name replaces its tensor in place, keeping the order.
///
/// ```
/// use ember_io::StateDict;
/// use ember_tensor::{DType, Tensor};
/// let mut sd = StateDict::new();
/// sd.insert("weight", Tensor::zeros([2, 3], DType::F32)?);
/// sd.insert("bias", Tensor::zeros([2], DType::F32)?);
/// assert_eq!(sd.keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// assert_eq!(sd.get("bias").map(|t| t.shape().to_vec()), Some(vec![2]));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
    index: HashMap<String, usize>,
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tensor` under `name`, returning the tensor it replaces, if any.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) -> Option<Tensor> {
        let name = name.into();
        match self.index.get(&name) {
            Some(&i) => Some(std::mem::replace(&mut self.entries[i].1, tensor)),
            None => {
                self.index.insert(name.clone(), self.entries.len());
                self.entries.push((name, tensor));
                None
            }
        }
    }

    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.index.get(name).map(|&i| &self.entries[i].1)
    }

    /// Whether `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Removes `name`, returning its tensor; the others keep their order.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        let i = self.index.remove(name)?;
        let (_, t) = self.entries.remove(i);
        for slot in self.index.values_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(t)
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// The names and tensors, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// The same entries with `prefix` and a dot before every name (how containers name
    /// their children's entries: `0.weight`).
    pub fn with_prefix(self, prefix: &str) -> StateDict {
        self.entries.into_iter().map(|(n, t)| (format!("{prefix}.{n}"), t)).collect()
    }

    /// The total number of scalar values.
    pub fn numel(&self) -> usize {
        self.entries.iter().map(|(_, t)| t.numel()).sum()
    }

    /// The same entries with every floating tensor (`f16`, `bf16`, `f32`, `f64`) converted
    /// to the floating `dtype`, rounding to nearest even; integer and mask tensors (a batch
    /// norm's `num_batches_tracked`) stay as they are. PyTorch's
    /// `{k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}`, and what
    /// `model.to(dtype)` does to a state dict. A tensor already of `dtype` is kept, not
    /// copied. The conversion is [`Tensor::to_dtype`], so it follows ember's subnormal
    /// policy: with flushing on (the default), a value below `f32`'s smallest normal one
    /// (only `bf16` has such values) becomes zero, as any kernel would read it. A `dtype`
    /// that is not floating is an error, as it is for PyTorch's `Module.to`.
    ///
    /// ```
    /// use ember_io::StateDict;
    /// use ember_tensor::{DType, Tensor, bf16};
    /// let mut sd = StateDict::new();
    /// sd.insert("weight", Tensor::from_vec(vec![bf16::from_f32(0.5), bf16::from_f32(-2.0)], [2])?);
    /// sd.insert("steps", Tensor::from_vec(vec![3i64], [1])?);
    /// let wide = sd.to_dtype(DType::F32)?;
    /// assert_eq!(wide.get("weight").map(|t| t.to_vec::<f32>()).transpose()?, Some(vec![0.5, -2.0]));
    /// assert_eq!(wide.get("steps").map(|t| t.dtype()), Some(DType::I64));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn to_dtype(self, dtype: DType) -> Result<StateDict> {
        if !dtype.is_float() {
            return Err(Error::dtype(
                "StateDict::to_dtype",
                format!("converts floating tensors to a floating dtype (f16, bf16, f32 or f64), not to {dtype}"),
            ));
        }
        let index = self.index;
        let entries = self
            .entries
            .into_iter()
            .map(|(n, t)| {
                let t = if t.dtype().is_float() { t.to_dtype(dtype) } else { t };
                (n, t)
            })
            .collect();
        Ok(StateDict { entries, index })
    }
}

impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        let mut sd = StateDict::new();
        sd.extend(iter);
        sd
    }
}

impl Extend<(String, Tensor)> for StateDict {
    fn extend<I: IntoIterator<Item = (String, Tensor)>>(&mut self, iter: I) {
        for (n, t) in iter {
            self.insert(n, t);
        }
    }
}

impl IntoIterator for StateDict {
    type Item = (String, Tensor);
    type IntoIter = std::vec::IntoIter<(String, Tensor)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl fmt::Debug for StateDict {
    /// One line per entry: name, dtype and shape (not the values).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (n, t) in &self.entries {
            m.entry(n, &format_args!("{}{:?}", t.dtype(), t.shape()));
        }
        m.finish()
    }
}
