//! Property tests of ember-nn's layers under random and hostile arguments: every constructor
//! either builds parameters of the shapes PyTorch gives or fails with an error naming the
//! layer (sizes far beyond memory included: refused before allocating, never an abort), and
//! every layer option agrees with the functional form or a naive computation from the
//! layer's own weights and submodules. A panic fails the property.
//!
//! Covered: the constructors of every layer with parameters (zero, small and huge sizes);
//! `ConvTranspose1d/2d` options against `Tensor::conv_transpose*`; `Upsample` against
//! `interpolate`; `TransformerEncoderLayer` / `TransformerDecoderLayer` and their stacks
//! (norm_first, activations, layouts, bool and float masks of right and wrong shapes)
//! against their submodules in eval mode; `MultiheadAttention` options (kdim/vdim,
//! bias_kv, zero attention, masks, weights averaged or per head) against naive attention;
//! `Flatten`, `Unflatten`, `fold`/`unfold`, `Embedding` padding rows and the dropout
//! probabilities.
//!
//! Case counts are kept small for the debug test run; a longer run:
//! `PROPTEST_CASES=2000 cargo test --release -p ember-nn --test prop_layers_nn`.

use ember_autograd::Var;
use ember_nn::functional::{self as F, ConvTransposeArgs, InterpolateMode, UnfoldArgs};
use ember_nn::{
    BatchNorm1d, BatchNorm2d, CellOptions, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose1dOptions, ConvTranspose2d,
    ConvTranspose2dOptions, DecoderMasks, Dropout, Dropout2d, Embedding, EmbeddingOptions, EncoderMasks, Flatten, GRU,
    GRUCell, GroupNorm, InstanceNorm2d, InstanceNormOptions, LSTM, LSTMCell, LayerNorm, Linear, Module,
    MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions, RMSNorm, RNN, RNNCell, RnnOptions,
    TransformerActivation, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
    TransformerLayerOptions, Unflatten, Upsample,
};
use ember_tensor::{DType, Result, Tensor};
use ember_testing::gradcheck::seed_guard;
use ember_testing::prop::{close, dtype, tensor, values, var_f64s};
use proptest::prelude::*;

/// Cases per property, unless `PROPTEST_CASES` says otherwise: the file adds a few seconds
/// to the debug test run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// Sizes a user may pass: small ones (zero included) or ones whose every product with a
/// non-zero size is beyond any address space (2^45 and up), so a test never allocates a
/// large tensor.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0usize..5,
        1 => prop::sample::select(vec![1usize << 45, 1 << 50, (1 << 60) - 1, 1 << 60, 1 << 62, usize::MAX / 3, usize::MAX]),
    ]
}

/// Checks a constructor's result: `Ok` with parameters of the `want` shapes (`None`: a shape
/// whose extents overflow, which must be refused), or an error starting with `layer`.
fn built<M: Module>(layer: &str, result: Result<M>, want: &[(&str, Option<Vec<usize>>)]) -> Result<(), TestCaseError> {
    match result {
        Ok(m) => {
            let params = m.named_parameters();
            for (name, shape) in want {
                let Some(shape) = shape else {
                    return Err(TestCaseError::fail(format!("{layer}: {name} overflows but the layer was built")));
                };
                let got = params.iter().find(|(n, _)| n == name).map(|(_, p)| p.shape().dims().to_vec());
                prop_assert_eq!(got.as_ref(), Some(shape), "{} {}", layer, name);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.starts_with(layer), "error {:?} does not name {}", msg, layer);
        }
    }
    Ok(())
}

/// `a * b`, `None` on overflow.
fn mul(a: usize, b: usize) -> Option<usize> {
    a.checked_mul(b)
}

