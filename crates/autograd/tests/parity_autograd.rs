//! PyTorch parity: composite functions rebuilt with ember and compared, outputs and
//! gradients, with what PyTorch computed for the same inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/autograd.json`, written by
//! `tools/parity/autograd.py` (regenerate with `python tools/parity/autograd.py` from the
//! repository root, in an environment with torch), so this test needs no Python. Each
//! scenario here is the same computation as the Python function of the same name; the
//! fixture's `inputs` are the leaves, `outputs` forward values, `grads` the `.grad` of
//! leaves after backward (`null`: must be absent; `key@stage`: after that stage of a
//! scenario with several backward calls).
//!
//! Every value is compared within `1e-5 + 1e-5 * |expected|`. A scenario fails, naming
//! itself and each offending tensor, on any mismatch, on an ember error, and on any fixture
//! tensor it did not use or compare; `fixture_and_tests_list_the_same_scenarios` fails when
//! the fixture and this file disagree on which scenarios exist, so none is skipped silently.

use ember_autograd::{Var, grad};
use ember_tensor::{DType, Result, Tensor};
use ember_testing::{Case, Tolerance};
use std::collections::BTreeMap;

ember_testing::parity_suite! {
    fixture: "autograd.json",
    tolerance: |_| Tolerance::new(1e-5, 1e-5),
    scenarios: [
        mlp_layer,
        mlp2_cross_entropy,
        mlp2_cross_entropy_f32,
        broadcast_chain,
        broadcast_chain_batched,
        multi_path_reuse,
        softmax_chain,
        activation_chain,
        matmul_batched,
        views_chain,
        views_chain_more,
        indexing_chain,
        reductions_chain,
        kinks_and_ties,
        backward_variants,
        usage_two_losses,
        usage_multi_task,
        usage_gan_detach,
        usage_frozen_adapter,
        usage_grad_accumulation,
        usage_second_derivative,
    ],
}

/// The scenarios, each the same computation as the Python function of the same name.
mod build {
    use super::*;

    pub fn mlp_layer(c: &mut Case<'_>) -> Result<()> {
        let (x, w, b, target) = (c.param("x"), c.param("W"), c.param("b"), c.constant("target"));
        let h = x.matmul(&w.t()?)?.add(&b)?.relu();
        let loss = h.sub(&target)?.square().mean_all();
        c.output("h", &h);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        c.grad("W", &w);
        c.grad("b", &b);
        Ok(())
    }

    fn mlp2_cross_entropy_impl(c: &mut Case<'_>, dtype: DType) -> Result<()> {
        let x = c.constant("x");
        assert_eq!(x.dtype(), dtype, "scenario {}: the fixture's input dtype", c.name());
        let labels = c.tensor("labels");
        let labels = labels.reshape([labels.numel(), 1])?;
        let (w1, b1, w2, b2) = (c.param("W1"), c.param("b1"), c.param("W2"), c.param("b2"));
        let logits = x.matmul(&w1.t()?)?.add(&b1)?.relu().matmul(&w2.t()?)?.add(&b2)?;
        let loss = logits.log_softmax(1)?.gather(1, &labels)?.mean_all().neg();
        c.output("logits", &logits);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("W1", &w1);
        c.grad("b1", &b1);
        c.grad("W2", &w2);
        c.grad("b2", &b2);
        Ok(())
    }

    pub fn mlp2_cross_entropy(c: &mut Case<'_>) -> Result<()> {
        mlp2_cross_entropy_impl(c, DType::F64)
    }

    pub fn mlp2_cross_entropy_f32(c: &mut Case<'_>) -> Result<()> {
        mlp2_cross_entropy_impl(c, DType::F32)
    }

