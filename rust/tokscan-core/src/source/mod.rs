//! Input sources. Discovery ([`mod@discover`]) turns the user's paths into a sorted list of inputs (so results
//! never depend on the order paths were given in); each input opens as a [`Source`], which splits into independent
//! units of work (a Parquet row group, a range of NumPy samples) that yield ragged batches of token rows,
//! reads any range of rows on its own (for `show`, `align`), and writes a filtered copy of itself (for
//! `clean`): the rows a scan numbers and the rows a copy keeps come from the same reader.
//!
//! **Adding a format**: one new file in this folder implementing [`Source`] (open with validation and plan
//! the units; `read_rows`; `write_filtered`; `scan_unit` only when a unit decodes as a whole; `sample_ids`
//! when the format has ids) and declaring its [`FormatSpec`] (how a file or folder is recognised, how it
//! opens), and one line in [`FORMATS`]; its tests are a reader and writer unit test in its file, a
//! builder in `BUILDERS` of `tests/test_format_registry.py` (the corrupt-input suite over the registry), a
//! mutation fuzzer in `tests/fuzz.rs` (both fail for a registered format without one), and cases in the
//! layout and clean suites (`tests/test_scan_layouts.py`, `tests/test_clean_property.py`).
//! Nothing else in the core or in Python names a format.

pub mod arrow;
pub mod discover;
mod fault;
pub mod ipc;
pub mod jsonl;
pub mod lists;
pub mod llmc;
pub mod megatron;
pub mod numpy;
pub mod parquet;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub(crate) use discover::file_key;
pub use discover::{
    discover, discover_all, paired_prompts_for, prompts_for, Discovery, PromptsFile, Skipped,
    NOT_A_CORPUS_FILE, UNPAIRED_PROMPTS_FILE,
};

use crate::error::{Error, Result};
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

/// What a format makes of a file found while a folder is searched ([`FormatSpec::found`]): whether, and how, it
/// claims the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Not this format's file: the next format is asked.
    No,
    /// An input of this format (the path it is opened by: a Megatron `.idx` stands for its `.bin`).
    Input(PathBuf),
    /// Part of an input found through another of its files (a Megatron `.bin` beside its `.idx`).
    Part,
    /// A prompts file (JSONL records with `messages` and no token ids), paired with the shards beside it.
    Prompts,
    /// This format's kind of file, but not one it reads: listed as skipped with the reason.
    Refused(&'static str),
}

/// How a format is recognised and opened: one row of [`FORMATS`], declared in the format's own
/// `source/<fmt>.rs` beside its reader and writer.
pub struct FormatSpec {
    /// The format's name in reports, cluster plans and the Python API (`"parquet"`).
    pub name: &'static str,
    /// How the list of readable formats shows it in an error (`"Parquet *.parquet"`).
    pub shown_as: &'static str,
    /// A file named explicitly: do its first bytes (up to 64 KiB) and its path say it is this format?
    /// Asked of every format in table order before [`FormatSpec::named`].
    pub sniff: fn(head: &[u8], path: &Path) -> bool,
    /// A file named explicitly whose content no format recognised: does its name say it is this format (the
    /// reader then says what is wrong with it)?
    pub named: fn(file_name: &str) -> bool,
    /// The input a file named explicitly stands for (a NumPy `tokens.npy` for its folder).
    pub input_path: fn(&Path) -> PathBuf,
    /// A file met while a folder is searched, asked of every format in table order until one claims it.
    pub found: fn(&Path) -> Result<Claim>,
    /// A folder that is itself an input (`Some(vec![folder])`, NumPy) or lists its inputs (a `datasets`
    /// `save_to_disk` folder's `state.json`); asked before the folder's files are.
    pub folder: fn(&Path) -> Result<Option<Vec<PathBuf>>>,
    /// The names of the files such a folder holds besides its inputs that the format reads (a NumPy folder's
    /// arrays, a `datasets` folder's `state.json`); any other file in it is listed as skipped.
    pub folder_files: &'static [&'static str],
    /// Why another file of such a folder is skipped.
    pub folder_skip: &'static str,
    /// A path that does not exist but names an input (a Megatron prefix, `data_text_document`): the input.
    pub prefix: fn(&Path) -> Option<PathBuf>,
    /// Whether the units of one input may go to different cluster tasks (a JSONL file is parsed whole by
    /// whoever opens it, so its units stay together).
    pub splits_across_tasks: bool,
    /// The files besides its own path (and, for a folder, the files in it) that opening an input reads (a
    /// Megatron `.bin`'s `.idx`): what a cluster task fetches of an input in an object store.
    pub companions: fn(&Path) -> Vec<PathBuf>,
    /// Opens an input, validating its headers and schema.
    pub open: fn(&Path, &ColumnNames) -> Result<Box<dyn Source>>,
}

