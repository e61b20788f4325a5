//! Readers of a tokenizer directory's files: `tokenizer.json` and `tokenizer_config.json`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};

/// Token strings of a tokenizer directory (`tokenizer.json` and/or `tokenizer_config.json`).
#[derive(Debug, Default, Clone)]
pub struct Vocabulary {
    pub ids: HashMap<String, u32>,
    pub size: u32,
    /// The directory (or file) the vocabulary was read from, for error messages.
    pub path: Option<std::path::PathBuf>,
}

impl Vocabulary {
    /// Reads `tokenizer.json` (added tokens and the model vocabulary) and `tokenizer_config.json`
    /// (`added_tokens_decoder`) from `dir`; at least one must exist.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        if !dir.exists() {
            return Err(Error::NotFound {
                path: dir.to_path_buf(),
            });
        }
        let dir_err = |m: String| Error::Tokenizer {
            path: dir.to_path_buf(),
            message: m,
        };
        let (tok_json, cfg_json) = if dir.is_file() {
            (
                dir.to_path_buf(),
                dir.with_file_name("tokenizer_config.json"),
            )
        } else {
            (
                dir.join("tokenizer.json"),
                dir.join("tokenizer_config.json"),
            )
        };
        let mut vocab = Vocabulary {
            path: Some(dir.to_path_buf()),
            ..Vocabulary::default()
        };
        let mut found = false;
        if tok_json.is_file() {
            found = true;
            let text = std::fs::read_to_string(&tok_json).map_err(|e| Error::io(&tok_json, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
                    path: tok_json.clone(),
                    message: format!("not valid JSON: {e}"),
                })?;
            if let Some(map) = v.pointer("/model/vocab").and_then(|m| m.as_object()) {
                for (k, id) in map {
                    if let Some(id) = id.as_u64() {
                        vocab.ids.insert(k.clone(), id as u32);
                    }
                }
            }
            if let Some(added) = v.get("added_tokens").and_then(|a| a.as_array()) {
                for t in added {
                    if let (Some(c), Some(id)) = (
                        t.get("content").and_then(|c| c.as_str()),
                        t.get("id").and_then(|i| i.as_u64()),
                    ) {
                        vocab.ids.insert(c.to_string(), id as u32);
                    }
                }
            }
        }
        if cfg_json.is_file() {
            let text = std::fs::read_to_string(&cfg_json).map_err(|e| Error::io(&cfg_json, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
                    path: cfg_json.clone(),
                    message: format!("not valid JSON: {e}"),
                })?;
            if let Some(dec) = v.get("added_tokens_decoder").and_then(|a| a.as_object()) {
                found = true;
                for (id, t) in dec {
                    if let (Ok(id), Some(c)) =
                        (id.parse::<u32>(), t.get("content").and_then(|c| c.as_str()))
                    {
                        vocab.ids.insert(c.to_string(), id);
                    }
                }
            }
        }
        if !found {
            return Err(dir_err(
                "no tokenizer.json or tokenizer_config.json with added tokens".into(),
            ));
        }
        vocab.size = vocab.ids.values().copied().max().map_or(0, |m| m + 1);
        Ok(vocab)
    }
}
