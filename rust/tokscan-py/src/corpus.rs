//! `tokscan._core.Corpus`: the core's corpus access for Python. `show`, `align`, `clean`, `--decode` and the
//! HTML excerpts read samples only through it, so every format is read one way, with the scan's column
//! overrides.

use std::collections::HashMap;
use std::sync::Arc;

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokscan_core::sample_id::SampleId;
use tokscan_core::{Corpus, SampleData};

use crate::profile::PyProfile;
use crate::{detached, parse_columns, to_py};

/// The inputs of `paths` in scan order, opened and validated; samples by global row or by id.
#[pyclass(frozen, name = "Corpus", module = "tokscan._core")]
pub struct PyCorpus {
    inner: Arc<Corpus>,
    /// When opening it started (a scan timed from its opening reports it as its start: `Scan(timed_from_open)`).
    opened_at: (std::time::SystemTime, std::time::Instant),
}

impl PyCorpus {
    /// A handle on a corpus opened elsewhere (the one a scan read), shared, not reopened.
    pub(crate) fn shared(inner: Arc<Corpus>) -> Self {
        PyCorpus {
            inner,
            opened_at: (std::time::SystemTime::now(), std::time::Instant::now()),
        }
    }

    pub(crate) fn opened_at(&self) -> (std::time::SystemTime, std::time::Instant) {
        self.opened_at
    }

    pub(crate) fn corpus(&self) -> Arc<Corpus> {
        self.inner.clone()
    }
}

fn to_dict<'py>(py: Python<'py>, corpus: &Corpus, s: SampleData) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("row", s.row)?;
    d.set_item("local_row", s.local_row)?;
    d.set_item("source", corpus.source_path(s.source).display().to_string())?;
    d.set_item(
        "sample_id",
        s.sample_id.map(|id| id_to_py(py, &id)).transpose()?,
    )?;
    d.set_item("category", s.category)?;
    d.set_item("prompt_len", s.prompt_len)?;
    d.set_item("ids", s.ids.into_pyarray(py))?;
    match s.mask {
        Some(m) => d.set_item("mask", m.into_pyarray(py))?,
        None => d.set_item("mask", py.None())?,
    }
    Ok(d)
}

