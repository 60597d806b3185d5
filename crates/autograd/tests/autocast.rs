//! Autocast regions (`ember_autograd::autocast`): the thread's state and its guards, the
//! dtypes operations pick inside a region, gradients back to `f32` parameters, and the
//! weight cache. The per-operation dtypes against PyTorch's are replayed from the fixture
//! in crates/nn/tests/autocast_fixture.rs.

use ember_autograd::autocast::{
    AutocastGuard, DeviceType, autocast, autocast_dtype, cached_copies, is_autocast_enabled,
};
use ember_autograd::profiler::Phase;
use ember_autograd::{Var, no_grad, profile};
use ember_tensor::{ClassLoss, ClassScores, DType, Device, LossReduction, Result, Tensor};

/// How many `to_dtype` operations ran forward in `f`.
fn casts_in<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let (r, prof) = profile(f);
    let n =
        prof.key_averages().iter().filter(|s| s.name == "to_dtype" && s.phase == Phase::Forward).map(|s| s.count).sum();
    (r, n)
}

fn largest_gap(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_dtype(DType::F32).to_vec::<f32>().unwrap(), b.to_dtype(DType::F32).to_vec::<f32>().unwrap());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn defaults_nesting_and_disabled_sub_regions() -> Result<()> {
    assert!(!is_autocast_enabled(DeviceType::Cpu) && !is_autocast_enabled(DeviceType::Cuda));
    assert_eq!(autocast_dtype(DeviceType::Cpu), DType::BF16);
    assert_eq!(autocast_dtype(Device::Cuda(0)), DType::F16);
    {
        let _outer = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
        assert!(is_autocast_enabled(Device::Cpu));
        // One device type's region leaves the other alone.
        assert!(!is_autocast_enabled(DeviceType::Cuda));
        {
            let _inner = AutocastGuard::new(DeviceType::Cpu, DType::F16)?;
            assert_eq!(autocast_dtype(DeviceType::Cpu), DType::F16);
            let _off = AutocastGuard::disabled(DeviceType::Cpu);
            assert!(!is_autocast_enabled(DeviceType::Cpu));
            assert_eq!(autocast_dtype(DeviceType::Cpu), DType::F16);
        }
        assert!(is_autocast_enabled(DeviceType::Cpu));
        assert_eq!(autocast_dtype(DeviceType::Cpu), DType::BF16);
        let _off = AutocastGuard::with_enabled(DeviceType::Cpu, DType::BF16, false)?;
        assert!(!is_autocast_enabled(DeviceType::Cpu));
    }
    assert!(!is_autocast_enabled(DeviceType::Cpu));
    Ok(())
}

#[test]
fn a_disabled_sub_region_runs_in_the_inputs_dtype() -> Result<()> {
    let w = Var::param(Tensor::randn([3, 3])?);
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    assert_eq!(w.matmul(&w)?.dtype(), DType::BF16);
    let inner = {
        let _off = AutocastGuard::disabled(DeviceType::Cpu);
        w.matmul(&w)?
    };
    assert_eq!(inner.dtype(), DType::F32);
    assert_eq!(w.matmul(&w)?.dtype(), DType::BF16);
    Ok(())
}

#[test]
fn dtypes_autocast_does_not_support_are_errors() {
    for device in [DeviceType::Cpu, DeviceType::Cuda] {
        for dtype in [DType::F32, DType::F64, DType::I64, DType::U8] {
            let err = AutocastGuard::new(device, dtype).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                err.contains("autocast") && err.contains(dtype.name()) && err.contains(&device.to_string()),
                "{err}"
            );
            assert!(autocast(device, dtype, || ()).is_err());
        }
        assert!(!is_autocast_enabled(device));
    }
}

#[test]
fn another_thread_is_not_in_the_region() -> Result<()> {
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let w = Var::param(Tensor::randn([2, 2])?);
    let w2 = w.clone();
    let other = std::thread::spawn(move || (is_autocast_enabled(DeviceType::Cpu), w2.matmul(&w2).map(|y| y.dtype())))
        .join()
        .unwrap();
    assert_eq!((other.0, other.1?), (false, DType::F32));
    assert_eq!(w.matmul(&w)?.dtype(), DType::BF16);
    Ok(())
}