    pub fn broadcast_chain(c: &mut Case<'_>) -> Result<()> {
        let (a, b, cc, d, r) = (c.param("a"), c.param("b"), c.param("c"), c.param("d"), c.constant("r"));
        let out = a.mul(&b)?.add(&cc)?.exp().div(&d)?;
        let loss = out.mul(&r)?.sum_all();
        c.output("out", &out);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("a", &a);
        c.grad("b", &b);
        c.grad("c", &cc);
        c.grad("d", &d);
        Ok(())
    }

    pub fn broadcast_chain_batched(c: &mut Case<'_>) -> Result<()> {
        let (a, b, cc, e) = (c.param("a"), c.param("b"), c.param("c"), c.param("e"));
        let y = a.sub(&b)?.mul(&cc)?;
        let z = y.tanh().add(&e.mul(&y.square())?)?;
        let col = z.sum([0usize, 2], false)?;
        let loss = col.mul(&col.sigmoid())?.sum_all();
        c.output("z", &z);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("a", &a);
        c.grad("b", &b);
        c.grad("c", &cc);
        c.grad("e", &e);
        Ok(())
    }

    pub fn multi_path_reuse(c: &mut Case<'_>) -> Result<()> {
        let (p, q, r, m, wq) = (c.param("p"), c.param("q"), c.param("r"), c.param("m"), c.constant("wq"));
        let la = p.mul(&p)?.sum_all();
        let lb = q.add(&q.mul(&q)?)?.mul(&wq)?.sum_all();
        let h = r.sigmoid();
        h.retain_grad()?;
        let lc = h.mul(&h)?.sum_all().add(&h.exp().mean_all().mul(&h.sum_all())?)?;
        let ld = m.matmul(&m)?.tanh().sum_all();
        let loss = la.add(&lb)?.add(&lc)?.add(&ld)?;
        for (k, v) in [("la", &la), ("lb", &lb), ("lc", &lc), ("ld", &ld), ("loss", &loss)] {
            c.output(k, v);
        }
        loss.backward()?;
        for (k, v) in [("p", &p), ("q", &q), ("r", &r), ("m", &m), ("h", &h)] {
            c.grad(k, v);
        }
        Ok(())
    }

    pub fn softmax_chain(c: &mut Case<'_>) -> Result<()> {
        let (x, r) = (c.param("x"), c.constant("r"));
        let sm = x.softmax(1)?;
        let lse = x.logsumexp(1, true)?;
        let y = sm.mul(&lse)?.add(&x.log_softmax(0)?.mul(&x.tanh())?)?.add(&sm.add_scalar(1.0).log().mul(&x.exp())?)?;
        let loss = y.mul(&r)?.sum_all().add(&x.logsumexp([0usize, 1], false)?)?;
        c.output("softmax", &sm);
        c.output("logsumexp", &lse);
        c.output("y", &y);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        Ok(())
    }

    pub fn activation_chain(c: &mut Case<'_>) -> Result<()> {
        let (x, r) = (c.param("x"), c.constant("r"));
        let y = x
            .tanh()
            .mul(&x.sigmoid())?
            .add(&x.gelu())?
            .add(&x.gelu_tanh().mul_scalar(0.5))?
            .add(&x.silu())?
            .add(&x.softplus(1.0, 20.0))?
            .add(&x.leaky_relu(0.1).elu(1.0))?
            .add(&x.erf().mul(&x.tanh().sigmoid())?)?;
        let loss = y.mul(&r)?.sum_all();
        c.output("y", &y);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        Ok(())
    }

    pub fn matmul_batched(c: &mut Case<'_>) -> Result<()> {
        let (a, b, v, u, r) = (c.param("a"), c.param("b"), c.param("v"), c.param("u"), c.constant("r"));
        let out = a.matmul(&b)?; // [2, 3, 3, 5]
        let uv = u.matmul(&out.matmul(&v)?)?; // [2, 3]
        let loss = uv.tanh().mul(&r)?.sum_all();
        c.output("out", &out);
        c.output("uv", &uv);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("a", &a);
        c.grad("b", &b);
        c.grad("v", &v);
        c.grad("u", &u);
        Ok(())
    }

