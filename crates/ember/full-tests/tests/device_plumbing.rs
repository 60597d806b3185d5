//! The whole stack on `Device::Cuda(0)`: training, layers, double backward, clipping,
//! optimizers, checkpoints and data run there exactly as on the CPU.
//!
//! Each check runs the same seeded computation on the CPU and on the device and compares
//! every loss, gradient and parameter. Under the emulated device (`Device::emulate_cuda`,
//! in builds without the `cuda` feature) the kernels are the CPU's, so the results must be bit-identical: any difference means a
//! tensor was made on, or moved to, the wrong device somewhere. On a real GPU (feature
//! `cuda`) the same checks compare within [`TOLERANCE`]. Without a usable `cuda:0` each test
//! prints a `skipped:` line and passes.

use ember::autograd::{Function, FunctionCtx, checkpoint};
use ember::data::{DataLoader, TensorDataset};
use ember::mnist;
use ember::nn::{
    BatchNorm1d, BatchNorm2d, Conv2d, CrossEntropyOptions, Dropout, Flatten, GELU, LSTM, Linear, MaxPool2d, ReLU,
    Reduction, Sequential, Tanh, TransformerEncoderLayer, Unflatten, cross_entropy, mse_loss,
};
use ember::onnx::{ExportOptions, export_bytes, load_bytes};
use ember::optim::{Adam, AdamConfig, AdamW, AdamWConfig, RmsProp, RmsPropConfig, Sgd, SgdConfig, clip_grad_norm_};
use ember::prelude::*;
use parking_lot::{Mutex, MutexGuard};

const GPU: Device = Device::Cuda(0);

/// How far device results may be from the CPU's: nothing under the emulation (same
/// kernels), a relative 1e-4 on a real GPU (other summation orders and fused kernels).
const TOLERANCE: f64 = if cfg!(feature = "cuda") { 1e-4 } else { 0.0 };

/// The global generator is shared by the tests of this file, which run on parallel threads:
/// every test that draws holds this lock, so that a comparison's two runs draw the same
/// numbers.
static SEEDED: Mutex<()> = Mutex::new(());

/// Named results of one run, read back to the host.
type Outcome = Vec<(String, Tensor)>;

/// The device to test on, or `None` (after printing why) when `cuda:0` cannot be used.
fn device(test: &str) -> Option<Device> {
    // Without the `cuda` feature, the emulated device stands in for a GPU.
    Device::emulate_cuda();
    match GPU.check_available() {
        Ok(()) => Some(GPU),
        Err(e) => {
            println!("skipped: {test}: {e}");
            None
        }
    }
}

/// How far one Adam step may move a parameter apart on the two devices, beyond
/// [`TOLERANCE`], on a real GPU: a parameter whose gradient is zero in exact arithmetic (the
/// key bias of attention, which softmax cancels) gets rounding noise of either sign, which
/// Adam's first step scales towards `±lr` (1e-3 here) whatever its size.
const ADAM_NOISE: f64 = if cfg!(feature = "cuda") { 2e-3 } else { 0.0 };

/// Asserts that `a` and `b` hold the same names, shapes and dtypes, and values within
/// `tol` relative to `b` (bitwise equality, NaN included, when `tol` is 0).
fn assert_same(what: &str, a: &Outcome, b: &Outcome, tol: f64) -> Result<()> {
    assert_close(what, a, b, tol, 0.0)
}

/// [`assert_same`] with an absolute `slack` on top of the relative tolerance.
fn assert_close(what: &str, a: &Outcome, b: &Outcome, tol: f64, slack: f64) -> Result<()> {
    assert_eq!(a.len(), b.len(), "{what}: different numbers of results");
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb, "{what}: results in another order");
        assert_eq!((ta.shape(), ta.dtype()), (tb.shape(), tb.dtype()), "{what}: {na}");
        let (va, vb) = (ta.to_vec_f64()?, tb.to_vec_f64()?);
        for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
            let same = if tol == 0.0 && slack == 0.0 {
                x.to_bits() == y.to_bits()
            } else {
                (x - y).abs() <= tol * (1.0 + y.abs()) + slack
            };
            assert!(same, "{what}: {na}[{i}] is {x} on the device and {y} on the CPU");
        }
    }
    Ok(())
}

