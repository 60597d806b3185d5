//! ember -> ONNX -> ember: the quick-start models, exported and imported again, give the
//! outputs of the originals; an operation without an ONNX mapping is an error naming it.

use ember::nn::{Module, TransformerActivation, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions};
use ember::onnx::{ExportOptions, export_bytes, export_fn_bytes, load_bytes};
use ember::{Result, Tensor, Var, manual_seed, mnist};

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
    manual_seed(1);
    let model = mnist::mlp()?;
    assert_eq!(roundtrip(&model, &[784])?, 0.0);
    Ok(())
}

#[test]
fn quick_start_cnn_roundtrips_exactly() -> Result<()> {
    manual_seed(2);
    let model = mnist::cnn()?;
    assert_eq!(roundtrip(&model, &[784])?, 0.0);
    Ok(())
}

#[test]
fn transformer_encoder_roundtrips() -> Result<()> {
    manual_seed(3);
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
    let x = Var::new(Tensor::randn([2, 3])?);
    let err = export_fn_bytes(|x| Ok(vec![x[0].sin()]), &[], &[x], &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("'sin'"), "{err}");
    Ok(())
}

#[test]
fn average_and_adaptive_pools_roundtrip_exactly() -> Result<()> {
    use ember::nn::{AdaptiveAvgPool2d, AvgPool2d, Conv2d, Flatten, Linear, ReLU, Sequential};
    manual_seed(4);
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

#[test]
fn a_pool_without_a_kernel_and_stride_description_is_named() -> Result<()> {
    let x = Var::new(Tensor::randn([1, 2, 7, 7])?);
    let padded = |x: &[Var]| {
        let mut args = ember::tensor::pool::AvgPoolArgs::new(3);
        args.padding = [1, 1];
        Ok(vec![x[0].avg_pool2d(&args)?])
    };
    let err = export_fn_bytes(padded, &[], std::slice::from_ref(&x), &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("avg_pool2d") && err.to_string().contains("padding"), "{err}");
    // An adaptive pool whose input the output size does not divide has unequal windows.
    let uneven = |x: &[Var]| Ok(vec![x[0].adaptive_avg_pool2d([3, 3])?]);
    let err = export_fn_bytes(uneven, &[], &[x], &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("adaptive_avg_pool2d"), "{err}");
    Ok(())
}
