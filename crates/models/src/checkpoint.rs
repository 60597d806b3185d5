//! Checkpoint directories in the Hugging Face layout, and single-file torchvision state
//! dicts: reading `config.json`, the weights (one safetensors file, sharded safetensors with
//! an index, or a `torch.save` file), loading them strictly into a module, and writing a
//! directory back.
//!
//! Every error names the file it is about; loading into a module also names the keys
//! (missing, unexpected, or of the wrong shape), so that a checkpoint of another layout
//! fails loudly instead of loading half its weights.

use ember_io::{LoadOptions, StateDict, load_pt_with, load_safetensors_with, save_safetensors};
use ember_nn::Module;
use ember_tensor::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file holding a model's configuration in a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";
/// The single-file safetensors weights of a checkpoint directory.
pub const SAFETENSORS_FILE: &str = "model.safetensors";
/// The index of sharded safetensors weights: `{"weight_map": {key: shard file}}`.
pub const SAFETENSORS_INDEX_FILE: &str = "model.safetensors.index.json";
/// The `torch.save` weights older checkpoints ship instead of safetensors.
pub const PYTORCH_FILE: &str = "pytorch_model.bin";

/// Reads and parses `dir/config.json` into `T`; errors name the file and, for malformed or
/// mistyped JSON, the line and column.
///
/// ```no_run
/// #[derive(serde::Deserialize)]
/// struct Config { n_layer: usize }
/// let config: Config = ember_models::checkpoint::read_config("gpt2-dir".as_ref())?;
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn read_config<T: DeserializeOwned>(dir: &Path) -> Result<T> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse_config(&text, &path)
}

/// Reads `dir/config.json` into `T` and checks it with `validate`, whose error becomes a
/// format error naming the file (so that "n_embd 50 must be a multiple of n_head 3" says
/// which checkpoint it is about).
pub fn read_valid_config<T: DeserializeOwned>(dir: &Path, validate: impl FnOnce(&T) -> Result<()>) -> Result<T> {
    let config = read_config(dir)?;
    validate(&config).map_err(|e| Error::format(dir.join(CONFIG_FILE), e.to_string()))?;
    Ok(config)
}

/// Parses the text of a `config.json` (read from `path`, which errors name).
pub fn parse_config<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::format(path, format!("config: {e}")))
}

/// Reads the weights of the checkpoint directory `dir`, in order of preference:
/// `model.safetensors`, the shards named by `model.safetensors.index.json`, or
/// `pytorch_model.bin`. `options` converts floating dtypes on load (a bf16 checkpoint into
/// f32, say); the default keeps the file's dtypes.
///
/// Errors: a directory with none of these files (naming what was looked for), a shard that
/// the index names but that is missing (naming the shard and a key it should hold), a key
/// the index places in a shard that does not hold it, and the readers' own errors (which
/// name the file: truncated, malformed).
pub fn load_weights(dir: &Path, options: &LoadOptions) -> Result<StateDict> {
    let single = dir.join(SAFETENSORS_FILE);
    if single.is_file() {
        return load_safetensors_with(&single, options);
    }
    let index = dir.join(SAFETENSORS_INDEX_FILE);
    if index.is_file() {
        return load_sharded(dir, &index, options);
    }
    let pt = dir.join(PYTORCH_FILE);
    if pt.is_file() {
        return load_pt_with(&pt, options);
    }
    if !dir.is_dir() {
        return Err(Error::io(dir, std::io::Error::new(std::io::ErrorKind::NotFound, "no such checkpoint directory")));
    }
    Err(Error::format(
        dir,
        format!("no weights found: expected {SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or {PYTORCH_FILE}"),
    ))
}

/// Reads a single weights file: safetensors by its `.safetensors` extension, otherwise a
/// `torch.save` file (torchvision's `.pth`, `pytorch_model.bin`).
pub fn load_weights_file(path: &Path, options: &LoadOptions) -> Result<StateDict> {
    if path.extension().is_some_and(|e| e == "safetensors") {
        load_safetensors_with(path, options)
    } else {
        load_pt_with(path, options)
    }
}

/// The floating dtype of a checkpoint's weights (that of its first floating tensor), so
/// that a model can be cast to it before loading and keep a bf16 or f16 checkpoint native;
/// `None` when no tensor is floating.
pub fn weights_dtype(state: &StateDict) -> Option<ember_tensor::DType> {
    state.iter().map(|(_, t)| t.dtype()).find(|d| d.is_float())
}

/// The `weight_map` of a sharded checkpoint's index.
#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// Loads every shard the index names, checking that each key sits in the shard the index
/// says.
fn load_sharded(dir: &Path, index: &Path, options: &LoadOptions) -> Result<StateDict> {
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
    let map: ShardIndex = serde_json::from_str(&text).map_err(|e| Error::format(index, format!("shard index: {e}")))?;
    // One pass per shard, in the index's (sorted) order of shard names.
    let mut shards: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (key, shard) in &map.weight_map {
        if shard.contains('/') || shard.contains('\\') || shard == ".." {
            return Err(Error::format(
                index,
                format!("shard {shard:?} of key {key} is not a file name in {}", dir.display()),
            ));
        }
        shards.entry(shard.as_str()).or_default().push(key.as_str());
    }
    let mut out = StateDict::new();
    for (shard, keys) in shards {
        let path = dir.join(shard);
        if !path.is_file() {
            return Err(Error::format(
                index,
                format!("shard {shard} (holding {} and {} more keys) is missing", keys[0], keys.len() - 1),
            ));
        }
        let mut part = load_safetensors_with(&path, options)?;
        for key in keys {
            let Some(t) = part.remove(key) else {
                return Err(Error::format(
                    &path,
                    format!("the index places {key} in this shard, which does not hold it"),
                ));
            };
            out.insert(key, t);
        }
    }
    Ok(out)
}

