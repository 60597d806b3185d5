//! Every public `Tensor` op computed on the CPU and on `Device::Cuda(0)` from the same
//! inputs, the results downloaded and compared.
//!
//! Inputs follow from fixed seeds (a hash of the position, not the global generator, so
//! that tests running in parallel cannot change them) and are laid out on each device the
//! same way: contiguous, transposed, sliced with a step, expanded (stride 0) or read at an
//! offset. Results must agree in dtype, shape and device (a device op answers on the
//! device) and in value: exactly for integer, `u8` and data-movement ops, within a
//! tolerance for float arithmetic (see `mod tol` for why each). An op that fails on the CPU
//! must fail on the device too, and the other way round.
//!
//! Each test gathers all its mismatches and fails once listing them, each naming the op,
//! shapes, dtype and layout: the device run is short and rare, so one run must say
//! everything that is wrong. Without a device each test prints one line saying why and
//! returns.

use ember_tensor::backend::backend_for;
use ember_tensor::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use ember_tensor::random::Distribution;
use ember_tensor::{
    Attention, AvgPoolArgs, ClassLoss, ClassScores, ConvArgs, ConvTransposeArgs, DType, Device, InterpolateArgs,
    InterpolateMode, Layout, LossReduction, MaxPoolArgs, Padding, Result, Shape, Tensor, UnaryOp, UnfoldArgs, bf16,
    f16, manual_seed,
};
use ember_testing::cuda::{CPU, Parity, Tol, device, ints, mix, uniform};
use ember_testing::elementwise::{BINARY, UNARY};
use ember_testing::require_cuda;
use parking_lot::Mutex;

const DTYPES: [DType; 4] = [DType::U8, DType::I64, DType::F32, DType::F64];
const FLOATS: [DType; 2] = [DType::F32, DType::F64];

// ---------------------------------------------------------------------------------------
// Tolerances
// ---------------------------------------------------------------------------------------

/// How close a device result must be to the CPU's, per kind of op: `(abs, rel)` for `f32`
/// and for `f64` results (integer and `u8` results are always compared exactly).
mod tol {
    use ember_testing::cuda::Tol;

    /// Data movement, selection, casts, comparisons and exactly rounded IEEE operations
    /// with one rounding per element: the bits must be the same on any device.
    pub const EXACT: Tol = Tol::EXACT;
    /// Elementwise functions: the device's libm and ember's vectorised CPU functions each
    /// miss the correctly rounded result by a few ulps (an f32 ulp is 1.2e-7 relative, an
    /// f64 one 2.2e-16), and fused multiply-adds round once where the CPU may round twice.
    /// The absolute part covers results near a zero of the function (sin near pi, log
    /// near 1), where a few ulps of the O(1) intermediate are a large relative error.
    pub const ELEMENTWISE: Tol = Tol::new((1e-6, 2e-6), (1e-13, 1e-12));
    /// Sums, means, norms and softmax: a device adds in a different order (trees of
    /// partial sums across threads), so each result carries rounding of order
    /// `sqrt(n) * ulp * sum|x|`; the inputs here are O(1) with at most a few hundred
    /// elements per reduction.
    pub const REDUCTION: Tol = Tol::new((1e-4, 1e-5), (1e-12, 1e-11));
    /// Matrix products, convolutions, attention, and normalisation over thousands of
    /// elements: cuBLAS blocks and orders the dot products its own way. With O(1) inputs
    /// and inner dimensions up to 400 a result is O(40) with rounding of order 1e-4 either
    /// way. The bound still catches TF32 (10-bit mantissa), which ember's f32 matmul must not
    /// use and which would miss by 1e-2.
    pub const MATMUL: Tol = Tol::new((1e-3, 1e-4), (1e-11, 1e-11));
    /// Chains of elementwise functions whose ulp differences compound: optimizer steps (and
    /// their state after several steps, where divisions by `sqrt(v) + eps` amplify earlier
    /// differences) and LSTM cells (gates through sigmoid and tanh, multiplied together).
    pub const CHAINED: Tol = Tol::new((1e-5, 1e-5), (1e-12, 1e-11));
    /// The LSTM sequence and its backward: each result carries the rounding of a chain of
    /// T recurrent products (4H terms each in the backward), so a device that sums the
    /// products in another order than ember's CPU rounds differently, not worse. Against an
    /// f64 run of the T=28, B=64, H=128 case (results up to 27 in magnitude), ember's CPU
    /// backend in f32 is off by up to 2.7e-5 and LibTorch's by up to 2.9e-5, with both
    /// f64 runs agreeing to 5e-14: two f32 devices may differ by the sum of their errors.
    pub const RECURRENT: Tol = Tol::new((6e-5, 1e-5), (1e-12, 1e-11));
}

// ---------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------

/// How an input is stored on each device.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lay {
    /// Row-major.
    Contiguous,
    /// The last two dimensions swapped in memory, read through a transpose.
    Transposed,
    /// Every other row of a buffer twice as tall (`slice` with step 2).
    Stepped,
    /// The first dimension broadcast from extent 1 (stride 0).
    Expanded,
    /// A contiguous view that starts 3 elements into its storage.
    Offset,
}

const LAYS: [Lay; 5] = [Lay::Contiguous, Lay::Transposed, Lay::Stepped, Lay::Expanded, Lay::Offset];

impl Lay {
    /// Whether the layout makes sense for a tensor of `rank` dimensions.
    fn fits(self, rank: usize) -> bool {
        match self {
            Lay::Contiguous | Lay::Offset => true,
            Lay::Stepped | Lay::Expanded => rank >= 1,
            Lay::Transposed => rank >= 2,
        }
    }
}

/// A contiguous CPU tensor of `shape` and `dtype` from `seed`: floats in `[-2.5, 2.5)`,
/// `i64` in `-12..=12` (ties and zeros included), `u8` in `0..=24`.
fn host(seed: u64, shape: &[usize], dtype: DType) -> Tensor {
    let n = shape.iter().product();
    let v = uniform(seed, n);
    let t = match dtype {
        DType::F32 => Tensor::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape),
        DType::F64 => Tensor::from_vec(v, shape),
        DType::F16 | DType::BF16 => Tensor::from_vec(v, shape).map(|t| t.to_dtype(dtype)),
        DType::I64 => Tensor::from_vec(v.iter().map(|&x| (x * 5.0).round() as i64).collect::<Vec<_>>(), shape),
        DType::U8 => Tensor::from_vec(v.iter().map(|&x| ((x + 2.5) * 5.0) as u8).collect::<Vec<_>>(), shape),
    };
    t.unwrap()
}

/// An input of `shape` and `dtype` from `seed`, stored on `dev` as `lay` says. The same
/// arguments give the same values on every device.
fn input(seed: u64, shape: &[usize], dtype: DType, lay: Lay, dev: Device) -> Tensor {
    let r = shape.len();
    match lay {
        Lay::Contiguous => host(seed, shape, dtype).to_device(dev).unwrap(),
        Lay::Transposed => {
            let mut s = shape.to_vec();
            s.swap(r - 2, r - 1);
            host(seed, &s, dtype).to_device(dev).unwrap().transpose(r - 2, r - 1).unwrap()
        }
        Lay::Stepped => {
            let mut s = shape.to_vec();
            s[0] *= 2;
            host(seed, &s, dtype).to_device(dev).unwrap().slice(0, 0, s[0], 2).unwrap()
        }
        Lay::Expanded => {
            let mut s = shape.to_vec();
            s[0] = 1;
            host(seed, &s, dtype).to_device(dev).unwrap().expand(shape).unwrap()
        }
        Lay::Offset => {
            let n: usize = shape.iter().product();
            let flat = host(seed, &[n + 3], dtype).to_device(dev).unwrap();
            flat.narrow(0, 3, n).unwrap().reshape(shape).unwrap()
        }
    }
}

/// A contiguous input on `dev`.
fn inp(seed: u64, shape: &[usize], dtype: DType, dev: Device) -> Tensor {
    input(seed, shape, dtype, Lay::Contiguous, dev)
}

/// Exact float data (`f32` or `f64`) on `dev`.
fn floats(data: &[f64], shape: &[usize], dtype: DType, dev: Device) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape).unwrap().to_dtype(dtype).to_device(dev).unwrap()
}

/// Shapes for elementwise ops: 0-d, empty, one element, odd lengths, several blocks of a
/// GPU grid.
const SHAPES: &[&[usize]] = &[&[], &[0], &[1], &[7], &[3, 5], &[2, 0, 3], &[4, 3, 5], &[2, 3, 4, 5], &[67, 131]];

/// Every combination of shape, layout and dtype.
fn cases(shapes: &[&'static [usize]], dtypes: &[DType]) -> Vec<(&'static [usize], Lay, DType)> {
    let mut v = Vec::new();
    for &s in shapes {
        for lay in LAYS {
            if lay.fits(s.len()) {
                for &dt in dtypes {
                    v.push((s, lay, dt));
                }
            }
        }
    }
    v
}

fn one(t: Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![t])
}

// ---------------------------------------------------------------------------------------
// Moving data
// ---------------------------------------------------------------------------------------

#[test]
fn upload_download_round_trip() {
    require_cuda!();
    let mut p = Parity::new("upload_download_round_trip");
    for (s, lay, dt) in cases(SHAPES, &DTYPES) {
        p.check(format!("to_device {s:?} {dt} {lay:?}"), tol::EXACT, |d| one(input(1, s, dt, lay, d)));
        p.check(format!("contiguous {s:?} {dt} {lay:?}"), tol::EXACT, |d| one(input(1, s, dt, lay, d).contiguous()));
    }
    // Values the conversions must carry bit for bit.
    let special = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e30, -1e-30, 3.5];
    for dt in FLOATS {
        p.check(format!("to_device special values {dt}"), tol::EXACT, |d| one(floats(&special, &[8], dt, d)));
    }
    p.check("to_device i64 extremes", tol::EXACT, |d| {
        one(ints(&[i64::MIN, -1, 0, 1, i64::MAX, (1 << 53) + 1], &[6], d)?)
    });
    p.finish();
}

#[test]
fn mixing_devices_is_an_error() {
    require_cuda!();
    let mut p = Parity::new("mixing_devices_is_an_error");
    // Only the device side can mix; the CPU run computes the same op on one device, so this
    // checks the device run errors where the CPU computes.
    let both = |d: Device| -> Result<Vec<Tensor>> {
        let a = inp(1, &[3], DType::F32, d);
        let b = inp(2, &[3], DType::F32, CPU);
        one(a.add(&b)?)
    };
    p.check_device_error("add of a cuda:0 and a cpu tensor", both);
    p.finish();
}

