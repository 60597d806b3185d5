//! The semantic rules `docs/design.md` states, one test each where no other test checks
//! them. Each test quotes its rule and names the section of design.md it comes from.

use ember::autograd::{Var, grad};
use ember::tensor::{DType, Device, Error, Result, Tensor};

fn f32s(v: &[f32], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape.to_vec())
}

fn vals(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64).to_vec::<f64>()
}

/// "`Var::retain_grad()` makes a non-leaf keep its gradient ... (an error on a `Var` that
/// does not require grad; a no-op on a leaf)" (design.md, Accumulation rules, rule 3).
#[test]
fn retain_grad_is_an_error_without_grad_and_a_no_op_on_a_leaf() -> Result<()> {
    let c = Var::new(f32s(&[1.0], &[1])?);
    assert!(c.retain_grad().is_err());
    let p = Var::param(f32s(&[1.0], &[1])?);
    p.retain_grad()?;
    assert!(p.is_leaf());
    Ok(())
}

/// "`grad(outputs, inputs, ...)` returns the gradients of the outputs with respect to the
/// inputs (`None` for an input the outputs do not depend on) and touches no `.grad`"
/// (design.md, Accumulation rules, rule 5).
#[test]
fn grad_touches_no_grad_field_and_gives_none_for_unused_inputs() -> Result<()> {
    let x = Var::param(f32s(&[2.0], &[1])?);
    let unused = Var::param(f32s(&[5.0], &[1])?);
    let y = x.mul(&x)?.sum_all();
    let g = grad(&[&y], &[&x, &unused], &[], false, false)?;
    assert_eq!(vals(&g[0].as_ref().expect("x is used").value())?, [4.0]);
    assert!(g[1].is_none());
    assert!(x.grad().is_none() && unused.grad().is_none());
    Ok(())
}

/// "Only a `Var` that requires grad can have hooks (a hook that could never run is an
/// error). Dropping a `HookHandle` keeps the hook; `HookHandle::remove` removes it"
/// (design.md, Accumulation rules, hooks).
#[test]
fn hooks_need_grad_and_outlive_their_dropped_handle() -> Result<()> {
    let c = Var::new(f32s(&[1.0], &[1])?);
    assert!(c.register_hook(|_| Ok(None)).is_err());
    let x = Var::param(f32s(&[1.0], &[1])?);
    drop(x.register_hook(|g| Ok(Some(g.mul_scalar(10.0))))?);
    x.mul_scalar(2.0).sum_all().backward()?;
    assert_eq!(vals(&x.grad().expect("a gradient"))?, [20.0], "the dropped handle kept its hook");
    Ok(())
}

/// "If one of them was written in place before backward, backward fails with PyTorch's
/// message ("one of the variables needed for gradient computation has been modified by an
/// inplace operation"), naming the operation and both versions" (design.md, Value versions
/// and re-execution).
#[test]
fn the_in_place_error_quotes_pytorch_and_names_the_op() -> Result<()> {
    let x = Var::param(f32s(&[1.0, 2.0], &[2])?);
    let e = x.exp();
    let y = e.mul(&e)?.sum_all();
    e.value().add_scalar_(1.0)?;
    let msg = y.backward().expect_err("a saved value was written in place").to_string();
    assert!(
        msg.contains("one of the variables needed for gradient computation has been modified by an inplace operation"),
        "{msg}"
    );
    assert!(msg.contains("mul"), "names the operation: {msg}");
    assert!(msg.matches("version").count() >= 2, "names both versions: {msg}");
    Ok(())
}

/// "Tensor with tensor: the result takes the larger dtype in the order
/// `u8 < i64 < f32 < f64` (`u8 + i64 -> i64`, `i64 * f32 -> f32`, `f32 - f64 -> f64`)";
/// "0-d tensors count for less ... `f32 + 0-d f64` stays `f32`, `i64 + 0-d f64` is `f64`,
/// `u8 + 0-d i64` stays `u8`, and two 0-d operands promote normally"; "comparisons and
/// masks are `u8`" (design.md, Dtypes and promotion).
#[test]
fn tensor_tensor_promotion_follows_the_table() -> Result<()> {
    let t = |d: DType| Tensor::ones([2], d);
    let s = |d: DType| Tensor::ones(Vec::<usize>::new(), d);
    assert_eq!(t(DType::U8)?.add(&t(DType::I64)?)?.dtype(), DType::I64);
    assert_eq!(t(DType::I64)?.mul(&t(DType::F32)?)?.dtype(), DType::F32);
    assert_eq!(t(DType::F32)?.sub(&t(DType::F64)?)?.dtype(), DType::F64);
    assert_eq!(t(DType::F32)?.add(&s(DType::F64)?)?.dtype(), DType::F32);
    assert_eq!(t(DType::I64)?.add(&s(DType::F64)?)?.dtype(), DType::F64);
    assert_eq!(t(DType::U8)?.add(&s(DType::I64)?)?.dtype(), DType::U8);
    assert_eq!(s(DType::F32)?.add(&s(DType::F64)?)?.dtype(), DType::F64);
    assert_eq!(t(DType::F64)?.gt(&t(DType::F32)?)?.dtype(), DType::U8);
    Ok(())
}

