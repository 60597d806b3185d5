//! PyTorch parity of `scaled_dot_product_attention`: outputs and query, key and value
//! gradients with a bool mask (including a query that sees no key), a float mask with
//! `-1e30` entries, `is_causal` with `L > S` and `L < S`, a custom scale with broadcast batch
//! dimensions, and a causal sequence longer than one kernel block, compared with what
//! PyTorch computed for the same inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/attention.json`, written by
//! `tools/parity/attention.py` (regenerate with `python tools/parity/attention.py` from the
//! repository root, in an environment with torch), so this test needs no Python. Each
//! scenario here is the same computation as the Python function of the same name.
//!
//! `f64` scenarios must agree within `1e-10 + 1e-10 * |expected|`, `f32` ones (names ending
//! in `_f32`) within `1e-5 + 1e-5 * |expected|`.

use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, scaled_dot_product_attention as sdpa};
use ember_tensor::Result;
use ember_testing::Case;

ember_testing::parity_suite! {
    fixture: "attention.json",
    tolerance: ember_testing::f64_or_f32_by_name,
    scenarios: [bool_mask, bool_mask_f32, float_mask, causal, scale_broadcast, long_causal_f32],
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

    fn masked(c: &mut Case<'_>) -> Result<()> {
        let (q, k, v, m) = (c.param("q"), c.param("k"), c.param("v"), c.constant("m"));
        let y = sdpa(&q, &k, &v, &SdpaArgs::default().mask(m))?;
        backward_weighted(c, &y, &[("q", &q), ("k", &k), ("v", &v)])
    }

    pub fn bool_mask(c: &mut Case<'_>) -> Result<()> {
        masked(c)
    }

    pub fn bool_mask_f32(c: &mut Case<'_>) -> Result<()> {
        masked(c)
    }

    pub fn float_mask(c: &mut Case<'_>) -> Result<()> {
        masked(c)
    }

    pub fn causal(c: &mut Case<'_>) -> Result<()> {
        let (q, k, v) = (c.param("q"), c.param("k"), c.param("v"));
        let (u, w, x) = (c.param("u"), c.param("w"), c.param("x"));
        let (r, t) = (c.constant("r"), c.constant("t"));
        let y = sdpa(&q, &k, &v, &SdpaArgs::default().causal())?;
        let z = sdpa(&u, &w, &x, &SdpaArgs::default().causal())?;
        c.output("y", &y);
        c.output("z", &z);
        y.mul(&r)?.sum_all().add(&z.mul(&t)?.sum_all())?.backward()?;
        for (key, p) in [("q", &q), ("k", &k), ("v", &v), ("u", &u), ("w", &w), ("x", &x)] {
            c.grad(key, p);
        }
        Ok(())
    }

    pub fn scale_broadcast(c: &mut Case<'_>) -> Result<()> {
        let (q, k, v) = (c.param("q"), c.param("k"), c.param("v"));
        let y = sdpa(&q, &k, &v, &SdpaArgs::default().scale(0.3))?;
        backward_weighted(c, &y, &[("q", &q), ("k", &k), ("v", &v)])
    }

    pub fn long_causal_f32(c: &mut Case<'_>) -> Result<()> {
        let (q, k, v) = (c.param("q"), c.param("k"), c.param("v"));
        let y = sdpa(&q, &k, &v, &SdpaArgs::default().causal())?;
        backward_weighted(c, &y, &[("q", &q), ("k", &k), ("v", &v)])
    }
}
