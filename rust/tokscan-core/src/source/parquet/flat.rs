//! The scan's path through a row group whose token columns (`input_ids`, or `prompt_ids` + `output_ids`) and
//! loss mask or labels are flat lists (`list<int>`, one repetition level, as every trainer and `datasets`
//! writes them): each list column is read straight from its pages with the parquet crate's column reader into
//! buffers reused from batch to batch, and its row boundaries are where the repetition level is 0.
//!
//! arrow-rs's list reader spends a fifth of a one-thread scan turning levels into list offsets and a validity
//! bitmap, one level at a time, and the values are copied once more into the array (`benches/README.md`).
//! Here a batch whose every level holds a value (no empty, null or null-element rows) needs only the positions
//! of the zeros among its repetition levels, found a block of levels at a time. Other columns (sample id,
//! category) are few bytes per row and still come through arrow-rs, in batches of the same rows.
//! [`plan`] decides, from the footer, whether a file takes this path; `show`, `clean` and files with nested lists
//! (`list<list<..>>`), unsigned labels or other element types use the arrow-rs reader, whose batches this path
//! reproduces exactly (tested in `tests` below against it).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::basic::{Repetition, Type as PhysicalType};
use parquet::column::reader::{get_column_reader, ColumnReader};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::serialized_reader::SerializedPageReader;

use super::{
    guarded_batches, list_error, open_file, parquet_err, undecodable, unpanicked, ParquetShard,
};
use crate::error::{Error, Result};
use crate::source::lists::ListProblem;
use crate::source::{Batch, Offsets, Ragged, RaggedMask, Tokens};
use crate::token::MaskSlice;

/// How a flat list column's values are stored and handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    /// `INT32` pages of `int32` ids, or of a mask of any integer type up to 32 bits.
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
    leaf: usize,
    values: Values,
    /// Definition level of a value.
    max_def: i16,
    /// Definition level of a present, empty list; below it the list is null, above it (and below
    /// `max_def`) the element is null.
    def_empty: i16,
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

/// One flat list column of one row group, decoded batch by batch into reused buffers.
struct ListReader<'p> {
    list: &'p FlatList,
    reader: ColumnReader,
    def: Vec<i16>,
    rep: Vec<i16>,
    values: Buffer,
    /// Row starts into `values`, and the end.
    offsets: Vec<i64>,
    /// Rows whose list is null (only when some are).
    null_rows: Vec<bool>,
    /// A labels column's values as a loss mask (one byte per token).
    labels: Vec<u8>,
}

impl<'p> ListReader<'p> {
    fn new(
        file: &Arc<File>,
        rg: &RowGroupMetaData,
        list: &'p FlatList,
    ) -> parquet::errors::Result<Self> {
        let col = rg.column(list.leaf);
        let rows = usize::try_from(rg.num_rows()).unwrap_or(0);
        let pages = SerializedPageReader::new(Arc::clone(file), col, rows, None)?;
        let reader = get_column_reader(col.column_descr_ptr(), Box::new(pages));
        let values = match list.values {
            Values::I32 | Values::U32 => Buffer::I32(Vec::new()),
            Values::I64 | Values::U64 => Buffer::I64(Vec::new()),
            Values::Bool => Buffer::Bool(Vec::new()),
        };
        Ok(ListReader {
            list,
            reader,
            def: Vec::new(),
            rep: Vec::new(),
            values,
            offsets: Vec::new(),
            null_rows: Vec::new(),
            labels: Vec::new(),
        })
    }

    /// Decodes the next `rows` rows (fewer at the end of the row group) and returns how many it decoded.
    fn read(&mut self, path: &Path, rows: usize) -> Result<usize> {
        self.def.clear();
        self.rep.clear();
        let (def, rep) = (Some(&mut self.def), Some(&mut self.rep));
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            match (&mut self.reader, &mut self.values) {
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
        self.offsets.push(values as i64);
        if self.list.role == Role::Labels {
            fn on<T: Copy + PartialEq + From<i8>>(v: &[T], out: &mut Vec<u8>) {
                let ignore = T::from(-100);
                out.clear();
                out.extend(v.iter().map(|&x| u8::from(x != ignore)));
            }
            match &self.values {
                Buffer::I32(v) => on(v, &mut self.labels),
                Buffer::I64(v) => on(v, &mut self.labels),
                Buffer::Bool(_) => unreachable!("labels are planned only for integers"),
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
            if d >= max_def {
                value += 1;
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
        match &self.values {
            Buffer::I32(v) => MaskSlice::I32(v),
            Buffer::I64(v) => MaskSlice::I64(v),
            Buffer::Bool(v) => MaskSlice::Bool(v),
        }
    }
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
    let footer_rows = shard.row_group_rows[rg];
    let corrupt = |rows: u64| {
        Error::invalid(
            path,
            format!("corrupt data: row group {rg} decodes to {rows} rows, its footer says {footer_rows}"),
        )
    };
    let file = Arc::new(open_file(path)?);
    let rg_meta = shard.meta.metadata().row_group(rg);
    let open = |list| {
        unpanicked(|| ListReader::new(&file, rg_meta, list)).map_err(|e| parquet_err(path, e))
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
            Some(n) => Some(super::sample_ids(path, n, &column(n))?),
            None => None,
        };
        let categories = match &layout.category {
            Some(n) => Some(super::strings(path, n, &column(n))?),
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
    // Rows past the other columns' would be rows the footer does not count.
    if others.is_some() && ids.read(path, 1)? != 0 {
        return Err(corrupt(total + 1));
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

    fn seen(b: &Batch<'_>, out: &mut Vec<Seen>) {
        for i in 0..b.rows() {
            out.push(Seen {
                ids: tokens(b.ids.values, b.ids.offsets.range(i)),
                prompt: b.prompt.map(|p| tokens(p.values, p.offsets.range(i))),
                mask: b.mask.map(|m| mask(m.values, m.offsets.range(i))),
                null: b.null_rows.is_some_and(|n| n[i]),
                sample_id: b.sample_ids.and_then(|s| s[i].clone()),
                category: b.categories.and_then(|c| c[i].clone()),
            });
        }
    }

    /// Rows read, or the error's text.
    type Read = Result<Vec<Seen>, String>;

    /// Whether the file takes this path, and every batch of it through this path and through arrow-rs.
    fn both(path: &Path) -> (bool, Read, Read) {
        let shard = ParquetShard::open(path, &ColumnNames::default()).unwrap();
        let read = |flat: bool| {
            let mut out = Vec::new();
            for rg in 0..shard.row_group_rows.len() {
                let mut f = |b: &Batch<'_>| {
                    seen(b, &mut out);
                    Ok(())
                };
                let r = match (&shard.flat, flat) {
                    (Some(plan), true) => for_each_batch(&shard, plan, rg, &mut f),
                    _ => shard.for_each_arrow_batch(rg, &mut f),
                };
                r.map_err(|e| e.to_string())?;
            }
            Ok(out)
        };
        (shard.flat.is_some(), read(true), read(false))
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
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
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
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
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
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let (planned, _, arrow) = both(&path);
        assert!(!planned);
        assert_eq!(arrow.unwrap().len(), 1);
    }
}
