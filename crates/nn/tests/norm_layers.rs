//! The normalization layers and `Dropout2d` as modules: state dict names and dtypes, load
//! round trips (in memory and through safetensors), training versus evaluation, and the
//! errors for inputs they cannot take.

use ember_autograd::Var;
use ember_nn::functional as F;
use ember_nn::{
    BatchNorm1d, BatchNorm2d, BatchNormOptions, Dropout2d, GroupNorm, InstanceNorm2d, InstanceNormOptions, Module,
    RMSNorm, load_safetensors, save_safetensors,
};
use ember_tensor::{DType, Tensor};

fn input(shape: &[usize]) -> Var {
    Var::new(Tensor::randn(shape.to_vec()).unwrap())
}

#[test]
fn batch_norm_state_dict_has_pytorch_names_and_dtypes() {
    let _rng = ember_testing::gradcheck::seed_guard(10);
    let bn = BatchNorm2d::new(4).unwrap();
    let state = bn.state_dict();
    assert_eq!(
        state.keys().collect::<Vec<_>>(),
        ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    );
    for key in ["weight", "bias", "running_mean", "running_var"] {
        let t = state.get(key).unwrap();
        assert_eq!((t.shape().dims(), t.dtype()), (&[4][..], DType::F32), "{key}");
    }
    let nbt = state.get("num_batches_tracked").unwrap();
    assert_eq!((nbt.rank(), nbt.dtype()), (0, DType::I64));
    assert_eq!(state.get("running_var").unwrap().to_vec::<f32>().unwrap(), vec![1.0; 4]);
    let plain = BatchNorm1d::with_options(
        3,
        BatchNormOptions { affine: false, track_running_stats: false, ..Default::default() },
    )
    .unwrap();
    assert!(plain.state_dict().is_empty());
    let inst = InstanceNorm2d::with_options(2, InstanceNormOptions { track_running_stats: true, ..Default::default() })
        .unwrap();
    assert_eq!(inst.state_dict().keys().collect::<Vec<_>>(), ["running_mean", "running_var", "num_batches_tracked"]);
    assert_eq!(GroupNorm::new(2, 4).unwrap().state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
    assert_eq!(RMSNorm::new(&[3]).unwrap().state_dict().keys().collect::<Vec<_>>(), ["weight"]);
}

#[test]
fn batch_norm_training_updates_running_stats_and_eval_uses_them() {
    let _rng = ember_testing::gradcheck::seed_guard(1);
    let bn = BatchNorm2d::new(3).unwrap();
    let x = input(&[4, 3, 2, 2]);
    bn.forward(&x).unwrap();
    bn.forward(&x).unwrap();
    assert_eq!(bn.num_batches_tracked().unwrap().to_scalar::<i64>().unwrap(), 2);
    let mean = x.value().mean(&[0, 2, 3][..], false).unwrap().to_vec::<f32>().unwrap();
    let running = bn.running_mean().unwrap().to_vec::<f32>().unwrap();
    for (r, m) in running.iter().zip(&mean) {
        // Two steps of momentum 0.1 from zero: 0.1 m + 0.09 m.
        assert!((r - 0.19 * m).abs() < 1e-6, "{r} vs {m}");
    }
    bn.eval();
    let y = bn.forward(&x).unwrap().value();
    let rv = bn.running_var().unwrap();
    let want = x
        .value()
        .sub(&bn.running_mean().unwrap().reshape([1, 3, 1, 1]).unwrap())
        .unwrap()
        .div(&rv.add_scalar(1e-5).sqrt().reshape([1, 3, 1, 1]).unwrap())
        .unwrap();
    for (a, b) in y.to_vec::<f32>().unwrap().iter().zip(want.to_vec::<f32>().unwrap()) {
        assert!((a - b).abs() < 1e-5);
    }
    // Evaluation leaves the statistics alone.
    bn.forward(&x).unwrap();
    assert_eq!(bn.num_batches_tracked().unwrap().to_scalar::<i64>().unwrap(), 2);
    assert_eq!(bn.running_mean().unwrap().to_vec::<f32>().unwrap(), running);
}

#[test]
fn load_state_dict_and_safetensors_round_trip() {
    let _rng = ember_testing::gradcheck::seed_guard(2);
    let a = BatchNorm2d::new(3).unwrap();
    for _ in 0..3 {
        a.forward(&input(&[2, 3, 2, 2])).unwrap();
    }
    let b = BatchNorm2d::new(3).unwrap();
    b.load_state_dict(&a.state_dict()).unwrap();
    let path = std::env::temp_dir().join(format!("ember_norm_layers_{}.safetensors", std::process::id()));
    save_safetensors(&path, &a.state_dict()).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let c = BatchNorm2d::new(3).unwrap();
    c.load_state_dict(&loaded).unwrap();
    for other in [&b, &c] {
        for ((ka, ta), (kb, tb)) in a.state_dict().iter().zip(other.state_dict().iter()) {
            assert_eq!(ka, kb);
            assert_eq!(ta.dtype(), tb.dtype(), "{ka}");
            assert_eq!(
                ta.to_dtype(DType::F64).to_vec::<f64>().unwrap(),
                tb.to_dtype(DType::F64).to_vec::<f64>().unwrap()
            );
        }
    }
    assert_eq!(c.num_batches_tracked().unwrap().to_scalar::<i64>().unwrap(), 3);
}

#[test]
fn errors_name_the_op_and_the_shapes() {
    let _rng = ember_testing::gradcheck::seed_guard(11);
    let msg = |e: ember_tensor::Error| e.to_string();
    let bn2 = BatchNorm2d::new(3).unwrap();
    let e = msg(bn2.forward(&input(&[2, 3, 4])).unwrap_err());
    assert!(e.contains("BatchNorm2d") && e.contains("expected 4D input") && e.contains("[2, 3, 4]"), "{e}");
    let e = msg(bn2.forward(&input(&[2, 5, 2, 2])).unwrap_err());
    assert!(e.contains("BatchNorm2d") && e.contains("[2, 5, 2, 2]"), "{e}");
    let bn1 = BatchNorm1d::new(3).unwrap();
    let e = msg(bn1.forward(&input(&[1, 3])).unwrap_err());
    assert!(e.contains("Expected more than 1 value per channel when training") && e.contains("[1, 3]"), "{e}");
    bn1.eval();
    assert!(bn1.forward(&input(&[1, 3])).is_ok());
    let e = msg(bn1.forward(&input(&[2, 3, 2, 2])).unwrap_err());
    assert!(e.contains("expected 2D or 3D input"), "{e}");
    let e = msg(F::group_norm(&input(&[2, 6, 3]), 4, None, None, 1e-5).unwrap_err());
    assert!(e.contains("group_norm") && e.contains("divisible by num_groups") && e.contains("[2, 6, 3]"), "{e}");
    assert!(GroupNorm::new(4, 6).is_err());
    let w = Var::new(Tensor::ones([4], DType::F32).unwrap());
    let e = msg(F::batch_norm(&input(&[2, 3]), None, None, Some(&w), None, true, 0.1, 1e-5).unwrap_err());
    assert!(e.contains("batch_norm") && e.contains("weight") && e.contains("[4]"), "{e}");
    let e = msg(F::instance_norm(&input(&[2, 3, 1]), None, None, None, None, true, 0.1, 1e-5).unwrap_err());
    assert!(e.contains("more than 1 spatial element"), "{e}");
    let e = msg(InstanceNorm2d::new(3).unwrap().forward(&input(&[2, 3])).unwrap_err());
    assert!(e.contains("InstanceNorm2d") && e.contains("expected 3D or 4D input"), "{e}");
    let e = msg(RMSNorm::new(&[4]).unwrap().forward(&input(&[2, 3])).unwrap_err());
    assert!(e.contains("rms_norm") && e.contains("[2, 3]"), "{e}");
    let e = msg(F::dropout2d(&input(&[2, 3]), 0.5, true).unwrap_err());
    assert!(e.contains("dropout2d") && e.contains("[2, 3]"), "{e}");
}

#[test]
fn untracked_batch_norm_uses_batch_statistics_in_eval() {
    let _rng = ember_testing::gradcheck::seed_guard(12);
    let bn =
        BatchNorm2d::with_options(2, BatchNormOptions { track_running_stats: false, ..Default::default() }).unwrap();
    let x = input(&[3, 2, 2, 2]);
    let train = bn.forward(&x).unwrap().value().to_vec::<f32>().unwrap();
    bn.eval();
    assert_eq!(bn.forward(&x).unwrap().value().to_vec::<f32>().unwrap(), train);
}

#[test]
fn dropout2d_zeroes_whole_channels_with_the_right_rate_and_scale() {
    let _rng = ember_testing::gradcheck::seed_guard(3);
    let drop = Dropout2d::new(0.3).unwrap();
    let (n, c, plane) = (50, 40, 6);
    let y = drop.forward(&Var::new(Tensor::ones([n, c, 2, 3], DType::F32).unwrap())).unwrap();
    let v = y.value().to_vec::<f32>().unwrap();
    let mut dropped = 0;
    for ch in v.chunks(plane) {
        assert!(ch.iter().all(|&x| x == ch[0]), "a channel was partly dropped: {ch:?}");
        if ch[0] == 0.0 {
            dropped += 1;
        } else {
            assert!((ch[0] - 1.0 / 0.7).abs() < 1e-6);
        }
    }
    let rate = dropped as f64 / (n * c) as f64;
    assert!((rate - 0.3).abs() < 0.04, "dropped {rate}");
    // Unbatched [C, H, W] inputs drop channels too.
    let y = F::dropout2d(&Var::new(Tensor::ones([200, 2, 2], DType::F64).unwrap()), 0.5, true).unwrap();
    let v = y.value().to_vec::<f64>().unwrap();
    assert!(v.chunks(4).all(|ch| ch.iter().all(|&x| x == ch[0]) && (ch[0] == 0.0 || ch[0] == 2.0)));
    // The identity in evaluation.
    drop.eval();
    let x = input(&[2, 3, 2, 2]);
    assert!(drop.forward(&x).unwrap().same_node(&x));
}

#[test]
fn layers_print_like_pytorch() {
    let _rng = ember_testing::gradcheck::seed_guard(13);
    assert_eq!(
        format!("{:?}", BatchNorm2d::new(16).unwrap()),
        "BatchNorm2d(16, eps=1e-5, momentum=0.1, affine=true, track_running_stats=true)"
    );
    assert_eq!(format!("{:?}", GroupNorm::new(2, 4).unwrap()), "GroupNorm(2, 4, eps=1e-5, affine=true)");
    assert_eq!(format!("{:?}", RMSNorm::new(&[8]).unwrap()), "RMSNorm((8,), eps=None, elementwise_affine=true)");
}
