//! Readers of a tokenizer directory's files: `tokenizer.json`, `tokenizer_config.json`, and a tiktoken-format
//! vocabulary (`tiktoken.model`, `*.tiktoken`: lines `base64(bytes) rank`) when there is no `tokenizer.json`.
//! Besides the token strings they give the bytes of every ordinary token (`TokenBytes`), which the
//! `spelled_special` automaton streams.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;

use crate::error::{Error, Result};

/// Token strings of a tokenizer directory.
#[derive(Debug, Default, Clone)]
pub struct Vocabulary {
    pub ids: HashMap<String, u32>,
    pub size: u32,
    /// The directory (or file) the vocabulary was read from, for error messages.
    pub path: Option<PathBuf>,
    /// The bytes of every ordinary token, when the directory has a vocabulary to read them from.
    pub bytes: Option<Arc<TokenBytes>>,
}

/// The bytes each id stands for in running text. Added (special or not) tokens and ids the vocabulary does
/// not define are not text: they have no bytes here and break a byte stream.
#[derive(Debug, Clone, Default)]
pub struct TokenBytes {
    /// `offsets[id]..offsets[id + 1]` in `data`; ids at or past `offsets.len() - 1` are not text.
    offsets: Vec<u32>,
    data: Vec<u8>,
    /// One flag per id: true when the id is text.
    text: Vec<bool>,
}

impl TokenBytes {
    /// A table from `(id, bytes)` of the ordinary tokens; every other id below `size` is not text.
    pub fn new(size: u32, tokens: impl IntoIterator<Item = (u32, Vec<u8>)>) -> Self {
        let mut per_id: Vec<Option<Vec<u8>>> = vec![None; size as usize];
        for (id, b) in tokens {
            if let Some(slot) = per_id.get_mut(id as usize) {
                *slot = Some(b);
            }
        }
        let mut t = TokenBytes {
            offsets: Vec::with_capacity(per_id.len() + 1),
            data: Vec::new(),
            text: Vec::with_capacity(per_id.len()),
        };
        t.offsets.push(0);
        for b in per_id {
            t.text.push(b.is_some());
            t.data.extend(b.unwrap_or_default());
            t.offsets.push(t.data.len() as u32);
        }
        t
    }

    /// Marks `id` as not text (an added token that also sits in the model vocabulary).
    fn set_not_text(&mut self, id: u32) {
        if let Some(f) = self.text.get_mut(id as usize) {
            *f = false;
        }
    }

    /// The bytes of `id` when it is ordinary text.
    #[inline(always)]
    pub fn get(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if *self.text.get(i)? {
            Some(&self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize])
        } else {
            None
        }
    }

    /// Number of ids the table covers.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// GPT-2's byte-level alphabet: byte `b` is written as the char `BYTE_CHARS[b]` in a byte-level BPE
/// vocabulary (printable Latin-1 bytes as themselves, the rest shifted to U+0100 onwards: `\n` is `Ċ`).
fn byte_level_alphabet() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        out[b as usize] = if printable {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("valid char")
        };
    }
    out
}

/// Reverse of `byte_level_alphabet`, for chars below U+0200 (the whole alphabet).
fn byte_level_decoder() -> Vec<Option<u8>> {
    let mut rev = vec![None; 0x200];
    for (b, c) in byte_level_alphabet().iter().enumerate() {
        rev[*c as usize] = Some(b as u8);
    }
    rev
}

/// The bytes a vocabulary string stands for. Byte-level BPE maps the GPT-2 alphabet back to bytes;
/// SentencePiece-style vocabularies write a space as `▁` and raw bytes as `<0xNN>`.
fn string_bytes(s: &str, byte_level: bool, rev: &[Option<u8>]) -> Vec<u8> {
    if byte_level {
        let mut out = Vec::with_capacity(s.len());
        for c in s.chars() {
            match rev.get(c as usize).copied().flatten() {
                Some(b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
    } else if let Some(b) = s
        .strip_prefix("<0x")
        .and_then(|h| h.strip_suffix('>'))
        .filter(|h| h.len() == 2)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
    {
        vec![b]
    } else {
        s.replace('\u{2581}', " ").into_bytes()
    }
}

/// True when any `"type": "ByteLevel"` appears in the pre-tokenizer or decoder (possibly in a sequence).
fn uses_byte_level(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            m.get("type").and_then(|t| t.as_str()) == Some("ByteLevel")
                || m.values().any(uses_byte_level)
        }
        serde_json::Value::Array(a) => a.iter().any(uses_byte_level),
        _ => false,
    }
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = crate::files::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
        path: path.to_path_buf(),
        message: format!("not valid JSON: {e}"),
    })
}