#[pymethods]
impl PyCorpus {
    /// Opens `paths` on `threads` workers (0: one per core; a scan's `--threads` opens it with as many).
    #[new]
    #[pyo3(signature = (paths, columns=None, threads=0))]
    fn new(
        py: Python<'_>,
        paths: Vec<String>,
        columns: Option<HashMap<String, String>>,
        threads: usize,
    ) -> PyResult<Self> {
        let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
        let opened_at = (std::time::SystemTime::now(), std::time::Instant::now());
        let inner = detached(py, move || {
            tokscan_core::scan::with_pool(threads, || Corpus::open(&paths, &columns))
        })?;
        Ok(PyCorpus {
            inner: Arc::new(inner),
            opened_at,
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    fn __repr__(&self) -> String {
        let n = self.inner.inputs.len();
        let first = self
            .inner
            .inputs
            .first()
            .map(|i| format!(": {}{}", i.path.display(), if n > 1 { ", …" } else { "" }))
            .unwrap_or_default();
        format!(
            "<Corpus {} samples in {n} input(s){first}>",
            self.inner.len()
        )
    }

    /// `(path, format, layout, rows, first_row, hive_category)` per input, in scan order.
    #[getter]
    #[allow(clippy::type_complexity)]
    fn inputs(&self) -> Vec<(String, String, String, u64, u64, Option<String>)> {
        self.inner
            .sources
            .iter()
            .zip(&self.inner.inputs)
            .enumerate()
            .map(|(k, (s, i))| {
                (
                    s.path().display().to_string(),
                    s.format().name().to_string(),
                    s.layout(),
                    s.rows(),
                    self.inner.starts[k],
                    i.hive_category.clone(),
                )
            })
            .collect()
    }

    /// The files beside the inputs that hold no corpus data (`Corpus::side_files`: prompts files, then files
    /// of no known format), as paths.
    #[getter]
    fn side_files(&self) -> Vec<String> {
        self.inner
            .side_files()
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// One sample by global row: `row`, `local_row`, `source`, `sample_id`, `category`, `prompt_len` (when
    /// the prompt is stored apart), `ids` (int64 array, prompt + completion), `mask` (uint8 array or None).
    fn sample<'py>(&self, py: Python<'py>, row: u64) -> PyResult<Bound<'py, PyDict>> {
        let s = detached(py, || self.inner.sample(row))?;
        to_dict(py, &self.inner, s)
    }

    /// The anomaly flags (ints) of global rows `[start, end)` checked with `profile` on their ids alone, read in
    /// one pass: the pre-scan profile hint's probe, without arrays (so the CLI need not import numpy for it).
    fn check_ids(
        &self,
        py: Python<'_>,
        profile: &PyProfile,
        start: u64,
        end: u64,
    ) -> PyResult<Vec<u64>> {
        let v = tokscan_core::Validator::new(profile.inner.clone(), None, 1)
            .map_err(|e| to_py(py, e))?;
        detached(py, || v.check_corpus_ids(&self.inner, start, end))
    }

    /// The sample at global row `row` (the dict `sample` returns) and, read once with it, its explanation as
    /// the scan checks it — its tokens, then what its source found about it (a malformed line, a finish
    /// reason, token counts): the dict `check_one` returns. Corpus-wide codes need a scan and are not included.
    fn check_row<'py>(
        &self,
        py: Python<'py>,
        profile: &PyProfile,
        row: u64,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let p = profile.inner.clone();
        let (s, facts, scratch, segments) = detached(py, || {
            let s = self.inner.sample(row)?;
            let mut scratch = tokscan_core::check::Scratch::default();
            let facts = tokscan_core::check::check_data(&p, &s, &mut scratch);
            let segments = tokscan_core::check::segments(&p, &s.ids, &scratch);
            Ok((s, facts, scratch, segments))
        })?;
        let info = crate::explained(py, profile, &facts, &scratch, &segments)?;
        Ok((to_dict(py, &self.inner, s)?, info))
    }

    /// The sample ids of the global rows `rows` (ascending), None where a sample has none; reads only the id
    /// columns of the inputs that hold them.
    fn sample_ids_at<'py>(
        &self,
        py: Python<'py>,
        rows: Vec<u64>,
    ) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let ids = detached(py, || self.inner.sample_ids_at(&rows))?;
        ids.iter()
            .map(|id| id.as_ref().map(|id| id_to_py(py, id)).transpose())
            .collect()
    }

    /// The content keys (`token::content_key`) of the global rows `rows` (ascending), read again: what
    /// `clean` compares with the report's before it removes a row.
    fn content_keys_at(&self, py: Python<'_>, rows: Vec<u64>) -> PyResult<Vec<u64>> {
        detached(py, || self.inner.content_keys_at(&rows))
    }

    /// The content digest (`token::content_digest`) of the global rows `rows` (ascending), read again: what
    /// `clean` compares with the report's `flagged_summarized.content_digest`.
    fn content_digest_at(&self, py: Python<'_>, rows: Vec<u64>) -> PyResult<u64> {
        detached(py, || self.inner.content_digest_at(&rows))
    }

    /// Global rows `[start, end)` as a list of the dicts `sample` returns, read in one pass.
    fn samples<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        end: u64,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let all = detached(py, || self.inner.samples(start, end.min(self.inner.len())))?;
        all.into_iter()
            .map(|s| to_dict(py, &self.inner, s))
            .collect()
    }

    /// Global row of the first sample with this id, or None (reads only the id columns). An integer id
    /// column is searched with an int as well as with its decimal text.
    fn find(&self, py: Python<'_>, sample_id: PyId) -> PyResult<Option<u64>> {
        let id = SampleId::from(sample_id);
        detached(py, || self.inner.find(&id))
    }

    /// Global rows of the first `limit` samples with this id, in row order (a repeated id has several).
    #[pyo3(signature = (sample_id, limit))]
    fn find_rows(&self, py: Python<'_>, sample_id: PyId, limit: usize) -> PyResult<Vec<u64>> {
        let id = SampleId::from(sample_id);
        detached(py, || self.inner.find_rows(&id, limit))
    }

    /// Writes a copy of input `index` (an index into `inputs`) at `out` holding the rows where `keep` is true
    /// (one flag per row of that input), in the same format and layout, through the core's writer of the
    /// format. Returns `(rows written, files written, why the copy was left out or None)`: no files when the
    /// format has no valid file for what is kept (JSONL with no sample line). Never overwrites a file.
    fn write_filtered(
        &self,
        py: Python<'_>,
        index: usize,
        keep: numpy::PyReadonlyArray1<'_, bool>,
        out: std::path::PathBuf,
    ) -> PyResult<(u64, Vec<String>, Option<String>)> {
        let keep = keep.as_slice()?.to_vec();
        let st = detached(py, || self.inner.write_filtered(index, &keep, &out))?;
        let files = st.files.iter().map(|p| p.display().to_string()).collect();
        Ok((st.rows, files, st.omitted))
    }

    /// Writes every sample as `to` ("parquet" or "numpy") into `out`, a new or empty directory, through the
    /// core's writers (`tokscan_core::convert`): the rows this corpus numbers, nothing else. `progress(done,
    /// total)` is called about every 50 ms while it runs. Returns `(samples, tokens, files written)`. Ctrl-C
    /// cancels it; on any error the partial output is removed.
    #[pyo3(signature = (to, out, progress=None))]
    fn convert(
        &self,
        py: Python<'_>,
        to: &str,
        out: std::path::PathBuf,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<(u64, u64, Vec<String>)> {
        use std::sync::atomic::Ordering;
        let target: tokscan_core::convert::Target = to.parse().map_err(|e| to_py(py, e))?;
        let p = tokscan_core::Progress::default();
        let tick = |py: Python<'_>| match &progress {
            Some(cb) => cb
                .call1(
                    py,
                    (
                        p.units_done.load(Ordering::Relaxed),
                        p.units_total.load(Ordering::Relaxed),
                    ),
                )
                .map(drop),
            None => Ok(()),
        };
        let done = crate::interruptible_ticking(
            py,
            &p,
            || tokscan_core::convert::convert(&self.inner, target, &out, &p),
            tick,
        )?;
        if let Some(cb) = &progress {
            cb.call1(py, (done.samples, done.samples))?;
        }
        let files = done.files.iter().map(|f| f.display().to_string()).collect();
        Ok((done.samples, done.tokens, files))
    }

    /// Every sample's id (None where it has none), in row order: an int for an integer id column.
    fn sample_ids<'py>(&self, py: Python<'py>) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let ids = detached(py, || self.inner.sample_ids())?;
        ids.iter()
            .map(|id| id.as_ref().map(|id| id_to_py(py, id)).transpose())
            .collect()
    }
}

/// A sample id as Python gives it: the column's integer or its text.
#[derive(FromPyObject)]
enum PyId {
    Int(i64),
    Text(String),
}

impl From<PyId> for SampleId {
    fn from(id: PyId) -> SampleId {
        match id {
            PyId::Int(n) => SampleId::Int(n),
            PyId::Text(t) => SampleId::from(t),
        }
    }
}

/// A sample id as its column stores it: an int or a str.
fn id_to_py<'py>(py: Python<'py>, id: &SampleId) -> PyResult<Bound<'py, PyAny>> {
    Ok(match id {
        SampleId::Int(n) => n.into_pyobject(py)?.into_any(),
        SampleId::Text(t) => pyo3::types::PyString::new(py, t).into_any(),
    })
}