/// The format registry: every format tokscan reads, in the order they are asked (and listed in errors).
/// Discovery, [`open`], the cluster planner and the error that lists what tokscan reads all go through this
/// table; nothing else names a format. Adding a format is its file in `source/` and one line here.
///
/// The order decides: NumPy's folder (`tokens.npy`) is taken before a `datasets` folder's `state.json`, and a
/// file's path evidence (a Megatron `.bin` with its `.idx` beside it) before any magic number in its content.
pub static FORMATS: &[&FormatSpec] = &[
    &numpy::FORMAT,
    &megatron::FORMAT,
    &llmc::FORMAT,
    &parquet::FORMAT,
    &ipc::FORMAT,
    &jsonl::FORMAT,
];

/// The formats as an error lists them: "Parquet *.parquet, Arrow IPC *.arrow / *.feather, …".
pub fn formats_list() -> String {
    FORMATS
        .iter()
        .map(|f| f.shown_as)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Defaults for the hooks a format does not need.
pub(crate) fn no_folder(_: &Path) -> Result<Option<Vec<PathBuf>>> {
    Ok(None)
}
pub(crate) fn no_prefix(_: &Path) -> Option<PathBuf> {
    None
}
pub(crate) fn same_path(p: &Path) -> PathBuf {
    p.to_path_buf()
}

/// The last component of `path`, lossily (enough to read an extension: a name that is not UTF-8 is still a
/// shard by its extension).
pub(crate) fn file_name(path: &Path) -> std::borrow::Cow<'_, str> {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default()
}

/// `found` of a format recognised by its file name alone: an input when `named` says so.
pub(crate) fn input_if_named(named: fn(&str) -> bool, path: &Path) -> Claim {
    if named(&file_name(path)) {
        Claim::Input(path.to_path_buf())
    } else {
        Claim::No
    }
}

/// Whether `name` ends with `.EXT` for one of `exts`.
pub(crate) fn has_extension(name: &str, exts: &[&str]) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, e)| exts.contains(&e))
}

/// An input's format: a handle on its row of [`FORMATS`], compared, printed and serialized by name.
#[derive(Clone, Copy)]
pub struct Format(&'static FormatSpec);

impl Format {
    pub const fn of(spec: &'static FormatSpec) -> Self {
        Format(spec)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn spec(self) -> &'static FormatSpec {
        self.0
    }

    /// The registered format called `name`.
    pub fn by_name(name: &str) -> Option<Self> {
        FORMATS.iter().find(|f| f.name == name).map(|f| Format(f))
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}
impl Eq for Format {}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Format::by_name(&name).ok_or_else(|| {
            let known: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
            serde::de::Error::custom(format!(
                "unknown format {name:?} (known: {})",
                known.join(", ")
            ))
        })
    }
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
    /// The slice as the enum.
    fn wrap(s: &[Self]) -> Tokens<'_>;
}

macro_rules! from_tokens {
    ($($t:ty => $v:ident),*) => { $(
        impl FromTokens for $t {
            fn pick(t: Tokens<'_>) -> Option<&[Self]> {
                match t { Tokens::$v(s) => Some(s), _ => None }
            }
            fn wrap(s: &[Self]) -> Tokens<'_> {
                Tokens::$v(s)
            }
        }
    )* };
}
from_tokens!(u16 => U16, u32 => U32, i32 => I32, i64 => I64, u64 => U64);

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        for (i, f) in FORMATS.iter().enumerate() {
            assert!(FORMATS[..i].iter().all(|g| g.name != f.name), "{}", f.name);
            let json = serde_json::to_string(&Format::of(f)).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name));
            assert_eq!(
                serde_json::from_str::<Format>(&json).unwrap(),
                Format::of(f)
            );
        }
        let err = serde_json::from_str::<Format>("\"csv\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown format \"csv\""), "{err}");
    }

    #[test]
    fn the_error_lists_every_format() {
        assert_eq!(
            formats_list(),
            "NumPy tokens.npy, Megatron *.bin + *.idx, llm.c *.bin, Parquet *.parquet, \
             Arrow IPC *.arrow / *.feather, JSONL *.jsonl[.gz|.zst]"
        );
    }
}

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
