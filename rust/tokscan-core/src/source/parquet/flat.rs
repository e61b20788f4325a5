//! The scan's path through a row group whose token columns (`input_ids`, or `prompt_ids` + `output_ids`) and
//! loss mask or labels are flat lists (`list<int>`, one repetition level, as every trainer and `datasets`
//! writes them): each list column is read straight from its pages into buffers reused from batch to batch —
//! by tokscan's own page decoder ([`super::pages`]) for the encodings every writer of token corpora uses, else
//! by the parquet crate's column reader — and its row boundaries are where the repetition level is 0.
//!
//! arrow-rs's list reader spends a fifth of a one-thread scan turning levels into list offsets and a validity
//! bitmap, one level at a time, and the values are copied once more into the array (`benches/README.md`).
//! Here a batch whose every level holds a value (no empty, null or null-element rows) needs only the positions
//! of the zeros among its repetition levels, found a block of levels at a time. Other columns (sample id,
//! category) are few bytes per row and still come through arrow-rs, in batches of the same rows.
//! [`plan`] decides, from the footer, whether a file takes this path; `show`, `clean` and files with nested lists
//! (`list<list<..>>`), unsigned labels or other element types use the arrow-rs reader, whose batches this path
//! reproduces exactly, down to what arrow-rs does with odd files: data pages of no values are read past, and
//! `int8`..`uint16` masks and labels are cast down from their `INT32` pages (tested in `tests` below against
//! arrow-rs, on files from arrow-rs's writer and on pages written by hand). What arrow-rs would misread, a
//! definition level above the column's maximum, is refused as corrupt.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use bytes::Bytes;
use memmap2::Mmap;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::basic::{Repetition, Type as PhysicalType};
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::{get_column_reader, ColumnReader};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::serialized_reader::SerializedPageReader;

use super::pages::{ListPages, PageError, Physical};
use super::{guarded_batches, open_file, parquet_err, undecodable, unpanicked, ParquetShard};
use crate::error::{Error, Result};
use crate::source::arrow::{list_error, sample_ids, strings};
use crate::source::lists::{labels_as_mask, ListProblem};
use crate::source::{shrank, Batch, MapGuard, Offsets, Ragged, RaggedMask, Tokens};
use crate::token::MaskSlice;

/// How a flat list column's values are stored and handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    /// `INT32` pages of `int32` ids, or of a mask or labels of any integer type up to 32 bits (narrower
    /// types are cast down as arrow-rs does, [`Narrow`]).
    I32,
    /// `INT32` pages of `uint32` ids (the same bits).
    U32,
    I64,
    /// `INT64` pages of `uint64` ids (the same bits).
    U64,
    Bool,
}

/// One flat list column of the file, as its leaf in the Parquet schema.
#[derive(Debug, Clone)]
pub(super) struct FlatList {
    name: String,
    /// "token", "mask" or "label", for the null-element error.
    what: &'static str,
    role: Role,
    narrow: Narrow,
    leaf: usize,
    values: Values,
    /// Definition level of a value.
    max_def: i16,
    /// Definition level of a present, empty list; below it the list is null, above it (and below
    /// `max_def`) the element is null.
    def_empty: i16,
}

/// The narrower integer type a mask or labels column's `INT32` values are cast to, as arrow-rs casts them
/// (`as`: a value outside the type wraps, as in a file that breaks its own annotation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Narrow {
    No,
    I8,
    U8,
    I16,
    U16,
}

/// What a flat list column holds, which decides the types it is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Tokens,
    Mask,
    /// A `labels` column read as the loss mask (-100 means 0), of a signed integer type.
    Labels,
}

/// Which columns of a file take this path.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    ids: FlatList,
    prompt: Option<FlatList>,
    /// The loss mask, or the labels read as one.
    mask: Option<FlatList>,
    /// The layout's other columns (sample id, category), read through arrow-rs; `None` when there are none.
    others: Option<ProjectionMask>,
}

/// This path for `shard`'s layout when its token column (and loss mask, if any) are flat lists of types it
/// reads exactly as arrow-rs would hand them on; `None` sends the file through arrow-rs.
pub(super) fn plan(shard: &ParquetShard) -> Option<Plan> {
    let layout = &shard.layout;
    let ids = flat_list(shard, &layout.ids, Role::Tokens)?;
    let prompt = match &layout.prompt {
        Some(name) => Some(flat_list(shard, name, Role::Tokens)?),
        None => None,
    };
    // The loss mask wins over labels, as in [`super::record_batch`].
    let mask = match (&layout.loss_mask, &layout.labels) {
        (Some(name), _) => Some(flat_list(shard, name, Role::Mask)?),
        (None, Some(name)) => Some(flat_list(shard, name, Role::Labels)?),
        (None, None) => None,
    };
    let schema = shard.meta.schema();
    let others: Vec<usize> = [&layout.sample_id, &layout.category]
        .into_iter()
        .flatten()
        .map(|n| schema.index_of(n).expect("detected column"))
        .collect();
    let others =
        (!others.is_empty()).then(|| ProjectionMask::roots(shard.meta.parquet_schema(), others));
    Some(Plan {
        ids,
        prompt,
        mask,
        others,
    })
}

fn flat_list(shard: &ParquetShard, name: &str, role: Role) -> Option<FlatList> {
    let field = shard.meta.schema().field_with_name(name).ok()?;
    let item = match field.data_type() {
        DataType::List(f) | DataType::LargeList(f) => f.data_type(),
        _ => return None,
    };
    let schema = shard.meta.parquet_schema();
    let mut leaves = (0..schema.num_columns())
        .filter(|&i| schema.column(i).path().parts().first().map(String::as_str) == Some(name));
    let leaf = leaves.next()?;
    if leaves.next().is_some() {
        return None;
    }
    let descr = schema.column(leaf);
    if descr.max_rep_level() != 1 || descr.path().parts().len() > 3 {
        return None;
    }
    let physical = descr.physical_type();
    let values = match (item, physical, role) {
        (DataType::Int32, PhysicalType::INT32, Role::Tokens) => Values::I32,
        (DataType::UInt32, PhysicalType::INT32, Role::Tokens) => Values::U32,
        (DataType::Int64, PhysicalType::INT64, Role::Tokens) => Values::I64,
        (DataType::UInt64, PhysicalType::INT64, Role::Tokens) => Values::U64,
        (
            DataType::Int8
            | DataType::UInt8
            | DataType::Int16
            | DataType::UInt16
            | DataType::Int32
            | DataType::UInt32,
            PhysicalType::INT32,
            Role::Mask,
        ) => Values::I32,
        (DataType::Int64 | DataType::UInt64, PhysicalType::INT64, Role::Mask) => Values::I64,
        (DataType::Boolean, PhysicalType::BOOLEAN, Role::Mask) => Values::Bool,
        // Unsigned labels never hold -100 (every token is trained on); they stay with arrow-rs.
        (DataType::Int8 | DataType::Int16 | DataType::Int32, PhysicalType::INT32, Role::Labels) => {
            Values::I32
        }
        (DataType::Int64, PhysicalType::INT64, Role::Labels) => Values::I64,
        _ => return None,
    };
    let element_optional = descr.self_type().get_basic_info().repetition() == Repetition::OPTIONAL;
    let max_def = descr.max_def_level();
    let def_empty = max_def - 1 - i16::from(element_optional);
    if def_empty < 0 {
        return None;
    }
    Some(FlatList {
        name: name.to_string(),
        what: match role {
            Role::Tokens => "token",
            Role::Mask => "mask",
            Role::Labels => "label",
        },
        role,
        narrow: match (role, item) {
            (Role::Tokens, _) => Narrow::No,
            (_, DataType::Int8) => Narrow::I8,
            (_, DataType::UInt8) => Narrow::U8,
            (_, DataType::Int16) => Narrow::I16,
            (_, DataType::UInt16) => Narrow::U16,
            _ => Narrow::No,
        },
        leaf,
        values,
        max_def,
        def_empty,
    })
}

