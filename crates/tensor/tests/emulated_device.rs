//! The emulated `cuda:0` (`Device::emulate_cuda`, in builds without the `cuda` feature):
//! tensors move to it and back unchanged, every kernel on it gives the CPU's bits, storages
//! of the wrong device and operands on different devices are errors naming the devices.
#![cfg(not(feature = "cuda"))]

use ember_tensor::backend::cpu::CpuBackend;
use ember_tensor::backend::{Backend, backend_for};
use ember_tensor::storage::{CpuStorage, Storage};
use ember_tensor::{
    Attention, ConvArgs, DType, Device, Error, Layout, MaxPoolArgs, Result, Shape, Tensor, UnaryOp, manual_seed,
};

const GPU: Device = Device::Cuda(0);

/// The values of a float tensor as bit patterns, so that equality is bitwise (NaN included).
fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(t.to_vec_f64()?.into_iter().map(f64::to_bits).collect())
}

/// Asserts that `f` gives the same dtype, shape and bits on the device as on the CPU, and
/// that its result is on the device of its inputs.
fn same_on_both(inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    let host: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
    let cpu = f(&host)?;
    let moved = inputs.iter().map(|t| t.to_device(GPU)).collect::<Result<Vec<_>>>()?;
    let gpu = f(&moved)?;
    assert_eq!(cpu.device(), Device::Cpu);
    assert_eq!(gpu.device(), GPU);
    assert_eq!((cpu.dtype(), cpu.shape()), (gpu.dtype(), gpu.shape()));
    assert_eq!(bits(&cpu)?, bits(&gpu)?);
    Ok(())
}

fn randn(shape: impl Into<Shape>) -> Result<Tensor> {
    Tensor::randn(shape)
}

#[test]
fn round_trip_keeps_values_dtype_and_shape() -> Result<()> {
    assert!(Device::emulate_cuda());
    let t = Tensor::from_vec(vec![1.5f32, -0.0, f32::NAN, f32::INFINITY, 7.0, 1e-42], [2, 3])?;
    let d = t.to_device(GPU)?;
    assert_eq!(d.device(), GPU);
    assert_eq!(d.shape(), &[2, 3]);
    assert_eq!(d.dtype(), DType::F32);
    let back = d.to_device(Device::Cpu)?;
    assert_eq!(back.device(), Device::Cpu);
    let want: Vec<u32> = t.to_vec::<f32>()?.iter().map(|x| x.to_bits()).collect();
    let got: Vec<u32> = back.to_vec::<f32>()?.iter().map(|x| x.to_bits()).collect();
    assert_eq!(want, got);
    // Reading a device tensor reads a host copy; a strided view reads in logical order.
    assert_eq!(d.t()?.to_vec::<f32>()?.len(), 6);
    assert_eq!(Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2])?.to_device(GPU)?.t()?.to_vec::<i64>()?, vec![1, 3, 2, 4]);
    Ok(())
}

#[test]
fn device_availability_and_other_ordinals() {
    assert!(Device::emulate_cuda());
    assert!(GPU.is_available());
    assert_eq!(Device::cuda_if_available(), GPU);
    assert!(GPU.synchronize().is_ok());
    let err = Device::Cuda(1).check_available().unwrap_err();
    assert!(matches!(err, Error::Device { .. }));
    let msg = err.to_string();
    assert!(msg.contains("cuda:1") && msg.contains("one device"), "{msg}");
    let err = Tensor::zeros([2], DType::F32).unwrap().to_device(Device::Cuda(3)).unwrap_err();
    assert!(err.to_string().contains("cuda:3"), "{err}");
}

#[test]
fn creation_on_the_device() -> Result<()> {
    assert!(Device::emulate_cuda());
    let z = Tensor::full_on([2, 2], 3.0, DType::F64, GPU)?;
    assert_eq!(z.device(), GPU);
    assert_eq!(z.to_vec::<f64>()?, vec![3.0; 4]);
    assert_eq!(z.zeros_like().device(), GPU);
    assert_eq!(z.ones_like().device(), GPU);
    assert_eq!(z.rand_like()?.device(), GPU);
    assert_eq!(z.randn_like()?.device(), GPU);
    // Seeded draws are the same on both devices.
    manual_seed(7);
    let a = Tensor::normal_on([5], 0.0, 1.0, DType::F32, Device::Cpu)?;
    manual_seed(7);
    let b = Tensor::normal_on([5], 0.0, 1.0, DType::F32, GPU)?;
    assert_eq!(bits(&a)?, bits(&b)?);
    Ok(())
}

