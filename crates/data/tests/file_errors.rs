//! Malformed IDX files, checksum lists and MNIST directories: each gives an error naming the
//! file and the problem, never a panic.

mod common;

use common::{TempDir, gzip, idx_images, idx_labels, sums_line, write_train_split};
use ember_data::checksum::Checksums;
use ember_data::idx::{read_images, read_images_f32, read_labels};
use ember_data::{FashionMnist, Mnist, PixelMap, Split};
use std::path::Path;

/// The error's message, checked to name `file` and to contain `problem`.
fn assert_names(err: ember_tensor::Error, file: &Path, problem: &str) {
    let msg = err.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg:?} does not name {}", file.display());
    assert!(msg.contains(problem), "{msg:?} does not say {problem:?}");
}

#[test]
fn raw_and_gzip_files_load_alike() {
    let dir = TempDir::new("alike");
    let raw = dir.write("images", &idx_images(3, 4, 5));
    let gz = dir.write("images.gz", &gzip(&idx_images(3, 4, 5)));
    let a = read_images(&raw).unwrap();
    let b = read_images(&gz).unwrap();
    assert_eq!(a.shape(), &[3, 4, 5]);
    assert_eq!(a.to_vec::<u8>().unwrap(), b.to_vec::<u8>().unwrap());
    assert_eq!(a.select(0, 2).unwrap().select(0, 1).unwrap().to_vec::<u8>().unwrap(), vec![3, 4, 5, 6, 7]);
    let labels = read_labels(dir.write("labels.gz", &gzip(&idx_labels(&[9, 0, 255])))).unwrap();
    assert_eq!(labels.to_vec::<i64>().unwrap(), vec![9, 0, 255]);
    // An empty IDX file of zero images is valid.
    assert_eq!(read_images(dir.write("none", &idx_images(0, 28, 28))).unwrap().shape(), &[0, 28, 28]);
}

/// Images read as floats hold the map's value of every byte, raw or compressed, also when
/// the data spans several decompression chunks.
#[test]
fn images_read_as_floats_hold_the_mapped_bytes() {
    let dir = TempDir::new("floats");
    let map = PixelMap::from_fn(|b| f32::from(b) * 0.5 - 3.0);
    // 3 x 200 x 250 = 150,000 pixels: more than two 64 KiB chunks, the last one partial.
    let content = idx_images(3, 200, 250);
    let bytes = read_images(dir.write("raw", &content)).unwrap().to_vec::<u8>().unwrap();
    let want: Vec<f32> = bytes.iter().map(|&b| map.get(b)).collect();
    for path in [dir.write("raw", &content), dir.write("images.gz", &gzip(&content))] {
        let images = read_images_f32(&path, &map).unwrap();
        assert_eq!(images.shape(), &[3, 200, 250]);
        assert_eq!(images.to_vec::<f32>().unwrap(), want);
    }
    assert_eq!(read_images_f32(dir.write("none", &idx_images(0, 28, 28)), &map).unwrap().shape(), &[0, 28, 28]);
}

/// The float reader reports short, long and cut data as the byte reader does.
#[test]
fn float_reading_reports_bad_data_alike() {
    let dir = TempDir::new("float_errors");
    let map = PixelMap::unit();
    let mut short = idx_images(100, 28, 28);
    short.pop();
    for path in [dir.write("short", &short), dir.write("short.gz", &gzip(&short))] {
        assert_names(
            read_images_f32(&path, &map).unwrap_err(),
            &path,
            "truncated: the header declares 100 images of 28x28 pixels (78400 bytes) but only 78399 bytes follow",
        );
    }
    let mut long = idx_images(2, 28, 28);
    long.extend([1, 2, 3]);
    let path = dir.write("long.gz", &gzip(&long));
    assert_names(read_images_f32(&path, &map).unwrap_err(), &path, "1568 bytes) but 1571 bytes follow (3 too many)");
    let whole = gzip(&idx_images(100, 28, 28));
    let cut = dir.write("cut.gz", &whole[..whole.len() / 2]);
    assert_names(read_images_f32(&cut, &map).unwrap_err(), &cut, "truncated gzip data");
    let labels = dir.write("labels", &idx_labels(&[1, 2]));
    assert_names(read_images_f32(&labels, &map).unwrap_err(), &labels, "bad magic number 0x00000801");
}

#[test]
fn bad_magic_numbers() {
    let dir = TempDir::new("magic");
    let labels = dir.write("labels", &idx_labels(&[1, 2]));
    assert_names(
        read_images(&labels).unwrap_err(),
        &labels,
        "bad magic number 0x00000801 (IDX labels): expected 0x00000803",
    );
    let images = dir.write("images.gz", &gzip(&idx_images(1, 2, 2)));
    assert_names(
        read_labels(&images).unwrap_err(),
        &images,
        "bad magic number 0x00000803 (IDX images): expected 0x00000801",
    );
    let text = dir.write("readme", b"this is not an IDX file");
    assert_names(read_images(&text).unwrap_err(), &text, "(not an IDX file)");
    let floats = dir.write("floats", &[0, 0, 0x0d, 3, 0, 0, 0, 0]);
    assert_names(read_images(&floats).unwrap_err(), &floats, "another element type or rank");
}