/// Bitwise agreement of two results: the same values, or both errors.
fn same(layer: Result<Var>, functional: Result<Tensor>) -> Result<(), TestCaseError> {
    match (layer, functional) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a.shape().dims().to_vec(), b.shape().dims().to_vec());
            prop_assert_eq!(var_f64s(&a), b.to_vec_f64().unwrap());
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        (a, b) => prop_assert!(
            false,
            "layer {:?} but functional {:?}",
            a.map(|v| v.shape().clone()),
            b.map(|t| t.shape().clone())
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1000))]

    /// Every layer constructor with zero, small and huge sizes: parameters of PyTorch's
    /// shapes, or an error naming the layer (refusals of sizes too large to hold included).
    #[test]
    fn layer_constructors_build_their_shapes_or_name_the_layer(a in size(), b in size(), k in 1usize..4, heads in 1usize..3) {
        let _rng = seed_guard(7);
        built("Linear", Linear::new(a, b), &[("weight", Some(vec![b, a])), ("bias", Some(vec![b]))])?;
        built("Embedding", Embedding::new(a, b), &[("weight", Some(vec![a, b]))])?;
        built("Conv1d", Conv1d::new(a, b, k), &[("weight", Some(vec![b, a, k])), ("bias", Some(vec![b]))])?;
        built("Conv2d", Conv2d::new(a, b, k), &[("weight", Some(vec![b, a, k, k]))])?;
        built("ConvTranspose1d", ConvTranspose1d::new(a, b, k), &[("weight", Some(vec![a, b, k])), ("bias", Some(vec![b]))])?;
        built("ConvTranspose2d", ConvTranspose2d::new(a, b, k), &[("weight", Some(vec![a, b, k, k]))])?;
        built("LayerNorm", LayerNorm::new(&[a, b]), &[("weight", Some(vec![a, b])), ("bias", Some(vec![a, b]))])?;
        built("RMSNorm", RMSNorm::new(&[a, b]), &[("weight", Some(vec![a, b]))])?;
        built("BatchNorm1d", BatchNorm1d::new(a), &[("weight", Some(vec![a])), ("bias", Some(vec![a]))])?;
        built("BatchNorm2d", BatchNorm2d::new(a), &[("weight", Some(vec![a]))])?;
        built("GroupNorm", GroupNorm::new(heads, a), &[("weight", Some(vec![a]))])?;
        let affine = InstanceNormOptions { affine: true, track_running_stats: true, ..Default::default() };
        built("InstanceNorm2d", InstanceNorm2d::with_options(a, affine), &[("weight", Some(vec![a]))])?;
        for (layer, gates) in [("RNN", 1), ("LSTM", 4), ("GRU", 3)] {
            let rows = mul(gates, b);
            let want = [
                ("weight_ih_l0", rows.map(|r| vec![r, a])),
                ("weight_hh_l0", rows.map(|r| vec![r, b])),
                ("bias_hh_l0", rows.map(|r| vec![r])),
            ];
            let options = RnnOptions::default().num_layers(k).bidirectional(heads == 2);
            match layer {
                "RNN" => built(layer, RNN::with_options(a, b, options), &want)?,
                "LSTM" => built(layer, LSTM::with_options(a, b, options), &want)?,
                _ => built(layer, GRU::with_options(a, b, options), &want)?,
            }
            let want = [("weight_ih", rows.map(|r| vec![r, a])), ("weight_hh", rows.map(|r| vec![r, b]))];
            let options = CellOptions::default();
            match layer {
                "RNN" => built("RNNCell", RNNCell::with_options(a, b, options), &want)?,
                "LSTM" => built("LSTMCell", LSTMCell::with_options(a, b, options), &want)?,
                _ => built("GRUCell", GRUCell::with_options(a, b, options), &want)?,
            }
        }
        let rows = mul(3, a);
        built("MultiheadAttention", MultiheadAttention::new(a, heads), &[
            ("in_proj_weight", rows.map(|r| vec![r, a])),
            ("in_proj_bias", rows.map(|r| vec![r])),
            ("out_proj.weight", Some(vec![a, a])),
        ])?;
        let separate = MultiheadAttentionOptions { kdim: Some(b.max(1)), vdim: Some(k), add_bias_kv: true, ..Default::default() };
        let want = if b.max(1) == a && k == a {
            vec![("in_proj_weight", rows.map(|r| vec![r, a])), ("bias_k", Some(vec![1, 1, a]))]
        } else {
            vec![("k_proj_weight", Some(vec![a, b.max(1)])), ("v_proj_weight", Some(vec![a, k])), ("bias_k", Some(vec![1, 1, a]))]
        };
        built("MultiheadAttention", MultiheadAttention::with_options(a, heads, separate), &want)?;
        let options = TransformerLayerOptions { dim_feedforward: b, ..Default::default() };
        let want = [
            ("self_attn.in_proj_weight", rows.map(|r| vec![r, a])),
            ("linear1.weight", Some(vec![b, a])),
            ("linear2.weight", Some(vec![a, b])),
            ("norm2.weight", Some(vec![a])),
        ];
        built("TransformerEncoderLayer", TransformerEncoderLayer::with_options(a, heads, options), &want)?;
        built("TransformerDecoderLayer", TransformerDecoderLayer::with_options(a, heads, options), &want)?;
        // Stacks: the copies are counted before any is made.
        let small = TransformerLayerOptions { dim_feedforward: 4, ..Default::default() };
        let layers = [b, 0, k, 1 << 45, usize::MAX][a % 5];
        let last = format!("layers.{}.linear1.weight", layers.saturating_sub(1));
        let want = [(last.as_str(), Some(vec![4, 4]))];
        built("TransformerEncoder", TransformerEncoder::new(TransformerEncoderLayer::with_options(4, 2, small).unwrap(), layers, None), &want)?;
        built("TransformerDecoder", TransformerDecoder::new(TransformerDecoderLayer::with_options(4, 2, small).unwrap(), layers, None), &want)?;
    }

    /// ConvTranspose1d with random stride, padding, output padding, dilation, groups and
    /// bias: the layer is `Tensor::conv_transpose1d` with its own weight and arguments,
    /// bitwise, or an error naming the layer.
    #[test]
    fn conv_transpose1d_layer_is_the_functional_form(
        cin in 1usize..5, cout in 1usize..5, groups in 1usize..4, k in 1usize..4, stride in 1usize..4,
        padding in 0usize..3, out_pad in 0usize..3, dilation in 1usize..3, bias: bool,
        n in 0usize..3, len in 0usize..6, dt in dtype(), seed in 0u64..1000,
    ) {
        let _rng = seed_guard(seed);
        let options = ConvTranspose1dOptions::default()
            .stride(stride).padding(padding).output_padding(out_pad).dilation(dilation).groups(groups).bias(bias).dtype(dt);
        let layer = match ConvTranspose1d::with_options(cin, cout, k, options) {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("ConvTranspose1d"), "{}", msg);
                let valid = cin % groups == 0 && cout % groups == 0 && (out_pad < stride || out_pad < dilation);
                prop_assert!(!valid, "valid options refused: {}", msg);
                return Ok(());
            }
        };
        prop_assert!(cin % groups == 0 && cout % groups == 0 && (out_pad < stride || out_pad < dilation));
        let args = ConvTransposeArgs { stride: [stride], padding: [padding], output_padding: [out_pad], dilation: [dilation], groups };
        prop_assert_eq!(layer.args(), &args);
        prop_assert_eq!(layer.weight().shape().dims().to_vec(), vec![cin, cout / groups, k]);
        let x = tensor(&[n, cin, len], seed, dt);
        let got = layer.forward(&Var::new(x.clone()));
        let want = x.conv_transpose1d(&layer.weight().value(), layer.bias().map(|b| b.value()).as_ref(), &args);
        if let Ok(y) = &want {
            let l = (len as i64 - 1) * stride as i64 - 2 * padding as i64 + (dilation * (k - 1) + out_pad + 1) as i64;
            prop_assert_eq!(y.shape().dims(), &[n, cout, l.max(0) as usize]);
        }
        same(got, want)?;
    }

    /// ConvTranspose2d likewise, with per-dimension arguments.
    #[test]
    fn conv_transpose2d_layer_is_the_functional_form(
        cin in 1usize..4, cout in 1usize..4, groups in 1usize..3, k in (1usize..3, 1usize..3),
        stride in (1usize..3, 1usize..3), padding in (0usize..2, 0usize..2), out_pad in (0usize..2, 0usize..2),
        dilation in (1usize..3, 1usize..3), bias: bool, n in 0usize..2, hw in (0usize..4, 1usize..4),
        dt in dtype(), seed in 0u64..1000,
    ) {
        let _rng = seed_guard(seed);
        let options = ConvTranspose2dOptions::default()
            .stride([stride.0, stride.1]).padding([padding.0, padding.1]).output_padding([out_pad.0, out_pad.1])
            .dilation([dilation.0, dilation.1]).groups(groups).bias(bias).dtype(dt);
        let layer = match ConvTranspose2d::with_options(cin, cout, [k.0, k.1], options) {
            Ok(l) => l,
            Err(e) => {
                prop_assert!(e.to_string().starts_with("ConvTranspose2d"), "{}", e);
                return Ok(());
            }
        };
        let args = *layer.args();
        prop_assert_eq!(args.output_padding, [out_pad.0, out_pad.1]);
        prop_assert_eq!(args.groups, groups);
        let x = tensor(&[n, cin, hw.0, hw.1], seed, dt);
        let got = layer.forward(&Var::new(x.clone()));
        let want = x.conv_transpose2d(&layer.weight().value(), layer.bias().map(|b| b.value()).as_ref(), &args);
        same(got, want)?;
    }

    /// Upsample with a size or scale factors, nearest or linear modes and align_corners:
    /// the layer is `interpolate` with its arguments, bitwise, including its errors; the
    /// output has the requested (or floor-scaled) size.
    #[test]
    fn upsample_is_interpolate(
        rank in 3usize..5, spatial in (1usize..4, 1usize..4), by_size: bool, size in (0usize..6, 0usize..6),
        scale in (0usize..9, 0usize..9), mode in 0usize..3, align in 0usize..3, dt in dtype(), seed in 0u64..1000,
    ) {
        let dims = rank - 2;
        let mut shape = vec![2, 2, spatial.0];
        if dims == 2 {
            shape.push(spatial.1);
        }
        let x = tensor(&shape, seed, dt);
        let sizes = [size.0, size.1][..dims].to_vec();
        let scales: Vec<f64> = [scale.0, scale.1][..dims].iter().map(|&s| s as f64 * 0.75).collect();
        let mode = [InterpolateMode::Nearest, InterpolateMode::Linear, InterpolateMode::Bilinear][mode];
        let mut layer = if by_size { Upsample::size(sizes.clone()) } else { Upsample::scale_factors(scales.clone()) };
        layer = layer.mode(mode);
        if align > 0 {
            layer = layer.align_corners(align == 2);
        }
        let got = layer.forward(&Var::new(x.clone()));
        let want = x.interpolate(&layer.args);
        if let Ok(y) = &want {
            let out: Vec<usize> = if by_size {
                sizes.clone()
            } else {
                shape[2..].iter().zip(&scales).map(|(&i, s)| (i as f64 * s).floor() as usize).collect()
            };
            prop_assert_eq!(&y.shape().dims()[2..], &out[..]);
        } else if let Err(e) = &want {
            prop_assert!(e.to_string().starts_with("interpolate"), "{}", e);
        }
        same(got, want)?;
    }
}

