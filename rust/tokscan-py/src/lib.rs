//! The `tokscan._core` extension module: a thin layer over `tokscan-core`. Long calls release the GIL,
//! core errors map to the named exceptions of `tokscan.errors`, and a Rust panic becomes
//! `tokscan.errors.InternalError` instead of crossing into Python.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokscan_core::source::ColumnNames;
use tokscan_core::Code;

mod corpus;
mod distributed;
mod errors;
mod options;
mod policy;
mod profile;
mod prompt;
mod scan;
mod validate;

pub(crate) use errors::{detached, interruptible, interruptible_ticking, raise, to_py};
pub(crate) use options::{near_params, parse_columns, NearDupArgs};
pub(crate) use profile::PyProfile;

/// The extension's own allocations (arrow-rs decode buffers above all) go through mimalloc. glibc's malloc
/// serves each multi-megabyte batch buffer with a fresh mmap and unmaps it on free, so every batch faulted
/// its pages in again: a third of a single-thread Parquet scan was kernel page-fault and page-zeroing time
/// (perf, benches/README.md). mimalloc keeps freed segments for the next batch. Python's own objects are
/// unaffected. Built without its transparent-huge-page advice (`no_thp`): with it, each page mimalloc took
/// afresh for a batch faulted in and zeroed 2 MB, 7-12 % of a two-thread Parquet scan in `clear_page`; the
/// host's own THP setting (and Python's memory) is left as it is.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    explained(py, profile, &facts, &scratch, &segments)
}

/// The dict `check_one` (and `Corpus.check_row`) returns for a checked sample.
pub(crate) fn explained<'py>(
    py: Python<'py>,
    profile: &PyProfile,
    facts: &tokscan_core::check::SampleFacts,
    scratch: &tokscan_core::check::Scratch,
    segments: &[tokscan_core::check::Segment],
) -> PyResult<Bound<'py, PyDict>> {
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
/// base, objects, bytes fetched, sparse)`; `local base` + `/` stands for `URL base` in every path of the report.
/// With `footers`, large Parquet objects are staged with only their footer and listed in `sparse` as
/// `(local file, object URL, object key, ETag, version)` for [`fill_row`].
#[pyfunction]
#[pyo3(signature = (url, dest, footers=false))]
#[allow(clippy::type_complexity)]
fn fetch_objects(
    py: Python<'_>,
    url: String,
    dest: String,
    footers: bool,
) -> PyResult<(String, String, String, usize, u64, Vec<SparseTuple>)> {
    let s = detached(py, move || {
        tokscan_core::remote::fetch(&url, std::path::Path::new(&dest), footers)
    })?;
    let lossy = |p: &std::path::Path| p.to_string_lossy().into_owned();
    Ok((
        lossy(&s.local),
        lossy(&s.local_base),
        s.url_base,
        s.objects,
        s.bytes,
        s.sparse
            .into_iter()
            .map(|x| (lossy(&x.local), x.url, x.key, x.e_tag, x.version))
            .collect(),
    ))
}

/// `(local file, object URL, object key, ETag, version)` of an object staged with only its footer.
type SparseTuple = (String, String, String, Option<String>, Option<String>);

/// Fetches into the sparse staged files (`sparse`: the tuples of `fetch_objects(footers=True)`) the byte ranges
/// reading global `row` of the corpus at `paths` needs; returns the bytes fetched (0 when the row's files are
/// whole).
#[pyfunction]
#[pyo3(signature = (paths, row, sparse, columns=None))]
fn fill_row(
    py: Python<'_>,
    paths: Vec<String>,
    row: u64,
    sparse: Vec<SparseTuple>,
    columns: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    detached(py, move || {
        let corpus = tokscan_core::Corpus::open(&paths, &columns)?;
        let (k, local) = corpus.locate(row)?;
        let staged: Vec<tokscan_core::remote::Sparse> = sparse
            .into_iter()
            .map(
                |(local, url, key, e_tag, version)| tokscan_core::remote::Sparse {
                    local: local.into(),
                    url,
                    key,
                    e_tag,
                    version,
                },
            )
            .collect();
        let wanted =
            tokscan_core::remote::needed(&staged, corpus.sources[k].as_ref(), local..local + 1)?;
        tokscan_core::remote::fill_files(&staged, &wanted)
    })
}