    pub fn views_chain(c: &mut Case<'_>) -> Result<()> {
        let (x, y, r) = (c.param("x"), c.param("y"), c.constant("r"));
        let n = x.transpose(0, 1)?.narrow(0, 1, 2)?;
        let cat = Var::cat(&[&n, &y], 0)?;
        let p = cat.reshape([2, 2, 3])?.permute(&[2usize, 0, 1])?;
        let e = p.unsqueeze(1)?.expand([3, 2, 2, 2])?;
        let sel = e.select(0, 1)?.mul(&e.select(0, 2)?)?;
        let parts = sel.flatten_all().split(4, 0)?;
        let st = Var::stack(&[&parts[0], &parts[1].tanh()], 0)?;
        let padded = st.pad(&[(1, 1)], 0.5)?;
        let stepped = x.slice(1, 0, 4, 2)?;
        let loss = padded.mul(&r)?.sum_all().add(&stepped.mul(&stepped.sum(0, true)?)?.sum_all())?;
        c.output("c", &cat);
        c.output("padded", &padded);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        c.grad("y", &y);
        Ok(())
    }

    pub fn views_chain_more(c: &mut Case<'_>) -> Result<()> {
        let (x, k, v, r) = (c.param("x"), c.param("k"), c.param("v"), c.constant("r"));
        let rep = x.repeat(&[2, 2])?;
        let tri = rep.tril(-1)?.add(&rep.triu(2)?.mul_scalar(0.5))?;
        let parts = tri.chunk(3, 1)?;
        let mixed = Var::cat(&[&parts[2], &parts[0].mul(&parts[1])?, &parts[1].tanh()], 1)?;
        let sq = v.squeeze(0)?.squeeze(-1)?;
        let kk = k.expand([4])?.mul(&sq)?;
        let tc = x.transpose(0, 1)?.contiguous().reshape([9])?;
        let loss = mixed
            .mul(&r)?
            .sum_all()
            .add(&kk.unsqueeze(0)?.mul(&kk.unsqueeze(1)?)?.sum_all())?
            .add(&tc.mul(&tc.detach().sigmoid())?.sum_all())?;
        c.output("mixed", &mixed);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        c.grad("k", &k);
        c.grad("v", &v);
        Ok(())
    }

    pub fn indexing_chain(c: &mut Case<'_>) -> Result<()> {
        let (x, z, base) = (c.param("x"), c.param("z"), c.param("base"));
        let (idx, mask, gidx) = (c.tensor("idx"), c.constant("mask"), c.tensor("gidx"));
        let (fill, sidx, r) = (c.tensor("fill"), c.tensor("sidx"), c.constant("r"));
        let sel = x.index_select(0, &idx)?;
        let w = mask.where_cond(&sel, &z.mul_scalar(2.0))?;
        let m = w.gather(1, &gidx)?.masked_fill(&fill, 0.0)?;
        let sa = base.scatter_add(0, &sidx, &m)?;
        let loss = sa.mul(&r)?.sum_all().add(&w.mul(&w)?.sum_all())?;
        c.output("w", &w);
        c.output("sa", &sa);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        c.grad("z", &z);
        c.grad("base", &base);
        Ok(())
    }

    pub fn reductions_chain(c: &mut Case<'_>) -> Result<()> {
        let x = c.param("x");
        let a = x.sum(2, false)?;
        let b = x.mean([0usize, 2], true)?;
        let mx = x.max(1, false)?;
        let mn = x.min([0usize, 1], false)?;
        let v = x.var(1, true, false)?;
        let sd = x.std([0usize, 1], false, false)?;
        let pr = x.prod(2, false)?;
        let lse = x.logsumexp(1, false)?;
        let terms = [
            a.mul(&a)?.sum_all(),
            b.mul(&b.sum_all())?.sum_all(),
            mx.mul(&lse)?.sum_all(),
            mn.mul(&sd)?.sum_all(),
            v.sum_all(),
            pr.tanh().sum_all(),
            x.sum_all().mul(&x.mean_all())?,
        ];
        let mut loss = terms[0].clone();
        for t in &terms[1..] {
            loss = loss.add(t)?;
        }
        let outputs = [("a", &a), ("b", &b), ("max", &mx), ("min", &mn), ("var", &v), ("std", &sd), ("prod", &pr)];
        for (k, t) in outputs {
            c.output(k, t);
        }
        c.output("logsumexp", &lse);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("x", &x);
        Ok(())
    }