/// A tiktoken-format vocabulary in `dir`: `tiktoken.model` (Kimi) or a `*.tiktoken` file (Qwen-1).
fn tiktoken_file(dir: &Path) -> Option<PathBuf> {
    let named = dir.join("tiktoken.model");
    if named.is_file() {
        return Some(named);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "tiktoken"))
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The files of a tokenizer directory that are not part of a corpus beside them.
pub const TOKENIZER_FILE_NAMES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "tiktoken.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
];

/// Whether a file called `name` belongs to a tokenizer (one of [`TOKENIZER_FILE_NAMES`], a `*.tiktoken`
/// vocabulary or a `tokenization_*.py` class).
pub fn is_tokenizer_file(name: &str) -> bool {
    TOKENIZER_FILE_NAMES.contains(&name)
        || name.ends_with(".tiktoken")
        || (name.starts_with("tokenization_") && name.ends_with(".py"))
}

/// Whether `dir` holds a tokenizer: a `tokenizer.json`, a `tokenizer_config.json` or a tiktoken vocabulary
/// (discovery passes over such a folder; a tokenizer argument names one).
pub fn is_tokenizer_dir(dir: &Path) -> bool {
    dir.join("tokenizer_config.json").is_file()
        || dir.join("tokenizer.json").is_file()
        || tiktoken_file(dir).is_some()
}

/// Whether the core reads the vocabulary of `path` itself: a `tokenizer.json` file, or a directory with one or
/// with a tiktoken vocabulary. A directory with only a tokenizer class shipped as code needs transformers to
/// export its vocabulary first.
pub fn reads_vocabulary(path: &Path) -> bool {
    !path.is_dir() || path.join("tokenizer.json").is_file() || tiktoken_file(path).is_some()
}

/// Where each file of a tokenizer directory is (the one place that knows the layout). `tokenizer.json` is
/// used when present, a tiktoken vocabulary only without one.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "prompt"), allow(dead_code))]
pub(crate) struct TokenizerFiles {
    /// The directory, or the `tokenizer.json`-like file, that was named.
    pub named: PathBuf,
    pub tokenizer_json: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub tiktoken: Option<PathBuf>,
    /// `chat_template.jinja` beside the config (it takes precedence over the config's `chat_template`).
    pub chat_template: Option<PathBuf>,
    /// `tokenization_*.py`: a tokenizer class shipped as code (the tiktoken packaging), sorted by name.
    pub code: Vec<PathBuf>,
}

impl TokenizerFiles {
    /// The files of `path`: a directory, or a `tokenizer.json` file (its config and template beside it).
    pub fn locate(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(Error::NotFound {
                path: path.to_path_buf(),
            });
        }
        let existing = |p: PathBuf| p.is_file().then_some(p);
        if path.is_file() {
            return Ok(TokenizerFiles {
                named: path.to_path_buf(),
                tokenizer_json: Some(path.to_path_buf()),
                config: existing(path.with_file_name("tokenizer_config.json")),
                tiktoken: None,
                chat_template: existing(path.with_file_name("chat_template.jinja")),
                code: Vec::new(),
            });
        }
        let tokenizer_json = existing(path.join("tokenizer.json"));
        let mut code: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::io(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("tokenization_") && n.ends_with(".py"))
            })
            .collect();
        code.sort();
        Ok(TokenizerFiles {
            named: path.to_path_buf(),
            tiktoken: if tokenizer_json.is_none() {
                tiktoken_file(path)
            } else {
                None
            },
            tokenizer_json,
            config: existing(path.join("tokenizer_config.json")),
            chat_template: existing(path.join("chat_template.jinja")),
            code,
        })
    }
}

/// One entry of `tokenizer_config.json`'s `added_tokens_decoder`.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "prompt"), allow(dead_code))]
pub(crate) struct AddedToken {
    pub id: u32,
    pub content: String,
    /// Whitespace on the left (right) of the token is swallowed by it.
    pub lstrip: bool,
    pub rstrip: bool,
}

/// The `added_tokens_decoder` of a parsed `tokenizer_config.json`, by ascending id.
pub(crate) fn config_added_tokens(config: &serde_json::Value) -> Vec<AddedToken> {
    let flag = |t: &serde_json::Value, k: &str| t.get(k).and_then(|v| v.as_bool()) == Some(true);
    let mut out: Vec<AddedToken> = config
        .get("added_tokens_decoder")
        .and_then(|a| a.as_object())
        .into_iter()
        .flatten()
        .filter_map(|(id, t)| {
            Some(AddedToken {
                id: id.parse().ok()?,
                content: t.get("content")?.as_str()?.to_string(),
                lstrip: flag(t, "lstrip"),
                rstrip: flag(t, "rstrip"),
            })
        })
        .collect();
    out.sort_by_key(|t| t.id);
    out
}

