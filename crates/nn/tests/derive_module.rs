//! `#[derive(Module)]` on a user's model: a `Net` holding a derived `Block` (a `Dropout`
//! and a `Sequential` with a batch norm) and a head. Its parameter names and state-dict keys
//! are PyTorch's dotted ones, `eval()` reaches the dropout two levels down, a state dict
//! round-trips through a file, and `to_device` moves every nested parameter and buffer. A
//! second group checks each field rule of the derive (`Option`, `Vec`, `Var`, `Buffer`,
//! `TrainingFlag`, `skip`, `rename`, `flatten`, tuple and generic structs) and
//! `named_modules`.

use ember_autograd::Var;
use ember_nn::{BatchNorm1d, Buffer, Dropout, Linear, Module, ModuleExt, ReLU, Sequential, TrainingFlag};
use ember_tensor::{DType, Device, Result, Tensor};

/// A derived submodule holding a dropout and a container: PyTorch's
/// `nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())` then `nn.Dropout(0.5)`.
#[derive(Module)]
struct Block {
    body: Sequential,
    dropout: Dropout,
}

impl Block {
    fn new() -> Result<Block> {
        let body = Sequential::new().add(Linear::new(4, 8)?).add(BatchNorm1d::new(8)?).add(ReLU);
        Ok(Block { body, dropout: Dropout::new(0.5)? })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.dropout.forward(&self.body.forward(x)?)
    }
}

/// The model: the block, then a linear head.
#[derive(Module)]
struct Net {
    block: Block,
    head: Linear,
}

impl Net {
    fn new() -> Result<Net> {
        Ok(Net { block: Block::new()?, head: Linear::new(8, 2)? })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.head.forward(&self.block.forward(x)?)
    }
}

fn names<T>(named: Vec<(String, T)>) -> Vec<String> {
    named.into_iter().map(|(n, _)| n).collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).to_device(Device::Cpu).unwrap().to_vec::<f64>().unwrap()
}

#[test]
fn parameter_names_are_pytorchs_dotted_names() -> Result<()> {
    let net = Net::new()?;
    let expected = [
        "block.body.0.weight",
        "block.body.0.bias",
        "block.body.1.weight",
        "block.body.1.bias",
        "head.weight",
        "head.bias",
    ];
    assert_eq!(names(net.named_parameters()), expected);
    assert_eq!(net.parameters().len(), 6);
    assert_eq!(net.num_parameters(), 4 * 8 + 8 + 8 + 8 + 8 * 2 + 2);
    let buffers = ["block.body.1.running_mean", "block.body.1.running_var", "block.body.1.num_batches_tracked"];
    assert_eq!(names(net.named_buffers()), buffers);
    Ok(())
}

#[test]
fn state_dict_keys_are_pytorchs_and_round_trip_through_a_file() -> Result<()> {
    let net = Net::new()?;
    let keys = [
        "block.body.0.weight",
        "block.body.0.bias",
        "block.body.1.weight",
        "block.body.1.bias",
        "block.body.1.running_mean",
        "block.body.1.running_var",
        "block.body.1.num_batches_tracked",
        "head.weight",
        "head.bias",
    ];
    assert_eq!(net.state_dict().keys().collect::<Vec<_>>(), keys);

    // Running statistics that differ from a fresh model's, so that the buffers' trip shows.
    net.forward(&Var::new(Tensor::randn([5, 4])?))?;
    let path = std::env::temp_dir().join(format!("ember-derive-module-{}.safetensors", std::process::id()));
    net.save(&path)?;
    let loaded = Net::new()?;
    let result = loaded.load(&path);
    std::fs::remove_file(&path).ok();
    result?;
    let (a, b) = (net.state_dict(), loaded.state_dict());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (key, t) in a.iter() {
        assert_eq!(values(t), values(b.get(key).unwrap()), "{key}");
    }
    Ok(())
}

#[test]
fn eval_reaches_the_dropout_two_levels_down() -> Result<()> {
    let net = Net::new()?;
    let ones = Var::new(Tensor::ones([1000], DType::F32)?);
    assert!(net.is_training() && net.block.dropout.is_training());
    let dropped = values(&net.block.dropout.forward(&ones)?.value());
    assert!(dropped.iter().all(|&v| v == 0.0 || v == 2.0), "training scales the kept values by 1 / (1 - p)");
    assert!(dropped.contains(&0.0), "training drops");

    net.eval();
    assert!(!net.is_training());
    assert!(!net.block.is_training() && !net.block.body.is_training() && !net.block.dropout.is_training());
    let kept = values(&net.block.dropout.forward(&ones)?.value());
    assert!(kept.iter().all(|&v| v == 1.0), "evaluation is the input scaled by 1.0");
    // The whole model is now deterministic: the head of the batch-normed body.
    let x = Var::new(Tensor::randn([3, 4])?);
    let expected = net.head.forward(&net.block.body.forward(&x)?)?;
    assert_eq!(values(&net.forward(&x)?.value()), values(&expected.value()));

    net.train();
    assert!(net.block.dropout.is_training() && net.block.body.get(1).is_some_and(|bn| bn.is_training()));
    Ok(())
}

