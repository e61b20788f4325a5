//! The `tokscan._core` extension module: a thin layer over `tokscan-core`. Long calls release the GIL,
//! core errors map to the named exceptions of `tokscan.errors`, and a Rust panic becomes
//! `tokscan.errors.InternalError` instead of crossing into Python.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokscan_core::policy::{RuleValue, Status};
use tokscan_core::profile::Vocabulary;
use tokscan_core::source::ColumnNames;
use tokscan_core::{Code, Error, Policy, Profile, Progress, ScanOptions};

mod corpus;
mod distributed;
mod options;
mod prompt;
mod validate;

/// The extension's own allocations (arrow-rs decode buffers above all) go through mimalloc. glibc's malloc
/// serves each multi-megabyte batch buffer with a fresh mmap and unmaps it on free, so every batch faulted
/// its pages in again: a third of a single-thread Parquet scan was kernel page-fault and page-zeroing time
/// (perf, benches/README.md). mimalloc keeps freed segments for the next batch. Python's own objects are
/// unaffected.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Raises the `tokscan.errors` exception named `class` with `msg`.
fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    match py.import("tokscan.errors").and_then(|m| m.getattr(class)) {
        Ok(ty) => PyErr::from_type(ty.cast_into().expect("exception class"), msg),
        Err(e) => e,
    }
}

pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::NotFound { .. } => "InputNotFoundError",
        Error::Io { .. }
        | Error::InvalidInput { .. }
        | Error::Template(_)
        | Error::Remote { .. } => "InputError",
        Error::Column { .. } => "ColumnError",
        Error::Profile { .. } | Error::Tokenizer { .. } => "ProfileError",
        Error::Usage(_) => "UsageError",
        Error::Interrupted => "ScanInterrupted",
    };
    raise(py, class, e.to_string())
}

/// Runs `f` with the GIL released; a panic inside becomes `InternalError`.
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    let out = py.detach(|| catch_unwind(AssertUnwindSafe(f)));
    unwind(py, out)
}

/// How often a long call wakes to let Python run its signal handlers.
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs `f` on a worker thread with the GIL released, while the calling thread checks for signals every
/// `SIGNAL_POLL` (the polars pattern): a KeyboardInterrupt cancels `progress`, waits for `f` to stop at its
/// next batch, and is raised. Off the main thread signal checks are no-ops and this behaves like `detached`.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    progress: &Progress,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    interruptible_ticking(py, progress, f, |_| Ok(()))
}

/// [`interruptible`], calling `tick` (with the GIL) at each wake-up: a Python progress callback. An error
/// from `tick` cancels `progress` like a signal and is raised once `f` has stopped.
pub(crate) fn interruptible_ticking<T: Send>(
    py: Python<'_>,
    progress: &Progress,
    f: impl FnOnce() -> Result<T, Error> + Send,
    mut tick: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<T> {
    let (result, signal) = std::thread::scope(|s| {
        let worker = s.spawn(|| catch_unwind(AssertUnwindSafe(f)));
        let mut signal = None;
        while !worker.is_finished() {
            py.detach(|| std::thread::park_timeout(SIGNAL_POLL));
            if signal.is_none() {
                if let Err(e) = py.check_signals().and_then(|()| tick(py)) {
                    progress.cancel();
                    signal = Some(e);
                }
            }
        }
        (
            worker.join().expect("the worker's panics are caught"),
            signal,
        )
    });
    if let Some(e) = signal {
        return Err(e);
    }
    unwind(py, result)
}

/// Maps the outcome of a caught call to Python: a core error to its named exception, a panic to
/// `InternalError`.
fn unwind<T>(py: Python<'_>, out: std::thread::Result<Result<T, Error>>) -> PyResult<T> {
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(raise(
                py,
                "InternalError",
                format!("internal error (please report): {msg}"),
            ))
        }
    }
}

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

/// `(benchmark files, n-gram length, share, tokenizer directory)` of `--contamination`.
/// `near_dup=(n, bands, rows, threshold)` as the core's parameters, checked.
pub(crate) type NearDupArgs = (u32, u32, u32, f64);

pub(crate) fn near_params(
    a: Option<NearDupArgs>,
) -> tokscan_core::Result<Option<tokscan_core::neardup::Params>> {
    let Some((n, bands, rows, threshold)) = a else {
        return Ok(None);
    };
    let p = tokscan_core::neardup::Params {
        n,
        bands,
        rows,
        threshold,
    };
    p.check()?;
    Ok(Some(p))
}

