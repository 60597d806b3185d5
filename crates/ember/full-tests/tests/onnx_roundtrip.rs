//! ember -> ONNX -> ember: the quick-start models, exported and imported again, give the
//! outputs of the originals; an operation without an ONNX mapping is an error naming it.

use ember::nn::{Module, TransformerActivation, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions};
use ember::onnx::{ExportOptions, export_bytes, export_fn_bytes, load_bytes};
use ember::{Result, Tensor, Var, mnist};
use ember_testing::gradcheck::seed_guard;

fn max_diff(a: &Var, b: &Var) -> Result<f32> {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.value().to_vec::<f32>()?, b.value().to_vec::<f32>()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max))
}

/// Exports `model` on a batch of 2 with a dynamic batch, reloads it, and compares on a
/// batch of 5.
fn roundtrip(model: &dyn Module, features: &[usize]) -> Result<f32> {
    model.eval();
    let shape = |n: usize| [vec![n], features.to_vec()].concat();
    let bytes =
        export_bytes(model, &Var::new(Tensor::randn(shape(2))?), &ExportOptions::default().dynamic_batch(true))?;
    let back = load_bytes(&bytes)?;
    let x = Var::new(Tensor::randn(shape(5))?);
    max_diff(&model.forward(&x)?, &back.forward(&x)?)
}

#[test]
fn quick_start_mlp_roundtrips_exactly() -> Result<()> {
    let _rng = seed_guard(1);
    let model = mnist::mlp()?;
    assert_eq!(roundtrip(&model, &[784])?, 0.0);
    Ok(())
}

#[test]
fn quick_start_cnn_roundtrips_exactly() -> Result<()> {
    let _rng = seed_guard(2);
    let model = mnist::cnn()?;
    assert_eq!(roundtrip(&model, &[784])?, 0.0);
    Ok(())
}

#[test]
fn transformer_encoder_roundtrips() -> Result<()> {
    let _rng = seed_guard(3);
    let options = TransformerLayerOptions {
        dim_feedforward: 64,
        batch_first: true,
        activation: TransformerActivation::GELU,
        ..Default::default()
    };
    let layer = TransformerEncoderLayer::with_options(32, 4, options)?;
    let model = TransformerEncoder::new(layer, 2, None)?;
    model.eval();
    let x = Var::new(Tensor::randn([3, 6, 32])?);
    let bytes = export_bytes(&model, &x, &ExportOptions::default())?;
    let back = load_bytes(&bytes)?;
    let d = max_diff(&model.forward(&x)?, &back.forward(&x)?)?;
    assert!(d <= 1e-5, "max abs difference {d}");
    // The parameters keep their names.
    let names: Vec<String> = back.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "layers.1.linear2.weight"), "{names:?}");
    Ok(())
}

#[test]
fn an_operation_without_mapping_is_named() -> Result<()> {
    let _rng = seed_guard(13);
    let x = Var::new(Tensor::randn([2, 3])?);
    let err = export_fn_bytes(|x| Ok(vec![x[0].log1p()]), &[], &[x], &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("'log1p'"), "{err}");
    Ok(())
}

#[test]
fn average_and_adaptive_pools_roundtrip_exactly() -> Result<()> {
    use ember::nn::{AdaptiveAvgPool2d, AvgPool2d, Conv2d, Flatten, Linear, ReLU, Sequential};
    let _rng = seed_guard(4);
    let model = Sequential::new()
        .add(ember::nn::Unflatten::new(1, [1, 12, 12]))
        .add(Conv2d::new(1, 4, 3)?)
        .add(ReLU)
        .add(AvgPool2d::new(2))
        .add(AdaptiveAvgPool2d::new([1, 5]))
        .add(Flatten::new())
        .add(Linear::new(20, 3)?);
    assert_eq!(roundtrip(&model, &[144])?, 0.0);
    Ok(())
}

/// Whether the model `bytes` holds a node of operator `op` (its name appears).
fn writes(bytes: &[u8], op: &str) -> bool {
    bytes.windows(op.len()).any(|w| w == op.as_bytes())
}

/// Where `EMBER_ONNX_CHECK_DIR` names a folder, writes `<name>.onnx` and
/// `<name>.io.safetensors` (`input`, `expected`) there for `tools/onnx_check.py`.
fn keep_for_onnx_runtime(name: &str, bytes: &[u8], x: &Var, y: &Var) -> Result<()> {
    keep_for_onnx_runtime_with(name, bytes, &[x], y)
}