/// A column's values being decoded, in the reader's own buffer type.
enum Buffer {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

/// A mask or labels column's values in their narrower type (see [`Narrow`]).
enum Narrowed {
    No,
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
}

/// How a list column chunk is decoded: by tokscan's page decoder (the encodings every writer of token corpora
/// uses), or by the parquet crate's column reader (any other). One per list column of a row group being read,
/// so the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Pages(ListPages),
    Column(ColumnReader),
}

/// One flat list column of one row group, decoded batch by batch into reused buffers.
struct ListReader<'p> {
    list: &'p FlatList,
    engine: Engine,
    def: Vec<i16>,
    rep: Vec<i16>,
    values: Buffer,
    /// Row starts into `values`, and the end.
    offsets: Vec<i64>,
    /// Rows whose list is null (only when some are).
    null_rows: Vec<bool>,
    narrowed: Narrowed,
    /// A labels column's values as a loss mask (one byte per token).
    labels: Vec<u8>,
}

impl<'p> ListReader<'p> {
    fn new(
        file: &Arc<impl ChunkReader + 'static>,
        rg: &RowGroupMetaData,
        list: &'p FlatList,
    ) -> parquet::errors::Result<Self> {
        let col = rg.column(list.leaf);
        let rows = usize::try_from(rg.num_rows()).unwrap_or(0);
        let pages = SerializedPageReader::new(Arc::clone(file), col, rows, None)?;
        let mut encodings = col.encodings().peekable();
        let engine = if encodings.peek().is_some() && encodings.all(super::pages::reads) {
            let physical = match list.values {
                Values::I32 | Values::U32 => Physical::I32,
                Values::I64 | Values::U64 => Physical::I64,
                Values::Bool => Physical::Bool,
            };
            Engine::Pages(ListPages::new(
                Box::new(pages),
                physical,
                list.max_def,
                list.def_empty,
                rows as u64,
            ))
        } else {
            Engine::Column(get_column_reader(
                col.column_descr_ptr(),
                Box::new(NoEmptyPages(pages)),
            ))
        };
        let values = match list.values {
            Values::I32 | Values::U32 => Buffer::I32(Vec::new()),
            Values::I64 | Values::U64 => Buffer::I64(Vec::new()),
            Values::Bool => Buffer::Bool(Vec::new()),
        };
        Ok(ListReader {
            list,
            engine,
            def: Vec::new(),
            rep: Vec::new(),
            values,
            offsets: Vec::new(),
            null_rows: Vec::new(),
            narrowed: match list.narrow {
                Narrow::No => Narrowed::No,
                Narrow::I8 => Narrowed::I8(Vec::new()),
                Narrow::U8 => Narrowed::U8(Vec::new()),
                Narrow::I16 => Narrowed::I16(Vec::new()),
                Narrow::U16 => Narrowed::U16(Vec::new()),
            },
            labels: Vec::new(),
        })
    }

    /// Decodes the next `rows` rows (fewer at the end of the row group) and returns how many it decoded.
    fn read(&mut self, path: &Path, rows: usize) -> Result<usize> {
        let values = match self.engine {
            Engine::Pages(_) => self.read_pages(path, rows)?,
            Engine::Column(_) => self.read_levels(path, rows)?,
        };
        self.offsets.push(values as i64);
        if self.list.role == Role::Labels {
            match (&self.narrowed, &self.values) {
                (Narrowed::I8(v), _) => labels_as_mask(v, &mut self.labels),
                (Narrowed::I16(v), _) => labels_as_mask(v, &mut self.labels),
                (_, Buffer::I32(v)) => labels_as_mask(v, &mut self.labels),
                (_, Buffer::I64(v)) => labels_as_mask(v, &mut self.labels),
                (_, Buffer::Bool(_)) => unreachable!("labels are planned only for integers"),
            }
        }
        let decoded = self.offsets.len() - 1;
        if decoded > rows {
            return Err(parquet_err(
                path,
                format!(
                    "corrupt data: column {:?} decodes to more rows than asked",
                    self.list.name
                ),
            ));
        }
        Ok(decoded)
    }

