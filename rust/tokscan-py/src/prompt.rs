//! Prompt records rendered through a tokenizer's chat template and tokenized by the core (`tokscan_core::prompt`).

use std::path::PathBuf;

use pyo3::prelude::*;
use rayon::prelude::*;
use tokscan_core::prompt::{PromptEncoder, PromptRecord};
use tokscan_core::{Error, Result};

use crate::detached;

/// Parses every JSONL record (in parallel) and applies `f` to each, failing on the first error with its record
/// number.
fn each_record<T: Send>(
    tokenizer_dir: PathBuf,
    records: Vec<String>,
    template: Option<String>,
    f: impl Fn(&PromptEncoder, &PromptRecord) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let encoder = PromptEncoder::load(&tokenizer_dir, template.as_deref())?;
    records
        .par_iter()
        .enumerate()
        .with_min_len(16)
        .map(|(i, line)| {
            PromptRecord::parse(line, i + 1)
                .and_then(|r| f(&encoder, &r))
                .map_err(|e| match e {
                    Error::Template(m) if !m.starts_with("record ") => {
                        Error::Template(format!("record {}: {m}", i + 1))
                    }
                    e => e,
                })
        })
        .collect()
}

/// Token ids of each record's generation prompt (records are JSON objects `{"messages": [...], "tools"?:
/// [...]}`), rendered through the chat template (`template` overrides the directory's) and tokenized without
/// added special tokens, in parallel with the GIL released.
#[pyfunction]
#[pyo3(signature = (tokenizer_dir, records, template=None))]
pub fn encode_prompts(
    py: Python<'_>,
    tokenizer_dir: PathBuf,
    records: Vec<String>,
    template: Option<String>,
) -> PyResult<Vec<Vec<u32>>> {
    detached(py, move || {
        each_record(tokenizer_dir, records, template, |e, r| e.encode_record(r))
    })
}

/// The rendered text of each record's generation prompt (what `encode_prompts` tokenizes).
#[pyfunction]
#[pyo3(signature = (tokenizer_dir, records, template=None))]
pub fn render_prompts(
    py: Python<'_>,
    tokenizer_dir: PathBuf,
    records: Vec<String>,
    template: Option<String>,
) -> PyResult<Vec<String>> {
    detached(py, move || {
        each_record(tokenizer_dir, records, template, |e, r| e.render(r))
    })
}

/// Compiles a chat template's `source` (the file `origin`, which an error names) as the scan would, so that a
/// template that cannot be used is refused before the scan instead of leaving its records compared by shape.
#[pyfunction]
pub fn check_chat_template(py: Python<'_>, source: String, origin: PathBuf) -> PyResult<()> {
    detached(py, move || {
        tokscan_core::prompt::ChatTemplate::new(&source, None, &[], origin).map(|_| ())
    })
}
