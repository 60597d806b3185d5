//! Target networks: [`hard_update`] copies one module's parameters and buffers into
//! another of the same architecture, [`soft_update`] moves them part of the way (Polyak
//! averaging), as DQN, DDPG, SAC and model-EMA training do with a second copy of a network.
//!
//! Both work on any two [`Module`]s whose [`named_parameters`](Module::named_parameters)
//! and [`named_buffers`](Module::named_buffers) have the same names in the same order with
//! the same shapes; anything else is an error naming the first mismatch, and nothing is
//! written unless everything fits. They write the target's tensors in place (optimizers or
//! other holders of the target's `Var`s see the new values) through tensor operations, which
//! record no graph.
//!
//! **The target's parameters are frozen** ([`Var::freeze`]: `requires_grad` false, no
//! gradient kept) by every update. A target network is a constant of the loss: its outputs
//! make the regression targets, computed under `no_grad` in the usual loop. Without the
//! freeze, a loop that forgets `no_grad` (or uses the target network's output in a loss on
//! purpose, to inspect it) would build a graph through the target and deposit gradients in
//! its parameters, and an optimizer handed the wrong list would then move them. Frozen, the
//! target can still be used in a recorded forward (gradients flow *through* it to
//! whatever produced its input) but never accumulates a gradient of its own. A target that
//! shares a parameter `Var` with the source is therefore an error: freezing it would freeze
//! the online network too.

use ember_autograd::{Var, no_grad};
use ember_tensor::{Error, Result, Tensor};

use crate::Module;

/// Copies every parameter and buffer of `source` into `target`, in place, and freezes the
/// target's parameters: PyTorch's `target.load_state_dict(source.state_dict())` followed
/// by `target.requires_grad_(False)`.
///
/// Buffers (BatchNorm's running statistics, its `num_batches_tracked`) are copied too,
/// whatever their dtype. The two modules must have the same parameter and buffer names in
/// the same order, with the same shapes; values of another dtype are converted, as
/// `copy_` does.
///
/// ```
/// use ember_autograd::no_grad;
/// use ember_nn::{Linear, Module, ReLU, Sequential, hard_update, soft_update};
/// use ember_tensor::Tensor;
///
/// let net = || -> ember_tensor::Result<Sequential> {
///     Ok(Sequential::new().add(Linear::new(4, 8)?).add(ReLU).add(Linear::new(8, 2)?))
/// };
/// let (online, target) = (net()?, net()?);
/// hard_update(&target, &online)?; // the target starts as a copy
/// assert!(target.parameters().iter().all(|p| !p.requires_grad()));
/// for (o, t) in online.parameters().iter().zip(target.parameters()) {
///     assert_eq!(o.value().to_vec::<f32>()?, t.value().to_vec::<f32>()?);
/// }
///
/// // ... some optimizer steps on `online`, then the target trails it:
/// soft_update(&target, &online, 0.005)?;
/// // Targets for the online network's loss come from the target network without a graph.
/// let next = ember_autograd::Var::new(Tensor::randn([16, 4])?);
/// let q_next = no_grad(|| target.forward(&next))?;
/// assert!(!q_next.requires_grad());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn hard_update(target: &dyn Module, source: &dyn Module) -> Result<()> {
    let pairs = matched("hard_update", target, source)?;
    no_grad(|| {
        for (dst, src) in pairs.params.iter().chain(&pairs.buffers) {
            dst.copy_(src)?;
        }
        Ok(())
    })?;
    freeze(&pairs.target_params)
}

/// Moves every parameter of `target` towards `source`'s by Polyak averaging,
/// `target = tau * source + (1 - tau) * target`, in place, copies the buffers, and
/// freezes the target's parameters. `tau` must lie in `[0, 1]`: 1 is a
/// [`hard_update`] of the parameters, 0 leaves them as they are.
///
/// Buffers are copied rather than averaged, as Stable-Baselines3 does with BatchNorm's
/// running statistics: they are not learned by the optimizer but measured on the online
/// network's activations, and the integer `num_batches_tracked` has no average. Names and
/// shapes must match as for [`hard_update`]. The arithmetic runs in the parameters' dtype
/// in two rounded steps, `(1 - tau) * target` then `+ tau * source`.
pub fn soft_update(target: &dyn Module, source: &dyn Module, tau: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&tau) {
        return Err(Error::invalid("soft_update", format!("tau must lie in [0, 1], got {tau}")));
    }
    let pairs = matched("soft_update", target, source)?;
    no_grad(|| {
        for (dst, src) in &pairs.params {
            dst.mul_scalar_(1.0 - tau)?;
            dst.add_scaled_(src, tau)?;
        }
        for (dst, src) in &pairs.buffers {
            dst.copy_(src)?;
        }
        Ok(())
    })?;
    freeze(&pairs.target_params)
}

/// The tensors to write (target first) of two modules checked to match.
struct Pairs {
    params: Vec<(Tensor, Tensor)>,
    buffers: Vec<(Tensor, Tensor)>,
    target_params: Vec<Var>,
}

fn matched(op: &'static str, target: &dyn Module, source: &dyn Module) -> Result<Pairs> {
    let (tp, sp) = (target.named_parameters(), source.named_parameters());
    let source_ids: std::collections::HashSet<usize> = sp.iter().map(|(_, p)| p.id()).collect();
    if let Some((name, _)) = tp.iter().find(|(_, p)| source_ids.contains(&p.id())) {
        return Err(Error::invalid(
            op,
            format!(
                "the target shares parameter {name} with the source; a target network needs its own parameters \
                 (build a second module and copy into it)"
            ),
        ));
    }
    let values = |v: &[(String, Var)]| v.iter().map(|(n, p)| (n.clone(), p.value())).collect::<Vec<_>>();
    let params = pair_up(op, "parameter", values(&tp), values(&sp))?;
    let buffers = pair_up(op, "buffer", target.named_buffers(), source.named_buffers())?;
    Ok(Pairs { params, buffers, target_params: tp.into_iter().map(|(_, p)| p).collect() })
}

/// Pairs the target's tensors with the source's by position, checking names and shapes.
fn pair_up(
    op: &'static str,
    kind: &str,
    target: Vec<(String, Tensor)>,
    source: Vec<(String, Tensor)>,
) -> Result<Vec<(Tensor, Tensor)>> {
    if target.len() != source.len() {
        let names = |v: &[(String, Tensor)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        return Err(Error::invalid(
            op,
            format!(
                "the target has {} {kind}s {:?}, the source {} {:?}",
                target.len(),
                names(&target),
                source.len(),
                names(&source)
            ),
        ));
    }
    let mut out = Vec::with_capacity(target.len());
    for ((tn, t), (sn, s)) in target.into_iter().zip(source) {
        if tn != sn {
            return Err(Error::invalid(
                op,
                format!("{kind} names differ: the target has {tn} where the source has {sn}"),
            ));
        }
        if t.shape() != s.shape() {
            return Err(Error::shape(
                op,
                format!("{kind} {tn}: the target has shape {:?}, the source {:?}", t.shape(), s.shape()),
            ));
        }
        out.push((t, s));
    }
    Ok(out)
}

fn freeze(params: &[Var]) -> Result<()> {
    params.iter().try_for_each(|p| p.freeze().map(|_| ()))
}
