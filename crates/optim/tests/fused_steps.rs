//! The fused optimizer steps of the backend (`Tensor::sgd_step_`, `adam_step_`,
//! `rmsprop_step_`) against straightforward unfused references written with tensor
//! operations in f64: several steps, every combination of options, both float dtypes, odd
//! lengths and offset views (the vector loops' tails), and a tensor large enough to be
//! updated in parallel. Then the errors for operands that do not fit.

use ember_tensor::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use ember_tensor::{DType, Result, Tensor};

/// Lengths that leave tails after every vector width, plus one past the parallel threshold.
const LENGTHS: [usize; 5] = [1, 7, 33, 1031, 200_003];

/// A fresh contiguous tensor of `dtype` holding `values`, seen through an offset view (so
/// that its elements do not start at the beginning of the storage).
fn offset_copy(values: &Tensor, dtype: DType) -> Result<Tensor> {
    let n = values.numel();
    let base = Tensor::full([n + 5], f64::NAN, dtype)?;
    let view = base.narrow(0, 3, n)?;
    view.copy_(values)?;
    Ok(view)
}

/// An f64 copy, sharing nothing with `t` (which the fused step goes on to update).
fn f64_of(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F64).copy()
}

/// An error naming the first element where `got` (any float dtype) and `want` (f64) differ
/// by more than the tolerance of `dtype`.
fn compare(what: &str, got: &Tensor, want: &Tensor, dtype: DType) -> std::result::Result<(), String> {
    let (got, want) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    assert_eq!(got.len(), want.len());
    let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if (g - w).abs() > tol * (1.0 + w.abs()) {
            return Err(format!("{what}[{i}]: got {g}, want {w}"));
        }
    }
    Ok(())
}

/// Parameter and gradients of one trajectory: the initial value and one gradient per step,
/// in f64, drawn from a fixed seed.
fn data(n: usize, steps: usize) -> Result<(Tensor, Vec<Tensor>)> {
    // The tests of this file run on parallel threads and share the global generator:
    // `seeded` keeps the others from drawing between the seed and these draws, so that the
    // data (and which elements are ill-conditioned in f32) is the same on every run.
    ember_testing::gradcheck::seeded(n as u64, || {
        let p = Tensor::randn([n])?.to_dtype(DType::F64);
        let grads = (0..steps).map(|_| Ok(Tensor::randn([n])?.to_dtype(DType::F64))).collect::<Result<_>>()?;
        Ok((p, grads))
    })
}

/// `g + wd·p` when `wd != 0`.
fn decayed(g: &Tensor, p: &Tensor, wd: f64) -> Result<Tensor> {
    if wd != 0.0 { g.add(&p.mul_scalar(wd)) } else { Ok(g.clone()) }
}

/// `a + w·(b - a)`.
fn lerp(a: &Tensor, b: &Tensor, w: f64) -> Result<Tensor> {
    a.add(&b.sub(a)?.mul_scalar(w))
}

fn sgd_reference(p: &mut Tensor, buf: &mut Option<Tensor>, g: &Tensor, hp: &SgdStep) -> Result<()> {
    let d = decayed(g, p, hp.weight_decay)?;
    if hp.momentum == 0.0 {
        *p = p.sub(&d.mul_scalar(hp.lr))?;
        return Ok(());
    }
    let b = match buf.take() {
        None => d.clone(),
        Some(b) => b.mul_scalar(hp.momentum).add(&d.mul_scalar(1.0 - hp.dampening))?,
    };
    let dir = if hp.nesterov { d.add(&b.mul_scalar(hp.momentum))? } else { b.clone() };
    *p = p.sub(&dir.mul_scalar(hp.lr))?;
    *buf = Some(b);
    Ok(())
}