/// [`keep_for_onnx_runtime`] for a graph of several inputs (`input`, `input_1`, ...).
fn keep_for_onnx_runtime_with(name: &str, bytes: &[u8], xs: &[&Var], y: &Var) -> Result<()> {
    let Some(dir) = std::env::var_os("EMBER_ONNX_CHECK_DIR") else { return Ok(()) };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let file = dir.join(format!("{name}.onnx"));
    std::fs::write(&file, bytes).map_err(|e| ember::Error::io(&file, e))?;
    let mut io = ember::nn::StateDict::new();
    for (i, x) in xs.iter().enumerate() {
        let key = if i == 0 { "input".to_string() } else { format!("input_{i}") };
        io.insert(key, x.value().contiguous());
    }
    io.insert("expected".to_string(), y.value().contiguous());
    ember::nn::save_safetensors(dir.join(format!("{name}.io.safetensors")), &io)
}

/// Exports `f` traced on an input of shape `shape(2)` with a dynamic batch, reloads it,
/// and returns the largest difference from `f` on an input of shape `shape(3)`.
fn roundtrip_fn(name: &str, f: impl Fn(&Var) -> Result<Var>, shape: impl Fn(usize) -> Vec<usize>) -> Result<f32> {
    let options = ExportOptions::default().dynamic_batch(true);
    let bytes = export_fn_bytes(|x| Ok(vec![f(&x[0])?]), &[], &[Var::new(Tensor::randn(shape(2))?)], &options)?;
    let x = Var::new(Tensor::randn(shape(3))?);
    let want = f(&x)?;
    keep_for_onnx_runtime(name, &bytes, &x, &want)?;
    max_diff(&want, &load_bytes(&bytes)?.forward(&x)?)
}

/// [`roundtrip_fn`] for a module (its parameters named as in the model).
fn roundtrip_module(name: &str, model: &dyn Module, shape: impl Fn(usize) -> Vec<usize>) -> Result<f32> {
    model.eval();
    let options = ExportOptions::default().dynamic_batch(true);
    let bytes = export_bytes(model, &Var::new(Tensor::randn(shape(2))?), &options)?;
    let x = Var::new(Tensor::randn(shape(3))?);
    let want = model.forward(&x)?;
    keep_for_onnx_runtime(name, &bytes, &x, &want)?;
    max_diff(&want, &load_bytes(&bytes)?.forward(&x)?)
}