#[test]
fn restored_after_a_panic() {
    let r = std::panic::catch_unwind(|| autocast(DeviceType::Cpu, DType::BF16, || panic!("inside autocast")));
    assert!(r.is_err());
    assert!(!is_autocast_enabled(DeviceType::Cpu));
    assert_eq!(cached_copies(), 0);
}

/// The headline: an `f32` parameter in a `bf16` product gets an `f32` gradient that agrees
/// with the all-`f32` one to `bf16`'s accuracy.
#[test]
fn f32_parameters_get_f32_gradients_from_a_bf16_matmul() -> Result<()> {
    let w = Var::param(Tensor::randn([16, 8])?);
    let x = Var::new(Tensor::randn([4, 16])?);
    let target = Tensor::randn([4, 8])?;
    let loss_of =
        |y: &Var| -> Result<Var> { Ok(y.to_dtype(DType::F32).sub(&Var::new(target.clone()))?.square().sum_all()) };

    loss_of(&x.matmul(&w)?)?.backward()?;
    let exact = w.grad().unwrap();
    w.zero_grad();

    let y = autocast(DeviceType::Cpu, DType::BF16, || x.matmul(&w))??;
    assert_eq!(y.dtype(), DType::BF16);
    loss_of(&y)?.backward()?;
    let mixed = w.grad().unwrap();
    assert_eq!(mixed.dtype(), DType::F32);
    let scale = exact.abs().max_all()?.to_vec::<f32>()?[0];
    let gap = largest_gap(&exact, &mixed);
    // bf16 keeps 8 significant bits: relative steps of 2^-8 on the operands and the output.
    assert!(gap <= 0.03 * scale, "largest gap {gap} against gradients up to {scale}");
    assert!(gap > 0.0, "the bf16 product should round somewhere");
    Ok(())
}

#[test]
fn backward_inside_the_region_gives_the_same_gradients() -> Result<()> {
    let w = Var::param(Tensor::randn([8, 8])?);
    let x = Var::new(Tensor::randn([2, 8])?);
    let run = |inside: bool| -> Result<Tensor> {
        w.zero_grad();
        let y = autocast(DeviceType::Cpu, DType::BF16, || -> Result<Var> {
            let y = x.matmul(&w)?.softmax(-1)?.sum_all();
            if inside {
                y.backward()?;
            }
            Ok(y)
        })??;
        if !inside {
            y.backward()?;
        }
        Ok(w.grad().unwrap())
    };
    let (a, b) = (run(true)?, run(false)?);
    assert_eq!(a.dtype(), DType::F32);
    assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn the_weight_cache_casts_each_parameter_once_per_region() -> Result<()> {
    let w = Var::param(Tensor::randn([4, 4])?);
    let b = Var::param(Tensor::randn([4])?);
    let x = Var::new(Tensor::randn([2, 4])?.to_dtype(DType::BF16));
    let (h, casts) = casts_in(|| {
        let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16).unwrap();
        let mut h = x.clone();
        for _ in 0..5 {
            h = h.linear(&w, Some(&b)).unwrap().tanh();
        }
        assert_eq!(cached_copies(), 2);
        {
            // A nested region shares the outermost one's cache.
            let _inner = AutocastGuard::new(DeviceType::Cpu, DType::BF16).unwrap();
            h = h.linear(&w, Some(&b)).unwrap();
        }
        assert_eq!(cached_copies(), 2);
        h
    });
    // w and b once each (the profiler counts the backward's casts too: none ran yet).
    assert_eq!(casts, 2);
    assert_eq!(cached_copies(), 0, "the outermost region's end drops the copies");
    h.to_dtype(DType::F32).sum_all().backward()?;
    assert_eq!(w.grad().map(|g| g.dtype()), Some(DType::F32));

    // A new region casts again.
    let ((), casts) = casts_in(|| {
        let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16).unwrap();
        x.linear(&w, Some(&b)).unwrap();
    });
    assert_eq!(casts, 2);
    Ok(())
}

