//! Random programs of `Backend` calls, run the same way on any backend: a seeded generator
//! picks each call and its operands (shapes including empty and 0-d ones, transposed,
//! stepped, offset and expanded views, every dtype the call takes), uploads host data to
//! the backend under test, calls the method and downloads what it returns. Two backends
//! given the same seed make the same calls on the same data, so their traces can be
//! compared step by step (`libtorch_differential.rs`), and the methods and op-table
//! variants a trace touched can be checked against the complete lists
//! (`backend_program_coverage.rs`).

#![allow(dead_code)]

use ember_tensor::backend::{AdamState, Backend, BinaryOp, CmpOp, ReduceOp, RmsPropState, UnaryOp};
use ember_tensor::layout::Layout;
use ember_tensor::ops::attention::Attention;
use ember_tensor::ops::conv::{ConvArgs, ConvGeometry, Padding, UnfoldArgs, conv_geometry, unfold_window};
use ember_tensor::ops::loss::{ClassLoss, ClassScores, LossReduction};
use ember_tensor::ops::lstm::LstmRun;
use ember_tensor::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use ember_tensor::ops::pool::{
    AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs, adaptive_avg_pool_plan, adaptive_max_pool_plan,
    avg_pool_plan, interpolate_plan, max_pool_plan,
};
use ember_tensor::random::Distribution;
use ember_tensor::storage::{Buffer, CpuStorage, Storage};
use ember_tensor::{DType, Scalar, Shape, bf16, f16};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// Host values of one result, read as `f64`.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The dtype the backend returned.
    pub dtype: DType,
    /// The elements in order.
    pub data: Vec<f64>,
}

/// How closely two backends must agree on a step: `rel` relative and `abs` absolute
/// (both 0: bit for bit, NaN matching NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// Relative bound.
    pub rel: f64,
    /// Absolute bound.
    pub abs: f64,
}

/// Exact agreement.
pub const EXACT: Tol = Tol { rel: 0.0, abs: 0.0 };

/// One call: what was called, on what, and what came back.
#[derive(Debug)]
pub struct Step {
    /// The `Backend` method.
    pub method: &'static str,
    /// The op-table variant (`exp`, `add`, ...), for the methods that take one.
    pub variant: Option<&'static str>,
    /// Operands in words, for failure messages.
    pub what: String,
    /// The results, or the error's message.
    pub result: Result<Vec<Value>, String>,
    /// The agreement the comparison asks for.
    pub tol: Tol,
}

/// The generator and the backend a program runs on.
pub struct Program<'a> {
    rng: Pcg64,
    b: &'a dyn Backend,
    /// The steps so far.
    pub steps: Vec<Step>,
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const ALL: [DType; 6] = [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::U8];

/// The agreement a float result of `dtype` gets from an elementwise function: a few units
/// in the last place (PyTorch's vectorised transcendentals and ember's differ there).
pub fn ulps(dtype: DType, n: f64) -> Tol {
    match dtype {
        DType::F32 => Tol { rel: n * 1.2e-7, abs: n * 1e-30 },
        DType::F64 => Tol { rel: n * 2.3e-16, abs: 1e-300 },
        DType::F16 => Tol { rel: n * 9.8e-4, abs: n * 6e-8 },
        DType::BF16 => Tol { rel: n * 7.9e-3, abs: n * 1e-30 },
        _ => EXACT,
    }
}

/// The agreement of a float elementwise function: [`ulps`], and an absolute bound for
/// results that cancel (`gelu` of large negative values, `1 + erf(x)`), where ember's and
/// PyTorch's approximations of `erf`, `exp` and `tanh` differ by their absolute error.
pub fn function(dtype: DType) -> Tol {
    let u = ulps(dtype, 4.0);
    let abs = match dtype {
        DType::F32 => 1e-6,
        DType::F64 => 1e-14,
        DType::F16 | DType::BF16 => u.rel,
        _ => 0.0,
    };
    Tol { rel: u.rel, abs }
}

