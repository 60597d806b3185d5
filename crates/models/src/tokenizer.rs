//! [`Tokenizer`]: a Hugging Face `tokenizer.json` through the `tokenizers` crate (Hugging
//! Face's own implementation), with ember's errors.

use ember_tensor::{Error, Result};
use std::path::{Path, PathBuf};

/// The tokenizer file of a checkpoint directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A tokenizer read from a `tokenizer.json` (BPE, WordPiece, Unigram...: whatever the file
/// describes, normalisation, pre-tokenisation and special tokens included).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl Tokenizer {
    /// Reads `path` (a `tokenizer.json`); errors name the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| Error::format(path, format!("tokenizer: {e}")))?;
        Ok(Tokenizer { inner, path: path.to_path_buf() })
    }

    /// Reads `dir/tokenizer.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Tokenizer> {
        Self::from_file(dir.as_ref().join(TOKENIZER_FILE))
    }

    /// The ids of `text`; `add_special_tokens` adds what the file's post-processor adds
    /// (BERT's `[CLS]` and `[SEP]`, say).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|e| self.error("encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; `skip_special_tokens` leaves special tokens out.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| self.error("decode", e))
    }

    /// The id of `token`, if the vocabulary has it (`"<|endoftext|>"`, `"[PAD]"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The `tokenizers` crate's tokenizer, for what this wrapper does not offer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::format(&self.path, format!("tokenizer {what}: {e}"))
    }
}
