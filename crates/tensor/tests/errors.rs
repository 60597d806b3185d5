//! "No panic on any user input": every public operation of `Tensor` is fed bad shapes, bad
//! dimensions, out-of-range indices, empty and huge shapes and mismatched dtypes, and must
//! answer with an `Err` whose message names the operation (and, for shape and dtype errors,
//! the offending shapes or dtypes). A few valid edge cases (empty tensors, 0-d tensors,
//! extreme but legal arguments) must succeed with the right values.
//!
//! Every call runs under `catch_unwind`, so a panic fails the one check with the expression
//! that caused it instead of taking the whole test down with an unhelpful message.

use ember_tensor::{DType, Device, Error, Result, Tensor, UnaryOp};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, turning a panic into a test failure that names `expr`.
fn no_panic<T>(expr: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("<non-string payload>");
            panic!("`{expr}` panicked instead of returning an error: {msg}");
        }
    }
}

/// Asserts that `f` fails without panicking and that the message contains every needle.
#[track_caller]
fn check_err<T>(expr: &str, f: impl FnOnce() -> Result<T>, needles: &[&str]) -> Error {
    match no_panic(expr, f) {
        Ok(_) => panic!("`{expr}` should have failed"),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(msg.contains(n), "`{expr}`: the error {msg:?} does not mention {n:?}");
            }
            e
        }
    }
}

/// Asserts that `f` succeeds without panicking and returns its value.
#[track_caller]
fn check_ok<T>(expr: &str, f: impl FnOnce() -> Result<T>) -> T {
    match no_panic(expr, f) {
        Ok(v) => v,
        Err(e) => panic!("`{expr}` should have succeeded, got: {e}"),
    }
}

/// `fails!(expr, "needle", ...)`: `expr` is an `Err` mentioning every needle.
macro_rules! fails {
    ($e:expr $(, $needle:expr)* $(,)?) => {
        check_err(stringify!($e), || $e, &[$($needle),*])
    };
}

/// `works!(expr)`: `expr` is `Ok`; evaluates to the value.
macro_rules! works {
    ($e:expr) => {
        check_ok(stringify!($e), || $e)
    };
}

/// `infallible!(expr)`: an operation that returns a plain value does not panic.
macro_rules! infallible {
    ($e:expr) => {
        no_panic(stringify!($e), || $e)
    };
}

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

fn f64s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f64 * 0.5 - 1.0).collect(), shape).unwrap()
}

