//! The steps of a scan spread over many processes (tokscan.integrations.ray drives them on Ray). Every result
//! crosses processes as opaque bytes in the core's compact format; all the logic is the core's
//! (`plan`, `scan::scan_task`, `summary::Partial`, `corpus_checks`, the corpus-wide `passes`, `scan::finish`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokscan_core::corpus_checks::{self, Bucket, Found, Repeated, Resolution};
use tokscan_core::plan::{self, Task};
use tokscan_core::records::Records;
use tokscan_core::report::InputInfo;
use tokscan_core::summary::Partial;
use tokscan_core::{Error, Profile, Progress, ScanOptions};

use crate::{detached, interruptible, parse_columns, to_py, PyProfile};

fn bytes<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, b)
}

fn json_err(e: serde_json::Error) -> Error {
    Error::Usage(format!("inputs: {e}"))
}

/// Opens the corpus (headers and metadata only) and groups its units into about `n_tasks` tasks:
/// `(tasks as bytes, inputs as JSON, rows, units, tokens known from metadata, bases, sources)`. With `staging`
/// (a directory), object-store URLs among `paths` are staged there with only their footers and headers, and
/// each task fetches its own objects' parts; `bases` are the staged URLs' `(local directory, URL base)`, which
/// the report's paths are written back with. `sources` (bytes) is every input in the plan's order, for
/// `near_duplicates`.
#[pyfunction]
#[pyo3(signature = (paths, columns=None, n_tasks=1, staging=None))]
#[allow(clippy::type_complexity)]
pub fn plan_scan<'py>(
    py: Python<'py>,
    paths: Vec<String>,
    columns: Option<HashMap<String, String>>,
    n_tasks: usize,
    staging: Option<std::path::PathBuf>,
) -> PyResult<(
    Vec<Bound<'py, PyBytes>>,
    String,
    u64,
    usize,
    u64,
    Vec<(String, String)>,
    Bound<'py, PyBytes>,
)> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    let (p, bases) = detached(py, move || match staging {
        Some(dir) => plan::plan_staged(&paths, &columns, n_tasks, &dir),
        None => Ok((plan::plan(&paths, &columns, n_tasks)?, Vec::new())),
    })?;
    // What the report needs of the corpus, opaque to Python: its inputs and what discovery left aside.
    let inputs =
        serde_json::to_string(&serde_json::json!({"inputs": p.inputs, "skipped": p.skipped}))
            .map_err(|e| to_py(py, json_err(e)))?;
    let tasks = p.tasks.iter().map(|t| bytes(py, &t.to_bytes())).collect();
    let bases = bases
        .into_iter()
        .map(|(local, url)| (local.to_string_lossy().into_owned(), url))
        .collect();
    let sources = bytes(py, &plan::sources_to_bytes(&p.sources));
    Ok((
        tasks,
        inputs,
        p.rows,
        p.units,
        p.tokens_hint,
        bases,
        sources,
    ))
}

/// Scans one planned task: `run()` returns `(partial, buckets, records)` as bytes, the keys routed to
/// `n_buckets` buckets for the corpus-wide checks.
#[pyclass(frozen, name = "TaskScan", module = "tokscan._core")]
pub struct PyTaskScan {
    task: Task,
    profile: Arc<Profile>,
    options: ScanOptions,
    n_buckets: usize,
    progress: Arc<Progress>,
}

#[pymethods]
impl PyTaskScan {
    #[new]
    #[pyo3(signature = (task, profile, options=None, n_buckets=1))]
    fn new(
        py: Python<'_>,
        task: &[u8],
        profile: &PyProfile,
        options: Option<&Bound<'_, PyDict>>,
        n_buckets: usize,
    ) -> PyResult<Self> {
        // The scan's own options: each task keeps detail for its own first samples of each code (the merge
        // keeps the corpus's first: a task holds every sample the whole corpus keeps of it), counts the
        // loss-bearing tokens when the scan has draft-vocabulary options, as a local scan does.
        let options = crate::options::scan_options(options).map_err(|e| to_py(py, e))?;
        Ok(PyTaskScan {
            task: Task::from_bytes(task).map_err(|e| to_py(py, e))?,
            profile: profile.inner.clone(),
            options,
            n_buckets: n_buckets.max(1),
            progress: Arc::new(Progress::default()),
        })
    }