/// Holds the global generator for the calling test (see [`SEEDED`]).
fn seeded() -> MutexGuard<'static, ()> {
    SEEDED.lock()
}

/// Runs `run` with seed 0 on the CPU and on `device` and compares the outcomes.
fn compare(what: &str, device: Device, run: impl Fn(Device) -> Result<Outcome>) -> Result<()> {
    compare_with(what, device, 0.0, run)
}

/// [`compare`] allowing `slack` more (absolutely) on a real GPU.
fn compare_with(what: &str, device: Device, slack: f64, run: impl Fn(Device) -> Result<Outcome>) -> Result<()> {
    let _seeded = seeded();
    manual_seed(0);
    let on_cpu = run(Device::Cpu)?;
    manual_seed(0);
    let on_device = run(device)?;
    assert!(!on_cpu.is_empty(), "{what}: nothing to compare");
    assert_close(what, &on_device, &on_cpu, TOLERANCE, slack)
}

/// The parameters and buffers of `model`, after checking that they are all on `device`.
fn state_on(model: &dyn Module, device: Device) -> Outcome {
    let state: Outcome = model.state_dict().into_iter().collect();
    for (name, t) in &state {
        assert_eq!(t.device(), device, "{name}");
    }
    state
}

/// The gradients of `model`'s parameters, each checked to be on its parameter's device.
fn grads_of(model: &dyn Module) -> Outcome {
    let mut out = Vec::new();
    for (name, p) in model.named_parameters() {
        if let Some(g) = p.grad() {
            assert_eq!(g.device(), p.device(), "the gradient of {name}");
            out.push((format!("{name}.grad"), g));
        }
    }
    out
}

/// One scalar of a loss, as a one-element tensor on the host.
fn scalar(name: String, loss: &Var) -> Result<(String, Tensor)> {
    Ok((name, loss.value().to_device(Device::Cpu)?))
}

/// The quick start's data: points in the plane, class 1 outside the circle of radius 1.2.
fn circle_data(n: usize) -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn([n, 2])?;
    let y = x.square().sum(1, false)?.gt_scalar(1.44).to_dtype(DType::I64);
    Ok((x, y))
}

fn mlp() -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(2, 32)?).add(ReLU).add(Linear::new(32, 2)?))
}

#[test]
fn quick_start_mlp_with_adam_trains_identically() -> Result<()> {
    let Some(dev) = device("quick_start_mlp_with_adam_trains_identically") else { return Ok(()) };
    compare("MLP + Adam", dev, |d| {
        let (x, y) = circle_data(256)?;
        let model = mlp()?;
        model.to_device(d)?;
        // Built after the move, as in PyTorch: the optimizer sees the moved parameters.
        let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
        let mut out = Vec::new();
        for step in 0..20 {
            let rows = (step * 32) % 256;
            let xb = Var::new(x.narrow(0, rows, 32)?.to_device(d)?);
            let yb = y.narrow(0, rows, 32)?.to_device(d)?;
            let loss = cross_entropy(&model.forward(&xb)?, &yb, CrossEntropyOptions::default())?;
            assert_eq!(loss.device(), d);
            opt.zero_grad();
            loss.backward()?;
            opt.step()?;
            out.push(scalar(format!("loss {step}"), &loss)?);
        }
        out.extend(grads_of(&model));
        out.extend(state_on(&model, d));
        Ok(out)
    })
}

fn small_cnn() -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Conv2d::new(1, 4, 3)?)
        .add(BatchNorm2d::new(4)?)
        .add(ReLU)
        .add(MaxPool2d::new(2))
        .add(Dropout::new(0.25)?)
        .add(Flatten::new())
        .add(Linear::new(4 * 3 * 3, 3)?))
}