/// Which mask a case passes: none, boolean (`u8`), float, or one of a wrong shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MaskKind {
    None,
    Bool,
    Float,
    Wrong,
}

fn mask_kind() -> impl Strategy<Value = MaskKind> {
    prop_oneof![Just(MaskKind::None), Just(MaskKind::Bool), Just(MaskKind::Float), Just(MaskKind::Wrong)]
}

/// A mask of `shape` (a row longer when `Wrong`): boolean masks forbid about a third of the
/// positions, float masks add `0`, `-1.5` or `-inf`.
fn mask(kind: MaskKind, shape: &[usize], seed: u64, dt: DType) -> Option<Tensor> {
    let mut shape = shape.to_vec();
    if kind == MaskKind::Wrong {
        *shape.last_mut()? += 1;
    }
    let n: usize = shape.iter().product();
    let pick = |i: usize| (i as u64 * 7 + seed) % 3;
    match kind {
        MaskKind::None => None,
        MaskKind::Bool | MaskKind::Wrong => {
            Some(Tensor::from_vec((0..n).map(|i| u8::from(pick(i) == 0)).collect::<Vec<u8>>(), shape).unwrap())
        }
        MaskKind::Float => {
            let v = (0..n).map(|i| [0.0, -1.5, f64::NEG_INFINITY][pick(i) as usize]).collect::<Vec<f64>>();
            Some(Tensor::from_vec(v, shape).unwrap().to_dtype(dt))
        }
    }
}

/// The additive form of a mask value: boolean non-zero is `-inf`.
fn additive(mask: &Option<Tensor>) -> Option<Vec<f64>> {
    let m = mask.as_ref()?;
    let v = m.to_vec_f64().unwrap();
    Some(if m.dtype() == DType::U8 {
        v.iter().map(|&b| if b != 0.0 { f64::NEG_INFINITY } else { 0.0 }).collect()
    } else {
        v
    })
}

