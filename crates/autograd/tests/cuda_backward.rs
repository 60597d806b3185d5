//! Gradients computed on `Device::Cuda(0)` against the same gradients on the CPU: first
//! order for each family of differentiable `Var` ops, second order through an MLP, a
//! convolution and softmax / cross-entropy, and `gradcheck` run on the device.
//!
//! Each case builds its inputs from fixed seeds on the device under test, computes an
//! output, weights it with a fixed tensor (so that each output element sends a different
//! gradient back) and sums it, runs backward and returns the output and every input's
//! gradient. The CPU's and the device's lists must agree in dtype, shape and device, and in
//! value within `mod tol`. An op that fails on the CPU must fail on the device too. Each test
//! gathers all its mismatches and fails once, listing them. Without a device each test
//! prints one line saying why and returns.

use ember_autograd::{Var, grad, gradcheck};
use ember_tensor::{
    Attention, AvgPoolArgs, ClassLoss, ClassScores, ConvArgs, ConvTransposeArgs, DType, Device, InterpolateArgs,
    InterpolateMode, LossReduction, MaxPoolArgs, Padding, Result, Tensor, UnfoldArgs,
};
use ember_testing::cuda::{CPU, Parity, device, ints, uniform};
use ember_testing::elementwise::{BINARY, Grad, UNARY};
use ember_testing::require_cuda;

const FLOATS: [DType; 2] = [DType::F32, DType::F64];

/// How close the device's values and gradients must be to the CPU's, per kind of op:
/// `(abs, rel)` for `f32` and for `f64` results (integers exactly); NaN must meet NaN.
mod tol {
    use ember_testing::cuda::Tol;

    /// Elementwise ops and data movement: the backward of an elementwise function is itself
    /// elementwise, so it differs by the few ulps of the device's libm, plus the weighted
    /// sum that seeds the backward (added in another order on the device).
    pub const ELEMENTWISE: Tol = Tol::new((1e-5, 1e-5), (1e-12, 1e-11));
    /// Reductions, softmax, normalisation, pooling averages and losses: summation order.
    pub const REDUCTION: Tol = Tol::new((1e-4, 1e-4), (1e-11, 1e-10));
    /// Matrix products, convolutions, attention, and anything differentiated twice: the
    /// backward runs further products whose blocking differs between cuBLAS and the CPU.
    pub const MATMUL: Tol = Tol::new((2e-3, 5e-4), (1e-10, 1e-10));
}

/// Float values uniform in `[-2.5, 2.5)` from `seed`, mapped through `domain`, on `dev`.
fn data(seed: u64, shape: &[usize], dtype: DType, domain: fn(f64) -> f64, dev: Device) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = uniform(seed, n).into_iter().map(domain).collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).to_device(dev).unwrap()
}

fn any(v: f64) -> f64 {
    v
}

/// A differentiable float input on `dev`.
fn param(seed: u64, shape: &[usize], dtype: DType, dev: Device) -> Var {
    Var::param(data(seed, shape, dtype, any, dev))
}