#[test]
fn cnn_with_batch_norm_and_dropout_in_train_and_eval_mode() -> Result<()> {
    let Some(dev) = device("cnn_with_batch_norm_and_dropout_in_train_and_eval_mode") else { return Ok(()) };
    compare("CNN", dev, |d| {
        let model = small_cnn()?;
        model.to_device(d)?;
        let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() })?;
        let mut out = Vec::new();
        for step in 0..3 {
            let x = Var::new(Tensor::randn([4, 1, 8, 8])?.to_device(d)?);
            let y = Tensor::from_vec(vec![0i64, 1, 2, 1], [4])?.to_device(d)?;
            let loss = cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())?;
            opt.zero_grad();
            loss.backward()?;
            opt.step()?;
            out.push(scalar(format!("train loss {step}"), &loss)?);
        }
        model.eval();
        let x = Var::new(Tensor::randn([2, 1, 8, 8])?.to_device(d)?);
        let y = no_grad(|| model.forward(&x))?;
        assert_eq!(y.device(), d);
        out.push(("eval output".into(), y.value()));
        // The running statistics moved with the model and were updated there.
        out.extend(state_on(&model, d));
        Ok(out)
    })
}

#[test]
fn lstm_and_transformer_encoder_forward_and_backward() -> Result<()> {
    let Some(dev) = device("lstm_and_transformer_encoder_forward_and_backward") else { return Ok(()) };
    compare("LSTM", dev, |d| {
        let lstm = LSTM::new(3, 5)?;
        lstm.to_device(d)?;
        let x = Var::param(Tensor::randn([6, 2, 3])?.to_device(d)?);
        let out = lstm.run(&x, None)?;
        out.output.square().sum_all().add(&out.c_n.sum_all())?.backward()?;
        // Sequences of different lengths use the padding masks.
        let packed = lstm.run_with_lengths(&x.detach(), &[6, 4], None)?;
        let mut res = vec![("output".to_string(), out.output.value()), ("h_n".into(), out.h_n.value())];
        res.push(("packed".into(), packed.output.value()));
        res.push(("x.grad".into(), x.grad().ok_or_else(|| Error::autograd("no input gradient"))?));
        res.extend(grads_of(&lstm));
        Ok(res)
    })?;
    compare("TransformerEncoderLayer", dev, |d| {
        let layer = TransformerEncoderLayer::new(8, 2)?;
        layer.to_device(d)?;
        let x = Var::param(Tensor::randn([5, 2, 8])?.to_device(d)?);
        // Training mode: the dropout masks are drawn on the device.
        let y = layer.forward(&x)?;
        y.square().mean_all().backward()?;
        let mut res = vec![("y".to_string(), y.value())];
        res.push(("x.grad".into(), x.grad().ok_or_else(|| Error::autograd("no input gradient"))?));
        res.extend(grads_of(&layer));
        Ok(res)
    })
}

#[test]
fn double_backward_through_an_mlp() -> Result<()> {
    let Some(dev) = device("double_backward_through_an_mlp") else { return Ok(()) };
    compare("double backward", dev, |d| {
        let model = Sequential::new().add(Linear::new(3, 8)?).add(Tanh).add(Linear::new(8, 1)?);
        model.to_device(d)?;
        let x = Var::param(Tensor::randn([4, 3])?.to_device(d)?);
        let y = model.forward(&x)?.sum_all();
        let g = grad(&[&y], &[&x], &[], true, true)?;
        let gx = g[0].clone().ok_or_else(|| Error::autograd("no gradient"))?;
        // A gradient penalty: its gradient flows through the first backward.
        gx.square().sum_all().backward()?;
        let mut res = vec![("dy/dx".to_string(), gx.value())];
        res.extend(grads_of(&model));
        Ok(res)
    })
}