    /// Where PyTorch picks a subgradient (kinks, ties, zeros in a product, bounds), ember
    /// must pick the same one. Each op has its own leaf so that a mismatch names it.
    pub fn kinks_and_ties(c: &mut Case<'_>) -> Result<()> {
        let mut leaves = BTreeMap::new();
        for k in ["relu_x", "abs_x", "leaky_x", "elu_x", "clamp_x", "clamp_min_x", "clamp_max_x", "ties", "max_a"] {
            leaves.insert(k, c.param(k));
        }
        for k in ["max_b", "zeros", "pow_base", "pow_exp", "softplus_x", "lse_x"] {
            leaves.insert(k, c.param(k));
        }
        let l = |k: &str| leaves[k].clone();
        let (ties, sp) = (l("ties"), l("softplus_x"));
        let (max_a, max_b) = (l("max_a"), l("max_b"));
        let lse_mask = c.tensor("lse_mask");
        let terms = [
            ("relu", l("relu_x").relu()),
            ("abs", l("abs_x").abs()),
            ("leaky_relu", l("leaky_x").leaky_relu(0.1)),
            ("elu", l("elu_x").elu(2.0)),
            ("clamp", l("clamp_x").clamp(Some(-1.0), Some(1.0))),
            ("clamp_min", l("clamp_min_x").clamp(Some(-1.0), None).add(&l("clamp_min_x").maximum_scalar(0.5))?),
            ("clamp_max", l("clamp_max_x").clamp(None, Some(1.0)).add(&l("clamp_max_x").minimum_scalar(0.5))?),
            ("max_min", Var::cat(&[&ties.max(1, false)?, &ties.min(0, false)?, &ties.max_all()?.reshape([1])?], 0)?),
            ("maximum", max_a.maximum(&max_b)?.add(&max_a.minimum(&max_b)?.mul_scalar(2.0))?),
            ("prod", l("zeros").prod(1, false)?),
            ("pow", l("pow_base").pow(&l("pow_exp"))?),
            ("softplus", sp.slice(0, 0, 3, 1)?.softplus(1.0, 20.0).add(&sp.slice(0, 2, 5, 1)?.softplus(2.0, 10.0))?),
            ("logsumexp", l("lse_x").masked_fill(&lse_mask, f64::NEG_INFINITY)?.logsumexp(1, false)?),
        ];
        // Each term weighted 1, 2, 3, ... along its (1-d) elements, as in the Python side.
        let mut loss: Option<Var> = None;
        for (k, t) in &terms {
            c.output(k, t);
            let n = t.numel();
            let ramp = Var::new(Tensor::from_vec((1..=n).map(|i| i as f64).collect::<Vec<_>>(), [n])?);
            let term = t.mul(&ramp)?.sum_all();
            loss = Some(match loss {
                Some(acc) => acc.add(&term)?,
                None => term,
            });
        }
        let loss = loss.expect("kinks_and_ties has terms");
        c.output("loss", &loss);
        loss.backward()?;
        for (k, v) in &leaves {
            c.grad(k, v);
        }
        Ok(())
    }