#[test]
fn to_device_moves_nested_parameters_and_buffers() -> Result<()> {
    Device::emulate_cuda();
    let gpu = Device::Cuda(0);
    if let Err(e) = gpu.check_available() {
        println!("skipped: {e}");
        return Ok(());
    }
    let net = Net::new()?;
    net.to_device(gpu)?;
    for (name, p) in net.named_parameters() {
        assert_eq!(p.device(), gpu, "{name}");
    }
    for (name, b) in net.named_buffers() {
        assert_eq!(b.device(), gpu, "{name}");
    }
    let y = net.forward(&Var::new(Tensor::randn([3, 4])?.to_device(gpu)?))?;
    assert_eq!((y.device(), y.shape().dims()), (gpu, &[3, 2][..]));
    // The running statistics were updated where they now live.
    let (name, tracked) = &net.named_buffers()[2];
    assert_eq!(
        (name.as_str(), tracked.to_device(Device::Cpu)?.to_scalar::<i64>()?),
        ("block.body.1.num_batches_tracked", 1)
    );
    net.to_device(Device::Cpu)?;
    assert!(net.state_dict().iter().all(|(_, t)| t.device() == Device::Cpu));
    Ok(())
}

/// One field of every kind the derive knows.
#[derive(Module)]
struct Everything {
    scale: Var,
    #[module(rename = "fc")]
    linear: Linear,
    extra: Option<Linear>,
    missing: Option<Linear>,
    heads: Vec<Linear>,
    weights: Vec<Var>,
    stats: Buffer,
    no_stats: Option<Buffer>,
    #[module(skip)]
    width: usize,
    training: TrainingFlag,
}

impl Everything {
    fn new() -> Result<Everything> {
        let param = |n: usize| Tensor::ones([n], DType::F32).map(Var::param);
        Ok(Everything {
            scale: param(2)?,
            linear: Linear::new(2, 2)?,
            extra: Some(Linear::new(2, 2)?),
            missing: None,
            heads: vec![Linear::new(2, 1)?, Linear::new(2, 1)?],
            weights: vec![param(1)?, param(3)?],
            stats: Buffer::new(Tensor::zeros([2], DType::F32)?),
            no_stats: None,
            width: 2,
            training: TrainingFlag::new(),
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        assert_eq!(x.shape()[x.rank() - 1], self.width);
        self.linear.forward(&x.mul(&self.scale)?)
    }
}

#[test]
fn every_field_rule_names_its_parts() -> Result<()> {
    let m = Everything::new()?;
    let expected = [
        "scale",
        "fc.weight",
        "fc.bias",
        "extra.weight",
        "extra.bias",
        "heads.0.weight",
        "heads.0.bias",
        "heads.1.weight",
        "heads.1.bias",
        "weights.0",
        "weights.1",
    ];
    assert_eq!(names(m.named_parameters()), expected);
    assert_eq!(names(m.named_buffers()), ["stats"]);
    let keys: Vec<&str> = expected[..3].iter().copied().chain(["extra.weight"]).collect();
    assert_eq!(m.state_dict().keys().take(4).collect::<Vec<_>>(), keys);
    assert!(m.state_dict().contains_key("stats"));
    assert_eq!(m.forward(&Var::new(Tensor::ones([1, 2], DType::F32)?))?.shape().dims(), &[1, 2]);

    // Its own flag answers for it; the submodules follow it.
    m.heads[1].set_training(false);
    assert!(m.is_training());
    m.eval();
    assert!(!m.is_training() && m.heads.iter().all(|h| !h.is_training()));
    Ok(())
}

/// A newtype whose parts are the layer's own.
#[derive(Module)]
struct Head(#[module(flatten)] Linear);

impl Head {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.0.forward(x)
    }
}

/// A generic wrapper without a flag of its own (the bound on the struct lets the derived
/// `Module::forward` find the inherent one).
#[derive(Module)]
struct Wrapper<M: Module> {
    inner: M,
    #[module(skip)]
    calls: std::sync::atomic::AtomicUsize,
}

impl<M: Module> Wrapper<M> {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.forward(x)
    }
}

#[test]
fn flattened_tuple_and_generic_structs() -> Result<()> {
    let head = Head(Linear::new(3, 2)?);
    assert_eq!(head.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
    head.eval();
    assert!(!head.0.is_training() && !head.is_training());

    let wrapped = Wrapper { inner: Head(Linear::new(3, 2)?), calls: Default::default() };
    assert_eq!(names(wrapped.named_parameters()), ["inner.weight", "inner.bias"]);
    assert_eq!(Module::forward(&wrapped, &Var::new(Tensor::randn([4, 3])?))?.shape().dims(), &[4, 2]);
    assert_eq!(wrapped.calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Without a flag of its own, it reports its submodule's mode.
    assert!(wrapped.is_training());
    wrapped.eval();
    assert!(!wrapped.is_training());

    // A boxed model in a container keeps its names.
    let boxed: Box<dyn Module> = Box::new(wrapped);
    let seq = Sequential::new().add(boxed);
    assert_eq!(names(seq.named_parameters()), ["0.inner.weight", "0.inner.bias"]);
    Ok(())
}

#[test]
fn named_modules_walks_the_tree_depth_first() -> Result<()> {
    let net = Net::new()?;
    let expected = ["", "block", "block.body", "block.body.0", "block.body.1", "block.body.2", "block.dropout", "head"];
    assert_eq!(names(net.named_modules()), expected);
    assert_eq!(net.modules().len(), expected.len());
    let parts = net.children();
    assert_eq!(parts.modules().map(|(n, _)| n).collect::<Vec<_>>(), ["block", "head"]);
    Ok(())
}
