//! The LLaMA-family layers: rotary embeddings ([`RotaryEmbedding`], [`apply_rotary`]),
//! grouped-query attention and [`SwiGlu`].
//!
//! Gradients against `f64` central differences (first and second order); the rotary tables
//! of every supported scaling and grouped-query attention (outputs and gradients) against
//! transformers and PyTorch, from `tools/parity/fixtures/rope_gqa.safetensors`, written by
//! `tools/parity/rope_gqa.py`.

use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, apply_rotary, grouped_query_attention, scaled_dot_product_attention};
use ember_nn::{Linear, Module, RopeScaling, RotaryEmbedding, StateDict, SwiGlu, load_safetensors};
use ember_tensor::{DType, Tensor};
use ember_testing::gradcheck::{check, check_both, normal};

fn fixture() -> StateDict {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/rope_gqa.safetensors");
    load_safetensors(path).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape().dims(), b.shape().dims());
    let (a, b) = (a.to_dtype(DType::F64).to_vec::<f64>().unwrap(), b.to_dtype(DType::F64).to_vec::<f64>().unwrap());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn positions(n: usize) -> Tensor {
    Tensor::from_vec((0..n as i64).collect::<Vec<_>>(), [1, n]).unwrap()
}

#[test]
fn rotary_tables_match_transformers_for_every_scaling() {
    let fx = fixture();
    let scenarios = [
        ("default", 10000.0, None),
        ("linear", 500.0, Some(RopeScaling::Linear { factor: 4.0 })),
        (
            "llama3",
            10000.0,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64,
            }),
        ),
        ("dynamic", 10000.0, Some(RopeScaling::Dynamic { factor: 2.0, original_max_position_embeddings: 16 })),
    ];
    let plain = RotaryEmbedding::new(16, 10000.0, None).unwrap().cos_sin(&positions(40), DType::F32).unwrap();
    for (name, theta, scaling) in scenarios {
        let rope = RotaryEmbedding::new(16, theta, scaling).unwrap();
        let (cos, sin) = rope.cos_sin(&positions(40), DType::F32).unwrap();
        let (want_cos, want_sin) =
            (fx.get(&format!("rope_{name}_cos")).unwrap(), fx.get(&format!("rope_{name}_sin")).unwrap());
        // Angles up to 39 radians in f32: a last-bit difference in a frequency moves them by ~2e-6.
        assert!(max_diff(&cos, want_cos) < 2e-5, "{name} cos: {}", max_diff(&cos, want_cos));
        assert!(max_diff(&sin, want_sin) < 2e-5, "{name} sin: {}", max_diff(&sin, want_sin));
        if name != "default" {
            assert!(max_diff(&cos, &plain.0) > 1e-2, "{name}: the scaling changed nothing");
        }
    }
}

#[test]
fn dynamic_scaling_keeps_the_plain_tables_within_the_trained_length() {
    let plain = RotaryEmbedding::new(8, 10000.0, None).unwrap();
    let dynamic = RotaryEmbedding::new(
        8,
        10000.0,
        Some(RopeScaling::Dynamic { factor: 2.0, original_max_position_embeddings: 16 }),
    )
    .unwrap();
    let a = plain.cos_sin(&positions(16), DType::F64).unwrap();
    let b = dynamic.cos_sin(&positions(16), DType::F64).unwrap();
    assert_eq!(max_diff(&a.0, &b.0), 0.0);
    assert_eq!(max_diff(&a.1, &b.1), 0.0);
}

#[test]
fn rotation_preserves_norms_and_relative_angles() {
    // RoPE is a rotation: norms are kept, and q(m) . k(n) depends on m - n only.
    let rope = RotaryEmbedding::new(8, 100.0, None).unwrap();
    let q = Tensor::randn([1, 1, 1, 8]).unwrap().to_dtype(DType::F64);
    let k = Tensor::randn([1, 1, 1, 8]).unwrap().to_dtype(DType::F64);
    let at = |x: &Tensor, p: i64| {
        let (cos, sin) = rope.cos_sin(&Tensor::from_vec(vec![p], [1, 1]).unwrap(), DType::F64).unwrap();
        apply_rotary(&Var::new(x.clone()), &cos, &sin).unwrap().value().to_vec::<f64>().unwrap()
    };
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let q0 = q.to_vec::<f64>().unwrap();
    assert!((dot(&at(&q, 5), &at(&q, 5)) - dot(&q0, &q0)).abs() < 1e-5);
    let (d1, d2) = (dot(&at(&q, 7), &at(&k, 3)), dot(&at(&q, 14), &at(&k, 10)));
    assert!((d1 - d2).abs() < 1e-4, "{d1} vs {d2}");
}

#[test]
fn apply_rotary_gradients() {
    let rope = RotaryEmbedding::new(4, 10.0, Some(RopeScaling::Linear { factor: 2.0 })).unwrap();
    let pos = Tensor::from_vec(vec![0i64, 3, 4, 1, 2, 9], [2, 3]).unwrap();
    let (cos, sin) = rope.cos_sin(&pos, DType::F64).unwrap();
    let op = |v: &[Var]| apply_rotary(&v[0], &cos, &sin);
    check_both("apply_rotary", op, &[normal(1, &[2, 3, 3, 4])], 2);
    // Heads-major storage, as a projection's output transposed to [batch, heads, seq, d].
    let x = normal(3, &[2, 3, 3, 4]).transpose(1, 2).unwrap().contiguous().transpose(1, 2).unwrap();
    check("apply_rotary, transposed input", op, &[x]);
}

