//! Random tensors: ranges, moments, permutations and reproducibility under `manual_seed`.
//!
//! The generator is global, so every test here holds one lock while it seeds and draws: in
//! this binary no other test can draw between a `manual_seed` and the draws it should fix.

use ember_tensor::{DType, Tensor, manual_seed};
use parking_lot::{Mutex, MutexGuard};

static GENERATOR: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    GENERATOR.lock()
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[test]
fn rand_is_in_the_half_open_unit_interval() {
    let _g = exclusive();
    manual_seed(1);
    let r = Tensor::rand([100_000]).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    let v = r.to_vec::<f32>().unwrap();
    assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)), "a sample outside [0, 1)");
    let (mean, std) = mean_std(&v.iter().map(|&x| x as f64).collect::<Vec<_>>());
    // Uniform on [0, 1): mean 1/2, standard deviation 1/sqrt(12); 1e5 samples put the
    // estimates within a few thousandths.
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    assert!((std - 12f64.sqrt().recip()).abs() < 0.01, "std {std}");
    for dt in [DType::F32, DType::F64] {
        let u = Tensor::uniform([10_000], -2.0, 3.0, dt).unwrap().to_vec_f64().unwrap();
        assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
    }
}

#[test]
fn randn_has_unit_moments() {
    let _g = exclusive();
    manual_seed(2);
    for dt in [DType::F32, DType::F64] {
        let v = Tensor::normal([100_000], 0.0, 1.0, dt).unwrap().to_vec_f64().unwrap();
        let (mean, std) = mean_std(&v);
        assert!(mean.abs() < 0.02, "{dt}: mean {mean}");
        assert!((std - 1.0).abs() < 0.02, "{dt}: std {std}");
    }
    let v = Tensor::normal([100_000], 3.0, 0.5, DType::F64).unwrap().to_vec_f64().unwrap();
    let (mean, std) = mean_std(&v);
    assert!((mean - 3.0).abs() < 0.01 && (std - 0.5).abs() < 0.01, "mean {mean}, std {std}");
    assert_eq!(Tensor::randn([4, 5]).unwrap().shape(), &[4, 5]);
}

#[test]
fn randperm_is_a_permutation() {
    let _g = exclusive();
    manual_seed(3);
    for n in [0usize, 1, 2, 10, 1000] {
        let p = Tensor::randperm(n).unwrap();
        assert_eq!(p.dtype(), DType::I64);
        let mut v = p.to_vec::<i64>().unwrap();
        v.sort_unstable();
        assert_eq!(v, (0..n as i64).collect::<Vec<_>>());
    }
    // Not the identity (a 1000-element shuffle is the identity with probability 1/1000!).
    let p = Tensor::randperm(1000).unwrap().to_vec::<i64>().unwrap();
    assert!(p.iter().enumerate().any(|(i, &v)| v != i as i64));
}

#[test]
fn manual_seed_reproduces_every_draw() {
    let _g = exclusive();
    let draw = || {
        (
            Tensor::rand([50]).unwrap().to_vec::<f32>().unwrap(),
            Tensor::randn([50]).unwrap().to_vec::<f32>().unwrap(),
            Tensor::normal([50], 1.0, 2.0, DType::F64).unwrap().to_vec::<f64>().unwrap(),
            Tensor::randperm(50).unwrap().to_vec::<i64>().unwrap(),
            Tensor::uniform([50], -1.0, 1.0, DType::F64).unwrap().to_vec::<f64>().unwrap(),
        )
    };
    manual_seed(42);
    let a = draw();
    manual_seed(42);
    let b = draw();
    assert_eq!(a, b);
    manual_seed(43);
    let c = draw();
    assert_ne!(a.0, c.0);
    assert_ne!(a.3, c.3);
    // The stream continues rather than restarting: a second draw differs from the first.
    manual_seed(42);
    let _ = draw();
    assert_ne!(draw().0, a.0);
}
