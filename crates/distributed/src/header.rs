//! What each rank brings to a collective, compared across ranks before any data moves, so
//! that mismatched collectives, shapes or dtypes are errors instead of undefined behaviour.

use ember_tensor::{DType, Error, Result};

/// Dimensions carried in full; longer shapes are compared through their hash and numel.
const SHOWN_DIMS: usize = 8;
/// Words in an encoded header.
pub(crate) const WORDS: usize = 6 + SHOWN_DIMS;

/// One rank's description of the collective it is about to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The collective (an index into [`COLLECTIVES`]).
    pub kind: u64,
    /// 0 none, 1 f32, 2 f64, 3 u8, 4 i64, 5 f16, 6 bf16.
    pub dtype: u64,
    /// The root of a broadcast, the reduce op, the number of ranks of a new group...
    pub extra: u64,
    /// The shape of the tensor (of one chunk for `reduce_scatter`).
    pub dims: Vec<usize>,
}

/// The collectives' names, indexed by [`Header::kind`].
pub(crate) const COLLECTIVES: [&str; 6] =
    ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "new_group"];

/// The index of `name` in [`COLLECTIVES`].
pub(crate) fn kind_of(name: &str) -> u64 {
    COLLECTIVES.iter().position(|c| *c == name).unwrap_or(COLLECTIVES.len()) as u64
}

fn dtype_code(d: Option<DType>) -> u64 {
    match d {
        Some(DType::F32) => 1,
        Some(DType::F64) => 2,
        Some(DType::U8) => 3,
        Some(DType::I64) => 4,
        Some(DType::F16) => 5,
        Some(DType::BF16) => 6,
        None => 0,
    }
}

fn dtype_name(code: u64) -> &'static str {
    match code {
        1 => "f32",
        2 => "f64",
        3 => "u8",
        4 => "i64",
        5 => "f16",
        6 => "bf16",
        _ => "no",
    }
}

/// FNV-1a over the dimensions, so that shapes longer than [`SHOWN_DIMS`] still compare.
fn shape_hash(dims: &[usize]) -> u64 {
    dims.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &d| (h ^ d as u64).wrapping_mul(0x0100_0000_01b3))
}

impl Header {
    pub(crate) fn new(op: &str, dtype: Option<DType>, extra: u64, dims: &[usize]) -> Header {
        Header { kind: kind_of(op), dtype: dtype_code(dtype), extra, dims: dims.to_vec() }
    }

    /// The fixed-size form exchanged between ranks.
    pub(crate) fn encode(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        w[0] = self.kind;
        w[1] = self.dtype;
        w[2] = self.extra;
        w[3] = self.dims.len() as u64;
        w[4] = self.dims.iter().product::<usize>() as u64;
        w[5] = shape_hash(&self.dims);
        for (slot, &d) in w[6..].iter_mut().zip(&self.dims) {
            *slot = d as u64;
        }
        w
    }

    /// How `words` (another rank's header) reads in a message.
    fn describe(words: &[u64; WORDS]) -> String {
        let name = COLLECTIVES.get(words[0] as usize).copied().unwrap_or("an unknown collective");
        let ndims = words[3] as usize;
        let mut dims: Vec<String> = words[6..6 + ndims.min(SHOWN_DIMS)].iter().map(u64::to_string).collect();
        if ndims > SHOWN_DIMS {
            dims.push("...".into());
        }
        let mut s = format!("{name} on a {} tensor of shape [{}]", dtype_name(words[1]), dims.join(", "));
        match name {
            "broadcast" => s += &format!(" from root {}", words[2]),
            "all_reduce" | "reduce_scatter" => s += &format!(" with op code {}", words[2]),
            "new_group" => s = format!("new_group with ranks [{}]", dims.join(", ")),
            "barrier" => s = "barrier".into(),
            _ => {}
        }
        s
    }

    /// Compares the headers of all ranks (`all[r]` is rank `r`'s); an error naming the
    /// first rank that differs from rank 0, on every rank alike.
    pub(crate) fn check_all(op: &'static str, rank: usize, all: &[[u64; WORDS]]) -> Result<()> {
        let Some(first) = all.first() else { return Ok(()) };
        if let Some((r, other)) = all.iter().enumerate().find(|(_, w)| *w != first) {
            return Err(Error::invalid(
                op,
                format!(
                    "rank {rank} of {}: the ranks disagree: rank 0 runs {} but rank {r} runs {} (every rank must \
                     call the same collectives in the same order, on tensors of the same shape and dtype)",
                    all.len(),
                    Header::describe(first),
                    Header::describe(other)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_differing_in_shape_or_dtype_are_named() {
        let a = Header::new("all_reduce", Some(DType::F32), 0, &[2, 3]).encode();
        let b = Header::new("all_reduce", Some(DType::F64), 0, &[3, 2]).encode();
        assert!(Header::check_all("all_reduce", 0, &[a, a]).is_ok());
        let e = Header::check_all("all_reduce", 1, &[a, b]).unwrap_err().to_string();
        assert!(e.contains("rank 1 of 2") && e.contains("f32 tensor of shape [2, 3]"), "{e}");
        assert!(e.contains("f64 tensor of shape [3, 2]"), "{e}");
        // The 16-bit floats are told apart from each other and from f32.
        let h = Header::new("all_reduce", Some(DType::F16), 0, &[2, 3]).encode();
        let bf = Header::new("all_reduce", Some(DType::BF16), 0, &[2, 3]).encode();
        let e = Header::check_all("all_reduce", 0, &[h, bf]).unwrap_err().to_string();
        assert!(e.contains("f16 tensor of shape [2, 3]") && e.contains("bf16 tensor of shape [2, 3]"), "{e}");
        assert!(Header::check_all("all_reduce", 0, &[a, h]).is_err());
        let long: Vec<usize> = (1..=10).collect();
        let mut other = long.clone();
        other[9] = 11;
        let (c, d) =
            (Header::new("broadcast", None, 0, &long).encode(), Header::new("broadcast", None, 0, &other).encode());
        assert!(Header::check_all("broadcast", 0, &[c, d]).is_err());
    }
}