/// A named case: the arguments and the input shape at a batch size.
type Case<A> = (&'static str, A, fn(usize) -> Vec<usize>);

#[test]
fn padded_and_ceil_mode_max_pools_roundtrip_exactly() -> Result<()> {
    use ember::tensor::ops::pool::MaxPoolArgs;
    let _rng = seed_guard(5);
    // Padding; ceil_mode with a last window that PyTorch keeps (9 rows: 4 windows of 3,
    // stride 2, the last one clipped); and ceil_mode whose extra window would start in the
    // right padding and is dropped (5 with padding 1, kernel 2, stride 2).
    let cases: Vec<Case<MaxPoolArgs<2>>> = vec![
        ("max_pool_padded", MaxPoolArgs::new(3).stride(2).padding(1), |n| vec![n, 3, 9, 10]),
        ("max_pool_ceil", MaxPoolArgs::new(3).stride(2).ceil_mode(true), |n| vec![n, 3, 8, 10]),
        ("max_pool_ceil_dropped", MaxPoolArgs::new(2).stride(2).padding(1).ceil_mode(true), |n| vec![n, 3, 5, 5]),
        // Rows keep their ceil window, columns drop theirs: ONNX's one flag cannot say
        // both, so the windows are written out.
        ("max_pool_mixed_ceil", MaxPoolArgs::new([2, 3]).stride(2).padding(1).ceil_mode(true), |n| vec![n, 3, 5, 8]),
        ("max_pool_dilated", MaxPoolArgs::new(2).stride(1).padding(1).dilation(2), |n| vec![n, 3, 7, 6]),
    ];
    for (name, args, shape) in cases {
        assert_eq!(roundtrip_fn(name, |x| x.max_pool2d(&args), shape)?, 0.0, "{name}");
    }
    let mixed = MaxPoolArgs::new([2, 3]).stride(2).padding(1).ceil_mode(true);
    let f = |x: &[Var]| Ok(vec![x[0].max_pool2d(&mixed)?]);
    let bytes = export_fn_bytes(f, &[], &[Var::new(Tensor::randn([1, 3, 5, 8])?)], &ExportOptions::default())?;
    assert!(writes(&bytes, "ReduceMax") && !writes(&bytes, "MaxPool"), "mixed ceil_mode is written as windows");
    let args1 = MaxPoolArgs::<1>::new(3).stride(2).padding(1).ceil_mode(true);
    assert_eq!(roundtrip_fn("max_pool1d_ceil", |x| x.max_pool1d(&args1), |n| vec![n, 4, 10])?, 0.0);
    Ok(())
}

#[test]
fn padded_ceil_mode_and_divisor_average_pools_roundtrip() -> Result<()> {
    use ember::tensor::ops::pool::AvgPoolArgs;
    let _rng = seed_guard(6);
    // Those with a kernel-and-stride description come back as the same pool: exactly.
    let exact: Vec<Case<AvgPoolArgs<2>>> = vec![
        ("avg_pool_padded", AvgPoolArgs::new(3).stride(2).padding(1), |n| vec![n, 3, 9, 10]),
        ("avg_pool_padded_exclude", AvgPoolArgs::new(3).stride(2).padding(1).count_include_pad(false), |n| {
            vec![n, 3, 9, 10]
        }),
        ("avg_pool_ceil", AvgPoolArgs::new(3).stride(2).padding(1).ceil_mode(true), |n| vec![n, 3, 8, 8]),
        ("avg_pool_ceil_dropped", AvgPoolArgs::new(2).stride(2).padding(1).ceil_mode(true), |n| vec![n, 3, 5, 5]),
    ];
    for (name, args, shape) in exact {
        assert_eq!(roundtrip_fn(name, |x| x.avg_pool2d(&args), shape)?, 0.0, "{name}");
    }
    let args1 = AvgPoolArgs::<1>::new(4).stride(3).padding(2).ceil_mode(true).count_include_pad(false);
    assert_eq!(roundtrip_fn("avg_pool1d_ceil", |x| x.avg_pool1d(&args1), |n| vec![n, 4, 11])?, 0.0);
    // A divisor override, and ceil_mode that differs between the dimensions, export as the
    // pool's matrices.
    let matrices: Vec<Case<AvgPoolArgs<2>>> = vec![
        ("avg_pool_divisor", AvgPoolArgs::new(3).stride(2).padding(1).divisor_override(5), |n| vec![n, 3, 9, 10]),
        ("avg_pool_mixed_ceil", AvgPoolArgs::new([2, 3]).stride(2).padding(1).ceil_mode(true), |n| vec![n, 3, 5, 8]),
    ];
    for (name, args, shape) in matrices {
        let d = roundtrip_fn(name, |x| x.avg_pool2d(&args), shape)?;
        assert!(d <= 1e-6, "{name}: max abs difference {d}");
    }
    Ok(())
}

#[test]
fn uneven_adaptive_pools_roundtrip() -> Result<()> {
    use ember::nn::{AdaptiveAvgPool2d, AdaptiveMaxPool2d};
    let _rng = seed_guard(7);
    let shape = |n: usize| vec![n, 3, 7, 10];
    let d = roundtrip_module("adaptive_avg_pool_uneven", &AdaptiveAvgPool2d::new([3, 4]), shape)?;
    assert!(d <= 1e-6, "adaptive average pool: max abs difference {d}");
    assert_eq!(roundtrip_module("adaptive_max_pool_uneven", &AdaptiveMaxPool2d::new([3, 4]), shape)?, 0.0);
    // Even windows are a plain average pool; an output larger than the input overlaps.
    assert_eq!(roundtrip_module("adaptive_avg_pool_even", &AdaptiveAvgPool2d::new([7, 5]), shape)?, 0.0);
    assert_eq!(roundtrip_fn("adaptive_max_pool_grow", |x| x.adaptive_max_pool2d([9, 4]), shape)?, 0.0);
    let d = roundtrip_fn("adaptive_avg_pool1d_uneven", |x| x.adaptive_avg_pool1d(4), |n| vec![n, 3, 10])?;
    assert!(d <= 1e-6, "adaptive 1-d average pool: max abs difference {d}");
    Ok(())
}

#[test]
fn an_operation_without_mapping_still_names_itself_among_pools() -> Result<()> {
    let _rng = seed_guard(14);
    // A pool that exports next to an operation that does not: the error names the latter.
    let x = Var::new(Tensor::randn([1, 2, 7, 7])?);
    let f = |x: &[Var]| Ok(vec![x[0].adaptive_avg_pool2d([3, 3])?.log1p()]);
    let err = export_fn_bytes(f, &[], &[x], &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("'log1p'"), "{err}");
    Ok(())
}

#[test]
fn one_d_grouped_dilated_and_transposed_convolutions_roundtrip() -> Result<()> {
    use ember::nn::ConvTranspose1dOptions;
    use ember::nn::ConvTranspose2dOptions;
    use ember::nn::functional::Padding;
    use ember::nn::{Conv1d, Conv1dOptions, Conv2d, Conv2dOptions, ConvTranspose1d, ConvTranspose2d};
    let _rng = seed_guard(8);
    let conv1d = Conv1d::with_options(4, 6, 3, Conv1dOptions::default().stride(2).padding(1).dilation(2).groups(2))?;
    assert_eq!(roundtrip_module("conv1d", &conv1d, |n| vec![n, 4, 17])?, 0.0);
    let grouped =
        Conv2d::with_options(6, 9, [3, 2], Conv2dOptions::default().stride([2, 1]).dilation([1, 2]).groups(3))?;
    assert_eq!(roundtrip_module("conv2d_grouped_dilated", &grouped, |n| vec![n, 6, 9, 8])?, 0.0);
    // "same" with an even kernel pads one more zero after than before.
    let same = Conv2d::with_options(3, 4, 4, Conv2dOptions::default().padding(Padding::Same))?;
    let d = roundtrip_module("conv2d_same_even", &same, |n| vec![n, 3, 7, 6])?;
    assert!(d <= 1e-6, "conv2d same: max abs difference {d}");
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1).dilation([1, 2]).groups(2);
    let up = ConvTranspose2d::with_options(4, 6, 3, options)?;
    assert_eq!(roundtrip_module("conv_transpose2d", &up, |n| vec![n, 4, 5, 6])?, 0.0);
    let up1 = ConvTranspose1d::with_options(3, 2, 4, ConvTranspose1dOptions::default().stride(3).padding(2))?;
    assert_eq!(roundtrip_module("conv_transpose1d", &up1, |n| vec![n, 3, 7])?, 0.0);
    Ok(())
}

