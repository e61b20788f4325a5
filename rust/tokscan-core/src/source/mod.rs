//! Input sources. Discovery turns the user's paths into a sorted list of inputs (so results never depend
//! on the order paths were given in); each input opens as a [`Source`], which splits into independent
//! units of work (a Parquet row group, a range of NumPy samples) that yield ragged batches of token rows,
//! reads any range of rows on its own (for `show`, `align`), and writes a filtered copy of itself (for
//! `clean`): the rows a scan numbers and the rows a copy keeps come from the same reader.
//!
//! **Adding a format**: one new file in this folder implementing [`Source`] (open with validation and plan
//! the units; `read_rows`; `write_filtered`; `scan_unit` only when a unit decodes as a whole; `sample_ids`
//! when the format has ids) and declaring its [`FormatSpec`] (how a file or folder is recognised, how it
//! opens), and one line in [`format::FORMATS`]; its tests are a reader and writer unit test in its file, a
//! builder in `BUILDERS` of `tests/test_format_registry.py` (the corrupt-input suite over the registry), a
//! mutation fuzzer in `tests/fuzz.rs` (both fail for a registered format without one), and cases in the
//! layout and clean suites (`tests/test_scan_layouts.py`, `tests/test_clean_property.py`).
//! Nothing else in the core or in Python names a format.

mod fault;
pub mod format;
pub mod ipc;
pub mod jsonl;
pub mod lists;
pub mod llmc;
pub mod megatron;
pub mod numpy;
pub mod parquet;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use format::{Format, FormatSpec, Found, FORMATS};

use crate::error::{Error, Result};
use crate::profile::tokenizer_files;
use crate::sample_id::SampleId;
use crate::token::MaskSlice;

/// Names of the columns that play each role; `None` means "detect by the default name".
#[derive(Debug, Clone, Default)]
pub struct ColumnNames {
    pub input_ids: Option<String>,
    pub prompt_ids: Option<String>,
    pub output_ids: Option<String>,
    pub loss_mask: Option<String>,
    /// Labels read as the loss mask (-100 = 0) when there is no loss mask.
    pub labels: Option<String>,
    pub sample_id: Option<String>,
    pub category: Option<String>,
}

impl ColumnNames {
    /// The roles a column can be given (`--column ROLE=NAME`, `[columns]` in the config).
    pub const ROLES: [&'static str; 7] = [
        "input_ids",
        "prompt_ids",
        "output_ids",
        "loss_mask",
        "labels",
        "sample_id",
        "category",
    ];

    /// Names the column that plays `role`.
    pub fn set(&mut self, role: &str, name: String) -> Result<()> {
        let slot = match role {
            "input_ids" => &mut self.input_ids,
            "prompt_ids" => &mut self.prompt_ids,
            "output_ids" => &mut self.output_ids,
            "loss_mask" => &mut self.loss_mask,
            "labels" => &mut self.labels,
            "sample_id" => &mut self.sample_id,
            "category" => &mut self.category,
            _ => {
                let hint = crate::policy::did_you_mean(role, ColumnNames::ROLES);
                return Err(Error::Usage(format!(
                    "unknown column role {role:?} (roles: {}){hint}",
                    ColumnNames::ROLES.join(", ")
                )));
            }
        };
        *slot = Some(name);
        Ok(())
    }
}

/// Category of samples that have none (no column, no `category=` folder, no meta.parquet).
pub const DEFAULT_CATEGORY: &str = "default";

/// A unit of parallel work inside one source: `rows` rows starting at local row `first_row`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitSpan {
    pub first_row: u64,
    pub rows: u64,
}

/// Target tokens per unit of work of the formats whose rows are ranges of one flat token array.
const UNIT_TOKENS: i64 = 1 << 22;
/// Rows per unit at most: a unit's per-sample records (~100 bytes each) are held until it ends, so a unit of
/// millions of very short samples would hold hundreds of megabytes per worker.
const UNIT_MAX_ROWS: usize = 1 << 17;

/// Consecutive rows of about [`UNIT_TOKENS`] tokens and at most [`UNIT_MAX_ROWS`] rows (at least one row
/// each), covering every row, from the rows' token offsets (`offs.len()` = rows + 1): the units of NumPy, JSONL,
/// Megatron and llm.c sources.
pub(crate) fn split_units(offs: &[i64]) -> Vec<UnitSpan> {
    let rows = offs.len() - 1;
    let mut units = Vec::new();
    let mut start = 0;
    while start < rows {
        let mut end = start + 1;
        while end < rows && end - start < UNIT_MAX_ROWS && offs[end] - offs[start] < UNIT_TOKENS {
            end += 1;
        }
        units.push(UnitSpan {
            first_row: start as u64,
            rows: (end - start) as u64,
        });
        start = end;
    }
    units
}

/// Bytes `.1` of file `.0`: a piece of an input that reading some of its rows needs ([`Source::byte_ranges`]).
pub type FileRange = (PathBuf, std::ops::Range<u64>);

