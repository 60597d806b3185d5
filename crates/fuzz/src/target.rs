//! The readers under test: how each one's input is mutated, written to disk and read.

use crate::mutate::havoc;
use crate::rng::Rng;
use crate::structured::{idx_header_lie, safetensors_header_lie};
use ember_data::{Mnist, PixelMap, Split, idx};
use ember_models::bert::BertConfig;
use ember_models::checkpoint;
use ember_models::gpt2::Gpt2Config;
use ember_models::llama::LlamaConfig;
use ember_models::vit::ViTConfig;
use ember_tensor::{Error, Result};
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// How much a gzip stream can expand (deflate's limit); the IDX reader allows for it when
/// it checks a header against the file before allocating.
pub const MAX_DEFLATE_RATIO: usize = 1032;

/// One file reader of ember.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ember_io::load_safetensors_with_metadata` (and so `load_safetensors`).
    Safetensors,
    /// `ember_optim::OptimizerState::load`.
    Optimizer,
    /// The IDX readers (`read_images`, `read_images_f32`, `read_labels`) on raw files.
    Idx,
    /// The IDX readers on gzip files, mutated before or after compression.
    IdxGz,
    /// `Mnist::load` and `Mnist::load_f32` on a directory of an image and a label file.
    Mnist,
    /// `ember_io::load_pt_value` on PyTorch (`torch.save`) checkpoints.
    TorchPt,
    /// `ember_onnx::load` on ONNX models.
    Onnx,
    /// `ember_pnnx::load` on a PNNX `.param` text and its `.bin` weights.
    Pnnx,
    /// A checkpoint directory's `config.json`, read as each architecture of ember-models
    /// reads it (parsed, then checked).
    ModelConfig,
}

impl Target {
    /// Every target, in the order a full run visits them.
    pub const ALL: [Target; 9] = [
        Target::Safetensors,
        Target::Optimizer,
        Target::Idx,
        Target::IdxGz,
        Target::Mnist,
        Target::TorchPt,
        Target::Onnx,
        Target::Pnnx,
        Target::ModelConfig,
    ];

    /// The name used on the command line and for the corpus folder.
    pub fn name(self) -> &'static str {
        match self {
            Target::Safetensors => "safetensors",
            Target::Optimizer => "optimizer",
            Target::Idx => "idx",
            Target::IdxGz => "idx-gz",
            Target::Mnist => "mnist",
            Target::TorchPt => "torch-pt",
            Target::Onnx => "onnx",
            Target::Pnnx => "pnnx",
            Target::ModelConfig => "model-config",
        }
    }

    /// For targets whose input is two files, the corpus file suffixes of the first (the
    /// `main` file) and the second (`labels`).
    pub fn pair_suffixes(self) -> Option<(&'static str, &'static str)> {
        match self {
            Target::Mnist => Some((".images", ".labels")),
            Target::Pnnx => Some((".param", ".bin")),
            _ => None,
        }
    }

    /// The target called `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// A mutation of `seed`, splicing from `others` at times. For MNIST an input is an
    /// image file and a label file, for PNNX a `.param` and a `.bin` file; the other
    /// targets use only the first.
    pub fn mutate(self, rng: &mut Rng, seed: &Input, others: &[Vec<u8>]) -> Input {
        let mut input = seed.clone();
        match self {
            Target::Safetensors | Target::Optimizer => {
                if rng.one_in(2) {
                    safetensors_header_lie(rng, &mut input.main);
                }
                if rng.one_in(2) {
                    havoc(rng, &mut input.main, others);
                }
            }
            Target::Idx => idx_mutation(rng, &mut input.main, others),
            Target::IdxGz => {
                // Mutating before compressing reaches the parser; after, the decoder.
                if rng.one_in(3) {
                    havoc(rng, &mut input.main, others);
                } else {
                    let mut raw = gunzip(&input.main);
                    idx_mutation(rng, &mut raw, others);
                    input.main = gzip(&raw);
                }
            }
            Target::Mnist => {
                let file = if rng.one_in(2) { &mut input.main } else { &mut input.labels };
                idx_mutation(rng, file, others);
                input.gzip = rng.one_in(3);
            }
            Target::TorchPt | Target::Onnx | Target::ModelConfig => havoc(rng, &mut input.main, others),
            Target::Pnnx => {
                let file = if rng.one_in(2) { &mut input.main } else { &mut input.labels };
                havoc(rng, file, others);
            }
        }
        input
    }

    /// Writes `input` under `dir` and reads it back with the target's readers. `Err` is a
    /// reader's error: a rejected input, or an error that fails the checks.
    pub fn read(self, dir: &Path, input: &Input) -> std::io::Result<Result<()>> {
        match self {
            Target::Safetensors => {
                let path = write(dir, "model.safetensors", &input.main)?;
                Ok(ember_io::load_safetensors_with_metadata(&path).map(drop))
            }
            Target::Optimizer => {
                let path = write(dir, "optimizer.safetensors", &input.main)?;
                Ok(ember_optim::OptimizerState::load(&path).map(drop))
            }
            Target::Idx | Target::IdxGz => {
                let name = if self == Target::IdxGz { "data-idx-ubyte.gz" } else { "data-idx-ubyte" };
                let path = write(dir, name, &input.main)?;
                let images = idx::read_images(&path).map(drop);
                let floats = idx::read_images_f32(&path, &PixelMap::unit()).map(drop);
                let labels = idx::read_labels(&path).map(drop);
                Ok(any_accepted([images, floats, labels]))
            }
            Target::Mnist => {
                let (images, labels) = Split::Train.file_names();
                let strip = |n: String| if input.gzip { n } else { n.trim_end_matches(".gz").to_string() };
                let (main, lab) = if input.gzip {
                    (gzip(&input.main), gzip(&input.labels))
                } else {
                    (input.main.clone(), input.labels.clone())
                };
                write(dir, &strip(images), &main)?;
                write(dir, &strip(labels), &lab)?;
                let bytes = Mnist::load(dir, Split::Train).map(drop);
                let floats = Mnist::load_f32(dir, Split::Train, &PixelMap::unit()).map(drop);
                Ok(first_error([bytes, floats]))
            }
            Target::TorchPt => {
                let path = write(dir, "checkpoint.pt", &input.main)?;
                Ok(ember_io::pt::load_pt_value(&path).map(drop))
            }
            Target::Onnx => {
                let path = write(dir, "model.onnx", &input.main)?;
                Ok(ember_onnx::load(&path).map(drop))
            }
            Target::Pnnx => {
                let param = write(dir, "model.pnnx.param", &input.main)?;
                let bin = write(dir, "model.pnnx.bin", &input.labels)?;
                Ok(ember_pnnx::load(&param, &bin).map(drop))
            }
            Target::ModelConfig => {
                let path = write(dir, checkpoint::CONFIG_FILE, &input.main)?;
                let gpt2 = checkpoint::read_config::<Gpt2Config>(dir).map(drop);
                let llama = checkpoint::read_config::<LlamaConfig>(dir)
                    .and_then(|c| c.validate(&path).and_then(|()| c.rope_scaling(&path)))
                    .map(drop);
                let bert = checkpoint::read_valid_config(dir, BertConfig::validate).map(drop);
                let vit = checkpoint::read_valid_config(dir, ViTConfig::validate).map(drop);
                Ok(any_accepted([gpt2, llama, bert, vit]))
            }
        }
    }

    /// The most heap an input of this target may take while it is read: 64 times its size
    /// plus 1 MiB, and for gzip the `f32` images its compressed size can hold (the reader
    /// allocates what a header declares once the deflate bound allows it).
    pub fn allowance(self, input: &Input) -> usize {
        let size = input.len();
        let base = 64 * size + (1 << 20);
        let gzipped = matches!(self, Target::IdxGz) || (self == Target::Mnist && input.gzip);
        if gzipped {
            let compressed =
                if self == Target::Mnist { gzip(&input.main).len() + gzip(&input.labels).len() } else { size };
            base + 2 * 4 * MAX_DEFLATE_RATIO * compressed
        } else {
            base
        }
    }
}