/// `(bytes, rank)` of every line `base64(bytes) rank` of a tiktoken vocabulary.
pub fn read_tiktoken(path: &Path) -> Result<Vec<(Vec<u8>, u32)>> {
    let text = crate::files::read_to_string(path)?;
    let bad = |line: usize, what: &str| Error::Tokenizer {
        path: path.to_path_buf(),
        message: format!("line {line}: {what} (expected `base64(bytes) rank`)"),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (b64, rank) = line.split_once(' ').ok_or_else(|| bad(i + 1, "no rank"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| bad(i + 1, "not base64"))?;
        let rank = rank
            .trim()
            .parse::<u32>()
            .map_err(|_| bad(i + 1, "rank is not a number"))?;
        out.push((bytes, rank));
    }
    Ok(out)
}

/// What identifies a tokenizer directory's contents: its path and each located file's size and modification time.
type VocabKey = (PathBuf, Vec<Option<(u64, std::time::SystemTime, u64, i64)>>);

impl Vocabulary {
    /// [`Vocabulary::from_dir`], remembered for the last directory read while its files are unchanged (same
    /// sizes and modification times): resolving the profile and pairing the prompts of one scan parse a 6 MB
    /// `tokenizer.json` once, and so do the scans of a training loader that re-checks each epoch.
    pub fn cached(dir: &Path) -> Result<Arc<Vocabulary>> {
        static LAST: std::sync::Mutex<Option<(VocabKey, Arc<Vocabulary>)>> =
            std::sync::Mutex::new(None);
        let files = TokenizerFiles::locate(dir)?;
        // Size, modification time, and on Unix the inode and the change time in nanoseconds (a rewrite of
        // the same size within the clock's resolution still moves the change time or the inode).
        let stat = |p: &Option<PathBuf>| {
            let m = std::fs::metadata(p.as_ref()?).ok()?;
            #[cfg(unix)]
            let (ino, ctime) = {
                use std::os::unix::fs::MetadataExt;
                (
                    m.ino(),
                    m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec(),
                )
            };
            #[cfg(not(unix))]
            let (ino, ctime) = (0, 0);
            Some((m.len(), m.modified().ok()?, ino, ctime))
        };
        let key = (
            std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
            vec![
                stat(&files.tokenizer_json),
                stat(&files.config),
                stat(&files.tiktoken),
            ],
        );
        if let Some((k, v)) = LAST.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if *k == key {
                return Ok(v.clone());
            }
        }
        let v = Arc::new(Vocabulary::from_dir(dir)?);
        *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, v.clone()));
        Ok(v)
    }

    /// Reads `tokenizer.json` (model vocabulary and added tokens) or, without one, a tiktoken vocabulary,
    /// plus `tokenizer_config.json` (`added_tokens_decoder`) from `dir`; at least one must be there. `dir`
    /// may also name a `tokenizer.json` file.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let files = TokenizerFiles::locate(dir)?;
        let mut vocab = Vocabulary {
            path: Some(dir.to_path_buf()),
            ..Vocabulary::default()
        };
        // Ordinary tokens with their bytes, and the added tokens (never text).
        let mut ordinary: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut added: Vec<u32> = Vec::new();
        let mut found = false;
        if let Some(tok_json) = &files.tokenizer_json {
            found = true;
            let v = read_json(tok_json)?;
            let byte_level = uses_byte_level(&v);
            let rev = byte_level_decoder();
            match v.pointer("/model/vocab") {
                Some(serde_json::Value::Object(map)) => {
                    for (k, id) in map {
                        if let Some(id) = id.as_u64() {
                            vocab.ids.insert(k.clone(), id as u32);
                            ordinary.push((id as u32, string_bytes(k, byte_level, &rev)));
                        }
                    }
                }
                // Unigram: [[piece, score], ...], the id is the index.
                Some(serde_json::Value::Array(list)) => {
                    for (id, e) in list.iter().enumerate() {
                        if let Some(k) = e.get(0).and_then(|k| k.as_str()) {
                            vocab.ids.insert(k.to_string(), id as u32);
                            ordinary.push((id as u32, string_bytes(k, byte_level, &rev)));
                        }
                    }
                }
                _ => {}
            }
            if let Some(list) = v.get("added_tokens").and_then(|a| a.as_array()) {
                for t in list {
                    if let (Some(c), Some(id)) = (
                        t.get("content").and_then(|c| c.as_str()),
                        t.get("id").and_then(|i| i.as_u64()),
                    ) {
                        vocab.ids.insert(c.to_string(), id as u32);
                        added.push(id as u32);
                    }
                }
            }
        } else if let Some(tt) = &files.tiktoken {
            found = true;
            let alphabet = byte_level_alphabet();
            let mut text: Vec<(String, u32)> = Vec::new();
            for (bytes, rank) in read_tiktoken(tt)? {
                // Resolvable in the byte-level spelling ("Ċ" for "\n"), as profiles and tokenizer.json
                // vocabularies write tokens, and as text ("system", "数学") where no spelling claims the
                // string: the text token "Ċ" (bytes C4 8A) must not take the name of "\n".
                let spelled: String = bytes.iter().map(|&b| alphabet[b as usize]).collect();
                vocab.ids.insert(spelled, rank);
                if let Ok(s) = std::str::from_utf8(&bytes) {
                    text.push((s.to_string(), rank));
                }
                ordinary.push((rank, bytes));
            }
            for (s, rank) in text {
                vocab.ids.entry(s).or_insert(rank);
            }
        }
        if let Some(cfg_json) = &files.config {
            let v = read_json(cfg_json)?;
            if v.get("added_tokens_decoder").is_some_and(|a| a.is_object()) {
                found = true;
                for t in config_added_tokens(&v) {
                    vocab.ids.insert(t.content, t.id);
                    added.push(t.id);
                }
            }
        }
        if !found {
            return Err(Error::Tokenizer {
                path: dir.to_path_buf(),
                message: "no tokenizer.json, tiktoken vocabulary or tokenizer_config.json with added tokens"
                    .into(),
            });
        }
        vocab.size = vocab.ids.values().copied().max().map_or(0, |m| m + 1);
        if !ordinary.is_empty() {
            let mut table = TokenBytes::new(vocab.size, ordinary);
            for id in added {
                table.set_not_text(id);
            }
            vocab.bytes = Some(Arc::new(table));
        }
        Ok(vocab)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_round_trips() {
        let rev = byte_level_decoder();
        assert_eq!(string_bytes("Ċ", true, &rev), b"\n");
        assert_eq!(string_bytes("ĊĊ", true, &rev), b"\n\n");
        assert_eq!(string_bytes("Ġworld", true, &rev), b" world");
        assert_eq!(string_bytes(".</", true, &rev), b".</");
        // "ï½ľ" is the byte-level spelling of the UTF-8 bytes of "｜" (U+FF5C).
        assert_eq!(string_bytes("ï½ľ", true, &rev), "｜".as_bytes());
        let alphabet = byte_level_alphabet();
        for b in 0..=255u8 {
            assert_eq!(rev[alphabet[b as usize] as usize], Some(b));
        }
        assert_eq!(string_bytes("▁the", false, &rev), b" the");
        assert_eq!(string_bytes("<0x0A>", false, &rev), b"\n");
    }

    #[test]
    fn tiktoken_directory_without_tokenizer_json() {
        let dir = tempfile::tempdir().unwrap();
        let e = base64::engine::general_purpose::STANDARD;
        // Id 5 is the text "Ċ" (bytes C4 8A), which is also the byte-level spelling of "\n" (id 2): as in
        // Qwen's vocabulary, where a profile's "Ċ" means 198, not 148848.
        let lines: Vec<String> = [
            &b"sys"[..],
            b"tem",
            b"\n",
            b"system",
            b".</",
            "Ċ".as_bytes(),
        ]
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{} {i}", e.encode(b)))
        .collect();
        std::fs::write(dir.path().join("tiktoken.model"), lines.join("\n")).unwrap();
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"added_tokens_decoder": {"8": {"content": "<|im_end|>", "special": true}}}"#,
        )
        .unwrap();
        let v = Vocabulary::from_dir(dir.path()).unwrap();
        assert_eq!(
            (v.ids["system"], v.ids["Ċ"], v.ids["<|im_end|>"]),
            (3, 2, 8)
        );
        assert_eq!(v.size, 9);
        let t = v.bytes.unwrap();
        assert_eq!(t.get(4), Some(&b".</"[..]));
        assert_eq!(t.get(8), None); // added: not text
        assert_eq!(t.get(6), None); // a hole
        assert_eq!(t.get(100), None); // past the table
        std::fs::write(dir.path().join("tiktoken.model"), "c3lz\n").unwrap();
        let err = Vocabulary::from_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