#[test]
fn elementwise_reductions_and_matmul_match_the_cpu_bitwise() -> Result<()> {
    assert!(Device::emulate_cuda());
    manual_seed(1);
    let (a, b, m) = (randn([4, 5])?, randn([5])?, randn([5, 3])?);
    same_on_both(&[&a, &b], |t| t[0].add(&t[1]))?;
    same_on_both(&[&a, &b], |t| (&t[0] * &t[1])?.exp().sum(1, false))?;
    same_on_both(&[&a], |t| Ok(t[0].tanh().to_dtype(DType::F64)))?;
    same_on_both(&[&a], |t| t[0].softmax(-1))?;
    same_on_both(&[&a], |t| t[0].log_softmax(0))?;
    same_on_both(&[&a], |t| t[0].var(0, true, false))?;
    same_on_both(&[&a], |t| Ok(t[0].argmax(1, false)?.to_dtype(DType::F64)))?;
    same_on_both(&[&a, &m], |t| t[0].matmul(&t[1]))?;
    same_on_both(&[&a, &a], |t| t[0].gt_scalar(0.0).where_cond(&t[0], &t[1].neg()))?;
    same_on_both(&[&a], |t| t[0].masked_fill(&t[0].lt_scalar(0.0), -1.0))?;
    same_on_both(&[&a, &a], |t| Tensor::cat(&[&t[0], &t[1]], 1))?;
    same_on_both(&[&a], |t| t[0].tril(0))?;
    same_on_both(&[&a], |t| t[0].pad(&[(1, 0), (0, 2)], 0.5))?;
    same_on_both(&[&a, &Tensor::from_vec(vec![2i64, 0], [2])?], |t| t[0].index_select(0, &t[1]))?;
    same_on_both(&[&a], |t| {
        let c = t[0].copy();
        c.add_(&t[0].narrow(0, 0, 1)?)?;
        c.mul_scalar_(0.5)?;
        Ok(c)
    })?;
    Ok(())
}

#[test]
fn heavy_kernels_match_the_cpu_bitwise() -> Result<()> {
    assert!(Device::emulate_cuda());
    manual_seed(2);
    let (x, w, bias) = (randn([2, 3, 6, 6])?, randn([4, 3, 3, 3])?, randn([4])?);
    same_on_both(&[&x, &w, &bias], |t| t[0].conv2d(&t[1], Some(&t[2]), &ConvArgs::<2>::default().padding(1)))?;
    same_on_both(&[&x], |t| t[0].max_pool2d(&MaxPoolArgs::new(2)))?;
    same_on_both(&[&x], |t| t[0].adaptive_avg_pool2d([2, 3]))?;
    same_on_both(&[&x, &randn([3])?, &randn([3])?], |t| Ok(t[0].channel_norm(Some(&t[1]), Some(&t[2]), 1e-5)?.0))?;
    let (q, k, v) = (randn([2, 3, 4])?, randn([2, 5, 4])?, randn([2, 5, 2])?);
    same_on_both(&[&q, &k, &v], |t| {
        Ok(t[0].attention(&t[1], &t[2], None, &Attention { scale: 0.5, causal: false })?.0)
    })?;
    let scores = randn([4, 5])?;
    let target = Tensor::from_vec(vec![0i64, 4, 2, 1], [4])?;
    same_on_both(&[&scores, &target], |t| t[0].log_softmax(1)?.gather(1, &t[1].unsqueeze(1)?))?;
    Ok(())
}

#[test]
fn fused_optimizer_steps_match_the_cpu_bitwise() -> Result<()> {
    assert!(Device::emulate_cuda());
    use ember_tensor::ops::optim::AdamStep;
    manual_seed(3);
    let (p, g) = (randn([7])?, randn([7])?);
    let hp = AdamStep {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
        decoupled: true,
        amsgrad: true,
        step: 1,
    };
    same_on_both(&[&p, &g], |t| {
        let p = t[0].copy();
        let state = [p.zeros_like(), p.zeros_like(), p.zeros_like()];
        p.adam_step_(&t[1], &state[0], &state[1], Some(&state[2]), &hp)?;
        Tensor::cat(&[&p, &state[0], &state[1], &state[2]], 0)
    })
}