/// Backward of `sum(out * w)` for a fixed `w`: the output's value followed by each
/// input's gradient (an empty `u8` tensor for an input without one).
fn backward(out: &Var, inputs: &[&Var], dev: Device) -> Result<Vec<Tensor>> {
    let w = data(999, out.shape().dims(), out.dtype(), any, dev);
    let loss = out.mul(&Var::new(w))?.sum_all();
    loss.backward()?;
    let mut v = vec![out.value()];
    for x in inputs {
        v.push(match x.grad() {
            Some(g) => g,
            None => Tensor::zeros([0], DType::U8)?.to_device(dev)?,
        });
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// First order
// ---------------------------------------------------------------------------------------

#[test]
fn elementwise_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("elementwise_gradients");
    for case in UNARY {
        let domain = match case.grad {
            Grad::No => continue,
            Grad::First(d) | Grad::Second(d) | Grad::Zero(d) => d,
        };
        for dt in FLOATS {
            for shape in [&[][..], &[0], &[4, 3, 5]] {
                p.check(format!("{} backward {shape:?} {dt}", case.name), tol::ELEMENTWISE, |d| {
                    // Inputs from the case's domain, read through a transpose when they can be.
                    let t = data(1, shape, dt, domain, d);
                    let x = Var::param(t);
                    let input = if shape.len() >= 2 { x.transpose(0, 1)?.transpose(0, 1)? } else { x.clone() };
                    backward(&(case.var)(&input), &[&x], d)
                });
            }
        }
    }
    for case in BINARY {
        for dt in FLOATS {
            for (sa, sb) in
                [(&[3, 4][..], &[3, 4][..]), (&[3, 1], &[1, 4]), (&[2, 3, 4], &[4]), (&[], &[3]), (&[0, 3], &[1, 3])]
            {
                p.check(format!("{} backward {sa:?} with {sb:?} {dt}", case.name), tol::ELEMENTWISE, |d| {
                    // Positive, well separated operands keep pow and the extrema differentiable.
                    let a = Var::param(data(2, sa, dt, |v| v.abs() + 0.5, d));
                    let b = Var::param(data(3, sb, dt, |v| (v * 0.3).abs() + 1.7, d));
                    backward(&(case.var)(&a, &b)?, &[&a, &b], d)
                });
            }
        }
    }
    p.finish();
}

#[test]
fn reduction_and_softmax_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("reduction_and_softmax_gradients");
    type Red = (&'static str, fn(&Var, &[i64], bool) -> Result<Var>);
    let ops: &[Red] = &[
        ("sum", |x, d, k| x.sum(d, k)),
        ("mean", |x, d, k| x.mean(d, k)),
        ("prod", |x, d, k| x.prod(d, k)),
        ("max", |x, d, k| x.max(d, k)),
        ("min", |x, d, k| x.min(d, k)),
        ("var", |x, d, k| x.var(d, true, k)),
        ("std", |x, d, k| x.std(d, false, k)),
        ("logsumexp", |x, d, k| x.logsumexp(d, k)),
    ];
    for (name, f) in ops {
        for dt in FLOATS {
            for dims in [&[0i64][..], &[-1], &[0, 2]] {
                for keep in [false, true] {
                    p.check(format!("{name}({dims:?}, keepdim {keep}) backward [4, 3, 5] {dt}"), tol::REDUCTION, |d| {
                        let x = param(10, &[4, 3, 5], dt, d);
                        backward(&f(&x, dims, keep)?, &[&x], d)
                    });
                }
            }
        }
    }
    type All = (&'static str, fn(&Var) -> Result<Var>);
    let alls: &[All] = &[
        ("sum_all", |x| Ok(x.sum_all())),
        ("mean_all", |x| Ok(x.mean_all())),
        ("prod_all", |x| Ok(x.prod_all())),
        ("max_all", |x| x.max_all()),
        ("min_all", |x| x.min_all()),
        ("var_all", |x| Ok(x.var_all(true))),
        ("std_all", |x| Ok(x.std_all(false))),
    ];
    for (name, f) in alls {
        for dt in FLOATS {
            p.check(format!("{name} backward [4, 3, 5] {dt}"), tol::REDUCTION, |d| {
                let x = param(11, &[4, 3, 5], dt, d);
                backward(&f(&x)?, &[&x], d)
            });
        }
    }
    for dt in FLOATS {
        for dim in [0i64, 1, -1] {
            p.check(format!("softmax/log_softmax({dim}) backward [4, 3, 5] {dt}"), tol::REDUCTION, |d| {
                let x = param(12, &[4, 3, 5], dt, d);
                let y = x.softmax(dim)?.add(&x.log_softmax(dim)?)?;
                backward(&y, &[&x], d)
            });
        }
    }
    p.finish();
}

#[test]
fn linear_algebra_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("linear_algebra_gradients");
    let pairs: &[(&[usize], &[usize])] = &[
        (&[5, 7], &[7, 3]),
        (&[7], &[7, 4]),
        (&[3, 7], &[7]),
        (&[7], &[7]),
        (&[2, 5, 7], &[2, 7, 3]),
        (&[2, 1, 5, 7], &[3, 7, 4]),
        (&[0, 7], &[7, 3]),
        (&[64, 150], &[150, 80]),
    ];
    for &(sa, sb) in pairs {
        for dt in FLOATS {
            p.check(format!("matmul backward {sa:?} @ {sb:?} {dt}"), tol::MATMUL, |d| {
                let a = param(20, sa, dt, d);
                let b = param(21, sb, dt, d);
                backward(&a.matmul(&b)?, &[&a, &b], d)
            });
        }
    }
    for dt in FLOATS {
        for bias in [false, true] {
            p.check(format!("linear backward bias {bias} {dt}"), tol::MATMUL, |d| {
                let x = param(22, &[2, 6, 10], dt, d);
                let w = param(23, &[4, 10], dt, d);
                let b = param(24, &[4], dt, d);
                backward(&x.linear(&w, bias.then_some(&b))?, &[&x, &w, &b], d)
            });
        }
    }
    p.finish();
}

#[test]
fn indexing_and_view_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("indexing_and_view_gradients");
    for dt in FLOATS {
        p.check(format!("index_select/gather/scatter_add backward {dt}"), tol::REDUCTION, |d| {
            let x = param(30, &[5, 4], dt, d);
            let src = param(31, &[2, 4], dt, d);
            // Repeated indices: their gradients add up (atomics on a device).
            let a = x.index_select(0, ints(&[4, 0, 4, 1], &[4], d)?)?;
            let b = x.gather(1, ints(&[0, 3, 3, 1, 2, 2, 0, 0, 1, 3], &[5, 2], d)?)?;
            let c = x.scatter_add(0, ints(&[1, 1, 3, 0, 4, 4, 4, 2], &[2, 4], d)?, &src)?;
            let y = Var::cat(&[&a.flatten_all(), &b.flatten_all(), &c.flatten_all()], 0)?;
            backward(&y, &[&x, &src], d)
        });
        p.check(format!("masked_fill/where_cond backward {dt}"), tol::ELEMENTWISE, |d| {
            let x = param(32, &[3, 4], dt, d);
            let z = param(33, &[4], dt, d);
            let mask = data(34, &[3, 4], DType::F32, any, d).gt_scalar(0.0);
            let y = x.masked_fill(&mask, 2.0)?.add(&Var::new(mask.clone()).where_cond(&x, &z.expand([3, 4])?)?)?;
            backward(&y, &[&x, &z], d)
        });
        p.check(format!("cat/stack/pad/repeat/tril/triu backward {dt}"), tol::ELEMENTWISE, |d| {
            let x = param(35, &[3, 4], dt, d);
            let z = param(36, &[3, 4], dt, d);
            let parts = [
                Var::cat(&[&x, &z], 1)?.flatten_all(),
                Var::stack(&[&x, &z], 0)?.flatten_all(),
                x.pad(&[(1, 0), (2, 1)], 0.5)?.flatten_all(),
                z.repeat(&[2, 1, 3])?.flatten_all(),
                x.tril(0)?.flatten_all(),
                z.triu(1)?.flatten_all(),
            ];
            let refs: Vec<&Var> = parts.iter().collect();
            backward(&Var::cat(&refs, 0)?, &[&x, &z], d)
        });
        p.check(format!("view ops backward {dt}"), tol::ELEMENTWISE, |d| {
            let x = param(37, &[2, 3, 4], dt, d);
            let parts = [
                x.reshape([6, 4])?.t()?.flatten_all(),
                x.permute(&[2, 0, 1])?.contiguous().flatten_all(),
                x.narrow(2, 1, 2)?.flatten_all(),
                x.slice(1, 0, 3, 2)?.flatten_all(),
                x.select(0, 1)?.flatten_all(),
                x.select(2, 0)?.unsqueeze(0)?.expand([3, 2, 3])?.flatten_all(),
                x.split(2, 2)?[1].squeeze_all().flatten_all(),
                x.chunk(3, 1)?[2].flatten(0, 1)?.flatten_all(),
            ];
            let refs: Vec<&Var> = parts.iter().collect();
            backward(&Var::cat(&refs, 0)?, &[&x], d)
        });
    }
    p.finish();
}

