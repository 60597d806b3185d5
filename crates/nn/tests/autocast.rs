//! Layers under autocast: recurrent layers and a Transformer encoder layer run forward
//! and backward in a region and give their `f32` parameters `f32` gradients close to the
//! `f32` ones; norms take a lower-precision input with `f32` parameters; CUDA refuses
//! `binary_cross_entropy`.

use ember_autograd::autocast::{AutocastGuard, DeviceType, autocast};
use ember_autograd::{Var, profile};
use ember_nn::functional as F;
use ember_nn::{GRU, LSTM, Module, Reduction, RnnOptions, TransformerEncoderLayer, TransformerLayerOptions};
use ember_tensor::{DType, Device, Result, Tensor};

/// The parameters' gradients after `loss_of(module)` backward, in the parameters' order.
fn grads(m: &dyn Module, loss: Var) -> Result<Vec<Tensor>> {
    for p in m.parameters() {
        p.zero_grad();
    }
    loss.backward()?;
    Ok(m.parameters().iter().map(|p| p.grad().unwrap()).collect())
}

/// The largest gap between `a` and `b` relative to the largest magnitude in `a`.
fn relative_gap(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max) / scale
}

fn check_close(exact: &[Tensor], mixed: &[Tensor], tolerance: f32) {
    assert_eq!(exact.len(), mixed.len());
    for (i, (e, m)) in exact.iter().zip(mixed).enumerate() {
        assert_eq!(m.dtype(), DType::F32, "parameter {i}'s gradient");
        let gap = relative_gap(e, m);
        assert!(gap <= tolerance, "parameter {i}: relative gap {gap}");
    }
}

#[test]
fn lstm_forward_and_backward_under_cpu_autocast() -> Result<()> {
    let lstm = LSTM::with_options(6, 8, RnnOptions::default().num_layers(2))?;
    let x = Var::new(Tensor::randn([5, 3, 6])?);
    let loss = |out: &Var| out.to_dtype(DType::F32).square().mean_all();
    let exact = grads(&lstm, loss(&lstm.run(&x, None)?.output))?;
    let (out, prof) = profile(|| autocast(DeviceType::Cpu, DType::BF16, || lstm.run(&x, None)));
    let out = out??;
    assert_eq!(out.output.dtype(), DType::BF16);
    assert_eq!((out.h_n.dtype(), out.c_n.dtype()), (DType::BF16, DType::BF16));
    // Each parameter and the input are converted once, whatever the number of steps.
    let casts: usize = prof.key_averages().iter().filter(|s| s.name == "to_dtype").map(|s| s.count).sum();
    assert_eq!(casts, lstm.parameters().len() + 1);
    let mixed = grads(&lstm, loss(&out.output))?;
    check_close(&exact, &mixed, 0.05);
    Ok(())
}

#[test]
fn lstm_under_cuda_autocast_runs_in_f16() -> Result<()> {
    let cuda = Device::Cuda(0);
    if !(Device::emulate_cuda() || cuda.is_available()) {
        return Ok(());
    }
    let lstm = LSTM::new(4, 5)?;
    lstm.to_device(cuda)?;
    let x = Var::new(Tensor::randn([3, 2, 4])?.to_device(cuda)?);
    let exact = grads(&lstm, lstm.run(&x, None)?.output.to_dtype(DType::F32).sum_all())?;
    let out = autocast(cuda, DType::F16, || lstm.run(&x, None))??;
    assert_eq!(out.output.dtype(), DType::F16);
    let mixed = grads(&lstm, out.output.to_dtype(DType::F32).sum_all())?;
    let exact: Vec<Tensor> = exact.iter().map(|g| g.to_device(Device::Cpu)).collect::<Result<_>>()?;
    let mixed: Vec<Tensor> = mixed.iter().map(|g| g.to_device(Device::Cpu)).collect::<Result<_>>()?;
    // f16 keeps 11 significant bits.
    check_close(&exact, &mixed, 0.01);
    Ok(())
}

