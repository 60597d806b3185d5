//! `scaled_dot_product_attention`: the kernel path agrees with the plain composition
//! (outputs and gradients, f32 and f64, sizes that are not multiples of the kernel's
//! blocks, every mask kind), dropout, and the errors for bad shapes, masks and arguments.

use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, scaled_dot_product_attention as sdpa};
use ember_tensor::{Attention, DType, Tensor};
use ember_testing::gradcheck::{normal, transposed};

/// The largest absolute difference between two tensors' values.
fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (a.to_dtype(DType::F64).to_vec::<f64>().unwrap(), b.to_dtype(DType::F64).to_vec::<f64>().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() }).fold(0.0, f64::max)
}

/// Output and gradients of both paths for one case, compared within `tol`.
fn agree(shapes: [&[usize]; 3], mask: Option<Tensor>, causal: bool, dtype: DType, tol: f64, seed: u64) {
    let inputs: Vec<Tensor> =
        shapes.iter().enumerate().map(|(i, s)| normal(seed + i as u64, s).to_dtype(dtype)).collect();
    let spec = Attention { scale: Attention::default_scale(shapes[0][shapes[0].len() - 1]), causal };
    let mask = mask.map(Var::new);
    let g = normal(seed + 9, &[1]).to_dtype(dtype);
    let mut results = Vec::new();
    for kernel in [true, false] {
        let [q, k, v] = [0, 1, 2].map(|i| Var::param(inputs[i].clone()));
        let out = if kernel {
            q.attention(&k, &v, mask.as_ref(), &spec).unwrap()
        } else {
            q.attention_composed(&k, &v, mask.as_ref(), &spec).unwrap()
        };
        assert_eq!(out.op_name() == "scaled_dot_product_attention", kernel);
        // A non-uniform output gradient.
        let w = Var::new(out.value().sin().mul(&g).unwrap());
        out.mul(&w).unwrap().sum_all().backward().unwrap();
        results.push([out.value(), q.grad().unwrap(), k.grad().unwrap(), v.grad().unwrap()]);
    }
    for (i, what) in ["output", "dq", "dk", "dv"].iter().enumerate() {
        let d = max_diff(&results[0][i], &results[1][i]);
        assert!(d <= tol, "{what} differs by {d} for {shapes:?} causal {causal} {dtype}");
    }
}

#[test]
fn kernel_agrees_with_composition() {
    let mask_bool = |l: usize, s: usize| {
        Tensor::from_vec((0..l * s).map(|i| u8::from((i * 31) % 7 != 0 && i / s != 3)).collect::<Vec<_>>(), [l, s])
            .unwrap()
    };
    let mask_float = |l: usize, s: usize| {
        normal(77, &[1, l, s]).masked_fill(&mask_bool(l, s).logical_not(), f64::NEG_INFINITY).unwrap()
    };
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
        let f = |t: Tensor| t.to_dtype(dtype);
        agree([&[2, 3, 70, 16], &[2, 3, 300, 16], &[2, 3, 300, 8]], None, false, dtype, tol, 10);
        agree([&[1, 2, 130, 8], &[1, 2, 257, 8], &[1, 2, 257, 5]], None, true, dtype, tol, 20);
        agree([&[2, 300, 4], &[2, 100, 4], &[2, 100, 4]], None, true, dtype, tol, 30);
        agree([&[2, 65, 6], &[2, 513, 6], &[2, 513, 3]], Some(mask_bool(65, 513)), false, dtype, tol, 40);
        agree([&[2, 65, 6], &[2, 260, 6], &[2, 260, 6]], Some(f(mask_float(65, 260))), false, dtype, tol, 50);
        agree([&[1, 1], &[1, 1], &[1, 1]], None, false, dtype, tol, 60);
        agree([&[3, 1, 9, 4], &[2, 9, 4], &[1, 9, 4]], None, false, dtype, tol, 70);
    }
}

#[test]
fn non_contiguous_operands_match_contiguous_ones() {
    let (q, k, v) = (normal(1, &[2, 70, 8]), normal(2, &[2, 300, 8]), normal(3, &[2, 300, 4]));
    let args = SdpaArgs::default().causal();
    let a = sdpa(&Var::new(q.clone()), &Var::new(k.clone()), &Var::new(v.clone()), &args).unwrap();
    let b = sdpa(&Var::new(transposed(&q)), &Var::new(transposed(&k)), &Var::new(transposed(&v)), &args).unwrap();
    assert_eq!(max_diff(&a.value(), &b.value()), 0.0);
}

#[test]
fn dropout() {
    let (q, k, v) = (Var::new(normal(1, &[2, 4, 3])), Var::new(normal(2, &[2, 5, 3])), Var::new(normal(3, &[2, 5, 2])));
    let all = sdpa(&q, &k, &v, &SdpaArgs::default().dropout(1.0)).unwrap();
    assert!(all.value().to_vec::<f64>().unwrap().iter().all(|&x| x == 0.0));
    let some = sdpa(&q, &k, &v, &SdpaArgs::default().dropout(0.5)).unwrap();
    assert_eq!(some.shape().dims(), &[2, 4, 2]);
    assert_ne!(some.op_name(), "scaled_dot_product_attention");
    let none = sdpa(&q, &k, &v, &SdpaArgs::default()).unwrap();
    assert_eq!(none.op_name(), "scaled_dot_product_attention");
}

#[test]
fn errors_name_the_op_and_shapes() {
    let t = |s: &[usize]| Var::new(normal(5, s));
    let d = SdpaArgs::default();
    let cases: Vec<(Var, Var, Var, SdpaArgs, &str)> = vec![
        (t(&[4]), t(&[3, 4]), t(&[3, 2]), d.clone(), "at least 2 dimensions"),
        (t(&[2, 4]), t(&[3, 5]), t(&[3, 2]), d.clone(), "same last dimension"),
        (t(&[2, 4]), t(&[3, 4]), t(&[5, 2]), d.clone(), "number of positions"),
        (t(&[2, 2, 4]), t(&[3, 3, 4]), t(&[3, 3, 2]), d.clone(), "do not broadcast"),
        (t(&[2, 4]), t(&[3, 4]), t(&[3, 2]), d.clone().mask(t(&[3, 2])), "does not broadcast"),
        (t(&[2, 4]), t(&[3, 4]), t(&[3, 2]), d.clone().mask(t(&[2, 2, 3])), "does not broadcast"),
        (t(&[2, 4]), t(&[3, 4]), t(&[3, 2]), d.clone().mask(Tensor::zeros([2, 3], DType::I64).unwrap()), "bool"),
        (
            t(&[2, 4]),
            t(&[3, 4]),
            t(&[3, 2]),
            d.clone().mask(Tensor::ones([2, 3], DType::U8).unwrap()).causal(),
            "is_causal",
        ),
        (t(&[2, 4]), t(&[3, 4]), t(&[3, 2]), d.clone().dropout(1.5), "dropout_p"),
    ];
    for (q, k, v, args, want) in cases {
        let e = sdpa(&q, &k, &v, &args).unwrap_err().to_string();
        assert!(e.contains("scaled_dot_product_attention") && e.contains(want), "{e}");
        let with_dropout = SdpaArgs { dropout_p: 0.5, ..args.clone() };
        if args.dropout_p <= 1.0 {
            let e = sdpa(&q, &k, &v, &with_dropout).unwrap_err().to_string();
            assert!(e.contains("scaled_dot_product_attention") && e.contains(want), "with dropout: {e}");
        }
    }
}
