//! The default bodies of the heavy `Backend` kernels (softmax, matmul, masked_fill,
//! triangle, the convolutions, unfold and fold), composed from the elementwise and reduction kernels, against the CPU
//! backend's own kernels: `Composed` delegates every kernel without a default to the CPU
//! backend and keeps the defaults for the rest.

use ember_tensor::backend::cpu::CpuBackend;
use ember_tensor::backend::{Backend, Delegate};
use ember_tensor::layout::Layout;
use ember_tensor::storage::Storage;
use ember_tensor::{DType, Result, Scalar, Tensor};

/// The CPU backend without its heavy kernels: every method without a default body is the
/// CPU backend's, every other one the trait's default.
struct Composed;

impl Delegate for Composed {
    type Inner = CpuBackend;
    fn inner(&self) -> &CpuBackend {
        &CpuBackend
    }
}

ember_tensor::delegate_backend!(required for Composed);

/// The elements of a result (contiguous) as `f64`, with its dtype.
fn values(s: &Storage) -> (DType, Vec<f64>) {
    let cpu = s.as_cpu().expect("a CPU storage");
    let v = match cpu.dtype() {
        DType::F64 => cpu.as_slice::<f64>().unwrap().to_vec(),
        DType::F32 => cpu.as_slice::<f32>().unwrap().iter().map(|&v| v as f64).collect(),
        DType::I64 => cpu.as_slice::<i64>().unwrap().iter().map(|&v| v as f64).collect(),
        DType::U8 => cpu.as_slice::<u8>().unwrap().iter().map(|&v| v as f64).collect(),
        DType::F16 => cpu.as_slice::<ember_tensor::f16>().unwrap().iter().map(|v| v.to_f64()).collect(),
        DType::BF16 => cpu.as_slice::<ember_tensor::bf16>().unwrap().iter().map(|v| v.to_f64()).collect(),
    };
    (cpu.dtype(), v)
}

/// The default and the CPU kernel agree: same dtype and length, values within `tol` of
/// `scale` (bit for bit with `tol` 0, NaN matching NaN).
#[track_caller]
fn agree(what: &str, composed: Result<Storage>, cpu: Result<Storage>, tol: f64) {
    let (composed, cpu) = (composed.unwrap(), cpu.unwrap());
    let ((dc, vc), (dk, vk)) = (values(&composed), values(&cpu));
    assert_eq!(dc, dk, "{what}: dtype");
    assert_eq!(vc.len(), vk.len(), "{what}: length");
    for (i, (c, k)) in vc.iter().zip(&vk).enumerate() {
        let ok = if tol == 0.0 {
            c.to_bits() == k.to_bits() || (c.is_nan() && k.is_nan())
        } else {
            (c - k).abs() <= tol * k.abs().max(1.0) || (c.is_nan() && k.is_nan())
        };
        assert!(ok, "{what}: element {i} is {c}, the CPU kernel gives {k}");
    }
}

/// Values in [-4, 4) from a fixed sequence.
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
        })
        .collect()
}

/// `vals` of `shape` as a contiguous tensor, a transposed copy read back through a
/// transpose, and a narrowed view into a wider buffer.
fn layouts(vals: Vec<f64>, shape: &[usize]) -> Vec<(&'static str, Tensor)> {
    let t = Tensor::from_vec(vals, shape).unwrap();
    let mut out = vec![("contiguous", t.clone())];
    if shape.len() >= 2 {
        out.push(("transposed", t.transpose(-1, -2).unwrap().contiguous().transpose(-1, -2).unwrap()));
        let n = shape[shape.len() - 1];
        out.push(("narrowed", t.pad(&[(1, 2)], f64::NAN).unwrap().narrow(-1, 1, n).unwrap()));
    }
    out
}

