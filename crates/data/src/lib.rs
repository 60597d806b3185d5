//! `ember-data`: datasets, data loaders and the MNIST reader of ember.
//!
//! * A [`Dataset`] is an indexable collection of samples, each a list of tensors (one per
//!   field, e.g. `[image, label]`). [`TensorDataset`] holds the fields in memory and builds a
//!   batch with one `index_select` per field.
//! * A [`DataLoader`] cuts a dataset into batches, shuffles it reproducibly (per-loader seed,
//!   a fresh order every epoch) and builds the next batches on a worker thread while the
//!   training step runs, optionally passing each through a transform such as
//!   [`transform::images_to_f32`].
//! * [`Mnist`] and [`FashionMnist`] read the IDX files of those datasets ([`idx`]), raw or
//!   gzip-compressed, verifying them against a `SHA256SUMS` file when there is one
//!   ([`checksum`]). Malformed files give errors that name the file and the problem.
//!   `load_f32` reads the images straight as floats through a [`PixelMap`], with no `u8`
//!   or intermediate copies.
//!
//! ```
//! use ember_data::{DataLoader, Dataset, TensorDataset, transform};
//! use ember_tensor::{DType, Tensor};
//!
//! // Ten 2x2 "images" and their labels.
//! let images = Tensor::arange(0, 40)?.to_dtype(DType::U8).reshape([10, 2, 2])?;
//! let labels = Tensor::arange(0, 10)?;
//! let dataset = TensorDataset::new(vec![images, labels])?;
//!
//! let loader = DataLoader::builder(dataset)
//!     .batch_size(4)
//!     .shuffle(true)
//!     .seed(42)
//!     .drop_last(true)
//!     .transform(transform::images_to_f32(true))
//!     .build()?;
//! assert_eq!(loader.len(), 2); // 10 samples: two full batches, the last two dropped
//!
//! for epoch in 0..2 {
//!     for batch in &loader {
//!         let batch = batch?;
//!         let (x, y) = (&batch[0], &batch[1]);
//!         assert_eq!(x.shape(), &[4, 4]);
//!         assert_eq!(x.dtype(), DType::F32);
//!         assert_eq!(y.shape(), &[4]);
//!         // ... forward, loss, backward, optimizer step
//!     }
//! }
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! With the real data:
//!
//! ```no_run
//! use ember_data::{DataLoader, Mnist, Split, transform};
//! let train = Mnist::dataset("data/mnist", Split::Train)?; // checksums verified
//! let loader = DataLoader::builder(train)
//!     .batch_size(64)
//!     .shuffle(true)
//!     .transform(transform::images_to_f32(true)) // [64, 784] f32 in [0, 1]
//!     .build()?;
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

mod batches;
pub mod checksum;
mod dataset;
pub mod idx;
mod loader;
pub mod mnist;
mod pixels;
mod prefetch;
mod sampler;
mod shuffle;
pub mod transform;

pub use batches::Batches;
pub use dataset::{Dataset, TensorDataset};
pub use loader::{DEFAULT_PREFETCH, DataLoader, DataLoaderBuilder, Transform};
pub use mnist::{FashionMnist, Mnist, Split};
pub use pixels::PixelMap;
pub use sampler::Sampler;