#[test]
fn an_in_place_update_refreshes_the_cached_copy() -> Result<()> {
    let w = Var::param(Tensor::ones([2, 2], DType::F32)?);
    let x = Var::new(Tensor::ones([1, 2], DType::BF16)?);
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let ((a, b), casts) = casts_in(|| {
        let a = x.matmul(&w).unwrap();
        // What an optimizer step does: a write into the parameter's storage, untracked.
        no_grad(|| w.value().mul_scalar_(3.0)).unwrap();
        let b = x.matmul(&w).unwrap();
        (a, b)
    });
    assert_eq!(casts, 2);
    assert_eq!(a.value().to_dtype(DType::F32).to_vec::<f32>()?, vec![2.0, 2.0]);
    assert_eq!(b.value().to_dtype(DType::F32).to_vec::<f32>()?, vec![6.0, 6.0]);
    // set_value replaces the value: a fresh copy too.
    w.set_value(Tensor::full([2, 2], 0.5, DType::F32)?)?;
    let c = x.matmul(&w)?;
    assert_eq!(c.value().to_dtype(DType::F32).to_vec::<f32>()?, vec![1.0, 1.0]);
    Ok(())
}

#[test]
fn a_copy_made_without_grad_is_not_reused_with_grad() -> Result<()> {
    let w = Var::param(Tensor::randn([3, 3])?);
    let x = Var::new(Tensor::randn([1, 3])?);
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let frozen = no_grad(|| x.matmul(&w))?;
    assert!(!frozen.requires_grad());
    let y = x.matmul(&w)?;
    assert!(y.requires_grad());
    y.to_dtype(DType::F32).sum_all().backward()?;
    assert_eq!(w.grad().map(|g| g.dtype()), Some(DType::F32));
    Ok(())
}

#[test]
fn f64_and_integer_inputs_are_left_alone() -> Result<()> {
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let a = Var::param(Tensor::randn([2, 2])?.to_dtype(DType::F64));
    assert_eq!(a.matmul(&a)?.dtype(), DType::F64);
    // Integer inputs (class indices) are never cast; a bf16 loss input is cast to f32.
    let logits = Var::param(Tensor::randn([2, 3])?.to_dtype(DType::BF16));
    let target = Var::new(Tensor::from_vec(vec![0i64, 2], [2])?);
    let spec = ClassLoss {
        scores: ClassScores::Logits,
        label_smoothing: 0.0,
        ignore_index: None,
        reduction: LossReduction::Mean,
    };
    let loss = logits.class_loss(&target, spec)?;
    assert_eq!((loss.dtype(), target.dtype()), (DType::F32, DType::I64));
    loss.backward()?;
    // The gradient returns through the cast in the logits' own dtype.
    assert_eq!(logits.grad().map(|g| g.dtype()), Some(DType::BF16));
    Ok(())
}

/// CPU and CUDA regions are separate and their policies differ: CUDA runs softmax and `exp`
/// in `f32`, the CPU keeps them in the input's `bf16`.
#[test]
fn device_types_have_their_own_regions_and_policies() -> Result<()> {
    let cuda = Device::Cuda(0);
    if !(Device::emulate_cuda() || cuda.is_available()) {
        return Ok(());
    }
    let on_cpu = Var::param(Tensor::randn([2, 3])?);
    let on_cuda = Var::param(Tensor::randn([2, 3])?.to_device(cuda)?);
    {
        let _cpu = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
        assert_eq!(on_cuda.matmul(&on_cuda.t()?)?.dtype(), DType::F32, "a CPU region leaves CUDA tensors alone");
        let low = on_cpu.matmul(&on_cpu.t()?)?;
        assert_eq!((low.softmax(-1)?.dtype(), low.exp().dtype()), (DType::BF16, DType::BF16));
    }
    let _gpu = AutocastGuard::new(cuda, DType::F16)?;
    assert_eq!(on_cpu.matmul(&on_cpu.t()?)?.dtype(), DType::F32, "a CUDA region leaves CPU tensors alone");
    let low = on_cuda.matmul(&on_cuda.t()?)?;
    assert_eq!(low.dtype(), DType::F16);
    assert_eq!(
        (low.softmax(-1)?.dtype(), low.exp().dtype(), low.sum_all().dtype()),
        (DType::F32, DType::F32, DType::F32)
    );
    low.softmax(-1)?.sum_all().backward()?;
    assert_eq!(on_cuda.grad().map(|g| (g.dtype(), g.device())), Some((DType::F32, cuda)));
    Ok(())
}