/// "Tensor with Rust scalar: a scalar never widens a tensor within its category (`f32 *
/// 2.0` stays `f32`, `u8 + 1` stays `u8`); an integer tensor with a float scalar gives
/// `f32`; an integer tensor with an integer scalar computes in the tensor's dtype ... (for
/// `u8`, `x * (-1)` is `256 - x`); true division ... of integers give `f32`;
/// `pow_scalar` of an integer tensor by an integer exponent stays integral, and a negative
/// exponent is an error" (design.md, Dtypes and promotion).
#[test]
fn tensor_scalar_promotion_follows_the_category_rules() -> Result<()> {
    let f = Tensor::ones([2], DType::F32)?;
    let u = Tensor::from_vec(vec![3u8, 200], vec![2])?;
    let i = Tensor::from_vec(vec![3i64, -4], vec![2])?;
    assert_eq!(f.mul_scalar(2.0).dtype(), DType::F32);
    assert_eq!(u.add_scalar(1).dtype(), DType::U8);
    assert_eq!(i.mul_scalar(0.5).dtype(), DType::F32);
    assert_eq!(u.mul_scalar(-1).to_vec::<u8>()?, [253, 56]);
    assert_eq!(i.div_scalar(2).dtype(), DType::F32);
    assert_eq!(i.div(&i)?.dtype(), DType::F32);
    assert_eq!(i.pow_scalar(2)?.to_vec::<i64>()?, [9, 16]);
    assert!(i.pow_scalar(-1).is_err());
    Ok(())
}

/// "`clamp` of an integer tensor with integral bounds keeps its dtype, and a bound with a
/// fractional part, an infinite or NaN bound makes the result `f32`"; bounds "beyond an
/// integer dtype's range saturate" (design.md, Dtypes and promotion; and Differences from
/// PyTorch, "Integral clamp keeps the integer dtype").
#[test]
fn integer_clamp_keeps_its_dtype_only_for_integral_bounds() -> Result<()> {
    let u = Tensor::from_vec(vec![1u8, 9], vec![2])?;
    assert_eq!(u.clamp(Some(2.0), Some(5.0)).to_vec::<u8>()?, [2, 5]);
    assert_eq!(u.clamp(Some(-10.0), Some(1000.0)).to_vec::<u8>()?, [1, 9]);
    assert_eq!(u.clamp(Some(2.5), None).dtype(), DType::F32);
    assert_eq!(u.clamp(None, Some(f64::INFINITY)).dtype(), DType::F32);
    Ok(())
}

/// "Integer `pow` of two tensors ... a negative exponent gives `1 / x^|e|` truncated (1 for
/// 1, +-1 for -1, 0 otherwise)" (design.md, Dtypes and promotion).
#[test]
fn integer_pow_with_a_negative_exponent_truncates() -> Result<()> {
    let base = Tensor::from_vec(vec![1i64, -1, -1, 2, 5], vec![5])?;
    let exp = Tensor::from_vec(vec![-3i64, -1, -2, -1, -2], vec![5])?;
    assert_eq!(base.pow(&exp)?.to_vec::<i64>()?, [1, -1, 1, 0, 0]);
    Ok(())
}

/// "Floating functions (`exp`, `sigmoid`, ...) of an integer tensor compute in `f32`";
/// "Conversions ... follow Rust's `as` casts (float to integer truncates toward zero and
/// saturates)" (design.md, Dtypes and promotion).
#[test]
fn float_functions_of_integers_are_f32_and_casts_truncate_and_saturate() -> Result<()> {
    let i = Tensor::from_vec(vec![0i64, 1], vec![2])?;
    assert_eq!(i.exp().dtype(), DType::F32);
    assert_eq!(i.sigmoid().dtype(), DType::F32);
    let f = Tensor::from_vec(vec![-1.7f64, 2.9, 300.0, -5.0, f64::NAN], vec![5])?;
    assert_eq!(f.to_dtype(DType::U8).to_vec::<u8>()?, [0, 2, 255, 0, 0]);
    assert_eq!(f.to_dtype(DType::I64).to_vec::<i64>()?[..2], [-1, 2]);
    Ok(())
}

/// "A tensor lives on one `Device`: `Cpu` or `Cuda(n)`, parsed from PyTorch's spellings
/// (`"cpu"`, `"cuda"`, `"cuda:1"`)" (design.md, Devices).
#[test]
fn devices_parse_pytorch_spellings() -> Result<()> {
    assert_eq!("cpu".parse::<Device>()?, Device::Cpu);
    assert_eq!("cuda".parse::<Device>()?, Device::Cuda(0));
    assert_eq!("cuda:1".parse::<Device>()?, Device::Cuda(1));
    assert!("tpu".parse::<Device>().is_err());
    Ok(())
}

