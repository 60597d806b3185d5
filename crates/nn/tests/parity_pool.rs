//! PyTorch parity of pooling and interpolation: outputs, argmax indices and gradients of
//! the functional forms and layers, compared with what PyTorch computed for the same inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/pool.json`, written by
//! `tools/parity/pool.py` (regenerate with `python tools/parity/pool.py` from the repository
//! root, in an environment with torch), so this test needs no Python. Each scenario here is
//! the same computation as the Python function of the same name.
//!
//! `f64` scenarios must agree within `1e-10 + 1e-10 * |expected|`, `f32` ones (names ending
//! in `_f32`) within `1e-5 + 1e-5 * |expected|`; indices exactly.

use ember_autograd::{Var, grad};
use ember_nn::functional as F;
use ember_nn::{AdaptiveAvgPool2d, AvgPool2d, Flatten, MaxPool2d, Module, Sequential, Unflatten, Upsample};
use ember_tensor::Result;
use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use ember_testing::Case;

ember_testing::parity_suite! {
    fixture: "pool.json",
    tolerance: ember_testing::f64_or_f32_by_name,
    scenarios: [
        max_pool2d_basic,
        max_pool2d_basic_f32,
        max_pool2d_ceil_padded_f32,
        max_pool2d_dilated,
        max_pool1d_mixed,
        avg_pool2d_mixed,
        avg_pool2d_f32,
        avg_pool1d_mixed,
        adaptive_avg_pool_mixed,
        adaptive_max_pool2d_indices,
        interpolate_nearest,
        interpolate_linear,
        interpolate_linear_f32,
        pool_layers_f32,
        pool_double_backward,
    ],
}

/// The scenarios, each the same computation as the Python function of the same name.
mod build {
    use super::*;

    /// `sum(y * r_key)`, comparing `y` with output `key`.
    fn weighted(c: &mut Case<'_>, key: &str, y: &Var) -> Result<Var> {
        c.output(key, y);
        let r = c.constant(&format!("r_{key}"));
        Ok(y.mul(&r)?.sum_all())
    }

    /// Backward of the sum of `losses`, then compares the leaves' gradients.
    fn finish(c: &mut Case<'_>, losses: &[Var], leaves: &[(&str, &Var)]) -> Result<()> {
        let mut total = losses[0].clone();
        for l in &losses[1..] {
            total = total.add(l)?;
        }
        total.backward()?;
        for (k, v) in leaves {
            c.grad(k, v);
        }
        Ok(())
    }

    fn max_pool2d_basic_impl(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let (y, i) = F::max_pool2d_with_indices(&x, &MaxPoolArgs::new(2))?;
        c.output("i", &Var::new(i));
        let l = weighted(c, "y", &y)?;
        finish(c, &[l], &[("x", &x)])
    }

    pub fn max_pool2d_basic(c: &mut Case<'_>) -> Result<()> {
        max_pool2d_basic_impl(c)
    }

    pub fn max_pool2d_basic_f32(c: &mut Case<'_>) -> Result<()> {
        max_pool2d_basic_impl(c)
    }

    pub fn max_pool2d_ceil_padded_f32(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let args = MaxPoolArgs::new(3).stride(2).padding(1).ceil_mode(true);
        let (y, i) = F::max_pool2d_with_indices(&x, &args)?;
        c.output("i", &Var::new(i));
        let l = weighted(c, "y", &y)?;
        finish(c, &[l], &[("x", &x)])
    }

    pub fn max_pool2d_dilated(c: &mut Case<'_>) -> Result<()> {
        let (x, u) = (c.param("x"), c.param("u"));
        let args = MaxPoolArgs::new([2, 3]).stride([2, 1]).padding(1).dilation([3, 2]).ceil_mode(true);
        let (y, i) = F::max_pool2d_with_indices(&x, &args)?;
        let z = F::max_pool2d(&u, &MaxPoolArgs::new(2).stride(1))?;
        c.output("i", &Var::new(i));
        let ls = [weighted(c, "y", &y)?, weighted(c, "z", &z)?];
        finish(c, &ls, &[("x", &x), ("u", &u)])
    }