pub(crate) type ContaminationArgs = (
    Vec<std::path::PathBuf>,
    usize,
    f64,
    Option<std::path::PathBuf>,
);

pub(crate) fn contamination_spec(a: ContaminationArgs) -> tokscan_core::contamination::Spec {
    tokscan_core::contamination::Spec {
        files: a.0,
        n: a.1,
        min_share: a.2,
        tokenizer: a.3,
    }
}

/// One scan: configure, then `run()` (GIL released) while another thread may poll `progress()` or `cancel()`.
#[pyclass(frozen, name = "Scan", module = "tokscan._core")]
struct PyScan {
    input: ScanInput,
    profile: Arc<Profile>,
    options: ScanOptions,
    progress: Arc<Progress>,
    /// The corpus the last `run()` read, kept open for the samples asked for afterwards.
    kept: std::sync::Mutex<Option<Arc<tokscan_core::Corpus>>>,
}

/// What a scan reads: paths it discovers and opens, or a corpus opened already.
enum ScanInput {
    Paths(Vec<String>),
    Opened(Arc<tokscan_core::Corpus>),
}

/// The draft-vocabulary options, given as JSON (`tokscan.vocab` writes it): sizes, a mapping to build, a
/// mapping to check.
pub(crate) fn parse_vocab(
    json: Option<&str>,
) -> Result<Option<tokscan_core::vocab::VocabOptions>, Error> {
    json.map(|j| {
        serde_json::from_str(j)
            .map_err(|e| Error::Usage(format!("invalid draft-vocabulary options: {e}")))
    })
    .transpose()
}

pub(crate) fn parse_columns(
    columns: Option<HashMap<String, String>>,
) -> Result<ColumnNames, Error> {
    let mut c = ColumnNames::default();
    for (role, name) in columns.unwrap_or_default() {
        c.set(&role, name)?;
    }
    Ok(c)
}

/// A `[policy]` table handed over from Python (code -> "error" | "ignore" | "0.5%" | 10), plus the legacy
/// severity overrides, parsed by the core's one policy engine.
pub(crate) fn parse_policy(
    policy: Option<&Bound<'_, PyDict>>,
    severities: Option<HashMap<String, String>>,
    fail_on: &str,
) -> Result<Policy, Error> {
    let mut entries: Vec<(String, RuleValue)> = Vec::new();
    for (code, sev) in severities.unwrap_or_default() {
        entries.push((code, RuleValue::Text(sev)));
    }
    if let Some(d) = policy {
        for (k, v) in d.iter() {
            let code: String = k.extract().map_err(|_| {
                Error::Usage(format!("policy: keys must be anomaly codes, got {k}"))
            })?;
            let value = if v.is_instance_of::<pyo3::types::PyBool>() {
                None
            } else if let Ok(n) = v.extract::<i64>() {
                Some(RuleValue::Count(n))
            } else if let Ok(t) = v.extract::<String>() {
                Some(RuleValue::Text(t))
            } else {
                None
            };
            let value = value.ok_or_else(|| {
                Error::Usage(format!(
                    "policy.{code}: expected a severity, 'ignore', a count or a rate like '0.5%', got {v}"
                ))
            })?;
            entries.push((code, value));
        }
    }
    Policy::new(entries.iter().map(|(c, v)| (c.as_str(), v)), fail_on)
}

/// Status per code (`clean`, `fails`, `below_fail_on`, `tolerated`, `ignored`) of a corpus with these counts
/// under `policy` and `fail_on`: how a loaded report is judged again (clean, --exclude, CI outputs).
#[pyfunction]
#[pyo3(signature = (counts, n_samples, policy=None, fail_on="error"))]
fn policy_statuses(
    py: Python<'_>,
    counts: HashMap<String, u64>,
    n_samples: u64,
    policy: Option<&Bound<'_, PyDict>>,
    fail_on: &str,
) -> PyResult<HashMap<&'static str, &'static str>> {
    let p = parse_policy(policy, None, fail_on).map_err(|e| to_py(py, e))?;
    let mut out = HashMap::new();
    for c in Code::ALL {
        let n = counts.get(c.as_str()).copied().unwrap_or(0);
        let status = match p.status(*c, n, n_samples) {
            Status::Clean => "clean",
            Status::Fails => "fails",
            Status::BelowFailOn => "below_fail_on",
            Status::Tolerated => "tolerated",
            Status::Ignored => "ignored",
        };
        out.insert(c.as_str(), status);
    }
    Ok(out)
}

