//! The zip archive of a `torch.save` file: `<name>/data.pkl` (the pickle), one
//! `<name>/data/<key>` record per storage (raw little-endian elements), and small records
//! for the format's version and byte order.

use super::pickle::Pickler;
use super::unpickle::unpickle;
use super::value::PtValue;
use std::io::{Cursor, Read, Write};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

/// Values built per byte of the file, at most (with a floor for tiny files).
const VALUES_PER_BYTE: usize = 64;

/// Decodes the checkpoint `bytes`.
pub(crate) fn read(bytes: &[u8]) -> Result<PtValue, String> {
    if bytes.len() >= 2 && bytes[0] == 0x80 {
        return Err("a legacy (pre-1.6) torch.save file, not the zip format; re-save it with a current PyTorch".into());
    }
    let mut zip = ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a PyTorch checkpoint (zip): {e}"))?;
    let pickle_name = zip
        .file_names()
        .filter_map(|n| n.ok())
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(|n| n.to_string())
        .ok_or("no <name>/data.pkl record: not a torch.save checkpoint")?;
    let prefix = pickle_name.trim_end_matches("data.pkl").to_string();
    if let Some(order) = record(&mut zip, &format!("{prefix}byteorder"), 16, bytes.len()).ok().flatten()
        && order != b"little"
    {
        return Err(format!("byte order `{}`: ember reads little-endian checkpoints", String::from_utf8_lossy(&order)));
    }
    let pickle = record(&mut zip, &pickle_name, bytes.len(), bytes.len())?.ok_or("data.pkl is missing")?;
    let mut storage = |key: &str, needed: usize| -> Result<Vec<u8>, String> {
        let name = format!("{prefix}data/{key}");
        let data = record(&mut zip, &name, needed, bytes.len())?
            .ok_or_else(|| format!("storage record `{name}` is missing"))?;
        if data.len() != needed {
            return Err(format!("storage record `{name}` holds {} bytes, but its tensors need {needed}", data.len()));
        }
        Ok(data)
    };
    let budget = bytes.len().saturating_mul(VALUES_PER_BYTE).max(1 << 20);
    unpickle(&pickle, &mut storage, budget)
}

/// The record `name`'s bytes, `None` if there is none; records declared longer than
/// `limit` bytes (or than the file) and compressed ones are errors, before any allocation.
fn record(
    zip: &mut ZipArchive<Cursor<&[u8]>>,
    name: &str,
    limit: usize,
    file_len: usize,
) -> Result<Option<Vec<u8>>, String> {
    let Some(index) = zip.index_for_name(name) else {
        return Ok(None);
    };
    let mut entry = zip.by_index(index).map_err(|e| format!("record `{name}`: {e}"))?;
    if entry.compression() != CompressionMethod::Stored {
        return Err(format!("record `{name}` is compressed; torch.save writes records uncompressed"));
    }
    let size = entry.size();
    if size > limit.min(file_len) as u64 {
        return Err(format!("record `{name}` declares {size} bytes, more than it can hold ({limit} expected)"));
    }
    let mut out = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut out).map_err(|e| format!("record `{name}`: {e}"))?;
    Ok(Some(out))
}

/// Encodes `value` as a checkpoint whose records are under `archive/`, as `torch.save`
/// names them; dicts become `OrderedDict`s at the top level when `ordered`.
pub(crate) fn write(value: &PtValue, ordered: bool) -> Result<Vec<u8>, String> {
    let mut pickler = Pickler::new();
    pickler.value(value, ordered).map_err(|e| e.to_string())?;
    let (pickle, storages) = pickler.finish();
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    // PyTorch aligns records to 64 bytes so that it can map them; it reads unaligned ones too.
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored).with_alignment(64);
    let mut put = |name: &str, data: &[u8]| -> zip::result::ZipResult<()> {
        zip.start_file(format!("archive/{name}"), options)?;
        zip.write_all(data)?;
        Ok(())
    };
    let written = (|| {
        put("data.pkl", &pickle)?;
        put(".format_version", b"1")?;
        put(".storage_alignment", b"64")?;
        put("byteorder", b"little")?;
        for (key, data) in &storages {
            put(&format!("data/{key}"), data)?;
        }
        put("version", b"3\n")?;
        Ok::<(), zip::result::ZipError>(())
    })();
    let bytes = written.and_then(|()| zip.finish()).map(Cursor::into_inner);
    bytes.map_err(|e| format!("cannot build the zip archive: {e}"))
}