    pub fn max_pool1d_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, u) = (c.param("x"), c.param("u"));
        let args = MaxPoolArgs::new(3).stride(2).padding(1).dilation(2).ceil_mode(true);
        let (y, i) = F::max_pool1d_with_indices(&x, &args)?;
        let z = F::max_pool1d(&u, &MaxPoolArgs::new(2))?;
        c.output("i", &Var::new(i));
        let ls = [weighted(c, "y", &y)?, weighted(c, "z", &z)?];
        finish(c, &ls, &[("x", &x), ("u", &u)])
    }

    pub fn avg_pool2d_mixed(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let base = AvgPoolArgs::new(3).stride(2).padding(1).ceil_mode(true);
        let a = F::avg_pool2d(&x, &base)?;
        let b = F::avg_pool2d(&x, &base.count_include_pad(false))?;
        let d = F::avg_pool2d(&x, &AvgPoolArgs::new([2, 3]).stride(1).divisor_override(5))?;
        let ls = [weighted(c, "a", &a)?, weighted(c, "b", &b)?, weighted(c, "c", &d)?];
        finish(c, &ls, &[("x", &x)])
    }

    pub fn avg_pool2d_f32(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let l = weighted(c, "y", &F::avg_pool2d(&x, &AvgPoolArgs::new(2))?)?;
        finish(c, &[l], &[("x", &x)])
    }

    pub fn avg_pool1d_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, u) = (c.param("x"), c.param("u"));
        let args = AvgPoolArgs::new(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false);
        let y = F::avg_pool1d(&x, &args)?;
        let z = F::avg_pool1d(&u, &AvgPoolArgs::new(2))?;
        let ls = [weighted(c, "y", &y)?, weighted(c, "z", &z)?];
        finish(c, &ls, &[("x", &x), ("u", &u)])
    }

    pub fn adaptive_avg_pool_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, u, v) = (c.param("x"), c.param("u"), c.param("v"));
        let a = F::adaptive_avg_pool2d(&x, [3, 4])?;
        let b = F::adaptive_avg_pool2d(&u, 2)?;
        let d = F::adaptive_avg_pool1d(&v, 4)?;
        let ls = [weighted(c, "a", &a)?, weighted(c, "b", &b)?, weighted(c, "c", &d)?];
        finish(c, &ls, &[("x", &x), ("u", &u), ("v", &v)])
    }

    pub fn adaptive_max_pool2d_indices(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let (y, i) = F::adaptive_max_pool2d_with_indices(&x, [3, 2])?;
        c.output("i", &Var::new(i));
        let l = weighted(c, "y", &y)?;
        finish(c, &[l], &[("x", &x)])
    }

    pub fn interpolate_nearest(c: &mut Case<'_>) -> Result<()> {
        let (x, u, v) = (c.param("x"), c.param("u"), c.param("v"));
        let a = F::interpolate(&x, &InterpolateArgs::scale_factor([2.0]))?;
        let b = F::interpolate(&x, &InterpolateArgs::size([5, 7]))?;
        let d = F::interpolate(&u, &InterpolateArgs::scale_factor([0.7, 0.5]))?;
        let e = F::interpolate(&v, &InterpolateArgs::scale_factor([1.5]))?;
        let f = F::interpolate(&v, &InterpolateArgs::scale_factor([1.5]).recompute_scale_factor(true))?;
        let ls = [
            weighted(c, "a", &a)?,
            weighted(c, "b", &b)?,
            weighted(c, "c", &d)?,
            weighted(c, "d", &e)?,
            weighted(c, "e", &f)?,
        ];
        finish(c, &ls, &[("x", &x), ("u", &u), ("v", &v)])
    }

    fn interpolate_linear_impl(c: &mut Case<'_>) -> Result<()> {
        let (x, u, v) = (c.param("x"), c.param("u"), c.param("v"));
        let bi = |a: InterpolateArgs| a.mode(InterpolateMode::Bilinear);
        let li = |a: InterpolateArgs| a.mode(InterpolateMode::Linear);
        let a = F::interpolate(&x, &bi(InterpolateArgs::size([5, 7])).align_corners(true))?;
        let b = F::interpolate(&x, &bi(InterpolateArgs::size([5, 7])).align_corners(false))?;
        let d = F::interpolate(&u, &bi(InterpolateArgs::scale_factor([0.6])))?;
        let e = F::interpolate(&x, &bi(InterpolateArgs::scale_factor([1.7])).recompute_scale_factor(true))?;
        let f = F::interpolate(&v, &li(InterpolateArgs::scale_factor([2.5])))?;
        let g = F::interpolate(&v, &li(InterpolateArgs::size([3])).align_corners(true))?;
        let ls = [
            weighted(c, "a", &a)?,
            weighted(c, "b", &b)?,
            weighted(c, "c", &d)?,
            weighted(c, "d", &e)?,
            weighted(c, "e", &f)?,
            weighted(c, "f", &g)?,
        ];
        finish(c, &ls, &[("x", &x), ("u", &u), ("v", &v)])
    }

    pub fn interpolate_linear(c: &mut Case<'_>) -> Result<()> {
        interpolate_linear_impl(c)
    }

    pub fn interpolate_linear_f32(c: &mut Case<'_>) -> Result<()> {
        interpolate_linear_impl(c)
    }

    pub fn pool_layers_f32(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let model = Sequential::new()
            .add(MaxPool2d::new(2))
            .add(Upsample::scale_factor(2.0).mode(InterpolateMode::Bilinear))
            .add(AvgPool2d::new(3).stride(2).padding(1))
            .add(AdaptiveAvgPool2d::new([2, 3]))
            .add(Flatten::new())
            .add(Unflatten::new(1, [3, 6]));
        let l = weighted(c, "y", &model.forward(&x)?)?;
        finish(c, &[l], &[("x", &x)])
    }

    pub fn pool_double_backward(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let m = F::max_pool2d(&x.tanh(), &MaxPoolArgs::new(2).stride(1))?;
        let y = F::avg_pool2d(&m, &AvgPoolArgs::new(2).padding(1))?;
        let r = c.constant("r");
        let g = grad(&[&y.mul(&r)?.sum_all()], &[&x], &[], false, true)?;
        let g = g.into_iter().next().flatten().ok_or_else(|| ember_tensor::Error::autograd("no gradient"))?;
        let loss = g.mul(&g)?.sum_all();
        loss.backward()?;
        c.output("loss", &loss);
        c.grad("x", &x);
        Ok(())
    }
}