#[test]
fn nearest_and_bilinear_interpolation_roundtrips() -> Result<()> {
    use ember::nn::Upsample;
    use ember::tensor::ops::pool::InterpolateMode;
    let _rng = seed_guard(9);
    let plane = |n: usize| vec![n, 3, 5, 7];
    let cases: Vec<(&str, Upsample, Vec<usize>)> = vec![
        ("upsample_nearest_x2", Upsample::scale_factor(2.0), plane(0)),
        ("upsample_nearest_size", Upsample::size([8, 4]), plane(0)),
        ("upsample_bilinear", Upsample::scale_factors([1.5, 2.5]).mode(InterpolateMode::Bilinear), plane(0)),
        (
            "upsample_bilinear_align",
            Upsample::size([9, 4]).mode(InterpolateMode::Bilinear).align_corners(true),
            plane(0),
        ),
        ("upsample_linear_1d", Upsample::scale_factor(1.7).mode(InterpolateMode::Linear), vec![0, 3, 6]),
        ("upsample_nearest_1d_size", Upsample::size([11]), vec![0, 3, 6]),
        ("downsample_nearest", Upsample::scale_factors([0.7, 0.5]), vec![0, 3, 10, 8]),
        ("upsample_nearest_recompute", Upsample::scale_factor(1.7).recompute_scale_factor(true), plane(0)),
    ];
    for (name, layer, shape) in cases {
        let d = roundtrip_module(name, &layer, |n| [vec![n], shape[1..].to_vec()].concat())?;
        assert!(d <= 1e-6, "{name}: max abs difference {d}");
    }
    // Written as ONNX's Resize; a scale that single precision does not hold (0.7, 1.7) as
    // the map's matrices.
    let resize = |layer: &Upsample, shape: [usize; 4]| -> Result<bool> {
        let bytes = export_bytes(layer, &Var::new(Tensor::randn(shape)?), &ExportOptions::default())?;
        Ok(writes(&bytes, "Resize"))
    };
    assert!(resize(&Upsample::scale_factor(2.0).mode(InterpolateMode::Bilinear), [1, 2, 4, 4])?);
    assert!(resize(&Upsample::scale_factors([2.5, 0.5]), [1, 2, 10, 8])?);
    assert!(!resize(&Upsample::scale_factors([0.7, 0.5]), [1, 2, 10, 8])?);
    Ok(())
}