/// PyTorch's CPU GRU is not on the lower-precision list: `f32` in, `f32` out.
#[test]
fn gru_stays_f32_under_cpu_autocast() -> Result<()> {
    let gru = GRU::new(3, 4)?;
    let x = Var::new(Tensor::randn([2, 1, 3])?);
    let out = autocast(DeviceType::Cpu, DType::BF16, || gru.run(&x, None))??;
    assert_eq!(out.output.dtype(), DType::F32);
    let exact = gru.run(&x, None)?;
    assert_eq!(out.output.value().to_vec::<f32>()?, exact.output.value().to_vec::<f32>()?);
    Ok(())
}

#[test]
fn transformer_encoder_layer_forward_and_backward_under_autocast() -> Result<()> {
    let opts = TransformerLayerOptions { dim_feedforward: 32, batch_first: true, dropout: 0.0, ..Default::default() };
    let layer = TransformerEncoderLayer::with_options(16, 4, opts)?;
    let x = Var::new(Tensor::randn([2, 5, 16])?);
    let loss = |y: &Var| y.to_dtype(DType::F32).square().mean_all();
    let exact = grads(&layer, loss(&layer.forward(&x)?))?;
    let y = autocast(DeviceType::Cpu, DType::BF16, || layer.forward(&x))??;
    // The residual adds the f32 input to bf16 sublayer outputs: the layer answers in f32.
    assert_eq!(y.dtype(), DType::F32);
    let mixed = grads(&layer, loss(&y))?;
    assert!(mixed.iter().all(|g| g.to_vec::<f32>().unwrap().iter().all(|v| v.is_finite())));
    check_close(&exact, &mixed, 0.1);
    Ok(())
}

/// PyTorch's CPU layer norm takes a `bf16` input with `f32` parameters and answers in
/// `bf16`, computing in `f32`.
#[test]
fn layer_norm_of_a_bf16_input_with_f32_parameters() -> Result<()> {
    let x = Tensor::randn([3, 8])?;
    let (w, b) = (Var::param(Tensor::randn([8])?), Var::param(Tensor::randn([8])?));
    let exact = F::layer_norm(&Var::new(x.clone()), &[8], Some(&w), Some(&b), 1e-5)?;
    let low = Var::new(x.to_dtype(DType::BF16));
    assert!(F::layer_norm(&low, &[8], Some(&w), Some(&b), 1e-5).is_err(), "mixed dtypes outside autocast");
    let y = autocast(DeviceType::Cpu, DType::BF16, || F::layer_norm(&low, &[8], Some(&w), Some(&b), 1e-5))??;
    assert_eq!(y.dtype(), DType::BF16);
    let gap = relative_gap(&exact.value(), &y.value().to_dtype(DType::F32));
    assert!(gap < 0.02, "relative gap {gap}");
    y.to_dtype(DType::F32).sum_all().backward()?;
    assert_eq!(w.grad().map(|g| g.dtype()), Some(DType::F32));
    Ok(())
}

#[test]
fn losses_run_in_f32() -> Result<()> {
    let x = Var::param(Tensor::randn([4, 3])?.to_dtype(DType::BF16));
    let t = Var::new(Tensor::randn([4, 3])?.to_dtype(DType::BF16));
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let l = F::mse_loss(&x, &t, Reduction::Mean)?;
    assert_eq!(l.dtype(), DType::F32);
    l.backward()?;
    assert_eq!(x.grad().map(|g| g.dtype()), Some(DType::BF16));
    Ok(())
}

#[test]
fn cuda_autocast_refuses_binary_cross_entropy() -> Result<()> {
    let cuda = Device::Cuda(0);
    if !(Device::emulate_cuda() || cuda.is_available()) {
        return Ok(());
    }
    let p = Var::new(Tensor::full([2], 0.5, DType::F32)?.to_device(cuda)?);
    let _region = AutocastGuard::new(cuda, DType::F16)?;
    let err = F::binary_cross_entropy(&p, &p, Reduction::Mean).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("binary_cross_entropy") && err.contains("binary_cross_entropy_with_logits"), "{err}");
    assert!(F::binary_cross_entropy_with_logits(&p, &p, Reduction::Mean).is_ok());
    Ok(())
}
