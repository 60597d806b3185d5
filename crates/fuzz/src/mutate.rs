//! Format-blind mutations of a byte string: the ones that find most reader bugs (flipped
//! bits, cut files, spliced files, boundary values written over whatever was there).

use crate::rng::Rng;

/// Byte values at the edges of signed and unsigned ranges.
const INTERESTING_BYTES: [u8; 6] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff];

/// 32-bit values that break length and dimension arithmetic.
pub const INTERESTING_U32: [u32; 10] =
    [0, 1, 2, 0x7f, 0xff, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, 0xffff_ffff];

/// 64-bit values that break length and offset arithmetic.
pub const INTERESTING_U64: [u64; 9] =
    [0, 1, 7, 8, 0xffff_ffff, 0x1_0000_0000, 0x7fff_ffff_ffff_ffff, 0x8000_0000_0000_0000, u64::MAX];

/// Applies one to three random mutations to `data`, drawing on `others` for splices.
pub fn havoc(rng: &mut Rng, data: &mut Vec<u8>, others: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(3) {
        mutate_once(rng, data, others);
    }
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&INTERESTING_BYTES);
        }
        2 => data.truncate(rng.below(len + 1)),
        3 if !others.is_empty() => {
            let other = rng.pick(others);
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        4 if len >= 4 => {
            let i = rng.below(len - 3);
            let v = *rng.pick(&INTERESTING_U32);
            let bytes = if rng.one_in(2) { v.to_be_bytes() } else { v.to_le_bytes() };
            data[i..i + 4].copy_from_slice(&bytes);
        }
        5 if len >= 8 => {
            let i = rng.below(len - 7);
            data[i..i + 8].copy_from_slice(&rng.pick(&INTERESTING_U64).to_le_bytes());
        }
        6 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
        7 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(64)).min(len);
            data.drain(start..end);
        }
        8 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(256)).min(len);
            let chunk = data[start..end].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, chunk);
        }
        _ => data.push(rng.next_u64() as u8),
    }
}