#[test]
fn sgd_matches_the_unfused_reference() -> Result<()> {
    let steps = 4;
    let mut cases = vec![];
    for momentum in [0.0, 0.9] {
        for dampening in [0.0, 0.3] {
            for nesterov in [false, true] {
                for weight_decay in [0.0, 0.05] {
                    if nesterov && (momentum == 0.0 || dampening != 0.0) {
                        continue;
                    }
                    cases.push(SgdStep { lr: 0.1, momentum, dampening, nesterov, weight_decay, fresh_buffer: false });
                }
            }
        }
    }
    for (ci, case) in cases.iter().enumerate() {
        for (li, &n) in LENGTHS.iter().enumerate() {
            // The large tensor with a few settings only, to keep the test quick.
            if li == LENGTHS.len() - 1 && ci % 3 != 0 {
                continue;
            }
            let (p0, grads) = data(n, steps)?;
            for dtype in [DType::F32, DType::F64] {
                let p = offset_copy(&p0, dtype)?;
                let mut buf: Option<Tensor> = None;
                for (t, g) in grads.iter().enumerate() {
                    let g = g.to_dtype(dtype);
                    // The reference starts from the fused state, so that rounding does not
                    // accumulate over the steps.
                    let (mut rp, mut rbuf) = (f64_of(&p), buf.as_ref().map(f64_of));
                    let mut hp = *case;
                    if hp.momentum != 0.0 {
                        hp.fresh_buffer = buf.is_none();
                        let b = buf.get_or_insert_with(|| offset_copy(&p0, dtype).unwrap());
                        p.sgd_step_(&g, Some(b), &hp)?;
                    } else {
                        p.sgd_step_(&g, None, &hp)?;
                    }
                    sgd_reference(&mut rp, &mut rbuf, &f64_of(&g), case)?;
                    let at = format!("{case:?}, n = {n}, {dtype}, step {t}");
                    compare("param", &p, &rp, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    if let (Some(b), Some(rb)) = (&buf, &rbuf) {
                        compare("buffer", b, rb, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    }
                }
            }
        }
    }
    Ok(())
}

struct AdamRef {
    p: Tensor,
    m: Tensor,
    v: Tensor,
    vmax: Tensor,
}

fn adam_reference(r: &mut AdamRef, g: &Tensor, hp: &AdamStep) -> Result<()> {
    let coupled = hp.weight_decay != 0.0 && !hp.decoupled;
    let d = decayed(g, &r.p, if coupled { hp.weight_decay } else { 0.0 })?;
    r.m = lerp(&r.m, &d, 1.0 - hp.beta1)?;
    r.v = r.v.mul_scalar(hp.beta2).add(&d.mul(&d)?.mul_scalar(1.0 - hp.beta2))?;
    r.vmax = r.vmax.maximum(&r.v)?;
    let second = if hp.amsgrad { &r.vmax } else { &r.v };
    if hp.decoupled && hp.weight_decay != 0.0 {
        r.p = r.p.mul_scalar(1.0 - hp.lr * hp.weight_decay);
    }
    let t = hp.step as f64;
    let step_size = hp.lr / (1.0 - hp.beta1.powf(t));
    let bc2 = (1.0 - hp.beta2.powf(t)).sqrt();
    let denom = second.sqrt().div_scalar(bc2).add_scalar(hp.eps);
    r.p = r.p.sub(&r.m.mul_scalar(step_size).div(&denom)?)?;
    Ok(())
}

#[test]
fn adam_matches_the_unfused_reference() -> Result<()> {
    let steps = 4;
    let mut cases = vec![];
    // beta1 = 0.3 makes lerp's weight 0.7, which takes its second form.
    for beta1 in [0.9, 0.3] {
        for weight_decay in [0.0, 0.05] {
            for decoupled in [false, true] {
                for amsgrad in [false, true] {
                    let (lr, beta2, eps) = (0.01, 0.999, 1e-8);
                    cases.push(AdamStep { lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad, step: 0 });
                }
            }
        }
    }
    for (ci, case) in cases.iter().enumerate() {
        for (li, &n) in LENGTHS.iter().enumerate() {
            if li == LENGTHS.len() - 1 && ci % 5 != 0 {
                continue;
            }
            let (p0, grads) = data(n, steps)?;
            for dtype in [DType::F32, DType::F64] {
                let zeros = Tensor::zeros([n], DType::F64)?;
                let p = offset_copy(&p0, dtype)?;
                let (m, v) = (offset_copy(&zeros, dtype)?, offset_copy(&zeros, dtype)?);
                let vmax = case.amsgrad.then(|| offset_copy(&zeros, dtype).unwrap());
                for (t, g) in grads.iter().enumerate() {
                    let g = g.to_dtype(dtype);
                    // The reference starts from the fused state, so that rounding does not
                    // accumulate over the steps.
                    let vm = vmax.as_ref().map_or_else(|| zeros.clone(), f64_of);
                    let mut r = AdamRef { p: f64_of(&p), m: f64_of(&m), v: f64_of(&v), vmax: vm };
                    let hp = AdamStep { step: t as u64 + 1, ..*case };
                    p.adam_step_(&g, &m, &v, vmax.as_ref(), &hp)?;
                    adam_reference(&mut r, &f64_of(&g), &hp)?;
                    let at = format!("{case:?}, n = {n}, {dtype}, step {t}");
                    compare("exp_avg", &m, &r.m, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    compare("exp_avg_sq", &v, &r.v, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    if let Some(x) = &vmax {
                        compare("max_exp_avg_sq", x, &r.vmax, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    }
                    compare("param", &p, &r.p, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                }
            }
        }
    }
    Ok(())
}

struct RmsRef {
    p: Tensor,
    s: Tensor,
    ga: Tensor,
    b: Tensor,
}

fn rmsprop_reference(r: &mut RmsRef, g: &Tensor, hp: &RmsPropStep) -> Result<()> {
    let d = decayed(g, &r.p, hp.weight_decay)?;
    r.s = r.s.mul_scalar(hp.alpha).add(&d.mul(&d)?.mul_scalar(1.0 - hp.alpha))?;
    let avg = if hp.centered {
        r.ga = lerp(&r.ga, &d, 1.0 - hp.alpha)?;
        r.s.sub(&r.ga.mul(&r.ga)?)?.sqrt().add_scalar(hp.eps)
    } else {
        r.s.sqrt().add_scalar(hp.eps)
    };
    if hp.momentum > 0.0 {
        r.b = r.b.mul_scalar(hp.momentum).add(&d.div(&avg)?)?;
        r.p = r.p.sub(&r.b.mul_scalar(hp.lr))?;
    } else {
        r.p = r.p.sub(&d.mul_scalar(hp.lr).div(&avg)?)?;
    }
    Ok(())
}

#[test]
fn rmsprop_matches_the_unfused_reference() -> Result<()> {
    let steps = 4;
    let mut cases = vec![];
    // alpha = 0.3 makes lerp's weight 0.7, which takes its second form.
    for alpha in [0.99, 0.3] {
        for centered in [false, true] {
            for momentum in [0.0, 0.5] {
                for weight_decay in [0.0, 0.05] {
                    cases.push(RmsPropStep { lr: 0.01, alpha, eps: 1e-8, weight_decay, momentum, centered });
                }
            }
        }
    }
    for (ci, case) in cases.iter().enumerate() {
        for (li, &n) in LENGTHS.iter().enumerate() {
            if li == LENGTHS.len() - 1 && ci % 5 != 0 {
                continue;
            }
            let (p0, grads) = data(n, steps)?;
            for dtype in [DType::F32, DType::F64] {
                let zeros = Tensor::zeros([n], DType::F64)?;
                let p = offset_copy(&p0, dtype)?;
                let s = offset_copy(&zeros, dtype)?;
                let ga = case.centered.then(|| offset_copy(&zeros, dtype).unwrap());
                let b = (case.momentum > 0.0).then(|| offset_copy(&zeros, dtype).unwrap());
                for (t, g) in grads.iter().enumerate() {
                    let g = g.to_dtype(dtype);
                    // The reference starts from the fused state, so that rounding does not
                    // accumulate over the steps.
                    let (ra, rb) = (
                        ga.as_ref().map_or_else(|| zeros.clone(), f64_of),
                        b.as_ref().map_or_else(|| zeros.clone(), f64_of),
                    );
                    let mut r = RmsRef { p: f64_of(&p), s: f64_of(&s), ga: ra, b: rb };
                    p.rmsprop_step_(&g, &s, ga.as_ref(), b.as_ref(), case)?;
                    rmsprop_reference(&mut r, &f64_of(&g), case)?;
                    let at = format!("{case:?}, n = {n}, {dtype}, step {t}");
                    compare("square_avg", &s, &r.s, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    if let Some(ga) = &ga {
                        compare("grad_avg", ga, &r.ga, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    }
                    if let Some(b) = &b {
                        compare("momentum_buffer", b, &r.b, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                    }
                    compare("param", &p, &r.p, dtype).unwrap_or_else(|e| panic!("{at}: {e}"));
                }
            }
        }
    }
    Ok(())
}

/// The steps' writes bump the versions of the parameter and of every state tensor, as
/// in-place operations do, and leave the gradient alone.
#[test]
fn steps_bump_the_versions_of_what_they_write() -> Result<()> {
    let p = Tensor::ones([5], DType::F32)?;
    let g = Tensor::ones([5], DType::F32)?;
    let (m, v) = (p.zeros_like(), p.zeros_like());
    let hp = AdamStep {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
        amsgrad: false,
        step: 1,
    };
    p.adam_step_(&g, &m, &v, None, &hp)?;
    assert_eq!((p.version(), m.version(), v.version(), g.version()), (1, 1, 1, 0));
    // An empty parameter is a valid, if idle, update.
    let e = Tensor::zeros([0], DType::F64)?;
    e.adam_step_(&e.zeros_like(), &e.zeros_like(), &e.zeros_like(), None, &hp)?;
    Ok(())
}

fn error_of(r: Result<()>) -> String {
    match r {
        Ok(()) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn operands_that_do_not_fit_are_errors_naming_the_op() -> Result<()> {
    let p = Tensor::ones([2, 3], DType::F32)?;
    let g = p.ones_like();
    let sgd =
        SgdStep { lr: 0.1, momentum: 0.9, dampening: 0.0, nesterov: false, weight_decay: 0.0, fresh_buffer: true };
    let plain = SgdStep { momentum: 0.0, ..sgd };
    let cases: Vec<(Result<()>, &[&str])> = vec![
        (p.sgd_step_(&Tensor::ones([3, 2], DType::F32)?, None, &plain), &["sgd_step", "[3, 2]", "[2, 3]"]),
        (p.sgd_step_(&g.to_dtype(DType::F64), None, &plain), &["sgd_step", "gradient", "f64", "f32"]),
        (p.sgd_step_(&g, None, &sgd), &["sgd_step", "momentum buffer", "not given"]),
        (p.sgd_step_(&g, Some(&p.zeros_like()), &plain), &["sgd_step", "momentum buffer", "do not use"]),
        (p.sgd_step_(&g, Some(&p.zeros_like().to_dtype(DType::F64)), &sgd), &["sgd_step", "f64"]),
        (p.t()?.sgd_step_(&g.t()?, None, &plain), &["sgd_step", "contiguous"]),
        (p.sgd_step_(&g.t()?.contiguous().t()?, None, &plain), &["sgd_step", "gradient", "contiguous"]),
        (p.sgd_step_(&p, None, &plain), &["sgd_step", "share storage"]),
        (p.sgd_step_(&g, Some(&g), &sgd), &["sgd_step", "share storage"]),
        (Tensor::ones([2], DType::I64)?.sgd_step_(&Tensor::ones([2], DType::I64)?, None, &plain), &["sgd_step", "i64"]),
        (
            Tensor::ones([1], DType::F32)?.expand([4])?.sgd_step_(&Tensor::ones([4], DType::F32)?, None, &plain),
            &["sgd_step", "contiguous"],
        ),
    ];
    let adam = AdamStep {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
        amsgrad: true,
        step: 1,
    };
    let z = || p.zeros_like();
    let more: Vec<(Result<()>, &[&str])> = vec![
        (p.adam_step_(&g, &z(), &z(), None, &adam), &["adam_step", "max_exp_avg_sq", "not given"]),
        (p.adam_step_(&g, &z(), &z(), Some(&z()), &AdamStep { amsgrad: false, ..adam }), &["adam_step", "do not use"]),
        (p.adam_step_(&g, &Tensor::zeros([6], DType::F32)?, &z(), Some(&z()), &adam), &["adam_step", "exp_avg", "[6]"]),
        (p.adam_step_(&g, &z(), &z().to_dtype(DType::F64), Some(&z()), &adam), &["adam_step", "exp_avg_sq", "f64"]),
        (p.adam_step_(&g, &z(), &z(), Some(&z()), &AdamStep { step: 0, ..adam }), &["adam_step", "step"]),
        (
            {
                let m = z();
                p.adam_step_(&g, &m, &m, Some(&z()), &adam)
            },
            &["adam_step", "exp_avg and exp_avg_sq share storage"],
        ),
    ];
    let rms = RmsPropStep { lr: 0.01, alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.5, centered: true };
    let last: Vec<(Result<()>, &[&str])> = vec![
        (p.rmsprop_step_(&g, &z(), None, Some(&z()), &rms), &["rmsprop_step", "grad_avg", "not given"]),
        (p.rmsprop_step_(&g, &z(), Some(&z()), None, &rms), &["rmsprop_step", "momentum buffer", "not given"]),
        (
            p.rmsprop_step_(&g, &z(), Some(&z()), Some(&z()), &RmsPropStep { centered: false, ..rms }),
            &["rmsprop_step", "grad_avg", "do not use"],
        ),
        (p.rmsprop_step_(&g, &z().t()?, Some(&z()), Some(&z()), &rms), &["rmsprop_step", "square_avg", "[3, 2]"]),
    ];
    let unchanged = p.to_vec::<f32>()?;
    for (r, words) in cases.into_iter().chain(more).chain(last) {
        let e = error_of(r);
        for w in words {
            assert!(e.contains(w), "{e:?} lacks {w:?}");
        }
    }
    // A refused step changes nothing.
    assert_eq!(p.to_vec::<f32>()?, unchanged);
    Ok(())
}
