//! The text each id of a tokenizer's vocabulary decodes to, and whether a sample's prompt ids decode to a
//! given text: pairing's shortcut past tokenizing a rendered prompt record ([`crate::pairing`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::token::TokenId;

/// The bytes every id of a vocabulary decodes to: ordinary tokens' bytes, added tokens' strings.
#[derive(Debug)]
pub struct IdText {
    bytes: Arc<super::tokenizer_files::TokenBytes>,
    added: HashMap<u32, Box<[u8]>>,
    /// The added tokens' strings, to count them in rendered text: a tokenizer encodes each as its added id,
    /// so text that holds more of them than the sample holds added ids was tokenized otherwise.
    added_strings: Option<aho_corasick::AhoCorasick>,
}

impl IdText {
    /// From a tokenizer directory's vocabulary; `None` when it has no byte table (a vocabulary whose
    /// pieces are not bytes).
    #[cfg(feature = "prompt")]
    pub(crate) fn of(vocab: &super::tokenizer_files::Vocabulary) -> Option<IdText> {
        let bytes = vocab.bytes.clone()?;
        let mut names: Vec<(&String, u32)> = vocab
            .ids
            .iter()
            .filter(|(_, &id)| bytes.get(id).is_none())
            .map(|(k, &id)| (k, id))
            .collect();
        names.sort(); // one string per id whatever the map's order
        let mut added: HashMap<u32, Box<[u8]>> = HashMap::new();
        for (k, id) in names {
            added.entry(id).or_insert_with(|| k.as_bytes().into());
        }
        Some(IdText::new(bytes, added))
    }

    /// From the ordinary tokens' bytes and the added tokens' strings.
    #[cfg(any(feature = "prompt", test))]
    pub(crate) fn new(
        bytes: Arc<super::tokenizer_files::TokenBytes>,
        added: HashMap<u32, Box<[u8]>>,
    ) -> IdText {
        let added_strings = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(added.values().filter(|b| !b.is_empty()))
            .ok();
        IdText {
            bytes,
            added,
            added_strings,
        }
    }

    #[inline]
    fn get(&self, id: u32) -> Option<&[u8]> {
        self.bytes
            .get(id)
            .or_else(|| self.added.get(&id).map(|b| &b[..]))
    }
}

/// Whether the sample's prompt ids decode to exactly `text`: the stored prompt when prompt and completion are
/// stored apart (`prompt_len`), else a prefix of the sequence that ends on a token boundary. Ids that decode
/// to the rendered text are the rendering unless the sample was tokenized otherwise than the tokenizer does
/// (the same text in other pieces), which this does not tell apart.
pub fn decodes_to<T: TokenId>(
    ids: &IdText,
    tokens: &[T],
    prompt_len: Option<usize>,
    text: &[u8],
) -> bool {
    let head = match prompt_len {
        Some(pl) if pl <= tokens.len() => &tokens[..pl],
        Some(_) => return false,
        None => tokens,
    };
    // A tokenizer with a normalizer (NFC, as Qwen's) encodes normalized text: ids that decode to text it
    // would have changed are not its tokens, which only tokenizing tells.
    #[cfg(feature = "prompt")]
    if !text.is_ascii()
        && std::str::from_utf8(text).map_or(true, |t| !unicode_normalization::is_nfc(t))
    {
        return false;
    }
    let (mut at, mut added) = (0usize, 0usize);
    let mut used = head.len();
    for (i, t) in head.iter().enumerate() {
        if at == text.len() {
            if prompt_len.is_some() || i == 0 {
                return false;
            }
            used = i;
            break;
        }
        let Some(b) = ids.get(t.id()) else {
            return false;
        };
        added += usize::from(ids.added.contains_key(&t.id()));
        match text.get(at..at + b.len()) {
            Some(piece) if piece == b => at += b.len(),
            _ => return false,
        }
    }
    if at != text.len() || used == 0 {
        return false;
    }
    // Every added token's string in the text is that token in the sample, not its pieces spelled out.
    ids.added_strings
        .as_ref()
        .map_or(added == 0, |f| f.find_iter(text).count() == added)
}