/// Self-attention of `x` (`[N, L, E]`) split into 2 heads, under `mask` and `causal`.
fn heads_attention(x: &Var, mask: Option<&Var>, causal: bool) -> Result<Var> {
    let dims = x.shape().dims().to_vec();
    let (n, l, e) = (dims[0] as i64, dims[1] as i64, dims[2]);
    let h = x.reshape([n, l, 2, e as i64 / 2])?.permute(&[0, 2, 1, 3])?;
    let spec = ember::tensor::Attention { scale: ember::tensor::Attention::default_scale(e / 2), causal };
    h.mul_scalar(0.5).attention(&h, &h.mul_scalar(2.0), mask, &spec)
}

#[test]
fn attention_with_bool_and_float_masks_roundtrips() -> Result<()> {
    let _rng = seed_guard(10);
    // A bool mask (non-zero = attends) that is a second graph input; query row 2 of the
    // second sequence sees no key, and gives 0 as in ember.
    let mut keep = vec![1u8; 2 * 5 * 5];
    for j in 0..5 {
        keep[25 + 2 * 5 + j] = 0;
        keep[j * 5 + 4] = 0;
    }
    let mask = Var::new(Tensor::from_vec(keep, [2, 1, 5, 5])?);
    let x = Var::new(Tensor::randn([2, 5, 8])?);
    let f = |v: &[Var]| Ok(vec![heads_attention(&v[0], Some(&v[1]), false)?]);
    let bytes = export_fn_bytes(f, &[], &[x.clone(), mask.clone()], &ExportOptions::default())?;
    let back = load_bytes(&bytes)?;
    let want = heads_attention(&x, Some(&mask), false)?;
    keep_for_onnx_runtime_with("attention_bool_mask_input", &bytes, &[&x, &mask], &want)?;
    let got = back.run(&[&x, &mask])?;
    let d = max_diff(&want, &got[0])?;
    assert!(d <= 1e-6, "bool mask: max abs difference {d}");
    assert!(want.value().to_vec::<f32>()?.iter().all(|v| v.is_finite()), "the dead row is 0, not NaN");
    // A float mask (a constant of the graph), with the causal triangle.
    let bias = Var::new(Tensor::randn([5, 5])?);
    let d = roundtrip_fn("attention_float_mask_causal", |x| heads_attention(x, Some(&bias), true), |n| vec![n, 5, 8])?;
    assert!(d <= 1e-6, "float mask: max abs difference {d}");
    Ok(())
}

#[test]
fn multihead_attention_with_padding_and_attention_masks_roundtrips() -> Result<()> {
    use ember::nn::{MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions};
    let _rng = seed_guard(11);
    let mha =
        MultiheadAttention::with_options(8, 2, MultiheadAttentionOptions { batch_first: true, ..Default::default() })?;
    mha.eval();
    let pad = Tensor::from_vec(vec![0u8, 0, 0, 1, 1, 0, 0, 0, 0, 1], [2, 5])?;
    let attn = Tensor::randn([5, 5])?;
    for need_weights in [true, false] {
        let args = MultiheadAttentionArgs {
            key_padding_mask: Some(&pad),
            attn_mask: Some(&attn),
            need_weights,
            ..Default::default()
        };
        let f = |x: &Var| Ok(mha.forward_with(x, x, x, &args)?.output);
        let params = mha.named_parameters();
        let x = Var::new(Tensor::randn([2, 5, 8])?);
        let bytes =
            export_fn_bytes(|v| Ok(vec![f(&v[0])?]), &params, std::slice::from_ref(&x), &ExportOptions::default())?;
        let name = if need_weights { "mha_masks_weights" } else { "mha_masks" };
        let want = f(&x)?;
        keep_for_onnx_runtime(name, &bytes, &x, &want)?;
        let d = max_diff(&want, &load_bytes(&bytes)?.forward(&x)?)?;
        assert!(d <= 1e-6, "{name}: max abs difference {d}");
    }
    Ok(())
}