#[test]
fn creation_and_reading_on_the_device() {
    require_cuda!();
    let mut p = Parity::new("creation_and_reading_on_the_device");
    for dt in DTYPES {
        for shape in [&[][..], &[0], &[3, 5], &[67, 131]] {
            p.check(format!("full_on and *_like {shape:?} {dt}"), tol::EXACT, |d| {
                let t = Tensor::full_on(shape, -7, dt, d)?;
                Ok(vec![t.zeros_like(), t.ones_like(), t.full_like(3.75)?, t.full_like(-1)?, t])
            });
        }
        // Reading values back through every accessor gives the CPU's numbers (compared as
        // tensors made on the host from what was read).
        p.check(format!("to_vec / to_vec2 / item / to_scalar {dt}"), tol::EXACT, |d| {
            let t = input(5, &[3, 4], dt, Lay::Transposed, d);
            let flat = Tensor::from_vec(t.to_vec_f64()?, [12])?;
            let rows = t.to_dtype(DType::F64).to_vec2::<f64>()?.concat();
            let first = t.select(0, 1)?.select(0, 2)?;
            let scalars = vec![first.item()?, first.to_dtype(DType::F64).to_scalar::<f64>()?];
            [flat, Tensor::from_vec(rows, [12])?, Tensor::from_vec(scalars, [2])?]
                .into_iter()
                .map(|t| t.to_device(d))
                .collect::<Result<Vec<_>>>()
        });
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------

#[test]
fn unary_ops() {
    require_cuda!();
    let mut p = Parity::new("unary_ops");
    for case in UNARY {
        for (s, lay, dt) in cases(SHAPES, &DTYPES) {
            // Integer tensors run the ops that keep their dtype or compute in f32; the table's
            // other closures may unwrap an error that integers give.
            if dt.is_int() && case.int_reference.is_none() && !case.op.is_float_only() {
                continue;
            }
            p.check(format!("{} {s:?} {dt} {lay:?}", case.name), tol::ELEMENTWISE, |d| {
                one((case.tensor)(&input(10, s, dt, lay, d)))
            });
        }
    }
    p.finish();
}

#[test]
fn unary_ops_in_place() {
    require_cuda!();
    let mut p = Parity::new("unary_ops_in_place");
    for case in UNARY {
        for (s, lay, dt) in cases(&[&[], &[7], &[4, 3, 5]], &FLOATS) {
            if lay == Lay::Expanded {
                continue; // writing through stride 0 is refused on both; checked below
            }
            p.check(format!("apply_({}) {s:?} {dt} {lay:?}", case.name), tol::ELEMENTWISE, |d| {
                let t = input(11, s, dt, lay, d);
                t.apply_(case.op)?;
                one(t)
            });
        }
    }
    p.check("apply_(exp) on an expanded view", tol::EXACT, |d| {
        let t = input(11, &[4, 3], DType::F32, Lay::Expanded, d);
        t.apply_(UnaryOp::Exp)?;
        one(t)
    });
    p.finish();
}

#[test]
fn unary_special_values() {
    require_cuda!();
    let mut p = Parity::new("unary_special_values");
    // Subnormals are left out: ember flushes them on the CPU by default (docs/design.md,
    // "Subnormal numbers") and this test is about the IEEE special cases.
    let special =
        [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.0, -1.0, 0.5, -0.5, 88.8, -104.0, 710.0, 1e-3];
    for case in UNARY {
        for dt in FLOATS {
            p.check(format!("{} special values {dt}", case.name), tol::ELEMENTWISE, |d| {
                one((case.tensor)(&floats(&special, &[special.len()], dt, d)))
            });
        }
    }
    p.finish();
}

#[test]
fn scalar_ops_clamp_and_pow() {
    require_cuda!();
    let mut p = Parity::new("scalar_ops_clamp_and_pow");
    type Op = (&'static str, fn(&Tensor) -> Result<Tensor>);
    let ops: &[Op] = &[
        ("add_scalar(2.5)", |t| Ok(t.add_scalar(2.5))),
        ("add_scalar(3i64)", |t| Ok(t.add_scalar(3))),
        ("sub_scalar(1.5)", |t| Ok(t.sub_scalar(1.5))),
        ("rsub_scalar(4)", |t| Ok(t.rsub_scalar(4))),
        ("mul_scalar(-2.25)", |t| Ok(t.mul_scalar(-2.25))),
        ("mul_scalar(3i64)", |t| Ok(t.mul_scalar(3))),
        ("div_scalar(3)", |t| Ok(t.div_scalar(3.0))),
        ("div_scalar(2i64)", |t| Ok(t.div_scalar(2))),
        ("rdiv_scalar(1.5)", |t| Ok(t.rdiv_scalar(1.5))),
        ("pow_scalar(2)", |t| t.pow_scalar(2.0)),
        ("pow_scalar(3i64)", |t| t.pow_scalar(3)),
        ("pow_scalar(0.5)", |t| t.pow_scalar(0.5)),
        ("pow_scalar(-1i64)", |t| t.pow_scalar(-1)),
        ("rpow_scalar(2)", |t| Ok(t.rpow_scalar(2.0))),
        ("maximum_scalar(0.5)", |t| Ok(t.maximum_scalar(0.5))),
        ("minimum_scalar(1i64)", |t| Ok(t.minimum_scalar(1))),
        ("clamp(-1, 1)", |t| Ok(t.clamp(Some(-1.0), Some(1.0)))),
        ("clamp(-0.5, none)", |t| Ok(t.clamp(Some(-0.5), None))),
        ("clamp(none, 2)", |t| Ok(t.clamp(None, Some(2.0)))),
        ("clamp(3, -3)", |t| Ok(t.clamp(Some(3.0), Some(-3.0)))),
        ("clamp(-300, 1e30)", |t| Ok(t.clamp(Some(-300.0), Some(1e30)))),
        ("logical_not", |t| Ok(t.logical_not())),
        ("neg operator", |t| Ok(-t)),
    ];
    for (name, f) in ops {
        for (s, lay, dt) in cases(&[&[], &[0], &[7], &[4, 3, 5], &[67, 131]], &DTYPES) {
            p.check(format!("{name} {s:?} {dt} {lay:?}"), tol::ELEMENTWISE, |d| one(f(&input(12, s, dt, lay, d))?));
        }
    }
    p.finish();
}

/// Operand shape pairs that broadcast (and one that does not).
const BROADCAST: &[(&[usize], &[usize])] = &[
    (&[3, 4], &[3, 4]),
    (&[3, 1], &[1, 4]),
    (&[2, 3, 4], &[4]),
    (&[], &[3]),
    (&[5], &[]),
    (&[0, 3], &[1, 3]),
    (&[2, 1, 4], &[3, 1]),
    (&[67, 131], &[131]),
    (&[3], &[4]),
];

/// Same-dtype pairs and pairs that promote.
const DTYPE_PAIRS: &[(DType, DType)] = &[
    (DType::U8, DType::U8),
    (DType::I64, DType::I64),
    (DType::F32, DType::F32),
    (DType::F64, DType::F64),
    (DType::U8, DType::F32),
    (DType::I64, DType::F64),
    (DType::I64, DType::F32),
    (DType::U8, DType::I64),
    (DType::F32, DType::F64),
];

#[test]
fn binary_ops_with_broadcasting() {
    require_cuda!();
    let mut p = Parity::new("binary_ops_with_broadcasting");
    for case in BINARY {
        for &(sa, sb) in BROADCAST {
            for &(da, db) in DTYPE_PAIRS {
                for lay in [Lay::Contiguous, Lay::Transposed, Lay::Stepped, Lay::Offset] {
                    if !lay.fits(sa.len()) {
                        continue;
                    }
                    p.check(format!("{} {sa:?} {da} {lay:?} with {sb:?} {db}", case.name), tol::ELEMENTWISE, |d| {
                        one((case.tensor)(&input(20, sa, da, lay, d), &input(21, sb, db, Lay::Contiguous, d))?)
                    });
                }
            }
        }
    }
    // Division by zero and the operators.
    for dt in DTYPES {
        p.check(format!("div by zero {dt}"), tol::ELEMENTWISE, |d| {
            let a = input(22, &[6], dt, Lay::Contiguous, d);
            one(a.div(&a.zeros_like())?)
        });
        p.check(format!("operators + - * / {dt}"), tol::ELEMENTWISE, |d| {
            let a = input(23, &[3, 4], dt, Lay::Transposed, d);
            let b = input(24, &[4], dt, Lay::Contiguous, d);
            Ok(vec![(&a + &b)?, (&a - &b)?, (&a * &b)?, (&a / &b)?])
        });
    }
    p.finish();
}

#[test]
fn comparisons_and_where() {
    require_cuda!();
    let mut p = Parity::new("comparisons_and_where");
    type Cmp = (&'static str, fn(&Tensor, &Tensor) -> Result<Tensor>, fn(&Tensor) -> Tensor);
    let ops: &[Cmp] = &[
        ("eq", |a, b| a.eq(b), |a| a.eq_scalar(1)),
        ("ne", |a, b| a.ne(b), |a| a.ne_scalar(0.5)),
        ("lt", |a, b| a.lt(b), |a| a.lt_scalar(0)),
        ("le", |a, b| a.le(b), |a| a.le_scalar(-1.5)),
        ("gt", |a, b| a.gt(b), |a| a.gt_scalar(2)),
        ("ge", |a, b| a.ge(b), |a| a.ge_scalar(0.1)),
    ];
    for (name, f, fs) in ops {
        for &(sa, sb) in BROADCAST {
            for &(da, db) in DTYPE_PAIRS {
                p.check(format!("{name} {sa:?} {da} with {sb:?} {db}"), tol::EXACT, |d| {
                    // Integer-valued floats so that equality happens.
                    let a = input(30, sa, da, Lay::Contiguous, d).to_dtype(DType::I64).to_dtype(da);
                    let b = input(31, sb, db, Lay::Contiguous, d).to_dtype(DType::I64).to_dtype(db);
                    one(f(&a, &b)?)
                });
            }
        }
        for (s, lay, dt) in cases(&[&[], &[0], &[7], &[4, 3, 5]], &DTYPES) {
            p.check(format!("{name}_scalar {s:?} {dt} {lay:?}"), tol::EXACT, |d| one(fs(&input(32, s, dt, lay, d))));
        }
        p.check(format!("{name} with NaN"), tol::EXACT, |d| {
            let a = floats(&[f64::NAN, 1.0, f64::NAN, f64::INFINITY], &[4], DType::F32, d);
            let b = floats(&[f64::NAN, f64::NAN, 1.0, f64::INFINITY], &[4], DType::F32, d);
            Ok(vec![f(&a, &b)?, fs(&a)])
        });
    }
    for &(sa, sb) in BROADCAST {
        for dt in DTYPES {
            p.check(format!("where_cond {sa:?} {dt} with {sb:?}"), tol::EXACT, |d| {
                let cond = input(33, sa, DType::F32, Lay::Contiguous, d).gt_scalar(0.0);
                let a = input(34, sb, dt, Lay::Contiguous, d);
                let b = input(35, sa, dt, Lay::Contiguous, d);
                Ok(vec![
                    cond.where_cond(&a, &b)?,
                    cond.where_tensor_scalar(&a, 7)?,
                    cond.where_scalar_tensor(-2.5, &b)?,
                    cond.where_scalars(1, 0)?,
                ])
            });
        }
    }
    p.check("where_cond with a non-u8 condition", tol::EXACT, |d| {
        let c = inp(36, &[3], DType::F32, d);
        one(c.where_cond(&c, &c)?)
    });
    p.finish();
}

#[test]
fn casts_between_all_dtypes() {
    require_cuda!();
    let mut p = Parity::new("casts_between_all_dtypes");
    for (s, lay, from) in cases(SHAPES, &DTYPES) {
        for to in DTYPES {
            p.check(format!("{from} -> {to} {s:?} {lay:?}"), tol::EXACT, |d| {
                one(input(40, s, from, lay, d).to_dtype(to))
            });
        }
    }
    // Out-of-range, fractional and special values: `as` semantics (truncation toward zero,
    // saturation, NaN to 0) must hold on the device too.
    let wild = [
        -300.7,
        -1.5,
        -0.5,
        0.0,
        0.99,
        1.5,
        254.9,
        255.5,
        256.0,
        1e10,
        -1e19,
        1e19,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    for from in FLOATS {
        for to in DTYPES {
            p.check(format!("{from} -> {to} out-of-range values"), tol::EXACT, |d| {
                one(floats(&wild, &[wild.len()], from, d).to_dtype(to))
            });
        }
    }
    let big = [i64::MIN, -257, -1, 0, 255, 256, 1 << 24, (1 << 24) + 1, (1 << 53) + 1, i64::MAX];
    for to in DTYPES {
        p.check(format!("i64 -> {to} wide values"), tol::EXACT, |d| one(ints(&big, &[big.len()], d)?.to_dtype(to)));
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------

#[test]
fn reductions() {
    require_cuda!();
    let mut p = Parity::new("reductions");
    type Red = (&'static str, fn(&Tensor, &[i64], bool) -> Result<Tensor>);
    let ops: &[Red] = &[
        ("sum", |t, d, k| t.sum(d, k)),
        ("mean", |t, d, k| t.mean(d, k)),
        ("prod", |t, d, k| t.prod(d, k)),
        ("max", |t, d, k| t.max(d, k)),
        ("min", |t, d, k| t.min(d, k)),
        ("var", |t, d, k| t.var(d, true, k)),
        ("std(biased)", |t, d, k| t.std(d, false, k)),
        ("logsumexp", |t, d, k| t.logsumexp(d, k)),
    ];
    let shapes: &[(&[usize], &[&[i64]])] = &[
        (&[7], &[&[0], &[-1]]),
        (&[4, 3, 5], &[&[0], &[1], &[2], &[0, 2], &[-1, 0], &[0, 1, 2]]),
        (&[2, 3, 4, 5], &[&[1, 3], &[3]]),
        (&[0, 3], &[&[0], &[1]]),
        (&[33, 70], &[&[0], &[1]]),
    ];
    for (name, f) in ops {
        for &(s, dimsets) in shapes {
            for lay in LAYS {
                if !lay.fits(s.len()) {
                    continue;
                }
                for dt in DTYPES {
                    for &dims in dimsets {
                        for keep in [false, true] {
                            p.check(
                                format!("{name}({dims:?}, keepdim {keep}) {s:?} {dt} {lay:?}"),
                                tol::REDUCTION,
                                |d| one(f(&input(50, s, dt, lay, d), dims, keep)?),
                            );
                        }
                    }
                }
            }
        }
    }
    type All = (&'static str, fn(&Tensor) -> Result<Tensor>);
    let alls: &[All] = &[
        ("sum_all", |t| Ok(t.sum_all())),
        ("mean_all", |t| Ok(t.mean_all())),
        ("prod_all", |t| Ok(t.prod_all())),
        ("max_all", |t| t.max_all()),
        ("min_all", |t| t.min_all()),
        ("argmax_all", |t| t.argmax_all()),
        ("argmin_all", |t| t.argmin_all()),
        ("var_all", |t| Ok(t.var_all(true))),
        ("std_all", |t| Ok(t.std_all(false))),
    ];
    for (name, f) in alls {
        for (s, lay, dt) in cases(&[&[], &[0], &[1], &[7], &[4, 3, 5], &[67, 131]], &DTYPES) {
            // prod over thousands of O(1) floats under- or overflows the same way on both
            // but says nothing; integers wrap exactly.
            if *name == "prod_all" && dt.is_float() && s.iter().product::<usize>() > 100 {
                continue;
            }
            p.check(format!("{name} {s:?} {dt} {lay:?}"), tol::REDUCTION, |d| one(f(&input(51, s, dt, lay, d))?));
        }
    }
    p.finish();
}

#[test]
fn arg_reductions_pick_the_first_extreme() {
    require_cuda!();
    let mut p = Parity::new("arg_reductions_pick_the_first_extreme");
    // Small integers give many ties: the first index must win on both devices (PyTorch).
    for (s, lay, dt) in cases(&[&[7], &[4, 3, 5], &[2, 3, 4, 5], &[33, 70]], &DTYPES) {
        for dim in 0..s.len() as i64 {
            for keep in [false, true] {
                p.check(format!("argmax({dim}, keepdim {keep}) {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                    let t = input(52, s, dt, lay, d);
                    Ok(vec![t.argmax(dim, keep)?, t.argmin(dim, keep)?])
                });
            }
        }
    }
    for dt in FLOATS {
        p.check(format!("argmax/max with NaN {dt}"), tol::EXACT, |d| {
            let t = floats(&[1.0, f64::NAN, 3.0, 3.0, f64::NEG_INFINITY, 0.0, f64::INFINITY, f64::NAN], &[2, 4], dt, d);
            Ok(vec![t.argmax(1, false)?, t.argmin(1, false)?, t.max(1, false)?, t.min(0, true)?, t.argmax_all()?])
        });
    }
    p.check_error("argmax of an empty dimension", |d| one(inp(53, &[0, 3], DType::F32, d).argmax(0, false)?));
    p.check_error("max_all of an empty tensor", |d| one(inp(53, &[0], DType::F32, d).max_all()?));
    type Red = fn(&Tensor, i64) -> Result<Tensor>;
    let reds: [(&str, Red); 3] =
        [("sum", |t, d| t.sum(d, false)), ("mean", |t, d| t.mean(d, false)), ("max", |t, d| t.max(d, false))];
    for (name, f) in reds {
        p.check_error(format!("{name} over dimension 2 of a matrix"), |d| one(f(&inp(53, &[4, 3], DType::F32, d), 2)?));
    }
    p.check_error("sum over dimension 5 of a matrix", |d| one(inp(53, &[2, 3], DType::F32, d).sum(5, false)?));
    p.finish();
}

#[test]
fn softmax_and_log_softmax() {
    require_cuda!();
    let mut p = Parity::new("softmax_and_log_softmax");
    for (s, lay, dt) in cases(&[&[7], &[4, 3, 5], &[2, 3, 4, 5], &[0, 3], &[33, 300]], &DTYPES) {
        for dim in 0..s.len() as i64 {
            p.check(format!("softmax({dim}) {s:?} {dt} {lay:?}"), tol::REDUCTION, |d| {
                let t = input(60, s, dt, lay, d);
                Ok(vec![t.softmax(dim)?, t.log_softmax(dim)?])
            });
        }
    }
    p.check("softmax 0-d", tol::REDUCTION, |d| {
        let t = inp(61, &[], DType::F32, d);
        Ok(vec![t.softmax(0)?, t.log_softmax(-1)?])
    });
    for dt in FLOATS {
        // Masked rows: -inf entries get 0; a row of only -inf is NaN; large logits do not
        // overflow.
        let ninf = f64::NEG_INFINITY;
        let rows = [0.0, ninf, 1.0, ninf, ninf, ninf, ninf, ninf, 1000.0, 999.0, -1000.0, 0.0];
        p.check(format!("softmax of masked and large rows {dt}"), tol::REDUCTION, |d| {
            let t = floats(&rows, &[3, 4], dt, d);
            Ok(vec![t.softmax(1)?, t.log_softmax(1)?])
        });
    }
    p.finish();
}

#[test]
fn power_sums_and_norms() {
    require_cuda!();
    let mut p = Parity::new("power_sums_and_norms");
    for (s, lay, dt) in cases(&[&[], &[0], &[7], &[4, 3, 5], &[67, 131]], &FLOATS) {
        for pw in [1.0, 2.0, 3.0, 0.5, f64::INFINITY] {
            // The sum is an f64 however the elements are stored, but the powers of f32
            // elements may be taken in f32 (as the sum's contract allows): the bound is
            // that of the elements' dtype.
            let tol = if dt == DType::F32 {
                Tol { f32: tol::REDUCTION.f32, f64: tol::REDUCTION.f32 }
            } else {
                tol::REDUCTION
            };
            p.check(format!("power_sum({pw}) {s:?} {dt} {lay:?}"), tol, |d| {
                one(Tensor::scalar(input(62, s, dt, lay, d).power_sum(pw)?).to_device(d)?)
            });
        }
    }
    p.check_error("power_sum of i64", |d| {
        one(Tensor::scalar(inp(63, &[3], DType::I64, d).power_sum(2.0)?).to_device(d)?)
    });
    p.check("power_sum with NaN", tol::EXACT, |d| {
        let t = floats(&[1.0, f64::NAN, 2.0], &[3], DType::F32, d);
        Ok(vec![
            Tensor::scalar(t.power_sum(2.0)?).to_device(d)?,
            Tensor::scalar(t.power_sum(f64::INFINITY)?).to_device(d)?,
        ])
    });
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Matrix products
// ---------------------------------------------------------------------------------------

#[test]
fn matmul() {
    require_cuda!();
    let mut p = Parity::new("matmul");
    let pairs: &[(&[usize], &[usize])] = &[
        (&[5, 7], &[7, 3]),
        (&[1, 7], &[7, 1]),
        (&[7], &[7, 4]),
        (&[3, 7], &[7]),
        (&[7], &[7]),
        (&[2, 5, 7], &[2, 7, 3]),
        (&[2, 1, 5, 7], &[3, 7, 4]),
        (&[4, 7], &[3, 7, 2]),
        (&[0, 7], &[7, 3]),
        (&[5, 0], &[0, 3]),
        (&[64, 150], &[150, 80]),
        (&[3, 4], &[5, 6]),
    ];
    let dtypes: &[(DType, DType)] = &[(DType::F32, DType::F32), (DType::F64, DType::F64)];
    for &(sa, sb) in pairs {
        for &(da, db) in dtypes {
            for la in [Lay::Contiguous, Lay::Transposed, Lay::Stepped, Lay::Expanded] {
                for lb in [Lay::Contiguous, Lay::Transposed] {
                    if !la.fits(sa.len()) || !lb.fits(sb.len()) {
                        continue;
                    }
                    p.check(format!("matmul {sa:?} {da} {la:?} @ {sb:?} {db} {lb:?}"), tol::MATMUL, |d| {
                        one(input(70, sa, da, la, d).matmul(&input(71, sb, db, lb, d))?)
                    });
                }
            }
        }
    }
    // Integer and mixed-dtype products are refused on the CPU; the device must agree.
    p.check_error("matmul of f32 and f64", |d| {
        one(inp(72, &[2, 3], DType::F32, d).matmul(&inp(73, &[3, 2], DType::F64, d))?)
    });
    for dt in [DType::I64, DType::U8] {
        p.check_error(format!("matmul of {dt}"), |d| one(inp(72, &[2, 3], dt, d).matmul(&inp(73, &[3, 2], dt, d))?));
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Indexing, joining, triangles
// ---------------------------------------------------------------------------------------

#[test]
fn indexing() {
    require_cuda!();
    let mut p = Parity::new("indexing");
    for (s, lay, dt) in cases(&[&[5, 4], &[3, 4, 5]], &DTYPES) {
        for dim in 0..s.len() {
            let n = s[dim] as i64;
            let idx: Vec<i64> = vec![n - 1, 0, 1, 1, n - 1, 0];
            p.check(format!("index_select({dim}) {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                one(input(80, s, dt, lay, d).index_select(dim, &ints(&idx, &[6], d)?)?)
            });
            let mut ishape = s.to_vec();
            ishape[dim] = 3;
            let m: usize = ishape.iter().product();
            let gi: Vec<i64> = (0..m).map(|i| (mix(81, i as u64) % n as u64) as i64).collect();
            p.check(format!("gather({dim}) {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                one(input(82, s, dt, lay, d).gather(dim, &ints(&gi, &ishape, d)?)?)
            });
            // Duplicate targets: a device adds them with atomics in any order.
            p.check(format!("scatter_add({dim}) {s:?} {dt} {lay:?}"), tol::REDUCTION, |d| {
                let src = input(83, &ishape, dt, Lay::Contiguous, d);
                one(input(84, s, dt, lay, d).scatter_add(dim, &ints(&gi, &ishape, d)?, &src)?)
            });
            p.check(format!("masked_fill {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                let mask = input(85, &s[1..], DType::F32, Lay::Contiguous, d).gt_scalar(0.0);
                let t = input(86, s, dt, lay, d);
                Ok(vec![t.masked_fill(&mask, 9)?, t.masked_fill(&mask, 1.5)?])
            });
        }
    }
    p.check("index_select with an empty index", tol::EXACT, |d| {
        one(inp(87, &[4, 3], DType::F32, d).index_select(0, &ints(&[], &[0], d)?)?)
    });
    p.check_error("index_select out of range", |d| {
        one(inp(87, &[4, 3], DType::F32, d).index_select(0, &ints(&[0, 4], &[2], d)?)?)
    });
    p.check_error("index_select negative index", |d| {
        one(inp(87, &[4, 3], DType::F32, d).index_select(1, &ints(&[-1], &[1], d)?)?)
    });
    p.check_error("gather out of range", |d| {
        one(inp(87, &[4, 3], DType::F32, d).gather(1, &ints(&[0, 3], &[1, 2], d)?)?)
    });
    p.check_error("scatter_add out of range", |d| {
        let t = inp(87, &[4, 3], DType::F32, d);
        one(t.scatter_add(0, &ints(&[7, 0], &[1, 2], d)?, &inp(88, &[1, 2], DType::F32, d))?)
    });
    p.check_error("index_select with f32 indices", |d| {
        one(inp(87, &[4, 3], DType::F32, d).index_select(0, &inp(89, &[2], DType::F32, d))?)
    });
    for (s, lay, dt) in cases(&[&[5, 4], &[2, 3, 6], &[0, 3]], &DTYPES) {
        for diag in [-2i64, -1, 0, 1, 3] {
            p.check(format!("tril/triu({diag}) {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                let t = input(90, s, dt, lay, d);
                Ok(vec![t.tril(diag)?, t.triu(diag)?])
            });
        }
    }
    p.finish();
}

#[test]
fn joining_and_padding() {
    require_cuda!();
    let mut p = Parity::new("joining_and_padding");
    for dt in DTYPES {
        for dim in [0i64, 1, -1] {
            p.check(format!("cat/stack({dim}) {dt}"), tol::EXACT, |d| {
                let a = input(100, &[3, 4], dt, Lay::Transposed, d);
                let b = input(101, &[3, 4], dt, Lay::Stepped, d);
                let c = input(102, &[3, 4], dt, Lay::Expanded, d);
                Ok(vec![Tensor::cat(&[&a, &b, &c], dim)?, Tensor::stack(&[&a, &b, &c], dim)?])
            });
        }
        p.check(format!("cat with empty parts {dt}"), tol::EXACT, |d| {
            let a = input(103, &[0, 4], dt, Lay::Contiguous, d);
            let b = input(104, &[2, 4], dt, Lay::Offset, d);
            one(Tensor::cat(&[&a, &b, &a], 0)?)
        });
        p.check(format!("pad and repeat {dt}"), tol::EXACT, |d| {
            let t = input(105, &[3, 4], dt, Lay::Transposed, d);
            Ok(vec![t.pad(&[(1, 2), (0, 3)], 7)?, t.repeat(&[2, 1, 3])?])
        });
    }
    p.check("cat of mixed dtypes", tol::EXACT, |d| {
        one(Tensor::cat(&[&inp(106, &[2], DType::I64, d), &inp(107, &[3], DType::F32, d)], 0)?)
    });
    p.check_error("cat of mismatched shapes", |d| {
        one(Tensor::cat(&[&inp(106, &[2, 3], DType::F32, d), &inp(107, &[2, 4], DType::F32, d)], 0)?)
    });
    p.finish();
}

// ---------------------------------------------------------------------------------------
// In place
// ---------------------------------------------------------------------------------------

/// A `[6, 8]` base and a strided `[4, 3]` view into it (columns 1, 3, 5 of rows 1..5,
/// transposed and back): in-place ops write through the view, and the whole base is
/// compared, so writes outside the view show up too.
fn base_and_view(seed: u64, dt: DType, d: Device) -> (Tensor, Tensor) {
    let base = inp(seed, &[6, 8], dt, d);
    let view = base.narrow(0, 1, 4).unwrap().slice(1, 1, 7, 2).unwrap();
    (base, view)
}

#[test]
fn in_place_on_strided_views() {
    require_cuda!();
    let mut p = Parity::new("in_place_on_strided_views");
    type Ip = (&'static str, fn(&Tensor, &Tensor) -> Result<()>);
    let ops: &[Ip] = &[
        ("fill_(3.5)", |v, _| v.fill_(3.5)),
        ("fill_(-2i64)", |v, _| v.fill_(-2)),
        ("zero_", |v, _| v.zero_()),
        ("copy_", |v, s| v.copy_(s)),
        ("copy_ f64 source", |v, s| v.copy_(&s.to_dtype(DType::F64))),
        ("copy_ broadcast row", |v, s| v.copy_(&s.select(0, 1)?)),
        ("add_", |v, s| v.add_(s)),
        ("sub_ broadcast", |v, s| v.sub_(&s.narrow(0, 0, 1)?)),
        ("mul_", |v, s| v.mul_(s)),
        ("div_", |v, s| v.div_(s)),
        ("add_scaled_(-0.5)", |v, s| v.add_scaled_(s, -0.5)),
        ("add_scalar_(2)", |v, _| v.add_scalar_(2)),
        ("mul_scalar_(-1.5)", |v, _| v.mul_scalar_(-1.5)),
        ("clamp_(-1, 0.5)", |v, _| v.clamp_(Some(-1.0), Some(0.5))),
        ("masked_fill_", |v, s| v.masked_fill_(&s.gt_scalar(0), 42)),
        ("apply_(tanh)", |v, _| v.apply_(UnaryOp::Tanh)),
    ];
    for (name, f) in ops {
        for dt in DTYPES {
            p.check(format!("{name} on a strided view {dt}"), tol::ELEMENTWISE, |d| {
                let (base, view) = base_and_view(110, dt, d);
                let src = input(111, &[4, 3], dt, Lay::Transposed, d);
                f(&view, &src)?;
                Ok(vec![base, view])
            });
        }
    }
    p.check_error("add_ of a wider source", |d| {
        let (_, view) = base_and_view(110, DType::F32, d);
        view.add_(&inp(112, &[4, 5], DType::F32, d))?;
        Ok(vec![])
    });
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------

/// The global generator is shared by every test of the binary.
static RNG: Mutex<()> = Mutex::new(());

#[test]
fn random_numbers_follow_manual_seed() {
    require_cuda!();
    let _guard = RNG.lock();
    let mut p = Parity::new("random_numbers_follow_manual_seed");
    let dists = [
        ("uniform[0, 1)", Distribution::Uniform { low: 0.0, high: 1.0 }),
        ("uniform[-3, 5)", Distribution::Uniform { low: -3.0, high: 5.0 }),
        ("normal(0, 1)", Distribution::Normal { mean: 0.0, std: 1.0 }),
        ("normal(2, 0.5)", Distribution::Normal { mean: 2.0, std: 0.5 }),
    ];
    for (name, dist) in dists {
        for dt in FLOATS {
            for n in [0usize, 1, 7, 1000, 100_003] {
                // The device draws from the global host generator in element order, so the
                // numbers are the CPU's bit for bit.
                p.check(format!("random {name} n={n} {dt}"), tol::EXACT, |d| {
                    manual_seed(1234);
                    let b = backend_for(d)?;
                    let s = b.random(n, dist, dt)?;
                    let host = b.download((&s, &Layout::contiguous(Shape::from([n]))))?;
                    // The draws advance the generator by the same amount on both devices.
                    let next = Tensor::rand([3])?;
                    let t = match dt {
                        DType::F32 => Tensor::from_vec(host.as_slice::<f32>().unwrap_or_default().to_vec(), [n])?,
                        _ => Tensor::from_vec(host.as_slice::<f64>().unwrap_or_default().to_vec(), [n])?,
                    };
                    Ok(vec![t.to_device(d)?, next.to_device(d)?])
                });
            }
        }
    }
    // The public constructors on a device, and the `_like` ones that follow their tensor.
    for dt in FLOATS {
        for shape in [&[][..], &[0], &[3, 5], &[67, 131]] {
            p.check(format!("uniform_on/normal_on/rand_like/randn_like {shape:?} {dt}"), tol::EXACT, |d| {
                manual_seed(77);
                let u = Tensor::uniform_on(shape, -1.0, 2.0, dt, d)?;
                let n = Tensor::normal_on(shape, 0.5, 3.0, dt, d)?;
                let r = u.rand_like()?;
                let g = n.randn_like()?;
                Ok(vec![u, n, r, g])
            });
        }
    }
    for n in [0usize, 1, 10, 1000] {
        p.check(format!("randperm {n}"), tol::EXACT, |d| {
            manual_seed(99);
            let b = backend_for(d)?;
            let s = b.randperm(n)?;
            let host = b.download((&s, &Layout::contiguous(Shape::from([n]))))?;
            one(Tensor::from_vec(host.as_slice::<i64>().unwrap_or_default().to_vec(), [n])?.to_device(d)?)
        });
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Losses, convolutions, pooling, normalisation, attention, LSTM
// ---------------------------------------------------------------------------------------

#[test]
fn class_loss_and_its_gradient() {
    require_cuda!();
    let mut p = Parity::new("class_loss_and_its_gradient");
    let shapes: &[&[usize]] = &[&[5], &[6, 5], &[3, 5, 4], &[0, 5], &[64, 10]];
    for &s in shapes {
        for dt in FLOATS {
            for scores in [ClassScores::Logits, ClassScores::LogProbs] {
                for smoothing in [0.0, 0.1] {
                    for ignore in [None, Some(-100), Some(2)] {
                        for reduction in [LossReduction::None, LossReduction::Sum, LossReduction::Mean] {
                            let loss =
                                ClassLoss { scores, label_smoothing: smoothing, ignore_index: ignore, reduction };
                            let c = if s.len() == 1 { s[0] } else { s[1] };
                            let tshape: Vec<usize> = s
                                .iter()
                                .enumerate()
                                .filter(|&(i, _)| i != 1 || s.len() == 1)
                                .map(|(_, &v)| v)
                                .collect();
                            let tshape: Vec<usize> = if s.len() == 1 { vec![] } else { tshape };
                            let m: usize = tshape.iter().product();
                            let targets: Vec<i64> = (0..m)
                                .map(|i| {
                                    if i % 4 == 3 && ignore == Some(-100) {
                                        -100
                                    } else {
                                        (mix(120, i as u64) % c as u64) as i64
                                    }
                                })
                                .collect();
                            p.check(format!("{loss:?} {s:?} {dt}"), tol::REDUCTION, |d| {
                                let x = input(121, s, dt, Lay::Contiguous, d);
                                let x = if scores == ClassScores::LogProbs {
                                    x.log_softmax(if s.len() == 1 { 0 } else { 1 })?
                                } else {
                                    x
                                };
                                let t = ints(&targets, &tshape, d)?;
                                let l = x.class_loss(&t, &loss)?;
                                let g = inp(122, l.shape(), dt, d);
                                Ok(vec![l, x.class_loss_backward(&t, &g, &loss)?])
                            });
                        }
                    }
                }
            }
        }
    }
    let ce = ClassLoss {
        scores: ClassScores::Logits,
        label_smoothing: 0.0,
        ignore_index: Some(-100),
        reduction: LossReduction::Mean,
    };
    p.check_error("cross_entropy with a target out of range", |d| {
        one(inp(123, &[2, 3], DType::F32, d).class_loss(&ints(&[0, 3], &[2], d)?, &ce)?)
    });
    p.check_error("cross_entropy with a negative target", |d| {
        one(inp(123, &[2, 3], DType::F32, d).class_loss(&ints(&[0, -1], &[2], d)?, &ce)?)
    });
    p.check("cross_entropy with every target ignored (mean is NaN)", tol::EXACT, |d| {
        one(inp(123, &[2, 3], DType::F32, d).class_loss(&ints(&[-100, -100], &[2], d)?, &ce)?)
    });
    p.finish();
}

#[test]
fn convolutions_unfold_and_fold() {
    require_cuda!();
    let mut p = Parity::new("convolutions_unfold_and_fold");
    let configs: &[(&str, [usize; 4], [usize; 4], ConvArgs<2>)] = &[
        ("3x3", [2, 3, 9, 8], [4, 3, 3, 3], ConvArgs::default()),
        (
            "3x3 pad 1 stride 2",
            [2, 3, 9, 8],
            [4, 3, 3, 3],
            ConvArgs::default().padding(Padding::Explicit([1, 1])).stride(2),
        ),
        ("dilated", [1, 2, 10, 10], [3, 2, 3, 2], ConvArgs::default().dilation([2, 3])),
        ("groups 2", [2, 4, 7, 7], [6, 2, 3, 3], ConvArgs::default().groups(2).padding(Padding::Same)),
        ("depthwise", [2, 4, 6, 6], [4, 1, 3, 3], ConvArgs::default().groups(4)),
        ("1x1", [3, 8, 5, 5], [16, 8, 1, 1], ConvArgs::default()),
        ("mnist cnn layer", [8, 16, 14, 14], [32, 16, 5, 5], ConvArgs::default().padding(Padding::Explicit([2, 2]))),
        ("empty batch", [0, 3, 5, 5], [2, 3, 3, 3], ConvArgs::default()),
    ];
    for (name, xs, ws, args) in configs {
        for dt in FLOATS {
            for lay in [Lay::Contiguous, Lay::Transposed] {
                for bias in [false, true] {
                    p.check(format!("conv2d {name} x{xs:?} w{ws:?} bias {bias} {dt} {lay:?}"), tol::MATMUL, |d| {
                        let x = input(130, xs, dt, lay, d);
                        let w = input(131, ws, dt, Lay::Contiguous, d);
                        let b = inp(132, &[ws[0]], dt, d);
                        one(x.conv2d(&w, bias.then_some(&b), args)?)
                    });
                }
            }
        }
    }
    let tconfigs: &[(&str, [usize; 4], [usize; 4], ConvTransposeArgs<2>)] = &[
        ("3x3", [2, 4, 5, 6], [4, 3, 3, 3], ConvTransposeArgs::default()),
        (
            "stride 2 pad 1 out_pad 1",
            [2, 4, 5, 5],
            [4, 2, 3, 3],
            ConvTransposeArgs::default().stride(2).padding(1).output_padding(1),
        ),
        ("groups 2 dilation 2", [1, 4, 4, 4], [4, 3, 2, 2], ConvTransposeArgs::default().groups(2).dilation(2)),
    ];
    for (name, xs, ws, args) in tconfigs {
        for dt in FLOATS {
            for bias in [false, true] {
                p.check(format!("conv_transpose2d {name} x{xs:?} w{ws:?} bias {bias} {dt}"), tol::MATMUL, |d| {
                    let x = input(133, xs, dt, Lay::Transposed, d);
                    let w = input(134, ws, dt, Lay::Contiguous, d);
                    let b = inp(135, &[ws[1] * args.groups], dt, d);
                    one(x.conv_transpose2d(&w, bias.then_some(&b), args)?)
                });
            }
        }
    }
    let unfolds = [UnfoldArgs::new(3), UnfoldArgs::new([2, 3]).stride(2).padding(1), UnfoldArgs::new(2).dilation(2)];
    for (i, args) in unfolds.iter().enumerate() {
        for dt in FLOATS {
            p.check(format!("im2col/col2im config {i} {dt}"), tol::REDUCTION, |d| {
                let x = input(136, &[2, 3, 7, 6], dt, Lay::Transposed, d);
                let cols = x.im2col(args)?;
                let back = cols.col2im([7, 6], args)?;
                Ok(vec![cols, back])
            });
        }
    }
    p.check_error("conv2d with mismatched channels", |d| {
        one(inp(137, &[1, 3, 5, 5], DType::F32, d).conv2d(
            &inp(138, &[2, 4, 3, 3], DType::F32, d),
            None,
            &ConvArgs::default(),
        )?)
    });
    p.finish();
}

#[test]
fn pooling() {
    require_cuda!();
    let mut p = Parity::new("pooling");
    let maxes = [
        MaxPoolArgs::new(2),
        MaxPoolArgs::new(3).stride(2).padding(1),
        MaxPoolArgs::new([2, 3]).dilation(2).ceil_mode(true),
    ];
    let avgs = [
        AvgPoolArgs::new(2),
        AvgPoolArgs::new(3).stride(2).padding(1),
        AvgPoolArgs::new(3).stride(2).padding(1).count_include_pad(false).ceil_mode(true),
        AvgPoolArgs::new(2).divisor_override(3),
    ];
    for dt in FLOATS {
        for lay in [Lay::Contiguous, Lay::Transposed, Lay::Stepped] {
            for (i, args) in maxes.iter().enumerate() {
                p.check(format!("max_pool2d_with_indices config {i} {dt} {lay:?}"), tol::EXACT, |d| {
                    // Integer-valued floats: ties, where the first maximum must win.
                    let x = input(140, &[2, 3, 9, 8], dt, lay, d).mul_scalar(2).round();
                    let (y, idx) = x.max_pool2d_with_indices(args)?;
                    Ok(vec![y, idx])
                });
            }
            for (i, args) in avgs.iter().enumerate() {
                p.check(format!("avg_pool2d config {i} {dt} {lay:?}"), tol::REDUCTION, |d| {
                    one(input(141, &[2, 3, 9, 8], dt, lay, d).avg_pool2d(args)?)
                });
            }
            for size in [[1, 1], [3, 3], [4, 5], [9, 8], [12, 10]] {
                p.check(format!("adaptive pools {size:?} {dt} {lay:?}"), tol::REDUCTION, |d| {
                    let x = input(142, &[2, 3, 9, 8], dt, lay, d);
                    Ok(vec![x.adaptive_avg_pool2d(size)?, x.adaptive_max_pool2d(size)?])
                });
            }
        }
        p.check(format!("max_pool2d with NaN and -inf {dt}"), tol::EXACT, |d| {
            let x = floats(
                &[1.0, f64::NAN, 2.0, 3.0, f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY],
                &[1, 2, 2, 2],
                dt,
                d,
            );
            let (y, i) = x.max_pool2d_with_indices(&MaxPoolArgs::new(2))?;
            Ok(vec![y, i])
        });
    }
    p.finish();
}

#[test]
fn one_dimensional_windows_and_resampling() {
    require_cuda!();
    let mut p = Parity::new("one_dimensional_windows_and_resampling");
    for dt in FLOATS {
        p.check(format!("conv1d / conv_transpose1d {dt}"), tol::MATMUL, |d| {
            let x = input(145, &[2, 3, 17], dt, Lay::Stepped, d);
            let w = inp(146, &[4, 3, 5], dt, d);
            let b = inp(147, &[4], dt, d);
            let y = x.conv1d(&w, Some(&b), &ConvArgs::default().stride(2).padding(Padding::Explicit([2])))?;
            let wt = inp(148, &[4, 2, 3], dt, d);
            let z = y.conv_transpose1d(&wt, None, &ConvTransposeArgs::default().stride(2))?;
            Ok(vec![y, z])
        });
        p.check(format!("max_pool1d / avg_pool1d / adaptive_avg_pool1d {dt}"), tol::REDUCTION, |d| {
            let x = input(149, &[2, 3, 17], dt, Lay::Transposed, d);
            Ok(vec![
                x.max_pool1d(&MaxPoolArgs::new(3).stride(2).padding(1))?,
                x.avg_pool1d(&AvgPoolArgs::new(4).stride(3).ceil_mode(true))?,
                x.adaptive_avg_pool1d(5)?,
            ])
        });
        for (mode, align) in [
            (InterpolateMode::Nearest, None),
            (InterpolateMode::Bilinear, Some(false)),
            (InterpolateMode::Bilinear, Some(true)),
        ] {
            p.check(format!("interpolate {mode:?} align_corners {align:?} {dt}"), tol::REDUCTION, |d| {
                let x = input(150, &[2, 3, 5, 7], dt, Lay::Transposed, d);
                let args = InterpolateArgs { mode, align_corners: align, ..InterpolateArgs::size([9, 4]) };
                one(x.interpolate(&args)?)
            });
        }
        p.check(format!("gather_planes / scatter_planes {dt}"), tol::REDUCTION, |d| {
            let x = inp(151, &[2, 3, 4, 5], dt, d);
            // Repeated positions: scatter_planes adds them up.
            let idx: Vec<i64> = (0..2 * 3 * 2 * 2).map(|i| (mix(152, i as u64) % 20) as i64).collect();
            let index = ints(&idx, &[2, 3, 2, 2], d)?;
            let g = x.gather_planes(&index)?;
            Ok(vec![g.clone(), g.scatter_planes(&index, [4, 5])?])
        });
        p.check_error(format!("gather_planes out of range {dt}"), |d| {
            one(inp(151, &[1, 1, 2, 2], dt, d).gather_planes(&ints(&[4], &[1, 1, 1, 1], d)?)?)
        });
    }
    p.finish();
}

#[test]
fn batch_norm_statistics() {
    require_cuda!();
    let mut p = Parity::new("batch_norm_statistics");
    for s in [&[8usize, 3][..], &[4, 3, 5, 6], &[1, 2, 7], &[32, 16, 14, 14]] {
        for dt in FLOATS {
            for affine in [false, true] {
                p.check(format!("channel_norm and backward {s:?} affine {affine} {dt}"), tol::MATMUL, |d| {
                    let x = input(150, s, dt, Lay::Contiguous, d).add_scalar(3.0);
                    let w = inp(151, &[s[1]], dt, d);
                    let b = inp(152, &[s[1]], dt, d);
                    let (y, mean, var) = x.channel_norm(affine.then_some(&w), affine.then_some(&b), 1e-5)?;
                    let g = inp(153, s, dt, d);
                    let (gx, gb, gw) = x.channel_norm_backward(&g, &mean, &var, affine.then_some(&w), 1e-5)?;
                    Ok(vec![y, mean, var, gx, gb, gw])
                });
            }
        }
    }
    p.finish();
}

#[test]
fn attention() {
    require_cuda!();
    let mut p = Parity::new("attention");
    let shapes: &[(&[usize], &[usize], &[usize])] = &[
        (&[5, 4], &[6, 4], &[6, 3]),
        (&[2, 3, 5, 8], &[2, 3, 7, 8], &[2, 3, 7, 8]),
        (&[2, 1, 5, 8], &[3, 7, 8], &[3, 7, 4]),
        (&[2, 64, 32], &[2, 64, 32], &[2, 64, 32]),
    ];
    for &(qs, ks, vs) in shapes {
        for dt in FLOATS {
            for causal in [false, true] {
                for mask in [0, 1, 2] {
                    p.check(
                        format!("attention q{qs:?} k{ks:?} v{vs:?} causal {causal} mask {mask} {dt}"),
                        tol::MATMUL,
                        |d| {
                            let q = input(160, qs, dt, Lay::Contiguous, d);
                            let k = input(161, ks, dt, Lay::Transposed, d);
                            let v = input(162, vs, dt, Lay::Contiguous, d);
                            let (l, s) = (qs[qs.len() - 2], ks[ks.len() - 2]);
                            let m = match mask {
                                0 => None,
                                1 => Some(inp(163, &[l, s], DType::F32, d).gt_scalar(-1.5)),
                                _ => Some(inp(164, &[l, s], dt, d)),
                            };
                            let spec = Attention { scale: 1.0 / (qs[qs.len() - 1] as f64).sqrt(), causal };
                            let (out, lse) = q.attention(&k, &v, m.as_ref(), &spec)?;
                            let g = inp(165, out.shape(), dt, d);
                            let (gq, gk, gv) = q.attention_backward(&k, &v, m.as_ref(), &out, &lse, &g, &spec)?;
                            Ok(vec![out, lse, gq, gk, gv])
                        },
                    );
                }
            }
        }
    }
    p.finish();
}

#[test]
fn lstm_cell() {
    require_cuda!();
    let mut p = Parity::new("lstm_cell");
    for (b, h) in [(1usize, 1usize), (4, 8), (0, 3), (64, 128)] {
        for dt in FLOATS {
            for with_gy in [false, true] {
                p.check(format!("lstm_cell and backward B={b} H={h} gy {with_gy} {dt}"), tol::CHAINED, |d| {
                    let a = inp(170, &[b, 4 * h], dt, d);
                    let gi = input(171, &[b, 4 * h], dt, Lay::Stepped, d);
                    let c = inp(172, &[b, h], dt, d);
                    let y = Tensor::lstm_cell(&a, &gi, &c)?;
                    let gy = inp(173, y.shape(), dt, d);
                    let (dh, dc) = (inp(174, &[b, h], dt, d), inp(175, &[b, h], dt, d));
                    let (ga, gc) = Tensor::lstm_cell_backward(&y, with_gy.then_some(&gy), &dh, &dc, &c)?;
                    Ok(vec![y, ga, gc])
                });
            }
        }
    }
    p.finish();
}

#[test]
fn lstm_sequence() {
    require_cuda!();
    let mut p = Parity::new("lstm_sequence");
    for (t, b, h) in [(1usize, 1usize, 1usize), (3, 4, 8), (2, 0, 3), (28, 64, 128)] {
        for dt in FLOATS {
            for reverse in [false, true] {
                p.check(
                    format!("lstm_sequence and backward T={t} B={b} H={h} reverse {reverse} {dt}"),
                    tol::RECURRENT,
                    |d| {
                        let gi = input(176, &[t, b, 4 * h], dt, Lay::Stepped, d);
                        let w_hh = inp(177, &[4 * h, h], dt, d).mul_scalar(0.2);
                        let (h0, c0) = (inp(178, &[b, h], dt, d), inp(179, &[b, h], dt, d));
                        let y = Tensor::lstm_sequence(&gi, &w_hh, &h0, &c0, reverse)?;
                        let gy = inp(180, y.shape(), dt, d);
                        let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&y, &gy, &w_hh, &c0, reverse)?;
                        Ok(vec![y, d_gi, dh0, dc0])
                    },
                );
            }
        }
    }
    p.finish();
}

// ---------------------------------------------------------------------------------------
// Optimizer steps
// ---------------------------------------------------------------------------------------

#[test]
fn optimizer_steps() {
    require_cuda!();
    let mut p = Parity::new("optimizer_steps");
    let shapes: &[&[usize]] = &[&[], &[0], &[7], &[67, 131]];
    let sgds = [
        SgdStep { lr: 0.1, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0, fresh_buffer: false },
        SgdStep { lr: 0.05, momentum: 0.9, dampening: 0.1, nesterov: false, weight_decay: 1e-2, fresh_buffer: false },
        SgdStep { lr: 0.05, momentum: 0.9, dampening: 0.0, nesterov: true, weight_decay: 0.0, fresh_buffer: false },
    ];
    let adams = [
        AdamStep {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            amsgrad: false,
            step: 1,
        },
        AdamStep {
            lr: 1e-2,
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.1,
            decoupled: true,
            amsgrad: true,
            step: 1,
        },
        AdamStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decoupled: false,
            amsgrad: false,
            step: 1,
        },
    ];
    let rmsprops = [
        RmsPropStep { lr: 1e-2, alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false },
        RmsPropStep { lr: 1e-2, alpha: 0.9, eps: 1e-6, weight_decay: 0.1, momentum: 0.9, centered: true },
    ];
    for &s in shapes {
        for dt in FLOATS {
            for (i, hp) in sgds.iter().enumerate() {
                p.check(format!("sgd_step_ config {i} {s:?} {dt}"), tol::CHAINED, |d| {
                    let param = inp(180, s, dt, d);
                    let buf = (hp.momentum != 0.0).then(|| param.zeros_like());
                    for step in 0..3u64 {
                        let g = inp(181 + step, s, dt, d);
                        param.sgd_step_(&g, buf.as_ref(), &SgdStep { fresh_buffer: step == 0, ..*hp })?;
                    }
                    Ok([Some(param), buf].into_iter().flatten().collect())
                });
            }
            for (i, hp) in adams.iter().enumerate() {
                p.check(format!("adam_step_ config {i} {s:?} {dt}"), tol::CHAINED, |d| {
                    let param = inp(190, s, dt, d);
                    let (m, v) = (param.zeros_like(), param.zeros_like());
                    let vmax = hp.amsgrad.then(|| param.zeros_like());
                    for step in 1..=3u64 {
                        let g = inp(191 + step, s, dt, d);
                        param.adam_step_(&g, &m, &v, vmax.as_ref(), &AdamStep { step, ..*hp })?;
                    }
                    Ok([Some(param), Some(m), Some(v), vmax].into_iter().flatten().collect())
                });
            }
            for (i, hp) in rmsprops.iter().enumerate() {
                p.check(format!("rmsprop_step_ config {i} {s:?} {dt}"), tol::CHAINED, |d| {
                    let param = inp(200, s, dt, d);
                    let sq = param.zeros_like();
                    let avg = hp.centered.then(|| param.zeros_like());
                    let buf = (hp.momentum > 0.0).then(|| param.zeros_like());
                    for step in 0..3u64 {
                        let g = inp(201 + step, s, dt, d);
                        param.rmsprop_step_(&g, &sq, avg.as_ref(), buf.as_ref(), hp)?;
                    }
                    Ok([Some(param), Some(sq), avg, buf].into_iter().flatten().collect())
                });
            }
        }
    }
    p.check_error("sgd_step_ with a gradient of another shape", |d| {
        let param = inp(210, &[3], DType::F32, d);
        param.sgd_step_(&inp(211, &[4], DType::F32, d), None, &sgds[0])?;
        one(param)
    });
    p.finish();
}

/// Integer `pow` of two tensors with exponents beyond `u32::MAX` (the kernels once cut them
/// to it): the device gives the CPU's values, which are PyTorch's.
#[test]
fn integer_pow_takes_exponents_beyond_u32() {
    require_cuda!();
    let e = (1i64 << 32) + 1;
    for dt in [DType::U8, DType::I64] {
        let base = Tensor::from_vec(vec![3i64, -1, 2, 7, 1], [5]).unwrap().to_dtype(dt);
        let exps = Tensor::from_vec(vec![e, e, e, (1 << 40) + 3, i64::MAX], [5]).unwrap();
        let cpu = base.pow(&exps).unwrap();
        let gpu = base.to_device(device()).unwrap().pow(&exps.to_device(device()).unwrap()).unwrap();
        assert_eq!(gpu.device(), device());
        let (c, g) = (cpu.to_vec_f64().unwrap(), gpu.to_device(CPU).unwrap().to_vec_f64().unwrap());
        assert_eq!(c, g, "{dt}");
    }
}

// ---------------------------------------------------------------------------------------
// 16-bit floats
// ---------------------------------------------------------------------------------------

const HALVES: [DType; 2] = [DType::F16, DType::BF16];
const ALL_DTYPES: [DType; 6] = [DType::U8, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64];

/// The results of a check on 16-bit floats as the comparison reads them: each result's
/// dtype (an `i64` code, compared exactly) and its values, widened to `f32` (exactly) where
/// they are 16-bit. The harness compares 16-bit results bit for bit; read as `f32` they take
/// a tolerance in units of the 16-bit dtype ([`half_tol`]).
fn widened(results: Vec<Tensor>) -> Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(2 * results.len());
    for t in results {
        out.push(Tensor::from_vec(vec![t.dtype() as i64], [1])?.to_device(t.device())?);
        out.push(if t.dtype().is_half() { t.to_dtype(DType::F32) } else { t });
    }
    Ok(out)
}

/// The tolerance of 16-bit results read as `f32`: `base`'s `f32` bounds plus `ulps` units
/// in the last place of `dt` relative to the result (2^-10 for `f16`, which keeps 11
/// significant bits; 2^-7 for `bf16`, which keeps 8), and absolute to `scale`, the size of
/// intermediate values that were rounded to `dt` before the result was formed (0 where
/// nothing was).
///
/// Both devices compute a 16-bit op in `f32` and round its result once, so `f32` values
/// within `base` of each other round to the same 16-bit value or to neighbours: one unit.
/// Ops that round several times (a reduction's composition, a convolution's product
/// before its bias, optimizer state carried over steps) may move a unit per rounding, and
/// a rounding of a larger intermediate counts in units of that intermediate.
fn half_tol(dt: DType, base: Tol, ulps: f64, scale: f64) -> Tol {
    let ulp = if dt == DType::BF16 { 2f64.powi(-7) } else { 2f64.powi(-10) };
    Tol::new((base.f32.0 + ulps * ulp * scale, base.f32.1 + ulps * ulp), base.f64)
}

#[test]
fn half_moves_casts_and_fills() {
    require_cuda!();
    let mut p = Parity::new("half_moves_casts_and_fills");
    for (s, lay, dt) in cases(SHAPES, &HALVES) {
        p.check(format!("to_device and contiguous {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
            let t = input(1, s, dt, lay, d);
            widened(vec![t.contiguous(), t])
        });
    }
    for (s, lay, from) in cases(&[&[], &[0], &[7], &[4, 3, 5], &[67, 131]], &ALL_DTYPES) {
        for to in ALL_DTYPES {
            if from.is_half() || to.is_half() {
                p.check(format!("{from} -> {to} {s:?} {lay:?}"), tol::EXACT, |d| {
                    widened(vec![input(40, s, from, lay, d).to_dtype(to)])
                });
            }
        }
    }
    // Rounding to nearest even (ties of both dtypes), overflow to infinity (f16 above
    // 65519.99), subnormals and underflow to zero, NaN, and values that round twice on
    // their way from f64 through f32 (as PyTorch's conversions do).
    let (t8, t11, t30) = (2f64.powi(-8), 2f64.powi(-11), 2f64.powi(-30));
    let edges = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0 + t8,
        1.0 + 3.0 * t8,
        1.0 + t11,
        1.0 + 3.0 * t11,
        1.0 + t8 + t30,
        1.0 + t11 + t30,
        65504.0,
        65519.0,
        65520.0,
        -1e6,
        6e-8,
        2.9e-8,
        1e-40,
        3.0e38,
        -3.4e38,
        0.1,
        -2.5,
        255.5,
        300.7,
        -1.5,
    ];
    for from in [DType::F64, DType::F32] {
        for to in HALVES {
            p.check(format!("{from} -> {to} rounding edges"), tol::EXACT, |d| {
                widened(vec![floats(&edges, &[edges.len()], from, d).to_dtype(to)])
            });
        }
    }
    for from in HALVES {
        for to in ALL_DTYPES {
            p.check(format!("{from} -> {to} from rounding edges"), tol::EXACT, |d| {
                widened(vec![floats(&edges, &[edges.len()], from, d).to_dtype(to)])
            });
        }
    }
    let big = [i64::MIN, -65520, -257, -1, 0, 255, 256, 2049, 65504, 65520, 1 << 24, (1 << 24) + 1, i64::MAX];
    for to in HALVES {
        p.check(format!("i64 -> {to} wide values"), tol::EXACT, |d| {
            widened(vec![ints(&big, &[big.len()], d)?.to_dtype(to)])
        });
    }
    for dt in HALVES {
        for shape in [&[][..], &[0], &[3, 5], &[67, 131]] {
            p.check(format!("full_on, *_like and fill_ {shape:?} {dt}"), tol::EXACT, |d| {
                let t = Tensor::full_on(shape, -7, dt, d)?;
                let filled = t.zeros_like();
                filled.fill_(0.1)?;
                widened(vec![t.zeros_like(), t.ones_like(), t.full_like(3.75)?, t.full_like(1e-3)?, filled, t])
            });
        }
        p.check(format!("to_vec_f64 and item {dt}"), tol::EXACT, |d| {
            let t = input(5, &[3, 4], dt, Lay::Transposed, d);
            let flat = Tensor::from_vec(t.to_vec_f64()?, [12])?;
            let first = Tensor::from_vec(vec![t.select(0, 1)?.select(0, 2)?.item()?], [1])?;
            widened(vec![flat.to_device(d)?, first.to_device(d)?])
        });
    }
    p.finish();
}

#[test]
fn half_elementwise_ops() {
    require_cuda!();
    let mut p = Parity::new("half_elementwise_ops");
    let shapes: &[&[usize]] = &[&[], &[0], &[7], &[4, 3, 5], &[67, 131]];
    for case in UNARY {
        for (s, lay, dt) in cases(shapes, &HALVES) {
            p.check(format!("{} {s:?} {dt} {lay:?}", case.name), half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0), |d| {
                widened(vec![(case.tensor)(&input(10, s, dt, lay, d))])
            });
        }
        let special = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.0, -1.0, 0.5, -0.5, 11.5, -17.0, 1e-3];
        for dt in HALVES {
            p.check(format!("{} special values {dt}", case.name), half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0), |d| {
                widened(vec![(case.tensor)(&floats(&special, &[special.len()], dt, d))])
            });
            p.check(format!("apply_({}) {dt}", case.name), half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0), |d| {
                let (base, view) = base_and_view(11, dt, d);
                view.apply_(case.op)?;
                widened(vec![base])
            });
        }
    }
    type Op = (&'static str, fn(&Tensor) -> Result<Tensor>);
    let scalar_ops: &[Op] = &[
        ("add_scalar(0.1)", |t| Ok(t.add_scalar(0.1))),
        ("add_scalar(3i64)", |t| Ok(t.add_scalar(3))),
        ("rsub_scalar(4)", |t| Ok(t.rsub_scalar(4))),
        ("mul_scalar(-2.25)", |t| Ok(t.mul_scalar(-2.25))),
        ("div_scalar(3)", |t| Ok(t.div_scalar(3.0))),
        ("rdiv_scalar(1.5)", |t| Ok(t.rdiv_scalar(1.5))),
        ("pow_scalar(2)", |t| t.pow_scalar(2.0)),
        ("pow_scalar(0.5)", |t| t.pow_scalar(0.5)),
        ("rpow_scalar(2)", |t| Ok(t.rpow_scalar(2.0))),
        ("maximum_scalar(0.5)", |t| Ok(t.maximum_scalar(0.5))),
        ("clamp(-1, 1)", |t| Ok(t.clamp(Some(-1.0), Some(1.0)))),
        ("logical_not", |t| Ok(t.logical_not())),
    ];
    for (name, f) in scalar_ops {
        for (s, lay, dt) in cases(&[&[], &[7], &[4, 3, 5]], &HALVES) {
            p.check(format!("{name} {s:?} {dt} {lay:?}"), half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0), |d| {
                widened(vec![f(&input(12, s, dt, lay, d))?])
            });
        }
    }
    // 16-bit with 16-bit, with the other 16-bit dtype (f32), with wider floats and with
    // integers (the 16-bit dtype).
    let pairs: &[(DType, DType)] = &[
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::BF16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F64),
        (DType::I64, DType::F16),
        (DType::U8, DType::BF16),
    ];
    let broadcast: &[(&[usize], &[usize])] =
        &[(&[3, 4], &[3, 4]), (&[2, 1, 4], &[3, 1]), (&[], &[3]), (&[67, 131], &[131])];
    for case in BINARY {
        for &(sa, sb) in broadcast {
            for &(da, db) in pairs {
                let dt = if da.is_half() { da } else { db };
                for lay in [Lay::Contiguous, Lay::Transposed] {
                    if !lay.fits(sa.len()) {
                        continue;
                    }
                    let tol = half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0);
                    p.check(format!("{} {sa:?} {da} {lay:?} with {sb:?} {db}", case.name), tol, |d| {
                        widened(vec![(case.tensor)(
                            &input(20, sa, da, lay, d),
                            &input(21, sb, db, Lay::Contiguous, d),
                        )?])
                    });
                }
            }
        }
    }
    type Cmp = (&'static str, fn(&Tensor, &Tensor) -> Result<Tensor>, fn(&Tensor) -> Tensor);
    let cmps: &[Cmp] = &[
        ("eq", |a, b| a.eq(b), |a| a.eq_scalar(1)),
        ("ne", |a, b| a.ne(b), |a| a.ne_scalar(0.1)),
        ("lt", |a, b| a.lt(b), |a| a.lt_scalar(0)),
        ("ge", |a, b| a.ge(b), |a| a.ge_scalar(0.1)),
    ];
    for (name, f, fs) in cmps {
        for &(da, db) in pairs {
            p.check(format!("{name} {da} with {db}"), tol::EXACT, |d| {
                // Integer-valued, so that equality happens.
                let a = input(30, &[4, 5], da, Lay::Transposed, d).to_dtype(DType::I64).to_dtype(da);
                let b = input(31, &[5], db, Lay::Contiguous, d).to_dtype(DType::I64).to_dtype(db);
                widened(vec![f(&a, &b)?, fs(&a), fs(&b)])
            });
        }
        for dt in HALVES {
            p.check(format!("{name} with NaN and infinities {dt}"), tol::EXACT, |d| {
                let a = floats(&[f64::NAN, 1.0, f64::NAN, f64::INFINITY, 0.1], &[5], dt, d);
                let b = floats(&[f64::NAN, f64::NAN, 1.0, f64::INFINITY, 0.1], &[5], dt, d);
                widened(vec![f(&a, &b)?, fs(&a)])
            });
        }
    }
    for dt in HALVES {
        p.check(format!("where_cond {dt}"), tol::EXACT, |d| {
            let cond = input(33, &[3, 4], DType::F32, Lay::Contiguous, d).gt_scalar(0.0);
            let (a, b) = (input(34, &[4], dt, Lay::Contiguous, d), input(35, &[3, 4], dt, Lay::Transposed, d));
            widened(vec![
                cond.where_cond(&a, &b)?,
                cond.where_tensor_scalar(&a, 7)?,
                cond.where_scalar_tensor(-2.5, &b)?,
            ])
        });
    }
    type Ip = (&'static str, fn(&Tensor, &Tensor) -> Result<()>);
    let in_place: &[Ip] = &[
        ("fill_(3.3)", |v, _| v.fill_(3.3)),
        ("copy_", |v, s| v.copy_(s)),
        ("copy_ f32 source", |v, s| v.copy_(&s.to_dtype(DType::F32).mul_scalar(1.001))),
        ("add_", |v, s| v.add_(s)),
        ("mul_", |v, s| v.mul_(s)),
        ("div_ broadcast", |v, s| v.div_(&s.narrow(0, 0, 1)?)),
        ("add_scaled_(-0.5)", |v, s| v.add_scaled_(s, -0.5)),
        ("mul_scalar_(0.1)", |v, _| v.mul_scalar_(0.1)),
        ("clamp_(-1, 0.5)", |v, _| v.clamp_(Some(-1.0), Some(0.5))),
        ("masked_fill_", |v, s| v.masked_fill_(&s.gt_scalar(0), 42)),
    ];
    for (name, f) in in_place {
        for dt in HALVES {
            p.check(format!("{name} on a strided view {dt}"), half_tol(dt, tol::ELEMENTWISE, 1.0, 0.0), |d| {
                let (base, view) = base_and_view(110, dt, d);
                f(&view, &input(111, &[4, 3], dt, Lay::Transposed, d))?;
                widened(vec![base, view])
            });
        }
    }
    p.finish();
}

#[test]
fn half_reductions_softmax_and_losses() {
    require_cuda!();
    let mut p = Parity::new("half_reductions_softmax_and_losses");
    type Red = (&'static str, fn(&Tensor, &[i64], bool) -> Result<Tensor>);
    let reds: &[Red] = &[
        ("sum", |t, d, k| t.sum(d, k)),
        ("mean", |t, d, k| t.mean(d, k)),
        ("prod", |t, d, k| t.prod(d, k)),
        ("max", |t, d, k| t.max(d, k)),
        ("var", |t, d, k| t.var(d, true, k)),
        ("std(biased)", |t, d, k| t.std(d, false, k)),
        ("logsumexp", |t, d, k| t.logsumexp(d, k)),
    ];
    let shapes: &[(&[usize], &[&[i64]])] =
        &[(&[7], &[&[0]]), (&[4, 3, 5], &[&[0], &[2], &[0, 2]]), (&[0, 3], &[&[0], &[1]]), (&[33, 70], &[&[0], &[1]])];
    for (name, f) in reds {
        for &(s, dimsets) in shapes {
            for lay in [Lay::Contiguous, Lay::Transposed, Lay::Expanded] {
                for dt in HALVES {
                    for &dims in dimsets {
                        if !lay.fits(s.len()) {
                            continue;
                        }
                        // A reduction composed of several kernels (mean, var, std, logsumexp)
                        // rounds between them.
                        p.check(
                            format!("{name}({dims:?}) {s:?} {dt} {lay:?}"),
                            half_tol(dt, tol::REDUCTION, 2.0, 0.0),
                            |d| widened(vec![f(&input(50, s, dt, lay, d), dims, true)?]),
                        );
                    }
                }
            }
        }
    }
    for (s, lay, dt) in cases(&[&[7], &[4, 3, 5], &[33, 300]], &HALVES) {
        p.check(format!("sum_all, argmax, argmin {s:?} {dt} {lay:?}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
            // Values a quarter apart: ties, where the first extreme must win.
            let t = input(52, s, dt, lay, d).mul_scalar(4).round().div_scalar(4);
            widened(vec![t.sum_all(), t.argmax(-1, false)?, t.argmin(0, true)?, t.max_all()?])
        });
        for dim in 0..s.len() as i64 {
            p.check(format!("softmax({dim}) {s:?} {dt} {lay:?}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
                let t = input(60, s, dt, lay, d);
                widened(vec![t.softmax(dim)?, t.log_softmax(dim)?])
            });
        }
        p.check(
            format!("power_sum {s:?} {dt} {lay:?}"),
            Tol { f32: tol::REDUCTION.f32, f64: tol::REDUCTION.f32 },
            |d| {
                let t = input(62, s, dt, lay, d);
                let sums = [1.0, 2.0, f64::INFINITY].map(|pw| t.power_sum(pw));
                widened(vec![Tensor::from_vec(sums.into_iter().collect::<Result<Vec<_>>>()?, [3])?.to_device(d)?])
            },
        );
    }
    for dt in HALVES {
        let ninf = f64::NEG_INFINITY;
        let rows = [0.0, ninf, 1.0, ninf, ninf, ninf, ninf, ninf, 60000.0, 59000.0, -60000.0, 0.0];
        p.check(format!("softmax of masked and large rows {dt}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
            let t = floats(&rows, &[3, 4], dt, d);
            widened(vec![t.softmax(1)?, t.log_softmax(1)?])
        });
        for reduction in [LossReduction::None, LossReduction::Mean] {
            for smoothing in [0.0, 0.1] {
                let loss = ClassLoss {
                    scores: ClassScores::Logits,
                    label_smoothing: smoothing,
                    ignore_index: Some(-100),
                    reduction,
                };
                p.check(format!("{loss:?} [64, 10] {dt}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
                    let x = inp(121, &[64, 10], dt, d);
                    let targets: Vec<i64> =
                        (0..64).map(|i| if i % 4 == 3 { -100 } else { (mix(120, i) % 10) as i64 }).collect();
                    let t = ints(&targets, &[64], d)?;
                    let l = x.class_loss(&t, &loss)?;
                    let g = inp(122, l.shape(), dt, d);
                    widened(vec![l, x.class_loss_backward(&t, &g, &loss)?])
                });
            }
        }
    }
    p.finish();
}

#[test]
fn half_matmul_and_layers() {
    require_cuda!();
    let mut p = Parity::new("half_matmul_and_layers");
    let pairs: &[(&[usize], &[usize])] = &[
        (&[5, 7], &[7, 3]),
        (&[7], &[7, 4]),
        (&[3, 7], &[7]),
        (&[2, 5, 7], &[2, 7, 3]),
        (&[2, 1, 5, 7], &[3, 7, 4]),
        (&[0, 7], &[7, 3]),
        (&[5, 0], &[0, 3]),
        (&[64, 150], &[150, 80]),
    ];
    for &(sa, sb) in pairs {
        for dt in HALVES {
            for la in [Lay::Contiguous, Lay::Transposed, Lay::Stepped, Lay::Expanded] {
                for lb in [Lay::Contiguous, Lay::Transposed] {
                    if !la.fits(sa.len()) || !lb.fits(sb.len()) {
                        continue;
                    }
                    p.check(
                        format!("matmul {sa:?} {la:?} @ {sb:?} {lb:?} {dt}"),
                        half_tol(dt, tol::MATMUL, 1.0, 0.0),
                        |d| widened(vec![input(70, sa, dt, la, d).matmul(&input(71, sb, dt, lb, d))?]),
                    );
                }
            }
        }
    }
    p.check_error("matmul of f16 and bf16", |d| {
        one(inp(72, &[2, 3], DType::F16, d).matmul(&inp(73, &[3, 2], DType::BF16, d))?)
    });
    p.check_error("matmul of bf16 and f32", |d| {
        one(inp(72, &[2, 3], DType::BF16, d).matmul(&inp(73, &[3, 2], DType::F32, d))?)
    });
    let convs: &[(&str, [usize; 4], [usize; 4], ConvArgs<2>)] = &[
        (
            "3x3 pad 1 stride 2",
            [2, 3, 9, 8],
            [4, 3, 3, 3],
            ConvArgs::default().padding(Padding::Explicit([1, 1])).stride(2),
        ),
        ("groups 2", [2, 4, 7, 7], [6, 2, 3, 3], ConvArgs::default().groups(2).padding(Padding::Same)),
        ("mnist cnn layer", [8, 16, 14, 14], [32, 16, 5, 5], ConvArgs::default().padding(Padding::Explicit([2, 2]))),
    ];
    for (name, xs, ws, args) in convs {
        for dt in HALVES {
            // The device may round the product before adding the bias; the products of
            // these O(1) inputs are at most about 40.
            p.check(format!("conv2d {name} {dt}"), half_tol(dt, tol::MATMUL, 2.0, 64.0), |d| {
                let x = input(130, xs, dt, Lay::Transposed, d);
                let (w, b) = (inp(131, ws, dt, d), inp(132, &[ws[0]], dt, d));
                widened(vec![x.conv2d(&w, Some(&b), args)?, x.conv2d(&w, None, args)?])
            });
        }
    }
    for dt in HALVES {
        p.check(format!("conv_transpose2d {dt}"), half_tol(dt, tol::MATMUL, 2.0, 64.0), |d| {
            let x = input(133, &[2, 4, 5, 5], dt, Lay::Transposed, d);
            let (w, b) = (inp(134, &[4, 2, 3, 3], dt, d), inp(135, &[2], dt, d));
            let args = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1);
            widened(vec![x.conv_transpose2d(&w, Some(&b), &args)?])
        });
    }
    for dt in HALVES {
        p.check(format!("pools {dt}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
            let x = input(140, &[2, 3, 9, 8], dt, Lay::Stepped, d);
            let (y, idx) = x.max_pool2d_with_indices(&MaxPoolArgs::new(3).stride(2).padding(1))?;
            let avg = x.avg_pool2d(&AvgPoolArgs::new(3).stride(2).padding(1).count_include_pad(false))?;
            let bilinear = InterpolateArgs {
                mode: InterpolateMode::Bilinear,
                align_corners: Some(false),
                ..InterpolateArgs::size([12, 5])
            };
            let up = x.interpolate(&bilinear)?;
            widened(vec![y, idx, avg, x.adaptive_avg_pool2d([4, 5])?, up])
        });
        p.check(format!("channel_norm and backward {dt}"), half_tol(dt, tol::MATMUL, 1.0, 0.0), |d| {
            let x = input(150, &[4, 3, 5, 6], dt, Lay::Contiguous, d).add_scalar(3.0);
            let (w, b) = (inp(151, &[3], dt, d), inp(152, &[3], dt, d));
            let (y, mean, var) = x.channel_norm(Some(&w), Some(&b), 1e-5)?;
            let g = inp(153, &[4, 3, 5, 6], dt, d);
            let (gx, gb, gw) = x.channel_norm_backward(&g, &mean, &var, Some(&w), 1e-5)?;
            widened(vec![y, mean, var, gx, gb, gw])
        });
        for causal in [false, true] {
            p.check(format!("attention causal {causal} {dt}"), half_tol(dt, tol::MATMUL, 1.0, 0.0), |d| {
                let q = input(160, &[2, 3, 5, 8], dt, Lay::Contiguous, d);
                let k = input(161, &[2, 3, 7, 8], dt, Lay::Transposed, d);
                let v = input(162, &[2, 3, 7, 8], dt, Lay::Contiguous, d);
                let m = inp(164, &[5, 7], dt, d);
                let spec = Attention { scale: 1.0 / 8f64.sqrt(), causal };
                let (out, lse) = q.attention(&k, &v, Some(&m), &spec)?;
                let g = inp(165, out.shape(), dt, d);
                let (gq, gk, gv) = q.attention_backward(&k, &v, Some(&m), &out, &lse, &g, &spec)?;
                widened(vec![out, lse, gq, gk, gv])
            });
        }
        p.check(format!("lstm_cell, lstm_sequence and backward {dt}"), half_tol(dt, tol::CHAINED, 1.0, 0.0), |d| {
            let (b, h) = (4, 8);
            let (a, gi, c) =
                (inp(170, &[b, 4 * h], dt, d), input(171, &[b, 4 * h], dt, Lay::Stepped, d), inp(172, &[b, h], dt, d));
            let y = Tensor::lstm_cell(&a, &gi, &c)?;
            let (dh, dc) = (inp(174, &[b, h], dt, d), inp(175, &[b, h], dt, d));
            let (ga, gc) = Tensor::lstm_cell_backward(&y, Some(&inp(173, y.shape(), dt, d)), &dh, &dc, &c)?;
            let gis = input(176, &[3, b, 4 * h], dt, Lay::Stepped, d);
            let w_hh = inp(177, &[4 * h, h], dt, d).mul_scalar(0.2);
            let ys = Tensor::lstm_sequence(&gis, &w_hh, &dh, &c, false)?;
            let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&ys, &inp(180, ys.shape(), dt, d), &w_hh, &c, false)?;
            widened(vec![y, ga, gc, ys, d_gi, dh0, dc0])
        });
    }
    p.finish();
}

#[test]
fn half_indexing_joins_and_optimizers() {
    require_cuda!();
    let mut p = Parity::new("half_indexing_joins_and_optimizers");
    for (s, lay, dt) in cases(&[&[5, 4], &[3, 4, 5]], &HALVES) {
        for dim in 0..s.len() {
            let n = s[dim] as i64;
            let mut ishape = s.to_vec();
            ishape[dim] = 3;
            let m: usize = ishape.iter().product();
            let gi: Vec<i64> = (0..m).map(|i| (mix(81, i as u64) % n as u64) as i64).collect();
            p.check(format!("index_select, gather, masked_fill, tril ({dim}) {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
                let t = input(80, s, dt, lay, d);
                let mask = input(85, &s[1..], DType::F32, Lay::Contiguous, d).gt_scalar(0.0);
                widened(vec![
                    t.index_select(dim, &ints(&[n - 1, 0, 1, 1], &[4], d)?)?,
                    t.gather(dim, &ints(&gi, &ishape, d)?)?,
                    t.masked_fill(&mask, 1.5)?,
                    t.tril(-1)?,
                ])
            });
            p.check(format!("scatter_add({dim}) {s:?} {dt} {lay:?}"), half_tol(dt, tol::REDUCTION, 1.0, 0.0), |d| {
                let src = input(83, &ishape, dt, Lay::Contiguous, d);
                widened(vec![input(84, s, dt, lay, d).scatter_add(dim, &ints(&gi, &ishape, d)?, &src)?])
            });
        }
        p.check(format!("cat, stack and pad {s:?} {dt} {lay:?}"), tol::EXACT, |d| {
            let (a, b) = (input(100, s, dt, lay, d), input(101, s, dt, Lay::Stepped, d));
            let c = input(102, s, DType::F32, Lay::Contiguous, d);
            widened(vec![
                Tensor::cat(&[&a, &b], 0)?,
                Tensor::stack(&[&a, &b], -1)?,
                Tensor::cat(&[&a, &c], 1)?,
                a.pad(&[(1, 2), (0, 1)], 7)?,
            ])
        });
    }
    p.check_error("index_select out of range bf16", |d| {
        one(inp(87, &[4, 3], DType::BF16, d).index_select(0, &ints(&[0, 4], &[2], d)?)?)
    });
    let sgd =
        SgdStep { lr: 0.05, momentum: 0.9, dampening: 0.1, nesterov: false, weight_decay: 1e-2, fresh_buffer: false };
    let adam = AdamStep {
        lr: 1e-2,
        beta1: 0.8,
        beta2: 0.99,
        eps: 1e-6,
        weight_decay: 0.1,
        decoupled: true,
        amsgrad: true,
        step: 1,
    };
    let rms = RmsPropStep { lr: 1e-2, alpha: 0.9, eps: 1e-6, weight_decay: 0.1, momentum: 0.9, centered: true };
    for dt in HALVES {
        for s in [&[7][..], &[67, 131]] {
            // Three steps, each rounding the parameter and every state once.
            let tol = half_tol(dt, tol::CHAINED, 3.0, 0.0);
            p.check(format!("sgd_step_, adam_step_, rmsprop_step_ {s:?} {dt}"), tol, |d| {
                let (p1, p2, p3) = (inp(180, s, dt, d), inp(190, s, dt, d), inp(200, s, dt, d));
                let buf = p1.zeros_like();
                let (m, v, vmax) = (p2.zeros_like(), p2.zeros_like(), p2.zeros_like());
                let (sq, avg, mom) = (p3.zeros_like(), p3.zeros_like(), p3.zeros_like());
                for step in 1..=3u64 {
                    let g = inp(181 + step, s, dt, d);
                    p1.sgd_step_(&g, Some(&buf), &SgdStep { fresh_buffer: step == 1, ..sgd })?;
                    p2.adam_step_(&g, &m, &v, Some(&vmax), &AdamStep { step, ..adam })?;
                    p3.rmsprop_step_(&g, &sq, Some(&avg), Some(&mom), &rms)?;
                }
                widened(vec![p1, buf, p2, m, v, vmax, p3, sq, avg, mom])
            });
        }
    }
    p.finish();
}

#[test]
fn half_random_numbers_follow_manual_seed() {
    require_cuda!();
    let _guard = RNG.lock();
    let mut p = Parity::new("half_random_numbers_follow_manual_seed");
    for dt in HALVES {
        for n in [0usize, 7, 1000] {
            // Drawn in f32 from the global generator and rounded: the CPU's numbers.
            p.check(format!("uniform and normal n={n} {dt}"), tol::EXACT, |d| {
                manual_seed(99);
                let b = backend_for(d)?;
                let layout = Layout::contiguous(Shape::from([n]));
                let mut out = Vec::new();
                for dist in
                    [Distribution::Uniform { low: -3.0, high: 5.0 }, Distribution::Normal { mean: 0.0, std: 1.0 }]
                {
                    let s = b.random(n, dist, dt)?;
                    let host = b.download((&s, &layout))?;
                    // A draw of another dtype than asked for reads as empty, and fails the shape.
                    let t = match dt {
                        DType::F16 => Tensor::from_vec(host.as_slice::<f16>().unwrap_or_default().to_vec(), [n])?,
                        _ => Tensor::from_vec(host.as_slice::<bf16>().unwrap_or_default().to_vec(), [n])?,
                    };
                    out.push(t.to_device(d)?);
                }
                widened(out)
            });
        }
    }
    p.finish();
}
