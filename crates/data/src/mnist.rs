//! MNIST and Fashion-MNIST: the four IDX files of a directory as tensors, checksums
//! verified when the directory has a `SHA256SUMS` file.

use crate::checksum::{Checksums, SUMS_FILE};
use crate::dataset::TensorDataset;
use crate::idx;
use crate::pixels::PixelMap;
use ember_tensor::{Error, Result, Tensor};
use std::path::{Path, PathBuf};

/// Which half of the dataset to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// The 60,000 training samples (`train-*` files).
    Train,
    /// The 10,000 test samples (`t10k-*` files).
    Test,
}

impl Split {
    /// The file-name prefix of the split.
    fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }

    /// The names of the image and label files, as distributed (gzip-compressed).
    pub fn file_names(self) -> (String, String) {
        let p = self.prefix();
        (format!("{p}-images-idx3-ubyte.gz"), format!("{p}-labels-idx1-ubyte.gz"))
    }
}

/// Side length of the square images.
pub const IMAGE_SIDE: usize = 28;

/// Number of classes (digits for MNIST, garment kinds for Fashion-MNIST).
pub const CLASSES: usize = 10;

/// The MNIST handwritten digits, 28x28 grey-scale images with labels 0 to 9.
///
/// A directory holds `train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`,
/// `t10k-images-idx3-ubyte.gz` and `t10k-labels-idx1-ubyte.gz` (or the same names without
/// `.gz`, uncompressed), and optionally `SHA256SUMS`.
///
/// ```no_run
/// use ember_data::{DataLoader, Mnist, Split};
/// let (images, labels) = Mnist::load("data/mnist", Split::Train)?;
/// assert_eq!(images.shape(), &[60000, 28, 28]);
/// assert_eq!(labels.shape(), &[60000]);
/// let train = DataLoader::builder(Mnist::dataset("data/mnist", Split::Train)?).batch_size(64).build()?;
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Mnist;

impl Mnist {
    /// The images (`u8`, `[N, 28, 28]`) and labels (`i64`, `[N]`) of `split`, read from the
    /// files in `dir`. When `dir` holds a `SHA256SUMS` file, each file's checksum must match
    /// its entry there.
    pub fn load(dir: impl AsRef<Path>, split: Split) -> Result<(Tensor, Tensor)> {
        load_split(dir.as_ref(), split, |path, bytes| idx::parse_images(path, bytes))
    }

    /// [`Mnist::load`] with the images as `f32` (`[N, 28, 28]`), each pixel converted by
    /// `map` while the file is decompressed: the float images are the only large
    /// allocation, where `to_dtype` and scalar operations on the `u8` tensor would hold a
    /// `u8` copy and two float copies at once.
    ///
    /// ```no_run
    /// use ember_data::{Mnist, PixelMap, Split};
    /// let (images, labels) = Mnist::load_f32("data/mnist", Split::Test, &PixelMap::standardize(0.1307, 0.3081)?)?;
    /// assert_eq!(images.shape(), &[10000, 28, 28]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn load_f32(dir: impl AsRef<Path>, split: Split, map: &PixelMap) -> Result<(Tensor, Tensor)> {
        load_split(dir.as_ref(), split, |path, bytes| idx::parse_images_f32(path, bytes, map))
    }

    /// [`Mnist::load`] as a dataset of `[image, label]` samples.
    pub fn dataset(dir: impl AsRef<Path>, split: Split) -> Result<TensorDataset> {
        let (images, labels) = Mnist::load(dir, split)?;
        TensorDataset::new(vec![images, labels])
    }
}

/// Zalando's Fashion-MNIST: 28x28 grey-scale pictures of clothing in 10 classes
/// ([`FashionMnist::CLASS_NAMES`]), a drop-in replacement for MNIST with the same file
/// format and file names.
#[derive(Clone, Copy, Debug)]
pub struct FashionMnist;