    /// `backward_with` a grad_output, the same root twice (accumulating), and
    /// `backward_full` with `create_graph` whose gradient is then differentiated.
    pub fn backward_variants(c: &mut Case<'_>) -> Result<()> {
        let (x, go) = (c.param("x"), c.tensor("grad_output"));
        let y = x.tanh().mul(&x)?;
        c.output("y", &y);
        y.backward_with(Some(&go), false)?;
        c.grad("x@grad_output", &x);

        let z = c.param("z");
        let lz = z.sin().mul(&z)?.sum_all();
        lz.backward_with(None, true)?;
        lz.backward()?;
        c.grad("z@twice", &z);

        let u = c.param("u");
        let lu = u.pow_scalar(3.0)?.mul(&u.exp())?.sum_all();
        lu.backward_full(None, false, true)?;
        let gu = u.grad_var().expect("backward_variants: u has no gradient after backward");
        c.output("gu", &gu);
        u.zero_grad();
        gu.mul(&gu)?.sum_all().backward()?;
        c.grad("u@second", &u);
        Ok(())
    }

    /// docs/design.md, 'Accumulation rules', rule 2: `w` accumulates across the two backward
    /// calls, while the signal it passes to `u` in the second is only L2's, so
    /// `u.grad = d(L1 + L2)/du`.
    pub fn usage_two_losses(c: &mut Case<'_>) -> Result<()> {
        let (u, a) = (c.param("u"), c.constant("a"));
        let w = u.tanh().mul_scalar(2.0);
        w.retain_grad()?;
        let l1 = w.mul(&a)?.sum_all();
        let l2 = w.square().sum_all();
        c.output("w", &w);
        c.output("l1", &l1);
        c.output("l2", &l2);
        l1.backward_with(None, true)?;
        c.grad("u@l1", &u);
        c.grad("w@l1", &w);
        l2.backward()?;
        c.grad("u@l2", &u);
        c.grad("w@l2", &w);
        Ok(())
    }

    /// Multi-task learning. `features` is not retained: after a backward with
    /// `retain_graph` its `.grad` is that backward's own signal (docs/design.md,
    /// 'Accumulation rules', rule 3), which the fixture took from a PyTorch hook.
    pub fn usage_multi_task(c: &mut Case<'_>) -> Result<()> {
        let (x, w_shared, w1, w2) = (c.constant("x"), c.param("w_shared"), c.param("w1"), c.param("w2"));
        let features = x.matmul(&w_shared)?;
        let out1 = features.matmul(&w1)?.tanh().sum_all();
        let out2 = features.matmul(&w2)?.square().mean_all();
        c.output("features", &features);
        c.output("out1", &out1);
        c.output("out2", &out2);
        out1.backward_with(None, true)?;
        c.grad("w_shared@out1", &w_shared);
        c.grad("w1@out1", &w1);
        c.grad("w2@out1", &w2);
        c.grad("features@out1", &features);
        out2.backward_with(None, true)?;
        c.grad("w_shared@out2", &w_shared);
        c.grad("w1@out2", &w1);
        c.grad("w2@out2", &w2);
        c.grad("features@out2", &features);
        Ok(())
    }

    /// The GAN pattern: the discriminator's loss on `fake.detach()` gives the
    /// generator no gradient; the generator's own loss then does.
    pub fn usage_gan_detach(c: &mut Case<'_>) -> Result<()> {
        let (noise, real) = (c.constant("noise"), c.constant("real"));
        let (wg, bg, wd, bd) = (c.param("Wg"), c.param("bg"), c.param("Wd"), c.param("bd"));
        let d = |v: &Var| -> Result<Var> { Ok(v.matmul(&wd)?.add(&bd)?.sigmoid()) };
        let fake = noise.matmul(&wg)?.add(&bg)?.tanh();
        let d_loss = d(&real)?.log().mean_all().neg().sub(&d(&fake.detach())?.rsub_scalar(1.0).log().mean_all())?;
        c.output("fake", &fake);
        c.output("d_loss", &d_loss);
        d_loss.backward()?;
        c.grad("Wd@d_step", &wd);
        c.grad("bd@d_step", &bd);
        c.grad("Wg@d_step", &wg);
        c.grad("bg@d_step", &bg);
        let g_loss = d(&fake)?.log().mean_all().neg();
        c.output("g_loss", &g_loss);
        g_loss.backward()?;
        c.grad("Wg@g_step", &wg);
        c.grad("bg@g_step", &bg);
        c.grad("Wd@g_step", &wd);
        c.grad("bd@g_step", &bd);
        Ok(())
    }

