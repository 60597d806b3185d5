//! [`RotaryEmbedding`]: rotary position embeddings (RoPE) as the LLaMA family applies them,
//! with the `rope_scaling` variants of Hugging Face configurations, and [`apply_rotary`].

use ember_autograd::Var;
use ember_tensor::{DType, Error, Result, Tensor};

const OP: &str = "RotaryEmbedding";

/// How the rotary frequencies are stretched for contexts longer than the model was trained
/// on: the `rope_scaling` (or `rope_parameters`) entry of a Hugging Face configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// `"linear"`: every frequency divided by `factor` (positions interpolated).
    Linear {
        /// The divisor of the frequencies.
        factor: f64,
    },
    /// `"dynamic"` (NTK-aware): when a call's positions reach beyond
    /// `original_max_position_embeddings`, the base is raised to
    /// `theta * (factor * len / original - (factor - 1))^(d / (d - 2))` for that call's
    /// length `len` (the largest position + 1); shorter calls use the plain frequencies.
    Dynamic {
        /// The scaling factor.
        factor: f64,
        /// The context length the model was trained on.
        original_max_position_embeddings: usize,
    },
    /// `"llama3"`: low frequencies (wavelengths longer than `original / low_freq_factor`)
    /// divided by `factor`, high frequencies (shorter than `original / high_freq_factor`)
    /// kept, and the band between interpolated smoothly.
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Wavelengths longer than `original / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths shorter than `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was trained on.
        original_max_position_embeddings: usize,
    },
}

/// Rotary position embeddings for heads of size `head_dim`: the `cos`/`sin` tables of given
/// positions ([`RotaryEmbedding::cos_sin`]), applied to queries and keys by [`apply_rotary`]
/// in the "rotate half" convention of Hugging Face's LLaMA (dimension `i` pairs with
/// `i + head_dim / 2`). Frequency `i` is `theta^(-2i / head_dim)`, changed by the
/// [`RopeScaling`], and computed in `f32` as transformers does, so that checkpoints trained
/// there see the same angles.
///
/// The layer holds no parameters (transformers' `inv_freq` is a non-persistent buffer).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{apply_rotary, RotaryEmbedding};
/// use ember_tensor::{DType, Tensor};
/// let rope = RotaryEmbedding::new(8, 10000.0, None)?;
/// let positions = Tensor::from_vec(vec![0i64, 1, 2], [1, 3])?; // [batch, seq]
/// let (cos, sin) = rope.cos_sin(&positions, DType::F32)?; // [1, 3, 8] each
/// let q = Var::new(Tensor::randn([1, 2, 3, 8])?); // [batch, heads, seq, head_dim]
/// let rotated = apply_rotary(&q, &cos, &sin)?;
/// // Position 0 is not rotated.
/// let first = |t: &Var| t.value().narrow(2, 0, 1).unwrap().to_vec::<f32>().unwrap();
/// assert_eq!(first(&rotated), first(&q));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    head_dim: usize,
    theta: f64,
    scaling: Option<RopeScaling>,
    inv_freq: Vec<f32>,
}

impl RotaryEmbedding {
    /// The embedding of heads of size `head_dim` (even) with base `theta` (transformers'
    /// `rope_theta`) and an optional scaling.
    ///
    /// Errors: an odd or zero `head_dim`, a non-positive `theta`, or a scaling whose factors
    /// are not positive (or, for `llama3`, whose `high_freq_factor` is not above
    /// `low_freq_factor`).
    pub fn new(head_dim: usize, theta: f64, scaling: Option<RopeScaling>) -> Result<RotaryEmbedding> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::invalid(OP, format!("head_dim must be even and positive, got {head_dim}")));
        }
        if !(theta > 0.0 && theta.is_finite()) {
            return Err(Error::invalid(OP, format!("rope_theta must be positive, got {theta}")));
        }
        check_scaling(scaling)?;
        let plain = default_inv_freq(head_dim, theta);
        let inv_freq = match scaling {
            None | Some(RopeScaling::Dynamic { .. }) => plain,
            Some(RopeScaling::Linear { factor }) => plain.iter().map(|f| f / factor as f32).collect(),
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            }) => llama3_inv_freq(&plain, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings),
        };
        Ok(RotaryEmbedding { head_dim, theta, scaling, inv_freq })
    }

    /// The size of the heads the embedding rotates.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The base of the frequencies.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The scaling, if any.
    pub fn scaling(&self) -> Option<RopeScaling> {
        self.scaling
    }

    /// The `head_dim / 2` frequencies (radians per position) of calls whose positions stay
    /// within the trained context.
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// The `cos` and `sin` of the angles of `position_ids` (`[batch, seq]`, integer), each
    /// `[batch, seq, head_dim]` in `dtype`, on the positions' device: angle `i` of a
    /// position `p` is `p * inv_freq[i mod head_dim / 2]`, computed in `f32`.
    ///
    /// Errors: positions that are not an integer `[batch, seq]` tensor, or a float `dtype`
    /// that is not float.
    pub fn cos_sin(&self, position_ids: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
        if position_ids.rank() != 2 || position_ids.dtype().is_float() {
            return Err(Error::shape(
                OP,
                format!(
                    "position_ids must be integer [batch, seq], got {:?} {}",
                    position_ids.shape().dims(),
                    position_ids.dtype()
                ),
            ));
        }
        if !dtype.is_float() {
            return Err(Error::dtype(OP, format!("cos/sin must be float, got {dtype}")));
        }
        let inv_freq = match self.scaling {
            Some(RopeScaling::Dynamic { factor, original_max_position_embeddings }) => {
                let longest = position_ids.to_dtype(DType::I64).to_vec::<i64>()?.into_iter().max().unwrap_or(0);
                let len = usize::try_from(longest).unwrap_or(0) + 1;
                if len > original_max_position_embeddings {
                    let d = self.head_dim as f64;
                    let stretch = factor * len as f64 / original_max_position_embeddings as f64 - (factor - 1.0);
                    default_inv_freq(self.head_dim, self.theta * stretch.powf(d / (d - 2.0)))
                } else {
                    self.inv_freq.clone()
                }
            }
            _ => self.inv_freq.clone(),
        };
        let half = inv_freq.len();
        let inv_freq = Tensor::from_vec(inv_freq, [half])?.to_device(position_ids.device())?;
        let freqs = position_ids.to_dtype(DType::F32).unsqueeze(2)?.mul(&inv_freq)?;
        let angles = Tensor::cat(&[&freqs, &freqs], 2)?;
        Ok((angles.cos().to_dtype(dtype), angles.sin().to_dtype(dtype)))
    }
}