#[test]
fn softmax_default_matches_the_cpu_kernel() {
    for shape in [vec![5, 7], vec![3, 4, 6], vec![9], vec![4, 0]] {
        let n = shape.iter().product();
        for (layout, t) in layouts(data(n, 1), &shape) {
            for dtype in [DType::F64, DType::F32] {
                let t = if dtype == DType::F64 { t.clone() } else { t.to_dtype(dtype) };
                let g = t.storage().read();
                let view = (&*g, t.layout());
                let tol = if dtype == DType::F64 { 1e-14 } else { 1e-6 };
                for dim in 0..shape.len() {
                    for log in [false, true] {
                        let what = format!("softmax(log {log}) of {layout} {dtype} {shape:?} along {dim}");
                        agree(&what, Composed.softmax(view, dim, log), CpuBackend.softmax(view, dim, log), tol);
                    }
                }
                assert!(Composed.softmax(view, shape.len(), false).is_err());
            }
        }
    }
}

#[test]
fn matmul_default_matches_the_cpu_kernel() {
    let cases: [(&[usize], &[usize]); 4] =
        [(&[3, 4], &[4, 5]), (&[2, 3, 4], &[2, 4, 2]), (&[1, 6], &[6, 1]), (&[2, 0, 3], &[2, 3, 4])];
    for (sa, sb) in cases {
        let (na, nb) = (sa.iter().product(), sb.iter().product());
        for (la, a) in layouts(data(na, 2), sa) {
            for (lb, b) in layouts(data(nb, 3), sb) {
                for dtype in [DType::F64, DType::F32] {
                    let (a, b) = (a.to_dtype(dtype), b.to_dtype(dtype));
                    let (ga, gb) = (a.storage().read(), b.storage().read());
                    let (va, vb) = ((&*ga, a.layout()), (&*gb, b.layout()));
                    // The terms are below 16 in magnitude, at most 6 of them.
                    let tol = if dtype == DType::F64 { 1e-13 * 100.0 } else { 1e-5 * 100.0 };
                    let what = format!("{la} {sa:?} @ {lb} {sb:?} in {dtype}");
                    agree(&what, Composed.matmul(va, vb), CpuBackend.matmul(va, vb), tol);
                }
            }
        }
    }
    let a = Tensor::from_vec(data(6, 4), [2, 3]).unwrap();
    let g = a.storage().read();
    assert!(Composed.matmul((&*g, a.layout()), (&*g, a.layout())).is_err(), "[2, 3] @ [2, 3]");
    let v = a.flatten_all();
    assert!(Composed.matmul((&*g, v.layout()), (&*g, v.layout())).is_err(), "1-d operands");
}

#[test]
fn masked_fill_default_matches_the_cpu_kernel() {
    let shape = [4, 6];
    let mask = Tensor::from_vec(data(24, 5).iter().map(|&v| (v > 0.0) as u8).collect::<Vec<_>>(), shape).unwrap();
    let row_mask = Tensor::from_vec(vec![1u8, 0, 0, 1, 1, 0], [1, 6]).unwrap().expand(shape).unwrap();
    for (layout, t) in layouts(data(24, 6), &shape) {
        for dtype in [DType::F64, DType::F32, DType::I64, DType::U8] {
            let t = t.to_dtype(dtype);
            let g = t.storage().read();
            let view = (&*g, t.layout());
            for m in [&mask, &row_mask] {
                let gm = m.storage().read();
                let vm = (&*gm, m.layout());
                for value in [Scalar::Float(-2.5), Scalar::Int(7), Scalar::Float(f64::NAN)] {
                    let what = format!("masked_fill({value:?}) of {layout} {dtype}");
                    agree(&what, Composed.masked_fill(view, vm, value), CpuBackend.masked_fill(view, vm, value), 0.0);
                }
            }
        }
    }
}

#[test]
fn triangle_default_matches_the_cpu_kernel() {
    for shape in [vec![4, 6], vec![2, 5, 3], vec![3, 0]] {
        let n = shape.iter().product();
        for (layout, t) in layouts(data(n, 7), &shape) {
            for dtype in [DType::F64, DType::I64] {
                let t = t.to_dtype(dtype);
                let g = t.storage().read();
                let view = (&*g, t.layout());
                for diagonal in [-7, -1, 0, 2, 9] {
                    for upper in [false, true] {
                        let what = format!("triangle({diagonal}, upper {upper}) of {layout} {dtype} {shape:?}");
                        let (composed, cpu) =
                            (Composed.triangle(view, diagonal, upper), CpuBackend.triangle(view, diagonal, upper));
                        agree(&what, composed, cpu, 0.0);
                    }
                }
            }
        }
    }
    let v = Tensor::from_vec(data(3, 8), [3]).unwrap();
    let g = v.storage().read();
    assert!(Composed.triangle((&*g, v.layout()), 0, false).is_err());
}

