//! `tokscan._core.Profile`: a resolved chat-format profile.

use std::sync::Arc;

use pyo3::prelude::*;
use tokscan_core::profile::Vocabulary;
use tokscan_core::Profile;

use crate::detached;

/// A resolved chat-format profile.
#[pyclass(frozen, name = "Profile", module = "tokscan._core")]
pub struct PyProfile {
    pub(crate) inner: Arc<Profile>,
    /// The name or file it was loaded from (a report's `run.profile_source`).
    source: String,
}

#[pymethods]
impl PyProfile {
    /// Loads a built-in profile by name or a TOML profile file; `tokenizer` resolves its token strings.
    #[staticmethod]
    #[pyo3(signature = (name_or_path, tokenizer=None))]
    fn load(py: Python<'_>, name_or_path: String, tokenizer: Option<String>) -> PyResult<Self> {
        let source = name_or_path.clone();
        let p = detached(py, move || {
            let vocab = tokenizer
                .map(|t| Vocabulary::cached(std::path::Path::new(&t)))
                .transpose()?;
            Profile::load(&name_or_path, vocab.as_deref())
        })?;
        Ok(PyProfile {
            inner: Arc::new(p),
            source,
        })
    }

    /// The built-in name or the file the profile was loaded from.
    #[getter]
    fn source(&self) -> String {
        self.source.clone()
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn vocab_size(&self) -> u32 {
        self.inner.vocab_size
    }

    /// `(name, id)` of every named special token, in counter order.
    #[getter]
    fn special_tokens(&self) -> Vec<(String, u32)> {
        self.inner
            .specials
            .iter()
            .map(|s| (s.name.clone(), s.id))
            .collect()
    }

    /// `(string, id)` of the profile's own `[ids]` table (after `base` merging), sorted by string.
    #[getter]
    fn declared_ids(&self) -> Vec<(String, u32)> {
        self.inner
            .declared_ids
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    #[getter]
    fn pad_id(&self) -> Option<u32> {
        self.inner.pad
    }

    /// Special-token strings this profile looks for written as text (`spelled_special`; needs a tokenizer).
    #[getter]
    fn spelled(&self) -> Vec<String> {
        self.inner
            .spelled
            .as_ref()
            .map_or_else(Vec::new, |s| s.names.clone())
    }

    /// The profile as a JSON string (as embedded in reports).
    fn describe_json(&self) -> String {
        self.inner.describe().to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Profile({:?}, vocab_size={})",
            self.inner.name, self.inner.vocab_size
        )
    }
}
