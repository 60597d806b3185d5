//! `Module::freeze`, `unfreeze` and `is_frozen`: they reach every parameter of nested
//! `#[derive(Module)]` children and leave buffers alone; a frozen submodule gets no
//! gradient while the gradient still flows through it to the modules before it; shared
//! parameters are frozen for every holder; a module that cannot be frozen changes nothing.

use ember_autograd::Var;
use ember_nn::{BatchNorm1d, Linear, Module, ReLU, Sequential};
use ember_tensor::{DType, Result, Tensor};
use std::sync::Arc;

/// Two levels of derived modules: a block with a batch norm (buffers) inside a net.
#[derive(Module)]
struct Block {
    body: Sequential,
    extra: Linear,
}

impl Block {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.extra.forward(&self.body.forward(x)?)
    }
}

#[derive(Module)]
struct Net {
    block: Block,
    head: Linear,
}

impl Net {
    fn new() -> Result<Net> {
        let body = Sequential::new().add(Linear::new(4, 8)?).add(BatchNorm1d::new(8)?).add(ReLU);
        Ok(Net { block: Block { body, extra: Linear::new(8, 8)? }, head: Linear::new(8, 2)? })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.head.forward(&self.block.forward(x)?.relu())
    }
}

fn loss(net: &Net) -> Result<Var> {
    let x = Var::new(Tensor::from_vec((0..24).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), [6, 4])?);
    Ok(net.forward(&x)?.square().mean_all())
}

fn requires_grad(m: &dyn Module) -> Vec<(String, bool)> {
    m.named_parameters().into_iter().map(|(n, p)| (n, p.requires_grad())).collect()
}

fn buffers(m: &dyn Module) -> Vec<(String, Vec<f64>, u64)> {
    m.named_buffers()
        .into_iter()
        .map(|(n, b)| (n, b.to_dtype(DType::F64).to_vec::<f64>().unwrap(), b.version()))
        .collect()
}

#[test]
fn freeze_reaches_nested_derived_children_and_leaves_buffers_alone() -> Result<()> {
    let net = Net::new()?;
    let buffers_before = buffers(&net);
    assert!(!buffers_before.is_empty(), "the batch norm has running statistics");
    assert!(!net.is_frozen());

    net.block.freeze()?;
    assert!(net.block.is_frozen() && net.block.body.is_frozen() && net.block.extra.is_frozen());
    assert!(!net.head.is_frozen() && !net.is_frozen(), "only the block is frozen");
    for (name, on) in requires_grad(&net) {
        assert_eq!(on, name.starts_with("head."), "{name}");
    }
    // block.body.1 is the batch norm: its affine parameters are frozen too.
    assert!(requires_grad(&net).iter().any(|(n, on)| n == "block.body.1.weight" && !on));
    assert!(net.block.parameters().iter().all(Var::is_frozen));
    assert_eq!(buffers(&net), buffers_before, "freeze changed a buffer");

    net.freeze()?;
    assert!(net.is_frozen());
    net.unfreeze()?;
    assert!(requires_grad(&net).iter().all(|(_, on)| *on), "unfreeze left a parameter frozen");
    assert!(!net.is_frozen() && !net.block.is_frozen());
    assert!(net.parameters().iter().all(|p| !p.is_frozen()));
    assert_eq!(buffers(&net), buffers_before, "unfreeze changed a buffer");
    Ok(())
}

#[test]
fn a_frozen_submodule_gets_no_gradient_but_passes_it_on() -> Result<()> {
    let net = Net::new()?;
    // Gradients from an earlier backward are dropped by the freeze.
    loss(&net)?.backward()?;
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
    net.block.extra.freeze()?;
    assert!(net.block.extra.parameters().iter().all(|p| p.grad().is_none()), "freeze kept a gradient");

    net.zero_grad();
    loss(&net)?.backward()?;
    for (name, p) in net.named_parameters() {
        let frozen = name.starts_with("block.extra.");
        assert_eq!(p.grad().is_none(), frozen, "{name}: gradient {:?}", p.grad().map(|g| g.shape().to_vec()));
    }
    // The body sits before the frozen layer: its gradient went through it.
    let g = net.block.body.parameters()[0].grad().unwrap();
    assert!(g.abs().max_all()?.to_dtype(DType::F64).to_vec::<f64>()?[0] > 0.0);

    net.block.extra.unfreeze()?;
    net.zero_grad();
    loss(&net)?.backward()?;
    assert!(net.parameters().iter().all(|p| p.grad().is_some()), "unfrozen parameters get gradients again");
    Ok(())
}

/// A layer shared through an `Arc` by two containers, and a weight tied between two
/// fields of a derived module.
#[derive(Module)]
struct Tied {
    encoder: Arc<Linear>,
    decoder_weight: Var,
    other: Linear,
}

impl Tied {
    /// An autoencoder whose decoder uses the encoder's weight transposed.
    fn forward(&self, x: &Var) -> Result<Var> {
        self.other.forward(&self.encoder.forward(x)?.matmul(&self.decoder_weight)?)
    }
}

#[test]
fn shared_parameters_are_frozen_for_every_holder() -> Result<()> {
    let shared = Arc::new(Linear::new(3, 3)?);
    let a = Sequential::new().add(shared.clone()).add(ReLU);
    let b = Sequential::new().add(Linear::new(3, 3)?).add(shared.clone());
    a.freeze()?;
    assert!(a.is_frozen() && shared.is_frozen());
    assert!(!b.is_frozen(), "b's own layer still trains");
    assert!(b.named_parameters().iter().filter(|(n, _)| n.starts_with("1.")).all(|(_, p)| p.is_frozen()));
    b.unfreeze()?;
    assert!(!a.is_frozen() && !shared.is_frozen(), "unfreezing one holder unfreezes the shared layer");

    let encoder = Arc::new(Linear::new(3, 3)?);
    let tied = Tied { decoder_weight: encoder.weight().clone(), encoder, other: Linear::new(3, 3)? };
    // The tied weight is listed under two names, and frozen once without error.
    assert_eq!(tied.named_parameters().len(), tied.parameters().len() + 1);
    tied.freeze()?;
    assert!(tied.is_frozen() && tied.decoder_weight.is_frozen());
    tied.unfreeze()?;
    assert!(tied.named_parameters().iter().all(|(_, p)| p.requires_grad()));
    Ok(())
}

/// A hand-made module that lists a computed `Var` among its parameters.
#[derive(Module)]
struct Computed {
    weight: Var,
    doubled: Var,
}

impl Computed {
    fn forward(&self, x: &Var) -> Result<Var> {
        x.mul(&self.weight)?.mul(&self.doubled)
    }
}

#[test]
fn a_module_that_cannot_be_frozen_is_left_as_it_was() -> Result<()> {
    let weight = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    let m = Computed { doubled: weight.mul_scalar(2.0), weight };
    let err = m.freeze().unwrap_err().to_string();
    assert!(err.contains("freeze") && err.contains("doubled"), "{err}");
    assert!(m.weight.requires_grad() && !m.weight.is_frozen(), "a failed freeze froze a parameter");

    // A module without parameters has nothing that requires grad.
    assert!(ReLU.is_frozen());
    ReLU.freeze()?;

    // Boxed as a trait object, the provided methods work the same.
    let boxed: Box<dyn Module> = Box::new(Linear::new(2, 2)?);
    boxed.freeze()?;
    assert!(boxed.is_frozen());
    boxed.unfreeze()?;
    assert!(!boxed.is_frozen());
    Ok(())
}