/// "An operation on tensors of different devices is an error naming the operation and both
/// devices (`add: expected tensors on one device, got cpu and cuda:0`)"; "Unlike PyTorch,
/// a 0-d CPU tensor is not taken as a scalar beside device tensors" (design.md, Devices).
#[test]
fn mixing_devices_is_an_error_even_for_a_0_d_cpu_tensor() -> Result<()> {
    Device::emulate_cuda();
    if !Device::Cuda(0).is_available() {
        println!("skipped: no usable cuda:0");
        return Ok(());
    }
    let cpu = f32s(&[1.0, 2.0], &[2])?;
    let dev = cpu.to_device(Device::Cuda(0))?;
    let msg = cpu.add(&dev).expect_err("mixed devices").to_string();
    assert!(msg.contains("add") && msg.contains("cpu") && msg.contains("cuda:0"), "{msg}");
    assert!(dev.mul(&Tensor::scalar(2.0f32)).is_err(), "a 0-d CPU tensor is no scalar beside cuda:0");
    assert_eq!(dev.add(&dev)?.device(), Device::Cuda(0), "results stay on their inputs' device");
    Ok(())
}

/// "`set_pool_limit(bytes)` ... the larger of 512 MiB (`DEFAULT_POOL_LIMIT`) and the most
/// bytes the tensors ever held at once"; "`set_pool_trim_period`
/// ... 16,384 (`DEFAULT_TRIM_PERIOD`)" (design.md, Memory).
#[test]
fn the_pool_defaults_are_the_documented_ones() {
    assert_eq!(ember::tensor::storage::DEFAULT_POOL_LIMIT, 512 << 20);
    assert_eq!(ember::tensor::storage::DEFAULT_TRIM_PERIOD, 16_384);
}

/// "sizes beyond ember's element limit (`isize::MAX / 8` elements) are refused before
/// anything is asked of the allocator" (design.md, Memory).
#[test]
fn sizes_beyond_the_element_limit_are_errors() {
    let too_many = (isize::MAX as usize / 8) + 1;
    let r = Tensor::zeros([too_many], DType::U8);
    assert!(r.is_err(), "{too_many} elements were not refused");
}

/// "ember's kernels flush subnormals to zero by default ... `exp` of `f32` values below
/// about -87.3 is 0 rather than a subnormal" (design.md, Subnormal numbers).
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn subnormals_flush_to_zero_by_default() -> Result<()> {
    if std::env::var("EMBER_FLUSH_DENORMAL").is_ok_and(|v| v == "0") {
        return Ok(());
    }
    assert!(ember::tensor::threading::flush_denormal());
    assert_eq!(f32s(&[-100.0], &[1])?.exp().to_vec::<f32>()?, [0.0]);
    Ok(())
}

/// "`Var` is `Send + Sync`" and "Errors: one `ember::Error` (defined in `ember-tensor`,
/// re-exported everywhere)" (design.md, Architecture).
#[test]
fn var_is_send_and_sync_and_the_error_is_shared() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Var>();
    send_sync::<Tensor>();
    fn facade_error(_: ember::Error) {}
    let e: Error = Tensor::from_vec(vec![1.0f32], vec![2]).expect_err("one value for two slots");
    facade_error(e);
}

/// "Rows that see no key. PyTorch's composition would give NaN (softmax of a row of
/// `-inf`); its CPU implementation gives 0, for the output and every gradient through the
/// row, and so does ember" (design.md, Attention).
#[test]
fn an_attention_row_that_sees_no_key_gives_zeros() -> Result<()> {
    use ember::nn::functional::{SdpaArgs, scaled_dot_product_attention};
    let q = Var::param(f32s(&[1.0, 0.0, 0.0, 1.0], &[1, 2, 2])?);
    let k = Var::param(f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 3, 2])?);
    let v = Var::param(f32s(&[0.5, -1.0, 2.0, 1.5, -0.5, 3.0], &[1, 3, 2])?);
    // Query 0 sees keys 0 and 2; query 1 sees none.
    let mask = Tensor::from_vec(vec![1u8, 0, 1, 0, 0, 0], vec![2, 3])?;
    let out = scaled_dot_product_attention(&q, &k, &v, &SdpaArgs::default().mask(mask))?;
    let o = vals(&out.value())?;
    assert!(o[..2].iter().all(|x| *x != 0.0 && x.is_finite()), "{o:?}");
    assert_eq!(o[2..], [0.0, 0.0]);
    out.sum_all().backward()?;
    let gq = vals(&q.grad().expect("a gradient"))?;
    assert_eq!(gq[2..], [0.0, 0.0], "no gradient through the row");
    assert!(vals(&k.grad().expect("a gradient"))?.iter().all(|x| x.is_finite()));
    Ok(())
}