/// Exports `model` traced on `x` with static shapes, reloads it, and returns the largest
/// difference on `x`.
fn roundtrip_static(name: &str, model: &dyn Module, x: &Var) -> Result<f32> {
    model.eval();
    let bytes = export_bytes(model, x, &ExportOptions::default())?;
    let want = model.forward(x)?;
    keep_for_onnx_runtime(name, &bytes, x, &want)?;
    max_diff(&want, &load_bytes(&bytes)?.forward(x)?)
}

#[test]
fn recurrent_layers_roundtrip() -> Result<()> {
    use ember::nn::{GRU, LSTM, RNN, RnnOptions};
    let _rng = seed_guard(12);
    // Batch-first layers at a second batch size: the recurrences run time-major inside
    // (the batch in dimension 1) from zero states of the batch's size.
    let options = RnnOptions::default().num_layers(2).batch_first(true).bidirectional(true);
    let shape = |n: usize| vec![n, 6, 5];
    let rnn = RNN::with_options(5, 4, options)?;
    let d = roundtrip_module("rnn", &rnn, shape)?;
    assert!(d <= 1e-6, "RNN: max abs difference {d}");
    let gru = GRU::with_options(5, 4, options)?;
    let d = roundtrip_module("gru", &gru, shape)?;
    assert!(d <= 1e-6, "GRU: max abs difference {d}");
    let lstm = LSTM::with_options(5, 4, options)?;
    let d = roundtrip_module("lstm", &lstm, shape)?;
    assert!(d <= 1e-6, "LSTM: max abs difference {d}");
    // A projected LSTM, a ReLU RNN without biases.
    let projected = LSTM::with_options(5, 4, RnnOptions { proj_size: 2, ..options })?;
    let d = roundtrip_module("lstm_projected", &projected, shape)?;
    assert!(d <= 1e-6, "projected LSTM: max abs difference {d}");
    // Sequence-first layers have their batch in dimension 1: static shapes.
    let relu = RnnOptions { nonlinearity: ember::nn::Nonlinearity::Relu, bias: false, ..RnnOptions::default() };
    let d = roundtrip_static("rnn_relu", &RNN::with_options(5, 4, relu)?, &Var::new(Tensor::randn([6, 2, 5])?))?;
    assert!(d <= 1e-6, "ReLU RNN: max abs difference {d}");
    let single = LSTM::new(5, 3)?;
    let d = roundtrip_static("lstm_seq_first", &single, &Var::new(Tensor::randn([6, 2, 5])?))?;
    assert!(d <= 1e-6, "LSTM (sequence first): max abs difference {d}");
    Ok(())
}

#[test]
fn an_operation_that_changes_with_the_batch_is_named_under_a_dynamic_batch() -> Result<()> {
    let _rng = seed_guard(15);
    // All but the last sample: the slice's length is the batch's, which ONNX would fix.
    let f = |x: &[Var]| {
        let n = x[0].shape()[0];
        Ok(vec![x[0].narrow(0, 0, n - 1)?])
    };
    let x = Var::new(Tensor::randn([3, 4])?);
    let options = ExportOptions::default().dynamic_batch(true);
    let err = export_fn_bytes(f, &[], std::slice::from_ref(&x), &options).unwrap_err();
    assert!(err.to_string().contains("'slice' changes with the batch size"), "{err}");
    // Without a dynamic batch it exports, for that batch.
    let bytes = export_fn_bytes(f, &[], std::slice::from_ref(&x), &ExportOptions::default())?;
    assert_eq!(max_diff(&f(std::slice::from_ref(&x))?[0], &load_bytes(&bytes)?.forward(&x)?)?, 0.0);
    Ok(())
}

#[test]
fn group_norm_and_default_instance_norm_export_and_reload() -> Result<()> {
    // Both normalise with the fused per-channel op, which exports as its statistics
    // (`ReduceMean`, `Sub`, `Mul`, `Sqrt`, `Div`) over every dimension but the channels.
    use ember::nn::{GroupNorm, InstanceNorm2d};
    let _rng = seed_guard(16);
    let x = Var::new(Tensor::randn([2, 4, 5, 5])?);
    let group = GroupNorm::new(2, 4)?;
    let d = roundtrip_static("group_norm", &group, &x)?;
    assert!(d <= 1e-5, "GroupNorm: {d}");
    // Without running statistics (the default) an instance norm uses the input's own
    // statistics in evaluation too, which is the mode export traces in.
    let instance = InstanceNorm2d::new(4)?;
    let d = roundtrip_static("instance_norm", &instance, &x)?;
    assert!(d <= 1e-5, "InstanceNorm2d: {d}");
    Ok(())
}
