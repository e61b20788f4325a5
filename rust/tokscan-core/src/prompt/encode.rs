//! Rendered prompt text to token ids, as transformers' `tok(text, add_special_tokens=False)` does it: added
//! tokens (special or not) are recognised in the text first, the rest is encoded by the model. A directory with a
//! `tokenizer.json` is encoded by the `tokenizers` crate (the library behind transformers' fast tokenizers, here
//! with the pure-Rust fancy-regex engine); a tiktoken-style directory (`*.tiktoken` ranks, the added tokens of
//! `tokenizer_config.json` and a `tokenization_*.py` class) by tiktoken's rank-based byte-pair merge over the
//! pre-tokenization pattern that class declares.

use std::collections::HashMap;
use std::path::PathBuf;

use aho_corasick::{AhoCorasick, MatchKind};
use unicode_normalization::UnicodeNormalization;
use xxhash_rust::xxh3::Xxh3DefaultBuilder;

use crate::error::{Error, Result};
use crate::profile::tokenizer_files::{
    config_added_tokens, read_json, read_tiktoken, AddedToken, TokenizerFiles,
};

/// The tokenizer of a directory.
pub(crate) enum TextEncoder {
    /// `tokenizer.json` through the `tokenizers` crate.
    Hf {
        tokenizer: Box<tokenizers::Tokenizer>,
        path: PathBuf,
    },
    Tiktoken(Box<Tiktoken>),
}

impl std::fmt::Debug for TextEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextEncoder::Hf { path, .. } => write!(f, "TextEncoder::Hf({})", path.display()),
            TextEncoder::Tiktoken(t) => write!(f, "TextEncoder::Tiktoken({})", t.path.display()),
        }
    }
}

impl TextEncoder {
    pub(crate) fn from_files(files: &TokenizerFiles) -> Result<Self> {
        if let Some(path) = &files.tokenizer_json {
            let tokenizer =
                tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Tokenizer {
                    path: path.clone(),
                    message: format!(
                        "cannot load tokenizer.json: {}",
                        e.to_string().replace('\n', " ")
                    ),
                })?;
            return Ok(TextEncoder::Hf {
                tokenizer: Box::new(tokenizer),
                path: path.clone(),
            });
        }
        if files.tiktoken.is_some() {
            return Ok(TextEncoder::Tiktoken(Box::new(Tiktoken::from_files(
                files,
            )?)));
        }
        Err(Error::Tokenizer {
            path: files.named.clone(),
            message: "no tokenizer.json or tiktoken vocabulary to encode prompts with".into(),
        })
    }

    /// The ids of `text` with its added tokens recognised and no special tokens added around it.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            TextEncoder::Hf { tokenizer, path } => tokenizer
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::Tokenizer {
                    path: path.clone(),
                    message: format!("cannot encode: {e}"),
                }),
            TextEncoder::Tiktoken(t) => t.encode(text),
        }
    }
}

/// A tiktoken `Encoding` as a `tokenization_*.py` class builds it, wrapped the way transformers' Python
/// tokenizers wrap one: added tokens split off first (leftmost-longest, honouring `lstrip` / `rstrip`), then
/// each stretch of text (NFC-normalised when the class does so) pre-tokenized and byte-pair merged.
pub(crate) struct Tiktoken {
    ranks: HashMap<Vec<u8>, u32, Xxh3DefaultBuilder>,
    pattern: fancy_regex::Regex,
    added: Vec<AddedToken>,
    /// Finds the added tokens; `None` when there are none.
    added_finder: Option<AhoCorasick>,
    nfc: bool,
    path: PathBuf,
}

