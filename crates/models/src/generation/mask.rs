//! The attention mask of a decoder step: causal over the cached and new positions, and
//! blind to padding.

use ember_tensor::{DType, Error, Result, Tensor};

/// The boolean attention mask (`u8`, 1 = may attend) of `new` query positions that follow
/// `past` cached ones, `[batch, 1, new, past + new]`, for
/// [`scaled_dot_product_attention`](ember_nn::functional::scaled_dot_product_attention):
/// query `i` (at absolute position `past + i`) sees key `j` when `j <= past + i` and
/// `padding[b, j]` is non-zero.
///
/// `padding` is the Hugging Face `attention_mask`, `[batch, past + new]` of 0/1 (any
/// integer or float dtype); `None` means no padding, and then `None` is returned whenever
/// the plain causal flag or no mask at all does the job (a single new position, or no
/// cache), so that attention can take its fast path.
///
/// ```
/// use ember_models::generation::decoder_mask;
/// use ember_tensor::Tensor;
/// // Two prompts, the first left-padded by one position.
/// let padding = Tensor::from_vec(vec![0i64, 1, 1, 1, 1, 1], [2, 3])?;
/// let mask = decoder_mask(Some(&padding), 2, 0, 3)?.unwrap();
/// assert_eq!(mask.shape().dims(), &[2, 1, 3, 3]);
/// assert_eq!(mask.to_vec::<u8>()?[..9], [0, 0, 0, 0, 1, 0, 0, 1, 1]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn decoder_mask(padding: Option<&Tensor>, batch: usize, past: usize, new: usize) -> Result<Option<Tensor>> {
    const OP: &str = "decoder_mask";
    let total = past + new;
    let keep = match padding {
        None if past == 0 || new == 1 => return Ok(None),
        None => vec![1u8; batch * total],
        Some(p) => {
            if p.shape().dims() != [batch, total] {
                return Err(Error::shape(
                    OP,
                    format!("attention_mask {:?} must be [batch, past + new] = [{batch}, {total}]", p.shape().dims()),
                ));
            }
            p.to_dtype(DType::F64).to_vec::<f64>()?.into_iter().map(|v| u8::from(v != 0.0)).collect()
        }
    };
    let mut out = vec![0u8; batch * new * total];
    for b in 0..batch {
        for i in 0..new {
            let row = &mut out[(b * new + i) * total..][..total];
            for (j, slot) in row.iter_mut().enumerate().take(past + i + 1) {
                *slot = keep[b * total + j];
            }
        }
    }
    Ok(Some(Tensor::from_vec(out, [batch, 1, new, total])?))
}

/// The position ids of `new` positions after `past` cached ones, counting only the
/// positions `padding` keeps (as Hugging Face's `cumsum(attention_mask) - 1`, with padded
/// positions given 1), `[batch, new]` of `i64`; without padding, `past..past + new` in
/// every row.
pub fn position_ids(padding: Option<&Tensor>, batch: usize, past: usize, new: usize) -> Result<Tensor> {
    const OP: &str = "position_ids";
    let total = past + new;
    let mut out = Vec::with_capacity(batch * new);
    match padding {
        None => {
            for _ in 0..batch {
                out.extend((past..total).map(|p| p as i64));
            }
        }
        Some(p) => {
            if p.shape().dims() != [batch, total] {
                return Err(Error::shape(
                    OP,
                    format!("attention_mask {:?} must be [batch, past + new] = [{batch}, {total}]", p.shape().dims()),
                ));
            }
            let keep = p.to_dtype(DType::F64).to_vec::<f64>()?;
            for b in 0..batch {
                let mut count = -1i64;
                for j in 0..total {
                    let kept = keep[b * total + j] != 0.0;
                    count += i64::from(kept);
                    if j >= past {
                        out.push(if kept { count } else { 1 });
                    }
                }
            }
        }
    }
    Tensor::from_vec(out, [batch, new])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_steps_see_every_kept_earlier_position() {
        let padding = Tensor::from_vec(vec![0i64, 1, 1, 1, 1, 1, 1, 1], [2, 4]).unwrap();
        let mask = decoder_mask(Some(&padding), 2, 3, 1).unwrap().unwrap();
        assert_eq!(mask.to_vec::<u8>().unwrap(), vec![0, 1, 1, 1, 1, 1, 1, 1]);
        assert!(decoder_mask(None, 2, 3, 1).unwrap().is_none());
        assert!(decoder_mask(None, 2, 0, 5).unwrap().is_none());
        let chunk = decoder_mask(None, 1, 1, 2).unwrap().unwrap();
        assert_eq!(chunk.to_vec::<u8>().unwrap(), vec![1, 1, 0, 1, 1, 1]);
    }

    #[test]
    fn position_ids_skip_left_padding() {
        let padding = Tensor::from_vec(vec![0i64, 0, 1, 1, 1, 1, 1, 1], [2, 4]).unwrap();
        let ids = position_ids(Some(&padding), 2, 0, 4).unwrap();
        assert_eq!(ids.to_vec::<i64>().unwrap(), vec![1, 1, 0, 1, 0, 1, 2, 3]);
        let ids = position_ids(Some(&padding), 2, 3, 1).unwrap();
        assert_eq!(ids.to_vec::<i64>().unwrap(), vec![1, 3]);
        assert_eq!(position_ids(None, 1, 2, 2).unwrap().to_vec::<i64>().unwrap(), vec![2, 3]);
        assert!(position_ids(Some(&padding), 2, 0, 3).is_err());
    }
}