/// Uploads every file under `dir` to the object-store prefix `url` (refused when it holds an object already),
/// the file named `last` (at the top of `dir`) after every other: `(objects, bytes)`.
#[pyfunction]
#[pyo3(signature = (dir, url, last=None))]
fn upload_objects(
    py: Python<'_>,
    dir: String,
    url: String,
    last: Option<String>,
) -> PyResult<(usize, u64)> {
    detached(py, move || {
        tokscan_core::remote::upload(std::path::Path::new(&dir), &url, last.as_deref())
    })
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

/// The hidden-state file of corpus row `row` and what the checks find in it (`tokscan show --hidden-states`),
/// as JSON; `hidden` is the scan's `(dump directory, layout, target model, positions, minimum)`.
#[pyfunction]
#[pyo3(signature = (paths, profile, row, hidden, columns=None))]
fn hidden_state_sample(
    py: Python<'_>,
    paths: Vec<String>,
    profile: &PyProfile,
    row: u64,
    hidden: crate::options::HiddenArgs,
    columns: Option<HashMap<String, String>>,
) -> PyResult<String> {
    let columns = parse_columns(columns).map_err(|e| to_py(py, e))?;
    let opts = crate::options::hidden_options(hidden).map_err(|e| to_py(py, e))?;
    let p = profile.inner.clone();
    let found = detached(py, move || {
        let corpus = tokscan_core::Corpus::open(&paths, &columns)?;
        tokscan_core::hidden::check::inspect(&corpus, &p, &opts, row)
    })?;
    Ok(serde_json::to_string(&found).expect("plain data"))
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

/// The bytes of the regular file `path`, at most `TOKSCAN_MAX_FILE_BYTES` of them: every file Python reads whole
/// (a config, a report, a mapping) goes through the core's one reader, so a FIFO or `/dev/zero` is an
/// `InputError` naming it, never a hang or an exhausted memory.
#[pyfunction]
fn read_file<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyBytes>> {
    let data = detached(py, || tokscan_core::files::read(&path))?;
    Ok(PyBytes::new(py, &data))
}

/// The header of one hidden-state dump file (a `torch.save` zip, its gzip, or safetensors) as JSON `{path,
/// container, size, tensors: [{name, dtype, shape, offset, bytes}]}`, read without torch and without running
/// anything in the file: a pickle that would call anything but a tensor rebuild is an `InputError` naming the
/// file.
#[pyfunction]
fn hidden_state_header(py: Python<'_>, path: std::path::PathBuf) -> PyResult<String> {
    let h = detached(py, || tokscan_core::hidden::read_header(&path))?;
    Ok(serde_json::to_string(&h).expect("plain data"))
}

/// `(name, how errors list it)` of every input format, in the registry's order.
#[pyfunction]
fn formats() -> Vec<(&'static str, &'static str)> {
    tokscan_core::source::FORMATS
        .iter()
        .map(|f| (f.name, f.shown_as))
        .collect()
}

/// The docs' table of the JSON report's fields (Markdown), from the core's.
#[pyfunction]
fn report_schema_markdown() -> String {
    tokscan_core::report_schema::markdown_table(&tokscan_core::passes::report_fields())
}

/// `(names, always present)` of each row of the report's field table.
#[pyfunction]
fn report_fields() -> Vec<(Vec<&'static str>, bool)> {
    tokscan_core::passes::report_fields()
        .iter()
        .map(|f| (f.names.to_vec(), f.always))
        .collect()
}

/// The docs' table of codes (Markdown), from the core's catalogue.
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
    m.add_class::<scan::PyScan>()?;
    m.add_class::<validate::PyValidator>()?;
    m.add_class::<corpus::PyCorpus>()?;
    m.add_function(wrap_pyfunction!(codes, m)?)?;
    m.add_function(wrap_pyfunction!(max_threads, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_profiles, m)?)?;
    m.add_function(wrap_pyfunction!(profile_toml, m)?)?;
    m.add_function(wrap_pyfunction!(profile_aliases, m)?)?;
    m.add_function(wrap_pyfunction!(pretty_json, m)?)?;
    m.add_function(wrap_pyfunction!(policy::policy_statuses, m)?)?;
    m.add_function(wrap_pyfunction!(policy::policy_sample_mask, m)?)?;
    m.add_function(wrap_pyfunction!(write_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_one, m)?)?;
    m.add_function(wrap_pyfunction!(discover_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(fetch_objects, m)?)?;
    m.add_function(wrap_pyfunction!(is_object_url, m)?)?;
    m.add_function(wrap_pyfunction!(upload_objects, m)?)?;
    m.add_function(wrap_pyfunction!(fill_row, m)?)?;
    m.add_function(wrap_pyfunction!(paired_record, m)?)?;
    m.add_function(wrap_pyfunction!(hidden_state_sample, m)?)?;
    m.add_function(wrap_pyfunction!(not_checked, m)?)?;
    m.add_function(wrap_pyfunction!(code_scopes, m)?)?;
    m.add_function(wrap_pyfunction!(codes_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(formats, m)?)?;
    m.add_function(wrap_pyfunction!(report_schema_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(report_fields, m)?)?;
    m.add_function(wrap_pyfunction!(reads_tokenizer_vocabulary, m)?)?;
    m.add_function(wrap_pyfunction!(read_file, m)?)?;
    m.add_function(wrap_pyfunction!(hidden_state_header, m)?)?;
    m.add_function(wrap_pyfunction!(prompt::encode_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(prompt::render_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(prompt::check_chat_template, m)?)?;
    m.add_class::<distributed::PyTaskScan>()?;
    m.add_function(wrap_pyfunction!(distributed::plan_scan, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::merge_partials, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::find_repeats, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::resolution, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::resolve_flagged, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::finish_report, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::near_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::near_duplicates, m)?)?;
    m.add_function(wrap_pyfunction!(distributed::hidden_states_task, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SCHEMA_VERSION", tokscan_core::report::SCHEMA_VERSION)?;
    m.add("DEFAULT_PROFILE", tokscan_core::profile::DEFAULT_PROFILE)?;
    m.add("COLUMN_ROLES", ColumnNames::ROLES.to_vec())?;
    m.add("MAX_COUNTED_VOCAB", tokscan_core::vocab::MAX_COUNTED_VOCAB)?;
    m.add("FLAGGED_DETAIL", tokscan_core::scan::FLAGGED_DETAIL)?;
    // The passes' defaults, written once in the core: the API's and the CLI's defaults read them.
    m.add(
        "CONTAMINATION_N",
        tokscan_core::passes::contamination::index::DEFAULT_N,
    )?;
    let near = tokscan_core::passes::near_dup::Params::default();
    m.add(
        "NEAR_DUP_DEFAULTS",
        (near.n, near.bands, near.rows, near.threshold),
    )?;
    m.add(
        "AGREEMENT_POSITIONS",
        tokscan_core::hidden::check::AGREEMENT_POSITIONS,
    )?;
    m.add("AGREEMENT_MIN", tokscan_core::hidden::check::AGREEMENT_MIN)?;
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
