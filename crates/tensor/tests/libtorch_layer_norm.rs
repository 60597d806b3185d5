//! Layer normalisation on LibTorch (`native_layer_norm` and its backward's formula over the
//! saved statistics): the gradients against central differences of the forward in `f64`,
//! and the operand mixes the random programs of `libtorch_differential.rs` do not draw (an
//! `f32` weight beside a 16-bit input, strided inputs, no rows, mismatched operands) against
//! the CPU backend.
//!
//! Needs the `libtorch` feature: `cargo test -p ember-tensor --features libtorch --test
//! libtorch_layer_norm` (see tools/libtorch/setup.sh).

#![cfg(feature = "libtorch")]

use ember_tensor::backend::cpu::CpuBackend;
use ember_tensor::backend::{Backend, backend_for};
use ember_tensor::layout::Layout;
use ember_tensor::storage::{Buffer, CpuStorage, Storage};
use ember_tensor::{DType, Device, Result, Shape, bf16, f16};
use ember_testing::cuda::uniform;

/// Host values in `dtype` (rounded once from `f64`).
fn host(dtype: DType, v: &[f64]) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F16 => Buffer::from_fn("test", v.len(), |i| f16::from_f64(v[i]))?.into(),
        DType::BF16 => Buffer::from_fn("test", v.len(), |i| bf16::from_f64(v[i]))?.into(),
        DType::F32 => Buffer::from_fn("test", v.len(), |i| v[i] as f32)?.into(),
        _ => Buffer::from_fn("test", v.len(), |i| v[i])?.into(),
    })
}

/// Values from `seed` in `dtype`, uploaded to `b`, contiguous of `shape`.
fn operand(b: &dyn Backend, seed: u64, shape: &[usize], dtype: DType) -> Result<(Storage, Layout)> {
    let n = shape.iter().product();
    Ok((b.upload(host(dtype, &uniform(seed, n))?)?, Layout::contiguous(Shape::from(shape))))
}

/// An optional operand as a view.
fn view(o: &Option<(Storage, Layout)>) -> Option<(&Storage, &Layout)> {
    o.as_ref().map(|(s, l)| (s, l))
}

/// A storage's elements as `f64`.
fn values(b: &dyn Backend, s: &Storage) -> Result<Vec<f64>> {
    let l = Layout::contiguous(Shape::from([s.len()]));
    Ok(match b.download((s, &l))? {
        CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::F32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::F64(v) => v.to_vec(),
        CpuStorage::U8(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I64(v) => v.iter().map(|&x| x as f64).collect(),
    })
}

/// `sum(g * layer_norm(x, w, b))` in `f64` on `dev`, from host values.
fn objective(dev: &dyn Backend, x: &[f64], w: &[f64], bias: &[f64], g: &[f64], n: usize) -> Result<f64> {
    let rows = x.len() / n;
    let up = |v: &[f64], shape: &[usize]| -> Result<(Storage, Layout)> {
        Ok((dev.upload(host(DType::F64, v)?)?, Layout::contiguous(Shape::from(shape))))
    };
    let (xs, ws, bs) = (up(x, &[rows, n])?, up(w, &[n])?, up(bias, &[n])?);
    let [y, _, _] = dev.layer_norm((&xs.0, &xs.1), n, Some((&ws.0, &ws.1)), Some((&bs.0, &bs.1)), 1e-5)?;
    Ok(values(dev, &y)?.iter().zip(g).map(|(a, b)| a * b).sum())
}

#[test]
fn gradients_match_central_differences() -> Result<()> {
    let torch = backend_for(Device::TorchCpu)?;
    let (rows, n) = (3, 5);
    let x = uniform(1, rows * n);
    let w = uniform(2, n);
    let bias = uniform(3, n);
    let g = uniform(4, rows * n);
    let up = |v: &[f64], shape: &[usize]| -> Result<(Storage, Layout)> {
        Ok((torch.upload(host(DType::F64, v)?)?, Layout::contiguous(Shape::from(shape))))
    };
    let (xs, ws, bs, gs) = (up(&x, &[rows, n])?, up(&w, &[n])?, up(&bias, &[n])?, up(&g, &[rows, n])?);
    let [_, mean, rstd] = torch.layer_norm((&xs.0, &xs.1), n, Some((&ws.0, &ws.1)), Some((&bs.0, &bs.1)), 1e-5)?;
    let stats = Layout::contiguous(Shape::from([rows]));
    let [gx, gw, gb] = torch.layer_norm_backward(
        (&xs.0, &xs.1),
        (&gs.0, &gs.1),
        n,
        (&mean, &stats),
        (&rstd, &stats),
        Some((&ws.0, &ws.1)),
    )?;
    let analytic = [values(torch, &gx)?, values(torch, &gw)?, values(torch, &gb)?];
    let h = 1e-6;
    for (which, base) in [&x, &w, &bias].into_iter().enumerate() {
        for i in 0..base.len() {
            let at = |delta: f64| -> Result<f64> {
                let mut ops = [x.clone(), w.clone(), bias.clone()];
                ops[which][i] += delta;
                objective(torch, &ops[0], &ops[1], &ops[2], &g, n)
            };
            let numeric = (at(h)? - at(-h)?) / (2.0 * h);
            let got = analytic[which][i];
            assert!(
                (numeric - got).abs() <= 1e-6 * (1.0 + numeric.abs()),
                "operand {which} element {i}: layer_norm_backward {got}, central difference {numeric}"
            );
        }
    }
    Ok(())
}

/// Every result of the forward and the backward on LibTorch against the CPU backend's, for
/// an input of `dtype` read through `layout` over `len` elements, with a weight and a bias
/// of `param` (or none).
fn agree(dtype: DType, param: Option<DType>, shape: &[usize], layout: Option<Layout>, n: usize) -> Result<()> {
    let torch = backend_for(Device::TorchCpu)?;
    let len = shape.iter().product::<usize>().max(layout.as_ref().map_or(0, |l| l.offset() + l.numel() * 2));
    let mut results = Vec::new();
    for b in [&CpuBackend as &dyn Backend, torch] {
        let (xs, _) = operand(b, 10, &[len], dtype)?;
        let xl = layout.clone().unwrap_or_else(|| Layout::contiguous(Shape::from(shape)));
        let rows = xl.numel() / n;
        let (gs, gl) = operand(b, 11, xl.shape().dims(), dtype)?;
        let w = param.map(|d| operand(b, 12, &[n], d)).transpose()?;
        let bias = param.map(|d| operand(b, 13, &[n], d)).transpose()?;
        let [y, mean, rstd] = b.layer_norm((&xs, &xl), n, view(&w), view(&bias), 1e-5)?;
        let stats = Layout::contiguous(Shape::from([rows]));
        let back = b.layer_norm_backward((&xs, &xl), (&gs, &gl), n, (&mean, &stats), (&rstd, &stats), view(&w))?;
        let mut all = vec![];
        for s in [y, mean, rstd].iter().chain(back.iter()) {
            all.push((s.dtype(), values(b, s)?));
        }
        results.push(all);
    }
    let tol = match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        _ => 2e-2,
    };
    for (k, ((dc, c), (dt, t))) in results[0].iter().zip(&results[1]).enumerate() {
        assert_eq!(dc, dt, "{dtype} result {k}: dtype {dc} on the CPU, {dt} on LibTorch");
        assert_eq!(c.len(), t.len(), "{dtype} result {k}: length");
        for (i, (a, b)) in c.iter().zip(t).enumerate() {
            assert!((a - b).abs() <= tol * (1.0 + a.abs()), "{dtype} result {k} element {i}: CPU {a}, LibTorch {b}");
        }
    }
    Ok(())
}