    /// [`ListReader::read`] by tokscan's page decoder: the values straight into the batch's type (a mask's
    /// narrower one), the row starts and null rows. Returns the number of values.
    fn read_pages(&mut self, path: &Path, rows: usize) -> Result<usize> {
        let Engine::Pages(p) = &mut self.engine else {
            unreachable!("called for the page decoder")
        };
        let (offsets, null_rows) = (&mut self.offsets, &mut self.null_rows);
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            match (&mut self.narrowed, &mut self.values) {
                (Narrowed::I8(v), _) => p.read(rows, v, offsets, null_rows).map(|_| v.len()),
                (Narrowed::U8(v), _) => p.read(rows, v, offsets, null_rows).map(|_| v.len()),
                (Narrowed::I16(v), _) => p.read(rows, v, offsets, null_rows).map(|_| v.len()),
                (Narrowed::U16(v), _) => p.read(rows, v, offsets, null_rows).map(|_| v.len()),
                (Narrowed::No, Buffer::I32(v)) => {
                    p.read(rows, v, offsets, null_rows).map(|_| v.len())
                }
                (Narrowed::No, Buffer::I64(v)) => {
                    p.read(rows, v, offsets, null_rows).map(|_| v.len())
                }
                (Narrowed::No, Buffer::Bool(v)) => {
                    p.read(rows, v, offsets, null_rows).map(|_| v.len())
                }
            }
        }))
        .unwrap_or_else(|panic| Err(PageError::Undecodable(undecodable(panic.as_ref()))));
        let name = &self.list.name;
        read.map_err(|e| match e {
            PageError::Corrupt(what) => {
                parquet_err(path, format!("corrupt data: column {name:?} {what}"))
            }
            PageError::NullElements => {
                list_error(path, name, ListProblem::NullElements(self.list.what))
            }
            PageError::Parquet(e) => parquet_err(path, e),
            PageError::Undecodable(what) => parquet_err(path, what),
        })
    }

    /// [`ListReader::read`] by the parquet crate's column reader: levels and values, then the row starts and
    /// null rows from the levels and the mask's values narrowed. Returns the number of values.
    fn read_levels(&mut self, path: &Path, rows: usize) -> Result<usize> {
        let Engine::Column(reader) = &mut self.engine else {
            unreachable!("called for the column reader")
        };
        self.def.clear();
        self.rep.clear();
        let (def, rep) = (Some(&mut self.def), Some(&mut self.rep));
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            match (reader, &mut self.values) {
                (ColumnReader::Int32ColumnReader(r), Buffer::I32(v)) => {
                    v.clear();
                    r.read_records(rows, def, rep, v)
                }
                (ColumnReader::Int64ColumnReader(r), Buffer::I64(v)) => {
                    v.clear();
                    r.read_records(rows, def, rep, v)
                }
                (ColumnReader::BoolColumnReader(r), Buffer::Bool(v)) => {
                    v.clear();
                    r.read_records(rows, def, rep, v)
                }
                _ => unreachable!("the buffer is made for the column's physical type"),
            }
        }));
        let (_, values, levels) = match read {
            Ok(r) => r.map_err(|e| parquet_err(path, e))?,
            Err(panic) => return Err(parquet_err(path, undecodable(panic.as_ref()))),
        };
        let held = match &self.values {
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::Bool(v) => v.len(),
        };
        if levels != self.rep.len() || levels != self.def.len() || values != held {
            return Err(parquet_err(
                path,
                format!(
                    "corrupt data: column {:?} decodes to {levels} levels and {values} values",
                    self.list.name
                ),
            ));
        }
        if self.rep.first().is_some_and(|&r| r != 0) {
            return Err(parquet_err(
                path,
                format!(
                    "corrupt data: column {:?} starts a batch inside a row",
                    self.list.name
                ),
            ));
        }
        self.offsets.clear();
        self.null_rows.clear();
        if values == levels {
            row_starts(&self.rep, &mut self.offsets);
        } else {
            self.walk_levels(path)?;
        }
        if let Buffer::I32(v) = &self.values {
            match &mut self.narrowed {
                Narrowed::No => {}
                Narrowed::I8(out) => narrow(v, out, |x| x as i8),
                Narrowed::U8(out) => narrow(v, out, |x| x as u8),
                Narrowed::I16(out) => narrow(v, out, |x| x as i16),
                Narrowed::U16(out) => narrow(v, out, |x| x as u16),
            }
        }
        Ok(values)
    }

    /// Row starts and null rows of a batch with empty, null or null-element rows: level by level.
    fn walk_levels(&mut self, path: &Path) -> Result<()> {
        let FlatList {
            max_def, def_empty, ..
        } = *self.list;
        let mut value = 0i64;
        let mut any_null = false;
        for (&r, &d) in self.rep.iter().zip(&self.def) {
            if r == 0 {
                self.offsets.push(value);
                self.null_rows.push(d < def_empty);
                any_null |= d < def_empty;
            }
            if d == max_def {
                value += 1;
            } else if d > max_def {
                return Err(parquet_err(
                    path,
                    format!(
                        "corrupt data: column {:?} has a definition level of {d}, above its maximum {max_def}",
                        self.list.name
                    ),
                ));
            } else if d > def_empty {
                let problem = ListProblem::NullElements(self.list.what);
                return Err(list_error(path, &self.list.name, problem));
            }
        }
        if !any_null {
            self.null_rows.clear();
        }
        Ok(())
    }
}

/// Pushes the position of every 0 in `rep` (each row's first level) onto `out`. Blocks of levels without
/// one, nearly all of them, cost one vectorised minimum.
fn row_starts(rep: &[i16], out: &mut Vec<i64>) {
    const BLOCK: usize = 64;
    let mut at = 0usize;
    for block in rep.chunks(BLOCK) {
        if block.iter().copied().min().unwrap_or(1) == 0 {
            for (i, &r) in block.iter().enumerate() {
                if r == 0 {
                    out.push((at + i) as i64);
                }
            }
        }
        at += block.len();
    }
}

impl ListReader<'_> {
    fn tokens(&self) -> Tokens<'_> {
        match (&self.values, self.list.values) {
            (Buffer::I32(v), Values::U32) => Tokens::U32(unsigned32(v)),
            (Buffer::I32(v), _) => Tokens::I32(v),
            (Buffer::I64(v), Values::U64) => Tokens::U64(unsigned64(v)),
            (Buffer::I64(v), _) => Tokens::I64(v),
            (Buffer::Bool(_), _) => unreachable!("a token column is planned only for integers"),
        }
    }

    fn mask(&self) -> MaskSlice<'_> {
        if self.list.role == Role::Labels {
            return MaskSlice::U8(&self.labels);
        }
        match &self.narrowed {
            Narrowed::No => {}
            Narrowed::I8(v) => return MaskSlice::I8(v),
            Narrowed::U8(v) => return MaskSlice::U8(v),
            Narrowed::I16(v) => return MaskSlice::I16(v),
            Narrowed::U16(v) => return MaskSlice::U16(v),
        }
        match &self.values {
            Buffer::I32(v) => MaskSlice::I32(v),
            Buffer::I64(v) => MaskSlice::I64(v),
            Buffer::Bool(v) => MaskSlice::Bool(v),
        }
    }
}

/// A column chunk's pages without its data pages of no values. The column reader's `read_records` stops at
/// such a page as if the chunk had ended (arrow-rs's record reader calls it again; one call per batch here
/// would lose the rows after it).
struct NoEmptyPages<P>(P);

impl<P: PageReader> NoEmptyPages<P> {
    fn skip_empty(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        loop {
            match self.0.peek_next_page()? {
                Some(m) if !m.is_dict && m.num_levels == Some(0) => self.0.skip_next_page()?,
                next => return Ok(next),
            }
        }
    }
}