#[test]
fn gradient_clipping_and_optimizers() -> Result<()> {
    let Some(dev) = device("gradient_clipping_and_optimizers") else { return Ok(()) };
    type MakeOpt = fn(Vec<Var>) -> Result<Box<dyn Optimizer>>;
    let optimizers: [(&str, MakeOpt); 4] = [
        ("SGD momentum", |p| {
            let c = SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-2, ..Default::default() };
            Ok(Box::new(Sgd::new(p, c)?))
        }),
        ("RMSprop", |p| {
            let c = RmsPropConfig { lr: 1e-2, momentum: 0.5, centered: true, ..Default::default() };
            Ok(Box::new(RmsProp::new(p, c)?))
        }),
        ("AdamW", |p| Ok(Box::new(AdamW::new(p, AdamWConfig { amsgrad: true, ..Default::default() })?))),
        ("Adam", |p| Ok(Box::new(Adam::new(p, AdamConfig::default())?))),
    ];
    for (name, make) in optimizers {
        compare(name, dev, |d| {
            let model = mlp()?;
            model.to_device(d)?;
            let mut opt = make(model.parameters())?;
            let mut out = Vec::new();
            for step in 0..4 {
                let x = Var::new(Tensor::randn([8, 2])?.to_device(d)?);
                let target = Tensor::randn([8, 2])?.to_device(d)?;
                let loss = mse_loss(&model.forward(&x)?, &target, Reduction::Mean)?;
                opt.zero_grad();
                loss.backward()?;
                let norm = clip_grad_norm_(&model.parameters(), 0.5, 2.0)?;
                out.push((format!("norm {step}"), Tensor::scalar(norm)));
                opt.step()?;
            }
            out.extend(grads_of(&model));
            out.extend(state_on(&model, d));
            Ok(out)
        })?;
    }
    Ok(())
}

#[test]
fn checkpoints_move_between_devices() -> Result<()> {
    let Some(dev) = device("checkpoints_move_between_devices") else { return Ok(()) };
    let _seeded = seeded();
    let path = std::env::temp_dir().join(format!("ember-device-plumbing-{}.safetensors", std::process::id()));
    let trained = small_cnn()?;
    trained.to_device(dev)?;
    let x = Var::new(Tensor::randn([2, 1, 8, 8])?.to_device(dev)?);
    trained.forward(&x)?.sum_all().backward()?;
    // Saved from the device, loaded into a CPU model: the same values, on the CPU.
    trained.save(&path)?;
    let on_cpu = small_cnn()?;
    on_cpu.load(&path)?;
    std::fs::remove_file(&path).ok();
    let saved: Outcome = trained.state_dict().into_iter().collect();
    let loaded = state_on(&on_cpu, Device::Cpu);
    assert_same("save on the device, load on the CPU", &loaded, &saved, 0.0)?;
    // A state dict read on the host loads into a model on the device, which stays there.
    let back = small_cnn()?;
    back.to_device(dev)?;
    back.load_state_dict(&on_cpu.state_dict())?;
    let reloaded = state_on(&back, dev);
    assert_same("load a host state dict on the device", &reloaded, &saved, 0.0)?;
    // Moving back to the CPU moves the gradients too.
    trained.to_device(Device::Cpu)?;
    assert!(!grads_of(&trained).is_empty());
    state_on(&trained, Device::Cpu);
    Ok(())
}

