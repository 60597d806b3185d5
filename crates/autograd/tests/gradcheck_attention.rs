//! Gradients of scaled dot-product attention against `f64` central differences, to first
//! and second order, on both paths: the recorded kernel operation (`Var::attention`) and the
//! plain composition it falls back to (`Var::attention_composed`). Cases: no mask, bool and
//! float masks (with a row that sees no key), causal with `L > S` and `L < S`, `L != S` and
//! `Ev != E`, broadcast batch dimensions, a custom scale, and transposed (non-contiguous)
//! operands.

use ember_autograd::Var;
use ember_tensor::{Attention, DType, Result, Tensor};
use ember_testing::gradcheck::{check, check_both, normal, transposed};

/// A case: its name, the query, key and value shapes, the mask, the spec.
struct Case {
    name: &'static str,
    q: Vec<usize>,
    k: Vec<usize>,
    v: Vec<usize>,
    mask: Option<Tensor>,
    spec: Attention,
}

fn spec(e: usize, causal: bool) -> Attention {
    Attention { scale: Attention::default_scale(e), causal }
}

/// A bool mask `[l, s]` with row 1 fully excluded (when there is one) and a few holes.
fn bool_mask(l: usize, s: usize) -> Tensor {
    let keep: Vec<u8> = (0..l * s).map(|i| u8::from(i / s != 1 && (i * 7) % 5 != 0)).collect();
    Tensor::from_vec(keep, [l, s]).unwrap()
}

/// A float mask `[b, l, s]`: finite offsets and a `-inf` in each row but one.
fn float_mask(b: usize, l: usize, s: usize) -> Tensor {
    let vals: Vec<f64> = (0..b * l * s)
        .map(|i| if i % s == (i / s) % s && i % 3 != 0 { f64::NEG_INFINITY } else { (i % 4) as f64 * 0.3 })
        .collect();
    Tensor::from_vec(vals, [b, l, s]).unwrap()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "plain, L != S, Ev != E",
            q: vec![2, 3, 4],
            k: vec![2, 5, 4],
            v: vec![2, 5, 3],
            mask: None,
            spec: spec(4, false),
        },
        Case {
            name: "broadcast batch dimensions",
            q: vec![2, 1, 3, 4],
            k: vec![1, 2, 5, 4],
            v: vec![2, 5, 2],
            mask: None,
            spec: spec(4, false),
        },
        Case {
            name: "bool mask",
            q: vec![2, 3, 4],
            k: vec![2, 5, 4],
            v: vec![2, 5, 3],
            mask: Some(bool_mask(3, 5)),
            spec: spec(4, false),
        },
        Case {
            name: "float mask",
            q: vec![2, 3, 4],
            k: vec![2, 4, 4],
            v: vec![2, 4, 2],
            mask: Some(float_mask(2, 3, 4)),
            spec: spec(4, false),
        },
        Case {
            name: "causal, L > S",
            q: vec![2, 5, 3],
            k: vec![2, 3, 3],
            v: vec![2, 3, 2],
            mask: None,
            spec: spec(3, true),
        },
        Case {
            name: "causal, L < S",
            q: vec![1, 3, 3],
            k: vec![1, 5, 3],
            v: vec![1, 5, 4],
            mask: None,
            spec: spec(3, true),
        },
        Case {
            name: "scale",
            q: vec![3, 2],
            k: vec![4, 2],
            v: vec![4, 3],
            mask: None,
            spec: Attention { scale: 0.7, causal: false },
        },
    ]
}

type Path = fn(&Var, &Var, &Var, Option<&Var>, &Attention) -> Result<Var>;

fn run(path: Path, label: &str, seed: u64) {
    for (i, c) in cases().into_iter().enumerate() {
        let seed = seed + 10 * i as u64;
        let inputs = [normal(seed, &c.q), normal(seed + 1, &c.k), normal(seed + 2, &c.v)];
        let (mask, spec) = (c.mask.clone().map(Var::new), c.spec);
        let f = move |x: &[Var]| path(&x[0], &x[1], &x[2], mask.as_ref(), &spec);
        check_both(&format!("{label}: {}", c.name), &f, &inputs, seed + 3);
        let strided: Vec<Tensor> = inputs.iter().map(transposed).collect();
        check(&format!("{label}: {}, transposed operands", c.name), &f, &strided);
    }
}

#[test]
fn kernel_gradients() {
    run(|q, k, v, m, s| q.attention(k, v, m, s), "kernel", 1000);
}

#[test]
fn composition_gradients() {
    run(|q, k, v, m, s| q.attention_composed(k, v, m, s), "composition", 2000);
}

#[test]
fn float_mask_gradient() {
    // A float mask that requires a gradient gets one: the gradient of the scores.
    let q = normal(3000, &[2, 3, 4]);
    let k = normal(3001, &[2, 5, 4]);
    let v = normal(3002, &[2, 5, 3]);
    let m = normal(3003, &[3, 5]);
    let f = |x: &[Var]| x[0].attention(&x[1], &x[2], Some(&x[3]), &spec(4, false));
    check_both("differentiable float mask", f, &[q, k, v, m], 3004);
}

#[test]
fn rows_without_keys_are_zero() {
    let q = Var::param(normal(3100, &[1, 3, 2]));
    let k = Var::param(normal(3101, &[1, 4, 2]));
    let v = Var::param(normal(3102, &[1, 4, 2]));
    let mask = Var::new(Tensor::from_vec(vec![1u8, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], [3, 4]).unwrap());
    for out in [
        q.attention(&k, &v, Some(&mask), &spec(2, false)).unwrap(),
        q.attention_composed(&k, &v, Some(&mask), &spec(2, false)).unwrap(),
    ] {
        let y = out.value().to_dtype(DType::F64).to_vec::<f64>().unwrap();
        assert_eq!(&y[2..4], &[0.0, 0.0]);
        assert!(y.iter().all(|v| v.is_finite()));
        q.zero_grad();
        out.sum_all().backward().unwrap();
        let gq = q.grad().unwrap().to_vec::<f64>().unwrap();
        assert_eq!(&gq[2..4], &[0.0, 0.0]);
        assert!(gq.iter().all(|v| v.is_finite()));
    }
}