/// One opened input of any format. Everything above this trait (the scan, the corpus, the binding) is
/// format-agnostic.
pub trait Source: Send + Sync {
    fn path(&self) -> &Path;
    fn format(&self) -> Format;
    /// Which columns/arrays play which role, e.g. `input_ids+loss_mask`.
    fn layout(&self) -> String;
    fn rows(&self) -> u64;
    /// Tokens in the source when known from metadata alone (for progress), else `None`.
    fn tokens_hint(&self) -> Option<u64>;
    /// The units of parallel work, in row order, covering every row once (planned at open).
    fn units(&self) -> &[UnitSpan];
    /// Decodes unit `unit` (an index into [`Source::units`]) batch by batch. By default its rows through
    /// [`Source::read_rows`]; a format that decodes a unit as a whole (a Parquet row group, an IPC record
    /// batch) overrides it.
    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let u = self.units()[unit];
        self.read_rows(u.first_row, u.first_row + u.rows, f)
    }
    /// Decodes local rows `[start, end)`, reading as little else as the format allows.
    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()>;
    /// The sample id of every row (reading only that column), or `None` when the source has none. A format
    /// that can carry an id column must override this default, or finding a sample by id (`Corpus::find`,
    /// `show --sample-id`, `align`) will not see them.
    fn sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        Ok(None)
    }
    /// An error when a memory-mapped file of the input is now shorter than when it was mapped (reading the
    /// lost pages would kill the process with SIGBUS). The scan asks before and after each unit; a format
    /// that maps nothing keeps this default.
    fn unchanged(&self) -> Result<()> {
        Ok(())
    }
    /// Something about the input the report should say though it reads (an Arrow stream without its end
    /// marker), or `None`.
    fn warning(&self) -> Option<String> {
        None
    }
    /// The byte ranges of the input's files that reading local rows `rows` needs besides what opening the
    /// input read (a Parquet footer, a `.npy` header and the offsets), or `None` when the format reads its
    /// files whole: what an object-store input staged sparse fetches to show one sample or scan one task's
    /// units (`remote::fill_files`).
    fn byte_ranges(&self, _rows: std::ops::Range<u64>) -> Option<Vec<FileRange>> {
        None
    }
    /// Writes a copy of this source at `out` (the path that stands for it, like [`Source::path`]) holding
    /// exactly the rows where `keep[row]` (`keep.len()` = [`Source::rows`]), in the same format and layout:
    /// kept rows byte-identical where the format allows, any index or header rebuilt, compression kept. A
    /// copy with no row is a valid empty file of the format that re-scans, or, for a format that has none
    /// (JSONL), not written at all (`WriteStats::omitted` says why). Never overwrites a file.
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats>;
}

/// What [`Source::write_filtered`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Rows written (the kept rows).
    pub rows: u64,
    /// Every file or directory written, the one that stands for the copy first; empty when the copy was
    /// left out (see `omitted`).
    pub files: Vec<PathBuf>,
    /// Why no copy was written, when none was: it would hold no row, or no row the format can read back
    /// (a JSONL copy of malformed lines alone), and the format has no valid file for that.
    pub omitted: Option<String>,
}

/// The length a memory-mapped input had when it was mapped, with the file kept open to compare (`fstat`, as
/// pre-access size checks do in other mmap readers), and the map's registration with the SIGBUS handler
/// ([`fault`]): a page of a map beyond the file's current end raises SIGBUS when touched. A file that shrank
/// between two units of work is caught before the next unit reads it; one cut while a unit reads its pages
/// reads zeros there (the handler's doing) and is caught by the check after the unit. Declare the guard before
/// the map in the struct that owns both, so that the registration ends before the pages are unmapped.
pub(crate) struct MapGuard {
    file: std::fs::File,
    len: u64,
    path: PathBuf,
    registration: fault::Registration,
}

impl MapGuard {
    /// The guard of `map`, a map of `file` made after its length was read as `opened_len` (what the reader
    /// checked its header, index or footer against). A map is as long as the file when it was made: one
    /// shorter than `opened_len` is of a file cut in between, refused as shrunk.
    pub(crate) fn new(
        file: &std::fs::File,
        path: &Path,
        map: &memmap2::Mmap,
        opened_len: u64,
    ) -> Result<Self> {
        if (map.len() as u64) < opened_len {
            return Err(shrank(path, opened_len, map.len() as u64));
        }
        Ok(MapGuard {
            file: file.try_clone().map_err(|e| Error::io(path, e))?,
            len: map.len() as u64,
            path: path.to_path_buf(),
            registration: fault::Registration::new(map.as_ptr(), map.len()),
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        let now = self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.path, e))?
            .len();
        if now < self.len || self.registration.faulted() {
            return Err(shrank(&self.path, self.len, now));
        }
        Ok(())
    }
}

/// Drops this process's page-table entries for the pages of `map` wholly inside its bytes `[start, end)`, once
/// a scan has read them. The pages stay in the page cache and the map stays valid: reading them again faults the
/// same bytes back in. Done unit by unit in the scan's workers, this is the work unmapping a 1 GB `tokens.npy`
/// did in one thread when the scan's corpus was closed (35–50 ms of a 0.3 s scan), and the scan's resident size
/// stays at what its workers hold instead of the whole file. Best effort: an error only leaves pages mapped.
pub(crate) fn release_pages(map: &memmap2::Mmap, start: usize, end: usize) {
    // A multiple of every page size Linux uses (4, 16 and 64 KiB), so that the range is page-aligned.
    const ALIGN: usize = 1 << 16;
    let start = start.min(map.len()).next_multiple_of(ALIGN);
    let end = end.min(map.len()) / ALIGN * ALIGN;
    if end > start {
        // SAFETY: a read-only shared map of a file: MADV_DONTNEED drops page-table entries and a later read
        // faults the file's same bytes back in (inputs are not modified during a scan, as for every map), so no
        // reference into the map sees its contents change.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
    }
}

