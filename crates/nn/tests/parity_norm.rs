//! PyTorch parity of the normalization layers and functional forms: outputs, gradients and
//! running statistics over several training steps, compared with what PyTorch computed for
//! the same inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/norm.json`, written by
//! `tools/parity/norm.py` (regenerate with `python tools/parity/norm.py` from the repository
//! root, in an environment with torch), so this test needs no Python. Each scenario here is
//! the same computation as the Python function of the same name.
//!
//! `f64` scenarios must agree within `1e-10 + 1e-10 * |expected|`, `f32` ones (names ending
//! in `_f32`) within `1e-5 + 1e-5 * |expected|`. A scenario fails on any mismatch, on an
//! ember error, and on any fixture tensor it did not use or compare.

use ember_autograd::{Var, no_grad};
use ember_nn::functional as F;
use ember_nn::{
    BatchNorm1d, BatchNorm2d, BatchNormOptions, GroupNorm, InstanceNorm2d, InstanceNormOptions, Module, RMSNorm,
};
use ember_tensor::{DType, Result};
use ember_testing::Case;

ember_testing::parity_suite! {
    fixture: "norm.json",
    tolerance: ember_testing::f64_or_f32_by_name,
    scenarios: [
        bn2d_momentum,
        bn2d_momentum_f32,
        bn1d_cumulative,
        bn1d_rank2_no_affine,
        bn2d_untracked,
        bn_functional,
        group_norm_mixed,
        group_norm_layer_f32,
        instance_norm_tracked,
        instance_norm_plain,
        rms_norm_mixed,
        rms_norm_layer_f32,
    ],
}

/// The scenarios, each the same computation as the Python function of the same name.
mod build {
    use super::*;

    fn dtype(c: &Case<'_>) -> DType {
        if c.name().ends_with("_f32") { DType::F32 } else { DType::F64 }
    }

    /// Loads `w` and `b` into the layer's parameters, when it has them.
    fn load_affine(c: &mut Case<'_>, layer: &dyn Module) -> Result<()> {
        for (name, p) in layer.named_parameters() {
            let key = if name == "weight" { "w" } else { "b" };
            let v = c.tensor(key);
            no_grad(|| p.value().copy_(&v))?;
        }
        Ok(())
    }

    /// `train_steps` of the Python side: `steps` training steps, then one in evaluation.
    fn train_steps(c: &mut Case<'_>, layer: &dyn Module, steps: usize) -> Result<()> {
        load_affine(c, layer)?;
        let buffers = layer.named_buffers();
        layer.train();
        let mut xs = Vec::new();
        for i in 0..steps {
            let x = c.param(&format!("x{i}"));
            let y = layer.forward(&x)?;
            let r = c.constant(&format!("r{i}"));
            y.mul(&r)?.sum_all().backward()?;
            c.output(&format!("y{i}"), &y);
            for (name, t) in &buffers {
                if name != "num_batches_tracked" {
                    c.output(&format!("{name}{i}"), &Var::new(t.copy()));
                }
            }
            xs.push(x);
        }
        for (i, x) in xs.iter().enumerate() {
            c.grad(&format!("x{i}"), x);
        }
        for (name, p) in layer.named_parameters() {
            c.grad(if name == "weight" { "w" } else { "b" }, &p);
        }
        for (name, t) in &buffers {
            if name == "num_batches_tracked" {
                c.output(name, &Var::new(t.to_dtype(dtype(c))));
            }
        }
        layer.eval();
        let xe = c.constant("xe");
        let ye = layer.forward(&xe)?;
        c.output("ye", &ye);
        Ok(())
    }

    fn bn_options(c: &Case<'_>) -> BatchNormOptions {
        BatchNormOptions { dtype: dtype(c), ..BatchNormOptions::default() }
    }

    pub fn bn2d_momentum(c: &mut Case<'_>) -> Result<()> {
        let layer = BatchNorm2d::with_options(3, bn_options(c))?;
        train_steps(c, &layer, 3)
    }

    pub fn bn2d_momentum_f32(c: &mut Case<'_>) -> Result<()> {
        bn2d_momentum(c)
    }

    pub fn bn1d_cumulative(c: &mut Case<'_>) -> Result<()> {
        let layer = BatchNorm1d::with_options(4, BatchNormOptions { momentum: None, ..bn_options(c) })?;
        train_steps(c, &layer, 3)
    }

