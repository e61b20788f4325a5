//! The `spelled_special` automaton: special-token strings encoded as ordinary pieces.

use crate::error::{Error, Result};

/// One multi-pattern automaton over the little-endian bytes of id sequences.
#[derive(Debug, Clone)]
pub struct SpelledPatterns {
    pub names: Vec<String>,
    pub pieces: Vec<Vec<u32>>,
    automaton: aho_corasick::AhoCorasick,
}

impl SpelledPatterns {
    /// Patterns of fewer than two pieces are dropped: a single ordinary token is not a spelling.
    pub fn new(patterns: Vec<(String, Vec<u32>)>) -> Result<Option<Self>> {
        let (names, pieces): (Vec<String>, Vec<Vec<u32>>) =
            patterns.into_iter().filter(|(_, p)| p.len() >= 2).unzip();
        if pieces.is_empty() {
            return Ok(None);
        }
        let bytes: Vec<Vec<u8>> = pieces
            .iter()
            .map(|p| p.iter().flat_map(|id| id.to_le_bytes()).collect())
            .collect();
        let automaton = aho_corasick::AhoCorasick::new(&bytes)
            .map_err(|e| Error::Usage(format!("cannot build the spelled-token automaton: {e}")))?;
        Ok(Some(SpelledPatterns {
            names,
            pieces,
            automaton,
        }))
    }

    /// First token position where a pattern starts in `ids_le` (ids as little-endian `u32` bytes).
    pub fn find(&self, ids_le: &[u8]) -> Option<usize> {
        self.automaton
            .find_overlapping_iter(ids_le)
            .filter(|m| m.start() % 4 == 0)
            .map(|m| m.start() / 4)
            .min()
    }
}