fn i64s(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

fn u8s(values: &[u8], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// Element counts above `2^59` pass the shape check for an 8-byte dtype but are refused by
/// the allocator's size check without ever asking the system for memory, so they exercise
/// the out-of-memory path deterministically and instantly.
const HUGE: usize = 3 << 58;

#[test]
fn creation() {
    let big = [usize::MAX, 2];
    for dt in [DType::U8, DType::I64, DType::F32, DType::F64] {
        fails!(Tensor::zeros(big, dt), "zeros", "[18446744073709551615, 2]");
        fails!(Tensor::ones([1 << 40, 1 << 40], dt), "ones", "[1099511627776, 1099511627776]");
        fails!(Tensor::full(big, 3, dt), "full");
    }
    fails!(Tensor::zeros([HUGE], DType::F64), "zeros", "cannot allocate");
    // Without GPU support (and no emulated device: this file never turns it on) every GPU
    // is an error; with it cuda:0 may exist.
    #[cfg(not(feature = "cuda"))]
    fails!(Tensor::full_on([2, 3], 1.0, DType::F32, Device::Cuda(0)), "cuda:0");
    fails!(Tensor::full_on([2, 3], 1.0, DType::F32, Device::Cuda(7)), "cuda:7");

    fails!(Tensor::from_vec(vec![1.0f32; 3], [2, 2]), "3 elements", "[2, 2]");
    fails!(Tensor::from_vec(vec![1i64; 5], [0]), "5 elements", "[0]");
    fails!(Tensor::from_vec(Vec::<f64>::new(), [1]), "0 elements", "[1]");
    fails!(Tensor::from_vec(vec![1u8; 2], big), "[18446744073709551615, 2]");
    assert_eq!(works!(Tensor::from_slice(&[1.0f64], ())).rank(), 0);
    fails!(Tensor::from_slice(&[1.0f64; 2], ()), "from_slice", "2 elements");

    fails!(Tensor::eye(usize::MAX), "eye");
    fails!(Tensor::eye(1 << 32), "eye");
    fails!(Tensor::eye(1 << 31), "eye");
    fails!(Tensor::randperm(usize::MAX), "randperm");
    fails!(Tensor::randperm(HUGE), "randperm");
}

#[test]
fn creation_with_bad_arguments() {
    fails!(Tensor::arange_step(0, 5, 0), "arange", "step 0");
    fails!(Tensor::arange_step(0.0, 5.0, 0.0), "arange");
    fails!(Tensor::arange_step(0.0, 5.0, f64::NAN), "arange");
    fails!(Tensor::arange(0.0, f64::INFINITY), "arange");
    fails!(Tensor::arange(f64::NEG_INFINITY, 0.0), "arange");
    fails!(Tensor::arange(f64::NAN, 1.0), "arange");
    fails!(Tensor::arange_step(0, 5, -1), "arange", "moves away");
    fails!(Tensor::arange_step(5, 0, 1), "arange", "moves away");
    fails!(Tensor::arange(i64::MIN, i64::MAX), "arange", "too long");
    fails!(Tensor::arange_step(0.0, 1.0, 1e-300), "arange", "too long");

    fails!(Tensor::linspace(0.0, 1.0, usize::MAX), "linspace");
    fails!(Tensor::linspace(0.0, 1.0, HUGE), "linspace");
    fails!(Tensor::linspace(f64::NAN, 1.0, 3), "linspace");
    fails!(Tensor::linspace(0.0, f64::INFINITY, 3), "linspace");

    fails!(Tensor::uniform([2], 1.0, 0.0, DType::F32), "uniform", "[1, 0)");
    fails!(Tensor::uniform([2], f64::NAN, 1.0, DType::F32), "uniform");
    fails!(Tensor::uniform([2], 0.0, f64::INFINITY, DType::F64), "uniform");
    fails!(Tensor::uniform([2], 0.0, 1.0, DType::I64), "uniform", "i64");
    fails!(Tensor::uniform([2], 0.0, 1.0, DType::U8), "uniform", "u8");
    fails!(Tensor::uniform([usize::MAX, 2], 0.0, 1.0, DType::F32), "uniform", "[18446744073709551615, 2]");
    fails!(Tensor::uniform([HUGE], 0.0, 1.0, DType::F64), "uniform", "cannot allocate");
    fails!(Tensor::normal([2], 0.0, -1.0, DType::F32), "normal", "-1");
    fails!(Tensor::normal([2], f64::NAN, 1.0, DType::F32), "normal");
    fails!(Tensor::normal([2], 0.0, f64::INFINITY, DType::F32), "normal");
    fails!(Tensor::normal([2], 0.0, 1.0, DType::I64), "normal", "i64");
    fails!(Tensor::normal([usize::MAX, 2], 0.0, 1.0, DType::F64), "normal");
    fails!(Tensor::rand([usize::MAX, 2]), "uniform");
    fails!(Tensor::randn([1 << 40, 1 << 40]), "normal");
}

#[test]
fn reading_values_back() {
    let x = f64s(&[2, 3]);
    fails!(x.to_vec::<f32>(), "to_vec", "f64", "f32");
    fails!(x.to_vec::<i64>(), "to_vec", "f64", "i64");
    fails!(u8s(&[1], &[1]).to_vec::<f64>(), "to_vec", "u8", "f64");
    fails!(f64s(&[6]).to_vec2::<f64>(), "to_vec2", "[6]");
    fails!(f64s(&[1, 2, 3]).to_vec2::<f64>(), "to_vec2", "[1, 2, 3]");
    fails!(x.to_vec2::<f32>(), "to_vec", "f64", "f32");
    fails!(x.to_scalar::<f64>(), "to_scalar", "[2, 3]");
    fails!(f64s(&[0]).to_scalar::<f64>(), "to_scalar", "[0]");
    fails!(Tensor::scalar(1.0f64).to_scalar::<f32>(), "to_vec", "f64", "f32");
    fails!(x.item(), "item", "[2, 3]");
    fails!(f32s(&[0, 2]).item(), "item", "[0, 2]");
    fails!(x.size(2), "size", "dimension 2", "rank 2");
    fails!(x.size(-3), "size", "dimension -3");
    fails!(Tensor::scalar(1u8).size(0), "size", "rank 0");
    #[cfg(not(feature = "cuda"))]
    fails!(x.to_device(Device::Cuda(0)), "cuda:0", "not compiled");
    fails!(x.to_device(Device::Cuda(7)), "cuda:7");
    #[cfg(not(feature = "libtorch"))]
    fails!(x.to_device(Device::TorchCpu), "torch-cpu", "not compiled", "libtorch");
    fails!(x.with_slice::<f32, _>(|s| s.len()), "with_slice", "f64", "f32");
    fails!(ember_tensor::threading::set_num_threads(0), "set_num_threads");

    // The rows of a tensor with zero columns are empty, however many there claim to be.
    let wide = works!(Tensor::zeros([3, 0], DType::F32));
    assert_eq!(works!(wide.to_vec2::<f32>()), vec![Vec::<f32>::new(); 3]);
    let tall = works!(Tensor::zeros([1 << 59, 0], DType::F32));
    fails!(tall.to_vec2::<f32>(), "to_vec2");
}

#[test]
fn reshape_and_view() {
    let x = f32s(&[2, 3]);
    fails!(x.reshape([7usize]), "reshape", "[7]", "6 elements");
    fails!(x.reshape([4, 2]), "reshape", "[4, 2]", "6 elements");
    fails!(x.reshape([-1, -1]), "reshape", "only one dimension can be -1");
    fails!(x.reshape([-2, 3]), "reshape", "-2");
    fails!(x.reshape([i64::MIN, 3]), "reshape");
    fails!(x.reshape([-1, 4]), "reshape", "[-1, 4]", "6 elements");
    fails!(x.reshape([0, -1]), "reshape", "[0, -1]");
    fails!(x.reshape([usize::MAX, 2]), "reshape", "[18446744073709551615, 2]");
    fails!(x.reshape([usize::MAX, 0]), "reshape");
    fails!(x.reshape([i64::MAX, i64::MAX, -1]), "reshape");
    fails!(x.reshape(()), "reshape", "[]", "6 elements");
    fails!(x.reshape(vec![1usize; 40]), "reshape");
    fails!(x.view([7usize]), "view", "[7]");
    fails!(x.t().unwrap().view([6usize]), "view", "[3, 2]", "reshape");
    fails!(x.flatten(0, 2), "flatten", "dimension 2");
    fails!(x.flatten(-3, 1), "flatten", "dimension -3");
    fails!(x.flatten(1, 0), "flatten", "start dimension 1 is after end dimension 0");
    // A 0-d tensor flattens as if it had one dimension, like PyTorch; other dims are wrong.
    let s = Tensor::scalar(2.0f32);
    assert_eq!(works!(s.flatten(0, -1)).shape(), &[1]);
    fails!(s.flatten(1, 1), "flatten", "dimension 1");
    fails!(s.flatten(0, 3), "flatten", "dimension 3");
}

#[test]
fn dimension_views() {
    let x = f32s(&[2, 3]);
    fails!(x.transpose(0, 2), "transpose", "dimension 2", "rank 2");
    fails!(x.transpose(-3, 0), "transpose", "dimension -3");
    fails!(x.transpose(usize::MAX, 0), "transpose");
    fails!(x.transpose(i64::MIN, 0), "transpose");
    fails!(Tensor::scalar(1.0f32).transpose(0, 0), "transpose", "rank 0");
    fails!(f32s(&[1, 2, 3]).t(), "t()", "rank 3");
    fails!(x.permute(&[0]), "permute", "expected 2 dimensions, got 1");
    fails!(x.permute(&[0, 1, 2]), "permute", "expected 2 dimensions, got 3");
    fails!(x.permute(&[1, 1]), "permute", "dimension 1 appears more than once");
    fails!(x.permute(&[-1, 1]), "permute", "appears more than once");
    fails!(x.permute(&[0, 2]), "permute", "dimension 2");
    fails!(x.permute(&[0i64, -3]), "permute", "dimension -3");
    fails!(x.squeeze(2), "squeeze", "dimension 2");
    fails!(x.squeeze(-3), "squeeze", "dimension -3");
    fails!(x.unsqueeze(3), "unsqueeze", "dimension 3", "rank 3");
    fails!(x.unsqueeze(-4), "unsqueeze", "dimension -4");
    fails!(Tensor::scalar(1.0f32).unsqueeze(2), "unsqueeze");
    fails!(x.expand([3usize]), "expand", "[2, 3]", "[3]");
    fails!(x.expand([2, 4]), "expand", "[2, 3]", "[2, 4]");
    fails!(x.expand([4, 3]), "expand", "[2, 3]", "[4, 3]");
    fails!(x.broadcast_to([3, 3]), "expand", "[2, 3]");
    fails!(x.expand([5, 2, 4]), "expand");
    // Expanding costs nothing, but a shape whose element count does not fit a machine word
    // cannot be a tensor.
    let one = f32s(&[1, 1]);
    fails!(one.expand([usize::MAX, usize::MAX]), "expand", "[18446744073709551615, 18446744073709551615]");
    fails!(one.expand([1 << 40, 1 << 40]), "expand", "[1099511627776, 1099511627776]");
    fails!(one.expand([3, 1 << 62, 1 << 2]), "expand");
}

#[test]
fn slicing_views() {
    let x = f32s(&[2, 3]);
    fails!(x.narrow(2, 0, 1), "narrow", "dimension 2");
    fails!(x.narrow(1, 2, 2), "narrow", "2..4", "size 3");
    fails!(x.narrow(1, 4, 0), "narrow", "4..4", "size 3");
    fails!(x.narrow(0, usize::MAX, 2), "narrow", "size 2");
    fails!(x.narrow(0, 1, usize::MAX), "narrow");
    fails!(x.slice(2, 0, 1, 1), "slice", "dimension 2");
    fails!(x.slice(-3, 0, 1, 1), "slice", "dimension -3");
    fails!(x.slice(0, 0, 2, 0), "slice", "step");
    fails!(x.select(0, 2), "select", "index 2", "size 2");
    fails!(x.select(1, usize::MAX), "select", "size 3");
    fails!(x.select(-3, 0), "select", "dimension -3");
    fails!(Tensor::scalar(1.0f32).select(0, 0), "select", "rank 0");
    fails!(f32s(&[0, 3]).select(0, 0), "select", "index 0", "size 0");
    fails!(x.split(0, 0), "split", "positive");
    fails!(x.split(1, 2), "split", "dimension 2");
    fails!(x.split_sizes(&[1, 1], 1), "split_sizes", "[1, 1]", "extent 3");
    fails!(x.split_sizes(&[2, 2], 1), "split_sizes", "[2, 2]");
    fails!(x.split_sizes(&[], 1), "split_sizes");
    fails!(x.split_sizes(&[usize::MAX, 4], 1), "split_sizes");
    fails!(x.split_sizes(&[usize::MAX, usize::MAX, 5], 1), "split_sizes");
    fails!(x.split_sizes(&[3], 2), "split_sizes", "dimension 2");
    fails!(x.chunk(0, 0), "chunk", "positive");
    fails!(x.chunk(2, -3), "chunk", "dimension -3");

    // Legal but extreme arguments: Python-style clamping and steps larger than the extent.
    assert_eq!(works!(x.slice(1, 5, 9, 1)).shape(), &[2, 0]);
    assert_eq!(works!(x.slice(1, 2, 1, 1)).shape(), &[2, 0]);
    let far = works!(x.slice(0, 0, usize::MAX, usize::MAX));
    assert_eq!(works!(far.to_vec::<f32>()), vec![0.0, 1.0, 2.0]);
    let col = works!(x.slice(1, 1, usize::MAX, usize::MAX - 1));
    assert_eq!(works!(col.to_vec::<f32>()), vec![1.0, 4.0]);
    assert_eq!(works!(x.chunk(usize::MAX, 1)).len(), 3);
    assert_eq!(works!(x.split(usize::MAX, 0)).len(), 1);
}

#[test]
fn elementwise_shape_mismatches() {
    let a = f32s(&[2, 3]);
    let b = f32s(&[4]);
    let c = f64s(&[2, 1, 5]);
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 13] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", Tensor::pow),
        ("maximum", Tensor::maximum),
        ("minimum", Tensor::minimum),
        ("eq", Tensor::eq),
        ("ne", Tensor::ne),
        ("lt", Tensor::lt),
        ("le", Tensor::le),
        ("gt", Tensor::gt),
        ("ge", Tensor::ge),
    ];
    for (name, op) in ops {
        let e = check_err(name, || op(&a, &b), &[name, "[2, 3]", "[4]"]);
        assert!(matches!(e, Error::Shape { .. }), "{name}: {e:?}");
        check_err(name, || op(&b, &a), &[name, "[4]", "[2, 3]"]);
        check_err(name, || op(&a, &c), &[name, "[2, 3]", "[2, 1, 5]"]);
        check_err(name, || op(&f32s(&[0]), &f32s(&[2])), &[name, "[0]", "[2]"]);
        // Mixed dtypes promote rather than fail, so a mismatch is still a shape error.
        check_err(name, || op(&i64s(&[1, 2], &[2]), &c), &[name, "[2]", "[2, 1, 5]"]);
    }
    fails!(&a + &b, "add", "[2, 3]", "[4]");
    fails!(&a - b.clone(), "sub");
    fails!(a.clone() * &b, "mul");
    fails!(a.clone() / b.clone(), "div");
}

