//! The MNIST quick starts as a library: the models (the MLP, the CNN, LeNet-5, the
//! row-by-row LSTM and the patch Transformer), the data, one training epoch and the
//! evaluation, shared by the `mnist`, `mnist_cnn`, `mnist_lstm` and `mnist_vit` examples, the CI smoke tests and the training
//! benchmarks.
//!
//! ```no_run
//! use ember::mnist;
//! use ember::optim::{Adam, AdamConfig};
//! ember::manual_seed(0);
//! let (train, test) = (mnist::load("data/mnist", true)?, mnist::load("data/mnist", false)?);
//! let model = mnist::mlp()?;
//! let mut opt = Adam::new(ember::nn::Module::parameters(&model), AdamConfig { lr: 1e-3, ..Default::default() })?;
//! let loader = mnist::loader(&train, 64, 0)?;
//! mnist::train_epoch(&model, &mut opt, None, &loader, |_step, _loss| {})?;
//! println!("test accuracy {:.2}%", 100.0 * mnist::evaluate(&model, &test)?.accuracy);
//! # Ok::<(), ember::Error>(())
//! ```

use crate::autograd::{Var, no_grad};
use crate::data::{DataLoader, Mnist, PixelMap, Split, TensorDataset};
use crate::nn::{
    Conv2d, Conv2dOptions, CrossEntropyOptions, Flatten, LSTM, LayerNorm, Linear, MaxPool2d, Module, ReLU, RnnOptions,
    Sequential, TransformerActivation, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions, Unflatten,
    cross_entropy,
};
use crate::optim::{LrScheduler, Optimizer};
use crate::tensor::{Device, Error, Result, Tensor};
use std::path::Path;

/// The widths of the quick-start MLP: 784-256-128-10.
pub const LAYERS: [usize; 4] = [784, 256, 128, 10];

/// The mean and standard deviation of MNIST's training pixels (in `[0, 1]`), used to
/// standardise the inputs (torchvision's `Normalize((0.1307,), (0.3081,))`).
pub const MEAN: f64 = 0.1307;
/// See [`MEAN`].
pub const STD: f64 = 0.3081;

/// A split of MNIST in memory: images flattened to `[N, 784]` `f32` and standardised with
/// [`MEAN`] and [`STD`], and `i64` labels `[N]`.
#[derive(Clone)]
pub struct Data {
    /// `[N, 784]` pixel intensities.
    pub images: Tensor,
    /// `[N]` class indices.
    pub labels: Tensor,
}