/// `[batch, seq, feature]` values laid out for a layer: `[seq, batch, feature]` unless
/// `batch_first`.
fn layout(x: &Tensor, batch_first: bool) -> Var {
    Var::new(if batch_first { x.clone() } else { x.transpose(0, 1).unwrap().contiguous() })
}

/// A layer output back in `[batch, seq, feature]`.
fn unlayout(y: &Var, batch_first: bool) -> Vec<f64> {
    if batch_first { var_f64s(y) } else { y.value().transpose(0, 1).unwrap().contiguous().to_vec_f64().unwrap() }
}

/// `y = x W^T + b` over rows of `x` (`[rows, i]`), `W` `[o, i]`.
fn affine(x: &[f64], w: &[f64], b: Option<&[f64]>, i: usize, o: usize) -> Vec<f64> {
    let rows = x.len().checked_div(i).unwrap_or(0);
    let mut y = vec![0.0; rows * o];
    for r in 0..rows {
        for j in 0..o {
            y[r * o + j] = b.map_or(0.0, |b| b[j]) + (0..i).map(|t| x[r * i + t] * w[j * i + t]).sum::<f64>();
        }
    }
    y
}

/// The naive attention of a `MultiheadAttention` from its weights: `q` `[n, t, e]`, `k`
/// `[n, s, kdim]`, `v` `[n, s, vdim]`, masks in additive form (`attn` `[t, s]` or
/// `[n * heads, t, s]`, `padding` `[n, s]`). Returns the output `[n, t, e]` and the
/// probabilities `[n, heads, t, s']` (`s'` counting the added key and the zero key). A
/// row that sees no key is NaN with `need_weights`, 0 without, as the layer documents.
#[allow(clippy::too_many_arguments)]
fn naive_mha(
    m: &MultiheadAttention,
    (zero_attn, need_weights): (bool, bool),
    (q, k, v): (&[f64], &[f64], &[f64]),
    (n, t, s): (usize, usize, usize),
    attn: Option<(&[f64], bool)>,
    padding: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>) {
    let (e, heads, hd) = (m.embed_dim(), m.num_heads(), m.head_dim());
    let (kdim, vdim) = (m.kdim(), m.vdim());
    let (wq, wk, wv) = match (m.in_proj_weight(), m.q_proj_weight()) {
        (Some(w), _) => {
            let w = var_f64s(w);
            (w[..e * e].to_vec(), w[e * e..2 * e * e].to_vec(), w[2 * e * e..].to_vec())
        }
        (None, Some((a, b, c))) => (var_f64s(a), var_f64s(b), var_f64s(c)),
        (None, None) => unreachable!("a layer has one form of input projection"),
    };
    let bias = m.in_proj_bias().map(var_f64s);
    let part = |i: usize| bias.as_ref().map(|b| b[i * e..(i + 1) * e].to_vec());
    let (bq, bk, bv) = (part(0), part(1), part(2));
    let qp = affine(q, &wq, bq.as_deref(), e, e);
    let mut kp = affine(k, &wk, bk.as_deref(), kdim, e);
    let mut vp = affine(v, &wv, bv.as_deref(), vdim, e);
    // Keys and values per sequence, extended by bias_k / bias_v and a zero key.
    let mut keys = s;
    let extend = |p: &mut Vec<f64>, rows: usize, row: &[f64]| {
        let mut out = Vec::new();
        for b in 0..n {
            out.extend_from_slice(&p[b * rows * e..(b + 1) * rows * e]);
            out.extend_from_slice(row);
        }
        *p = out;
    };
    if let Some((bk, bv)) = m.bias_kv() {
        extend(&mut kp, keys, &var_f64s(bk));
        extend(&mut vp, keys, &var_f64s(bv));
        keys += 1;
    }
    if zero_attn {
        extend(&mut kp, keys, &vec![0.0; e]);
        extend(&mut vp, keys, &vec![0.0; e]);
        keys += 1;
    }
    let mut merged = vec![0.0; n * t * e];
    let mut probs = vec![0.0; n * heads * t * keys];
    let scale = 1.0 / (hd as f64).sqrt();
    for b in 0..n {
        for h in 0..heads {
            for i in 0..t {
                let mut scores: Vec<f64> = (0..keys)
                    .map(|j| {
                        let dot: f64 = (0..hd)
                            .map(|d| qp[(b * t + i) * e + h * hd + d] * kp[(b * keys + j) * e + h * hd + d])
                            .sum();
                        let mut sc = dot * scale;
                        if j < s {
                            if let Some((a, per_head)) = attn {
                                sc += if per_head { a[((b * heads + h) * t + i) * s + j] } else { a[i * s + j] };
                            }
                            if let Some(p) = padding {
                                sc += p[b * s + j];
                            }
                        }
                        sc
                    })
                    .collect();
                let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    // A row that sees no key: 0 from the kernel (PyTorch's fused path), NaN
                    // from the composition that returns the weights (PyTorch's weights path).
                    let fill = if need_weights { f64::NAN } else { 0.0 };
                    scores.iter_mut().for_each(|x| *x = fill);
                    (0..hd).for_each(|d| merged[(b * t + i) * e + h * hd + d] = fill);
                    probs[((b * heads + h) * t + i) * keys..][..keys].copy_from_slice(&scores);
                    continue;
                }
                scores.iter_mut().for_each(|x| *x = (*x - mx).exp());
                let sum: f64 = scores.iter().sum();
                for j in 0..keys {
                    let p = scores[j] / sum;
                    probs[((b * heads + h) * t + i) * keys + j] = p;
                    for d in 0..hd {
                        merged[(b * t + i) * e + h * hd + d] += p * vp[(b * keys + j) * e + h * hd + d];
                    }
                }
            }
        }
    }
    let out = m.out_proj();
    let ob = out.bias().map(var_f64s);
    (affine(&merged, &var_f64s(out.weight()), ob.as_deref(), e, e), probs)
}

