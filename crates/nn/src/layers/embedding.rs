//! [`Embedding`]: a lookup table of learned vectors.

use super::param_alloc::named;
use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

/// How to build an [`Embedding`] beyond its sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingOptions {
    /// A row that receives no gradient and starts as zeros, for padding tokens (default
    /// `None`).
    pub padding_idx: Option<usize>,
    /// The weight's dtype (default `f32`).
    pub dtype: DType,
}

impl Default for EmbeddingOptions {
    fn default() -> Self {
        EmbeddingOptions { padding_idx: None, dtype: DType::F32 }
    }
}

/// A table of `num_embeddings` vectors of size `embedding_dim`, looked up by index;
/// PyTorch's `nn.Embedding`. An `i64` input of any shape `[..]` gives `[.., embedding_dim]`.
///
/// The weight starts as `N(0, 1)` draws from ember's global generator, with the padding row
/// (if any) zeroed. The padding row is looked up like any other but never receives a
/// gradient, so it stays what it is.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Embedding, EmbeddingOptions, Module};
/// use ember_tensor::Tensor;
/// let emb = Embedding::with_options(10, 3, EmbeddingOptions { padding_idx: Some(0), ..Default::default() })?;
/// let tokens = Var::new(Tensor::from_vec(vec![4i64, 0, 7, 4], [2, 2])?);
/// let vectors = emb.forward(&tokens)?;
/// assert_eq!(vectors.shape().dims(), &[2, 2, 3]);
/// vectors.sum_all().backward()?;
/// let grad = emb.weight().grad().unwrap().to_vec::<f32>()?;
/// assert_eq!(&grad[0..3], &[0.0; 3]); // the padding row
/// assert_eq!(&grad[12..15], &[2.0; 3]); // row 4, looked up twice
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct Embedding {
    weight: Var,
    #[module(skip)]
    padding_idx: Option<usize>,
    training: TrainingFlag,
}

impl Embedding {
    /// A table of `num_embeddings` vectors of size `embedding_dim`, in `f32`.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Result<Embedding> {
        Self::with_options(num_embeddings, embedding_dim, EmbeddingOptions::default())
    }

    /// A table with the given options (a padding row, another dtype).
    pub fn with_options(num_embeddings: usize, embedding_dim: usize, options: EmbeddingOptions) -> Result<Embedding> {
        let EmbeddingOptions { padding_idx, dtype } = options;
        if !dtype.is_float() {
            return Err(Error::dtype("Embedding", format!("the weight must be float, got {dtype}")));
        }
        if let Some(p) = padding_idx {
            check_padding(p, num_embeddings)?;
        }
        let weight =
            Tensor::normal([num_embeddings, embedding_dim], 0.0, 1.0, dtype).map_err(named("Embedding.weight"))?;
        if let Some(p) = padding_idx {
            weight.narrow(0, p, 1)?.fill_(0.0)?;
        }
        Self::from_params(Var::param(weight), padding_idx)
    }

    /// A table over an existing weight `Var` of shape `[num_embeddings, embedding_dim]`,
    /// shared with its other holders (weight tying), used as it is (the padding row is not
    /// zeroed); PyTorch's `Embedding.from_pretrained(.., freeze=False)`. Call
    /// [`Var::freeze`] on the weight for `freeze=True`.
    pub fn from_params(weight: Var, padding_idx: Option<usize>) -> Result<Embedding> {
        if weight.rank() != 2 {
            return Err(Error::shape(
                "Embedding",
                format!("the weight must be [num_embeddings, embedding_dim], got shape {:?}", weight.shape()),
            ));
        }
        if !weight.dtype().is_float() {
            return Err(Error::dtype("Embedding", format!("the weight must be float, got {}", weight.dtype())));
        }
        if let Some(p) = padding_idx {
            check_padding(p, weight.shape()[0])?;
        }
        Ok(Embedding { weight, padding_idx, training: TrainingFlag::new() })
    }

    /// The table, `[num_embeddings, embedding_dim]`.
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The row that receives no gradient, if any.
    pub fn padding_idx(&self) -> Option<usize> {
        self.padding_idx
    }

    /// How many vectors the table holds.
    pub fn num_embeddings(&self) -> usize {
        self.weight.shape().dims().first().copied().unwrap_or(0)
    }

    /// The size of each vector.
    pub fn embedding_dim(&self) -> usize {
        self.weight.shape().dims().get(1).copied().unwrap_or(0)
    }

    /// The vectors at the `i64` `indices` (any shape `[..]`), as `[.., embedding_dim]`.
    fn forward(&self, indices: &Var) -> Result<Var> {
        embedding(indices, &self.weight, self.padding_idx)
    }
}

fn check_padding(padding_idx: usize, num_embeddings: usize) -> Result<()> {
    if padding_idx >= num_embeddings {
        return Err(Error::index(
            "Embedding",
            format!("padding_idx {padding_idx} is out of range for {num_embeddings} embeddings"),
        ));
    }
    Ok(())
}

impl fmt::Debug for Embedding {
    /// PyTorch's repr: `Embedding(10, 3, padding_idx=0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Embedding({}, {}", self.num_embeddings(), self.embedding_dim())?;
        if let Some(p) = self.padding_idx {
            write!(f, ", padding_idx={p}")?;
        }
        write!(f, ")")
    }
}

/// Functional lookup: the rows of `weight` (`[num_embeddings, dim]`) at the `i64`
/// `indices` (any shape `[..]`), as `[.., dim]`; the row `padding_idx` passes no gradient
/// back. PyTorch's `F.embedding`.
pub fn embedding(indices: &Var, weight: &Var, padding_idx: Option<usize>) -> Result<Var> {
    if indices.dtype() != DType::I64 {
        return Err(Error::dtype("Embedding", format!("indices must be i64, got {}", indices.dtype())));
    }
    if weight.rank() != 2 {
        return Err(Error::shape(
            "Embedding",
            format!("the weight must be [num_embeddings, embedding_dim], got shape {:?}", weight.shape()),
        ));
    }
    let mut out_shape = indices.shape().dims().to_vec();
    out_shape.push(weight.shape()[1]);
    // The indices are data, never differentiated: a plain tensor (any recorded history of
    // theirs stays out of this graph).
    let flat = indices.value().flatten_all();
    let rows = weight.index_select(0, &flat)?;
    let rows = match padding_idx {
        None => rows,
        Some(p) => {
            check_padding(p, weight.shape()[0])?;
            let pad =
                i64::try_from(p).map_err(|_| Error::index("Embedding", format!("padding_idx {p} is too large")))?;
            let at_padding = Var::new(flat.eq_scalar(pad).reshape([flat.numel(), 1])?);
            // Where the padding row was looked up, its detached value (one row, broadcast)
            // replaces it: the same values, but no gradient reaches that row.
            at_padding.where_cond(&weight.detach().narrow(0, p, 1)?, &rows)?
        }
    };
    rows.reshape(out_shape)
}