/// What one run of a target reads: a file, and for MNIST a second (the labels).
#[derive(Clone, Debug, Default)]
pub struct Input {
    /// The file under test (the images for MNIST).
    pub main: Vec<u8>,
    /// The MNIST label file; empty for the other targets.
    pub labels: Vec<u8>,
    /// Whether the MNIST files are written gzip-compressed.
    pub gzip: bool,
}

impl Input {
    /// The bytes of the input before any compression.
    pub fn len(&self) -> usize {
        self.main.len() + self.labels.len()
    }

    /// Whether the input holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The input as one file, for saving a failure: the main file, then the labels.
    pub fn concatenated(&self) -> Vec<u8> {
        [self.main.as_slice(), self.labels.as_slice()].concat()
    }
}

/// The first error of several reads of one file, or `Ok`.
fn first_error<const N: usize>(results: [Result<()>; N]) -> Result<()> {
    results.into_iter().find(|r| r.is_err()).unwrap_or(Ok(()))
}

/// `Ok` when one of several readers of one file (an IDX file is images or labels, so one
/// reader always refuses it) accepted it, unless another's error would fail the checks;
/// the first error otherwise.
fn any_accepted<const N: usize>(results: [Result<()>; N]) -> Result<()> {
    let unnamed =
        results.iter().position(|r| matches!(r, Err(e) if !matches!(e, Error::Format { .. } | Error::Io { .. })));
    match unnamed {
        Some(i) => results.into_iter().nth(i).unwrap_or(Ok(())),
        None if results.iter().any(Result::is_ok) => Ok(()),
        None => first_error(results),
    }
}

/// A byte mutation or a header lie for an IDX file.
fn idx_mutation(rng: &mut Rng, data: &mut Vec<u8>, others: &[Vec<u8>]) {
    if rng.one_in(2) {
        idx_header_lie(rng, data);
    }
    if rng.one_in(2) {
        havoc(rng, data, others);
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, bytes)?;
    Ok(path)
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

/// The decompressed content of `bytes` (up to 16 MiB), or `bytes` itself when it is not
/// valid gzip: the structured mutations then work on whatever there is.
pub fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match MultiGzDecoder::new(bytes).take(16 << 20).read_to_end(&mut out) {
        Ok(_) => out,
        Err(_) => bytes.to_vec(),
    }
}

/// Whether `err`'s message names a file under `dir`, as every reader error must.
pub fn names_file_in(err: &Error, dir: &Path) -> bool {
    err.to_string().contains(&dir.display().to_string())
}