#[test]
fn agrees_with_the_cpu_backend() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::BF16, DType::F16] {
        agree(dtype, None, &[4, 6], None, 6)?;
        agree(dtype, Some(dtype), &[2, 3, 8], None, 8)?;
        // A row spans two dimensions; no rows at all.
        agree(dtype, Some(dtype), &[3, 2, 4], None, 8)?;
        agree(dtype, Some(dtype), &[0, 5], None, 5)?;
        // A transposed view of a [6, 4] buffer, read as rows of its last dimension.
        let transposed = Layout::new(Shape::from([4, 6]), [1usize, 4].into_iter().collect(), 0)?;
        agree(dtype, Some(dtype), &[4, 6], Some(transposed), 6)?;
    }
    // 16-bit inputs beside f32 parameters, as autocast gives them.
    agree(DType::BF16, Some(DType::F32), &[5, 7], None, 7)?;
    agree(DType::F16, Some(DType::F32), &[5, 7], None, 7)?;
    Ok(())
}

#[test]
fn rejects_what_the_cpu_backend_rejects() -> Result<()> {
    let torch = backend_for(Device::TorchCpu)?;
    for b in [&CpuBackend as &dyn Backend, torch] {
        let (x, xl) = operand(b, 20, &[3, 4], DType::F32)?;
        let (w64, wl) = operand(b, 21, &[4], DType::F64)?;
        let (w5, w5l) = operand(b, 22, &[5], DType::F32)?;
        let name = b.device();
        let err = b.layer_norm((&x, &xl), 4, Some((&w64, &wl)), None, 1e-5).err();
        assert!(err.is_some_and(|e| e.to_string().contains("f64")), "{name}: an f64 weight beside f32 input");
        let err = b.layer_norm((&x, &xl), 4, Some((&w5, &w5l)), None, 1e-5).err();
        assert!(err.is_some_and(|e| e.to_string().contains("4 elements")), "{name}: a weight of 5 for rows of 4");
        let err = b.layer_norm((&x, &xl), 5, None, None, 1e-5).err();
        assert!(err.is_some_and(|e| e.to_string().contains("rows of 5")), "{name}: 12 elements as rows of 5");
    }
    Ok(())
}