impl Data {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.numel()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` samples (all of them if there are fewer).
    pub fn take(&self, n: usize) -> Result<Data> {
        let n = n.min(self.len());
        Ok(Data { images: self.images.narrow(0, 0, n)?, labels: self.labels.narrow(0, 0, n)? })
    }
}

/// The training (`train = true`) or test split from `dir`, checksums verified when
/// `dir/SHA256SUMS` exists, pixels scaled to `[0, 1]` and standardised.
///
/// The standardised floats are written as the file is decompressed ([`Mnist::load_f32`]), so
/// loading holds no copy beside the result: the training images take 179 MiB
/// (60,000 x 784 x 4 bytes), the test images 30 MiB.
pub fn load(dir: impl AsRef<Path>, train: bool) -> Result<Data> {
    let split = if train { Split::Train } else { Split::Test };
    let (images, labels) = Mnist::load_f32(dir.as_ref(), split, &PixelMap::standardize(MEAN, STD)?)?;
    let n = labels.numel();
    Ok(Data { images: images.reshape([n, LAYERS[0]])?, labels })
}

/// The quick-start MLP, with PyTorch's default initialisation from ember's global generator.
pub fn mlp() -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(LAYERS[0], LAYERS[1])?)
        .add(ReLU)
        .add(Linear::new(LAYERS[1], LAYERS[2])?)
        .add(ReLU)
        .add(Linear::new(LAYERS[2], LAYERS[3])?))
}

/// The hidden size of [`lstm_classifier`]'s LSTM.
pub const LSTM_HIDDEN: usize = 128;

/// An LSTM that reads an image row by row (28 steps of 28 pixels) and classifies it from
/// its last hidden state with a linear layer. Its inputs are the flattened `[N, 784]`
/// images of [`Data`], so it trains and evaluates with the same [`train_epoch`] and
/// [`evaluate`] as the MLP; the state-dict names are PyTorch's (`lstm.weight_ih_l0`, ...,
/// `head.weight`, `head.bias`).
#[derive(Module)]
pub struct LstmClassifier {
    lstm: LSTM,
    head: Linear,
}

/// The row-by-row LSTM classifier: `LSTM(28, 128)` and `Linear(128, 10)`, with PyTorch's
/// default initialisation from ember's global generator.
pub fn lstm_classifier() -> Result<LstmClassifier> {
    let lstm = LSTM::with_options(28, LSTM_HIDDEN, RnnOptions::default().batch_first(true))?;
    let head = Linear::new(LSTM_HIDDEN, LAYERS[3])?;
    Ok(LstmClassifier { lstm, head })
}

impl LstmClassifier {
    /// Logits `[N, 10]` for the flattened images `[N, 784]`, read row by row.
    fn forward(&self, x: &Var) -> Result<Var> {
        let n = x.shape().dims().first().copied().unwrap_or(0);
        let rows = x.reshape([n, 28, 28])?;
        let h_n = self.lstm.run(&rows, None)?.h_n;
        self.head.forward(&h_n.select(0, 0)?)
    }
}

/// The width of [`vit_classifier`]'s tokens.
pub const VIT_DIM: usize = 64;

/// A small vision Transformer: each image is cut into 16 patches of 7x7 pixels, each patch
/// embedded linearly, a learned class token put in front and learned position embeddings
/// added; a pre-norm [`TransformerEncoder`] (3 layers, 4 heads, feed-forward 128, GELU, no
/// dropout) with a final norm reads the 17 tokens, and a linear head classifies the class
/// token. Its inputs are the flattened `[N, 784]` images of [`Data`]; its state-dict names
/// are `patch_embed.*`, `class_token`, `pos_embed`, `encoder.layers.{i}.*`,
/// `encoder.norm.*` and `head.*`.
#[derive(Module)]
pub struct VitClassifier {
    patch_embed: Linear,
    class_token: Var,
    pos_embed: Var,
    encoder: TransformerEncoder,
    head: Linear,
}

/// The patch Transformer of `mnist_vit`: PyTorch's default initialisation for the layers,
/// `N(0, 0.02^2)` for the class token and position embeddings (as ViT does), from ember's
/// global generator.
pub fn vit_classifier() -> Result<VitClassifier> {
    let patch_embed = Linear::new(49, VIT_DIM)?;
    let class_token = Var::param(Tensor::normal([1, 1, VIT_DIM], 0.0, 0.02, crate::DType::F32)?);
    let pos_embed = Var::param(Tensor::normal([1, 17, VIT_DIM], 0.0, 0.02, crate::DType::F32)?);
    let options = TransformerLayerOptions {
        dim_feedforward: 2 * VIT_DIM,
        dropout: 0.0,
        activation: TransformerActivation::GELU,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    let layer = TransformerEncoderLayer::with_options(VIT_DIM, 4, options)?;
    let encoder = TransformerEncoder::new(layer, 3, Some(LayerNorm::new(&[VIT_DIM])?))?;
    let head = Linear::new(VIT_DIM, LAYERS[3])?;
    Ok(VitClassifier { patch_embed, class_token, pos_embed, encoder, head })
}

impl VitClassifier {
    /// Logits `[N, 10]` for the flattened images `[N, 784]`, cut into patches.
    fn forward(&self, x: &Var) -> Result<Var> {
        let n = x.shape().dims().first().copied().unwrap_or(0);
        // [N, 784] -> [N, 4 patch rows, 7, 4 patch columns, 7] -> [N, 16 patches, 49 pixels].
        let patches = x.reshape([n, 4, 7, 4, 7])?.permute(&[0, 1, 3, 2, 4])?.reshape([n, 16, 49])?;
        let tokens = self.patch_embed.forward(&patches)?;
        let class = self.class_token.expand([n, 1, VIT_DIM])?;
        let tokens = Var::cat(&[&class, &tokens], 1)?.add(&self.pos_embed)?;
        let encoded = self.encoder.forward(&tokens)?;
        self.head.forward(&encoded.select(1, 0)?)
    }
}

/// The CNN quick start's model, with PyTorch's default initialisation from ember's global
/// generator. It takes the flattened `[N, 784]` images of [`Data`] and unflattens them to
/// `[N, 1, 28, 28]`; then two 5x5 convolutions padded to keep the size (16 and 32
/// channels), each followed by ReLU and 2x2 max pooling, and a 1568-128-10 classifier.
/// Its `state_dict` names are those of the same `nn.Sequential` in PyTorch (`1.weight`,
/// `4.weight`, `8.weight`, `10.weight`, with biases).
pub fn cnn() -> Result<Sequential> {
    let conv = |i, o| Conv2d::with_options(i, o, 5, Conv2dOptions::default().padding(2));
    Ok(Sequential::new()
        .add(Unflatten::new(1, [1, 28, 28]))
        .add(conv(1, 16)?)
        .add(ReLU)
        .add(MaxPool2d::new(2))
        .add(conv(16, 32)?)
        .add(ReLU)
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(32 * 7 * 7, 128)?)
        .add(ReLU)
        .add(Linear::new(128, 10)?))
}

/// LeNet-5 as the benchmarks train it, with PyTorch's default initialisation: the
/// flattened images unflattened to `[N, 1, 28, 28]`, conv 1->6 5x5, ReLU, 2x2 max pool,
/// conv 6->16 5x5, ReLU, 2x2 max pool, then 256-120-84-10 with ReLU between.
pub fn lenet5() -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Unflatten::new(1, [1, 28, 28]))
        .add(Conv2d::new(1, 6, 5)?)
        .add(ReLU)
        .add(MaxPool2d::new(2))
        .add(Conv2d::new(6, 16, 5)?)
        .add(ReLU)
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(16 * 4 * 4, 120)?)
        .add(ReLU)
        .add(Linear::new(120, 84)?)
        .add(ReLU)
        .add(Linear::new(84, 10)?))
}

/// A shuffling loader over `data` in batches of `batch_size` (the last batch may be short).
pub fn loader(data: &Data, batch_size: usize, seed: u64) -> Result<DataLoader<TensorDataset>> {
    let ds = TensorDataset::new(vec![data.images.clone(), data.labels.clone()])?;
    DataLoader::builder(ds).batch_size(batch_size).shuffle(true).seed(seed).build()
}

/// The device of `model`'s parameters (of the first; the CPU for a model without any):
/// where its batches must go.
pub fn device_of(model: &dyn Module) -> Device {
    model.parameters().first().map_or(Device::Cpu, Var::device)
}

/// One optimisation step on a batch (moved to the model's device); returns the batch loss.
pub fn train_step(model: &dyn Module, opt: &mut dyn Optimizer, x: &Tensor, y: &Tensor) -> Result<f64> {
    let device = device_of(model);
    let logits = model.forward(&Var::new(x.to_device(device)?))?;
    let loss = cross_entropy(&logits, &y.to_device(device)?, CrossEntropyOptions::default())?;
    opt.zero_grad();
    loss.backward()?;
    opt.step()?;
    loss.item()
}

/// One epoch over `loader` in training mode; steps `schedule` (if any) after every
/// optimizer step and calls `on_step(step, loss)` after every batch.
pub fn train_epoch(
    model: &dyn Module,
    opt: &mut dyn Optimizer,
    mut schedule: Option<&mut dyn LrScheduler>,
    loader: &DataLoader<TensorDataset>,
    mut on_step: impl FnMut(usize, f64),
) -> Result<()> {
    model.train();
    for (step, batch) in loader.iter().enumerate() {
        let batch = batch?;
        let [x, y] = batch.as_slice() else {
            return Err(Error::invalid(
                "mnist::train_epoch",
                format!("expected batches of (images, labels), got {} fields", batch.len()),
            ));
        };
        let loss = train_step(model, opt, x, y)?;
        if let Some(s) = schedule.as_deref_mut() {
            s.step(opt);
        }
        on_step(step, loss);
    }
    Ok(())
}

/// Accuracy and mean loss on a dataset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// The fraction of correctly classified samples.
    pub accuracy: f64,
    /// The mean cross-entropy loss.
    pub loss: f64,
}

/// Evaluates `model` on `data` (batches moved to the model's device) in eval mode and
/// without recording a graph; the model is left in the mode it was in.
pub fn evaluate(model: &dyn Module, data: &Data) -> Result<Evaluation> {
    let device = device_of(model);
    let was_training = model.is_training();
    model.eval();
    let result = no_grad(|| -> Result<Evaluation> {
        let (mut correct, mut loss_sum) = (0f64, 0f64);
        let n = data.len();
        let batch = 1000;
        for start in (0..n).step_by(batch) {
            let len = batch.min(n - start);
            let x = Var::new(data.images.narrow(0, start, len)?.to_device(device)?);
            let y = data.labels.narrow(0, start, len)?.to_device(device)?;
            let logits = model.forward(&x)?;
            let loss = cross_entropy(&logits, &y, CrossEntropyOptions::default())?;
            loss_sum += loss.item()? * len as f64;
            let predicted = logits.value().argmax(1, false)?;
            correct += predicted.eq(&y)?.sum_all().item()?;
        }
        Ok(Evaluation { accuracy: correct / n.max(1) as f64, loss: loss_sum / n.max(1) as f64 })
    });
    if was_training {
        model.train();
    }
    result
}