#[test]
fn class_loss_default_matches_the_cpu_kernel() {
    use ember_tensor::{ClassLoss, ClassScores, LossReduction};
    // Shapes with their targets (one per row, -100 ignored).
    let cases: [(&[usize], &[i64]); 5] = [
        (&[5, 7], &[0, 6, -100, 3, 2]),
        (&[3, 4, 2], &[1, -100, 3, 0, 2, 2]),
        (&[9], &[4]),
        (&[4, 0], &[-100, -100, -100, -100]),
        (&[0, 3], &[]),
    ];
    for (shape, targets) in cases {
        let n = shape.iter().product();
        let class_dim = usize::from(shape.len() > 1);
        let target_shape: Vec<usize> = (0..shape.len()).filter(|&d| d != class_dim).map(|d| shape[d]).collect();
        let target = Tensor::from_vec(targets.to_vec(), target_shape.as_slice()).unwrap();
        for (layout, t) in layouts(data(n, 4), shape) {
            for dtype in [DType::F64, DType::F32] {
                let t = if dtype == DType::F64 { t.clone() } else { t.to_dtype(dtype) };
                let tol = if dtype == DType::F64 { 1e-13 } else { 1e-5 };
                for scores in [ClassScores::Logits, ClassScores::LogProbs] {
                    for label_smoothing in [0.0, 0.25] {
                        for reduction in [LossReduction::None, LossReduction::Sum, LossReduction::Mean] {
                            let loss = ClassLoss { scores, label_smoothing, ignore_index: Some(-100), reduction };
                            let what = format!("{loss:?} of {layout} {dtype} {shape:?}");
                            let grad = match reduction {
                                LossReduction::None => {
                                    Tensor::from_vec(data(targets.len(), 5), target_shape.as_slice()).unwrap()
                                }
                                _ => Tensor::scalar(0.5f64),
                            }
                            .to_dtype(dtype);
                            let (gs, gt, gg) = (t.storage().read(), target.storage().read(), grad.storage().read());
                            let (vs, vt, vg) = ((&*gs, t.layout()), (&*gt, target.layout()), (&*gg, grad.layout()));
                            agree(&what, Composed.class_loss(vs, vt, &loss), CpuBackend.class_loss(vs, vt, &loss), tol);
                            agree(
                                &format!("backward of {what}"),
                                Composed.class_loss_backward(vs, vt, vg, &loss),
                                CpuBackend.class_loss_backward(vs, vt, vg, &loss),
                                tol,
                            );
                        }
                    }
                }
            }
        }
    }
    // Both refuse a target out of range, naming it.
    let scores = Tensor::from_vec(data(6, 6), [2, 3]).unwrap();
    let target = Tensor::from_vec(vec![0i64, 3], [2]).unwrap();
    let loss = ClassLoss {
        scores: ClassScores::Logits,
        label_smoothing: 0.0,
        ignore_index: None,
        reduction: LossReduction::Mean,
    };
    let (gs, gt) = (scores.storage().read(), target.storage().read());
    for e in [
        Composed.class_loss((&*gs, scores.layout()), (&*gt, target.layout()), &loss).unwrap_err(),
        CpuBackend.class_loss((&*gs, scores.layout()), (&*gt, target.layout()), &loss).unwrap_err(),
    ] {
        assert!(e.to_string().contains("target 3 (element 1) is out of range for 3 classes"), "{e}");
    }
}