    pub fn bn1d_rank2_no_affine(c: &mut Case<'_>) -> Result<()> {
        let layer = BatchNorm1d::with_options(3, BatchNormOptions { affine: false, ..bn_options(c) })?;
        train_steps(c, &layer, 3)
    }

    pub fn bn2d_untracked(c: &mut Case<'_>) -> Result<()> {
        let layer = BatchNorm2d::with_options(2, BatchNormOptions { track_running_stats: false, ..bn_options(c) })?;
        train_steps(c, &layer, 1)
    }

    pub fn bn_functional(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b) = (c.param("x"), c.param("w"), c.param("b"));
        let (rm, rv) = (c.tensor("rm"), c.tensor("rv"));
        let y = F::batch_norm(&x, Some(&rm), Some(&rv), Some(&w), Some(&b), true, 0.3, 1e-3)?;
        let z = F::batch_norm(&x, Some(&rm), Some(&rv), Some(&w), Some(&b), false, 0.3, 1e-3)?;
        let (r, q) = (c.constant("r"), c.constant("q"));
        y.mul(&r)?.sum_all().add(&z.mul(&q)?.sum_all())?.backward()?;
        c.output("y", &y);
        c.output("z", &z);
        c.output("rm_after", &Var::new(rm));
        c.output("rv_after", &Var::new(rv));
        for (k, t) in [("x", &x), ("w", &w), ("b", &b)] {
            c.grad(k, t);
        }
        Ok(())
    }

    pub fn group_norm_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b, u) = (c.param("x"), c.param("w"), c.param("b"), c.param("u"));
        let y = F::group_norm(&x, 3, Some(&w), Some(&b), 1e-5)?;
        let z1 = F::group_norm(&u, 1, None, None, 1e-5)?;
        let z4 = F::group_norm(&u, 4, None, None, 1e-5)?;
        let (r, q1, q4) = (c.constant("r"), c.constant("q1"), c.constant("q4"));
        y.mul(&r)?.sum_all().add(&z1.mul(&q1)?.sum_all())?.add(&z4.mul(&q4)?.sum_all())?.backward()?;
        c.output("y", &y);
        c.output("z1", &z1);
        c.output("z4", &z4);
        for (k, t) in [("x", &x), ("w", &w), ("b", &b), ("u", &u)] {
            c.grad(k, t);
        }
        Ok(())
    }

    pub fn group_norm_layer_f32(c: &mut Case<'_>) -> Result<()> {
        let layer = GroupNorm::new(2, 4)?;
        load_affine(c, &layer)?;
        let x = c.param("x");
        let y = layer.forward(&x)?;
        y.mul(&c.constant("r"))?.sum_all().backward()?;
        c.output("y", &y);
        c.grad("x", &x);
        for (name, p) in layer.named_parameters() {
            c.grad(if name == "weight" { "w" } else { "b" }, &p);
        }
        Ok(())
    }

    pub fn instance_norm_tracked(c: &mut Case<'_>) -> Result<()> {
        let options =
            InstanceNormOptions { affine: true, track_running_stats: true, dtype: dtype(c), ..Default::default() };
        let layer = InstanceNorm2d::with_options(3, options)?;
        train_steps(c, &layer, 3)
    }

    pub fn instance_norm_plain(c: &mut Case<'_>) -> Result<()> {
        let layer = InstanceNorm2d::with_options(2, InstanceNormOptions { dtype: dtype(c), ..Default::default() })?;
        train_steps(c, &layer, 1)
    }

    pub fn rms_norm_mixed(c: &mut Case<'_>) -> Result<()> {
        let (x, w) = (c.param("x"), c.param("w"));
        let y = F::rms_norm(&x, &[4, 5], Some(&w), None)?;
        let z = F::rms_norm(&x, &[5], None, Some(1e-3))?;
        let (r, q) = (c.constant("r"), c.constant("q"));
        y.mul(&r)?.sum_all().add(&z.mul(&q)?.sum_all())?.backward()?;
        c.output("y", &y);
        c.output("z", &z);
        c.grad("x", &x);
        c.grad("w", &w);
        Ok(())
    }

    pub fn rms_norm_layer_f32(c: &mut Case<'_>) -> Result<()> {
        let layer = RMSNorm::new(&[6])?;
        load_affine(c, &layer)?;
        let x = c.param("x");
        let y = layer.forward(&x)?;
        y.mul(&c.constant("r"))?.sum_all().backward()?;
        c.output("y", &y);
        c.grad("x", &x);
        for (_, p) in layer.named_parameters() {
            c.grad("w", &p);
        }
        Ok(())
    }
}