impl FashionMnist {
    /// The name of each label, in label order.
    pub const CLASS_NAMES: [&'static str; CLASSES] =
        ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"];

    /// The images (`u8`, `[N, 28, 28]`) and labels (`i64`, `[N]`) of `split`, read and
    /// verified as by [`Mnist::load`].
    pub fn load(dir: impl AsRef<Path>, split: Split) -> Result<(Tensor, Tensor)> {
        load_split(dir.as_ref(), split, |path, bytes| idx::parse_images(path, bytes))
    }

    /// The images as `f32`, converted by `map` while reading, as by [`Mnist::load_f32`].
    pub fn load_f32(dir: impl AsRef<Path>, split: Split, map: &PixelMap) -> Result<(Tensor, Tensor)> {
        load_split(dir.as_ref(), split, |path, bytes| idx::parse_images_f32(path, bytes, map))
    }

    /// [`FashionMnist::load`] as a dataset of `[image, label]` samples.
    pub fn dataset(dir: impl AsRef<Path>, split: Split) -> Result<TensorDataset> {
        let (images, labels) = FashionMnist::load(dir, split)?;
        TensorDataset::new(vec![images, labels])
    }
}

/// Loads and cross-checks the image and label files of `split`, the images parsed by
/// `parse_images` (from the file's path and content).
fn load_split(
    dir: &Path,
    split: Split,
    parse_images: impl FnOnce(&Path, &[u8]) -> Result<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let sums_path = dir.join(SUMS_FILE);
    let sums = match sums_path.try_exists() {
        Ok(true) => Some(Checksums::read(&sums_path)?),
        Ok(false) => None,
        Err(e) => return Err(Error::io(sums_path, e)),
    };
    let (image_name, label_name) = split.file_names();

    let (image_path, bytes) = read_verified(dir, &image_name, sums.as_ref())?;
    let images = parse_images(&image_path, &bytes)?;
    drop(bytes);
    if images.shape()[1..] != [IMAGE_SIDE, IMAGE_SIDE] {
        return Err(Error::format(
            &image_path,
            format!("expected {IMAGE_SIDE}x{IMAGE_SIDE} images, got {}x{}", images.shape()[1], images.shape()[2]),
        ));
    }

    let (label_path, bytes) = read_verified(dir, &label_name, sums.as_ref())?;
    let labels = idx::parse_labels(&label_path, &bytes)?;
    let (n_images, n_labels) = (images.shape()[0], labels.shape()[0]);
    if n_images != n_labels {
        return Err(Error::format(
            &label_path,
            format!("wrong count: {n_labels} labels for the {n_images} images of {}", image_path.display()),
        ));
    }
    // Labels index the classes of a loss; one out of range would fail far from its cause.
    let values = labels.to_vec::<i64>()?;
    if let Some((i, value)) = values.iter().enumerate().find(|&(_, &l)| !(0..CLASSES as i64).contains(&l)) {
        return Err(Error::format(
            &label_path,
            format!("label {value} of sample {i} is outside the {CLASSES} classes 0..{CLASSES}"),
        ));
    }
    Ok((images, labels))
}

/// The bytes of `name` in `dir` (or of its uncompressed twin without `.gz`), verified
/// against `sums` when given.
///
/// An uncompressed twin that `sums` does not list (the user gunzipped the files next to a
/// `SHA256SUMS` of the `.gz` downloads) cannot be checked against the compressed file's
/// digest: it is read unverified, with a warning through `log`.
fn read_verified(dir: &Path, name: &str, sums: Option<&Checksums>) -> Result<(PathBuf, Vec<u8>)> {
    let path = locate(dir, name)?;
    let bytes = idx::read_file(&path)?;
    if let Some(sums) = sums {
        let found = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if found == name || sums.get(found).is_some() {
            sums.verify(&path, &bytes)?;
        } else {
            log::warn!(
                "{}: not verified ({} lists only the compressed {name})",
                path.display(),
                dir.join(SUMS_FILE).display()
            );
        }
    }
    Ok((path, bytes))
}

/// `dir/name` if it exists, else `dir/name` without `.gz` if that exists; a not-found
/// error naming the compressed file otherwise.
fn locate(dir: &Path, name: &str) -> Result<PathBuf> {
    let gz = dir.join(name);
    if gz.is_file() {
        return Ok(gz);
    }
    if let Some(raw) = name.strip_suffix(".gz").map(|n| dir.join(n))
        && raw.is_file()
    {
        return Ok(raw);
    }
    Err(Error::io(
        &gz,
        std::io::Error::new(std::io::ErrorKind::NotFound, "not found (nor an uncompressed copy without .gz)"),
    ))
}