    #[allow(clippy::type_complexity)]
    fn run<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Bound<'py, PyBytes>,
        Vec<Bound<'py, PyBytes>>,
        Bound<'py, PyBytes>,
    )> {
        let (partial, buckets, records) = interruptible(py, &self.progress, || {
            let (partial, mut records) = tokscan_core::scan::scan_task(
                &self.task,
                &self.profile,
                &self.options,
                &self.progress,
            )?;
            let passes = self.options.passes();
            // Folded: a task of copies sends one key a group, not one a row.
            let buckets: Vec<Vec<u8>> = corpus_checks::route(&records, self.n_buckets, &passes)
                .into_iter()
                .map(|mut b| {
                    b.fold();
                    b.to_bytes()
                })
                .collect();
            // The sketches travel as the passes' keys in the buckets; the records kept for `resolve` drop them.
            for r in &mut records.rows {
                r.sketch = None;
            }
            Ok((partial.to_bytes(), buckets, records.to_bytes()))
        })?;
        Ok((
            bytes(py, &partial),
            buckets.iter().map(|b| bytes(py, b)).collect(),
            bytes(py, &records),
        ))
    }

    /// Rows of the task (known from the plan).
    fn rows(&self) -> u64 {
        self.task.rows()
    }

    /// Counters of the running task.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let p = &self.progress;
        d.set_item("units_done", p.units_done.load(Ordering::Relaxed))?;
        d.set_item("samples", p.samples.load(Ordering::Relaxed))?;
        d.set_item("tokens", p.tokens.load(Ordering::Relaxed))?;
        Ok(d)
    }

    fn cancel(&self) {
        self.progress.cancel();
    }
}

/// Partial summaries merged into one (any grouping and order give the same result). With the scan's `options`,
/// the passes' partials are decoded and merged too (else they stay bytes, one per part, until the report is
/// finished: a draft vocabulary's counts are a vocabulary-sized array per part).
#[pyfunction]
#[pyo3(signature = (parts, options=None))]
pub fn merge_partials<'py>(
    py: Python<'py>,
    parts: Vec<Vec<u8>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let scan = options
        .map(|o| crate::options::scan_options(Some(o)))
        .transpose()
        .map_err(|e| to_py(py, e))?;
    let merged = detached(py, move || {
        let passes = scan.as_ref().map(|s| s.passes()).unwrap_or_default();
        let decode = tokscan_core::passes::decoders(&passes);
        let mut m = Partial::new(0);
        for p in &parts {
            m.merge(Partial::from_bytes(p)?);
            if scan.is_some() {
                m.passes.decode_with(&decode)?;
            }
        }
        Ok(m.to_bytes())
    })?;
    Ok(bytes(py, &merged))
}

/// The keys seen on more than one row, each with its first row, from one bucket's keys of every task.
#[pyfunction]
pub fn find_repeats<'py>(py: Python<'py>, buckets: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyBytes>> {
    let out = detached(py, move || {
        let keys = buckets
            .iter()
            .map(|b| Bucket::from_bytes(b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(corpus_checks::find_repeats(keys).to_bytes())
    })?;
    Ok(bytes(py, &out))
}

/// The near-duplicate candidate pairs of one bucket's band keys from every task (a band key's rows all meet
/// in one bucket, so the union over buckets is the corpus's candidates).
#[pyfunction]
pub fn near_pairs<'py>(py: Python<'py>, buckets: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyBytes>> {
    let out = detached(py, move || {
        let mut keys = Vec::new();
        for b in &buckets {
            keys.extend(Bucket::from_bytes(b)?.take_keyed(tokscan_core::passes::near_dup::NAME));
        }
        Ok(tokscan_core::passes::near_dup::pairs_to_bytes(
            &tokscan_core::passes::near_dup::pairs_of_bands(keys),
        ))
    })?;
    Ok(bytes(py, &out))
}

/// Near-duplicate clusters from every bucket's candidate pairs: the core's near-duplicate pass
/// ([`tokscan_core::passes::near_dup::task`]: the candidate rows read again from the plan's `sources`, confirmed
/// by exact Jaccard), with the merged partial for the per-category rates. Returns the pass's findings as bytes
/// for `finish_report`.
#[pyfunction]
#[pyo3(signature = (sources, profile, pairs, partial, near_dup, columns=None, threads=0))]
#[allow(clippy::too_many_arguments)]
pub fn near_duplicates<'py>(
    py: Python<'py>,
    sources: Vec<u8>,
    profile: &PyProfile,
    pairs: Vec<Vec<u8>>,
    partial: Vec<u8>,
    near_dup: crate::NearDupArgs,
    columns: Option<HashMap<String, String>>,
    threads: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    let p = crate::near_params(Some(near_dup))
        .map_err(|e| to_py(py, e))?
        .expect("given");
    let profile = profile.inner.clone();
    let out = detached(py, move || {
        let sources = plan::sources_from_bytes(&sources)?;
        let mut all = Vec::new();
        for b in &pairs {
            all.extend(tokscan_core::passes::near_dup::pairs_from_bytes(b)?);
        }
        all.sort_unstable();
        all.dedup();
        let partial = Partial::from_bytes(&partial)?;
        let found = tokscan_core::scan::with_pool(threads, || {
            tokscan_core::passes::near_dup::task(&sources, &columns, &profile, &all, &partial, &p)
        })?;
        Ok(found.to_bytes())
    })?;
    Ok(bytes(py, &out))
}

/// The hidden-state checks of a cluster scan (`--hidden-states`), run by one task: the pass's serialized
/// [`tokscan_core::passes::Findings`] the driver's `finish_report` takes.
#[pyfunction]
#[pyo3(signature = (sources, profile, hidden, columns=None, threads=0))]
pub fn hidden_states_task<'py>(
    py: Python<'py>,
    sources: Vec<u8>,
    profile: &PyProfile,
    hidden: crate::options::HiddenArgs,
    columns: Option<HashMap<String, String>>,
    threads: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    let opts = crate::options::hidden_options(hidden).map_err(|e| to_py(py, e))?;
    let profile = profile.inner.clone();
    let out = detached(py, move || {
        let sources = plan::sources_from_bytes(&sources)?;
        let found = tokscan_core::scan::with_pool(threads, || {
            tokscan_core::passes::hidden_states::task(&sources, &columns, &profile, &opts)
        })?;
        Ok(found.to_bytes())
    })?;
    Ok(bytes(py, &out))
}

