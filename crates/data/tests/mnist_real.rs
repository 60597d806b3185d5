//! The real MNIST files of `data/mnist`: counts, checksums and known values.

mod common;

use common::mnist_dir;
use ember_data::checksum::Checksums;
use ember_data::{DataLoader, Mnist, PixelMap, Split, TensorDataset, transform};
use ember_tensor::{DType, Tensor};
use std::sync::OnceLock;

/// The training split, loaded once for all tests of this file.
fn train() -> &'static (Tensor, Tensor) {
    static TRAIN: OnceLock<(Tensor, Tensor)> = OnceLock::new();
    TRAIN.get_or_init(|| Mnist::load(mnist_dir(), Split::Train).unwrap())
}

#[test]
fn the_repository_files_match_their_checksums() {
    let sums = Checksums::read(mnist_dir().join("SHA256SUMS")).unwrap();
    for split in [Split::Train, Split::Test] {
        let (images, labels) = split.file_names();
        for name in [images, labels] {
            let path = mnist_dir().join(&name);
            sums.verify(&path, &std::fs::read(&path).unwrap()).unwrap();
        }
    }
}

#[test]
fn training_split_has_60000_known_samples() {
    let (images, labels) = train();
    assert_eq!(images.shape(), &[60000, 28, 28]);
    assert_eq!(images.dtype(), DType::U8);
    assert_eq!(labels.shape(), &[60000]);
    assert_eq!(labels.dtype(), DType::I64);

    let first: Vec<i64> = labels.narrow(0, 0, 10).unwrap().to_vec().unwrap();
    assert_eq!(first, vec![5, 0, 4, 1, 9, 2, 1, 3, 1, 4]);
    let mut counts = [0usize; 10];
    for l in labels.to_vec::<i64>().unwrap() {
        counts[l as usize] += 1;
    }
    assert_eq!(counts, [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]);

    // The first image (a 5): rows 0-4 are blank, row 5 starts at column 12.
    let five = images.select(0, 0).unwrap();
    let row5: Vec<u8> = five.select(0, 5).unwrap().narrow(0, 12, 6).unwrap().to_vec().unwrap();
    assert_eq!(row5, vec![3, 18, 18, 18, 126, 136]);
    assert!(five.narrow(0, 0, 5).unwrap().to_vec::<u8>().unwrap().iter().all(|&p| p == 0));
    let total: u64 = five.to_vec::<u8>().unwrap().iter().map(|&p| u64::from(p)).sum();
    assert_eq!(total, 27525);
}

#[test]
fn test_split_has_10000_known_samples() {
    let (images, labels) = Mnist::load(mnist_dir(), Split::Test).unwrap();
    assert_eq!(images.shape(), &[10000, 28, 28]);
    assert_eq!(labels.shape(), &[10000]);
    let first: Vec<i64> = labels.narrow(0, 0, 10).unwrap().to_vec().unwrap();
    assert_eq!(first, vec![7, 2, 1, 0, 4, 1, 4, 9, 5, 9]);
    let total: u64 = images.select(0, 0).unwrap().to_vec::<u8>().unwrap().iter().map(|&p| u64::from(p)).sum();
    assert_eq!(total, 18454);
}

#[test]
fn a_shuffled_epoch_of_mnist_batches_visits_every_sample_once() {
    let (images, labels) = train().clone();
    let dataset = TensorDataset::new(vec![images, labels]).unwrap();
    let loader = DataLoader::builder(dataset)
        .batch_size(64)
        .shuffle(true)
        .seed(1)
        .transform(transform::images_to_f32(true))
        .build()
        .unwrap();
    assert_eq!(loader.len(), 938); // 937 full batches and one of 32
    let mut counts = [0usize; 10];
    let mut batches = 0;
    for batch in &loader {
        let batch = batch.unwrap();
        let (x, y) = (&batch[0], &batch[1]);
        assert_eq!(x.dtype(), DType::F32);
        assert_eq!(x.shape()[1], 784);
        assert_eq!(x.shape()[0], y.shape()[0]);
        if batches == 0 {
            let px = x.to_vec::<f32>().unwrap();
            assert!(px.iter().all(|&v| (0.0..=1.0).contains(&v)));
            assert!(px.contains(&1.0));
        }
        for l in y.to_vec::<i64>().unwrap() {
            counts[l as usize] += 1;
        }
        batches += 1;
    }
    assert_eq!(batches, 938);
    assert_eq!(counts, [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]);
}

/// Loading as floats gives bitwise the values of converting the `u8` images with tensor
/// operations, and the same labels.
#[test]
fn test_split_as_floats_matches_the_converted_bytes() {
    let (mean, std) = (0.1307, 0.3081);
    let (bytes, labels) = Mnist::load(mnist_dir(), Split::Test).unwrap();
    let map = PixelMap::standardize(mean, std).unwrap();
    let (floats, float_labels) = Mnist::load_f32(mnist_dir(), Split::Test, &map).unwrap();
    assert_eq!((floats.shape(), floats.dtype()), (bytes.shape(), DType::F32));
    let converted = bytes.to_dtype(DType::F32).div_scalar(255.0).sub_scalar(mean).div_scalar(std);
    let bits = |t: &Tensor| t.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert!(bits(&floats) == bits(&converted));
    assert_eq!(float_labels.to_vec::<i64>().unwrap(), labels.to_vec::<i64>().unwrap());
}
