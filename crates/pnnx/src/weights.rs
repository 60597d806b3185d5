//! The `.bin` file: a zip archive with one uncompressed record per weight, named
//! `<operator>.<weight>`, holding its little-endian `f32` values.

use crate::param::Operator;
use ember_tensor::Tensor;
use std::io::{Cursor, Read};
use zip::{CompressionMethod, ZipArchive};

/// The weights of a `.bin` file.
pub(crate) struct Weights<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
    len: usize,
}

impl<'a> Weights<'a> {
    pub(crate) fn open(bytes: &'a [u8]) -> Result<Weights<'a>, String> {
        let zip = ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a PNNX weight archive (zip): {e}"))?;
        Ok(Weights { zip, len: bytes.len() })
    }

    /// The weight `name` of `op`, of the shape its declaration gives.
    pub(crate) fn get(&mut self, op: &Operator, name: &str) -> Result<Tensor, String> {
        let shape = op.weights.get(name).ok_or_else(|| format!("{} declares no weight `{name}`", op.describe()))?;
        let record = format!("{}.{name}", op.name);
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let bytes = numel.and_then(|n| n.checked_mul(4)).filter(|&b| b <= self.len).ok_or_else(|| {
            format!("{}: weight `{name}` of shape {shape:?} is larger than the weight file", op.describe())
        })?;
        let index =
            self.zip.index_for_name(&record).ok_or_else(|| format!("the weight file has no record `{record}`"))?;
        let mut entry = self.zip.by_index(index).map_err(|e| format!("record `{record}`: {e}"))?;
        if entry.compression() != CompressionMethod::Stored || entry.size() != bytes as u64 {
            return Err(format!(
                "record `{record}` holds {} bytes ({:?}); {} needs {bytes} uncompressed",
                entry.size(),
                entry.compression(),
                op.describe()
            ));
        }
        let mut data = Vec::with_capacity(bytes);
        entry.read_to_end(&mut data).map_err(|e| format!("record `{record}`: {e}"))?;
        let values: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Tensor::from_vec(values, shape.clone()).map_err(|e| format!("record `{record}`: {e}"))
    }
}