#[test]
fn where_cond_errors() {
    let x = f32s(&[2, 3]);
    let mask = x.gt_scalar(2.0);
    fails!(x.where_cond(&x, &x), "where", "u8", "f32");
    fails!(i64s(&[1, 0], &[2]).where_cond(&x, &x), "where", "u8", "i64");
    fails!(mask.where_cond(&x, &f32s(&[4])), "where", "[2, 3]", "[4]");
    fails!(mask.where_cond(&f32s(&[2]), &x), "where", "[2, 3]", "[2]");
    fails!(u8s(&[1, 0], &[2]).where_cond(&x, &x), "where", "[2]", "[2, 3]");
}

#[test]
fn reduction_errors() {
    let x = f64s(&[2, 3]);
    fails!(x.sum(2, false), "sum", "dimension 2", "rank 2");
    fails!(x.sum(-3, true), "sum", "dimension -3");
    fails!(x.sum([0, 0], false), "sum", "dimension 0 appears more than once");
    fails!(x.sum([1i64, -1], false), "sum", "dimension 1 appears more than once");
    fails!(x.sum(vec![0usize, 1, 0], false), "sum", "more than once");
    fails!(x.mean(2, false), "mean", "dimension 2");
    fails!(x.mean([-1, 1], true), "mean", "more than once");
    fails!(x.prod(5, false), "prod", "dimension 5");
    fails!(x.max(2, false), "max", "dimension 2");
    fails!(x.min(-3, false), "min", "dimension -3");
    fails!(x.max([0, 0], false), "max", "more than once");
    fails!(x.argmax(2, false), "argmax", "dimension 2");
    fails!(x.argmin(-3, true), "argmin", "dimension -3");
    fails!(x.var(2, true, false), "var", "dimension 2");
    fails!(x.var([0, -2], true, false), "var", "more than once");
    fails!(x.std(3, false, false), "std", "dimension 3");
    fails!(x.logsumexp(2, false), "logsumexp", "dimension 2");
    fails!(x.logsumexp([1, 1], false), "logsumexp", "more than once");
    fails!(x.softmax(2), "softmax", "dimension 2");
    fails!(x.softmax(-3), "softmax", "dimension -3");
    fails!(x.log_softmax(2), "log_softmax", "dimension 2");
    fails!(Tensor::scalar(1.0f32).softmax(1), "softmax", "dimension 1");
    fails!(Tensor::scalar(1.0f32).log_softmax(-2), "log_softmax", "dimension -2");
    // A 0-d tensor takes dimension 0 or -1, as in PyTorch, and nothing else.
    fails!(Tensor::scalar(1.0f32).sum(1, false), "sum", "dimension 1", "rank 0");
    fails!(Tensor::scalar(1.0f32).mean(-2, false), "mean", "dimension -2", "rank 0");
    fails!(Tensor::scalar(1.0f32).argmax(1, false), "argmax", "rank 0");
    fails!(Tensor::scalar(1.0f32).sum([0, -1], false), "sum", "more than once");

    // Extremes of an empty set do not exist.
    let e = f64s(&[2, 0]);
    fails!(e.max(1, false), "max", "empty", "[2, 0]");
    fails!(e.min(1, true), "min", "empty", "[2, 0]");
    fails!(e.max([0, 1], false), "max", "[2, 0]");
    fails!(e.argmax(1, false), "argmax", "[2, 0]");
    fails!(e.argmin(-1, false), "argmin", "[2, 0]");
    fails!(e.max_all(), "max", "[2, 0]");
    fails!(e.min_all(), "min", "[2, 0]");
    fails!(e.argmax_all(), "argmax", "[0]");
    fails!(e.argmin_all(), "argmin", "[0]");
    fails!(f32s(&[0]).max_all(), "max", "[0]");
    fails!(i64s(&[], &[0]).min_all(), "min", "[0]");
    fails!(u8s(&[], &[3, 0]).argmax(1, true), "argmax", "[3, 0]");
}

#[test]
fn matmul_errors() {
    let m = |s: &[usize]| f32s(s);
    let e = fails!(m(&[2, 3]).matmul(&m(&[4, 5])));
    assert_eq!(e.to_string(), "matmul: cannot multiply [2, 3] by [4, 5]");
    assert!(matches!(e, Error::Shape { .. }));
    fails!(m(&[3]).matmul(&m(&[4])), "matmul", "[3]", "[4]");
    fails!(m(&[2, 3]).matmul(&m(&[2])), "matmul", "[2, 3]", "[2]");
    fails!(m(&[2]).matmul(&m(&[3, 2])), "matmul", "[2]", "[3, 2]");
    fails!(m(&[2, 2, 3]).matmul(&m(&[3, 3, 4])), "matmul", "[2, 2, 3]", "[3, 3, 4]");
    fails!(m(&[2, 1, 2, 3]).matmul(&m(&[3, 2, 3, 4])), "matmul", "[2, 1, 2, 3]", "[3, 2, 3, 4]");
    fails!(m(&[4, 2, 3]).matmul(&m(&[2, 3, 4])), "matmul", "[4, 2, 3]", "[2, 3, 4]");
    fails!(Tensor::scalar(1.0f32).matmul(&m(&[2])), "matmul", "[]", "[2]");
    fails!(m(&[2, 2]).matmul(&Tensor::scalar(1.0f32)), "matmul", "[2, 2]", "[]");

    let e = fails!(m(&[2, 3]).matmul(&f64s(&[3, 4])), "matmul", "f32", "f64");
    assert!(matches!(e, Error::DType { .. }));
    fails!(f64s(&[2, 3]).matmul(&m(&[3, 4])), "matmul", "f64", "f32");
    fails!(i64s(&[1, 2], &[1, 2]).matmul(&i64s(&[1, 2], &[2, 1])), "matmul", "float", "i64");
    fails!(u8s(&[1, 2], &[2]).matmul(&u8s(&[1, 2], &[2])), "matmul", "u8");
    fails!(i64s(&[1, 2], &[2]).matmul(&m(&[2])), "matmul", "i64", "f32");

    // Broadcast batches whose product does not fit a machine word.
    let a = m(&[1, 1 << 21, 1]).expand([1 << 22, 1 << 21, 1]).unwrap();
    let b = m(&[1, 1, 1 << 21]).expand([1 << 22, 1, 1 << 21]).unwrap();
    fails!(a.matmul(&b), "matmul");
    // An output that fits a word but not memory is an allocation error, not an abort.
    let a = f64s(&[1, 1 << 20, 1]).expand([1 << 20, 1 << 20, 1]).unwrap();
    let b = f64s(&[1, 1, 1 << 20]).expand([1 << 20, 1, 1 << 20]).unwrap();
    fails!(a.matmul(&b), "matmul");
}