proptest! {
    #![proptest_config(config(500))]

    /// MultiheadAttention with random kdim/vdim, bias, bias_kv, zero attention, layout,
    /// masks (bool or float, 2-d or 3-d attention masks, key padding, wrong shapes) and
    /// weights averaged or per head: the output and weights of naive attention computed from
    /// the layer's own weights, or an error naming the layer.
    #[test]
    fn multihead_attention_options_match_naive_attention(
        head_dim in 1usize..3, heads in 1usize..3, kdim in prop::option::of(1usize..4), vdim in prop::option::of(1usize..4),
        bias: bool, bias_kv: bool, zero_attn: bool, batch_first: bool, need_weights: bool, average: bool,
        attn_kind in mask_kind(), per_head: bool, pad_kind in mask_kind(), n in 1usize..3, t in 1usize..4, s in 1usize..4,
        dt in dtype(), seed in 0u64..1000,
    ) {
        let _rng = seed_guard(seed);
        let e = head_dim * heads;
        let options = MultiheadAttentionOptions {
            bias, add_bias_kv: bias_kv, add_zero_attn: zero_attn, kdim, vdim, batch_first, dtype: dt, ..Default::default()
        };
        let m = MultiheadAttention::with_options(e, heads, options).unwrap();
        m.set_training(false);
        let (kd, vd) = (kdim.unwrap_or(e), vdim.unwrap_or(e));
        let (q, k, v) = (tensor(&[n, t, e], seed, dt), tensor(&[n, s, kd], seed + 1, dt), tensor(&[n, s, vd], seed + 2, dt));
        let attn_shape = if per_head { vec![n * heads, t, s] } else { vec![t, s] };
        let attn = mask(attn_kind, &attn_shape, seed, dt);
        let padding = mask(pad_kind, &[n, s], seed + 5, dt);
        let args = MultiheadAttentionArgs {
            key_padding_mask: padding.as_ref(), need_weights, attn_mask: attn.as_ref(), average_attn_weights: average, is_causal: false,
        };
        let got = m.forward_with(&layout(&q, batch_first), &layout(&k, batch_first), &layout(&v, batch_first), &args);
        if attn_kind == MaskKind::Wrong || pad_kind == MaskKind::Wrong {
            let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
            prop_assert!(msg.starts_with("MultiheadAttention"), "a wrong mask gave {:?}", msg);
            return Ok(());
        }
        let got = got.unwrap();
        let (want, probs) = naive_mha(
            &m, (zero_attn, need_weights), (&values(&[n, t, e], seed), &values(&[n, s, kd], seed + 1), &values(&[n, s, vd], seed + 2)),
            (n, t, s), additive(&attn).as_deref().map(|a| (a, per_head)), additive(&padding).as_deref(),
        );
        let out = unlayout(&got.output, batch_first);
        prop_assert!(close(&out, &want, dt), "output {:?} want {:?}", out, want);
        let keys = s + usize::from(bias_kv) + usize::from(zero_attn);
        match (&got.weights, need_weights) {
            (None, false) => {}
            (Some(w), true) => {
                let want: Vec<f64> = if average {
                    prop_assert_eq!(w.shape().dims().to_vec(), vec![n, t, keys]);
                    (0..n * t * keys).map(|i| {
                        let (b, rest) = (i / (t * keys), i % (t * keys));
                        (0..heads).map(|h| probs[(b * heads + h) * t * keys + rest]).sum::<f64>() / heads as f64
                    }).collect()
                } else {
                    prop_assert_eq!(w.shape().dims().to_vec(), vec![n, heads, t, keys]);
                    probs.clone()
                };
                prop_assert!(close(&var_f64s(w), &want, dt), "weights {:?} want {:?}", var_f64s(w), want);
            }
            (w, _) => prop_assert!(false, "need_weights {} gave {:?}", need_weights, w.as_ref().map(|w| w.shape().clone())),
        }
    }
}

/// The options of a random transformer layer.
fn layer_options(ff: usize, norm_first: bool, gelu: bool, batch_first: bool, dt: DType) -> TransformerLayerOptions {
    TransformerLayerOptions {
        dim_feedforward: ff,
        activation: if gelu { TransformerActivation::GELU } else { TransformerActivation::ReLU },
        batch_first,
        norm_first,
        dtype: dt,
        ..Default::default()
    }
}

/// The feed-forward block from a layer's named parameters: `linear2(act(linear1(x)))`.
fn feed_forward(params: &[(String, Var)], x: &Var, gelu: bool) -> Result<Var> {
    let linear = |name: &str| {
        let get = |p: &str| params.iter().find(|(n, _)| n == &format!("{name}.{p}")).map(|(_, v)| v.clone());
        Linear::from_params(get("weight").expect("the layer has the linear's weight"), get("bias"))
    };
    let h = linear("linear1")?.forward(x)?;
    linear("linear2")?.forward(&if gelu { h.gelu() } else { h.relu() })
}

/// A layer norm over the last dimension from the layer's named parameters `name.weight`,
/// `name.bias`.
fn norm(params: &[(String, Var)], name: &str, x: &Var) -> Result<Var> {
    let get = |p: &str| params.iter().find(|(n, _)| n == &format!("{name}.{p}")).map(|(_, v)| v.clone());
    let d = *x.shape().dims().last().expect("a layer input has a feature dimension");
    F::layer_norm(x, &[d], get("weight").as_ref(), get("bias").as_ref(), 1e-5)
}

