//! Applying a policy: which dtype an operation's float inputs are cast to, the casts
//! themselves (recorded `Var::to_dtype` nodes, so gradients return in the inputs' own
//! dtypes) and the hooks the operations call.
//!
//! Every hook starts with the one thread-local read of [`enabled_bits`]; the rest runs only
//! inside an autocast region, out of line.

use super::cache;
use super::policy::{OpPolicy, Policy};
use super::state::{DeviceType, autocast_dtype, enabled_bits};
use crate::engine::current_run;
use crate::var::Var;
use ember_tensor::{DType, Error, Result};
use smallvec::SmallVec;

/// An operation's inputs as autocast hands them over ([`cast_inputs`]): the cast `Var`s
/// (`None` where the operation was given none) and the dtype its result is to be rounded
/// to, for [`Policy::FirstInput`].
pub struct Cast<const N: usize> {
    /// The inputs, cast where the policy says.
    pub inputs: [Option<Var>; N],
    output: Option<DType>,
}

impl<const N: usize> Cast<N> {
    /// The `i`-th input: the cast one, or `None` if the operation was given none.
    pub fn get(&self, i: usize) -> Option<&Var> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// The `i`-th input, or `given` (the input as the caller gave it) where there is none.
    pub fn or<'a>(&'a self, i: usize, given: &'a Var) -> &'a Var {
        self.get(i).unwrap_or(given)
    }

    /// The operation's result `y` in the dtype the policy gives results: unchanged, except
    /// under [`Policy::FirstInput`], where it is rounded to the first input's dtype.
    pub fn output(&self, y: Var) -> Var {
        match self.output {
            Some(dtype) => y.to_dtype(dtype),
            None => y,
        }
    }
}

/// Whether `v` is one of the inputs autocast converts on `device`: a float of 16 or 32
/// bits on that device type (integer inputs and `f64` are left alone, as in PyTorch).
fn eligible(v: &Var, device: DeviceType) -> bool {
    matches!(v.dtype(), DType::F16 | DType::BF16 | DType::F32) && DeviceType::from(v.device()) == device
}

/// The dtype `op` casts `inputs` to on this thread now, and the dtype of its result where
/// that differs; `None` when autocast leaves the operation alone.
fn plan(op: &OpPolicy, inputs: &[Option<&Var>]) -> Result<Option<(DType, Option<DType>, DeviceType)>> {
    let Some(first) = inputs.iter().flatten().next() else { return Ok(None) };
    let device = DeviceType::from(first.device());
    // Backward formulas run as recorded: the dtypes were decided in forward.
    if enabled_bits() & device.bit() == 0 || current_run() != 0 {
        return Ok(None);
    }
    let policy = match device {
        DeviceType::Cpu => op.cpu,
        DeviceType::Cuda => op.cuda,
    };
    let lower = autocast_dtype(device);
    let floats = || inputs.iter().flatten().filter(|v| eligible(v, device));
    Ok(match policy {
        Policy::Follow => None,
        Policy::Lower => Some((lower, None, device)),
        Policy::F32 => Some((DType::F32, None, device)),
        Policy::Promote => Some((floats().fold(lower, |t, v| t.promote(v.dtype())), None, device)),
        Policy::FirstInput => {
            let mut dtypes = floats().map(|v| v.dtype());
            let head = dtypes.next();
            match head {
                Some(d) if dtypes.any(|o| o != d) => Some((DType::F32, Some(first.dtype()), device)),
                _ => None,
            }
        }
        Policy::Refuse => return Err(refused(op, device)),
    })
}

/// The error of an operation autocast refuses on `device`.
#[cold]
fn refused(op: &OpPolicy, device: DeviceType) -> Error {
    Error::invalid(
        op.name,
        format!(
            "{} is unsafe to autocast on {device}: its result in 16 bits can round to exactly 0 or 1 and its \
             gradient overflow. Models usually apply a sigmoid right before it; combine the two with \
             binary_cross_entropy_with_logits, which is safe to autocast, or run it in an autocast region with \
             enabled = false on inputs cast to f32",
            op.name
        ),
    )
}

/// `v` in `dtype` if autocast converts it, through the weight cache for a parameter going
/// from `f32` to the region's dtype; `None` when it stays as it is.
fn convert(v: &Var, dtype: DType, device: DeviceType) -> Option<Var> {
    if !eligible(v, device) || v.dtype() == dtype {
        return None;
    }
    if v.dtype() == DType::F32 && dtype == autocast_dtype(device) {
        return Some(cache::cast(v, dtype));
    }
    Some(v.to_dtype(dtype))
}

/// The general hook: `inputs` (optional ones as `None`) as `op`'s policy casts them on this
/// thread now, or `None` when nothing is to change (autocast off for their device type,
/// a policy that leaves them, inputs already in the dtype). An error for an operation the
/// policy refuses.
///
/// The first read is of one thread-local byte; operations call this at their top and,
/// given `Some`, run on the cast inputs (and round the result with [`Cast::output`]).
#[inline(always)]
pub fn cast_inputs<const N: usize>(op: &OpPolicy, inputs: [Option<&Var>; N]) -> Result<Option<Cast<N>>> {
    if enabled_bits() == 0 {
        return Ok(None);
    }
    cast_inputs_active(op, inputs)
}