#[test]
fn conv_defaults_match_the_cpu_kernels() {
    use ember_tensor::UnfoldArgs;
    use ember_tensor::ops::conv::{ConvArgs, conv_plan, unfold_plan};
    // (input, weight, args): strided, padded, dilated, grouped, depthwise, 1x1, empty batch.
    let cases: [(&[usize], &[usize], ConvArgs<2>); 5] = [
        (&[2, 3, 7, 6], &[4, 3, 3, 2], ConvArgs::default().stride([2, 1]).padding([1, 2])),
        (&[1, 4, 9, 8], &[6, 2, 3, 3], ConvArgs::default().dilation(2).padding(2).groups(2)),
        (&[2, 4, 6, 6], &[4, 1, 3, 3], ConvArgs::default().padding(1).groups(4)),
        (&[2, 3, 5, 4], &[5, 3, 1, 1], ConvArgs::default()),
        (&[0, 3, 5, 4], &[2, 3, 3, 3], ConvArgs::default()),
    ];
    for (k, (xs, ws, args)) in cases.into_iter().enumerate() {
        let g = conv_plan("conv2d", xs, ws, None, &args).unwrap().geometry;
        let n = xs[0];
        let seed = 20 + 5 * k as u64;
        let x = Tensor::from_vec(data(xs.iter().product(), seed), xs).unwrap();
        let w = Tensor::from_vec(data(ws.iter().product(), seed + 1), ws).unwrap();
        let out = g.output_shape(n);
        let gy = Tensor::from_vec(data(out.numel(), seed + 2), out.clone()).unwrap();
        let b = Tensor::from_vec(data(ws[0], seed + 3), [ws[0]]).unwrap();
        let bt = Tensor::from_vec(data(xs[1], seed + 4), [xs[1]]).unwrap();
        for ((lx, x), (lw, w)) in layouts(x.to_vec().unwrap(), xs).into_iter().zip(layouts(w.to_vec().unwrap(), ws)) {
            for dtype in [DType::F64, DType::F32] {
                let (x, w, gy, b, bt) =
                    (x.to_dtype(dtype), w.to_dtype(dtype), gy.to_dtype(dtype), b.to_dtype(dtype), bt.to_dtype(dtype));
                let (gx, gw, gg, gb, gt) = (
                    x.storage().read(),
                    w.storage().read(),
                    gy.storage().read(),
                    b.storage().read(),
                    bt.storage().read(),
                );
                let (vx, vw, vg) = ((&*gx, x.layout()), (&*gw, w.layout()), (&*gg, gy.layout()));
                let (vb, vt) = ((&*gb, b.layout()), (&*gt, bt.layout()));
                // Terms below 16 in magnitude, at most 54 of them.
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
                let what = |op: &str| format!("{op} of {lx} {xs:?} by {lw} {ws:?} in {dtype}");
                agree(
                    &what("conv2d"),
                    Composed.conv2d(vx, vw, Some(vb), &g),
                    CpuBackend.conv2d(vx, vw, Some(vb), &g),
                    tol,
                );
                agree(
                    &what("conv2d without bias"),
                    Composed.conv2d(vx, vw, None, &g),
                    CpuBackend.conv2d(vx, vw, None, &g),
                    tol,
                );
                let (c, k) = (
                    Composed.conv_transpose2d(vg, vw, Some(vt), &g),
                    CpuBackend.conv_transpose2d(vg, vw, Some(vt), &g),
                );
                agree(&what("conv_transpose2d"), c, k, tol);
                let (c, k) = (Composed.conv2d_weight_grad(vx, vg, &g), CpuBackend.conv2d_weight_grad(vx, vg, &g));
                agree(&what("conv2d_weight_grad"), c, k, tol);
                let plan =
                    unfold_plan(xs, &UnfoldArgs::new([2, 3]).padding(1).stride([1, 2]).dilation([2, 1])).unwrap();
                let cols = Composed.unfold(vx, &plan.window);
                agree(&what("unfold"), Composed.unfold(vx, &plan.window), CpuBackend.unfold(vx, &plan.window), 0.0);
                let cols = cols.unwrap();
                let lc = Layout::contiguous(plan.output.clone());
                let (c, k) = (Composed.fold((&cols, &lc), &plan.window), CpuBackend.fold((&cols, &lc), &plan.window));
                agree(&what("fold"), c, k, tol);
                // A view that does not fit the geometry is an error in both.
                assert!(Composed.conv2d(vg, vw, None, &g).is_err() || g.output_shape(n) == g.input_shape(n));
                assert!(CpuBackend.conv2d(vg, vw, None, &g).is_err() || g.output_shape(n) == g.input_shape(n));
            }
        }
    }
}