proptest! {
    #![proptest_config(config(500))]

    /// TransformerEncoderLayer and a two-layer TransformerEncoder in eval mode, with random
    /// norm placement, activation, layout and masks: the composition of the layer's own
    /// submodules (self_attn, linear1/2, norm1/2), or an error naming the layer or its
    /// attention for masks of the wrong shape.
    #[test]
    fn transformer_encoder_is_its_submodules(
        head_dim in 1usize..4, heads in 1usize..3, ff in 1usize..6, norm_first: bool, gelu: bool, batch_first: bool,
        src_kind in mask_kind(), pad_kind in mask_kind(), n in 1usize..3, s in 1usize..5, stack: bool,
        dt in dtype(), seed in 0u64..1000,
    ) {
        let _rng = seed_guard(seed);
        let d = head_dim * heads;
        let layer = TransformerEncoderLayer::with_options(d, heads, layer_options(ff, norm_first, gelu, batch_first, dt)).unwrap();
        let final_norm = LayerNorm::with_options(&[d], ember_nn::LayerNormOptions { dtype: dt, ..Default::default() }).unwrap();
        let encoder = TransformerEncoder::new(layer.deep_copy().unwrap(), 2, Some(final_norm)).unwrap();
        layer.set_training(false);
        encoder.set_training(false);
        let src_mask = mask(src_kind, &[s, s], seed, dt);
        let padding = mask(pad_kind, &[n, s], seed + 3, dt);
        let masks = EncoderMasks { src_mask: src_mask.as_ref(), src_key_padding_mask: padding.as_ref(), is_causal: false };
        let x = layout(&tensor(&[n, s, d], seed, dt), batch_first);
        let got = if stack { encoder.forward_with(&x, &masks) } else { layer.forward_with(&x, &masks) };
        if src_kind == MaskKind::Wrong || pad_kind == MaskKind::Wrong {
            let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
            prop_assert!(msg.starts_with("TransformerEncoder") || msg.starts_with("MultiheadAttention"), "{:?}", msg);
            return Ok(());
        }
        let got = got.unwrap();
        prop_assert_eq!(got.shape().dims().to_vec(), x.shape().dims().to_vec());
        let one = |l: &TransformerEncoderLayer, x: &Var| -> Result<Var> {
            let params = l.named_parameters();
            let args = MultiheadAttentionArgs {
                key_padding_mask: masks.src_key_padding_mask, need_weights: false, attn_mask: masks.src_mask, ..Default::default()
            };
            let sa = |x: &Var| l.self_attn().forward_with(x, x, x, &args).map(|o| o.output);
            if norm_first {
                let x = x.add(&sa(&l.norm1().forward(x)?)?)?;
                x.add(&feed_forward(&params, &l.norm2().forward(&x)?, gelu)?)
            } else {
                let x = norm(&params, "norm1", &x.add(&sa(x)?)?)?;
                norm(&params, "norm2", &x.add(&feed_forward(&params, &x, gelu)?)?)
            }
        };
        let want = if stack {
            let mut y = x.clone();
            for l in encoder.layers() {
                y = one(l, &y).unwrap();
            }
            encoder.norm().expect("the stack has its norm").forward(&y).unwrap()
        } else {
            one(&layer, &x).unwrap()
        };
        prop_assert!(close(&var_f64s(&got), &var_f64s(&want), dt), "got {:?} want {:?}", var_f64s(&got), var_f64s(&want));
    }

    /// TransformerDecoderLayer and a two-layer TransformerDecoder in eval mode likewise: self
    /// attention with the target masks, attention over the memory with the memory masks, the
    /// feed-forward block and three norms, composed from the layer's own submodules.
    #[test]
    fn transformer_decoder_is_its_submodules(
        head_dim in 1usize..3, heads in 1usize..3, ff in 1usize..5, norm_first: bool, gelu: bool, batch_first: bool,
        tgt_kind in mask_kind(), mem_kind in mask_kind(), pad_kind in mask_kind(), n in 1usize..3, t in 1usize..4,
        s in 1usize..4, stack: bool, dt in dtype(), seed in 0u64..1000,
    ) {
        let _rng = seed_guard(seed);
        let d = head_dim * heads;
        let layer = TransformerDecoderLayer::with_options(d, heads, layer_options(ff, norm_first, gelu, batch_first, dt)).unwrap();
        let decoder = TransformerDecoder::new(layer.deep_copy().unwrap(), 2, None).unwrap();
        layer.set_training(false);
        decoder.set_training(false);
        let tgt_mask = mask(tgt_kind, &[t, t], seed, dt);
        let memory_mask = mask(mem_kind, &[t, s], seed + 1, dt);
        let padding = mask(pad_kind, &[n, s], seed + 2, dt);
        let masks = DecoderMasks {
            tgt_mask: tgt_mask.as_ref(), memory_mask: memory_mask.as_ref(), memory_key_padding_mask: padding.as_ref(),
            ..Default::default()
        };
        let x = layout(&tensor(&[n, t, d], seed, dt), batch_first);
        let memory = layout(&tensor(&[n, s, d], seed + 9, dt), batch_first);
        let got = if stack { decoder.forward_with(&x, &memory, &masks) } else { layer.forward_with(&x, &memory, &masks) };
        if [tgt_kind, mem_kind, pad_kind].contains(&MaskKind::Wrong) {
            let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
            prop_assert!(msg.starts_with("TransformerDecoder") || msg.starts_with("MultiheadAttention"), "{:?}", msg);
            return Ok(());
        }
        let got = got.unwrap();
        prop_assert_eq!(got.shape().dims().to_vec(), x.shape().dims().to_vec());
        let one = |l: &TransformerDecoderLayer, x: &Var| -> Result<Var> {
            let params = l.named_parameters();
            let self_args = MultiheadAttentionArgs { need_weights: false, attn_mask: masks.tgt_mask, ..Default::default() };
            let mem_args = MultiheadAttentionArgs {
                key_padding_mask: masks.memory_key_padding_mask, need_weights: false, attn_mask: masks.memory_mask, ..Default::default()
            };
            let sa = |x: &Var| l.self_attn().forward_with(x, x, x, &self_args).map(|o| o.output);
            let ca = |x: &Var| l.multihead_attn().forward_with(x, &memory, &memory, &mem_args).map(|o| o.output);
            if norm_first {
                let x = x.add(&sa(&norm(&params, "norm1", x)?)?)?;
                let x = x.add(&ca(&norm(&params, "norm2", &x)?)?)?;
                x.add(&feed_forward(&params, &norm(&params, "norm3", &x)?, gelu)?)
            } else {
                let x = norm(&params, "norm1", &x.add(&sa(x)?)?)?;
                let x = norm(&params, "norm2", &x.add(&ca(&x)?)?)?;
                norm(&params, "norm3", &x.add(&feed_forward(&params, &x, gelu)?)?)
            }
        };
        let want = if stack {
            let mut y = x.clone();
            for l in decoder.layers() {
                y = one(l, &y).unwrap();
            }
            y
        } else {
            one(&layer, &x).unwrap()
        };
        prop_assert!(close(&var_f64s(&got), &var_f64s(&want), dt), "got {:?} want {:?}", var_f64s(&got), var_f64s(&want));
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Flatten and Unflatten with random (often invalid) dimensions and sizes: Flatten is
    /// `Var::flatten`; Unflatten splits the dimension into the sizes (one `-1` inferred) and
    /// refuses, naming unflatten, sizes that do not multiply to it, a second `-1`, sizes
    /// below `-1` and sizes whose product overflows.
    #[test]
    fn flatten_and_unflatten_reshape_or_refuse(
        shape in prop::collection::vec(0usize..4, 0..4), start in -5i64..5, end in -5i64..5, dim in -5i64..5,
        sizes in prop::collection::vec(prop_oneof![4 => -2i64..5, 1 => Just(1i64 << 40)], 0..4), seed in 0u64..100,
    ) {
        let x = Var::new(tensor(&shape, seed, DType::F64));
        let got = Flatten::with_dims(start, end).forward(&x);
        match (got, x.flatten(start, end)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(var_f64s(&a), var_f64s(&b)),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "Flatten {:?} flatten {:?}", a.is_ok(), b.is_ok()),
        }
        let got = Unflatten::new(dim, sizes.clone()).forward(&x);
        let rank = shape.len() as i64;
        let d = if dim < 0 { dim + rank } else { dim };
        let want: Option<Vec<usize>> = (|| {
            if d < 0 || d >= rank || sizes.is_empty() || sizes.iter().any(|&s| s < -1) {
                return None;
            }
            let size = shape[d as usize] as i64;
            let known = sizes.iter().filter(|&&s| s != -1).try_fold(1i64, |a, &s| a.checked_mul(s))?;
            let fill = match sizes.iter().filter(|&&s| s == -1).count() {
                0 if known == size => 0,
                1 if known != 0 && size % known == 0 => size / known,
                _ => return None,
            };
            let mut out = shape[..d as usize].to_vec();
            out.extend(sizes.iter().map(|&s| if s == -1 { fill as usize } else { s as usize }));
            out.extend_from_slice(&shape[d as usize + 1..]);
            // ember's element limit, which zero extents do not lift.
            let held = out.iter().filter(|&&v| v != 0).try_fold(1usize, |a, &v| a.checked_mul(v));
            held.filter(|&n| n <= isize::MAX as usize / 8).map(|_| out)
        })();
        match (got, want) {
            (Ok(y), Some(w)) => {
                prop_assert_eq!(y.shape().dims().to_vec(), w);
                prop_assert_eq!(var_f64s(&y), var_f64s(&x));
            }
            (Err(e), None) => prop_assert!(e.to_string().starts_with("unflatten"), "{}", e),
            (got, want) => prop_assert!(false, "Unflatten gave {:?}, expected {:?}", got.map(|y| y.shape().clone()), want),
        }
    }

    /// `F::unfold` / `F::fold` with random geometry are the `Tensor` forms (`im2col` /
    /// `col2im`), bitwise, errors included.
    #[test]
    fn fold_and_unfold_are_the_tensor_forms(
        shape in prop::collection::vec(0usize..5, 2..5), k in 1usize..4, stride in 0usize..3, padding in 0usize..2,
        dilation in 0usize..3, out in (0usize..6, 0usize..6), seed in 0u64..100,
    ) {
        let args = UnfoldArgs::new(k).stride(stride).padding(padding).dilation(dilation);
        let x = tensor(&shape, seed, DType::F32);
        same(F::unfold(&Var::new(x.clone()), &args), x.im2col(&args))?;
        same(F::fold(&Var::new(x.clone()), [out.0, out.1], &args), x.col2im([out.0, out.1], &args))?;
    }

    /// Embedding padding rows (in range: a zero row that gets no gradient; out of range: an
    /// error naming the layer) and the dropout layers' probabilities (outside [0, 1], NaN
    /// and infinities refused naming the layer's op; inside, eval mode is the identity).
    #[test]
    fn embedding_padding_and_dropout_probabilities(
        rows in 0usize..5, dim in 0usize..4, padding in prop::option::of(0usize..6),
        p in prop_oneof![-2.0f64..3.0, Just(f64::NAN), Just(f64::INFINITY), Just(0.0), Just(1.0)], seed in 0u64..100,
    ) {
        let _rng = seed_guard(seed);
        let options = EmbeddingOptions { padding_idx: padding, ..Default::default() };
        match Embedding::with_options(rows, dim, options) {
            Ok(e) => {
                prop_assert!(padding.is_none_or(|p| p < rows));
                prop_assert_eq!(e.weight().shape().dims().to_vec(), vec![rows, dim]);
                if let Some(p) = padding {
                    prop_assert!(e.weight().value().narrow(0, p, 1).unwrap().to_vec_f64().unwrap().iter().all(|&v| v == 0.0));
                    let idx = Var::new(Tensor::from_vec(vec![p as i64, 0], [2]).unwrap());
                    e.forward(&idx).unwrap().sum_all().backward().unwrap();
                    let grad = e.weight().grad().expect("the weight gets a gradient");
                    prop_assert!(grad.narrow(0, p, 1).unwrap().to_vec_f64().unwrap().iter().all(|&v| v == 0.0));
                }
            }
            Err(err) => {
                prop_assert!(padding.is_some_and(|p| p >= rows), "{}", err);
                prop_assert!(err.to_string().starts_with("Embedding"), "{}", err);
            }
        }
        let valid = (0.0..=1.0).contains(&p);
        let x = Var::new(tensor(&[2, 3, 2], seed, DType::F32));
        match Dropout::new(p) {
            Ok(layer) => {
                prop_assert!(valid);
                layer.set_training(false);
                prop_assert_eq!(var_f64s(&layer.forward(&x).unwrap()), var_f64s(&x));
            }
            Err(e) => prop_assert!(!valid && e.to_string().starts_with("dropout"), "{}", e),
        }
        match Dropout2d::new(p) {
            Ok(_) => prop_assert!(valid),
            Err(e) => prop_assert!(!valid && e.to_string().starts_with("dropout2d"), "{}", e),
        }
        let mha = MultiheadAttention::with_options(2, 1, MultiheadAttentionOptions { dropout: p, ..Default::default() });
        prop_assert_eq!(mha.is_ok(), valid);
        let t = TransformerEncoderLayer::with_options(2, 1, TransformerLayerOptions { dropout: p, dim_feedforward: 2, ..Default::default() });
        prop_assert!(t.as_ref().err().is_none_or(|e| e.to_string().starts_with("TransformerEncoderLayer")));
        prop_assert_eq!(t.is_ok(), valid);
        let r = LSTM::with_options(2, 2, RnnOptions::default().dropout(p));
        prop_assert_eq!(r.is_ok(), valid);
    }
}