#[test]
fn data_loader_batches_and_var_to_device() -> Result<()> {
    let Some(dev) = device("data_loader_batches_and_var_to_device") else { return Ok(()) };
    let _seeded = seeded();
    let (x, y) = circle_data(10)?;
    let loader = DataLoader::builder(TensorDataset::new(vec![x.clone(), y.clone()])?).batch_size(4).build()?;
    let mut rows = 0;
    for batch in loader.iter() {
        let batch = batch?;
        let moved = batch.iter().map(|t| t.to_device(dev)).collect::<Result<Vec<_>>>()?;
        assert!(moved.iter().all(|t| t.device() == dev));
        assert_eq!(moved[0].to_vec::<f32>()?, batch[0].to_vec::<f32>()?);
        assert_eq!(moved[1].to_vec::<i64>()?, batch[1].to_vec::<i64>()?);
        rows += moved[0].shape()[0];
    }
    assert_eq!(rows, 10);
    // Var::to_device is differentiable: the gradient goes back to the source device.
    let a = Var::param(x.clone());
    let b = a.to_device(dev)?;
    assert_eq!(b.device(), dev);
    b.square().sum_all().backward()?;
    let g = a.grad().ok_or_else(|| Error::autograd("no gradient"))?;
    assert_eq!(g.device(), Device::Cpu);
    assert_eq!(g.to_vec::<f32>()?, x.mul_scalar(2.0).to_vec::<f32>()?);
    Ok(())
}

#[test]
fn mnist_models_train_identically() -> Result<()> {
    let Some(dev) = device("mnist_models_train_identically") else { return Ok(()) };
    type Build = fn() -> Result<Box<dyn Module>>;
    let models: [(&str, Build); 4] = [
        ("mlp", || Ok(Box::new(mnist::mlp()?))),
        ("cnn", || Ok(Box::new(mnist::cnn()?))),
        ("lstm", || Ok(Box::new(mnist::lstm_classifier()?))),
        ("vit", || Ok(Box::new(mnist::vit_classifier()?))),
    ];
    for (name, build) in models {
        compare_with(name, dev, ADAM_NOISE, |d| {
            let model = build()?;
            model.to_device(d)?;
            assert_eq!(mnist::device_of(&*model), d);
            let mut opt = Adam::new(model.parameters(), AdamConfig::default())?;
            // Host batches, as the loader gives them: train_step moves them.
            let x = Tensor::rand([4, 784])?;
            let y = Tensor::from_vec(vec![3i64, 1, 4, 1], [4])?;
            let loss = mnist::train_step(&*model, &mut opt, &x, &y)?;
            // Evaluation moves its batches too.
            let eval = mnist::evaluate(&*model, &mnist::Data { images: x, labels: y })?;
            let mut out = vec![("loss".to_string(), Tensor::scalar(loss))];
            out.push(("eval".to_string(), Tensor::from_vec(vec![eval.accuracy, eval.loss], [2])?));
            out.extend(state_on(&*model, d));
            Ok(out)
        })?;
    }
    Ok(())
}

#[test]
fn onnx_models_run_on_the_device() -> Result<()> {
    let Some(dev) = device("onnx_models_run_on_the_device") else { return Ok(()) };
    compare("ONNX", dev, |d| {
        // GELU exports through Erf and constants, BatchNorm through its buffers.
        let model = Sequential::new()
            .add(Linear::new(6, 8)?)
            .add(GELU::new())
            .add(Unflatten::new(1, [8, 1]))
            .add(BatchNorm1d::new(8)?)
            .add(Flatten::new())
            .add(Linear::new(8, 3)?);
        model.eval();
        let bytes = export_bytes(&model, &Var::new(Tensor::randn([2, 6])?), &ExportOptions::default())?;
        let back = load_bytes(&bytes)?;
        back.to_device(d)?;
        let y = back.forward(&Var::param(Tensor::randn([2, 6])?.to_device(d)?))?;
        assert_eq!(y.device(), d);
        y.square().sum_all().backward()?;
        let mut out = vec![("y".to_string(), y.value())];
        out.extend(grads_of(&back));
        Ok(out)
    })
}

/// `(sin x, cos x)`: a custom function with two outputs, so that backward through one of
/// them makes zero gradients for the other.
struct SinCos;

impl Function for SinCos {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (s, c) = (inputs[0].sin(), inputs[0].cos());
        ctx.save_for_backward(&[&s, &c]);
        Ok(vec![s, c])
    }

    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let saved = ctx.saved_tensors()?;
        Ok(vec![Some(grads[0].mul(&saved[1])?.sub(&grads[1].mul(&saved[0])?)?)])
    }
}