    /// A frozen adapter between encoder and head passes gradients through to the encoder
    /// and keeps none itself.
    pub fn usage_frozen_adapter(c: &mut Case<'_>) -> Result<()> {
        let (x, target) = (c.constant("x"), c.constant("target"));
        let (we, be, wa, wh) = (c.param("We"), c.param("be"), c.param("Wa"), c.param("Wh"));
        wa.freeze()?;
        let h = x.matmul(&we)?.add(&be)?.relu().matmul(&wa)?.tanh();
        let out = h.matmul(&wh)?;
        let loss = out.sub(&target)?.square().mean_all();
        c.output("out", &out);
        c.output("loss", &loss);
        loss.backward()?;
        c.grad("We", &we);
        c.grad("be", &be);
        c.grad("Wh", &wh);
        c.grad("Wa", &wa);
        Ok(())
    }

    /// Gradient accumulation: two batches sum into `.grad`; `zero_grad` starts over.
    pub fn usage_grad_accumulation(c: &mut Case<'_>) -> Result<()> {
        let (w, b) = (c.param("W"), c.param("b"));
        let (x1, y1, x2, y2) = (c.constant("x1"), c.constant("y1"), c.constant("x2"), c.constant("y2"));
        let loss_of =
            |x: &Var, y: &Var| -> Result<Var> { Ok(x.matmul(&w)?.add(&b)?.tanh().sub(y)?.square().mean_all()) };
        let l1 = loss_of(&x1, &y1)?;
        c.output("l1", &l1);
        l1.backward()?;
        c.grad("W@batch1", &w);
        c.grad("b@batch1", &b);
        let l2 = loss_of(&x2, &y2)?;
        c.output("l2", &l2);
        l2.backward()?;
        c.grad("W@batch2", &w);
        c.grad("b@batch2", &b);
        w.zero_grad();
        b.zero_grad();
        loss_of(&x2, &y2)?.backward()?;
        c.grad("W@after_zero", &w);
        c.grad("b@after_zero", &b);
        Ok(())
    }

    /// Higher order through `ember_autograd::grad` with `create_graph`, like
    /// `torch.autograd.grad`; neither writes any `.grad`.
    pub fn usage_second_derivative(c: &mut Case<'_>) -> Result<()> {
        let (x, w) = (c.param("x"), c.param("w"));
        let first = |gs: Vec<Option<Var>>, what: &str| {
            gs.into_iter().next().flatten().unwrap_or_else(|| panic!("{what} is None"))
        };
        let y = x.pow_scalar(3.0)?.add(&x.sin())?;
        let dy = first(grad(&[&y.sum_all()], &[&x], &[], false, true)?, "dy/dx");
        let d2y = first(grad(&[&dy.sum_all()], &[&x], &[], false, false)?, "d2y/dx2");
        let f = x.mul(&w)?.tanh().sum_all();
        let gx = first(grad(&[&f], &[&x], &[], false, true)?, "df/dx");
        let mut gg = grad(&[&gx.square().sum_all()], &[&x, &w], &[], false, false)?.into_iter();
        let gxx = gg.next().flatten().expect("d|df/dx|^2/dx is None");
        let gxw = gg.next().flatten().expect("d|df/dx|^2/dw is None");
        for (k, v) in [("y", &y), ("dy", &dy), ("d2y", &d2y), ("gx", &gx), ("gxx", &gxx), ("gxw", &gxw)] {
            c.output(k, v);
        }
        c.grad("x", &x);
        c.grad("w", &w);
        Ok(())
    }
}