#[test]
fn apply_rotary_rejects_mismatched_tables() {
    let rope = RotaryEmbedding::new(4, 10.0, None).unwrap();
    let (cos, sin) = rope.cos_sin(&positions(3), DType::F32).unwrap();
    let x = Var::new(Tensor::randn([1, 2, 5, 4]).unwrap());
    let err = apply_rotary(&x, &cos, &sin).unwrap_err().to_string();
    assert!(err.contains("apply_rotary") && err.contains("[1, 5, 4]"), "{err}");
    assert!(RotaryEmbedding::new(5, 10.0, None).is_err());
    assert!(RotaryEmbedding::new(4, 0.0, None).is_err());
    let bad = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 4.0,
        high_freq_factor: 1.0,
        original_max_position_embeddings: 64,
    };
    assert!(RotaryEmbedding::new(4, 10.0, Some(bad)).unwrap_err().to_string().contains("high_freq_factor"));
}

#[test]
fn grouped_query_attention_matches_pytorch_enable_gqa() {
    let fx = fixture();
    let get = |k: &str| fx.get(k).unwrap().clone();
    let r = get("gqa_r");
    for (tag, args) in
        [("gqa", SdpaArgs::default().mask(get("gqa_mask"))), ("gqa_causal", SdpaArgs::default().causal())]
    {
        let (q, k, v) = (Var::param(get("gqa_q")), Var::param(get("gqa_k")), Var::param(get("gqa_v")));
        let out = grouped_query_attention(&q, &k, &v, &args).unwrap();
        assert!(max_diff(&out.value(), &get(&format!("{tag}_out"))) < 1e-12, "{tag} output");
        out.mul(&Var::new(r.clone())).unwrap().sum_all().backward().unwrap();
        for (name, x) in [("dq", &q), ("dk", &k), ("dv", &v)] {
            let d = max_diff(&x.grad().unwrap(), &get(&format!("{tag}_{name}")));
            assert!(d < 1e-12, "{tag} {name}: {d}");
        }
    }
}

#[test]
fn grouped_query_attention_equals_attention_over_repeated_heads() {
    // A per-head mask [b, heads, L, S] too, against sdpa over keys repeated per group.
    let q = Var::new(normal(10, &[1, 4, 3, 2]));
    let k = Var::new(normal(11, &[1, 2, 3, 2]));
    let v = Var::new(normal(12, &[1, 2, 3, 2]));
    let mask = Tensor::from_vec((0..36).map(|i| u8::from(i % 3 != 1)).collect::<Vec<_>>(), [1, 4, 3, 3]).unwrap();
    let args = SdpaArgs::default().mask(mask);
    let repeat = |x: &Var| {
        let parts: Vec<Var> = (0..4).map(|h| x.narrow(1, h / 2, 1).unwrap()).collect();
        Var::cat(&parts.iter().collect::<Vec<_>>(), 1).unwrap()
    };
    let got = grouped_query_attention(&q, &k, &v, &args).unwrap();
    let want = scaled_dot_product_attention(&q, &repeat(&k), &repeat(&v), &args).unwrap();
    assert!(max_diff(&got.value(), &want.value()) < 1e-12);
    let bad = Var::new(normal(13, &[1, 3, 3, 2]));
    let err = grouped_query_attention(&bad, &k, &v, &SdpaArgs::default()).unwrap_err().to_string();
    assert!(err.contains("3 query heads") && err.contains("2 key/value heads"), "{err}");
}

#[test]
fn grouped_query_attention_gradients() {
    let mask = Tensor::from_vec((0..24).map(|i| u8::from(i % 4 != 2)).collect::<Vec<_>>(), [2, 1, 3, 4]).unwrap();
    let xs = [normal(20, &[2, 4, 3, 2]), normal(21, &[2, 2, 4, 2]), normal(22, &[2, 2, 4, 3])];
    let masked = SdpaArgs::default().mask(mask);
    check_both("gqa, bool mask", |v: &[Var]| grouped_query_attention(&v[0], &v[1], &v[2], &masked), &xs, 23);
    let xs = [normal(24, &[1, 6, 4, 2]), normal(25, &[1, 1, 4, 2]), normal(26, &[1, 1, 4, 2])];
    let causal = SdpaArgs::default().causal();
    check_both("mqa, causal", |v: &[Var]| grouped_query_attention(&v[0], &v[1], &v[2], &causal), &xs, 27);
}

#[test]
fn swiglu_gradients_and_value() {
    // Parameters as inputs, so that their gradients are checked too.
    let op = |v: &[Var]| {
        let lin = |w: &Var| Linear::from_params(w.clone(), None).unwrap();
        SwiGlu::from_parts(lin(&v[1]), lin(&v[2]), lin(&v[3])).forward(&v[0])
    };
    let xs = [normal(30, &[2, 3]), normal(31, &[4, 3]), normal(32, &[4, 3]), normal(33, &[3, 4])];
    check_both("SwiGlu", op, &xs, 34);
    // down(silu(gate x) * up x), by hand.
    let vars: Vec<Var> = xs.iter().map(|t| Var::new(t.clone())).collect();
    let got = op(&vars).unwrap().value();
    let gate = xs[0].matmul(&xs[1].t().unwrap()).unwrap();
    let up = xs[0].matmul(&xs[2].t().unwrap()).unwrap();
    let silu = gate.mul(&gate.sigmoid()).unwrap();
    let want = silu.mul(&up).unwrap().matmul(&xs[3].t().unwrap()).unwrap();
    assert!(max_diff(&got, &want) < 1e-12);
}