/// The input error of a file found shorter than when it was opened.
pub(crate) fn shrank(path: &Path, from: u64, to: u64) -> Error {
    Error::invalid(
        path,
        format!("the file shrank from {from} to {to} bytes while being read (inputs must not change during a scan)"),
    )
}

/// Creates `path` for writing, refusing one that exists: an output file is never written twice, and an
/// input is never overwritten.
pub(crate) fn create_new(path: &Path) -> Result<std::io::BufWriter<std::fs::File>> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map(|f| std::io::BufWriter::with_capacity(1 << 20, f))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Error::Usage(format!(
                "{}: already exists (tokscan never overwrites a file)",
                path.display()
            )),
            // An output, not an input: its directory is what is missing.
            std::io::ErrorKind::NotFound => Error::Usage(format!(
                "{}: cannot write it: the directory {} does not exist",
                path.display(),
                match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.display().to_string(),
                    _ => ".".to_string(),
                }
            )),
            _ => Error::io(path, e),
        })
}

/// Finishes a file written through [`create_new`], so that a full disk is an error naming it.
pub(crate) fn finish(path: &Path, w: std::io::BufWriter<std::fs::File>) -> Result<()> {
    use std::io::Write;
    let mut f = w
        .into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?;
    f.flush().map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

/// The runs of kept rows, `[start, end)`, in order.
pub(crate) fn kept_runs(keep: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < keep.len() {
        if keep[i] {
            let start = i;
            while i < keep.len() && keep[i] {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// Writes the kept rows of a flat array to `w`, run by run: row `i` is elements `offs[i]..offs[i + 1]` of
/// `data` (elements of `elem` bytes). Returns the elements written.
pub(crate) fn copy_kept(
    path: &Path,
    w: &mut impl std::io::Write,
    data: &[u8],
    offs: &[i64],
    elem: usize,
    keep: &[bool],
) -> Result<u64> {
    let mut written = 0u64;
    for (a, b) in kept_runs(keep) {
        let (lo, hi) = (offs[a] as usize, offs[b] as usize);
        w.write_all(&data[lo * elem..hi * elem])
            .map_err(|e| Error::io(path, e))?;
        written += (hi - lo) as u64;
    }
    Ok(written)
}

/// Checks that `keep` has one entry per row of `source`.
pub fn check_keep(source: &dyn Source, keep: &[bool]) -> Result<()> {
    if keep.len() as u64 != source.rows() {
        return Err(Error::Usage(format!(
            "{}: {} keep flags for {} rows",
            source.path().display(),
            keep.len(),
            source.rows()
        )));
    }
    Ok(())
}

/// Opens `input` with the reader of its format, validating headers and schemas.
pub fn open(input: &Input, columns: &ColumnNames) -> Result<Box<dyn Source>> {
    (input.format.spec().open)(&input.path, columns)
}

/// One input found by discovery.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: PathBuf,
    pub format: Format,
    /// From a hive-style `category=NAME` folder on the way to the file.
    pub hive_category: Option<String>,
}

/// A borrowed flat token array of any supported element type.
#[derive(Debug, Clone, Copy)]
pub enum Tokens<'a> {
    U16(&'a [u16]),
    U32(&'a [u32]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U64(&'a [u64]),
}

/// Evaluates `$e` with `$s` bound to the typed slice inside a [`Tokens`] (the one place that lists the
/// storage types; every per-type dispatch goes through it).
macro_rules! with_tokens {
    ($t:expr, $s:ident => $e:expr) => {
        match $t {
            $crate::source::Tokens::U16($s) => $e,
            $crate::source::Tokens::U32($s) => $e,
            $crate::source::Tokens::I32($s) => $e,
            $crate::source::Tokens::I64($s) => $e,
            $crate::source::Tokens::U64($s) => $e,
        }
    };
}
pub(crate) use with_tokens;

impl Tokens<'_> {
    pub fn len(&self) -> usize {
        with_tokens!(self, s => s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Row boundaries of a ragged array: row `i` is `values[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, Copy)]
pub enum Offsets<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl Offsets<'_> {
    pub fn rows(&self) -> usize {
        match self {
            Offsets::I32(o) => o.len().saturating_sub(1),
            Offsets::I64(o) => o.len().saturating_sub(1),
        }
    }

    /// Row `i`'s range; sources validate offsets before handing them out.
    #[inline]
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        match self {
            Offsets::I32(o) => o[i] as usize..o[i + 1] as usize,
            Offsets::I64(o) => o[i] as usize..o[i + 1] as usize,
        }
    }
}

/// A ragged token column.
#[derive(Debug, Clone, Copy)]
pub struct Ragged<'a> {
    pub values: Tokens<'a>,
    pub offsets: Offsets<'a>,
}

/// A ragged loss-mask column.
#[derive(Debug, Clone, Copy)]
pub struct RaggedMask<'a> {
    pub values: MaskSlice<'a>,
    pub offsets: Offsets<'a>,
}

/// Rows handed from a source to the checker. With `prompt`, `ids` holds the completions (`output_ids`)
/// and each sample is the prompt row followed by the output row.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub ids: Ragged<'a>,
    pub prompt: Option<Ragged<'a>>,
    pub mask: Option<RaggedMask<'a>>,
    /// Per-row sample ids, when the source has them.
    pub sample_ids: Option<&'a [Option<SampleId>]>,
    /// Per-row category names, when the source has them per row.
    pub categories: Option<&'a [Option<String>]>,
    /// Rows whose token list is null (scanned as empty sequences).
    pub null_rows: Option<&'a [bool]>,
    /// Per-row findings of the source itself (a malformed JSONL line, generator metadata).
    pub findings: Option<&'a [Finding]>,
}

/// What the generator said about how a completion ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Finish {
    #[default]
    Unknown,
    /// It stopped on its own (`stop`, an EOS or a stop string).
    Stop,
    /// It hit the length limit.
    Length,
}

/// Findings a source makes about one row before the checker sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Finding {
    /// The row is a line that could not be read as a sample: its 1-based line number.
    pub malformed_line: Option<u32>,
    pub finish: Finish,
    /// Token counts in the generator's metadata disagree with the ids.
    pub count_mismatch: bool,
}

impl Batch<'_> {
    pub fn rows(&self) -> usize {
        self.ids.offsets.rows()
    }
}

/// A file or folder a directory scan left aside, and why (listed in the report, never dropped in silence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// Why a file in a folder is skipped when no format reads it: a note, a config, a `dataset_dict.json` (what
/// `clean` copies beside the cleaned inputs, unlike the other files discovery leaves aside).
pub const NOT_A_CORPUS_FILE: &str = "not a corpus file (no known format)";

/// Why a prompts file found in a folder does not pair: the folder holds another that does, or several and none
/// named `prompts.jsonl` (the start of the reason; `clean` copies these beside the cleaned inputs too).
pub const UNPAIRED_PROMPTS_FILE: &str = "a prompts file that does not pair";

/// The name a folder's prompts file has when it holds several: `prompts.jsonl` or `prompts.ndjson`, optionally
/// `.gz` / `.zst` (not `prompts.old.jsonl`).
fn is_conventional_prompts_name(path: &Path) -> bool {
    let Some(n) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let n = [".gz", ".zst", ".zstd"]
        .iter()
        .find_map(|z| n.strip_suffix(z))
        .unwrap_or(n);
    n == "prompts.jsonl" || n == "prompts.ndjson"
}

/// One prompts file per folder: where a folder holds several (`prompts.jsonl` beside `prompts_edited.jsonl`,
/// an old copy kept beside the real one), the one named `prompts.jsonl` pairs and the others are listed as
/// skipped; with several and none of that name, none pairs (which one is meant is the user's to say), and that
/// folder is returned in `unpaired` so that its shards pair with no file above it either. Two files never pair
/// the same samples.
fn one_prompts_file_per_folder(
    prompts: Vec<PromptsFile>,
    skipped: &mut Vec<Skipped>,
    unpaired: &mut Vec<PathBuf>,
) -> Vec<PromptsFile> {
    let mut by_dir: BTreeMap<PathBuf, Vec<PromptsFile>> = BTreeMap::new();
    for p in prompts {
        by_dir.entry(p.dir.clone()).or_default().push(p);
    }
    let mut out = Vec::new();
    for (_, mut files) in by_dir {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.len() == 1 {
            out.extend(files);
            continue;
        }
        let named: Vec<usize> = (0..files.len())
            .filter(|&i| is_conventional_prompts_name(&files[i].path))
            .collect();
        let keep = (named.len() == 1).then(|| named[0]);
        if keep.is_none() {
            unpaired.push(files[0].dir.clone());
        }
        let why = match keep {
            Some(k) => format!(
                "{UNPAIRED_PROMPTS_FILE}: {} is this folder's prompts file; pass --prompts to use this one",
                format::file_name(&files[k].path)
            ),
            None => format!(
                "{UNPAIRED_PROMPTS_FILE}: one of {} prompts files in this folder and {} named prompts.jsonl; \
                 pass --prompts to choose one",
                files.len(),
                if named.is_empty() { "none" } else { "more than one" }
            ),
        };
        for (i, f) in files.into_iter().enumerate() {
            if Some(i) == keep {
                out.push(f);
            } else {
                skipped.push(Skipped {
                    path: f.path,
                    reason: why.clone(),
                });
            }
        }
    }
    out
}

/// A prompts file found beside the shards (`{"id"?, "messages": [...], "tools"?: [...]}` per line): it pairs
/// with the inputs under its folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptsFile {
    pub path: PathBuf,
    /// The folder whose inputs it pairs with.
    pub dir: PathBuf,
    /// The folder is below a path the user named, so its name is the category of its inputs (a prompts file
    /// at the top of the scan names none).
    pub names_category: bool,
}

/// What discovery found: the inputs to read (sorted by path), the prompts files beside them and what it left
/// aside.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub inputs: Vec<Input>,
    pub prompts: Vec<PromptsFile>,
    /// Folders whose several prompts files do not pair ([`crate::corpus::Corpus::unpaired_prompt_dirs`]).
    pub unpaired_prompt_dirs: Vec<PathBuf>,
    pub skipped: Vec<Skipped>,
}

/// Expands the user's paths (files, directories searched recursively, globs) into sorted inputs.
pub fn discover(paths: &[String]) -> Result<Vec<Input>> {
    discover_all(paths).map(|d| d.inputs)
}

/// Expands the user's paths into sorted inputs, the prompts files found in the folders searched, and what
/// was left aside. A file named explicitly is read strictly (its reader says what is wrong with it); a folder
/// is read as it is laid out: shards are inputs, a JSONL file whose records carry `messages` and no token ids
/// is a prompts file, and anything else is listed as skipped with the reason. The same file reached twice
/// (a symlink, a hard link, overlapping paths) is read once.
pub fn discover_all(paths: &[String]) -> Result<Discovery> {
    if paths.is_empty() {
        return Err(Error::Usage("no input paths given".into()));
    }
    let mut w = Walk::default();
    for p in paths {
        let path = Path::new(p);
        if path.exists() {
            w.path(path, path)?;
        } else if let Some((input, format)) = FORMATS
            .iter()
            .find_map(|f| (f.prefix)(path).map(|input| (input, Format::of(f))))
        {
            // A path that names an input without being a file (a Megatron data prefix).
            w.push(path, input, format, path);
        } else if p.contains(['*', '?', '[']) {
            let matches =
                glob::glob(p).map_err(|e| Error::Usage(format!("{p}: bad glob pattern: {e}")))?;
            let mut any = false;
            for m in matches {
                let m = m.map_err(|e| Error::io(e.path(), std::io::Error::other(e.to_string())))?;
                any = true;
                w.path(&m, &m)?;
            }
            if !any {
                return Err(Error::Usage(format!("{p}: no files match")));
            }
        } else {
            return Err(Error::NotFound {
                path: path.to_path_buf(),
            });
        }
    }
    // Several folders named, each with its prompts file (`scan data/B1_code data/B2_math`): each is a category,
    // as it is when their parent is named; one folder named is the whole scan, and its name none.
    if w.roots.len() > 1 {
        for p in &mut w.prompts {
            p.names_category = true;
        }
    }
    let mut d = Discovery {
        inputs: w.inputs,
        prompts: Vec::new(),
        unpaired_prompt_dirs: Vec::new(),
        skipped: w.skipped,
    };
    d.inputs.sort_by(|a, b| a.path.cmp(&b.path));
    d.inputs.dedup_by(|a, b| a.path == b.path);
    // A folder holding a prompts file names the category of the shards under it (unless a `category=NAME`
    // folder already does): the drafter layout `data/B1_glaive/{shards, prompts.jsonl}`. So it does when its
    // prompts files do not pair (several, none named prompts.jsonl).
    for i in &mut d.inputs {
        if i.hive_category.is_none() {
            i.hive_category = prompts_for(&w.prompts, &i.path)
                .filter(|p| p.names_category)
                .and_then(|p| p.dir.file_name())
                .map(|n| n.to_string_lossy().into_owned());
        }
    }
    d.prompts = one_prompts_file_per_folder(w.prompts, &mut d.skipped, &mut d.unpaired_prompt_dirs);
    d.prompts.sort_by(|a, b| a.path.cmp(&b.path));
    d.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(d)
}

/// The prompts file that pairs with the input at `path`: the one in its nearest folder.
pub fn prompts_for<'p>(prompts: &'p [PromptsFile], path: &Path) -> Option<&'p PromptsFile> {
    prompts
        .iter()
        .filter(|p| path.starts_with(&p.dir) && path != p.dir)
        .max_by_key(|p| p.dir.components().count())
}

/// [`prompts_for`], unless a folder nearer the input holds prompts files none of which pairs (`unpaired`).
pub fn paired_prompts_for<'p>(
    prompts: &'p [PromptsFile],
    unpaired: &[PathBuf],
    path: &Path,
) -> Option<&'p PromptsFile> {
    let found = prompts_for(prompts, path)?;
    let depth = found.dir.components().count();
    let nearer = unpaired
        .iter()
        .any(|d| path.starts_with(d) && d.components().count() > depth);
    (!nearer).then_some(found)
}

/// Discovery's state: what it found so far and the files it has already taken (by device and inode, so a
/// file reached twice through a symlink or a hard link is read once).
#[derive(Default)]
struct Walk {
    inputs: Vec<Input>,
    prompts: Vec<PromptsFile>,
    skipped: Vec<Skipped>,
    /// Each folder walked (canonical), with the named path whose walk met it first (its index in `named`).
    dirs: std::collections::HashMap<PathBuf, usize>,
    /// Folders met again that an earlier named path's walk had met (named twice, inside or around a folder
    /// named before); a symlink loop within one walk is not counted.
    revisits: u64,
    /// The folders named (canonical; each folder a glob matches counts), and how many paths were named.
    roots: HashSet<PathBuf>,
    named: usize,
    files: std::collections::HashMap<(u64, u64), PathBuf>,
}

/// A file's identity: `(device, inode)` where the platform has them, else its canonical path's hash.
pub(crate) fn file_key(path: &Path, meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = path;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        (
            0,
            xxhash_rust::xxh3::xxh3_64(canon.to_string_lossy().as_bytes()),
        )
    }
}

impl Walk {
    /// What a folder that is (or lists) inputs holds besides them and the files its format reads there: a
    /// prompts file is taken as one (a category folder that is itself a NumPy corpus), anything else is listed
    /// as skipped, hidden files as in any folder: nothing in it is passed over in silence.
    fn skip_unread(
        &mut self,
        root: &Path,
        dir: &Path,
        inputs: &[PathBuf],
        f: &FormatSpec,
    ) -> Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let read = inputs.contains(&entry) || f.folder_files.contains(&name.as_str());
            if read || self.skip_hidden(&entry, &name) {
                continue;
            }
            if entry.is_file() && matches!((jsonl::FORMAT.found)(&entry)?, Found::Prompts) {
                self.take_prompts(root, dir, &entry);
            } else {
                self.skip(&entry, f.folder_skip);
            }
        }
        Ok(())
    }

    /// Lists `entry` as skipped when its name marks it hidden (`.git`, `_SUCCESS`, `.cache`: metadata, not
    /// shards); says whether it did.
    fn skip_hidden(&mut self, entry: &Path, name: &str) -> bool {
        let hidden = name.starts_with('.') || name.starts_with('_');
        if hidden {
            self.skip(entry, "hidden (name starts with '.' or '_')");
        }
        hidden
    }

    /// Takes `entry`, found in `dir`, as a prompts file (it names the category of a folder below the root).
    fn take_prompts(&mut self, root: &Path, dir: &Path, entry: &Path) {
        self.prompts.push(PromptsFile {
            path: entry.to_path_buf(),
            dir: dir.to_path_buf(),
            names_category: dir != root,
        });
    }

    fn skip(&mut self, path: &Path, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason: reason.into(),
        });
    }

    /// Takes `path` as an input of `format` unless the same file was taken already (then it is listed as
    /// skipped, naming the first path).
    fn push(&mut self, root: &Path, path: PathBuf, format: Format, hive_from: &Path) {
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.is_file() {
                let key = file_key(&path, &meta);
                if let Some(first) = self.files.get(&key) {
                    if first != &path {
                        let why = format!("the same file as {}", first.display());
                        self.skip(&path, why);
                    }
                    return;
                }
                self.files.insert(key, path.clone());
            }
        }
        self.inputs.push(Input {
            path,
            format,
            hive_category: hive_category(root, hive_from),
        });
    }

    /// A path the user named (or a glob matched): strict for a file, laid-out reading for a folder.
    fn path(&mut self, root: &Path, path: &Path) -> Result<()> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        self.named += 1;
        if meta.is_dir() {
            self.roots
                .insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        }
        if meta.is_file() {
            // A file named explicitly is recognised by its content, else its name; anything else is refused
            // with the list of formats.
            let Some(format) = sniff_file(path)? else {
                let why = format!(
                    "not a corpus file (no known format: {})",
                    format::formats_list()
                );
                return Err(Error::invalid(path, why));
            };
            self.push(root, (format.spec().input_path)(path), format, path);
            return Ok(());
        }
        if !meta.is_dir() {
            return Err(Error::invalid(
                path,
                "not a regular file or directory (a FIFO, socket or device is not read)",
            ));
        }
        // A folder named twice, inside or around one named before, was (partly) read then: its inputs are not
        // new, and that is no reason to say it holds no corpus.
        let (before, met_before) = (self.inputs.len(), self.revisits);
        self.dir(root, path)?;
        if self.inputs.len() == before && path == root && self.revisits == met_before {
            return Err(Error::invalid(
                path,
                format!("no corpus found ({})", format::formats_list()),
            ));
        }
        Ok(())
    }

    /// A folder, read as it is laid out.
    fn dir(&mut self, root: &Path, path: &Path) -> Result<()> {
        let canon = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        if let Some(&first) = self.dirs.get(&canon) {
            // A directory reached twice: through overlapping named paths, or a symlink loop in this walk.
            self.revisits += u64::from(first + 1 != self.named);
            return Ok(());
        }
        self.dirs.insert(canon, self.named - 1);
        for f in FORMATS {
            if let Some(inputs) = (f.folder)(path)? {
                for input in &inputs {
                    self.push(root, input.clone(), Format::of(f), input);
                }
                self.skip_unread(root, path, &inputs, f)?;
                return Ok(());
            }
        }
        if path != root && tokenizer_files::is_tokenizer_dir(path) {
            self.skip(path, "a tokenizer directory");
            return Ok(());
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::io(path, e))?
            .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(path, e)))
            .collect::<Result<_>>()?;
        entries.sort();
        let tokenizer_here = path == root && tokenizer_files::is_tokenizer_dir(path);
        for entry in entries {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if self.skip_hidden(&entry, &name) {
                continue;
            }
            let meta = match std::fs::metadata(&entry) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.skip(&entry, "a broken symbolic link");
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(ELOOP) => {
                    self.skip(&entry, "a symbolic link loop");
                    continue;
                }
                Err(e) => return Err(Error::io(&entry, e)),
            };
            if meta.is_dir() {
                self.dir(root, &entry)?;
                continue;
            }
            if !meta.is_file() {
                self.skip(
                    &entry,
                    "not a regular file (a FIFO, socket or device is not read)",
                );
                continue;
            }
            if tokenizer_here && tokenizer_files::is_tokenizer_file(&name) {
                self.skip(&entry, "a tokenizer file");
                continue;
            }
            self.file(root, path, &entry)?;
        }
        Ok(())
    }

    /// A file met in `dir`: the first format that claims it says what it is.
    fn file(&mut self, root: &Path, dir: &Path, entry: &Path) -> Result<()> {
        for f in FORMATS {
            match (f.found)(entry)? {
                Found::No => continue,
                Found::Input(input) => self.push(root, input, Format::of(f), entry),
                Found::Part => {}
                Found::Prompts => self.take_prompts(root, dir, entry),
                Found::Refused(why) => self.skip(entry, why),
            }
            return Ok(());
        }
        self.skip(entry, NOT_A_CORPUS_FILE);
        Ok(())
    }
}

/// The error a symbolic link loop gives (`ELOOP`; 40 on Linux, 62 on macOS and the BSDs).
#[cfg(any(
    target_os = "macos",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
))]
const ELOOP: i32 = 62;
#[cfg(not(any(
    target_os = "macos",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
)))]
const ELOOP: i32 = 40;

/// The innermost `category=NAME` folder on the path, if any.
fn hive_category(_root: &Path, path: &Path) -> Option<String> {
    path.components()
        .filter_map(|c| {
            c.as_os_str()
                .to_str()
                .and_then(|s| s.strip_prefix("category="))
        })
        .next_back()
        .map(str::to_string)
}

/// The first bytes of a file (enough to recognise every format by its content).
fn head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]).map_err(|e| Error::io(path, e))? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// The format of a file named explicitly: the first whose sniffer recognises its content (and path), else the
/// first whose name it has; `None` when neither says.
fn sniff_file(path: &Path) -> Result<Option<Format>> {
    let head = head(path)?;
    let name = format::file_name(path);
    Ok(FORMATS
        .iter()
        .find(|f| (f.sniff)(&head, path))
        .or_else(|| FORMATS.iter().find(|f| (f.named)(&name)))
        .map(|f| Format::of(f)))
}

/// A path as the report names it: as it is when it is valid UTF-8, else with each byte that is not written
/// `\xNN` (`b\xff.parquet`), so a file whose name is not UTF-8 is named unambiguously, not with `�`.
pub fn path_text(path: &Path) -> String {
    #[cfg(unix)]
    {
        use std::fmt::Write;
        use std::os::unix::ffi::OsStrExt;
        if let Some(s) = path.to_str() {
            return s.to_string();
        }
        let mut out = String::new();
        for chunk in path.as_os_str().as_bytes().utf8_chunks() {
            out.push_str(chunk.valid());
            for b in chunk.invalid() {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
        out
    }
    #[cfg(not(unix))]
    {
        path.display().to_string()
    }
}

/// Picks the typed slice out of a [`Tokens`] when its element type is `Self`.
pub trait FromTokens: Sized {
    fn pick(t: Tokens<'_>) -> Option<&[Self]>;
}

macro_rules! from_tokens {
    ($($t:ty => $v:ident),*) => { $(
        impl FromTokens for $t {
            fn pick(t: Tokens<'_>) -> Option<&[Self]> {
                match t { Tokens::$v(s) => Some(s), _ => None }
            }
        }
    )* };
}
from_tokens!(u16 => U16, u32 => U32, i32 => I32, i64 => I64, u64 => U64);

#[cfg(all(test, unix))]
mod map_guard_tests {
    use super::*;

    /// A file cut after its reader read its length, but before it was mapped, maps shorter: the guard names
    /// the cut (a reader trusting the length it checked its header against would slice past the map's end).
    #[test]
    fn a_map_shorter_than_the_length_read_at_open_is_a_shrunk_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a test file only this test reads.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        assert!(MapGuard::new(&file, &path, &map, 8192).is_ok());
        let err = MapGuard::new(&file, &path, &map, 80_000_128)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("shrank from 80000128 to 8192 bytes"), "{err}");
    }
}

#[cfg(test)]
mod create_new_tests {
    use super::*;

    /// An output in a directory that does not exist is a usage error naming the directory (not an input's
    /// "no such file"); an existing file is never replaced.
    #[test]
    fn an_output_names_its_missing_directory_and_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nodir").join("part-0.parquet");
        let err = create_new(&out).expect_err("refused");
        assert!(matches!(err, Error::Usage(_)), "{err:?}");
        let want = format!(
            "the directory {} does not exist",
            dir.path().join("nodir").display()
        );
        assert!(err.to_string().contains(&want), "{err}");
        let there = dir.path().join("x.bin");
        std::fs::write(&there, b"kept").unwrap();
        let err = create_new(&there).expect_err("refused");
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(std::fs::read(&there).unwrap(), b"kept");
    }
}

#[cfg(test)]
mod overlap_tests {
    use super::*;

    /// A folder named twice, or beside a folder inside it (in either order), is read once: the second naming
    /// was "no corpus found" because it found no input that was not taken already.
    #[test]
    fn overlapping_folders_are_read_once_and_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(
            data.join("sub").join("a.jsonl"),
            "{\"input_ids\": [1, 2]}\n",
        )
        .unwrap();
        let (d, sub) = (
            data.display().to_string(),
            data.join("sub").display().to_string(),
        );
        for paths in [
            vec![d.clone(), d.clone()],
            vec![d.clone(), sub.clone()],
            vec![sub.clone(), d.clone()],
        ] {
            let found = discover_all(&paths).expect("read");
            assert_eq!(found.inputs.len(), 1, "{paths:?}");
        }
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = discover_all(&[empty.display().to_string()]).expect_err("no corpus");
        assert!(err.to_string().contains("no corpus found"), "{err}");
        // A folder holding only a symlink to itself holds no corpus, alone or beside one that does.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(".", empty.join("self")).unwrap();
            for paths in [
                vec![empty.display().to_string()],
                vec![sub.clone(), empty.display().to_string()],
            ] {
                let err = discover_all(&paths).expect_err("no corpus");
                assert!(
                    err.to_string().contains("no corpus found"),
                    "{paths:?}: {err}"
                );
            }
        }
    }
}

#[cfg(test)]
mod category_folder_tests {
    use super::*;

    /// Category folders named one by one are categories, as they are when their parent is named; one folder
    /// named alone names none (it was `default` for both).
    #[test]
    fn each_of_several_folders_named_with_a_prompts_file_is_a_category() {
        let dir = tempfile::tempdir().unwrap();
        let mut named = Vec::new();
        for cat in ["B1_code", "B2_math"] {
            let d = dir.path().join(cat);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("gen.jsonl"), "{\"input_ids\": [1, 2]}\n").unwrap();
            std::fs::write(
                d.join("prompts.jsonl"),
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
            )
            .unwrap();
            named.push(d.display().to_string());
        }
        let cats = |paths: &[String]| -> Vec<Option<String>> {
            let found = discover_all(paths).expect("read");
            found.inputs.into_iter().map(|i| i.hive_category).collect()
        };
        let both = vec![Some("B1_code".to_string()), Some("B2_math".to_string())];
        assert_eq!(cats(&named), both);
        assert_eq!(cats(&[dir.path().display().to_string()]), both);
        assert_eq!(cats(&named[..1]), vec![None]);
        // One folder named twice is still one folder: no category.
        assert_eq!(cats(&[named[0].clone(), named[0].clone()]), vec![None]);
    }

    #[test]
    fn a_folder_pairs_with_one_prompts_file_and_lists_the_others() {
        let prompt = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (cat, names) in [
            (
                "B1_code",
                &[
                    "prompts.jsonl",
                    "prompts.old.jsonl",
                    "prompts_edited.jsonl",
                    "prompts_rotated.jsonl",
                ][..],
            ),
            ("B2_math", &["math_a.jsonl", "math_b.jsonl"][..]),
            ("B3_chat", &["chat.jsonl"][..]),
        ] {
            let d = root.join(cat);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("gen.jsonl"), "{\"input_ids\": [1, 2]}\n").unwrap();
            for n in names {
                std::fs::write(d.join(n), prompt).unwrap();
            }
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink("loop.jsonl", root.join("B3_chat/loop.jsonl")).unwrap();
        let found = discover_all(&[root.display().to_string()]).expect("read");
        let paired: Vec<_> = found
            .prompts
            .iter()
            .map(|p| p.path.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            paired,
            vec![
                PathBuf::from("B1_code/prompts.jsonl"),
                PathBuf::from("B3_chat/chat.jsonl")
            ]
        );
        let why = |name: &str| {
            found
                .skipped
                .iter()
                .find(|s| s.path == root.join(name))
                .map(|s| s.reason.clone())
                .unwrap_or_else(|| panic!("{name} not listed: {:?}", found.skipped))
        };
        for n in [
            "B1_code/prompts.old.jsonl",
            "B1_code/prompts_edited.jsonl",
            "B1_code/prompts_rotated.jsonl",
        ] {
            let r = why(n);
            assert!(r.starts_with(UNPAIRED_PROMPTS_FILE), "{r}");
            assert!(
                r.contains("prompts.jsonl is this folder's") && r.contains("--prompts"),
                "{r}"
            );
        }
        for n in ["B2_math/math_a.jsonl", "B2_math/math_b.jsonl"] {
            assert!(why(n)
                .contains("one of 2 prompts files in this folder and none named prompts.jsonl"));
        }
        #[cfg(unix)]
        assert_eq!(why("B3_chat/loop.jsonl"), "a symbolic link loop");
        // B2's shards pair with no prompts file, not with one a folder above holds.
        assert_eq!(found.unpaired_prompt_dirs, vec![root.join("B2_math")]);
        std::fs::write(root.join("prompts.jsonl"), prompt).unwrap();
        let found = discover_all(&[root.display().to_string()]).expect("read");
        let shard = root.join("B2_math/gen.jsonl");
        assert!(prompts_for(&found.prompts, &shard).is_some());
        assert!(paired_prompts_for(&found.prompts, &found.unpaired_prompt_dirs, &shard).is_none());
        let shard = root.join("B1_code/gen.jsonl");
        assert_eq!(
            paired_prompts_for(&found.prompts, &found.unpaired_prompt_dirs, &shard)
                .map(|p| p.path.clone()),
            Some(root.join("B1_code/prompts.jsonl"))
        );
        std::fs::remove_file(root.join("prompts.jsonl")).unwrap();
        // A folder whose prompts files do not pair still names its category.
        let cats: Vec<_> = found
            .inputs
            .iter()
            .map(|i| i.hive_category.clone())
            .collect();
        assert_eq!(
            cats,
            ["B1_code", "B2_math", "B3_chat"].map(|c| Some(c.to_string()))
        );
    }
}