#[test]
fn indexing_errors() {
    let x = f32s(&[3, 4]);
    let idx = i64s(&[0, 2], &[2]);
    fails!(x.index_select(0, &idx.to_dtype(DType::F32)), "index_select", "i64", "f32");
    fails!(x.index_select(0, &u8s(&[0], &[1])), "index_select", "i64", "u8");
    fails!(x.index_select(0, &i64s(&[0, 1], &[1, 2])), "index_select", "1-d", "[1, 2]");
    fails!(x.index_select(2, &idx), "index_select", "dimension 2");
    fails!(x.index_select(-3, &idx), "index_select", "dimension -3");
    fails!(x.index_select(0, &i64s(&[0, -1], &[2])), "index_select", "index -1", "size 3");
    fails!(x.index_select(1, &i64s(&[4], &[1])), "index_select", "index 4", "size 4");
    fails!(x.index_select(0, &i64s(&[i64::MAX], &[1])), "index_select", "out of range");
    fails!(x.index_select(0, &i64s(&[i64::MIN], &[1])), "index_select", "out of range");
    fails!(x.t().unwrap().index_select(1, &i64s(&[3], &[1])), "index_select", "index 3");
    fails!(f32s(&[0, 2]).index_select(0, &i64s(&[0], &[1])), "index_select", "size 0");
    fails!(Tensor::scalar(1.0f32).index_select(0, &idx), "index_select", "rank 0");

    let gi = i64s(&[0, 1, 2, 3, 0, 1], &[3, 2]);
    fails!(x.gather(1, &gi.to_dtype(DType::F64)), "gather", "i64", "f64");
    fails!(x.gather(2, &gi), "gather", "dimension 2");
    fails!(x.gather(1, &i64s(&[0, 1], &[2])), "gather", "[2]", "[3, 4]");
    fails!(x.gather(1, &i64s(&[0; 8], &[4, 2])), "gather", "[4, 2]", "[3, 4]");
    fails!(x.gather(1, &i64s(&[0, 1, 2, 3, 4, 0], &[3, 2])), "gather", "index 4", "size 4");
    fails!(x.gather(0, &i64s(&[-1, 0], &[1, 2])), "gather", "index -1", "size 3");
    fails!(x.gather(0, &i64s(&[i64::MIN], &[1, 1])), "gather", "out of range");

    let dst = Tensor::zeros([3, 4], DType::F32).unwrap();
    let src = f32s(&[3, 2]);
    fails!(dst.scatter_add(1, &gi, &f64s(&[3, 2])), "scatter_add", "f64", "f32");
    fails!(dst.scatter_add(1, &gi.to_dtype(DType::F32), &src), "scatter_add", "i64", "f32");
    fails!(dst.scatter_add(2, &gi, &src), "scatter_add", "dimension 2");
    fails!(dst.scatter_add(1, &i64s(&[0, 1, 2, 3, 4, 0], &[3, 2]), &src), "scatter_add", "index 4");
    fails!(dst.scatter_add(1, &i64s(&[0, 1, 2, 3, 0, -2], &[3, 2]), &src), "scatter_add", "index -2");
    fails!(dst.scatter_add(1, &gi, &f32s(&[3, 1])), "scatter_add", "[3, 2]", "[3, 1]");
    fails!(dst.scatter_add(1, &gi, &f32s(&[6])), "scatter_add", "[3, 2]", "[6]");
    fails!(dst.scatter_add(1, &i64s(&[0; 6], &[6]), &f32s(&[6])), "scatter_add", "[6]", "[3, 4]");
    fails!(dst.scatter_add(1, &i64s(&[0; 10], &[5, 2]), &f32s(&[5, 2])), "scatter_add", "[5, 2]", "[3, 4]");
    fails!(i64s(&[0; 4], &[4]).scatter_add(0, &i64s(&[0], &[1]), &f32s(&[1])), "scatter_add", "f32", "i64");

    let m = u8s(&[1, 0, 0, 1], &[4]);
    fails!(x.masked_fill(&m.to_dtype(DType::F32), 1.0), "masked_fill", "u8", "f32");
    fails!(x.masked_fill(&m.to_dtype(DType::I64), 1.0), "masked_fill", "u8", "i64");
    fails!(x.masked_fill(&u8s(&[1, 0, 1], &[3]), 1.0), "masked_fill", "[3, 4]", "[3]");
    fails!(x.masked_fill(&u8s(&[1; 24], &[2, 3, 4]), 1.0), "masked_fill", "[2, 3, 4]", "[3, 4]");
    fails!(x.masked_fill_(&m.to_dtype(DType::F64), 1.0), "masked_fill", "u8", "f64");
    fails!(x.masked_fill_(&u8s(&[1, 0], &[2, 1]), 1.0), "masked_fill", "[2, 1]");
}

#[test]
fn join_errors() {
    let a = f32s(&[2, 3]);
    let b = f32s(&[3, 2]);
    fails!(Tensor::cat(&[], 0), "cat", "at least one");
    fails!(Tensor::cat(&[&a, &b], 0), "cat", "[2, 3]", "[3, 2]");
    fails!(Tensor::cat(&[&a, &f32s(&[3])], 0), "cat", "[2, 3]", "[3]");
    fails!(Tensor::cat(&[&a, &a], 2), "cat", "dimension 2");
    fails!(Tensor::cat(&[&a, &a], -3), "cat", "dimension -3");
    fails!(Tensor::cat(&[&Tensor::scalar(1.0f32)], 0), "cat", "zero-dimensional");
    fails!(Tensor::stack(&[], 0), "stack", "at least one");
    fails!(Tensor::stack(&[&a, &b], 0), "stack", "[2, 3]", "[3, 2]");
    fails!(Tensor::stack(&[&a, &a], 3), "stack", "dimension 3");
    fails!(Tensor::stack(&[&a, &a], -4), "stack", "dimension -4");
    // Joined extents must not overflow either.
    let wide = f32s(&[0, 1]).expand([0, 1 << 59]).unwrap();
    fails!(Tensor::cat(&[&wide, &wide, &wide, &wide], 1), "cat");
    let parts: Vec<&Tensor> = std::iter::repeat_n(&wide, 40).collect();
    fails!(Tensor::cat(&parts, 1), "cat");

    fails!(a.pad(&[(1, 1), (1, 1), (1, 1)], 0.0), "pad", "3 padded dimensions", "rank 2");
    fails!(a.pad(&[(usize::MAX, 1)], 0.0), "pad", "overflow");
    fails!(a.pad(&[(1 << 40, 0), (1 << 40, 0)], 0.0), "pad", "[1099511627778, 1099511627779]");
    fails!(Tensor::scalar(1.0f32).pad(&[(1, 1)], 0.0), "pad", "rank 0");

    fails!(a.repeat(&[2]), "repeat", "1 repeats", "rank 2");
    fails!(a.repeat(&[usize::MAX, 2]), "repeat", "overflow");
    fails!(a.repeat(&[1 << 40, 1 << 40]), "repeat");
    fails!(a.repeat(&[1 << 62, 1, 1]), "repeat");
    fails!(f64s(&[1]).repeat(&[HUGE]), "cannot allocate");

    fails!(f32s(&[3]).tril(0), "tril", "[3]");
    fails!(Tensor::scalar(1.0f32).triu(0), "triu", "[]");
}