impl<P: PageReader> Iterator for NoEmptyPages<P> {
    type Item = parquet::errors::Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<P: PageReader> PageReader for NoEmptyPages<P> {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        loop {
            match self.0.get_next_page()? {
                Some(page) if page.is_data_page() && page.num_values() == 0 => continue,
                page => return Ok(page),
            }
        }
    }

    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        self.skip_empty()
    }

    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        self.skip_empty()?;
        self.0.skip_next_page()
    }

    fn supports_deferred_dictionary(&self) -> bool {
        self.0.supports_deferred_dictionary()
    }

    fn take_deferred_dictionary(&mut self) -> parquet::errors::Result<Option<Page>> {
        self.0.take_deferred_dictionary()
    }

    fn at_record_boundary(&mut self) -> parquet::errors::Result<bool> {
        self.skip_empty()?;
        self.0.at_record_boundary()
    }
}

/// `INT32` values in the narrower type of their column, cast as arrow-rs casts them.
fn narrow<T>(v: &[i32], out: &mut Vec<T>, cast: impl Fn(i32) -> T) {
    out.clear();
    out.extend(v.iter().map(|&x| cast(x)));
}

/// `uint32` ids decoded by the `INT32` reader: the same bits, read unsigned.
fn unsigned32(v: &[i32]) -> &[u32] {
    // SAFETY: `i32` and `u32` have the same size and alignment, and every bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u32>(), v.len()) }
}

/// `uint64` ids decoded by the `INT64` reader: the same bits, read unsigned.
fn unsigned64(v: &[i64]) -> &[u64] {
    // SAFETY: `i64` and `u64` have the same size and alignment, and every bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u64>(), v.len()) }
}

/// [`ParquetShard::for_each_batch`] through this path: the same batches (rows, values, null rows, sample ids
/// and categories) as arrow-rs's reader gives [`super::record_batch`].
pub(super) fn for_each_batch(
    shard: &ParquetShard,
    plan: &Plan,
    rg: usize,
    f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
) -> Result<()> {
    let path = shard.path.as_path();
    match map_file(path, shard.len)? {
        Ok((file, guard)) => {
            let read = read_row_group(shard, plan, rg, &file, f);
            // A file cut while its pages were read reads zeros there: say so rather than what they decoded to.
            guard.check()?;
            read
        }
        // A file system that refuses maps (some FUSE and network mounts): its pages are read as before.
        Err(file) => read_row_group(shard, plan, rg, &Arc::new(file), f),
    }
}

/// The file's bytes, memory-mapped, or the opened file (`Err`) when the file system refuses to map it: the page
/// reader slices its pages out of the page cache instead of reading each into a buffer of its own (one more copy
/// of every compressed byte; the kernel's copy alone was 4.4 % of a two-thread scan of the bench corpus, whose
/// zstd pages hold dictionary indices zstd stores raw). A file shorter than `opened_len`, its length when its
/// footer was read, is the input error of a file cut during a scan. The guard is dropped before the map.
fn map_file(
    path: &Path,
    opened_len: u64,
) -> Result<std::result::Result<(Arc<Bytes>, MapGuard), File>> {
    let file = open_file(path)?;
    let now = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if now < opened_len {
        return Err(shrank(path, opened_len, now));
    }
    // SAFETY: opened read-only and only read; inputs must not be modified while tokscan reads them, and a
    // file cut meanwhile is caught by the guard (`MapGuard`).
    let Ok(map) = (unsafe { Mmap::map(&file) }) else {
        return Ok(Err(file));
    };
    let guard = MapGuard::new(&file, path, &map, opened_len)?;
    Ok(Ok((Arc::new(Bytes::from_owner(map)), guard)))
}