#[test]
fn custom_functions_checkpoints_and_hooks() -> Result<()> {
    let Some(dev) = device("custom_functions_checkpoints_and_hooks") else { return Ok(()) };
    compare("custom function, checkpoint, hooks", dev, |d| {
        let x = Var::param(Tensor::randn([3, 4])?.to_device(d)?);
        // Only the first output is used: the second one's gradient is zeros on the device.
        let outs = SinCos.apply(&[&x])?;
        outs[0].sum_all().backward()?;
        let mut res = vec![("custom".to_string(), x.grad().ok_or_else(|| Error::autograd("no gradient"))?)];
        x.zero_grad();
        // A checkpointed segment with dropout recomputes the same mask on the device.
        let drop = Dropout::new(0.5)?;
        let y = checkpoint(move |v| Ok(drop.forward(&v[0])?.tanh().mul_scalar(3.0)), &[&x])?;
        let doubled = x.register_hook(|g| Ok(Some(g.mul_scalar(2.0))))?;
        y.sum_all().backward()?;
        doubled.remove();
        res.push(("checkpoint".to_string(), x.grad().ok_or_else(|| Error::autograd("no gradient"))?));
        res.push(("y".to_string(), y.value()));
        Ok(res)
    })
}

/// A module that lists a buffer but does not move it in `buffers_to_device`.
struct StuckBuffer(Tensor);

impl Module for StuckBuffer {
    fn forward(&self, x: &Var) -> Result<Var> {
        Ok(x.clone())
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        vec![("stuck".to_string(), self.0.clone())]
    }
    fn set_training(&self, _: bool) {}
}

#[test]
fn a_buffer_left_behind_is_an_error_naming_it() -> Result<()> {
    let Some(dev) = device("a_buffer_left_behind_is_an_error_naming_it") else { return Ok(()) };
    let _seeded = seeded();
    let err = StuckBuffer(Tensor::zeros([2], DType::F32)?).to_device(dev).expect_err("the buffer did not move");
    let msg = err.to_string();
    assert!(msg.contains("stuck") && msg.contains("buffers_to_device") && msg.contains("cpu"), "{msg}");
    // Moving to a device that does not exist is an error before anything moves.
    let model = mlp()?;
    assert!(model.to_device(Device::Cuda(99)).is_err());
    state_on(&model, Device::Cpu);
    Ok(())
}

/// Asserts that `r` is an error that names the CPU and the device.
fn names_both<T>(what: &str, r: Result<T>, dev: Device) {
    match r {
        Ok(_) => panic!("{what}: mixing devices should have failed"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("cpu") && msg.contains(&dev.to_string()), "{what}: {msg}");
        }
    }
}

#[test]
fn mixing_devices_is_an_error_naming_both() -> Result<()> {
    let Some(dev) = device("mixing_devices_is_an_error_naming_both") else { return Ok(()) };
    let _seeded = seeded();
    let model = mlp()?;
    model.to_device(dev)?;
    let x_cpu = Var::new(Tensor::randn([3, 2])?);
    names_both("a CPU input to a device model", model.forward(&x_cpu), dev);
    let x = Var::new(Tensor::randn([3, 2])?.to_device(dev)?);
    let out = model.forward(&x)?;
    let y_cpu = Tensor::from_vec(vec![0i64, 1, 1], [3])?;
    names_both("a CPU target", cross_entropy(&out, &y_cpu, CrossEntropyOptions::default()), dev);
    names_both("a CPU gradient for a device output", out.backward_with(Some(&Tensor::randn([3, 2])?), false), dev);
    let p = model.parameters()[0].clone();
    names_both("a CPU gradient set on a device parameter", p.set_grad(Some(p.value().to_device(Device::Cpu)?)), dev);
    names_both("Var add", x.add(&x_cpu), dev);
    Ok(())
}
