//! The IDX format of MNIST and Fashion-MNIST, raw or gzip-compressed.
//!
//! An IDX file is a big-endian header, then the elements in row-major order:
//!
//! | bytes | content |
//! |---|---|
//! | 0..2 | zero |
//! | 2 | element type (`0x08`: unsigned byte) |
//! | 3 | number of dimensions `k` |
//! | 4..4+4k | the extent of each dimension, `u32` |
//!
//! Image files have magic number `0x00000803` (`[N, rows, cols]`), label files
//! `0x00000801` (`[N]`). The readers check the magic number, the dimensions and that the
//! data holds exactly what the header declares; each error names the file and the problem.
//! Gzip-compressed content (recognised by its signature) is decompressed while reading.

use crate::pixels::PixelMap;
use ember_tensor::storage::Buffer;
use ember_tensor::{Error, Result, Tensor};
use flate2::read::MultiGzDecoder;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// The magic number of an IDX file of unsigned-byte images, `[N, rows, cols]`.
pub const IMAGES_MAGIC: u32 = 0x0000_0803;

/// The magic number of an IDX file of unsigned-byte labels, `[N]`.
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// The first two bytes of every gzip member.
const GZIP_SIGNATURE: [u8; 2] = [0x1f, 0x8b];

/// Deflate cannot expand data more than about 1032 times, which bounds what a compressed
/// file can hold before any of it is decompressed.
const MAX_DEFLATE_RATIO: usize = 1032;

/// Bytes decompressed at a time when converting pixels: small enough to stay in cache,
/// large enough that the decoder's per-call cost does not matter.
const CHUNK: usize = 64 * 1024;

/// Reads an IDX image file (raw or `.gz`) as a `u8` tensor `[N, rows, cols]`.
pub fn read_images(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    parse_images(path, &read_file(path)?)
}

/// Reads an IDX label file (raw or `.gz`) as an `i64` tensor `[N]`.
pub fn read_labels(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    parse_labels(path, &read_file(path)?)
}

/// The bytes of `path`, with an error naming it.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// Parses the content of an IDX image file as stored (raw or gzip); `path` names the file
/// in error messages.
///
/// ```
/// use ember_data::idx::parse_images;
/// let mut file = vec![0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2];
/// file.extend([0, 64, 128, 255]);
/// let images = parse_images("one.idx", &file)?;
/// assert_eq!(images.shape(), &[1, 2, 2]);
/// file.pop();
/// let err = parse_images("one.idx", &file).unwrap_err().to_string();
/// assert!(err.starts_with("one.idx: truncated"), "{err}");
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn parse_images(path: impl AsRef<Path>, bytes: &[u8]) -> Result<Tensor> {
    let path = path.as_ref();
    let mut r = IdxReader::new(path, bytes)?;
    let (dims, len, what) = image_header(&mut r)?;
    let pixels = r.payload(len, &what)?;
    images_tensor(path, pixels, dims)
}

/// Reads an IDX image file (raw or `.gz`) as an `f32` tensor `[N, rows, cols]`, each byte
/// converted by `map` as it is decompressed (see [`parse_images_f32`]).
pub fn read_images_f32(path: impl AsRef<Path>, map: &PixelMap) -> Result<Tensor> {
    let path = path.as_ref();
    parse_images_f32(path, &read_file(path)?, map)
}

/// Parses the content of an IDX image file as [`parse_images`] does, into an `f32` tensor
/// whose elements are `map`'s values of the pixels: the floats are written as the data is
/// decompressed, so the only large allocation is the result (no `u8` copy).
///
/// ```
/// use ember_data::{PixelMap, idx::parse_images_f32};
/// let mut file = vec![0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2];
/// file.extend([0, 51, 102, 255]);
/// let images = parse_images_f32("one.idx", &file, &PixelMap::unit())?;
/// assert_eq!(images.to_vec::<f32>()?, vec![0.0, 0.2, 0.4, 1.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn parse_images_f32(path: impl AsRef<Path>, bytes: &[u8], map: &PixelMap) -> Result<Tensor> {
    let path = path.as_ref();
    let mut r = IdxReader::new(path, bytes)?;
    let (dims, len, what) = image_header(&mut r)?;
    let pixels = r.payload_mapped(len, &what, map)?;
    images_tensor(path, pixels, dims)
}