#[test]
fn the_device_backend_refuses_host_storages() {
    assert!(Device::emulate_cuda());
    let backend = backend_for(GPU).unwrap();
    assert_eq!(backend.device(), GPU);
    let host = Storage::from(CpuStorage::zeros("test", 4, DType::F32).unwrap());
    let layout = Layout::contiguous(Shape::from([4]));
    let err = backend.unary(UnaryOp::Exp, (&host, &layout)).unwrap_err();
    assert!(matches!(err, Error::Device { .. }));
    let msg = err.to_string();
    assert!(msg.contains("cpu") && msg.contains("cuda:0") && msg.contains("exp"), "{msg}");
    let mut dst = Storage::from(CpuStorage::zeros("test", 4, DType::F32).unwrap());
    let err = backend.fill_inplace(&mut dst, &layout, 1.0.into()).unwrap_err();
    assert!(err.to_string().contains("fill_"), "{err}");
    // One wrong operand among right ones is enough.
    let dev = backend.full(4, 1.0.into(), DType::F32).unwrap();
    let err = backend.matmul((&dev, &layout), (&host, &layout)).unwrap_err();
    assert!(err.to_string().contains("matmul"), "{err}");
    // And the CPU backend refuses device storages the same way.
    let err = CpuBackend.unary(UnaryOp::Exp, (&dev, &layout)).unwrap_err();
    assert!(err.to_string().contains("cuda:0"), "{err}");
    assert_eq!(backend.download((&dev, &layout)).unwrap().as_slice::<f32>().unwrap(), &[1.0; 4]);
}

/// Asserts that `r` is an error naming both devices.
fn names_both_devices<T: std::fmt::Debug>(what: &str, r: Result<T>) {
    let msg = r.expect_err(what).to_string();
    assert!(msg.contains("cpu") && msg.contains("cuda:0"), "{what}: {msg}");
}

#[test]
fn mixing_devices_is_an_error_naming_both() -> Result<()> {
    assert!(Device::emulate_cuda());
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
    let b = a.to_device(GPU)?;
    let mask = a.gt_scalar(1.0);
    let idx = Tensor::from_vec(vec![1i64, 0], [2])?;
    names_both_devices("add", a.add(&b));
    names_both_devices("add (gpu first)", b.add(&a));
    names_both_devices("add broadcast", a.add(&b.narrow(0, 0, 1)?));
    names_both_devices("mul", &a * &b);
    names_both_devices("gt", a.gt(&b));
    names_both_devices("matmul", a.matmul(&b));
    names_both_devices("where cond", mask.where_cond(&b, &b));
    names_both_devices("where operands", mask.to_device(GPU)?.where_cond(&b, &a));
    names_both_devices("masked_fill", b.masked_fill(&mask, 0.0));
    names_both_devices("cat", Tensor::cat(&[&a, &b], 0));
    names_both_devices("stack", Tensor::stack(&[&b, &a], 0));
    names_both_devices("index_select", b.index_select(0, &idx));
    names_both_devices("gather", b.gather(0, &idx.unsqueeze(1)?));
    names_both_devices("copy_", a.copy_(&b));
    names_both_devices("add_", b.add_(&a));
    names_both_devices("update_", a.update_::<f32, 1>([&b], |p, [g]| *p += g));
    names_both_devices("update_ on the device", b.update_::<f32, 1>([&a], |p, [g]| *p += g));
    let x = Tensor::zeros([1, 1, 3, 3], DType::F32)?;
    let w = Tensor::zeros([1, 1, 2, 2], DType::F32)?.to_device(GPU)?;
    names_both_devices("conv2d", x.conv2d(&w, None, &ConvArgs::default()));
    let q = Tensor::zeros([1, 2, 2], DType::F32)?;
    names_both_devices(
        "attention",
        q.attention(&q.to_device(GPU)?, &q, None, &Attention { scale: 1.0, causal: false }),
    );
    names_both_devices(
        "channel_norm",
        x.channel_norm(Some(&Tensor::ones([1], DType::F32)?.to_device(GPU)?), None, 1e-5),
    );
    let g = a.to_device(GPU)?;
    names_both_devices("adam_step", {
        use ember_tensor::ops::optim::AdamStep;
        let hp = AdamStep {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            amsgrad: false,
            step: 1,
        };
        a.adam_step_(&g, &a.zeros_like(), &a.zeros_like(), None, &hp)
    });
    Ok(())
}
