//! The corpus's inputs and what discovery left aside, as the report lists them (`inputs`, `skipped`): built
//! from an opened corpus by a local scan ([`mod@crate::scan`]) and by a cluster plan ([`crate::plan`]), whose
//! report is built later from what the plan carries. Re-exported by [`crate::report`].

use serde::{Deserialize, Serialize};

use crate::corpus::Corpus;

/// One input as the report lists it (`inputs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputInfo {
    pub path: String,
    pub format: String,
    pub layout: String,
    pub samples: u64,
    pub tokens: u64,
    /// What the reader noticed about the input though it reads (an optional addition to `schema_version` 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl InputInfo {
    /// The inputs as the report describes them (counts filled in when the report is built).
    pub fn of_corpus(corpus: &Corpus) -> Vec<InputInfo> {
        corpus
            .sources
            .iter()
            .map(|s| InputInfo {
                path: crate::source::path_text(s.path()),
                format: s.format().name().into(),
                layout: s.layout(),
                samples: 0,
                tokens: 0,
                warning: s.warning(),
            })
            .collect()
    }
}

/// A file or folder left aside as the report lists it (`skipped`), with the reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SkippedInfo {
    pub path: String,
    pub reason: String,
}

impl SkippedInfo {
    /// The report's `skipped` list; with `prompts`, the prompts files too (for a scan that does not pair,
    /// so that they are not passed over in silence).
    pub fn of_corpus(corpus: &Corpus, prompts: bool) -> Vec<SkippedInfo> {
        let mut out: Vec<SkippedInfo> = corpus
            .skipped
            .iter()
            .map(|s| SkippedInfo {
                path: crate::source::path_text(&s.path),
                reason: s.reason.clone(),
            })
            .collect();
        if prompts {
            out.extend(corpus.prompts.iter().map(|p| SkippedInfo {
                path: crate::source::path_text(&p.path),
                reason:
                    "a prompts file: pairing runs in the local engine only (scan without --ray to pair)"
                        .into(),
            }));
            out.sort_by(|a, b| a.path.cmp(&b.path));
        }
        out
    }
}