/// The unscaled frequencies `1 / theta^(2i / d)`, in `f32` as transformers computes them.
fn default_inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    let base = theta as f32;
    (0..head_dim / 2).map(|i| 1.0 / base.powf((2 * i) as f32 / head_dim as f32)).collect()
}

/// Llama 3's frequency bands (see [`RopeScaling::Llama3`]).
fn llama3_inv_freq(plain: &[f32], factor: f64, low: f64, high: f64, original: usize) -> Vec<f32> {
    let original = original as f64;
    let (low_wavelen, high_wavelen) = (original / low, original / high);
    plain
        .iter()
        .map(|&f| {
            let f = f64::from(f);
            let wavelen = 2.0 * std::f64::consts::PI / f;
            let scaled = if wavelen > low_wavelen {
                f / factor
            } else if wavelen < high_wavelen {
                f
            } else {
                let smooth = (original / wavelen - low) / (high - low);
                (1.0 - smooth) * f / factor + smooth * f
            };
            scaled as f32
        })
        .collect()
}

fn check_scaling(scaling: Option<RopeScaling>) -> Result<()> {
    let positive = |name: &str, v: f64| {
        if v > 0.0 && v.is_finite() {
            Ok(())
        } else {
            Err(Error::invalid(OP, format!("rope_scaling {name} must be positive, got {v}")))
        }
    };
    let trained = |n: usize| {
        if n > 0 {
            Ok(())
        } else {
            Err(Error::invalid(OP, "rope_scaling original_max_position_embeddings must be positive"))
        }
    };
    match scaling {
        None => Ok(()),
        Some(RopeScaling::Linear { factor }) => positive("factor", factor),
        Some(RopeScaling::Dynamic { factor, original_max_position_embeddings }) => {
            positive("factor", factor)?;
            trained(original_max_position_embeddings)
        }
        Some(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }) => {
            positive("factor", factor)?;
            positive("low_freq_factor", low_freq_factor)?;
            positive("high_freq_factor", high_freq_factor)?;
            trained(original_max_position_embeddings)?;
            if high_freq_factor <= low_freq_factor {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "llama3 rope_scaling needs high_freq_factor > low_freq_factor, got {high_freq_factor} <= {low_freq_factor}"
                    ),
                ));
            }
            Ok(())
        }
    }
}

/// Rotates `x` (`[batch, heads, seq, head_dim]`) by the angles whose `cos` and `sin` are
/// given (`[batch, seq, head_dim]`, from [`RotaryEmbedding::cos_sin`]):
/// `x * cos + rotate_half(x) * sin`, where `rotate_half(x) = cat(-x2, x1)` for the halves
/// `x1`, `x2` of the last dimension. Differentiable in `x` (the tables are constants).
///
/// Errors: tables whose shape is not `[batch, seq, head_dim]` of `x`, or of another dtype.
pub fn apply_rotary(x: &Var, cos: &Tensor, sin: &Tensor) -> Result<Var> {
    let op = "apply_rotary";
    let dims = x.shape().dims().to_vec();
    if dims.len() != 4 || !dims[3].is_multiple_of(2) {
        return Err(Error::shape(
            op,
            format!("x must be [batch, heads, seq, head_dim] with an even head_dim, got {dims:?}"),
        ));
    }
    let want = [dims[0], dims[2], dims[3]];
    for (name, t) in [("cos", cos), ("sin", sin)] {
        if t.shape().dims() != want {
            return Err(Error::shape(
                op,
                format!("{name} must be [batch, seq, head_dim] = {want:?} for x {dims:?}, got {:?}", t.shape().dims()),
            ));
        }
        if t.dtype() != x.dtype() {
            return Err(Error::dtype(op, format!("x is {} but {name} is {}", x.dtype(), t.dtype())));
        }
    }
    let half = dims[3] / 2;
    let rotated = Var::cat(&[&x.narrow(3, half, half)?.neg(), &x.narrow(3, 0, half)?], 3)?;
    let cos = Var::new(cos.unsqueeze(1)?);
    let sin = Var::new(sin.unsqueeze(1)?);
    x.mul(&cos)?.add(&rotated.mul(&sin)?)
}