/// The images tensor of `dims`, with an error naming the file when the dimensions cannot
/// make a tensor: zero images of 2^32-1 x 2^32-1 pixels hold no data, so the data checks
/// pass them, but their strides do not fit.
fn images_tensor<T: ember_tensor::Element>(path: &Path, pixels: Buffer<T>, dims: [usize; 3]) -> Result<Tensor> {
    Tensor::from_buffer(pixels, dims).map_err(|e| Error::format(path, format!("bad dimensions: {e}")))
}

/// Reads and checks an image file's header: the dimensions `[N, rows, cols]`, the number
/// of pixels and a description for messages.
fn image_header(r: &mut IdxReader<'_>) -> Result<([usize; 3], usize, String)> {
    let dims = r.header(IMAGES_MAGIC)?;
    let (n, rows, cols) = (dims[0], dims[1], dims[2]);
    let what = format!("{n} images of {rows}x{cols} pixels");
    if rows == 0 || cols == 0 {
        return Err(r.error(format!("bad dimensions: the header declares {what}")));
    }
    let len = n
        .checked_mul(rows)
        .and_then(|v| v.checked_mul(cols))
        .ok_or_else(|| r.error(format!("bad dimensions: {what} do not fit in memory")))?;
    Ok(([n, rows, cols], len, what))
}

/// Parses the content of an IDX label file as stored (raw or gzip) into an `i64` tensor;
/// `path` names the file in error messages.
pub fn parse_labels(path: impl AsRef<Path>, bytes: &[u8]) -> Result<Tensor> {
    let path = path.as_ref();
    let mut r = IdxReader::new(path, bytes)?;
    let n = r.header(LABELS_MAGIC)?[0];
    let raw = r.payload(n, &format!("{n} labels"))?;
    // Losses take class indices as i64, so convert once here rather than every batch.
    let labels = Buffer::from_fn("parse_labels", n, |i| i64::from(raw[i]))?;
    Tensor::from_buffer(labels, [n])
}

/// A description of an IDX magic number for error messages.
fn describe_magic(magic: u32) -> &'static str {
    match magic {
        IMAGES_MAGIC => "IDX images",
        LABELS_MAGIC => "IDX labels",
        m if m >> 16 == 0 => "an IDX file of another element type or rank",
        _ => "not an IDX file",
    }
}

/// Reads an IDX stream from the content of a file, decompressing it when it is gzip.
struct IdxReader<'a> {
    path: &'a Path,
    inner: Box<dyn Read + 'a>,
    /// An upper bound on the decompressed size, checked before allocating what a header
    /// declares so that a corrupt header cannot request terabytes.
    max_len: usize,
    /// Whether `max_len` is the exact size (raw data) rather than a bound (gzip).
    exact: bool,
    /// Bytes read so far.
    consumed: usize,
}