/// [`cast_inputs`] inside a region.
#[cold]
#[inline(never)]
fn cast_inputs_active<const N: usize>(op: &OpPolicy, inputs: [Option<&Var>; N]) -> Result<Option<Cast<N>>> {
    let Some((dtype, output, device)) = plan(op, &inputs)? else { return Ok(None) };
    let converted: [Option<Var>; N] = std::array::from_fn(|i| inputs[i].and_then(|v| convert(v, dtype, device)));
    if output.is_none() && converted.iter().all(Option::is_none) {
        return Ok(None);
    }
    let inputs = std::array::from_fn(|i| converted[i].clone().or_else(|| inputs[i].cloned()));
    Ok(Some(Cast { inputs, output }))
}

/// [`cast_inputs`] for an operation whose inputs are all present and whose policies are
/// [`Policy::Lower`], [`Policy::F32`], [`Policy::Promote`] or [`Policy::Follow`] (no
/// refusal, no rounding of the result): the cast inputs, or `None` when nothing changes.
#[inline(always)]
pub fn cast<const N: usize>(op: &OpPolicy, inputs: [&Var; N]) -> Option<[Var; N]> {
    if enabled_bits() == 0 {
        return None;
    }
    cast_active(op, inputs)
}

/// [`cast`] inside a region.
#[cold]
#[inline(never)]
fn cast_active<const N: usize>(op: &OpPolicy, inputs: [&Var; N]) -> Option<[Var; N]> {
    let cast = cast_inputs_active(op, inputs.map(Some)).ok().flatten()?;
    Some(std::array::from_fn(|i| cast.inputs[i].clone().unwrap_or_else(|| inputs[i].clone())))
}

/// [`cast`] for a list of inputs (`cat`, `stack`).
#[inline(always)]
pub fn cast_list(op: &OpPolicy, inputs: &[&Var]) -> Option<Vec<Var>> {
    if enabled_bits() == 0 {
        return None;
    }
    cast_list_active(op, inputs)
}

/// [`cast_list`] inside a region.
#[cold]
#[inline(never)]
fn cast_list_active(op: &OpPolicy, inputs: &[&Var]) -> Option<Vec<Var>> {
    let all: SmallVec<[Option<&Var>; 8]> = inputs.iter().map(|v| Some(*v)).collect();
    let (dtype, _, device) = plan(op, &all).ok().flatten()?;
    let converted: Vec<Option<Var>> = inputs.iter().map(|v| convert(v, dtype, device)).collect();
    if converted.iter().all(Option::is_none) {
        return None;
    }
    Some(converted.into_iter().zip(inputs).map(|(c, v)| c.unwrap_or_else(|| (*v).clone())).collect())
}

/// The hook of an operation made of other operations (a layer, a composed loss): inside
/// an autocast region for the inputs' device type, `body` runs on the inputs as `op`'s
/// policy casts them, with autocast off for that device type, so that the operations it is
/// made of take them as given (PyTorch's autocast wrappers do the same); `body` rounds its
/// result with [`Cast::output`] where the policy asks. `None` outside such a region (or
/// inside a backward call), where the caller runs as usual; an error for a refused
/// operation.
#[inline(always)]
pub fn run_cast<const N: usize, R>(
    op: &OpPolicy,
    inputs: [Option<&Var>; N],
    body: impl FnOnce(&Cast<N>) -> Result<R>,
) -> Option<Result<R>> {
    if enabled_bits() == 0 {
        return None;
    }
    run_cast_active(op, inputs, body)
}

/// [`run_cast`] while autocast is on for some device type.
#[cold]
#[inline(never)]
fn run_cast_active<const N: usize, R>(
    op: &OpPolicy,
    inputs: [Option<&Var>; N],
    body: impl FnOnce(&Cast<N>) -> Result<R>,
) -> Option<Result<R>> {
    let device = DeviceType::from(inputs.iter().flatten().next()?.device());
    if enabled_bits() & device.bit() == 0 || current_run() != 0 {
        return None;
    }
    let cast = match cast_inputs_active(op, inputs) {
        Ok(Some(cast)) => cast,
        Ok(None) => Cast { inputs: inputs.map(|v| v.cloned()), output: None },
        Err(e) => return Some(Err(e)),
    };
    Some(without_autocast(device, || body(&cast)))
}

/// [`run_cast`] for a list of inputs, for an operation with a variable number of them (a
/// recurrent layer and all its parameters); no policy here rounds the result or refuses.
/// Call it behind [`is_autocast_enabled`](super::is_autocast_enabled), so that the list is
/// only built inside a region.
pub fn run_cast_list<R>(op: &OpPolicy, inputs: &[&Var], body: impl FnOnce(&[Var]) -> Result<R>) -> Option<Result<R>> {
    let device = DeviceType::from(inputs.first()?.device());
    if enabled_bits() & device.bit() == 0 || current_run() != 0 {
        return None;
    }
    let cast = cast_list_active(op, inputs).unwrap_or_else(|| inputs.iter().map(|v| (*v).clone()).collect());
    Some(without_autocast(device, || body(&cast)))
}

/// Runs `body` with autocast off for `device`'s type: what an operation with a policy does
/// with its cast inputs when it is made of other operations that have their own (an LSTM
/// of products), so that they take the inputs as given, as PyTorch's autocast wrappers do.
pub fn without_autocast<R>(device: impl Into<DeviceType>, body: impl FnOnce() -> R) -> R {
    let device = device.into();
    if enabled_bits() & device.bit() == 0 {
        return body();
    }
    let _g = super::AutocastGuard::disabled(device);
    body()
}
