//! `tokscan._core.Scan`: one local scan, run with the GIL released while another thread polls its progress or
//! cancels it; it keeps the corpus it read for the samples asked for afterwards.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokscan_core::{Profile, Progress, ScanOptions};

use crate::{corpus, interruptible, options, raise, to_py, PyProfile};

/// One scan: configure, then `run()` (GIL released) while another thread may poll `progress()` or `cancel()`.
#[pyclass(frozen, name = "Scan", module = "tokscan._core")]
pub(crate) struct PyScan {
    input: ScanInput,
    profile: Arc<Profile>,
    options: ScanOptions,
    progress: Arc<Progress>,
    /// The corpus the last `run()` read, kept open for the samples asked for afterwards.
    kept: std::sync::Mutex<Option<Arc<tokscan_core::Corpus>>>,
}

/// What a scan reads: paths it discovers and opens, or a corpus opened already (with when the scan's `run`
/// starts: now, or when the corpus began to open).
enum ScanInput {
    Paths(Vec<String>),
    Opened(
        Arc<tokscan_core::Corpus>,
        Option<(std::time::SystemTime, std::time::Instant)>,
    ),
}

#[pymethods]
impl PyScan {
    /// `timed_from_open`: with an opened corpus, the report's `run` starts when the corpus began to open (the
    /// CLI opens it for its hint and hands it over: the run is the opening and the scan, as for paths).
    #[new]
    #[pyo3(signature = (paths, profile, options=None, timed_from_open=false))]
    fn new(
        py: Python<'_>,
        paths: &Bound<'_, PyAny>,
        profile: &PyProfile,
        options: Option<&Bound<'_, PyDict>>,
        timed_from_open: bool,
    ) -> PyResult<Self> {
        let options = options::scan_options(options).map_err(|e| to_py(py, e))?;
        let input = match paths.cast::<corpus::PyCorpus>() {
            Ok(c) => ScanInput::Opened(
                c.get().corpus(),
                timed_from_open.then(|| c.get().opened_at()),
            ),
            Err(_) => ScanInput::Paths(paths.extract().map_err(|_| {
                raise(
                    py,
                    "UsageError",
                    "paths must be a list of paths or an opened Corpus".into(),
                )
            })?),
        };
        Ok(PyScan {
            input,
            kept: std::sync::Mutex::new(None),
            profile: profile.inner.clone(),
            options,
            progress: Arc::new(Progress::default()),
        })
    }

    /// Runs the scan and returns the report as a JSON string. Ctrl-C (a pending signal on the main thread)
    /// cancels it within a batch and raises KeyboardInterrupt, with or without a progress poller.
    fn run(&self, py: Python<'_>) -> PyResult<String> {
        let (report, corpus) = interruptible(py, &self.progress, || match &self.input {
            ScanInput::Paths(paths) => {
                tokscan_core::scan_keeping(paths, &self.profile, &self.options, &self.progress)
                    .map(|(report, corpus)| (report, Arc::new(corpus)))
            }
            ScanInput::Opened(corpus, since) => tokscan_core::scan::scan_opened_since(
                corpus,
                &self.profile,
                &self.options,
                &self.progress,
                since.unwrap_or_else(|| (std::time::SystemTime::now(), std::time::Instant::now())),
            )
            .map(|report| (report, corpus.clone())),
        })?;
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(corpus);
        serde_json::to_string(&report).map_err(|e| raise(py, "InternalError", e.to_string()))
    }

    /// The corpus the last `run()` read, open (`None` before a run): its samples are fetched without
    /// discovering and opening the inputs again.
    #[getter]
    fn corpus(&self) -> Option<corpus::PyCorpus> {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(corpus::PyCorpus::shared)
    }

    /// Counters of the running scan.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let p = &self.progress;
        d.set_item("units_total", p.units_total.load(Ordering::Relaxed))?;
        d.set_item("units_done", p.units_done.load(Ordering::Relaxed))?;
        d.set_item("samples", p.samples.load(Ordering::Relaxed))?;
        d.set_item("tokens", p.tokens.load(Ordering::Relaxed))?;
        Ok(d)
    }

    /// Stops a running scan; `run()` then raises `ScanInterrupted`.
    fn cancel(&self) {
        self.progress.cancel();
    }
}