#[test]
fn in_place_errors() {
    let x = f32s(&[2, 3]);
    let bcast = f32s(&[1, 3]).expand([2, 3]).unwrap();
    type Op = fn(&Tensor, &Tensor) -> Result<()>;
    let ops: [(&str, Op); 5] = [
        ("add_", Tensor::add_),
        ("sub_", Tensor::sub_),
        ("mul_", Tensor::mul_),
        ("div_", Tensor::div_),
        ("copy_", Tensor::copy_),
    ];
    for (name, op) in ops {
        check_err(name, || op(&x, &f32s(&[4])), &[name, "[4]", "[2, 3]"]);
        // In place, the result must keep `self`'s shape: `[3] += [2, 3]` cannot.
        check_err(name, || op(&f32s(&[3]), &x), &[name, "[2, 3]", "[3]"]);
        check_err(name, || op(&bcast, &x), &[name, "broadcast view", "[2, 3]"]);
    }
    let ints = i64s(&[1, 2, 3], &[3]);
    fails!(ints.add_(&f32s(&[3])), "add_", "f32", "i64");
    fails!(ints.sub_(&f64s(&[3])), "sub_", "f64", "i64");
    fails!(ints.mul_(&f32s(&[1])), "mul_", "f32", "i64");
    fails!(u8s(&[1], &[1]).add_(&f32s(&[1])), "add_", "f32", "u8");
    fails!(ints.div_(&ints), "div_", "i64");
    fails!(ints.add_scaled_(&f32s(&[3]), 1.0), "add_", "f32", "i64");
    fails!(ints.add_scaled_(&ints, 0.5), "add_", "f32", "i64");
    fails!(x.add_scaled_(&f32s(&[4]), 2.0), "[4]", "[2, 3]");
    fails!(ints.add_scalar_(0.5), "add_scalar_", "i64");
    fails!(ints.mul_scalar_(1.5), "mul_scalar_", "i64");
    fails!(ints.apply_(UnaryOp::Exp), "exp_", "i64");
    fails!(u8s(&[1], &[1]).apply_(UnaryOp::Sigmoid), "sigmoid_", "u8");
    fails!(bcast.apply_(UnaryOp::Neg), "neg_", "broadcast view");
    fails!(bcast.add_scalar_(1.0), "add_scalar_", "broadcast view");
    fails!(bcast.mul_scalar_(2.0), "mul_scalar_", "broadcast view");
    fails!(bcast.clamp_(Some(0.0), None), "clamp_", "broadcast view");
    fails!(bcast.fill_(0.0), "fill_", "broadcast view");
    fails!(bcast.zero_(), "fill_", "broadcast view");
    fails!(bcast.masked_fill_(&u8s(&[1, 0, 1], &[3]), 1.0), "masked_fill_", "broadcast view");
    fails!(x.masked_fill_(&u8s(&[1, 0, 1, 0], &[4]), 1.0), "masked_fill", "[4]");

    // `update_` needs contiguous, same-shape, same-dtype, non-aliasing operands.
    let g = f32s(&[2, 3]);
    fails!(x.update_::<f64, 1>([&g], |p, [v]| *p += v), "update_", "f32", "f64");
    fails!(x.update_::<f32, 1>([&f64s(&[2, 3])], |p, [v]| *p += v), "update_", "operand 0", "f64");
    fails!(x.update_::<f32, 1>([&f32s(&[3, 2])], |p, [v]| *p += v), "update_", "[3, 2]", "[2, 3]");
    fails!(x.update_::<f32, 1>([&f32s(&[3, 2]).t().unwrap()], |p, [v]| *p += v), "update_", "contiguous");
    fails!(x.t().unwrap().update_::<f32, 1>([&g], |p, [v]| *p += v), "update_", "contiguous");
    fails!(x.update_::<f32, 2>([&g, &x], |p, [v, w]| *p += v * w), "update_", "operand 1", "shares storage");
    fails!(x.update_::<f32, 1>([&x.reshape([2, 3]).unwrap()], |p, [v]| *p += v), "update_", "shares storage");
    fails!(bcast.update_::<f32, 0>([], |p, []| *p += 1.0), "update_");

    // None of the failed writes may have touched the data.
    assert_eq!(x.version(), 0);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(ints.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
}

/// Views whose element count fits a word but not memory: every fallible operation that has
/// to materialise one must report the allocation failure instead of aborting the process.
#[test]
fn huge_views_fail_to_materialise_gracefully() {
    let one = f64s(&[1]);
    let v = one.expand([HUGE]).unwrap();
    assert_eq!(v.numel(), HUGE);
    let v32 = f32s(&[1]).expand([HUGE]).unwrap();
    let mask = u8s(&[1], &[1]);
    fails!(v.add(&one), "add", "cannot allocate");
    fails!(v32.add(&one), "cannot allocate");
    fails!(one.mul(&v32), "cannot allocate");
    fails!(v.eq(&one), "cannot allocate");
    fails!(v32.le(&one), "cannot allocate");
    fails!(mask.where_cond(&v, &one), "cannot allocate");
    fails!(mask.where_cond(&v32, &one), "cannot allocate");
    fails!(v.masked_fill(&mask, 1.0), "cannot allocate");
    fails!(i64s(&[1], &[1]).expand([HUGE]).unwrap().masked_fill(&mask, 0.5), "cannot allocate");
    fails!(Tensor::cat(&[&v, &one], 0), "cannot allocate");
    fails!(v.pad(&[(1, 0)], 0.0), "cannot allocate");
    fails!(i64s(&[1], &[1]).expand([HUGE]).unwrap().mean(0, false), "cannot allocate");
    fails!(i64s(&[1], &[1]).expand([HUGE]).unwrap().softmax(0), "cannot allocate");
    fails!(u8s(&[1], &[1]).expand([HUGE]).unwrap().sum(0, false), "cannot allocate");
    // A transposed broadcast cannot be flattened without a copy.
    let pairs = f64s(&[2]).unsqueeze(1).unwrap().expand([2, 1 << 58]).unwrap().t().unwrap();
    fails!(pairs.reshape([-1]), "cannot allocate");
    fails!(pairs.flatten(0, 1), "cannot allocate");
    // A broadcast matrix operand is materialised before the product.
    let a = f64s(&[1, 1]).expand([1 << 30, 1 << 29]).unwrap();
    fails!(a.matmul(&f64s(&[1, 1]).expand([1 << 29, 2]).unwrap()), "cannot allocate");
    // Reading values back out, or cutting the view into pieces.
    let s = Tensor::scalar(1.0f64).expand([HUGE]).unwrap();
    fails!(s.to_vec::<f64>(), "to_vec", "cannot allocate");
    fails!(v32.to_vec::<f32>(), "to_vec", "cannot allocate");
    fails!(s.to_vec_f64(), "to_vec_f64", "cannot allocate");
    fails!(v32.to_vec_f64(), "cannot allocate");
    fails!(i64s(&[1], &[1]).expand([HUGE]).unwrap().to_vec_f64(), "cannot allocate");
    fails!(one.expand([HUGE / 2, 2]).unwrap().to_vec2::<f64>(), "cannot allocate");
    fails!(f64s(&[1, 0]).expand([HUGE, 0]).unwrap().to_vec2::<f64>(), "to_vec2", "cannot allocate");
    fails!(s.split(1, 0), "split", "cannot allocate");
    fails!(s.chunk(HUGE, 0), "split", "cannot allocate");
    let index = Tensor::scalar(0i64).expand([HUGE]).unwrap();
    fails!(one.index_select(0, &index), "index_select", "cannot allocate");
    fails!(f64s(&[2, 1]).index_select(1, &index), "index_select");
    // Printing reads only the entries it shows.
    assert_eq!(infallible!(s.to_string()), "[1.0, 1.0, 1.0, ..., 1.0, 1.0, 1.0]");
    assert!(infallible!(format!("{pairs:?}")).ends_with("dtype=f64, device=cpu)"));
    assert!(infallible!(format!("{}", a)).starts_with("[[-1.0, -1.0, -1.0, ..., -1.0"));
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

#[test]
fn empty_tensors_are_valid_everywhere() {
    let e = f64s(&[0]);
    let e2 = f64s(&[2, 0]);
    let one = f64s(&[1]);

    assert_eq!(works!(e.add(&e)).shape(), &[0]);
    assert_eq!(works!(e2.mul(&one)).shape(), &[2, 0]);
    assert_eq!(works!(f64s(&[0, 3]).sub(&f64s(&[3]))).shape(), &[0, 3]);
    assert_eq!(works!(f64s(&[2, 1]).maximum(&e)).shape(), &[2, 0]);
    assert_eq!(works!(i64s(&[], &[0]).div(&e2)).shape(), &[2, 0]);
    assert_eq!(works!(e2.lt(&one)).dtype(), DType::U8);
    assert_eq!(works!(e2.gt_scalar(0.0).where_cond(&e2, &one)).shape(), &[2, 0]);
    for t in [e2.exp(), e2.neg(), e2.sigmoid(), e2.mul_scalar(2.0), e2.clamp(Some(0.0), None), e2.to_dtype(DType::U8)] {
        assert_eq!(t.shape(), &[2, 0]);
        assert!(works!(t.to_vec_f64()).is_empty());
    }
    assert_eq!(works!(e2.t().unwrap().exp().to_vec::<f64>()), Vec::<f64>::new());

    // Reductions over nothing give their identity; over a non-empty dimension, an empty result.
    assert_eq!(vals(&works!(e2.sum(1, false))), vec![0.0, 0.0]);
    assert_eq!(vals(&works!(e2.sum(1, true))), vec![0.0, 0.0]);
    assert_eq!(works!(e2.sum(0, false)).shape(), &[0]);
    assert_eq!(vals(&e.sum_all()), vec![0.0]);
    assert_eq!(vals(&works!(e2.prod(-1, false))), vec![1.0, 1.0]);
    assert_eq!(vals(&u8s(&[], &[0]).sum_all()), vec![0.0]);
    assert!(vals(&e.mean_all())[0].is_nan());
    assert!(vals(&works!(e2.var(1, false, false))).iter().all(|v| v.is_nan()));
    assert_eq!(works!(e2.max(0, false)).shape(), &[0]);
    assert_eq!(works!(e2.argmin(0, true)).shape(), &[1, 0]);
    assert_eq!(vals(&works!(e2.logsumexp(1, false))), vec![f64::NEG_INFINITY; 2]);
    assert_eq!(works!(e2.logsumexp([0, 1], true)).shape(), &[1, 1]);
    assert_eq!(works!(e2.softmax(1)).shape(), &[2, 0]);
    assert_eq!(works!(e2.log_softmax(0)).shape(), &[2, 0]);
    assert_eq!(works!(f32s(&[0, 3]).softmax(1)).shape(), &[0, 3]);

    assert_eq!(vals(&works!(f64s(&[2, 0]).matmul(&f64s(&[0, 3])))), vec![0.0; 6]);
    assert_eq!(works!(f64s(&[0, 2]).matmul(&f64s(&[2, 3]))).shape(), &[0, 3]);
    assert_eq!(works!(f64s(&[2, 3]).matmul(&f64s(&[3, 0]))).shape(), &[2, 0]);
    assert_eq!(works!(f64s(&[0, 2, 3]).matmul(&f64s(&[3, 4]))).shape(), &[0, 2, 4]);
    assert_eq!(vals(&works!(e.matmul(&e))), vec![0.0]);

    assert_eq!(works!(e.reshape([0, 5])).shape(), &[0, 5]);
    assert_eq!(works!(e.reshape([5, -1])).shape(), &[5, 0]);
    assert_eq!(works!(e2.reshape([-1])).shape(), &[0]);
    assert_eq!(works!(e2.narrow(1, 0, 0)).shape(), &[2, 0]);
    assert_eq!(works!(e2.select(0, 1)).shape(), &[0]);
    assert_eq!(works!(e.expand([3, 0])).shape(), &[3, 0]);
    assert_eq!(works!(one.expand([0])).shape(), &[0]);
    assert_eq!(works!(e2.flatten(0, 1)).shape(), &[0]);
    assert_eq!(works!(e2.permute(&[1, 0])).shape(), &[0, 2]);
    assert_eq!(works!(e.split(2, 0)).len(), 1);
    assert_eq!(works!(e2.chunk(3, 1)).len(), 1);
    assert_eq!(works!(e2.split_sizes(&[0, 0], 1)).len(), 2);
    // Zero extents do not make the others free: strides still multiply them.
    assert_eq!(works!(Tensor::zeros([0, 1 << 40], DType::F64)).numel(), 0);
    fails!(Tensor::zeros([0, 1 << 40, 1 << 40], DType::F64), "[0, 1099511627776, 1099511627776]");
    fails!(e.reshape([0usize, 1 << 40, 1 << 40]), "reshape");
    fails!(e.reshape([1i64 << 40, 1 << 40, -1]), "reshape");
    fails!(f64s(&[1, 1, 0]).expand([1 << 40, 1 << 40, 0]), "expand", "[1099511627776, 1099511627776, 0]");
    let flat = f64s(&[0, 1, 1]).expand([0, 1, 1 << 40]).unwrap();
    fails!(flat.add(&f64s(&[1, 1]).expand([1 << 40, 1]).unwrap()), "add", "[0, 1, 1099511627776]");

    let idx = i64s(&[], &[0]);
    let x = f64s(&[3, 4]);
    assert_eq!(works!(x.index_select(0, &idx)).shape(), &[0, 4]);
    assert_eq!(works!(e2.index_select(0, &i64s(&[1, 1, 0], &[3]))).shape(), &[3, 0]);
    assert_eq!(works!(x.gather(1, &i64s(&[], &[3, 0]))).shape(), &[3, 0]);
    assert_eq!(vals(&works!(x.scatter_add(1, &i64s(&[], &[3, 0]), &f64s(&[3, 0])))), vals(&x));
    assert_eq!(works!(e2.masked_fill(&u8s(&[1], &[1]), 3.0)).shape(), &[2, 0]);

    assert_eq!(vals(&works!(Tensor::cat(&[&e, &one, &e], 0))), vals(&one));
    assert_eq!(works!(Tensor::cat(&[&e2, &f64s(&[2, 3])], 1)).shape(), &[2, 3]);
    assert_eq!(works!(Tensor::stack(&[&e, &e], 0)).shape(), &[2, 0]);
    assert_eq!(vals(&works!(e.pad(&[(1, 2)], 7.0))), vec![7.0; 3]);
    assert_eq!(works!(x.repeat(&[0, 2])).shape(), &[0, 8]);
    assert_eq!(works!(e2.repeat(&[3, 3])).shape(), &[6, 0]);
    assert_eq!(works!(f64s(&[0, 0]).tril(0)).shape(), &[0, 0]);
    assert_eq!(works!(e2.triu(-1)).shape(), &[2, 0]);

    works!(e2.add_(&one));
    works!(e2.mul_(&e2));
    works!(e2.fill_(1.0));
    works!(e2.copy_(&one));
    works!(e2.apply_(UnaryOp::Exp));
    works!(e2.update_::<f64, 1>([&f64s(&[2, 0])], |p, [v]| *p += v));
    assert_eq!(works!(e2.with_slice::<f64, _>(|s| s.len())), 0);

    assert_eq!(works!(e2.to_vec2::<f64>()), vec![Vec::<f64>::new(); 2]);
    assert_eq!(infallible!(e2.to_string()), "[[],\n []]");
    assert_eq!(infallible!(e.to_string()), "[]");
    assert!(infallible!(format!("{:?}", f64s(&[2, 0, 3]))).contains("shape=[2, 0, 3]"));
    assert!(infallible!(format!("{}", f64s(&[0, 2, 3]))).contains("shape=[0, 2, 3]"));
}

#[test]
fn zero_dim_tensors_are_valid_everywhere() {
    let s = Tensor::scalar(2.0f64);
    let v = f64s(&[3]);
    assert_eq!(works!(s.add(&s)).shape(), &[] as &[usize]);
    assert_eq!(vals(&works!(s.mul(&v))), vec![-2.0, -1.0, 0.0]);
    assert_eq!(vals(&works!(v.pow(&s))), vec![1.0, 0.25, 0.0]);
    assert_eq!(vals(&s.exp()), vec![2f64.exp()]);
    assert_eq!(vals(&works!(s.gt(&v))), vec![1.0; 3]);
    let c = Tensor::scalar(1u8);
    assert_eq!(vals(&works!(c.where_cond(&s, &v))), vec![2.0; 3]);
    assert_eq!(vals(&works!(c.where_cond(&s, &Tensor::scalar(0i64)))), vec![2.0]);

    assert_eq!(vals(&s.sum_all()), vec![2.0]);
    assert_eq!(vals(&works!(s.sum(&[] as &[usize], false))), vec![2.0]);
    assert_eq!(vals(&works!(s.max(Vec::<i64>::new(), true))), vec![2.0]);
    assert_eq!(vals(&works!(s.max_all())), vec![2.0]);
    assert_eq!(vals(&works!(s.argmax_all())), vec![0.0]);
    assert_eq!(vals(&works!(s.argmin_all())), vec![0.0]);
    assert_eq!(vals(&s.prod_all()), vec![2.0]);
    assert_eq!(vals(&s.mean_all()), vec![2.0]);
    assert_eq!(vals(&s.var_all(false)), vec![0.0]);
    assert_eq!(vals(&works!(s.logsumexp(&[] as &[i32], false))), vec![2.0]);
    assert_eq!(vals(&works!(s.softmax(0))), vec![1.0]);
    assert_eq!(vals(&works!(s.softmax(-1))), vec![1.0]);
    assert_eq!(vals(&works!(s.log_softmax(0))), vec![0.0]);
    assert_eq!(works!(s.softmax(0)).rank(), 0);

    assert_eq!(works!(s.reshape([1usize])).shape(), &[1]);
    assert_eq!(works!(s.reshape([-1])).shape(), &[1]);
    assert_eq!(works!(s.reshape([1, 1, 1])).shape(), &[1, 1, 1]);
    assert_eq!(works!(works!(v.narrow(0, 1, 1)).reshape(())).rank(), 0);
    assert_eq!(works!(s.view(())).rank(), 0);
    assert_eq!(works!(s.unsqueeze(0)).shape(), &[1]);
    assert_eq!(works!(s.unsqueeze(-1)).shape(), &[1]);
    assert_eq!(works!(s.t()).rank(), 0);
    assert_eq!(works!(s.permute::<usize>(&[])).rank(), 0);
    assert_eq!(s.squeeze_all().rank(), 0);
    assert_eq!(s.flatten_all().shape(), &[1]);
    assert_eq!(vals(&works!(s.expand([2, 3]))), vec![2.0; 6]);
    assert_eq!(works!(v.select(0, 2)).rank(), 0);

    assert_eq!(works!(Tensor::stack(&[&s, &s, &s], 0)).shape(), &[3]);
    assert_eq!(works!(Tensor::stack(&[&s], -1)).shape(), &[1]);
    assert_eq!(works!(s.pad(&[], 0.0)).rank(), 0);
    assert_eq!(works!(s.repeat(&[])).rank(), 0);
    assert_eq!(vals(&works!(s.repeat(&[2, 2]))), vec![2.0; 4]);
    assert_eq!(vals(&works!(s.masked_fill(&c, 5.0))), vec![5.0]);
    assert_eq!(vals(&works!(v.masked_fill(&c, 5.0))), vec![5.0; 3]);
    assert_eq!(vals(&works!(v.index_select(0, &Tensor::scalar(2i64)))), vec![0.0]);

    let t = Tensor::scalar(1.0f64);
    works!(t.add_(&s));
    works!(t.mul_scalar_(3));
    works!(t.apply_(UnaryOp::Sqrt));
    assert_eq!(works!(t.to_scalar::<f64>()), 3.0);
    works!(t.copy_(&Tensor::scalar(5i64)));
    works!(v.add_(&t));
    assert_eq!(vals(&v), vec![4.0, 4.5, 5.0]);
    works!(t.fill_(-1));
    assert_eq!(works!(t.item()), -1.0);
    assert_eq!(works!(t.to_vec::<f64>()), vec![-1.0]);
    assert_eq!(infallible!(t.to_string()), "(-1.0)");
    assert_eq!(vals(&Tensor::scalar(3i64).div_scalar(2)), vec![1.5]);
}

#[test]
fn legal_extremes() {
    // Integer ranges whose span does not fit in `i64` (or in the 53 bits of an `f64`).
    let r = works!(Tensor::arange_step(i64::MIN, i64::MAX, 1i64 << 62));
    assert_eq!(works!(r.to_vec::<i64>()), vec![i64::MIN, -(1 << 62), 0, 1 << 62]);
    let r = works!(Tensor::arange(i64::MAX - 3, i64::MAX));
    assert_eq!(works!(r.to_vec::<i64>()), vec![i64::MAX - 3, i64::MAX - 2, i64::MAX - 1]);
    let r = works!(Tensor::arange_step(i64::MIN + 2, i64::MIN, -1));
    assert_eq!(works!(r.to_vec::<i64>()), vec![i64::MIN + 2, i64::MIN + 1]);
    let r = works!(Tensor::arange_step((1i64 << 53) + 1, (1i64 << 53) + 4, 1));
    assert_eq!(works!(r.to_vec::<i64>()), vec![(1 << 53) + 1, (1 << 53) + 2, (1 << 53) + 3]);
    assert_eq!(works!(Tensor::arange_step(0, 10, 3)).to_vec::<i64>().unwrap(), vec![0, 3, 6, 9]);
    assert_eq!(works!(Tensor::arange_step(10, 0, -4)).to_vec::<i64>().unwrap(), vec![10, 6, 2]);
    assert_eq!(works!(Tensor::arange(3, 3)).shape(), &[0]);
    assert_eq!(works!(Tensor::linspace(0.0, 1.0, 0)).shape(), &[0]);
    assert_eq!(works!(Tensor::linspace(2.0, 5.0, 1)).to_vec::<f32>().unwrap(), vec![2.0]);
    assert_eq!(works!(Tensor::eye(0)).shape(), &[0, 0]);
    assert_eq!(works!(Tensor::randperm(0)).shape(), &[0]);
    assert_eq!(works!(Tensor::uniform([2], 1.0, 1.0, DType::F64)).to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
    assert_eq!(works!(Tensor::normal([2], 3.0, 0.0, DType::F32)).to_vec::<f32>().unwrap(), vec![3.0, 3.0]);

    // Indices at the very ends of their ranges.
    let x = f64s(&[3, 4]);
    assert_eq!(vals(&works!(x.index_select(1, &i64s(&[3, 0, 3], &[3])))).len(), 9);
    assert_eq!(vals(&works!(x.gather(0, &i64s(&[2, 0, 2, 0], &[1, 4])))), vec![3.0, -0.5, 4.0, 0.5]);
    assert_eq!(vals(&works!(x.tril(i64::MIN))), vec![0.0; 12]);
    assert_eq!(vals(&works!(x.triu(i64::MIN))), vals(&x));
    assert_eq!(vals(&works!(x.tril(i64::MAX))), vals(&x));
    // Integer arithmetic wraps like PyTorch's instead of panicking.
    let big = i64s(&[i64::MAX, i64::MIN], &[2]);
    assert_eq!(works!(big.add(&i64s(&[1, -1], &[2]))).to_vec::<i64>().unwrap(), vec![i64::MIN, i64::MAX]);
    assert_eq!(big.neg().to_vec::<i64>().unwrap(), vec![-i64::MAX, i64::MIN]);
    assert_eq!(big.abs().to_vec::<i64>().unwrap()[1], i64::MIN);
    assert_eq!(big.mul_scalar(2).to_vec::<i64>().unwrap(), vec![-2, 0]);
    assert_eq!(big.square().to_vec::<i64>().unwrap(), vec![1, 0]);
    assert_eq!(big.sum_all().to_scalar::<i64>().unwrap(), -1);
    assert_eq!(works!(big.pow(&i64s(&[3, -2], &[2]))).to_vec::<i64>().unwrap()[1], 0);
    assert_eq!(works!(i64s(&[3, -2], &[2]).pow_scalar(2)).to_vec::<i64>().unwrap(), vec![9, 4]);
    assert_eq!(works!(i64s(&[4], &[1]).pow_scalar(0.5)).to_vec::<f32>().unwrap(), vec![2.0]);
    assert_eq!(works!(big.pow_scalar(i64::MAX)).to_vec::<i64>().unwrap(), vec![i64::MAX, 0]);
    // PyTorch refuses integer tensors to negative integer powers (they are not integers).
    fails!(big.pow_scalar(-1), "pow_scalar", "Integers to negative integer powers are not allowed");
    fails!(i64s(&[0, 1, -1], &[3]).pow_scalar(-1), "pow_scalar");
    // Integer scalars reach integer kernels exactly: no rounding through f64, wrapping.
    assert_eq!(i64s(&[1], &[1]).add_scalar(i64::MAX - 1).to_vec::<i64>().unwrap(), vec![i64::MAX]);
    assert_eq!(i64s(&[3], &[1]).mul_scalar((1i64 << 53) + 1).to_vec::<i64>().unwrap(), vec![3 * ((1 << 53) + 1)]);
    assert_eq!(u8s(&[5, 0], &[2]).add_scalar(-1).to_vec::<u8>().unwrap(), vec![4, 255]);
    assert_eq!(u8s(&[5, 0], &[2]).mul_scalar(-1).to_vec::<u8>().unwrap(), vec![251, 0]);
    assert_eq!(works!(Tensor::full([1], i64::MAX - 1, DType::I64)).to_vec::<i64>().unwrap(), vec![i64::MAX - 1]);
    let filled = i64s(&[0], &[1]);
    works!(filled.fill_(i64::MAX - 1));
    assert_eq!(filled.to_vec::<i64>().unwrap(), vec![i64::MAX - 1]);
    assert_eq!(u8s(&[0, 200], &[2]).neg().to_vec::<u8>().unwrap(), vec![0, 56]);
    assert_eq!(u8s(&[250], &[1]).add_scalar(10).to_vec::<u8>().unwrap(), vec![4]);
    assert_eq!(works!(big.div(&i64s(&[0, -1], &[2]))).dtype(), DType::F32);
    let f = f64s(&[1]).mul_scalar(f64::NAN);
    assert_eq!(f.to_dtype(DType::I64).to_vec::<i64>().unwrap(), vec![0]);
    assert_eq!(Tensor::scalar(1e300f64).to_dtype(DType::U8).to_vec::<u8>().unwrap(), vec![255]);
    assert_eq!(Tensor::scalar(-7i64).to_dtype(DType::U8).to_vec::<u8>().unwrap(), vec![249]);
}

/// The operations that cannot fail must not panic either, whatever the dtype (integers
/// into float-only functions, division by zero, NaN and infinite scalars) and shape.
#[test]
fn infallible_ops_accept_every_dtype_and_shape() {
    let base = f64s(&[2, 3]).mul_scalar(3.0);
    let inputs = [
        Tensor::scalar(-2.5f64),
        f64s(&[0]),
        f64s(&[2, 0]),
        base.clone(),
        base.t().unwrap(),
        base.narrow(1, 1, 2).unwrap(),
        f64s(&[1, 3]).expand([2, 3]).unwrap(),
    ];
    for x in &inputs {
        for dt in [DType::U8, DType::I64, DType::F32, DType::F64] {
            let x = x.to_dtype(dt);
            let float = dt.float_or_default();
            let scalar_float = if dt.is_float() { dt } else { DType::F32 };
            let outs: Vec<(&str, Tensor, DType)> = vec![
                ("neg", infallible!(x.neg()), dt),
                ("abs", infallible!(x.abs()), dt),
                ("sign", infallible!(x.sign()), dt),
                ("square", infallible!(x.square()), dt),
                ("relu", infallible!(x.relu()), dt),
                ("exp", infallible!(x.exp()), float),
                ("log", infallible!(x.log()), float),
                ("sqrt", infallible!(x.sqrt()), float),
                ("rsqrt", infallible!(x.rsqrt()), float),
                ("sin", infallible!(x.sin()), float),
                ("cos", infallible!(x.cos()), float),
                ("tanh", infallible!(x.tanh()), float),
                ("sigmoid", infallible!(x.sigmoid()), float),
                ("gelu", infallible!(x.gelu()), float),
                ("gelu_tanh", infallible!(x.gelu_tanh()), float),
                ("silu", infallible!(x.silu()), float),
                ("erf", infallible!(x.erf()), float),
                ("log1p", infallible!(x.log1p()), float),
                ("expm1", infallible!(x.expm1()), float),
                ("recip", infallible!(x.recip()), float),
                ("floor", infallible!(x.floor()), dt),
                ("ceil", infallible!(x.ceil()), dt),
                ("round", infallible!(x.round()), dt),
                ("softplus", infallible!(x.softplus(-2.0, f64::NAN)), float),
                ("leaky_relu", infallible!(x.leaky_relu(f64::INFINITY)), float),
                ("elu", infallible!(x.elu(-1.0)), float),
                // A NaN bound has no integer value: integer tensors clamp in f32.
                ("clamp", infallible!(x.clamp(Some(f64::NAN), Some(-1e300))), scalar_float),
                ("clamp", infallible!(x.clamp(Some(1e300), Some(-1e300))), dt),
                ("add_scalar", infallible!(x.add_scalar(i64::MAX)), dt),
                ("sub_scalar", infallible!(x.sub_scalar(i64::MIN)), dt),
                ("rsub_scalar", infallible!(x.rsub_scalar(f64::NAN)), scalar_float),
                ("mul_scalar", infallible!(x.mul_scalar(f64::INFINITY)), scalar_float),
                ("div_scalar", infallible!(x.div_scalar(0)), float),
                ("rdiv_scalar", infallible!(x.rdiv_scalar(0.0)), float),
                ("pow_scalar", works!(x.pow_scalar(-3.0)), scalar_float),
                ("pow_scalar", works!(x.pow_scalar(u32::MAX)), dt),
                ("pow_scalar", works!(x.pow_scalar(0.5)), scalar_float),
                ("rpow_scalar", infallible!(x.rpow_scalar(-2)), float),
                ("maximum_scalar", infallible!(x.maximum_scalar(f64::NAN)), scalar_float),
                ("minimum_scalar", infallible!(x.minimum_scalar(-1)), dt),
                ("eq_scalar", infallible!(x.eq_scalar(f64::NAN)), DType::U8),
                ("ge_scalar", infallible!(x.ge_scalar(i64::MIN)), DType::U8),
                ("zeros_like", infallible!(x.zeros_like()), dt),
                ("ones_like", infallible!(x.ones_like()), dt),
                ("full_like", works!(x.full_like(2.5)), dt),
                ("copy", infallible!(x.copy()), dt),
                ("contiguous", infallible!(x.contiguous()), dt),
                ("rand_like", works!(x.rand_like()), float),
                ("randn_like", works!(x.randn_like()), float),
                ("to_dtype", infallible!(x.to_dtype(DType::U8)), DType::U8),
                ("neg operator", infallible!(-&x), dt),
                ("mul operator", infallible!(&x * 2.0), scalar_float),
                ("sub operator", infallible!(3 - &x), dt),
            ];
            if dt.is_int() {
                fails!(x.full_like(f64::NEG_INFINITY), "full_like", "-inf", "out of range");
            }
            if dt.is_float() {
                assert_eq!(works!(x.pow_scalar(-3)).dtype(), dt);
            } else {
                fails!(x.pow_scalar(-3), "pow_scalar", "negative integer powers");
            }
            for (name, out, want) in outs {
                assert_eq!(out.shape(), x.shape(), "{name} on {dt} {:?}", x.shape());
                assert_eq!(out.dtype(), want, "{name} on {dt} {:?}", x.shape());
                assert_eq!(works!(out.to_vec_f64()).len(), x.numel());
            }
            for r in [x.sum_all(), x.prod_all(), x.mean_all(), x.var_all(true), x.std_all(false)] {
                assert_eq!(r.rank(), 0, "{dt} {:?}", x.shape());
            }
            assert_eq!(x.flatten_all().numel(), x.numel());
            assert!(!infallible!(x.to_string()).is_empty());
            assert!(!infallible!(format!("{x:?}")).is_empty());
        }
    }
}

#[test]
fn from_buffer_checks_its_shape() {
    use ember_tensor::storage::Buffer;
    fails!(Tensor::from_buffer(Buffer::<f32>::zeros("t", 3).unwrap(), [2, 2]), "from_buffer", "3 elements", "[2, 2]");
    fails!(Tensor::from_buffer(Buffer::<i64>::zeros("t", 0).unwrap(), [0, usize::MAX, 2]), "from_buffer");
    let t = works!(Tensor::from_buffer(Buffer::<u8>::full("t", 4, 7).unwrap(), [2, 2]));
    assert_eq!(works!(t.to_vec::<u8>()), vec![7; 4]);
}

#[test]
fn convolution_errors() {
    use ember_tensor::{ConvArgs, ConvTransposeArgs, Padding, UnfoldArgs};
    let x = f32s(&[2, 3, 8, 8]);
    let w = f32s(&[4, 3, 3, 3]);
    let d = ConvArgs::<2>::default();
    fails!(x.conv2d(&f32s(&[4, 2, 3, 3]), None, &d), "conv2d", "[2, 3, 8, 8]", "[4, 2, 3, 3]", "2 channels, but got 3");
    fails!(f32s(&[8, 8]).conv2d(&w, None, &d), "conv2d", "3-d (unbatched) or 4-d (batched)", "[8, 8]");
    fails!(x.conv2d(&f32s(&[4, 3, 3]), None, &d), "conv2d", "4-d weight", "[4, 3, 3]");
    fails!(x.conv2d(&w, Some(&f32s(&[3])), &d), "conv2d", "bias", "[3]", "4 elements");
    fails!(x.conv2d(&f32s(&[4, 3, 9, 9]), None, &d), "conv2d", "Kernel size can't be greater", "(8 x 8)", "(9 x 9)");
    fails!(x.conv2d(&w, None, &d.stride(0)), "conv2d", "stride");
    fails!(x.conv2d(&w, None, &d.dilation([1, 0])), "conv2d", "dilation");
    fails!(x.conv2d(&w, None, &d.groups(0)), "conv2d", "groups");
    fails!(x.conv2d(&f32s(&[4, 1, 3, 3]), None, &d.groups(3)), "conv2d", "divisible by 3", "[4, 1, 3, 3]");
    fails!(x.conv2d(&w, None, &d.stride(2).padding(Padding::Same)), "conv2d", "same", "strided");
    fails!(x.conv2d(&w, None, &d.padding(usize::MAX / 2)), "conv2d", "padding");
    fails!(x.conv2d(&f64s(&[4, 3, 3, 3]), None, &d), "conv2d", "f32", "f64");
    fails!(i64s(&[1; 4], &[1, 1, 2, 2]).conv2d(&i64s(&[1], &[1, 1, 1, 1]), None, &d), "conv2d", "float", "i64");
    fails!(f32s(&[2, 3, 8]).conv1d(&f32s(&[4, 3, 3, 3]), None, &ConvArgs::default()), "conv1d", "3-d weight");
    let t = ConvTransposeArgs::<2>::default();
    fails!(x.conv_transpose2d(&f32s(&[4, 2, 3, 3]), None, &t), "conv_transpose2d", "4 channels, but got 3");
    fails!(
        x.conv_transpose2d(&f32s(&[3, 2, 3, 3]), None, &t.stride(2).output_padding(2)),
        "conv_transpose2d",
        "output padding"
    );
    fails!(x.conv_transpose2d(&f32s(&[3, 2, 3, 3]), None, &t.padding(9)), "conv_transpose2d", "too small");
    fails!(x.conv_transpose2d(&f32s(&[3, 2, 3, 3]), Some(&f32s(&[3])), &t), "conv_transpose2d", "bias", "2 elements");
    fails!(x.im2col(&UnfoldArgs::new(9)), "unfold", "at least one", "(8 x 8)");
    fails!(x.im2col(&UnfoldArgs::new(0)), "unfold", "kernel size");
    fails!(f32s(&[8]).im2col(&UnfoldArgs::new(2)), "unfold", "[8]");
    fails!(f32s(&[2, 10, 9]).col2im([4, 4], &UnfoldArgs::new(2)), "fold", "divisible", "input.size(1)=10");
    fails!(f32s(&[2, 12, 8]).col2im([4, 4], &UnfoldArgs::new(2)), "fold", "3 * 3 = 9", "input.size(2)=8");
    fails!(i64s(&[1; 4], &[1, 4, 1]).col2im([2, 2], &UnfoldArgs::new(2)), "fold", "i64");
    // Outputs too large for memory are allocation errors, and those too large to count
    // shape errors, not aborts.
    let wide = f64s(&[1, 1, 1, 1]).expand([1, 1, 1 << 20, 1 << 20]).unwrap();
    fails!(wide.conv2d(&f64s(&[1 << 19, 1, 1, 1]), None, &d), "conv2d");
    let deep = f64s(&[1, 1, 1, 1]).expand([1, 1 << 21, 1 << 19, 1 << 19]).unwrap();
    fails!(deep.im2col(&UnfoldArgs::new(2)), "unfold");
    // Valid edge cases: an empty batch, a kernel as large as the padded input.
    let empty = works!(f32s(&[0, 3, 8, 8]).conv2d(&w, None, &d));
    assert_eq!(empty.shape(), &[0, 4, 6, 6]);
    let full = works!(f32s(&[1, 3, 2, 2]).conv2d(&w, None, &d.padding(Padding::Explicit([1, 1]))));
    assert_eq!(full.shape(), &[1, 4, 2, 2]);
}
