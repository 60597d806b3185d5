//! PyTorch parity of the convolutions: outputs and gradients of the functional forms and
//! layers, compared with what PyTorch computed for the same inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/conv.json`, written by
//! `tools/parity/conv.py` (regenerate with `python tools/parity/conv.py` from the repository
//! root, in an environment with torch), so this test needs no Python. Each scenario here is
//! the same computation as the Python function of the same name.
//!
//! `f64` scenarios must agree within `1e-10 + 1e-10 * |expected|`, `f32` ones (names ending
//! in `_f32`) within `1e-5 + 1e-5 * |expected|`. A scenario fails on any mismatch, on an
//! ember error, and on any fixture tensor it did not use or compare;
//! `fixture_and_tests_list_the_same_scenarios` fails when the fixture and this file disagree
//! on which scenarios exist.

use ember_autograd::{Var, grad};
use ember_nn::functional as F;
use ember_nn::{Conv2d, ConvTranspose2d, Module, Sequential, Tanh};
use ember_tensor::{ConvArgs, ConvTransposeArgs, Padding, Result, UnfoldArgs};
use ember_testing::Case;

ember_testing::parity_suite! {
    fixture: "conv.json",
    tolerance: ember_testing::f64_or_f32_by_name,
    scenarios: [
        conv2d_basic,
        conv2d_basic_f32,
        conv2d_strided_dilated_grouped,
        conv2d_depthwise_same,
        conv1d_mixed,
        conv_transpose2d_mixed,
        conv_transpose1d_mixed,
        unfold_fold,
        conv_layers_f32,
        conv_gradient_penalty,
    ],
}

/// The scenarios, each the same computation as the Python function of the same name.
mod build {
    use super::*;

    /// `sum(y * r)` backward; compares `y` and the leaves' gradients.
    fn backward_weighted(c: &mut Case<'_>, y: &Var, leaves: &[(&str, &Var)]) -> Result<()> {
        let r = c.constant("r");
        c.output("y", y);
        y.mul(&r)?.sum_all().backward()?;
        for (k, v) in leaves {
            c.grad(k, v);
        }
        Ok(())
    }

    fn conv2d_basic_impl(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b) = (c.param("x"), c.param("w"), c.param("b"));
        let y = F::conv2d(&x, &w, Some(&b), &ConvArgs::default().padding(1))?;
        backward_weighted(c, &y, &[("x", &x), ("w", &w), ("b", &b)])
    }

    pub fn conv2d_basic(c: &mut Case<'_>) -> Result<()> {
        conv2d_basic_impl(c)
    }

    pub fn conv2d_basic_f32(c: &mut Case<'_>) -> Result<()> {
        conv2d_basic_impl(c)
    }

    pub fn conv2d_strided_dilated_grouped(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b) = (c.param("x"), c.param("w"), c.param("b"));
        let args = ConvArgs::default().stride([2, 1]).padding([1, 2]).dilation([2, 1]).groups(2);
        let y = F::conv2d(&x, &w, Some(&b), &args)?;
        backward_weighted(c, &y, &[("x", &x), ("w", &w), ("b", &b)])
    }

    pub fn conv2d_depthwise_same(c: &mut Case<'_>) -> Result<()> {
        let (x, w) = (c.param("x"), c.param("w"));
        let y = F::conv2d(&x, &w, None, &ConvArgs::default().padding(Padding::Same).groups(3))?;
        backward_weighted(c, &y, &[("x", &x), ("w", &w)])
    }

    pub fn conv1d_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b, u, v) = (c.param("x"), c.param("w"), c.param("b"), c.param("u"), c.param("v"));
        let (r, q) = (c.constant("r"), c.constant("q"));
        let y = F::conv1d(&x, &w, Some(&b), &ConvArgs::default().stride(2).padding(2).dilation(2).groups(2))?;
        let z = F::conv1d(&u, &v, None, &ConvArgs::default().padding(Padding::Valid))?;
        c.output("y", &y);
        c.output("z", &z);
        y.mul(&r)?.sum_all().add(&z.mul(&q)?.sum_all())?.backward()?;
        for (k, t) in [("x", &x), ("w", &w), ("b", &b), ("u", &u), ("v", &v)] {
            c.grad(k, t);
        }
        Ok(())
    }

    pub fn conv_transpose2d_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b) = (c.param("x"), c.param("w"), c.param("b"));
        let args = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1).groups(2).dilation([1, 2]);
        let y = F::conv_transpose2d(&x, &w, Some(&b), &args)?;
        backward_weighted(c, &y, &[("x", &x), ("w", &w), ("b", &b)])
    }

    pub fn conv_transpose1d_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b) = (c.param("x"), c.param("w"), c.param("b"));
        let args = ConvTransposeArgs::default().stride(3).padding(1).output_padding(2);
        let y = F::conv_transpose1d(&x, &w, Some(&b), &args)?;
        backward_weighted(c, &y, &[("x", &x), ("w", &w), ("b", &b)])
    }

    pub fn unfold_fold(c: &mut Case<'_>) -> Result<()> {
        let (x, cols_in, r, q) = (c.param("x"), c.param("c"), c.constant("r"), c.constant("q"));
        let args = UnfoldArgs::new([2, 3]).dilation([1, 2]).padding(1).stride([2, 1]);
        let cols = F::unfold(&x, &args)?;
        let img = F::fold(&cols_in, [6, 5], &args)?;
        c.output("cols", &cols);
        c.output("img", &img);
        cols.mul(&r)?.sum_all().add(&img.mul(&q)?.sum_all())?.backward()?;
        c.grad("x", &x);
        c.grad("c", &cols_in);
        Ok(())
    }

    pub fn conv_layers_f32(c: &mut Case<'_>) -> Result<()> {
        let (w0, b0, w2, b2) = (c.param("0.weight"), c.param("0.bias"), c.param("2.weight"), c.param("2.bias"));
        let down = Conv2d::from_params(w0.clone(), Some(b0.clone()), ConvArgs::default().stride(2).padding(1))?;
        let up = ConvTranspose2d::from_params(
            w2.clone(),
            Some(b2.clone()),
            ConvTransposeArgs::default().stride(2).padding(1),
        )?;
        let model = Sequential::new().add(down).add(Tanh).add(up);
        let x = c.constant("x");
        let y = model.forward(&x)?;
        backward_weighted(c, &y, &[("0.weight", &w0), ("0.bias", &b0), ("2.weight", &w2), ("2.bias", &b2)])
    }

    pub fn conv_gradient_penalty(c: &mut Case<'_>) -> Result<()> {
        let (w1, b1, w2) = (c.param("w1"), c.param("b1"), c.param("w2"));
        let x = c.param("x");
        let h = F::conv2d(&x, &w1, Some(&b1), &ConvArgs::default().stride(2).padding(1))?.tanh();
        let score = F::conv2d(&h, &w2, None, &ConvArgs::default())?.sum_all();
        let g = grad(&[&score], &[&x], &[], false, true)?[0].clone().expect("a gradient of the score");
        let norm = g.flatten(1, -1)?.square().sum(1, false)?.sqrt();
        let gp = norm.sub_scalar(1.0).square().mean_all();
        c.output("norm", &norm);
        c.output("gp", &gp);
        gp.backward()?;
        for (k, p) in [("w1", &w1), ("b1", &b1), ("w2", &w2)] {
            c.grad(k, p);
        }
        Ok(())
    }
}