#[test]
fn truncated_files() {
    let dir = TempDir::new("truncated");
    let empty = dir.write("empty", b"");
    assert_names(read_labels(&empty).unwrap_err(), &empty, "truncated: 0 bytes");
    let mut header = idx_images(1, 28, 28);
    header.truncate(10);
    let cut_header = dir.write("header", &header);
    assert_names(
        read_images(&cut_header).unwrap_err(),
        &cut_header,
        "truncated: the data ends in the extent of dimension 1",
    );

    let mut data = idx_images(10, 28, 28);
    data.pop();
    let raw = dir.write("raw", &data);
    assert_names(
        read_images(&raw).unwrap_err(),
        &raw,
        "truncated: the header declares 10 images of 28x28 pixels (7840 bytes) but only 7839 bytes follow",
    );
    // The same short content, compressed: the gzip stream is valid, the IDX data short.
    let gz_short = dir.write("short.gz", &gzip(&data));
    assert_names(read_images(&gz_short).unwrap_err(), &gz_short, "but only 7839 bytes follow");

    // A gzip file cut in the middle of its deflate stream.
    let whole = gzip(&idx_images(100, 28, 28));
    let cut = dir.write("cut.gz", &whole[..whole.len() / 2]);
    assert_names(read_images(&cut).unwrap_err(), &cut, "truncated gzip data");

    // A header that declares far more than the file can hold is refused before allocating.
    let mut huge = vec![0, 0, 8, 3];
    for d in [u32::MAX, 28, 28] {
        huge.extend(d.to_be_bytes());
    }
    let huge_gz = dir.write("huge.gz", &gzip(&huge));
    assert_names(read_images(&huge_gz).unwrap_err(), &huge_gz, "the compressed data can hold at most");
    let huge_raw = dir.write("huge", &huge);
    assert_names(read_images(&huge_raw).unwrap_err(), &huge_raw, "but only 0 bytes follow");
}

#[test]
fn wrong_counts_and_dimensions() {
    let dir = TempDir::new("counts");
    let mut long = idx_labels(&[1, 2, 3]);
    long.extend([4, 5]);
    let trailing = dir.write("labels", &long);
    assert_names(
        read_labels(&trailing).unwrap_err(),
        &trailing,
        "wrong count: the header declares 3 labels (3 bytes) but 5 bytes follow (2 too many)",
    );
    let zero = dir.write("zero", &idx_images(0, 0, 28));
    assert_names(read_images(&zero).unwrap_err(), &zero, "bad dimensions: the header declares 0 images of 0x28 pixels");
}

#[test]
fn corrupt_and_missing_gzip() {
    let dir = TempDir::new("gzip");
    let raw_named_gz = dir.write("images.gz", &idx_images(1, 28, 28));
    assert_names(
        read_images(&raw_named_gz).unwrap_err(),
        &raw_named_gz,
        "not a gzip file: it starts 00 00 08 03 instead of the gzip signature 1f 8b",
    );
    let empty_gz = dir.write("empty.gz", b"");
    assert_names(read_images(&empty_gz).unwrap_err(), &empty_gz, "not a gzip file: it is empty");

    // Damage the middle of a compressed stream: the decoder rejects the data or its CRC.
    let mut gz = gzip(&idx_images(50, 28, 28));
    let mid = gz.len() / 2;
    for b in &mut gz[mid..mid + 16] {
        *b ^= 0x5a;
    }
    let damaged = dir.write("damaged.gz", &gz);
    assert_names(read_images(&damaged).unwrap_err(), &damaged, "gzip data");

    let missing = dir.path().join("missing.gz");
    assert_names(read_images(&missing).unwrap_err(), &missing, "");
}

#[test]
fn checksum_lists() {
    let dir = TempDir::new("sums");
    let bad = dir.write("SHA256SUMS", b"0123  train-images-idx3-ubyte.gz\n");
    assert_names(Checksums::read(&bad).unwrap_err(), &bad, "line 1: expected '<64 hex digits>  <file name>'");
    let sums = Checksums::parse("SUMS", &sums_line("a.gz", b"abc")).unwrap();
    let other = Path::new("dir/b.gz");
    assert_names(sums.verify(other, b"abc").unwrap_err(), other, "not listed in SUMS");
    let a = Path::new("dir/a.gz");
    sums.verify(a, b"abc").unwrap();
    assert_names(sums.verify(a, b"abd").unwrap_err(), a, "SHA-256 checksum mismatch: SUMS lists ba7816bf");
}

