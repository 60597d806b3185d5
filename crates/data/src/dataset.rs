//! The [`Dataset`] trait and [`TensorDataset`], a dataset held in memory as tensors.

use ember_tensor::{Error, Result, Tensor};

/// A finite, indexable collection of samples; each sample is a list of fields (for
/// example `[image, label]`), one tensor per field.
///
/// Only [`len`](Dataset::len) and [`get`](Dataset::get) are required. The
/// [`DataLoader`](crate::DataLoader) asks for whole batches through
/// [`get_batch`](Dataset::get_batch), whose default gathers the samples one by one and
/// stacks each field; datasets that can gather rows in one operation should override it.
///
/// Datasets are `Send + Sync` because the loader builds batches on a worker thread while
/// the training loop runs.
///
/// ```
/// use ember_data::Dataset;
/// use ember_tensor::{Result, Tensor};
///
/// /// The pairs (x, x^2) for x in 0..n.
/// struct Squares(usize);
///
/// impl Dataset for Squares {
///     fn len(&self) -> usize {
///         self.0
///     }
///     fn get(&self, index: usize) -> Result<Vec<Tensor>> {
///         let x = index as f32;
///         Ok(vec![Tensor::scalar(x), Tensor::scalar(x * x)])
///     }
/// }
///
/// let batch = Squares(10).get_batch(&[3, 1])?;
/// assert_eq!(batch[1].to_vec::<f32>()?, vec![9.0, 1.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub trait Dataset: Send + Sync {
    /// The number of samples.
    fn len(&self) -> usize;

    /// Whether the dataset holds no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fields of sample `index`; an error when `index >= len()`.
    fn get(&self, index: usize) -> Result<Vec<Tensor>>;

    /// The samples at `indices`, each field stacked along a new leading dimension: a
    /// field of shape `S` becomes a batch of shape `[indices.len(), S...]`.
    ///
    /// The default calls [`get`](Dataset::get) for each index and stacks; it needs at least
    /// one index (an empty list gives no field shapes to stack) and samples that agree in
    /// their number of fields and in each field's shape.
    fn get_batch(&self, indices: &[usize]) -> Result<Vec<Tensor>> {
        stack_samples(&indices.iter().map(|&i| self.get(i)).collect::<Result<Vec<_>>>()?)
    }
}

/// Stacks samples field by field (the default [`Dataset::get_batch`]).
fn stack_samples(samples: &[Vec<Tensor>]) -> Result<Vec<Tensor>> {
    const OP: &str = "Dataset::get_batch";
    let first = samples.first().ok_or_else(|| Error::invalid(OP, "cannot build a batch from no indices"))?;
    if let Some((i, s)) = samples.iter().enumerate().find(|(_, s)| s.len() != first.len()) {
        return Err(Error::shape(
            OP,
            format!("sample {i} of the batch has {} fields but sample 0 has {}", s.len(), first.len()),
        ));
    }
    (0..first.len())
        .map(|field| {
            let column: Vec<&Tensor> = samples.iter().map(|s| &s[field]).collect();
            Tensor::stack(&column, 0)
        })
        .collect()
}

/// A dataset of tensors that share their first dimension: sample `i` is row `i` of every
/// field, PyTorch's `TensorDataset`.
///
/// Batches come from one [`Tensor::index_select`] per field, a row copy with no per-sample
/// work, so a batch of 64 MNIST images costs a few microseconds.
///
/// ```
/// use ember_data::{Dataset, TensorDataset};
/// use ember_tensor::Tensor;
///
/// let images = Tensor::arange(0, 12)?.reshape([4, 3])?;
/// let labels = Tensor::from_vec(vec![0i64, 1, 0, 1], [4])?;
/// let ds = TensorDataset::new(vec![images, labels])?;
/// assert_eq!(ds.len(), 4);
/// let batch = ds.get_batch(&[2, 0])?;
/// assert_eq!(batch[0].to_vec::<i64>()?, vec![6, 7, 8, 0, 1, 2]);
/// assert_eq!(batch[1].to_vec::<i64>()?, vec![0, 0]);
///
/// // Fields must agree on the number of samples.
/// let short = Tensor::from_vec(vec![0i64; 3], [3])?;
/// assert!(TensorDataset::new(vec![Tensor::zeros([4, 2], ember_tensor::DType::F32)?, short]).is_err());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TensorDataset {
    fields: Vec<Tensor>,
    len: usize,
}

impl TensorDataset {
    /// A dataset over `fields`. Each field needs at least one dimension, and all must share
    /// the extent of their first dimension (the number of samples).
    pub fn new(fields: Vec<Tensor>) -> Result<TensorDataset> {
        const OP: &str = "TensorDataset::new";
        let first = fields.first().ok_or_else(|| Error::invalid(OP, "expected at least one field"))?;
        for (i, f) in fields.iter().enumerate() {
            if f.rank() == 0 {
                return Err(Error::shape(OP, format!("field {i} is a scalar; fields need a leading sample dimension")));
            }
        }
        let len = first.shape()[0];
        if let Some((i, f)) = fields.iter().enumerate().find(|(_, f)| f.shape()[0] != len) {
            return Err(Error::shape(
                OP,
                format!(
                    "field {i} of shape {:?} holds {} samples but field 0 of shape {:?} holds {len}",
                    f.shape(),
                    f.shape()[0],
                    first.shape()
                ),
            ));
        }
        Ok(TensorDataset { fields, len })
    }

    /// The fields, each with all samples.
    pub fn fields(&self) -> &[Tensor] {
        &self.fields
    }

    /// The fields, giving up the dataset.
    pub fn into_fields(self) -> Vec<Tensor> {
        self.fields
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.len
    }

    /// Row `index` of every field, as views that share the dataset's storage.
    fn get(&self, index: usize) -> Result<Vec<Tensor>> {
        if index >= self.len {
            return Err(Error::index(
                "TensorDataset::get",
                format!("index {index} is out of range for a dataset of {} samples", self.len),
            ));
        }
        self.fields.iter().map(|f| f.select(0, index)).collect()
    }

    /// One `index_select` per field; an empty `indices` gives fields with zero rows.
    fn get_batch(&self, indices: &[usize]) -> Result<Vec<Tensor>> {
        let rows = indices
            .iter()
            .map(|&i| {
                // Checked here too so that the error speaks of samples, not of dimension 0
                // of some field.
                i64::try_from(i).ok().filter(|_| i < self.len).ok_or_else(|| {
                    Error::index(
                        "TensorDataset::get_batch",
                        format!("index {i} is out of range for a dataset of {} samples", self.len),
                    )
                })
            })
            .collect::<Result<Vec<i64>>>()?;
        let n = rows.len();
        let index = Tensor::from_vec(rows, [n])?;
        self.fields.iter().map(|f| f.index_select(0, &index)).collect()
    }
}