/// The agreement of sums and products over `k` terms (the summation order differs).
pub fn sums(dtype: DType, k: usize) -> Tol {
    let k = (k.max(1) as f64).sqrt() * 4.0;
    match dtype {
        DType::F32 => Tol { rel: 2e-6 * k, abs: 2e-6 * k },
        DType::F64 => Tol { rel: 1e-14 * k, abs: 1e-14 * k },
        DType::F16 => Tol { rel: 2e-3 * k, abs: 2e-3 * k },
        DType::BF16 => Tol { rel: 1.6e-2 * k, abs: 1.6e-2 * k },
        _ => EXACT,
    }
}

fn values(s: &CpuStorage) -> Vec<f64> {
    match s {
        CpuStorage::U8(b) => b.iter().map(|&v| v as f64).collect(),
        CpuStorage::I64(b) => b.iter().map(|&v| v as f64).collect(),
        CpuStorage::F16(b) => b.iter().map(|v| v.to_f64()).collect(),
        CpuStorage::BF16(b) => b.iter().map(|v| v.to_f64()).collect(),
        CpuStorage::F32(b) => b.iter().map(|&v| v as f64).collect(),
        CpuStorage::F64(b) => b.to_vec(),
    }
}

/// Host data of `dtype` from `f64` values (rounded as casts round).
pub fn host(dtype: DType, v: &[f64]) -> CpuStorage {
    match dtype {
        DType::U8 => Buffer::from_fn("test", v.len(), |i| v[i] as u8).expect("alloc").into(),
        DType::I64 => Buffer::from_fn("test", v.len(), |i| v[i] as i64).expect("alloc").into(),
        DType::F16 => Buffer::from_fn("test", v.len(), |i| f16::from_f64(v[i])).expect("alloc").into(),
        DType::BF16 => Buffer::from_fn("test", v.len(), |i| bf16::from_f64(v[i])).expect("alloc").into(),
        DType::F32 => Buffer::from_fn("test", v.len(), |i| v[i] as f32).expect("alloc").into(),
        DType::F64 => Buffer::from_fn("test", v.len(), |i| v[i]).expect("alloc").into(),
    }
}

/// An operand on the backend: its storage and the view's layout.
pub struct Operand {
    /// The storage.
    pub s: Storage,
    /// The view.
    pub l: Layout,
}

impl Operand {
    fn view(&self) -> (&Storage, &Layout) {
        (&self.s, &self.l)
    }
}

