//! The `spelled_special` automaton: a special token's string written as ordinary text.
//!
//! In running text BPE merges a tag's first and last characters with its neighbours (DeepSeek-V4 encodes
//! `a.</think>` with `.</` as one token), so the pieces a string gets on its own are not what to look for.
//! Instead every ordinary token's bytes (`TokenBytes`) are streamed through one byte-level Aho-Corasick DFA,
//! its state carried from token to token; special tokens are not text and restart the stream. The position
//! is the token where the spelled string starts.

use std::sync::Arc;

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind};

use super::tokenizer_files::TokenBytes;
use crate::error::{Error, Result};
use crate::token::TokenId;

/// Per-id class: not text (restarts the stream), text none of whose bytes can start a pattern (skipped
/// while the automaton is at its start state), or text to feed byte by byte.
const NOT_TEXT: u8 = 0;
const NO_START_BYTE: u8 = 1;
const FEED: u8 = 2;

#[derive(Debug, Clone)]
pub struct SpelledPatterns {
    /// The special-token strings searched for.
    pub names: Vec<String>,
    dfa: Arc<DFA>,
    start: StateID,
    table: Arc<TokenBytes>,
    class: Arc<Vec<u8>>,
}

impl SpelledPatterns {
    /// The automaton of `names` over the token byte table. `specials` (the profile's special ids) and any id
    /// whose bytes are exactly one of `names` are special tokens, not text, even when the vocabulary lists them
    /// as ordinary (a vocabulary exported without its added tokens). Empty strings are dropped; `None` when
    /// none is left.
    pub fn new(
        names: Vec<String>,
        table: Arc<TokenBytes>,
        specials: &[u32],
    ) -> Result<Option<Self>> {
        let mut names: Vec<String> = names.into_iter().filter(|s| !s.is_empty()).collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Ok(None);
        }
        let err =
            |e: String| Error::Usage(format!("cannot build the spelled-token automaton: {e}"));
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .build(&names)
            .map_err(|e| err(e.to_string()))?;
        let start = dfa
            .start_state(Anchored::No)
            .map_err(|e| err(e.to_string()))?;
        let mut first = [false; 256];
        for n in &names {
            first[n.as_bytes()[0] as usize] = true;
        }
        let exact: std::collections::HashSet<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        let class = (0..table.len() as u32)
            .map(|id| match table.get(id) {
                None => NOT_TEXT,
                Some(b) if exact.contains(b) || specials.contains(&id) => NOT_TEXT,
                Some(b) if b.iter().any(|&x| first[x as usize]) => FEED,
                Some(_) => NO_START_BYTE,
            })
            .collect();
        Ok(Some(SpelledPatterns {
            names,
            dfa: Arc::new(dfa),
            start,
            table,
            class: Arc::new(class),
        }))
    }

    /// Position of the token where the first spelled special string found in `tokens` starts.
    pub fn find<T: TokenId>(&self, tokens: &[T]) -> Option<usize> {
        let (dfa, start, class) = (&*self.dfa, self.start, &*self.class);
        let mut sid = start;
        for (i, t) in tokens.iter().enumerate() {
            let id = t.id();
            match class.get(id as usize).copied().unwrap_or(NOT_TEXT) {
                NOT_TEXT => {
                    sid = start;
                    continue;
                }
                NO_START_BYTE if sid == start => continue,
                _ => {}
            }
            let bytes = self.table.get(id).unwrap_or_default();
            for (j, &b) in bytes.iter().enumerate() {
                sid = dfa.next_state(Anchored::No, sid, b);
                if dfa.is_special(sid) && dfa.is_match(sid) {
                    // The longest pattern ending here starts earliest.
                    let len = (0..dfa.match_len(sid))
                        .map(|k| dfa.pattern_len(dfa.match_pattern(sid, k)))
                        .max()
                        .unwrap_or(0);
                    return Some(self.token_at(tokens, i, j + 1, len));
                }
            }
        }
        None
    }

    /// The token holding the byte `back` bytes before the end of the first `used` bytes of token `i`
    /// (every token in between is text: a non-text token would have restarted the stream).
    fn token_at<T: TokenId>(&self, tokens: &[T], mut i: usize, used: usize, back: usize) -> usize {
        let mut before = back.saturating_sub(used); // bytes of the match before token i
        while before > 0 && i > 0 {
            i -= 1;
            let n = self.table.get(tokens[i].id()).map_or(0, <[u8]>::len);
            before = before.saturating_sub(n);
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made vocabulary: ids 0..=9 are text, 10 and 11 are special tokens.
    fn table() -> Arc<TokenBytes> {
        let words: [&[u8]; 10] = [
            b"hello", b".</", b"think", b">", b"</", b"word", b"\n", b" ", b"<", b"think>",
        ];
        Arc::new(TokenBytes::new(
            12,
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (i as u32, w.to_vec())),
        ))
    }

    fn find(ids: &[u32]) -> Option<usize> {
        SpelledPatterns::new(vec!["</think>".into(), "<think>".into()], table(), &[])
            .unwrap()
            .unwrap()
            .find(ids)
    }

    #[test]
    fn a_tag_merged_with_its_neighbours_is_found_where_it_starts() {
        assert_eq!(find(&[0, 1, 2, 3, 0]), Some(1)); // "hello.</think>hello": `.</` starts it
        assert_eq!(find(&[5, 4, 9]), Some(1)); // "word</think>"
        assert_eq!(find(&[0, 6, 8, 9]), Some(2)); // after a newline: "<" + "think>"
        assert_eq!(find(&[4, 2, 3]), Some(0)); // at the very start
        assert_eq!(find(&[0, 7, 5, 4, 2, 3]), Some(3)); // at the very end
        assert_eq!(find(&[8, 8, 9]), Some(1)); // "<<think>": the match starts at the second "<"
    }

    #[test]
    fn a_special_listed_as_ordinary_text_is_still_special() {
        // A vocabulary exported without its added tokens: id 13 is "<think>" itself, listed as text.
        let words: [&[u8]; 4] = [b"</", b"think", b">", b"<think>"];
        let table = Arc::new(TokenBytes::new(
            14,
            (10..).zip(words.iter().map(|w| w.to_vec())),
        ));
        let names = || vec!["<think>".to_string(), "</think>".to_string()];
        let sp = SpelledPatterns::new(names(), table.clone(), &[])
            .unwrap()
            .unwrap();
        assert_eq!(sp.find(&[13u32, 13]), None); // the real token, by its bytes
        assert_eq!(sp.find(&[13u32, 10, 11, 12]), Some(1)); // and a spelled one after it
                                                            // The profile's own special ids are never text either.
        let sp = SpelledPatterns::new(names(), table, &[12])
            .unwrap()
            .unwrap();
        assert_eq!(sp.find(&[10u32, 11, 12]), None);
    }

    #[test]
    fn special_tokens_break_the_stream_and_near_misses_are_not_matches() {
        assert_eq!(find(&[4, 10, 2, 3]), None); // "</" <special> "think>"
        assert_eq!(find(&[4, 2, 11]), None);
        assert_eq!(find(&[4, 2, 7, 3]), None); // "</think >"
        assert_eq!(find(&[0, 5, 6, 0]), None);
        assert_eq!(find(&[4, 2, 500, 3]), None); // an id past the table is not text either
        assert_eq!(find(&[]), None);
    }
}