/// Bits of the codes that make one sample bad under `policy` and `fail_on` (the Validator's rule:
/// tolerances are corpus-wide and do not apply to one sample).
#[pyfunction]
#[pyo3(signature = (policy=None, fail_on="error"))]
fn policy_sample_mask(
    py: Python<'_>,
    policy: Option<&Bound<'_, PyDict>>,
    fail_on: &str,
) -> PyResult<u64> {
    let p = parse_policy(policy, None, fail_on).map_err(|e| to_py(py, e))?;
    Ok(p.sample_mask())
}

#[pymethods]
impl PyScan {
    #[new]
    #[pyo3(signature = (paths, profile, options=None))]
    fn new(
        py: Python<'_>,
        paths: &Bound<'_, PyAny>,
        profile: &PyProfile,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let options = options::scan_options(options).map_err(|e| to_py(py, e))?;
        let input = match paths.cast::<corpus::PyCorpus>() {
            Ok(c) => ScanInput::Opened(c.get().corpus()),
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
            ScanInput::Opened(corpus) => {
                tokscan_core::scan_opened(corpus, &self.profile, &self.options, &self.progress)
                    .map(|report| (report, corpus.clone()))
            }
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

/// Checks one sample and explains it: codes, positions, lengths, completion and reasoning spans, turns,
/// special-token events and the core's segments `[(kind, start, end), ...]`, which tile the sample (see
/// `check::parse::segments`). Corpus-wide codes (duplicates, length outliers) need a scan and are not included.
#[pyfunction]
#[pyo3(signature = (profile, ids, prompt_len=None, mask=None))]
fn check_one<'py>(
    py: Python<'py>,
    profile: &PyProfile,
    ids: Vec<i64>,
    prompt_len: Option<usize>,
    mask: Option<Vec<u8>>,
) -> PyResult<Bound<'py, PyDict>> {
    let p = profile.inner.clone();
    let (facts, scratch, segments) = detached(py, move || {
        let mut scratch = tokscan_core::check::Scratch::default();
        let mut counts = vec![0u64; p.specials.len()];
        let m = mask.as_deref().map(tokscan_core::token::MaskSlice::U8);
        let f =
            tokscan_core::check::check_sample(&p, &ids, prompt_len, m, &mut scratch, &mut counts);
        let segments = tokscan_core::check::segments(&p, &ids, &scratch);
        Ok((f, scratch, segments))
    })?;
    let d = PyDict::new(py);
    let codes: Vec<&str> = tokscan_core::anomaly::codes_in(facts.flags)
        .map(|c| c.as_str())
        .collect();
    let positions = PyDict::new(py);
    for c in tokscan_core::anomaly::codes_in(facts.flags) {
        if let Some(pos) = facts.position(c) {
            positions.set_item(c.as_str(), pos)?;
        }
    }
    let l = facts.lengths;
    let lengths = PyDict::new(py);
    lengths.set_item("prompt", l.prompt)?;
    lengths.set_item("thinking", l.thinking)?;
    lengths.set_item("response", l.response)?;
    lengths.set_item("total", l.total)?;
    d.set_item("codes", codes)?;
    d.set_item("positions", positions)?;
    d.set_item("lengths", lengths)?;
    d.set_item("completion", (facts.completion.0, facts.completion.1))?;
    d.set_item("thinking", (facts.thinking.0, facts.thinking.1))?;
    d.set_item(
        "cut_in",
        facts
            .cut
            .and_then(tokscan_core::check::CutIn::from_index)
            .map(|c| c.as_str()),
    )?;
    let turns: Vec<(&str, usize, usize, usize, bool)> = scratch
        .turns
        .iter()
        .map(|t| (t.role.as_str(), t.start, t.content_start, t.end, t.clean))
        .collect();
    d.set_item("turns", turns)?;
    let specials = &profile.inner.specials;
    let events: Vec<(u32, &str)> = scratch
        .events
        .iter()
        .map(|e| (e.pos, specials[e.slot as usize].name.as_str()))
        .collect();
    d.set_item("events", events)?;
    let segments: Vec<(&str, usize, usize)> = segments
        .iter()
        .map(|s| (s.kind.as_str(), s.start, s.end))
        .collect();
    d.set_item("segments", segments)?;
    Ok(d)
}

/// The inputs a scan of `paths` would read, in scan order: `(path, format, hive category)`.
/// Fetches an object-store URL (one object or a prefix) into `dest`: `(local path to scan, local base, URL
/// base, objects, bytes)`; `local base` + `/` stands for `URL base` in every path of the report.
#[pyfunction]
fn fetch_objects(
    py: Python<'_>,
    url: String,
    dest: String,
) -> PyResult<(String, String, String, usize, u64)> {
    let s = detached(py, move || {
        tokscan_core::remote::fetch(&url, std::path::Path::new(&dest))
    })?;
    Ok((
        s.local.to_string_lossy().into_owned(),
        s.local_base.to_string_lossy().into_owned(),
        s.url_base,
        s.objects,
        s.bytes,
    ))
}

/// True for an object-store URL the core reads (`s3://`, `gs://`, `az://`).
#[pyfunction]
fn is_object_url(s: &str) -> bool {
    tokscan_core::remote::is_url(s)
}

#[pyfunction]
fn discover_inputs(
    py: Python<'_>,
    paths: Vec<String>,
) -> PyResult<Vec<(String, String, Option<String>)>> {
    let found = detached(py, move || tokscan_core::source::discover(&paths))?;
    Ok(found
        .into_iter()
        .map(|i| {
            let fmt = i.format.name();
            (
                i.path.display().to_string(),
                fmt.to_string(),
                i.hive_category,
            )
        })
        .collect())
}

/// The prompt record that pairs with global row `row` (from the prompts file beside its shards, or `prompts`)
/// as JSON `{path, line, matched_by, record, shape_agrees, tokens, first_difference?, rendered?, note?}`, or
/// `None` when no prompts file pairs with it. With `tokenizer` (a directory; `chat_template` the text of a
/// template for one without) the record is rendered and tokenized in the core and compared as `scan` does.
#[pyfunction]
#[pyo3(signature = (paths, profile, row, columns=None, prompts=None, tokenizer=None, chat_template=None))]
#[allow(clippy::too_many_arguments)]
fn paired_record(
    py: Python<'_>,
    paths: Vec<String>,
    profile: &PyProfile,
    row: u64,
    columns: Option<HashMap<String, String>>,
    prompts: Option<std::path::PathBuf>,
    tokenizer: Option<std::path::PathBuf>,
    chat_template: Option<String>,
) -> PyResult<Option<String>> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    let p = profile.inner.clone();
    let found = detached(py, move || {
        let corpus = tokscan_core::Corpus::open(&paths, &columns)?;
        let explicit: Vec<std::path::PathBuf> = prompts.into_iter().collect();
        let encoder = match &tokenizer {
            Some(dir) => {
                tokscan_core::pairing::load_encoder(dir, chat_template.as_deref()).map(Some)
            }
            None => Ok(None),
        };
        tokscan_core::pairing::paired_record(&corpus, &p, &explicit, row, encoder)
    })?;
    Ok(found.map(|r| serde_json::to_string(&r).expect("plain data")))
}