impl<'a> Program<'a> {
    /// A program of seed `seed` on backend `b`.
    pub fn new(b: &'a dyn Backend, seed: u64) -> Self {
        Program { rng: Pcg64::seed_from_u64(seed), b, steps: Vec::new() }
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.rng.random_range(0..xs.len())]
    }

    fn shape(&mut self, rank: usize, max: usize) -> Vec<usize> {
        (0..rank).map(|_| self.rng.random_range(1..=max)).collect()
    }

    /// Random values for an operand of `dtype`: floats mostly in [-3, 3] with some exact
    /// small integers and zeros; integers small (or any byte).
    fn data(&mut self, dtype: DType, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| match dtype {
                DType::U8 => self.rng.random_range(0..=255) as f64,
                DType::I64 => self.rng.random_range(-20..=20) as f64,
                _ => {
                    let r: f64 = self.rng.random();
                    if r < 0.05 {
                        0.0
                    } else if r < 0.15 {
                        self.rng.random_range(-4..=4) as f64
                    } else {
                        self.rng.random_range(-3.0..3.0)
                    }
                }
            })
            .collect()
    }

    /// An operand of logical shape `shape` holding `vals` (one per element of the storage
    /// the chosen view needs), as a random kind of view.
    fn operand_with(
        &mut self,
        dtype: DType,
        shape: &[usize],
        values_of: &mut dyn FnMut(&mut Self, usize) -> Vec<f64>,
    ) -> Operand {
        let kind = self.rng.random_range(0..4);
        self.operand_of_kind(kind, dtype, shape, values_of)
    }

    /// A destination of an in-place write: any view but an expanded one (the tensor layer
    /// refuses to write through a view whose elements share memory).
    pub fn destination(&mut self, dtype: DType, shape: &[usize]) -> Operand {
        let kind = self.rng.random_range(0..3);
        self.operand_of_kind(kind, dtype, shape, &mut |p, n| p.data(dtype, n))
    }

    fn operand_of_kind(
        &mut self,
        kind: u32,
        dtype: DType,
        shape: &[usize],
        values_of: &mut dyn FnMut(&mut Self, usize) -> Vec<f64>,
    ) -> Operand {
        let rank = shape.len();
        let contiguous = |shape: &[usize]| Shape::from(shape).contiguous_strides().to_vec();
        let (len, strides, offset): (usize, Vec<usize>, usize) = match kind {
            // Stepped by 2 along every dimension, from an offset.
            1 => {
                let numel: usize = shape.iter().product();
                let strides: Vec<usize> = contiguous(shape).iter().map(|s| s * 2).collect();
                let off = self.rng.random_range(0..3);
                (off + numel * 2 + 1, strides, off)
            }
            // The last two dimensions transposed.
            2 if rank >= 2 => {
                let mut t = shape.to_vec();
                t.swap(rank - 1, rank - 2);
                let mut strides = contiguous(&t);
                strides.swap(rank - 1, rank - 2);
                (t.iter().product(), strides, 0)
            }
            // Expanded along one dimension.
            3 if rank >= 1 => {
                let d = self.rng.random_range(0..rank);
                let mut t = shape.to_vec();
                t[d] = 1;
                let mut strides = contiguous(&t);
                strides[d] = 0;
                (t.iter().product(), strides, 0)
            }
            _ => (shape.iter().product(), contiguous(shape), 0),
        };
        let vals = values_of(self, len);
        let s = self.b.upload(host(dtype, &vals)).expect("upload");
        let l = Layout::new(Shape::from(shape), strides.into(), offset).expect("layout");
        Operand { s, l }
    }

    /// A random operand of `dtype` and `shape`.
    pub fn operand(&mut self, dtype: DType, shape: &[usize]) -> Operand {
        self.operand_with(dtype, shape, &mut |p, n| p.data(dtype, n))
    }

    /// A contiguous operand holding exactly `vals`.
    pub fn exact(&mut self, dtype: DType, shape: &[usize], vals: &[f64]) -> Operand {
        let s = self.b.upload(host(dtype, vals)).expect("upload");
        Operand { s, l: Layout::contiguous(Shape::from(shape)) }
    }

    fn indices(&mut self, shape: &[usize], extent: usize) -> Operand {
        let vals: Vec<f64> =
            (0..shape.iter().product::<usize>()).map(|_| self.rng.random_range(0..extent) as f64).collect();
        self.exact(DType::I64, shape, &vals)
    }

    fn download(&self, s: &Storage) -> Result<Value, String> {
        let l = Layout::contiguous(Shape::from([s.len()]));
        let host = self.b.download((s, &l)).map_err(|e| e.to_string())?;
        Ok(Value { dtype: host.dtype(), data: values(&host) })
    }

    fn record(
        &mut self,
        method: &'static str,
        variant: Option<&'static str>,
        what: String,
        tol: Tol,
        r: ember_tensor::Result<Vec<Storage>>,
    ) {
        let result = match r {
            Ok(out) => out.iter().map(|s| self.download(s)).collect(),
            Err(e) => Err(e.to_string()),
        };
        self.steps.push(Step { method, variant, what, result, tol });
    }

    fn record_values(&mut self, method: &'static str, what: String, tol: Tol, r: ember_tensor::Result<Vec<Value>>) {
        self.steps.push(Step { method, variant: None, what, result: r.map_err(|e| e.to_string()), tol });
    }

    /// Runs `n` random steps and, every tenth, a chain of elementwise ops.
    pub fn run(&mut self, n: usize) {
        for i in 0..n {
            if i % 10 == 0 {
                self.chain();
            }
            let k = self.rng.random_range(0..STEPS.len());
            (STEPS[k])(self);
        }
    }

    /// Every kind of step once, in order.
    pub fn run_each(&mut self) {
        for step in STEPS {
            step(self);
        }
        self.chain();
    }

    // ---- elementwise ----

    /// A program of `f32` elementwise ops feeding each other: the error of one backend's
    /// op carries into the next, as in a model.
    pub fn chain(&mut self) {
        let shape = self.shape(2, 5);
        let a = self.operand(DType::F32, &shape);
        let mut x =
            Operand { s: self.b.cast(a.view(), DType::F32).expect("cast"), l: Layout::contiguous(Shape::from(&shape)) };
        let ops = [
            UnaryOp::Tanh,
            UnaryOp::Sigmoid,
            UnaryOp::Exp,
            UnaryOp::Gelu,
            UnaryOp::Silu,
            UnaryOp::Sin,
            UnaryOp::MulScalar(Scalar::Float(0.7)),
        ];
        for _ in 0..6 {
            let op = self.pick(&ops);
            let r = if self.rng.random_bool(0.5) {
                self.b.unary(op, x.view())
            } else {
                let y = self.operand(DType::F32, &shape);
                let bop = self.pick(&[BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Maximum]);
                self.b.binary(bop, x.view(), y.view())
            };
            let out = match r {
                Ok(s) => s,
                Err(e) => {
                    self.steps.push(Step {
                        method: "chain",
                        variant: None,
                        what: op.name().into(),
                        result: Err(e.to_string()),
                        tol: EXACT,
                    });
                    return;
                }
            };
            let v = self.download(&out);
            self.steps.push(Step {
                method: "chain",
                variant: None,
                what: format!("{shape:?} then {}", op.name()),
                result: v.map(|v| vec![v]),
                tol: Tol { rel: ulps(DType::F32, 64.0).rel, abs: 1e-6 },
            });
            x = Operand { s: out, l: Layout::contiguous(Shape::from(&shape)) };
        }
    }
}