impl Tiktoken {
    fn from_files(files: &TokenizerFiles) -> Result<Self> {
        let ranks_path = files.tiktoken.clone().expect("a tiktoken vocabulary");
        let mut ranks = HashMap::with_hasher(Xxh3DefaultBuilder::new());
        for (bytes, rank) in read_tiktoken(&ranks_path)? {
            ranks.insert(bytes, rank);
        }
        let added = match &files.config {
            Some(c) => config_added_tokens(&read_json(c)?),
            None => Vec::new(),
        };
        let (source, code_path) = files
            .code
            .iter()
            .find_map(|p| {
                let src = crate::files::read_to_string(p).ok()?;
                python_pattern(&src).map(|pat| ((pat, src), p.clone()))
            })
            .ok_or_else(|| Error::Tokenizer {
                path: files.named.clone(),
                message: "a tiktoken vocabulary needs its pre-tokenization pattern: no tokenization_*.py \
                          assigns a PAT_STR / pat_str"
                    .into(),
            })?;
        let (pat, code) = source;
        let pattern = fancy_regex::Regex::new(&pat).map_err(|e| Error::Tokenizer {
            path: code_path.clone(),
            message: format!("the pre-tokenization pattern does not compile: {e}"),
        })?;
        let nfc = code.contains("normalize(\"NFC\"") || code.contains("normalize('NFC'");
        let added_finder = if added.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(added.iter().map(|t| &t.content))
                    .map_err(|e| Error::Tokenizer {
                        path: files.named.clone(),
                        message: format!("added tokens: {e}"),
                    })?,
            )
        };
        Ok(Tiktoken {
            ranks,
            pattern,
            added,
            added_finder,
            nfc,
            path: ranks_path,
        })
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        let Some(finder) = &self.added_finder else {
            self.encode_ordinary(text, &mut out)?;
            return Ok(out);
        };
        // Pieces of text between added tokens, trimmed by the tokens' lstrip / rstrip.
        let mut start = 0;
        let mut strip_left = false;
        for m in finder.find_iter(text) {
            let token = &self.added[m.pattern().as_usize()];
            let mut piece = &text[start..m.start()];
            if strip_left {
                piece = piece.trim_start();
            }
            if token.lstrip {
                piece = piece.trim_end();
            }
            self.encode_ordinary(piece, &mut out)?;
            out.push(token.id);
            strip_left = token.rstrip;
            start = m.end();
        }
        let mut piece = &text[start..];
        if strip_left {
            piece = piece.trim_start();
        }
        self.encode_ordinary(piece, &mut out)?;
        Ok(out)
    }

    /// tiktoken's `encode_ordinary`: every pre-tokenized piece is one rank or a byte-pair merge.
    fn encode_ordinary(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let normalized: String;
        let text = if self.nfc && !unicode_normalization::is_nfc(text) {
            normalized = text.nfc().collect();
            normalized.as_str()
        } else {
            text
        };
        for m in self.pattern.find_iter(text) {
            let m = m.map_err(|e| Error::Tokenizer {
                path: self.path.clone(),
                message: format!("pre-tokenization failed: {e}"),
            })?;
            let piece = m.as_str().as_bytes();
            match self.ranks.get(piece) {
                Some(&r) => out.push(r),
                None => self.byte_pair_encode(piece, out)?,
            }
        }
        Ok(())
    }

    fn rank(&self, bytes: &[u8]) -> u32 {
        self.ranks.get(bytes).copied().unwrap_or(u32::MAX)
    }

    /// tiktoken's `byte_pair_encode`: merge the adjacent pair of lowest rank until none is a token.
    fn byte_pair_encode(&self, piece: &[u8], out: &mut Vec<u32>) -> Result<()> {
        let missing = || Error::Tokenizer {
            path: self.path.clone(),
            message: format!("the vocabulary cannot spell the bytes {piece:?}"),
        };
        if piece.len() == 1 {
            out.push(*self.ranks.get(piece).ok_or_else(missing)?);
            return Ok(());
        }
        // (start, rank of the pair starting here) per part; tiktoken's `_byte_pair_merge`.
        let mut parts: Vec<(usize, u32)> = Vec::with_capacity(piece.len() + 1);
        let mut min = (u32::MAX, usize::MAX);
        for i in 0..piece.len() - 1 {
            let r = self.rank(&piece[i..i + 2]);
            if r < min.0 {
                min = (r, i);
            }
            parts.push((i, r));
        }
        parts.push((piece.len() - 1, u32::MAX));
        parts.push((piece.len(), u32::MAX));
        let pair_rank = |parts: &[(usize, u32)], i: usize| {
            if i + 3 < parts.len() {
                self.rank(&piece[parts[i].0..parts[i + 3].0])
            } else {
                u32::MAX
            }
        };
        while min.0 != u32::MAX {
            let i = min.1;
            if i > 0 {
                parts[i - 1].1 = pair_rank(&parts, i - 1);
            }
            parts[i].1 = pair_rank(&parts, i);
            parts.remove(i + 1);
            min = (u32::MAX, usize::MAX);
            for (j, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
                if r < min.0 {
                    min = (r, j);
                }
            }
        }
        for w in parts.windows(2) {
            out.push(*self.ranks.get(&piece[w[0].0..w[1].0]).ok_or_else(missing)?);
        }
        Ok(())
    }
}