/// Loads `state` (already in the module's own key names) into `module`, strictly: a
/// missing key, an unexpected key or a shape that differs is an error naming every such
/// key and `source` (the checkpoint's file or directory), and nothing is copied unless
/// everything fits.
pub fn load_strict(module: &dyn Module, state: &StateDict, source: &Path) -> Result<()> {
    module.load_state_dict(state).map_err(|e| Error::format(source, e.to_string()))
}

/// Writes a checkpoint directory in the Hugging Face layout: `config.json` from `config`
/// and `model.safetensors` from `state` (already in the checkpoint's key names), creating
/// `dir` if needed. Both files are written atomically (a temporary file beside, renamed).
pub fn save_pretrained<C: Serialize>(dir: &Path, config: &C, state: &StateDict) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(CONFIG_FILE);
    let text = serde_json::to_string_pretty(config).map_err(|e| Error::format(&path, format!("config: {e}")))?;
    write_atomically(&path, text.as_bytes())?;
    save_safetensors(dir.join(SAFETENSORS_FILE), state)
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp: PathBuf = path.to_path_buf();
    tmp.set_extension("json.tmp");
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_tensor::Tensor;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ember-models-checkpoint-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn two_tensors() -> StateDict {
        let mut s = StateDict::new();
        s.insert("a.weight", Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap());
        s.insert("b.weight", Tensor::from_vec(vec![3.0f32], [1]).unwrap());
        s
    }

    #[test]
    fn sharded_weights_load_and_a_missing_shard_is_named() {
        let dir = scratch("shards");
        let mut s1 = StateDict::new();
        s1.insert("a.weight", two_tensors().get("a.weight").unwrap().clone());
        let mut s2 = StateDict::new();
        s2.insert("b.weight", two_tensors().get("b.weight").unwrap().clone());
        save_safetensors(dir.join("model-00001-of-00002.safetensors"), &s1).unwrap();
        save_safetensors(dir.join("model-00002-of-00002.safetensors"), &s2).unwrap();
        std::fs::write(
            dir.join(SAFETENSORS_INDEX_FILE),
            r#"{"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                "b.weight": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        let loaded = load_weights(&dir, &LoadOptions::default()).unwrap();
        assert_eq!(loaded.keys().collect::<Vec<_>>(), vec!["a.weight", "b.weight"]);
        assert_eq!(loaded.get("b.weight").unwrap().to_vec::<f32>().unwrap(), vec![3.0]);

        std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
        let err = load_weights(&dir, &LoadOptions::default()).unwrap_err().to_string();
        assert!(err.contains("model-00002-of-00002.safetensors") && err.contains("b.weight"), "{err}");
        assert!(err.contains(SAFETENSORS_INDEX_FILE), "{err}");
    }

    #[test]
    fn a_key_the_index_misplaces_is_named_with_its_shard() {
        let dir = scratch("misplaced");
        save_safetensors(dir.join("s1.safetensors"), &two_tensors()).unwrap();
        std::fs::write(dir.join(SAFETENSORS_INDEX_FILE), r#"{"weight_map": {"c.weight": "s1.safetensors"}}"#).unwrap();
        let err = load_weights(&dir, &LoadOptions::default()).unwrap_err().to_string();
        assert!(err.contains("c.weight") && err.contains("s1.safetensors"), "{err}");
    }

    #[test]
    fn an_empty_directory_says_what_it_looked_for() {
        let dir = scratch("empty");
        let err = load_weights(&dir, &LoadOptions::default()).unwrap_err().to_string();
        assert!(err.contains(SAFETENSORS_FILE) && err.contains(PYTORCH_FILE), "{err}");
    }

    #[test]
    fn a_truncated_weights_file_names_the_file() {
        let dir = scratch("truncated");
        save_safetensors(dir.join(SAFETENSORS_FILE), &two_tensors()).unwrap();
        let bytes = std::fs::read(dir.join(SAFETENSORS_FILE)).unwrap();
        std::fs::write(dir.join(SAFETENSORS_FILE), &bytes[..bytes.len() - 3]).unwrap();
        let err = load_weights(&dir, &LoadOptions::default()).unwrap_err().to_string();
        assert!(err.contains(SAFETENSORS_FILE), "{err}");
    }

    #[test]
    fn a_malformed_config_names_the_file_and_line() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Config {
            n_layer: usize,
        }
        let dir = scratch("config");
        std::fs::write(dir.join(CONFIG_FILE), "{\n  \"n_layer\": \"two\"\n}").unwrap();
        let err = read_config::<Config>(&dir).unwrap_err().to_string();
        assert!(err.contains(CONFIG_FILE) && err.contains("line 2"), "{err}");
        let err = read_config::<Config>(&dir.join("absent")).unwrap_err().to_string();
        assert!(err.contains("absent"), "{err}");
    }

    #[test]
    fn save_pretrained_round_trips() {
        let dir = scratch("save");
        save_pretrained(&dir.join("out"), &serde_json::json!({"n_layer": 2}), &two_tensors()).unwrap();
        let back = load_weights(&dir.join("out"), &LoadOptions::default()).unwrap();
        assert_eq!(back.len(), 2);
        let config: serde_json::Value = read_config(&dir.join("out")).unwrap();
        assert_eq!(config["n_layer"], 2);
    }
}