impl<'a> IdxReader<'a> {
    fn new(path: &'a Path, bytes: &'a [u8]) -> Result<IdxReader<'a>> {
        let gzip = bytes.starts_with(&GZIP_SIGNATURE);
        if !gzip && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gz")) {
            let start: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
            let found = if bytes.is_empty() {
                "it is empty".to_string()
            } else {
                format!("it starts {} instead of the gzip signature 1f 8b", start.join(" "))
            };
            return Err(Error::format(path, format!("not a gzip file: {found}")));
        }
        let (inner, max_len): (Box<dyn Read + 'a>, usize) = if gzip {
            (Box::new(MultiGzDecoder::new(bytes)), bytes.len().saturating_mul(MAX_DEFLATE_RATIO))
        } else {
            (Box::new(bytes), bytes.len())
        };
        Ok(IdxReader { path, inner, max_len, exact: !gzip, consumed: 0 })
    }

    /// Fills `buf` unless the data ends first; returns the number of bytes read. Reading
    /// from memory cannot fail, so an error is the gzip decoder rejecting the data.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err(self.error(format!("truncated gzip data after {} bytes: {e}", self.consumed + got)));
                }
                Err(e) => return Err(self.error(format!("corrupt gzip data: {e}"))),
            }
        }
        self.consumed += got;
        Ok(got)
    }

    fn error(&self, msg: String) -> Error {
        Error::format(self.path, msg)
    }

    /// Checks the magic number and returns the dimensions.
    fn header(&mut self, expected: u32) -> Result<Vec<usize>> {
        let mut word = [0u8; 4];
        let got = self.fill(&mut word)?;
        if got < 4 {
            return Err(self.error(format!("truncated: {got} bytes, too short for an IDX magic number")));
        }
        let magic = u32::from_be_bytes(word);
        if magic != expected {
            return Err(self.error(format!(
                "bad magic number 0x{magic:08x} ({}): expected 0x{expected:08x} ({})",
                describe_magic(magic),
                describe_magic(expected)
            )));
        }
        let rank = (expected & 0xff) as usize;
        let mut dims = Vec::with_capacity(rank);
        for d in 0..rank {
            if self.fill(&mut word)? < 4 {
                return Err(self.error(format!(
                    "truncated: the data ends in the extent of dimension {d} of {rank}, inside the IDX header"
                )));
            }
            // A u32 always fits in usize on the 32- and 64-bit targets ember supports.
            dims.push(u32::from_be_bytes(word) as usize);
        }
        Ok(dims)
    }

    /// The `len` data bytes the header declared (`what`, for messages), and a check that
    /// nothing follows them.
    fn payload(&mut self, len: usize, what: &str) -> Result<Buffer<u8>> {
        self.check_available(len, what)?;
        let mut data = Buffer::<u8>::uninit("idx", len)?;
        let got = self.fill(&mut data)?;
        self.check_complete(len, got, what)?;
        Ok(data)
    }

    /// [`payload`](Self::payload) with each byte converted by `map`, decompressed and
    /// converted a chunk at a time.
    fn payload_mapped(&mut self, len: usize, what: &str, map: &PixelMap) -> Result<Buffer<f32>> {
        self.check_available(len, what)?;
        let mut data = Buffer::<f32>::uninit("idx", len)?;
        let mut chunk = vec![0u8; CHUNK.min(len)];
        let mut got = 0;
        for out in data.chunks_mut(CHUNK) {
            let k = self.fill(&mut chunk[..out.len()])?;
            map.map_into(&chunk[..k], out);
            got += k;
            if k < out.len() {
                break;
            }
        }
        self.check_complete(len, got, what)?;
        Ok(data)
    }

    /// An error when the data cannot hold the `len` bytes the header declared, checked
    /// before allocating them.
    fn check_available(&self, len: usize, what: &str) -> Result<()> {
        let available = self.max_len.saturating_sub(self.consumed);
        if len > available {
            let held = if self.exact {
                format!("only {available} bytes follow")
            } else {
                format!("the compressed data can hold at most {available} bytes")
            };
            return Err(self.error(format!("truncated: the header declares {what} ({len} bytes) but {held}")));
        }
        Ok(())
    }

    /// An error unless exactly the `len` declared bytes were there (`got` of them read).
    fn check_complete(&mut self, len: usize, got: usize, what: &str) -> Result<()> {
        if got < len {
            return Err(
                self.error(format!("truncated: the header declares {what} ({len} bytes) but only {got} bytes follow"))
            );
        }
        let extra = self.trailing()?;
        if extra > 0 {
            return Err(self.error(format!(
                "wrong count: the header declares {what} ({len} bytes) but {} bytes follow ({extra} too many)",
                len + extra
            )));
        }
        Ok(())
    }

    /// The number of bytes left to read.
    fn trailing(&mut self) -> Result<usize> {
        let mut chunk = [0u8; 4096];
        let mut extra = 0;
        loop {
            match self.fill(&mut chunk)? {
                0 => return Ok(extra),
                k => extra += k,
            }
        }
    }
}