/// `Unflatten` multiplied its sizes unchecked: sizes of 2^40 and 2^40 overflowed `i64` (a
/// panic in checked builds). They are refused naming unflatten, as sizes that cannot
/// multiply to the dimension.
#[test]
fn unflatten_with_overflowing_sizes_is_refused() {
    let x = Var::new(Tensor::zeros([2, 4], DType::F32).unwrap());
    let e = Unflatten::new(1, [1i64 << 40, 1 << 40, 4]).forward(&x).unwrap_err().to_string();
    assert!(e.starts_with("unflatten"), "{e}");
}

/// Unflatten into sizes that multiply to the (empty) dimension but make a shape beyond
/// ember's element limit was refused naming reshape; it names unflatten.
#[test]
fn unflatten_beyond_the_element_limit_names_unflatten() {
    let x = Var::new(Tensor::zeros([0, 2], DType::F32).unwrap());
    let e = Unflatten::new(0, [1i64 << 40, 0, 1 << 40]).forward(&x).unwrap_err().to_string();
    assert!(e.starts_with("unflatten") && e.contains("too many elements"), "{e}");
}

/// Parameter refusals named the initialiser (`uniform`, `normal`, `ones`); they name the
/// layer and the parameter.
#[test]
fn huge_layers_name_the_layer_and_the_parameter() {
    let _rng = seed_guard(0);
    let big = 1usize << 45;
    let err = |r: Result<String>| r.unwrap_err().to_string();
    let named = |e: String, op: &str| assert!(e.starts_with(op), "{e} does not start with {op}");
    named(err(Linear::new(big, 8).map(|l| format!("{l:?}"))), "Linear.weight:");
    named(err(Embedding::new(big, 8).map(|l| format!("{l:?}"))), "Embedding.weight:");
    named(err(Conv2d::new(8, big, 3).map(|l| format!("{l:?}"))), "Conv2d.weight:");
    named(err(ConvTranspose1d::new(big, 8, 3).map(|l| format!("{l:?}"))), "ConvTranspose1d.weight:");
    named(err(LayerNorm::new(&[big, big]).map(|l| format!("{l:?}"))), "LayerNorm.weight:");
    named(err(BatchNorm2d::new(big).map(|l| format!("{l:?}"))), "BatchNorm2d.weight:");
    named(err(LSTM::new(8, big).map(|l| format!("{l:?}"))), "LSTM");
    named(err(GRUCell::new(big, 8).map(|l| format!("{l:?}"))), "GRUCell.weight_ih:");
    named(err(MultiheadAttention::new(big, 1).map(|l| format!("{l:?}"))), "MultiheadAttention.out_proj.weight:");
    named(
        err(MultiheadAttention::new(usize::MAX / 2, 1).map(|l| format!("{l:?}"))),
        "MultiheadAttention.in_proj_weight:",
    );
    let wide = TransformerLayerOptions { dim_feedforward: big, ..Default::default() };
    named(
        err(TransformerEncoderLayer::with_options(8, 2, wide).map(|l| format!("{l:?}"))),
        "TransformerEncoderLayer.linear1:",
    );
    let layer = TransformerEncoderLayer::new(8, 2).unwrap();
    named(err(TransformerEncoder::new(layer, 1 << 50, None).map(|_| String::new())), "TransformerEncoder:");
    named(err(RNN::with_options(2, 2, RnnOptions::default().num_layers(1 << 50)).map(|l| format!("{l:?}"))), "RNN:");
}