/// The most worker threads a scan starts (4 × the cores); a larger `threads` is capped to it.
#[pyfunction]
fn max_threads() -> usize {
    tokscan_core::scan::max_threads()
}

/// `(name, bit, default severity, description)` of every anomaly code.
#[pyfunction]
fn codes() -> Vec<(&'static str, u32, &'static str, &'static str)> {
    Code::ALL
        .iter()
        .map(|c| {
            (
                c.as_str(),
                *c as u32,
                c.default_severity().as_str(),
                c.description(),
            )
        })
        .collect()
}

/// The codes a scan of inputs of `layouts` with `profile` cannot check, with why (the report's
/// `not_checked`).
#[pyfunction]
fn not_checked(
    profile: &PyProfile,
    layouts: Vec<String>,
) -> std::collections::BTreeMap<String, String> {
    tokscan_core::report::not_checked(&profile.inner, layouts.iter().map(String::as_str))
}

/// Whether the core reads the vocabulary of the tokenizer at `path` itself (a `tokenizer.json`, or a directory
/// with one or with a tiktoken vocabulary), so a profile resolves against it without transformers.
#[pyfunction]
fn reads_tokenizer_vocabulary(path: std::path::PathBuf) -> bool {
    tokscan_core::profile::tokenizer_files::reads_vocabulary(&path)
}

/// `(name, how errors list it)` of every input format, in the registry's order.
#[pyfunction]
fn formats() -> Vec<(&'static str, &'static str)> {
    tokscan_core::source::FORMATS
        .iter()
        .map(|f| (f.name, f.shown_as))
        .collect()
}

/// The README's table of codes (Markdown), from the core's catalogue.
#[pyfunction]
fn codes_markdown() -> String {
    tokscan_core::anomaly::markdown_table()
}

/// Where each code is decided: `sample` (the per-sample rules), `corpus` (the corpus-wide checks: never set
/// by `Validator.check`), `source` (the input's reader: JSONL generator metadata).
#[pyfunction]
fn code_scopes() -> HashMap<&'static str, &'static str> {
    Code::ALL
        .iter()
        .map(|c| (c.as_str(), c.scope().as_str()))
        .collect()
}

