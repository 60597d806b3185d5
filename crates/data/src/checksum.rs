//! SHA-256 verification against a `SHA256SUMS` file (the format `sha256sum` writes).

use ember_tensor::{Error, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The conventional name of a checksum list in a dataset directory.
pub const SUMS_FILE: &str = "SHA256SUMS";

/// The SHA-256 digests listed in a checksum file, by file name.
///
/// Lines read `<64 hex digits>  <file name>` (or `<digits> *<file name>`, binary mode);
/// blank lines and lines starting with `#` are skipped. Entries match files by their last
/// path component, so `./train-images-idx3-ubyte.gz` matches the file of that name in any
/// directory.
///
/// ```
/// use ember_data::checksum::Checksums;
/// let sums = Checksums::parse(
///     "SHA256SUMS",
///     "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  hello.txt\n",
/// )?;
/// sums.verify("data/hello.txt", b"hello")?;
/// let err = sums.verify("data/hello.txt", b"hullo").unwrap_err().to_string();
/// assert!(err.contains("hello.txt") && err.contains("checksum mismatch"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Checksums {
    path: PathBuf,
    entries: Vec<(String, [u8; 32])>,
}

impl Checksums {
    /// Reads and parses the checksum file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Checksums> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Checksums::parse(path, &text)
    }

    /// Parses the content of a checksum file; `path` names it in error messages.
    pub fn parse(path: impl AsRef<Path>, text: &str) -> Result<Checksums> {
        let path = path.as_ref();
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = parse_line(line).ok_or_else(|| {
                Error::format(path, format!("line {}: expected '<64 hex digits>  <file name>', got {line:?}", i + 1))
            })?;
            entries.push(entry);
        }
        Ok(Checksums { path: path.to_path_buf(), entries })
    }

    /// The checksum file these entries came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The digest listed for `file_name` (a bare name, matched against each entry's last
    /// path component).
    pub fn get(&self, file_name: &str) -> Option<[u8; 32]> {
        self.entries.iter().find(|(name, _)| last_component(name) == file_name).map(|(_, d)| *d)
    }

    /// Checks that `bytes`, the content of `file`, have the digest listed for `file`'s name;
    /// an error naming `file` when they do not or when the list has no entry for it.
    pub fn verify(&self, file: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let file = file.as_ref();
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let expected = self.get(name).ok_or_else(|| {
            Error::format(file, format!("not listed in {}, so its checksum cannot be verified", self.path.display()))
        })?;
        let actual = sha256(bytes);
        if actual != expected {
            return Err(Error::format(
                file,
                format!(
                    "SHA-256 checksum mismatch: {} lists {} but the file hashes to {} (corrupt or incomplete download?)",
                    self.path.display(),
                    to_hex(&expected),
                    to_hex(&actual)
                ),
            ));
        }
        Ok(())
    }
}

/// One `<digest> <name>` entry, or `None` when the line is malformed.
fn parse_line(line: &str) -> Option<(String, [u8; 32])> {
    let (hex, rest) = line.split_at_checked(64)?;
    let digest = from_hex(hex)?;
    // `sha256sum` separates with a space and a mode character: ' ' (text) or '*' (binary).
    let rest = rest.strip_prefix(' ')?;
    let name = rest.strip_prefix([' ', '*']).unwrap_or(rest);
    (!name.is_empty()).then(|| (name.to_string(), digest))
}

fn last_component(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

/// The SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lower-case hexadecimal, two digits per byte.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// 64 hexadecimal digits (either case) as a digest.
fn from_hex(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        let hi = (digits[2 * i] as char).to_digit(16)?;
        let lo = (digits[2 * i + 1] as char).to_digit(16)?;
        *byte = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_and_binary_entries_and_rejects_bad_lines() {
        let h = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        let sums =
            Checksums::parse("S", &format!("# comment\n\n{h}  a.gz\r\n{} *dir/b.gz\n", h.to_uppercase())).unwrap();
        assert_eq!(to_hex(&sums.get("a.gz").unwrap()), h);
        assert_eq!(to_hex(&sums.get("b.gz").unwrap()), h);
        assert!(sums.get("c.gz").is_none());
        for bad in [&h[..63], &format!("{}g  a.gz", &h[..63]), &format!("{h}  "), &format!("{h}x a.gz")] {
            let e = Checksums::parse("S", bad).unwrap_err().to_string();
            assert!(e.starts_with("S: line 1: expected"), "{e}");
        }
        // A multi-byte character where a digit should be must not split a char boundary.
        assert!(Checksums::parse("S", &format!("{}é  a.gz", &h[..62])).is_err());
        assert_eq!(to_hex(&sha256(b"hello")), h);
    }
}