/// Every unary op of the table with parameters.
pub fn unary_ops() -> Vec<UnaryOp> {
    use UnaryOp::*;
    let s = Scalar::Float(1.5);
    let i = Scalar::Int(3);
    vec![
        Neg,
        Abs,
        Sign,
        Square,
        Relu,
        Exp,
        Log,
        Sqrt,
        Rsqrt,
        Sin,
        Cos,
        Tanh,
        Sigmoid,
        Gelu,
        GeluTanh,
        Silu,
        Erf,
        Log1p,
        Expm1,
        Recip,
        Floor,
        Ceil,
        Round,
        Softplus { beta: 1.5, threshold: 2.0 },
        LeakyRelu(0.1),
        Elu(0.7),
        Clamp { min: -1.0, max: 2.0 },
        AddScalar(s),
        AddScalar(i),
        SubScalar(s),
        SubScalar(i),
        RSubScalar(s),
        RSubScalar(i),
        MulScalar(s),
        MulScalar(i),
        DivScalar(s),
        RDivScalar(s),
        PowScalar(Scalar::Float(2.0)),
        PowScalar(Scalar::Float(0.5)),
        PowScalar(Scalar::Float(3.0)),
        PowScalar(i),
        RPowScalar(Scalar::Float(2.0)),
        MaximumScalar(s),
        MaximumScalar(Scalar::Int(300)),
        MinimumScalar(s),
        MinimumScalar(Scalar::Int(-1)),
    ]
}

/// Every binary op of the table.
pub const BINARY: [BinaryOp; 7] =
    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Maximum, BinaryOp::Minimum];

/// Every comparison of the table.
pub const COMPARE: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

/// Every reduction of the table.
pub const REDUCE: [ReduceOp; 6] =
    [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];

/// The lock around the global generator, which `random` steps seed.
pub static GENERATOR: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

type StepFn = fn(&mut Program<'_>);

/// The kinds of step.
pub const STEPS: &[StepFn] = &[
    steps::full,
    steps::cast,
    steps::unary,
    steps::binary,
    steps::compare,
    steps::compare_scalar,
    steps::where_cond,
    steps::unary_inplace,
    steps::binary_inplace,
    steps::copy_inplace,
    steps::fill_inplace,
    steps::reduce,
    steps::softmax,
    steps::class_loss,
    steps::attention,
    steps::attention_laid_out,
    steps::lstm,
    steps::matmul,
    steps::matmul_into,
    steps::index,
    steps::masked_fill,
    steps::relu_backward,
    steps::triangle,
    steps::conv,
    steps::window,
    steps::channel_norm,
    steps::layer_norm,
    steps::pool,
    steps::resample,
    steps::random,
    steps::cat,
    steps::power_sum,
    steps::sgd,
    steps::adam,
    steps::rmsprop,
    steps::unscale,
    steps::device,
];

mod steps;