/// `text` (a JSON document) re-indented by two spaces, key order kept.
#[pyfunction]
fn pretty_json(py: Python<'_>, text: &str) -> PyResult<String> {
    detached(py, || tokscan_core::json::pretty(text))
}

/// Writes the JSON document `text` to `path`, pretty-printed (the report's `--json` file).
#[pyfunction]
fn write_json(py: Python<'_>, path: std::path::PathBuf, text: &str) -> PyResult<()> {
    detached(py, || tokscan_core::json::write_pretty(&path, text))
}

/// Names of the built-in profiles.
#[pyfunction]
fn builtin_profiles() -> Vec<&'static str> {
    tokscan_core::profile::BUILTIN_PROFILES.to_vec()
}

/// A profile spec given as JSON written as a TOML profile file (`header` as comment lines first), checked
/// as a profile file is when it loads; `ProfileError` when it would not load.
#[pyfunction]
fn profile_toml(py: Python<'_>, spec_json: &str, header: &str) -> PyResult<String> {
    tokscan_core::profile::ProfileSpec::from_json(spec_json)
        .and_then(|spec| spec.to_toml(header))
        .map_err(|e| to_py(py, e))
}

/// (alias, profile) pairs: other names accepted for the built-in profiles.
#[pyfunction]
fn profile_aliases() -> Vec<(&'static str, &'static str)> {
    tokscan_core::profile::PROFILE_ALIASES.to_vec()
}

/// Panics are caught at the boundary and their message travels in the `InternalError`; the default hook
/// would also print them (with a backtrace) to stderr. Set `TOKSCAN_DEBUG=1` to see them anyway.
fn install_quiet_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("TOKSCAN_DEBUG").is_some() {
            default(info);
        }
    }));
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    install_quiet_panic_hook();
    m.add_class::<PyProfile>()?;
    m.add_class::<PyScan>()?;
    m.add_class::<validate::PyValidator>()?;
    m.add_class::<corpus::PyCorpus>()?;
    m.add_function(wrap_pyfunction!(codes, m)?)?;
    m.add_function(wrap_pyfunction!(max_threads, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_profiles, m)?)?;
    m.add_function(wrap_pyfunction!(profile_toml, m)?)?;
    m.add_function(wrap_pyfunction!(profile_aliases, m)?)?;
    m.add_function(wrap_pyfunction!(pretty_json, m)?)?;
    m.add_function(wrap_pyfunction!(policy_statuses, m)?)?;
    m.add_function(wrap_pyfunction!(policy_sample_mask, m)?)?;
    m.add_function(wrap_pyfunction!(write_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_one, m)?)?;
    m.add_function(wrap_pyfunction!(discover_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(fetch_objects, m)?)?;
    m.add_function(wrap_pyfunction!(is_object_url, m)?)?;
    m.add_function(wrap_pyfunction!(paired_record, m)?)?;
    m.add_function(wrap_pyfunction!(not_checked, m)?)?;
    m.add_function(wrap_pyfunction!(code_scopes, m)?)?;
    m.add_function(wrap_pyfunction!(codes_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(formats, m)?)?;
    m.add_function(wrap_pyfunction!(reads_tokenizer_vocabulary, m)?)?;
    m.add_function(wrap_pyfunction!(prompt::encode_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(prompt::render_prompts, m)?)?;
    m.add_class::<distributed::PyTaskScan>()?;
    m.add_function(wrap_pyfunction!(distributed::plan_scan, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::merge_partials, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::find_repeats, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::outlier_fences, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::resolve_flagged, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::finish_report, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::near_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::near_duplicates, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SCHEMA_VERSION", tokscan_core::report::SCHEMA_VERSION)?;
    m.add("DEFAULT_PROFILE", tokscan_core::profile::DEFAULT_PROFILE)?;
    m.add("COLUMN_ROLES", ColumnNames::ROLES.to_vec())?;
    m.add(
        "FAIL_ON_LEVELS",
        tokscan_core::policy::FailOn::LEVELS.to_vec(),
    )?;
    m.add(
        "SEVERITIES",
        tokscan_core::anomaly::Severity::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    )?;
    m.add(
        "SEGMENT_KINDS",
        tokscan_core::check::SegmentKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
    )?;
    m.add(
        "READABLE_SCHEMAS",
        tokscan_core::report::READABLE_SCHEMAS.to_vec(),
    )?;
    Ok(())
}
