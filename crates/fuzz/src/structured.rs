//! Mutations that know the file formats: lies in the length and dimension fields, huge
//! shapes, offsets past the end. Blind byte flips rarely produce a well-formed header that
//! lies, and those are the inputs that reach the allocation and slicing code.

use crate::mutate::{INTERESTING_U32, INTERESTING_U64};
use crate::rng::Rng;
use serde_json::Value;

/// Rewrites one field of an IDX header: the magic number, the rank or a dimension, with a
/// boundary value or a near miss of the true value.
pub fn idx_header_lie(rng: &mut Rng, data: &mut Vec<u8>) {
    if data.len() < 4 {
        data.resize(4, 0);
    }
    let rank = usize::from(data[3]).min(4);
    match rng.below(4) {
        0 => data[3] = rng.below(6) as u8,
        1 => data[2] = *rng.pick(&[0x08, 0x09, 0x0b, 0x0c, 0x0d, 0x0e, 0xff]),
        _ => {
            let field = 1 + rng.below(rank.max(1));
            let at = 4 * field;
            if data.len() < at + 4 {
                data.resize(at + 4, 0);
            }
            let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
            let new = match rng.below(3) {
                0 => *rng.pick(&INTERESTING_U32),
                1 => old.wrapping_add(1),
                _ => old.wrapping_sub(1),
            };
            data[at..at + 4].copy_from_slice(&new.to_be_bytes());
        }
    }
}

/// Rewrites the header of a safetensors file: its length field, or one value in its JSON
/// (a shape, an offset, a dtype, a metadata string), re-encoding the JSON and usually
/// fixing the length field so that the lie gets past the first check.
pub fn safetensors_header_lie(rng: &mut Rng, data: &mut Vec<u8>) {
    let Some((header_len, mut header)) = split_header(data) else {
        if data.len() >= 8 {
            data[..8].copy_from_slice(&rng.pick(&INTERESTING_U64).to_le_bytes());
        }
        return;
    };
    if rng.one_in(5) {
        let lie = match rng.below(3) {
            0 => *rng.pick(&INTERESTING_U64),
            1 => (header_len as u64).wrapping_add(1 + rng.below(8) as u64),
            _ => (header_len as u64).wrapping_sub(1 + rng.below(8) as u64),
        };
        data[..8].copy_from_slice(&lie.to_le_bytes());
        return;
    }
    mutate_json(rng, &mut header);
    let Ok(text) = serde_json::to_vec(&header) else { return };
    let rest = data[8 + header_len..].to_vec();
    let length = if rng.one_in(8) { header_len } else { text.len() };
    data.clear();
    data.extend_from_slice(&(length as u64).to_le_bytes());
    data.extend_from_slice(&text);
    data.extend_from_slice(&rest);
}

/// The header length and parsed JSON of a safetensors file, if it has both.
fn split_header(data: &[u8]) -> Option<(usize, Value)> {
    let len = u64::from_le_bytes(data.get(..8)?.try_into().ok()?) as usize;
    let json = data.get(8..8usize.checked_add(len)?)?;
    Some((len, serde_json::from_slice(json).ok()?))
}

/// Replaces one random leaf (or an entry's shape or offsets) of `v` with a hostile value.
fn mutate_json(rng: &mut Rng, v: &mut Value) {
    let Value::Object(entries) = v else { return };
    let keys: Vec<String> = entries.keys().cloned().collect();
    if keys.is_empty() {
        return;
    }
    let key = rng.pick(&keys).clone();
    if rng.one_in(10) {
        // A tensor sharing another's name, or an entry that is not an object.
        let value = entries.remove(&key).unwrap_or(Value::Null);
        let new_key = if rng.one_in(2) { "__metadata__".to_string() } else { format!("{key}{}", rng.below(3)) };
        entries.insert(new_key, if rng.one_in(2) { value } else { Value::from(rng.below(5)) });
        return;
    }
    let Some(Value::Object(entry)) = entries.get_mut(&key) else { return };
    if key == "__metadata__" {
        let names: Vec<String> = entry.keys().cloned().collect();
        if let Some(name) = names.get(rng.below(names.len())) {
            let lie = *rng.pick(&["", "nan", "inf", "-1e400", "1e400", "x", "0.5", "99999999999999999999"]);
            entry.insert(name.clone(), if rng.one_in(6) { Value::from(7) } else { Value::from(lie) });
        }
        return;
    }
    match rng.below(4) {
        0 => {
            let dims: Vec<Value> = (0..rng.below(5)).map(|_| Value::from(huge_or_small(rng))).collect();
            entry.insert("shape".into(), Value::from(dims));
        }
        1 => {
            let start = huge_or_small(rng);
            let end = if rng.one_in(2) { start.wrapping_add(rng.below(64) as u64) } else { huge_or_small(rng) };
            entry.insert("data_offsets".into(), Value::from(vec![start, end]));
        }
        2 => {
            let dtype = *rng.pick(&["F32", "F64", "I64", "U8", "BOOL", "F16", "BF16", "I32", "F8_E4M3", "Q", ""]);
            entry.insert("dtype".into(), Value::from(dtype));
        }
        _ => {
            let field = *rng.pick(&["shape", "data_offsets", "dtype"]);
            let value = match rng.below(4) {
                0 => Value::Null,
                1 => Value::from(-1),
                2 => Value::from(vec![Value::from(1.5)]),
                _ => Value::from("x"),
            };
            entry.insert(field.into(), value);
        }
    }
}

/// A boundary value or a small number, the two kinds that break size arithmetic.
fn huge_or_small(rng: &mut Rng) -> u64 {
    if rng.one_in(2) { *rng.pick(&INTERESTING_U64) } else { rng.below(40) as u64 }
}