/// The pre-tokenization pattern a `tokenization_*.py` assigns to `PAT_STR` / `pat_str`: its string literals
/// concatenated (implicit concatenation in parentheses), or joined when written `"|".join([...])` (Kimi's).
pub(crate) fn python_pattern(src: &str) -> Option<String> {
    let mut offset = 0;
    let start = src.lines().find_map(|line| {
        let here = offset;
        offset += line.len() + 1;
        let t = line.trim_start();
        let name_len = t
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(t.len());
        let rest = t[name_len..].trim_start();
        (t[..name_len].eq_ignore_ascii_case("pat_str")
            && rest.starts_with('=')
            && !rest.starts_with("=="))
        .then(|| here + (line.len() - t.len()) + name_len + (t[name_len..].len() - rest.len()) + 1)
    })?;
    let s = &src[start.min(src.len())..];
    let b = s.as_bytes();
    let mut literals: Vec<String> = Vec::new();
    let mut joined = false;
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'\n' if depth == 0 && !literals.is_empty() => break,
            b'\\' if b.get(i + 1) == Some(&b'\n') => i += 1,
            b'"' | b'\'' => {
                // The literal's prefix letters (r, b, u, f) sit right before the quote.
                let mut p = i;
                while p > 0 && b[p - 1].is_ascii_alphabetic() {
                    p -= 1;
                }
                let raw = s[p..i].contains(['r', 'R']);
                let triple = b.len() >= i + 3 && b[i + 1] == c && b[i + 2] == c;
                let q = if triple { 3 } else { 1 };
                let body_start = i + q;
                let mut j = body_start;
                loop {
                    if j >= b.len() {
                        return None;
                    }
                    if b[j] == b'\\' {
                        j += 2;
                        continue;
                    }
                    if b[j] == c
                        && (!triple || (b.get(j + 1) == Some(&c) && b.get(j + 2) == Some(&c)))
                    {
                        break;
                    }
                    j += 1;
                }
                let body = &s[body_start..j];
                literals.push(if raw {
                    body.to_string()
                } else {
                    unescape(body)
                });
                i = j + q;
                if s[i..].starts_with(".join") && literals.len() == 1 {
                    joined = true;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if joined {
        let sep = literals.remove(0);
        Some(literals.join(&sep))
    } else if literals.is_empty() {
        None
    } else {
        Some(literals.concat())
    }
}

/// The value of a non-raw Python string literal body (common escapes; unknown ones keep their backslash).
fn unescape(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some('\'') => out.push('\''),
            Some('"') => out.push('"'),
            Some('\n') => {}
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Reads nothing: only for tests that build a tiktoken encoder in memory.
#[cfg(test)]
fn tiktoken_for_tests(ranks: &[(&[u8], u32)], pattern: &str, added: Vec<AddedToken>) -> Tiktoken {
    let added_finder = (!added.is_empty()).then(|| {
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(added.iter().map(|t| &t.content))
            .unwrap()
    });
    Tiktoken {
        ranks: ranks.iter().map(|(b, r)| (b.to_vec(), *r)).collect(),
        pattern: fancy_regex::Regex::new(pattern).unwrap(),
        added,
        added_finder,
        nfc: true,
        path: PathBuf::from("test"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_from_qwen_and_kimi_style_sources() {
        let qwen = "X = 1\nPAT_STR = (\n    r\"\"\"(?i:'s|'t)|\\p{N}\"\"\"  # numbers\n    r\"\"\"|\\s+(?!\\S)|\\s+\"\"\"\n)\nY = 'no'\n";
        assert_eq!(
            python_pattern(qwen).unwrap(),
            r"(?i:'s|'t)|\p{N}|\s+(?!\S)|\s+"
        );
        let kimi = "class K:\n    def __init__(self):\n        pat_str = \"|\".join(\n            [\n                r\"\"\"[\\p{Han}]+\"\"\",\n                r\"\"\"\\p{N}{1,3}\"\"\",\n            ]\n        )\n        self.x = pat_str\n";
        assert_eq!(python_pattern(kimi).unwrap(), r"[\p{Han}]+|\p{N}{1,3}");
        assert_eq!(python_pattern("pat_str = 'a\\tb'\n").unwrap(), "a\tb");
        assert_eq!(python_pattern("if pat_str == 'x':\n    pass\n"), None);
    }

    #[test]
    fn byte_pair_merge_follows_ranks_and_added_tokens_split_first() {
        let ranks: Vec<(&[u8], u32)> = vec![
            (b"a", 0),
            (b"b", 1),
            (b"c", 2),
            (b" ", 3),
            (b"ab", 4),
            (b"bc", 5),
            (b"abc", 6),
            (b"\xc3", 7),
            (b"\xa9", 8),
        ];
        let added = vec![
            AddedToken {
                id: 100,
                content: "<x>".into(),
                lstrip: false,
                rstrip: true,
            },
            AddedToken {
                id: 101,
                content: "<x>>".into(),
                lstrip: false,
                rstrip: false,
            },
        ];
        let t = tiktoken_for_tests(&ranks, r"\S+|\s+", added);
        // "abc": ab (4) merges before bc (5), then abc (6).
        assert_eq!(t.encode("abc").unwrap(), vec![6]);
        assert_eq!(t.encode("cab").unwrap(), vec![2, 4]);
        // "e\u{301}" is NFC-normalised to "é" (c3 a9), which has no merge.
        assert_eq!(t.encode("e\u{301}").unwrap(), vec![7, 8]);
        // Leftmost-longest added tokens; <x> swallows the whitespace on its right.
        assert_eq!(t.encode("a<x>>b").unwrap(), vec![0, 101, 1]);
        assert_eq!(t.encode("a <x>  b").unwrap(), vec![0, 3, 100, 1]);
        let e = t.encode("z").unwrap_err().to_string();
        assert!(e.contains("cannot spell"), "{e}");
    }
}