/// What every resolve task needs of the merged partial summary ([`corpus_checks::Resolution`]): the
/// length-outlier fences and category majorities, the rows listed in full and the detail limit (none with
/// `summarize` false: a scan whose near duplicates join the same rows later).
#[pyfunction]
pub fn resolution<'py>(
    py: Python<'py>,
    partial: Vec<u8>,
    summarize: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = detached(py, move || {
        Ok(Resolution::of(&Partial::from_bytes(&partial)?, summarize).to_bytes())
    })?;
    Ok(bytes(py, &out))
}

/// The samples of one task's records that the corpus-wide checks flag, given every bucket's repeats and the
/// resolution: in full up to the detail limit counted from the task's first row, the rest summarized.
#[pyfunction]
pub fn resolve_flagged<'py>(
    py: Python<'py>,
    records: Vec<u8>,
    repeats: Vec<Vec<u8>>,
    resolution: Vec<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = detached(py, move || {
        let records = Records::from_bytes(&records)?;
        let mut all = Repeated::default();
        for r in &repeats {
            all.merge(Repeated::from_bytes(r)?);
        }
        let resolution = Resolution::from_bytes(&resolution)?;
        // One unit on this task's thread: no pool of one thread a core in every worker process.
        let found = tokscan_core::scan::with_pool(1, || {
            corpus_checks::resolve_units(&resolution, 1, |_| Ok(&records), &all)
        })?;
        Ok(found.to_bytes())
    })?;
    Ok(bytes(py, &out))
}

/// The report (JSON) of a corpus scanned in tasks: the merged partial, every task's resolved samples, the
/// plan's inputs, and the findings of the corpus-wide passes tasks ran (`passes`; the driver finishes the
/// others).
#[pyfunction]
#[pyo3(signature = (partial, flagged, profile, inputs, options=None, run=None, passes=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub fn finish_report(
    py: Python<'_>,
    partial: Vec<u8>,
    flagged: Vec<Vec<u8>>,
    profile: &PyProfile,
    inputs: &str,
    options: Option<&Bound<'_, PyDict>>,
    run: Option<&str>,
    passes: Vec<Vec<u8>>,
) -> PyResult<String> {
    let scan = crate::options::scan_options(options).map_err(|e| to_py(py, e))?;
    /// How the driver ran the cluster scan: `started` in seconds since the Unix epoch.
    #[derive(serde::Deserialize)]
    struct Driver {
        started: f64,
        seconds: f64,
        threads: usize,
        #[serde(flatten)]
        known: tokscan_core::report::RunInfo,
    }
    let run = match run {
        Some(text) => {
            let d: Driver = serde_json::from_str(text).map_err(|e| to_py(py, json_err(e)))?;
            let started =
                std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(d.started.max(0.0));
            Some(tokscan_core::report::RunInfo::of(
                &d.known, started, d.seconds, "ray", d.threads,
            ))
        }
        None => None,
    };
    #[derive(serde::Deserialize)]
    struct Described {
        inputs: Vec<InputInfo>,
        skipped: Vec<tokscan_core::report::SkippedInfo>,
    }
    let Described { inputs, skipped } =
        serde_json::from_str(inputs).map_err(|e| to_py(py, json_err(e)))?;
    let profile = profile.inner.clone();
    detached(py, move || {
        let partial = Partial::from_bytes(&partial)?;
        if partial.n_samples() == 0 {
            return Err(tokscan_core::scan::no_samples(&inputs));
        }
        let mut corpus = Found::default();
        for f in &flagged {
            corpus.merge(Found::from_bytes(f)?);
        }
        let done = passes
            .iter()
            .map(|b| tokscan_core::passes::Findings::from_bytes(b))
            .collect::<tokscan_core::Result<Vec<_>>>()?;
        // The local scan's last step, with what the tasks found.
        let registry = scan.passes();
        let mut report = tokscan_core::scan::finish(
            partial,
            corpus,
            &[],
            &profile,
            inputs,
            &scan,
            &registry,
            None,
            done,
            &Progress::default(),
        )?;
        report.skipped = skipped;
        report.run = run;
        serde_json::to_string(&report).map_err(|e| Error::Usage(e.to_string()))
    })
}
