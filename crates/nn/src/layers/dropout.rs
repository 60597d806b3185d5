//! [`Dropout`], [`Dropout2d`] and their functional forms [`dropout`] and [`dropout2d`].

use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

/// A dropout layer: its drop probability and its mode, applying `$functional`.
macro_rules! dropout_layer {
    ($(#[$doc:meta])* $name:ident, $functional:ident) => {
        $(#[$doc])*
        #[derive(Debug, Module)]
        pub struct $name {
            #[module(skip)]
            p: f64,
            training: TrainingFlag,
        }

        impl $name {
            /// The layer with drop probability `p` in `[0, 1]`.
            pub fn new(p: f64) -> Result<$name> {
                check_p(stringify!($functional), p)?;
                Ok($name { p, training: TrainingFlag::new() })
            }

            /// The drop probability.
            pub fn p(&self) -> f64 {
                self.p
            }

            #[doc = concat!("`", stringify!($functional), "(x, p, training)`: the identity in evaluation.")]
            fn forward(&self, x: &Var) -> Result<Var> {
                $functional(x, self.p, self.training.get())
            }
        }
    };
}

dropout_layer!(
    /// Zeroes each element with probability `p` in training and scales the rest by
    /// `1 / (1 - p)`, so that expectations match evaluation, where it is the identity; PyTorch's
    /// `nn.Dropout`.
    ///
    /// The mask is drawn from ember's global generator (reproducible under `manual_seed`) and
    /// enters the graph as a constant leaf, so that recomputing the graph reuses it.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::{Dropout, Module};
    /// use ember_tensor::{DType, Tensor};
    /// let drop = Dropout::new(0.5)?;
    /// let x = Var::new(Tensor::ones([1000], DType::F32)?);
    /// let kept = drop.forward(&x)?.value().to_vec::<f32>()?;
    /// assert!(kept.iter().all(|&v| v == 0.0 || v == 2.0));
    /// drop.eval();
    /// assert!(drop.forward(&x)?.same_node(&x));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    Dropout,
    dropout
);

fn check_p(op: &'static str, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(op, format!("the probability must be in [0, 1], got {p}")));
    }
    Ok(())
}

/// Functional dropout: `x` itself when not `training` or when `p = 0`; zeros when `p = 1`;
/// otherwise `x` times a mask of `0` (probability `p`) and `1 / (1 - p)`.
pub fn dropout(x: &Var, p: f64, training: bool) -> Result<Var> {
    check_p("dropout", p)?;
    if !training || p == 0.0 || x.numel() == 0 {
        return Ok(x.clone());
    }
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(Error::dtype("dropout", format!("the input must be float, got {dtype}")));
    }
    let mask = if p == 1.0 {
        // 1 / (1 - p) would be infinite; every element is dropped.
        x.value().zeros_like()
    } else {
        let keep = Tensor::uniform_on(x.shape(), 0.0, 1.0, dtype, x.device())?.lt_scalar(1.0 - p);
        keep.to_dtype(dtype).mul_scalar(1.0 / (1.0 - p))
    };
    x.mul(&Var::new(mask))
}

dropout_layer!(
    /// Zeroes whole channels of `[N, C, H, W]` or unbatched `[C, H, W]` inputs with probability
    /// `p` in training and scales the kept ones by `1 / (1 - p)`; the identity in evaluation;
    /// PyTorch's `nn.Dropout2d`. (PyTorch currently reads a 3-d input as `[N, C, L]`, with a
    /// warning that this will change to `[C, H, W]`; ember takes the `[C, H, W]` reading.)
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::{Dropout2d, Module};
    /// use ember_tensor::{DType, Tensor};
    /// let drop = Dropout2d::new(0.5)?;
    /// let y = drop.forward(&Var::new(Tensor::ones([2, 8, 3, 3], DType::F32)?))?.value().to_vec::<f32>()?;
    /// // Every channel's 9 values are all 0 or all 2.
    /// assert!(y.chunks(9).all(|c| c.iter().all(|&v| v == c[0]) && (c[0] == 0.0 || c[0] == 2.0)));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    Dropout2d,
    dropout2d
);

/// Functional channel dropout (see [`Dropout2d`]): `x` itself when not `training` or when
/// `p = 0`; otherwise `x` times a mask with one value per channel, `0` (probability `p`) or
/// `1 / (1 - p)`, broadcast over the spatial dimensions.
pub fn dropout2d(x: &Var, p: f64, training: bool) -> Result<Var> {
    check_p("dropout2d", p)?;
    let rank = x.shape().rank();
    if rank != 3 && rank != 4 {
        return Err(Error::shape(
            "dropout2d",
            format!("expected a 3D [C, H, W] or 4D [N, C, H, W] input, got shape {}", x.shape()),
        ));
    }
    if !training || p == 0.0 || x.numel() == 0 {
        return Ok(x.clone());
    }
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(Error::dtype("dropout2d", format!("the input must be float, got {dtype}")));
    }
    // One draw per channel: the mask keeps the leading (batch and channel) extents.
    let mut shape = x.shape().dims().to_vec();
    for d in &mut shape[rank - 2..] {
        *d = 1;
    }
    let mask = if p == 1.0 {
        Tensor::full_on(shape, 0, dtype, x.device())?
    } else {
        let keep = Tensor::uniform_on(shape, 0.0, 1.0, dtype, x.device())?.lt_scalar(1.0 - p);
        keep.to_dtype(dtype).mul_scalar(1.0 / (1.0 - p))
    };
    x.mul(&Var::new(mask))
}