#[test]
fn convolution_and_pooling_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("convolution_and_pooling_gradients");
    let convs: &[(&str, [usize; 4], [usize; 4], ConvArgs<2>)] = &[
        ("3x3", [2, 3, 9, 8], [4, 3, 3, 3], ConvArgs::default()),
        (
            "pad 1 stride 2",
            [2, 3, 9, 8],
            [4, 3, 3, 3],
            ConvArgs::default().padding(Padding::Explicit([1, 1])).stride(2),
        ),
        ("dilated groups 2", [2, 4, 10, 10], [6, 2, 3, 2], ConvArgs::default().dilation([2, 1]).groups(2)),
        ("mnist cnn layer", [4, 16, 14, 14], [32, 16, 5, 5], ConvArgs::default().padding(Padding::Explicit([2, 2]))),
    ];
    for (name, xs, ws, args) in convs {
        for dt in FLOATS {
            p.check(format!("conv2d backward {name} {dt}"), tol::MATMUL, |d| {
                let x = param(40, xs, dt, d);
                let w = param(41, ws, dt, d);
                let b = param(42, &[ws[0]], dt, d);
                backward(&x.conv2d(&w, Some(&b), args)?, &[&x, &w, &b], d)
            });
        }
    }
    for dt in FLOATS {
        p.check(format!("conv_transpose2d backward {dt}"), tol::MATMUL, |d| {
            let x = param(43, &[2, 4, 5, 5], dt, d);
            let w = param(44, &[4, 2, 3, 3], dt, d);
            let b = param(45, &[2], dt, d);
            let args = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1);
            backward(&x.conv_transpose2d(&w, Some(&b), &args)?, &[&x, &w, &b], d)
        });
        p.check(format!("im2col/col2im backward {dt}"), tol::REDUCTION, |d| {
            let x = param(46, &[2, 3, 7, 6], dt, d);
            let args = UnfoldArgs::new([2, 3]).stride(2).padding(1);
            let cols = x.im2col(&args)?;
            let back = cols.col2im([7, 6], &args)?;
            backward(&Var::cat(&[&cols.flatten_all(), &back.flatten_all()], 0)?, &[&x], d)
        });
        p.check(format!("pooling backward {dt}"), tol::REDUCTION, |d| {
            // Distinct values keep max pooling's argmax unique (and its gradient defined).
            let n = 2 * 3 * 9 * 8;
            let perm: Vec<f64> = (0..n).map(|i| ((i * 37) % n) as f64 * 0.01).collect();
            let x = Var::param(Tensor::from_vec(perm, [2, 3, 9, 8])?.to_dtype(dt).to_device(d)?);
            let parts = [
                x.max_pool2d(&MaxPoolArgs::new(3).stride(2).padding(1))?.flatten_all(),
                x.avg_pool2d(&AvgPoolArgs::new(3).stride(2).padding(1).count_include_pad(false))?.flatten_all(),
                x.adaptive_avg_pool2d([4, 5])?.flatten_all(),
                x.adaptive_max_pool2d([3, 3])?.flatten_all(),
                x.interpolate(&InterpolateArgs::size([12, 10]).mode(InterpolateMode::Bilinear).align_corners(false))?
                    .flatten_all(),
            ];
            let refs: Vec<&Var> = parts.iter().collect();
            backward(&Var::cat(&refs, 0)?, &[&x], d)
        });
    }
    p.finish();
}