/// Row group `rg` of `shard` through `plan`, its list columns' pages read from `file` (a map of the file, or
/// the file itself).
fn read_row_group<R: ChunkReader + 'static>(
    shard: &ParquetShard,
    plan: &Plan,
    rg: usize,
    file: &Arc<R>,
    f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
) -> Result<()> {
    let path = shard.path.as_path();
    let footer_rows = shard.row_group_rows[rg];
    let corrupt = |rows: u64| super::decoded_rows_differ(path, rg, rows, footer_rows);
    let rg_meta = shard.meta.metadata().row_group(rg);
    let open = |list| {
        unpanicked(|| ListReader::new(file, rg_meta, list)).map_err(|e| parquet_err(path, e))
    };
    let mut ids = open(&plan.ids)?;
    let mut prompt = plan.prompt.as_ref().map(open).transpose()?;
    let mut mask = plan.mask.as_ref().map(open).transpose()?;
    let batch_rows = shard.batch_rows[rg];
    let mut others = match &plan.others {
        Some(projection) => Some(guarded_batches(
            ParquetRecordBatchReaderBuilder::new_with_metadata(
                open_file(path)?,
                shard.meta.clone(),
            )
            .with_projection(projection.clone())
            .with_row_groups(vec![rg])
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| parquet_err(path, e))?,
        )),
        None => None,
    };
    let layout = &shard.layout;
    let mut total = 0u64;
    loop {
        let other: Option<RecordBatch> = match &mut others {
            Some(batches) => match batches.next() {
                Some(rb) => Some(rb.map_err(|e| parquet_err(path, e))?),
                None => break,
            },
            None => None,
        };
        let want = other.as_ref().map_or(batch_rows, RecordBatch::num_rows);
        let rows = ids.read(path, want)?;
        for other_list in [&mut prompt, &mut mask].into_iter().flatten() {
            let other_rows = other_list.read(path, want)?;
            if other_rows != rows {
                return Err(corrupt(total + other_rows.min(rows) as u64));
            }
        }
        if other.is_some() && rows != want {
            return Err(corrupt(total + rows as u64));
        }
        if rows == 0 {
            break;
        }
        total += rows as u64;
        let column = |n: &str| {
            other
                .as_ref()
                .and_then(|rb| rb.column_by_name(n))
                .expect("projected column")
                .clone()
        };
        let sample_ids = match &layout.sample_id {
            Some(n) => Some(sample_ids(path, n, &column(n))?),
            None => None,
        };
        let categories = match &layout.category {
            Some(n) => Some(strings(path, n, &column(n))?),
            None => None,
        };
        // A row is null when its ids or its prompt are.
        let null_rows = match &prompt {
            Some(p) if !p.null_rows.is_empty() || !ids.null_rows.is_empty() => {
                let null =
                    |r: &ListReader<'_>, i: usize| r.null_rows.get(i).copied().unwrap_or(false);
                Some(
                    (0..rows)
                        .map(|i| null(&ids, i) || null(p, i))
                        .collect::<Vec<bool>>(),
                )
            }
            _ => None,
        };
        let batch = Batch {
            ids: Ragged {
                values: ids.tokens(),
                offsets: Offsets::I64(&ids.offsets),
            },
            prompt: prompt.as_ref().map(|p| Ragged {
                values: p.tokens(),
                offsets: Offsets::I64(&p.offsets),
            }),
            mask: mask.as_ref().map(|m| RaggedMask {
                values: m.mask(),
                offsets: Offsets::I64(&m.offsets),
            }),
            sample_ids: sample_ids.as_deref(),
            categories: categories.as_deref(),
            null_rows: match &null_rows {
                Some(n) => Some(n.as_slice()),
                None => (!ids.null_rows.is_empty()).then_some(ids.null_rows.as_slice()),
            },
            findings: None,
        };
        f(&batch)?;
    }
    // Rows past the other columns' would be rows the footer does not count, in any list column.
    if others.is_some() {
        for list in [Some(&mut ids), prompt.as_mut(), mask.as_mut()]
            .into_iter()
            .flatten()
        {
            if list.read(path, 1)? != 0 {
                return Err(corrupt(total + 1));
            }
        }
    }
    if total != footer_rows {
        return Err(corrupt(total));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        Array, ArrayRef, BooleanArray, Int32Array, Int64Array, Int8Array, ListArray, StringArray,
        UInt32Array, UInt64Array, UInt8Array,
    };
    use arrow_buffer::{NullBuffer, OffsetBuffer};
    use arrow_schema::Field;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{WriterProperties, WriterVersion};
    use proptest::prelude::*;

    use super::*;
    use crate::sample_id::SampleId;
    use crate::source::ColumnNames;

    /// A row as a check sees it: the ids' storage type and values, the mask's values, whether the row is null.
    #[derive(Debug, PartialEq)]
    struct Seen {
        ids: (&'static str, Vec<i128>),
        prompt: Option<(&'static str, Vec<i128>)>,
        mask: Option<Vec<i64>>,
        null: bool,
        sample_id: Option<SampleId>,
        category: Option<String>,
    }

    fn tokens(t: Tokens<'_>, r: std::ops::Range<usize>) -> (&'static str, Vec<i128>) {
        match t {
            Tokens::U16(v) => ("u16", v[r].iter().map(|&x| i128::from(x)).collect()),
            Tokens::U32(v) => ("u32", v[r].iter().map(|&x| i128::from(x)).collect()),
            Tokens::I32(v) => ("i32", v[r].iter().map(|&x| i128::from(x)).collect()),
            Tokens::I64(v) => ("i64", v[r].iter().map(|&x| i128::from(x)).collect()),
            Tokens::U64(v) => ("u64", v[r].iter().map(|&x| i128::from(x)).collect()),
        }
    }

    fn mask(m: MaskSlice<'_>, r: std::ops::Range<usize>) -> Vec<i64> {
        match m {
            MaskSlice::Bool(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::U8(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::I8(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::I16(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::U16(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::I32(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::U32(v) => v[r].iter().map(|&x| i64::from(x)).collect(),
            MaskSlice::I64(v) => v[r].to_vec(),
            MaskSlice::U64(v) => v[r].iter().map(|&x| x as i64).collect(),
            MaskSlice::F32(v) => v[r].iter().map(|&x| x as i64).collect(),
        }
    }

    fn seen(b: &Batch<'_>, out: &mut Vec<Vec<Seen>>) {
        let mut rows = Vec::new();
        for i in 0..b.rows() {
            rows.push(Seen {
                ids: tokens(b.ids.values, b.ids.offsets.range(i)),
                prompt: b.prompt.map(|p| tokens(p.values, p.offsets.range(i))),
                mask: b.mask.map(|m| mask(m.values, m.offsets.range(i))),
                null: b.null_rows.is_some_and(|n| n[i]),
                sample_id: b.sample_ids.and_then(|s| s[i].clone()),
                category: b.categories.and_then(|c| c[i].clone()),
            });
        }
        out.push(rows);
    }

    /// Rows read, batch by batch, or the error's text.
    type Read = Result<Vec<Vec<Seen>>, String>;

    /// Whether the file takes this path, and every batch of it through this path and through arrow-rs.
    /// Whether the file takes the flat path, what the flat path reads, and what arrow-rs reads. The flat path
    /// reads the same through a map of the file and through the file itself (the fallback when a file system
    /// refuses maps), which is asserted here.
    fn both(path: &Path) -> (bool, Read, Read) {
        let shard = ParquetShard::open(path, &ColumnNames::default()).unwrap();
        #[derive(Clone, Copy)]
        enum Via {
            Map,
            File,
            Arrow,
        }
        let read = |via: Via| {
            let mut out = Vec::new();
            for rg in 0..shard.row_group_rows.len() {
                let mut f = |b: &Batch<'_>| {
                    seen(b, &mut out);
                    Ok(())
                };
                let r = match (&shard.flat, via) {
                    (Some(plan), Via::Map) => for_each_batch(&shard, plan, rg, &mut f),
                    (Some(plan), Via::File) => {
                        let file = Arc::new(std::fs::File::open(path).unwrap());
                        read_row_group(&shard, plan, rg, &file, &mut f)
                    }
                    _ => shard.for_each_arrow_batch(rg, &mut f),
                };
                r.map_err(|e| e.to_string())?;
            }
            Ok(out)
        };
        let mapped = read(Via::Map);
        assert_eq!(mapped, read(Via::File), "read from a map and from the file");
        (shard.flat.is_some(), mapped, read(Via::Arrow))
    }

    fn list(lens: &[usize], nulls: &[bool], values: ArrayRef, element_nullable: bool) -> ArrayRef {
        let field = Arc::new(Field::new(
            "element",
            values.data_type().clone(),
            element_nullable,
        ));
        let validity = nulls
            .iter()
            .any(|&n| n)
            .then(|| NullBuffer::from(nulls.iter().map(|&n| !n).collect::<Vec<_>>()));
        Arc::new(ListArray::new(
            field,
            OffsetBuffer::from_lengths(lens.iter().copied()),
            values,
            validity,
        ))
    }

    #[derive(Debug, Clone)]
    struct Case {
        /// Per row: its length and whether its ids list is null.
        rows: Vec<(usize, bool)>,
        ids_type: u8,
        /// `prompt_ids` + `output_ids` (the output's rows as `rows`) instead of `input_ids`.
        split: bool,
        /// 0..=4: a `loss_mask` of some type; 5..=7: `labels` of a signed type.
        mask_type: Option<u8>,
        labels: (bool, bool),
        element_nullable: bool,
        rg_rows: usize,
        page_rows: usize,
        dictionary: bool,
        v2: bool,
    }

    fn write(case: &Case, path: &Path) {
        let lens: Vec<usize> = case
            .rows
            .iter()
            .map(|&(n, null)| if null { 0 } else { n })
            .collect();
        let nulls: Vec<bool> = case.rows.iter().map(|r| r.1).collect();
        let total: usize = lens.iter().sum();
        let raw: Vec<u64> = (0..total as u64)
            .map(|t| (t * 2_654_435_761) % 5_000_000_000 % 200_000)
            .collect();
        let id_array = |raw: &[u64]| -> ArrayRef {
            match case.ids_type {
                0 => Arc::new(Int32Array::from(
                    raw.iter().map(|&x| x as i32 - 100).collect::<Vec<_>>(),
                )),
                1 => Arc::new(UInt32Array::from(
                    raw.iter()
                        .enumerate()
                        .map(|(i, &x)| if i % 97 == 5 { 3_000_000_000 } else { x as u32 })
                        .collect::<Vec<_>>(),
                )),
                2 => Arc::new(Int64Array::from(
                    raw.iter().map(|&x| x as i64 - 7).collect::<Vec<_>>(),
                )),
                _ => Arc::new(UInt64Array::from(
                    raw.iter()
                        .enumerate()
                        .map(|(i, &x)| if i % 89 == 3 { u64::MAX - 1 } else { x })
                        .collect::<Vec<_>>(),
                )),
            }
        };
        let ids = id_array(&raw);
        let mut columns = vec![];
        if case.split {
            let plens: Vec<usize> = (0..lens.len()).map(|i| (i * 7) % 50).collect();
            let pnulls: Vec<bool> = (0..lens.len()).map(|i| i % 11 == 4).collect();
            let ptotal: usize = plens.iter().sum();
            let pids = id_array(&(0..ptotal as u64).collect::<Vec<_>>());
            columns.push((
                "prompt_ids",
                list(&plens, &pnulls, pids, case.element_nullable),
            ));
            columns.push((
                "output_ids",
                list(&lens, &nulls, ids, case.element_nullable),
            ));
        } else {
            columns.push(("input_ids", list(&lens, &nulls, ids, case.element_nullable)));
        }
        if let Some(t @ 5..) = case.mask_type {
            let label = |i: usize| {
                if i.is_multiple_of(7) {
                    -100i64
                } else {
                    (i % 100) as i64
                }
            };
            let l: ArrayRef = match t {
                5 => Arc::new(Int8Array::from(
                    (0..total).map(|i| label(i) as i8).collect::<Vec<_>>(),
                )),
                6 => Arc::new(Int32Array::from(
                    (0..total).map(|i| label(i) as i32).collect::<Vec<_>>(),
                )),
                _ => Arc::new(Int64Array::from((0..total).map(label).collect::<Vec<_>>())),
            };
            columns.push(("labels", list(&lens, &[], l, case.element_nullable)));
        } else if let Some(t) = case.mask_type {
            let on = |i: usize| !i.is_multiple_of(5);
            let m: ArrayRef = match t {
                0 => Arc::new(Int8Array::from(
                    (0..total)
                        .map(|i| if on(i) { 1i8 } else { 0 })
                        .collect::<Vec<_>>(),
                )),
                1 => Arc::new(UInt8Array::from(
                    (0..total)
                        .map(|i| if on(i) { 1u8 } else { 0 })
                        .collect::<Vec<_>>(),
                )),
                2 => Arc::new(Int32Array::from(
                    (0..total)
                        .map(|i| if on(i) { 2i32 } else { 0 })
                        .collect::<Vec<_>>(),
                )),
                3 => Arc::new(Int64Array::from(
                    (0..total).map(|i| i64::from(on(i))).collect::<Vec<_>>(),
                )),
                _ => Arc::new(BooleanArray::from((0..total).map(on).collect::<Vec<_>>())),
            };
            columns.push(("loss_mask", list(&lens, &[], m, case.element_nullable)));
        }
        if case.labels.0 {
            columns.push((
                "sample_id",
                Arc::new(Int64Array::from((0..lens.len() as i64).collect::<Vec<_>>())) as ArrayRef,
            ));
        }
        if case.labels.1 {
            let cats: Vec<Option<String>> = (0..lens.len())
                .map(|i| (i % 4 != 3).then(|| format!("B{}", i % 3)))
                .collect();
            columns.push(("category", Arc::new(StringArray::from(cats)) as ArrayRef));
        }
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(case.rg_rows))
            .set_data_page_row_count_limit(case.page_rows)
            .set_write_batch_size(case.page_rows.max(1))
            .set_dictionary_enabled(case.dictionary)
            .set_writer_version(if case.v2 {
                WriterVersion::PARQUET_2_0
            } else {
                WriterVersion::PARQUET_1_0
            })
            .build();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(path).unwrap(),
            batch.schema(),
            Some(props),
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            proptest::collection::vec(
                (
                    prop_oneof![6 => 1usize..200, 1 => Just(0usize), 1 => 1_000usize..70_000],
                    prop::bool::weighted(0.1),
                ),
                1..40,
            ),
            0u8..4,
            any::<bool>(),
            proptest::option::of(0u8..8),
            (any::<bool>(), any::<bool>()),
            any::<bool>(),
            1usize..30,
            1usize..50,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(
                    rows,
                    ids_type,
                    split,
                    mask_type,
                    labels,
                    element_nullable,
                    rg_rows,
                    page_rows,
                    dictionary,
                    v2,
                )| Case {
                    rows,
                    ids_type,
                    split,
                    mask_type,
                    labels,
                    element_nullable,
                    rg_rows,
                    page_rows,
                    dictionary,
                    v2,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The batches of this path are arrow-rs's, row for row: ids with their storage type, mask values, null
        /// rows, sample ids and categories, over every id and mask type it takes, null, empty and long rows,
        /// rows across pages and row groups, dictionary and plain pages, data pages v1 and v2.
        #[test]
        fn batches_are_arrow_rs_batches(case in case()) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.parquet");
            write(&case, &path);
            let (planned, flat, arrow) = both(&path);
            prop_assert!(planned);
            prop_assert!(arrow.is_ok(), "{:?}", arrow);
            prop_assert_eq!(flat, arrow);
        }
    }

    #[test]
    fn null_elements_are_refused_like_arrow_rs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let ids: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3), Some(4)]));
        let batch =
            RecordBatch::try_from_iter([("input_ids", list(&[2, 2], &[], ids, true))]).unwrap();
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None)
                .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let (planned, flat, arrow) = both(&path);
        assert!(planned);
        let err = flat.unwrap_err();
        assert!(err.contains("null elements inside token lists"), "{err}");
        assert_eq!(Err(err), arrow);
    }

    #[test]
    fn other_layouts_keep_the_arrow_rs_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let ids: ArrayRef = Arc::new(arrow_array::UInt16Array::from(vec![1u16, 2, 3]));
        let batch =
            RecordBatch::try_from_iter([("input_ids", list(&[3], &[], ids, true))]).unwrap();
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None)
                .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let (planned, _, arrow) = both(&path);
        assert!(!planned);
        assert_eq!(arrow.unwrap().len(), 1);
    }

    /// Files written column by column with the parquet crate's low-level writer: schemas arrow-rs does not
    /// write, hand-made pages (an empty data page) and corrupt levels.
    mod written {
        use super::*;
        use parquet::basic::Encoding;
        use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
        use parquet::column::writer::{get_column_writer, ColumnCloseResult, ColumnWriter};
        use parquet::file::properties::{EnabledStatistics, WriterPropertiesPtr};
        use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
        use parquet::schema::parser::parse_message_type;
        use parquet::schema::types::{ColumnDescPtr, SchemaDescriptor};

        /// Writes a data page of no values before the `before`-th data page of a column chunk.
        struct EmptyPageBefore<'a> {
            inner: SerializedPageWriter<'a, Vec<u8>>,
            data_pages: usize,
            before: usize,
        }

        impl PageWriter for EmptyPageBefore<'_> {
            fn write_page(
                &mut self,
                page: CompressedPage,
            ) -> parquet::errors::Result<PageWriteSpec> {
                let is_data = matches!(
                    page.compressed_page(),
                    Page::DataPage { .. } | Page::DataPageV2 { .. }
                );
                let mut extra = None;
                if is_data {
                    if self.data_pages == self.before {
                        let empty = Page::DataPage {
                            buf: bytes::Bytes::from(vec![0u8; 8]),
                            num_values: 0,
                            encoding: Encoding::PLAIN,
                            def_level_encoding: Encoding::RLE,
                            rep_level_encoding: Encoding::RLE,
                            statistics: None,
                        };
                        extra = Some(self.inner.write_page(CompressedPage::new(empty, 8))?);
                    }
                    self.data_pages += 1;
                }
                let mut spec = self.inner.write_page(page)?;
                if let Some(e) = extra {
                    spec.offset = e.offset;
                    spec.compressed_size += e.compressed_size;
                    spec.uncompressed_size += e.uncompressed_size;
                    spec.bytes_written += e.bytes_written;
                }
                Ok(spec)
            }

            fn close(&mut self) -> parquet::errors::Result<()> {
                self.inner.close()
            }
        }

        enum Vals<'a> {
            I32(&'a [i32]),
            I64(&'a [i64]),
        }

        struct Col<'a> {
            vals: Vals<'a>,
            def: Option<Vec<i16>>,
            rep: Option<Vec<i16>>,
            empty_page_before: Option<usize>,
            /// The row count the chunk reports (a column that holds more rows than it says).
            rows: Option<u64>,
        }

        fn col(vals: Vals<'_>, (def, rep): (Vec<i16>, Vec<i16>)) -> Col<'_> {
            Col {
                vals,
                def: Some(def),
                rep: Some(rep),
                empty_page_before: None,
                rows: None,
            }
        }

        fn chunk(
            descr: ColumnDescPtr,
            props: WriterPropertiesPtr,
            c: &Col<'_>,
        ) -> (bytes::Bytes, ColumnCloseResult) {
            let mut buf = TrackedWrite::new(Vec::new());
            let close = {
                let pages: Box<dyn PageWriter + '_> = match c.empty_page_before {
                    Some(before) => Box::new(EmptyPageBefore {
                        inner: SerializedPageWriter::new(&mut buf),
                        data_pages: 0,
                        before,
                    }),
                    None => Box::new(SerializedPageWriter::new(&mut buf)),
                };
                let (def, rep) = (c.def.as_deref(), c.rep.as_deref());
                match (get_column_writer(descr, props, pages), &c.vals) {
                    (ColumnWriter::Int32ColumnWriter(mut w), Vals::I32(v)) => {
                        w.write_batch(v, def, rep).unwrap();
                        w.close().unwrap()
                    }
                    (ColumnWriter::Int64ColumnWriter(mut w), Vals::I64(v)) => {
                        w.write_batch(v, def, rep).unwrap();
                        w.close().unwrap()
                    }
                    _ => panic!("a column type the test does not write"),
                }
            };
            (bytes::Bytes::from(buf.into_inner().unwrap()), close)
        }

        /// One row group of `cols`, in pages of 4 rows.
        fn write_file(path: &Path, schema: &str, cols: Vec<Col<'_>>) {
            let schema = Arc::new(parse_message_type(schema).unwrap());
            let descr = SchemaDescriptor::new(schema.clone());
            let props = Arc::new(
                WriterProperties::builder()
                    .set_statistics_enabled(EnabledStatistics::None)
                    .set_dictionary_enabled(false)
                    .set_data_page_row_count_limit(4)
                    .set_write_batch_size(4)
                    .build(),
            );
            let file = std::fs::File::create(path).unwrap();
            let mut w = SerializedFileWriter::new(file, schema, props.clone()).unwrap();
            let mut rg = w.next_row_group().unwrap();
            for (i, c) in cols.iter().enumerate() {
                let (bytes, mut close) = chunk(descr.column(i), props.clone(), c);
                if let Some(r) = c.rows {
                    close.rows_written = r;
                }
                rg.append_column(&bytes, close).unwrap();
            }
            rg.close().unwrap();
            w.close().unwrap();
        }

        /// Values and levels of `rows` (`None`: a null list) in a list column of `max_def`, whose element
        /// is optional or not.
        fn levels(
            rows: &[Option<Vec<i32>>],
            max_def: i16,
            element_optional: bool,
        ) -> (Vec<i32>, (Vec<i16>, Vec<i16>)) {
            let (mut v, mut d, mut r) = (vec![], vec![], vec![]);
            let empty = max_def - 1 - i16::from(element_optional);
            for row in rows {
                match row {
                    None => {
                        d.push(0);
                        r.push(0);
                    }
                    Some(x) if x.is_empty() => {
                        d.push(empty);
                        r.push(0);
                    }
                    Some(x) => {
                        for (k, &e) in x.iter().enumerate() {
                            v.push(e);
                            d.push(max_def);
                            r.push(i16::from(k > 0));
                        }
                    }
                }
            }
            (v, (d, r))
        }

        const IDS: &str =
            "optional group input_ids (LIST) { repeated group list { optional int32 element; } }";
        const MASK: &str =
            "optional group loss_mask (LIST) { repeated group list { optional int32 element; } }";

        fn rows(n: i32, len: i32) -> Vec<Option<Vec<i32>>> {
            (0..n).map(|i| Some((i..i + len).collect())).collect()
        }

        #[test]
        fn an_empty_data_page_is_read_past() {
            let dir = tempfile::tempdir().unwrap();
            for (k, before, masked) in [(0, 0, false), (1, 1, true), (2, 3, true)] {
                let path = dir.path().join(format!("{k}.parquet"));
                let (v, l) = levels(&rows(20, 3), 3, true);
                let ones: Vec<Option<Vec<i32>>> = (0..20).map(|_| Some(vec![1; 3])).collect();
                let (mv, ml) = levels(&ones, 3, true);
                let mut cols = vec![Col {
                    empty_page_before: Some(before),
                    ..col(Vals::I32(&v), l)
                }];
                let mut schema = format!("message m {{ {IDS} ");
                if masked {
                    cols.push(col(Vals::I32(&mv), ml));
                    schema += MASK;
                }
                write_file(&path, &(schema + " }"), cols);
                let (planned, flat, arrow) = both(&path);
                assert!(planned);
                assert_eq!(
                    arrow
                        .as_ref()
                        .map(|b| b.iter().map(Vec::len).sum::<usize>()),
                    Ok(20)
                );
                assert_eq!(flat, arrow, "empty page before data page {before}");
            }
        }

        #[test]
        fn a_definition_level_above_the_maximum_is_refused() {
            let dir = tempfile::tempdir().unwrap();
            // An optional list of required elements: `max_def` 2 in 2-bit levels, so 3 can be written.
            let schema = "message m { optional group input_ids (LIST) { repeated group list { required int32 element; } } }";
            for (k, (vals, def, rep)) in [
                (vec![10, 20, 30], vec![2, 3, 2, 2], vec![0, 1, 0, 0]),
                (vec![20], vec![3, 3, 2], vec![0, 1, 0]),
            ]
            .into_iter()
            .enumerate()
            {
                let path = dir.path().join(format!("{k}.parquet"));
                write_file(&path, schema, vec![col(Vals::I32(&vals), (def, rep))]);
                let (planned, flat, _) = both(&path);
                assert!(planned);
                let err = flat.unwrap_err();
                assert!(
                    err.contains("definition level of 3, above its maximum 2"),
                    "{err}"
                );
            }
        }

        #[test]
        fn rows_past_the_footer_in_any_list_column_are_refused() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.parquet");
            let (v, l) = levels(&rows(10, 2), 3, true);
            let ones: Vec<Option<Vec<i32>>> = (0..11).map(|_| Some(vec![1, 1])).collect();
            let (mv, ml) = levels(&ones, 3, true);
            let ids: Vec<i64> = (0..10).collect();
            write_file(
                &path,
                &format!("message m {{ {IDS} {MASK} required int64 sample_id; }}"),
                vec![
                    col(Vals::I32(&v), l),
                    Col {
                        rows: Some(10),
                        ..col(Vals::I32(&mv), ml)
                    },
                    Col {
                        def: None,
                        rep: None,
                        ..col(Vals::I64(&ids), (vec![], vec![]))
                    },
                ],
            );
            let (planned, flat, arrow) = both(&path);
            assert!(planned);
            assert!(arrow.is_err());
            let err = flat.unwrap_err();
            assert!(
                err.contains("decodes to 11 rows, its footer says 10"),
                "{err}"
            );
        }

        #[test]
        fn narrow_masks_and_labels_wrap_as_arrow_rs_casts_them() {
            let dir = tempfile::tempdir().unwrap();
            let (v, l) = levels(&[Some(vec![5, 6])], 3, true);
            for (k, column, annotation, values) in [
                (0, "loss_mask", "INT_8", vec![256, 1]),
                (1, "loss_mask", "UINT_8", vec![-256, 0]),
                (2, "loss_mask", "INT_16", vec![65536, 3]),
                (3, "loss_mask", "UINT_16", vec![65536, 2]),
                (4, "labels", "INT_16", vec![65436, 3]),
                (5, "labels", "INT_8", vec![156, -100]),
            ] {
                let path = dir.path().join(format!("{k}.parquet"));
                let (mv, ml) = levels(&[Some(values)], 3, true);
                let schema = format!(
                    "message m {{ {IDS} optional group {column} (LIST) {{ repeated group list {{ optional int32 element ({annotation}); }} }} }}"
                );
                write_file(
                    &path,
                    &schema,
                    vec![col(Vals::I32(&v), l.clone()), col(Vals::I32(&mv), ml)],
                );
                let (planned, flat, arrow) = both(&path);
                assert!(planned, "{column} {annotation}");
                assert!(arrow.is_ok());
                assert_eq!(flat, arrow, "{column} {annotation}");
            }
        }

        #[test]
        fn list_schemas_arrow_rs_does_not_write_read_alike() {
            let dir = tempfile::tempdir().unwrap();
            let with_null: Vec<Option<Vec<i32>>> = vec![
                Some(vec![1, 2]),
                None,
                Some(vec![]),
                Some(vec![3]),
                Some(vec![4, 5, 6, 7, 8, 9]),
                Some(vec![]),
            ];
            let no_null: Vec<Option<Vec<i32>>> = with_null
                .iter()
                .map(|r| Some(r.clone().unwrap_or_default()))
                .collect();
            for (k, (schema, max_def, element_optional, rows)) in [
                ("message m { optional group input_ids (LIST) { repeated int32 element; } }", 2, false, &with_null),
                ("message m { required group input_ids (LIST) { repeated int32 element; } }", 1, false, &no_null),
                ("message m { repeated int32 input_ids; }", 1, false, &no_null),
                ("message m { required group input_ids (LIST) { repeated group list { optional int32 element; } } }", 2, true, &no_null),
                ("message m { optional group input_ids (LIST) { repeated group list { required int32 element; } } }", 2, false, &with_null),
                ("message m { optional group input_ids (LIST) { repeated group list { optional int32 element (UINT_32); } } }", 3, true, &with_null),
            ]
            .into_iter()
            .enumerate()
            {
                let path = dir.path().join(format!("{k}.parquet"));
                let (v, l) = levels(rows, max_def, element_optional);
                write_file(&path, schema, vec![col(Vals::I32(&v), l)]);
                let (planned, flat, arrow) = both(&path);
                assert!(planned, "{schema}");
                assert!(arrow.is_ok(), "{schema}: {arrow:?}");
                assert_eq!(flat, arrow, "{schema}");
            }
        }
    }
}