#[test]
fn synthetic_mnist_directories_load_and_verify() {
    let dir = TempDir::new("synthetic");
    write_train_split(&dir, 12);
    let (images, labels) = Mnist::load(dir.path(), Split::Train).unwrap();
    assert_eq!(images.shape(), &[12, 28, 28]);
    assert_eq!(labels.to_vec::<i64>().unwrap()[..4], [0, 1, 2, 3]);
    // Same format and names: Fashion-MNIST reads the same directory.
    let ds = FashionMnist::dataset(dir.path(), Split::Train).unwrap();
    assert_eq!(ember_data::Dataset::len(&ds), 12);
    assert_eq!(FashionMnist::CLASS_NAMES[9], "Ankle boot");

    // Uncompressed files without a checksum list load too.
    let raw = TempDir::new("raw");
    raw.write("t10k-images-idx3-ubyte", &idx_images(2, 28, 28));
    raw.write("t10k-labels-idx1-ubyte", &idx_labels(&[3, 4]));
    let (_, labels) = Mnist::load(raw.path(), Split::Test).unwrap();
    assert_eq!(labels.to_vec::<i64>().unwrap(), vec![3, 4]);

    // Gunzipped next to the SHA256SUMS of the .gz downloads: the list cannot speak for the
    // uncompressed files, which load unverified (with a warning) rather than fail.
    let (gz_images, gz_labels) = (idx_images(2, 28, 28), idx_labels(&[5, 6]));
    let sums = sums_line("t10k-images-idx3-ubyte.gz", &gzip(&gz_images))
        + &sums_line("t10k-labels-idx1-ubyte.gz", &gzip(&gz_labels));
    raw.write("SHA256SUMS", sums.as_bytes());
    raw.write("t10k-images-idx3-ubyte", &gz_images);
    raw.write("t10k-labels-idx1-ubyte", &gz_labels);
    let (_, labels) = Mnist::load(raw.path(), Split::Test).unwrap();
    assert_eq!(labels.to_vec::<i64>().unwrap(), vec![5, 6]);
    // An uncompressed file the list does name is verified.
    raw.write("SHA256SUMS", (sums + &sums_line("t10k-labels-idx1-ubyte", &idx_labels(&[0, 0]))).as_bytes());
    let label_path = raw.path().join("t10k-labels-idx1-ubyte");
    assert_names(Mnist::load(raw.path(), Split::Test).unwrap_err(), &label_path, "SHA-256 checksum mismatch");
}

#[test]
fn mnist_directory_errors() {
    let dir = TempDir::new("mnist-errors");
    let (images, _) = write_train_split(&dir, 10);
    let label_path = dir.path().join("train-labels-idx1-ubyte.gz");
    let image_path = dir.path().join("train-images-idx3-ubyte.gz");

    // Checksum mismatch: a label file that differs from its SHA256SUMS entry.
    dir.write("train-labels-idx1-ubyte.gz", &gzip(&idx_labels(&[0; 10])));
    assert_names(Mnist::load(dir.path(), Split::Train).unwrap_err(), &label_path, "SHA-256 checksum mismatch");

    // Without the list, the count mismatch is found: 9 labels for 10 images.
    std::fs::remove_file(dir.path().join("SHA256SUMS")).unwrap();
    dir.write("train-labels-idx1-ubyte.gz", &gzip(&idx_labels(&[0; 9])));
    assert_names(
        Mnist::load(dir.path(), Split::Train).unwrap_err(),
        &label_path,
        &format!("wrong count: 9 labels for the 10 images of {}", image_path.display()),
    );

    // A label outside 0..10.
    dir.write("train-labels-idx1-ubyte.gz", &gzip(&idx_labels(&[0, 1, 2, 10, 4, 5, 6, 7, 8, 9])));
    assert_names(
        Mnist::load(dir.path(), Split::Train).unwrap_err(),
        &label_path,
        "label 10 of sample 3 is outside the 10 classes 0..10",
    );

    // Images that are not 28x28.
    dir.write("train-images-idx3-ubyte.gz", &gzip(&idx_images(10, 28, 27)));
    assert_names(Mnist::load(dir.path(), Split::Train).unwrap_err(), &image_path, "expected 28x28 images, got 28x27");

    // A file missing from SHA256SUMS cannot be verified.
    dir.write("train-images-idx3-ubyte.gz", &images);
    dir.write("SHA256SUMS", sums_line("train-images-idx3-ubyte.gz", &images).as_bytes());
    assert_names(Mnist::load(dir.path(), Split::Train).unwrap_err(), &label_path, "not listed in");

    // The test split is absent altogether.
    let missing = dir.path().join("t10k-images-idx3-ubyte.gz");
    assert_names(Mnist::load(dir.path(), Split::Test).unwrap_err(), &missing, "not found");
}