#[test]
fn normalisation_attention_and_loss_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("normalisation_attention_and_loss_gradients");
    for dt in FLOATS {
        p.check(format!("batch norm backward {dt}"), tol::REDUCTION, |d| {
            let x = param(50, &[4, 3, 5, 6], dt, d);
            let w = param(51, &[3], dt, d);
            let b = param(52, &[3], dt, d);
            let (y, _, _) = x.channel_norm(Some(&w), Some(&b), 1e-5)?;
            backward(&y, &[&x, &w, &b], d)
        });
        for causal in [false, true] {
            p.check(format!("attention backward causal {causal} {dt}"), tol::MATMUL, |d| {
                let q = param(53, &[2, 3, 5, 8], dt, d);
                let k = param(54, &[2, 3, 7, 8], dt, d);
                let v = param(55, &[2, 3, 7, 4], dt, d);
                let mask = data(56, &[5, 7], DType::F32, any, d).gt_scalar(-1.5);
                let spec = Attention { scale: 0.35, causal };
                backward(&q.attention(&k, &v, Some(&Var::new(mask)), &spec)?, &[&q, &k, &v], d)
            });
        }
        for smoothing in [0.0, 0.1] {
            for reduction in [LossReduction::Mean, LossReduction::Sum, LossReduction::None] {
                p.check(
                    format!("cross_entropy backward smoothing {smoothing} {reduction:?} {dt}"),
                    tol::REDUCTION,
                    |d| {
                        let x = param(57, &[6, 5], dt, d);
                        let t = ints(&[0, 4, -100, 2, 2, 1], &[6], d)?;
                        let loss = ClassLoss {
                            scores: ClassScores::Logits,
                            label_smoothing: smoothing,
                            ignore_index: Some(-100),
                            reduction,
                        };
                        backward(&x.class_loss(&Var::new(t), loss)?, &[&x], d)
                    },
                );
            }
        }
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Second order
// ---------------------------------------------------------------------------------------

/// The gradients of `loss` with respect to `params` with a graph, then the backward of the
/// sum of their squares: the loss, the first-order gradients and the second-order ones.
fn second_order(loss: &Var, params: &[&Var], dev: Device) -> Result<Vec<Tensor>> {
    let gs = grad(&[loss], params, &[], true, true)?;
    let mut penalty: Option<Var> = None;
    let mut out = vec![loss.value()];
    for g in gs.iter().flatten() {
        out.push(g.value());
        let sq = g.square().sum_all();
        penalty = Some(match penalty {
            Some(p) => p.add(&sq)?,
            None => sq,
        });
    }
    let penalty = penalty.ok_or_else(|| ember_tensor::Error::autograd("no gradient"))?;
    penalty.backward()?;
    for x in params {
        out.push(match x.grad() {
            Some(g) => g,
            None => Tensor::zeros([0], DType::U8)?.to_device(dev)?,
        });
    }
    Ok(out)
}

#[test]
fn second_order_gradients() {
    require_cuda!();
    let mut p = Parity::of_gradients("second_order_gradients");
    for dt in FLOATS {
        p.check(format!("MLP with cross_entropy, second order {dt}"), tol::MATMUL, |d| {
            let x = Var::new(data(60, &[8, 12], dt, any, d));
            let (w1, b1, w2, b2) = (
                param(61, &[16, 12], dt, d),
                param(62, &[16], dt, d),
                param(63, &[5, 16], dt, d),
                param(64, &[5], dt, d),
            );
            let h = x.linear(&w1, Some(&b1))?.tanh();
            let logits = h.linear(&w2, Some(&b2))?;
            let t = ints(&[0, 4, 2, 2, 1, 3, 0, 4], &[8], d)?;
            let loss = logits.class_loss(
                &Var::new(t),
                ClassLoss {
                    scores: ClassScores::Logits,
                    label_smoothing: 0.0,
                    ignore_index: None,
                    reduction: LossReduction::Mean,
                },
            )?;
            second_order(&loss, &[&w1, &b1, &w2, &b2], d)
        });
        p.check(format!("conv2d, second order {dt}"), tol::MATMUL, |d| {
            let x = param(65, &[2, 3, 8, 8], dt, d);
            let w = param(66, &[4, 3, 3, 3], dt, d);
            let b = param(67, &[4], dt, d);
            let y = x.conv2d(&w, Some(&b), &ConvArgs::default().padding(Padding::Explicit([1, 1])))?.sigmoid();
            let loss = y.mul(&Var::new(data(68, &[2, 4, 8, 8], dt, any, d)))?.sum_all();
            second_order(&loss, &[&x, &w, &b], d)
        });
        p.check(format!("softmax and log_softmax / nll, second order {dt}"), tol::MATMUL, |d| {
            let x = param(69, &[6, 5], dt, d);
            let t = ints(&[1, 0, 4, 4, 2, 3], &[6], d)?;
            let nll = x.log_softmax(1)?.class_loss(
                &Var::new(t),
                ClassLoss {
                    scores: ClassScores::LogProbs,
                    label_smoothing: 0.1,
                    ignore_index: None,
                    reduction: LossReduction::Sum,
                },
            )?;
            let loss = nll.add(&x.softmax(0)?.square().sum_all())?;
            second_order(&loss, &[&x], d)
        });
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// gradcheck on the device
// ---------------------------------------------------------------------------------------

#[test]
fn gradcheck_runs_on_the_device() {
    require_cuda!();
    let mut failures = Vec::new();
    type Case = (&'static str, fn(&[Var]) -> Result<Var>, Vec<Vec<usize>>);
    let cases: Vec<Case> = vec![
        ("tanh(a @ b)", |v| Ok(v[0].matmul(&v[1])?.tanh()), vec![vec![3, 4], vec![4, 2]]),
        ("log_softmax", |v| v[0].log_softmax(1), vec![vec![3, 5]]),
        (
            "conv2d",
            |v| v[0].conv2d(&v[1], None, &ConvArgs::default().padding(Padding::Explicit([1, 1]))),
            vec![vec![1, 2, 4, 4], vec![3, 2, 3, 3]],
        ),
        ("prod and max", |v| v[0].prod(1, false)?.add(&v[0].max(0, false)?), vec![vec![3, 3]]),
    ];
    for (name, f, shapes) in cases {
        // gradcheck on f64 inputs that live on the device: it perturbs them and seeds the
        // backward there.
        let on_device: Vec<Tensor> =
            shapes.iter().enumerate().map(|(i, s)| data(70 + i as u64, s, DType::F64, any, device())).collect();
        if let Err(e) = gradcheck(f, &on_device, 1e-6, 1e-7, 1e-5) {
            failures.push(format!("gradcheck of {name} on {} inputs: {e}", device()));
        }
        // The same through `Var::to_device`: host inputs, the function and its backward on
        // the device, the output brought back (the transfer's own gradient is checked too).
        let on_host: Vec<Tensor> = on_device.iter().map(|t| t.to_device(CPU).unwrap()).collect();
        let through = |vs: &[Var]| -> Result<Var> {
            let moved = vs.iter().map(|v| v.to_device(device())).collect::<Result<Vec<_>>>()?;
            let y = f(&moved)?;
            if y.device() != device() {
                return Err(ember_tensor::Error::autograd(format!("{name} computed on {}", y.device())));
            }
            y.to_device(CPU)
        };
        if let Err(e) = gradcheck(through, &on_host, 1e-6, 1e-7, 1e-5) {
            failures.push(format!("gradcheck of {name} through Var::to_device: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("gradcheck_runs_on_the_device: 8 gradchecks pass on {}", device());
}
