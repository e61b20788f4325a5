//! Parquet shards through arrow-rs: metadata is read once per file, each row group is one unit of work
//! decoded on its own (only the projected columns), batch by batch, so memory stays bounded. The scan reads
//! flat list columns with the parquet crate's column reader instead of arrow-rs's list arrays (`parquet/flat.rs`).

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::ProjectionMask;

use super::arrow::{detect_layout, record_batch, sample_ids, Layout};
use super::{Batch, ColumnNames, Format, FormatSpec, Source, UnitSpan, WriteStats};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;

mod flat;
mod pages;

/// Tokens decoded at a time inside a row group (rows per batch = this / the row group's mean row length).
/// arrow-rs decodes a list column through per-batch level and value buffers; at ~64k tokens they stay in
/// the L2 cache, where whole 1.5M-token row groups spilled to memory and were regrown by `realloc` every
/// batch (single-thread scan 3.0 s -> 2.2 s on the benchmark corpus; `benches/README.md`).
const BATCH_TOKENS: u64 = 1 << 16;
/// Bounds on rows per batch, whatever the row lengths.
const MAX_BATCH_ROWS: u64 = 1024;

/// An opened Parquet file: its metadata and column layout.
pub struct ParquetShard {
    pub path: PathBuf,
    meta: ArrowReaderMetadata,
    projection: ProjectionMask,
    pub layout: Layout,
    pub row_group_rows: Vec<u64>,
    /// One unit per row group: arrow-rs decodes a row group independently.
    units: Vec<UnitSpan>,
    /// Rows per decoded batch, per row group.
    batch_rows: Vec<usize>,
    /// The scan's path straight through the pages of flat list columns, when the layout takes it.
    flat: Option<flat::Plan>,
    /// The file's length when its footer was read: that path maps the file and refuses it shorter.
    len: u64,
}

/// Parquet in the format registry: recognised by its `PAR1` magic or its extension.
pub static FORMAT: FormatSpec = FormatSpec {
    name: "parquet",
    shown_as: "Parquet *.parquet",
    sniff: |head, _| head.starts_with(b"PAR1"),
    named: is_parquet_name,
    input_path: super::same_path,
    found: |path| Ok(super::input_if_named(is_parquet_name, path)),
    folder: super::no_folder,
    folder_files: &[],
    folder_skip: "",
    prefix: super::no_prefix,
    splits_across_tasks: true,
    companions: |_| Vec::new(),
    open: |path, columns| Ok(Box::new(ParquetShard::open(path, columns)?)),
};

fn is_parquet_name(name: &str) -> bool {
    super::has_extension(name, &["parquet", "pq"])
}

fn open_file(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::io(path, e))
}

fn parquet_err(path: &Path, e: impl std::fmt::Display) -> Error {
    let msg = e.to_string().replace('\n', " ");
    Error::invalid(path, format!("not a readable Parquet file: {msg}"))
}

/// The record batches of `reader`, with a panic of the parquet crate's decoders (it trusts some page
/// headers: a dictionary-encoded page in a column chunk without a dictionary page panics in parquet 60)
/// turned into an error, so a corrupt file is refused like any other instead of aborting the scan. The
/// iterator ends after the first error.
pub(crate) fn guarded_batches(
    reader: ParquetRecordBatchReader,
) -> impl Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>> {
    let mut reader = Some(reader);
    std::iter::from_fn(move || {
        let r = reader.as_mut()?;
        match catch_unwind(AssertUnwindSafe(|| r.next())) {
            Ok(Some(Ok(rb))) => Some(Ok(rb)),
            Ok(None) => {
                reader = None;
                None
            }
            Ok(Some(Err(e))) => {
                reader = None;
                Some(Err(e))
            }
            Err(panic) => {
                reader = None;
                Some(Err(arrow_schema::ArrowError::ParquetError(undecodable(
                    panic.as_ref(),
                ))))
            }
        }
    })
}

/// Runs a parquet-crate call that reads a file's footer or sets up its reader, with a panic (apache/arrow-rs
/// #9705: an assertion on a corrupt footer) turned into an error like [`guarded_batches`] does.
pub(crate) fn unpanicked<T>(
    f: impl FnOnce() -> parquet::errors::Result<T>,
) -> parquet::errors::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        Err(parquet::errors::ParquetError::General(format!(
            "corrupt metadata the decoder cannot read ({})",
            panic_text(panic.as_ref())
        )))
    })
}

/// A row group that decodes to another number of rows than its footer gives.
fn decoded_rows_differ(path: &Path, rg: usize, rows: u64, footer: u64) -> Error {
    Error::invalid(
        path,
        format!("corrupt data: row group {rg} decodes to {rows} rows, its footer says {footer}"),
    )
}

/// A decoder's panic on a page as the error's text.
fn undecodable(panic: &(dyn std::any::Any + Send)) -> String {
    format!(
        "corrupt data: a page the decoder cannot read ({})",
        panic_text(panic)
    )
}

/// What a decoder's panic said, on one line.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    crate::error::panic_message(panic)
        .unwrap_or_else(|| "the decoder panicked".into())
        .replace('\n', " ")
}

/// Each row group's row count, as the footer states it, refused when the footer contradicts itself: every
/// row has at least one value (or null / empty-list level) in each leaf column, so a row group that claims more
/// rows than one of its column chunks holds values lies (a corrupt footer), and is refused here rather than
/// sizing anything by it.
/// Each row group's row count, after checking what the footer says of it against itself and the file: a
/// corrupt footer is an input error here, not a panic in the reader later (arrow-rs asserts that a column
/// chunk's offset and size are not negative).
fn row_group_rows(path: &Path, meta: &ArrowReaderMetadata, file_len: u64) -> Result<Vec<u64>> {
    meta.metadata()
        .row_groups()
        .iter()
        .enumerate()
        .map(|(i, rg)| {
            let rows = rg.num_rows();
            if rows < 0 {
                return Err(Error::invalid(
                    path,
                    format!("corrupt footer: row group {i} has {rows} rows"),
                ));
            }
            for c in rg.columns() {
                let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
                let size = c.compressed_size();
                let inside = u64::try_from(start)
                    .ok()
                    .zip(u64::try_from(size).ok())
                    .and_then(|(s, n)| s.checked_add(n))
                    .is_some_and(|end| end <= file_len);
                if !inside {
                    return Err(Error::invalid(
                        path,
                        format!(
                            "corrupt footer: row group {i}'s column {} claims bytes {start}..+{size}, outside the file ({file_len} bytes)",
                            c.column_path()
                        ),
                    ));
                }
            }
            if let Some(c) = rg.columns().iter().find(|c| c.num_values() < rows) {
                return Err(Error::invalid(
                    path,
                    format!(
                        "corrupt footer: row group {i} claims {rows} rows but its column {} holds {} values",
                        c.column_path(),
                        c.num_values()
                    ),
                ));
            }
            Ok(rows as u64)
        })
        .collect()
}

impl ParquetShard {
    pub fn open(path: &Path, names: &ColumnNames) -> Result<Self> {
        let file = open_file(path)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len == 0 {
            return Err(Error::invalid(path, "empty file (0 bytes), not Parquet"));
        }
        let meta = unpanicked(|| ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()))
            .map_err(|e| parquet_err(path, e))?;
        let schema = meta.schema().clone();
        let layout = detect_layout(path, &schema, names)?;
        let wanted = layout.columns();
        let indices: Vec<usize> = wanted
            .iter()
            .map(|n| schema.index_of(n).expect("detected column"))
            .collect();
        let projection = ProjectionMask::roots(meta.parquet_schema(), indices);
        let row_group_rows = row_group_rows(path, &meta, len)?;
        let batch_rows = batch_rows(&meta, &layout, &row_group_rows);
        let units = row_group_rows
            .iter()
            .scan(0, |first, &rows| {
                let u = UnitSpan {
                    first_row: *first,
                    rows,
                };
                *first += rows;
                Some(u)
            })
            .collect();
        let mut shard = ParquetShard {
            path: path.to_path_buf(),
            meta,
            projection,
            layout,
            row_group_rows,
            units,
            batch_rows,
            flat: None,
            len,
        };
        shard.flat = flat::plan(&shard);
        Ok(shard)
    }

    pub fn rows(&self) -> u64 {
        self.row_group_rows.iter().sum()
    }

    /// Decodes row group `rg` batch by batch and hands each batch to `f`.
    pub fn for_each_batch(
        &self,
        rg: usize,
        mut f: impl FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        if let Some(plan) = &self.flat {
            return flat::for_each_batch(self, plan, rg, &mut f);
        }
        self.for_each_arrow_batch(rg, &mut f)
    }

    /// [`Self::for_each_batch`] through arrow-rs's record batches.
    fn for_each_arrow_batch(
        &self,
        rg: usize,
        mut f: impl FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let path = &self.path;
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(open_file(path)?, self.meta.clone())
                .with_projection(self.projection.clone())
                .with_row_groups(vec![rg])
                .with_batch_size(self.batch_rows[rg])
                .build()
                .map_err(|e| parquet_err(path, e))?;
        let mut rows = 0u64;
        for rb in guarded_batches(reader) {
            let rb = rb.map_err(|e| parquet_err(path, e))?;
            rows += rb.num_rows() as u64;
            self.with_batch(&rb, &mut f)?;
        }
        // A page whose header lies about its values decodes into another number of rows than the footer
        // gives its row group (pyarrow refuses such a file too); reading a row range would then disagree
        // with the scan.
        if rows != self.row_group_rows[rg] {
            return Err(decoded_rows_differ(path, rg, rows, self.row_group_rows[rg]));
        }
        Ok(())
    }

    /// Decodes local rows `[start, end)`: only the row groups that hold them, skipping the rows before.
    pub fn for_rows(
        &self,
        start: u64,
        end: u64,
        mut f: impl FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let path = &self.path;
        let mut first = 0u64;
        for (rg, &n) in self.row_group_rows.iter().enumerate() {
            let (lo, hi) = (start.max(first), end.min(first + n));
            if lo < hi {
                let selection = RowSelection::from(vec![
                    RowSelector::skip((lo - first) as usize),
                    RowSelector::select((hi - lo) as usize),
                ]);
                let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                    open_file(path)?,
                    self.meta.clone(),
                )
                .with_projection(self.projection.clone())
                .with_row_groups(vec![rg])
                .with_row_selection(selection)
                .with_batch_size(self.batch_rows[rg])
                .build()
                .map_err(|e| parquet_err(path, e))?;
                for rb in guarded_batches(reader) {
                    let rb = rb.map_err(|e| parquet_err(path, e))?;
                    self.with_batch(&rb, &mut f)?;
                }
            }
            first += n;
            if first >= end {
                break;
            }
        }
        Ok(())
    }

    /// Every row's sample id, decoding only that column.
    pub fn read_sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        let Some(name) = self.layout.sample_id.as_deref() else {
            return Ok(None);
        };
        let path = &self.path;
        let index = self.meta.schema().index_of(name).expect("detected column");
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(open_file(path)?, self.meta.clone())
                .with_projection(ProjectionMask::roots(self.meta.parquet_schema(), [index]))
                .build()
                .map_err(|e| parquet_err(path, e))?;
        // Grown as rows are read, not sized by the footer's count (which a corrupt footer may inflate).
        let mut out = Vec::new();
        for rb in guarded_batches(reader) {
            let rb = rb.map_err(|e| parquet_err(path, e))?;
            out.extend(sample_ids(path, name, rb.column(0))?);
        }
        Ok(Some(out))
    }

    fn with_batch(
        &self,
        rb: &RecordBatch,
        f: &mut impl FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        record_batch(&self.path, &self.layout, rb, f)
    }
}

impl Source for ParquetShard {
    fn path(&self) -> &Path {
        &self.path
    }

    fn format(&self) -> Format {
        Format::of(&FORMAT)
    }

    fn layout(&self) -> String {
        self.layout.describe()
    }

    fn rows(&self) -> u64 {
        ParquetShard::rows(self)
    }

    fn tokens_hint(&self) -> Option<u64> {
        None
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    fn warning(&self) -> Option<String> {
        self.layout.note.clone()
    }

    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        self.for_each_batch(unit, f)
    }

    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        self.for_rows(start, end, f)
    }

    fn sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        self.read_sample_ids()
    }

    /// The chunks of the columns read (not a text column beside them) of every row group holding one of
    /// `rows` (the footer is read when the file opens).
    fn byte_ranges(&self, rows: std::ops::Range<u64>) -> Option<Vec<super::FileRange>> {
        let groups = self.meta.metadata().row_groups();
        let spans = self
            .units
            .iter()
            .zip(groups)
            .filter(|(u, _)| u.first_row < rows.end && rows.start < u.first_row + u.rows)
            .flat_map(|(_, rg)| rg.columns().iter().enumerate())
            .filter(|(leaf, _)| self.projection.leaf_included(*leaf))
            .map(|(_, c)| {
                // Checked against the file's length when it opened (`row_group_rows`).
                let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset()) as u64;
                (self.path.clone(), start..start + c.compressed_size() as u64)
            })
            .collect();
        Some(spans)
    }

    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        super::check_keep(self, keep)?;
        let rows = write_filtered_file(&self.path, &self.meta, keep, out)?;
        Ok(WriteStats {
            rows,
            files: vec![out.to_path_buf()],
            omitted: None,
        })
    }
}

/// Writes the Parquet file `path` (opened with `meta`) again at `out` without the rows where `keep` is
/// false: every column, the same Arrow schema (with its metadata), the codec of its first column chunk, one
/// row group per source row group that keeps a row. Returns the rows written. (The NumPy format's
/// `meta.parquet` goes through here too.)
pub(crate) fn write_filtered_file(
    path: &Path,
    meta: &ArrowReaderMetadata,
    keep: &[bool],
    out: &Path,
) -> Result<u64> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    // Each column keeps the codec its first row group was written with (a file may compress its columns
    // differently: token lists with zstd, a small label column not at all).
    let columns = meta
        .metadata()
        .row_groups()
        .first()
        .map(|rg| rg.columns().to_vec())
        .unwrap_or_default();
    let codec = columns
        .first()
        .map_or(Compression::ZSTD(Default::default()), |c| c.compression());
    let mut props = WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_row_count(None);
    for c in &columns {
        props = props.set_column_compression(c.column_path().clone(), c.compression());
    }
    let props = props.build();
    let file = super::create_new(out)?;
    let mut w = ArrowWriter::try_new(file, meta.schema().clone(), Some(props))
        .map_err(|e| Error::invalid(out, format!("cannot write Parquet: {e}")))?;
    let werr = |e: parquet::errors::ParquetError| {
        Error::invalid(out, format!("cannot write Parquet: {e}"))
    };
    let mut first = 0usize;
    let mut written = 0u64;
    for (rg, g) in meta.metadata().row_groups().iter().enumerate() {
        let n = g.num_rows().max(0) as usize;
        let k = keep
            .get(first..first + n)
            .ok_or_else(|| Error::invalid(path, "the file changed since it was opened"))?;
        first += n;
        if !k.iter().any(|&x| x) {
            continue;
        }
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(open_file(path)?, meta.clone())
                .with_row_groups(vec![rg])
                .with_batch_size(MAX_BATCH_ROWS as usize)
                .build()
                .map_err(|e| parquet_err(path, e))?;
        let mut at = 0usize;
        for rb in guarded_batches(reader) {
            let rb = rb.map_err(|e| parquet_err(path, e))?;
            let part = &k[at..at + rb.num_rows()];
            at += rb.num_rows();
            let rb = if part.iter().all(|&x| x) {
                rb
            } else {
                let mask = arrow_array::BooleanArray::from(part.to_vec());
                arrow_select::filter::filter_record_batch(&rb, &mask)
                    .map_err(|e| parquet_err(path, e))?
            };
            written += rb.num_rows() as u64;
            w.write(&rb).map_err(werr)?;
        }
        w.flush().map_err(werr)?;
    }
    if first != keep.len() {
        return Err(Error::invalid(path, "the file changed since it was opened"));
    }
    let file = w.into_inner().map_err(werr)?;
    super::finish(out, file)?;
    Ok(written)
}

/// Rows per batch for each row group, from the token columns' value counts in the metadata (a value count
/// includes one placeholder per null or empty list, which only matters for rows of almost no tokens).
fn batch_rows(meta: &ArrowReaderMetadata, layout: &Layout, rows: &[u64]) -> Vec<usize> {
    let leaves: Vec<usize> = meta
        .parquet_schema()
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let root = c.path().parts().first().map(String::as_str);
            root == Some(layout.ids.as_str()) || root.is_some() && root == layout.prompt.as_deref()
        })
        .map(|(i, _)| i)
        .collect();
    meta.metadata()
        .row_groups()
        .iter()
        .zip(rows)
        .map(|(rg, &n)| {
            let tokens: u64 = leaves
                .iter()
                .map(|&i| rg.column(i).num_values().max(0) as u64)
                .sum();
            let per_row = tokens.div_ceil(n.max(1)).max(1);
            (BATCH_TOKENS / per_row).clamp(1, MAX_BATCH_ROWS) as usize
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Int64Array, Int8Array, ListArray, UInt32Array};
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::Field;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use proptest::prelude::*;

    use super::*;
    use crate::source::Tokens;
    use crate::token::MaskSlice;

    type Row = (Vec<u32>, Vec<i8>, Option<SampleId>);

    fn list<A: Array + 'static>(lens: &[usize], values: A) -> ListArray {
        let field = Arc::new(Field::new("item", values.data_type().clone(), true));
        ListArray::new(
            field,
            OffsetBuffer::from_lengths(lens.iter().copied()),
            Arc::new(values),
            None,
        )
    }

    /// The `input_ids` and `loss_mask` list columns of `rows`.
    fn ids_and_mask(rows: &[Row]) -> (ListArray, ListArray) {
        let lens: Vec<usize> = rows.iter().map(|r| r.0.len()).collect();
        let ids = list(
            &lens,
            UInt32Array::from(rows.iter().flat_map(|r| r.0.clone()).collect::<Vec<_>>()),
        );
        let mask = list(
            &lens,
            Int8Array::from(rows.iter().flat_map(|r| r.1.clone()).collect::<Vec<_>>()),
        );
        (ids, mask)
    }

    /// Writes `rows` (ids, mask, sample id) in row groups of `rg_rows` and reads them back batch by batch.
    fn round_trip(rows: &[Row], rg_rows: usize) -> (Vec<Row>, ParquetShard) {
        let (ids, mask) = ids_and_mask(rows);
        let sid = Int64Array::from((0..rows.len() as i64).collect::<Vec<_>>());
        let batch = RecordBatch::try_from_iter([
            ("input_ids", Arc::new(ids) as ArrayRef),
            ("loss_mask", Arc::new(mask) as ArrayRef),
            ("sample_id", Arc::new(sid) as ArrayRef),
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rg_rows))
            .build();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let shard = ParquetShard::open(&path, &ColumnNames::default()).unwrap();
        let mut out = Vec::new();
        for rg in 0..shard.row_group_rows.len() {
            shard
                .for_each_batch(rg, |b| {
                    let (Tokens::U32(v), Some(MaskSlice::I8(m))) =
                        (b.ids.values, b.mask.map(|m| m.values))
                    else {
                        panic!("unexpected storage types");
                    };
                    let mo = b.mask.unwrap().offsets;
                    for i in 0..b.rows() {
                        let sid = b.sample_ids.unwrap()[i].clone();
                        out.push((
                            v[b.ids.offsets.range(i)].to_vec(),
                            m[mo.range(i)].to_vec(),
                            sid,
                        ));
                    }
                    Ok(())
                })
                .unwrap();
        }
        (out, shard)
    }

    fn rows_of(lens: &[usize]) -> Vec<Row> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| {
                let ids = (0..n as u32)
                    .map(|t| t.wrapping_mul(2654435761) % 160_000 + i as u32)
                    .collect();
                let mask = (0..n).map(|t| i8::from(t >= n / 3)).collect();
                (ids, mask, Some(SampleId::Int(i as i64)))
            })
            .collect()
    }

    /// A file staged as an object store's sparse copy is (`remote::fetch` with footers: its size, its footer)
    /// reads a row group once the ranges `byte_ranges` names are filled from the original, and those ranges
    /// leave out a column the scan does not read.
    #[cfg(unix)]
    #[test]
    fn the_byte_ranges_of_a_row_group_are_what_reading_it_needs() {
        use arrow_array::StringArray;
        use std::io::{Read, Seek, SeekFrom};
        use std::os::unix::fs::FileExt;

        let rows = rows_of(&[300, 5, 800, 60, 1200, 40, 7, 900]);
        let (ids, mask) = ids_and_mask(&rows);
        let text = StringArray::from(
            (0..rows.len())
                .map(|i| format!("{i}").repeat(5000))
                .collect::<Vec<_>>(),
        );
        let batch = RecordBatch::try_from_iter([
            ("input_ids", Arc::new(ids) as ArrayRef),
            ("text", Arc::new(text) as ArrayRef),
            ("loss_mask", Arc::new(mask) as ArrayRef),
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (orig, copy) = (dir.path().join("o.parquet"), dir.path().join("c.parquet"));
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(3))
            .build();
        let mut w = ArrowWriter::try_new(File::create(&orig).unwrap(), batch.schema(), Some(props))
            .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let bytes = std::fs::read(&orig).unwrap();
        let footer = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap())
            as usize
            + 8;
        let f = File::create(&copy).unwrap();
        f.set_len(bytes.len() as u64).unwrap();
        f.write_all_at(
            &bytes[bytes.len() - footer..],
            (bytes.len() - footer) as u64,
        )
        .unwrap();
        let (whole, sparse) = (
            ParquetShard::open(&orig, &ColumnNames::default()).unwrap(),
            ParquetShard::open(&copy, &ColumnNames::default()).unwrap(),
        );
        let read = |shard: &ParquetShard, rg: usize| {
            let mut out = Vec::new();
            shard
                .for_each_batch(rg, |b| {
                    let Tokens::U32(v) = b.ids.values else {
                        panic!("u32 ids")
                    };
                    for i in 0..b.rows() {
                        out.push(v[b.ids.offsets.range(i)].to_vec());
                    }
                    Ok(())
                })
                .map(|()| out)
        };
        let ranges = sparse.byte_ranges(3..4).unwrap(); // row group 1
        let text_chunk = whole.meta.metadata().row_group(1).column(1);
        let text_start = text_chunk
            .dictionary_page_offset()
            .unwrap_or(text_chunk.data_page_offset()) as u64;
        assert_eq!(ranges.len(), 2, "input_ids and loss_mask only: {ranges:?}");
        assert!(ranges.iter().all(|(_, r)| !r.contains(&text_start)));
        let mut src = File::open(&orig).unwrap();
        for (file, r) in &ranges {
            assert_eq!(file, &copy);
            let mut buf = vec![0u8; (r.end - r.start) as usize];
            src.seek(SeekFrom::Start(r.start)).unwrap();
            src.read_exact(&mut buf).unwrap();
            f.write_all_at(&buf, r.start).unwrap();
        }
        assert_eq!(read(&sparse, 1).unwrap(), read(&whole, 1).unwrap());
        assert!(read(&sparse, 2).map_or(true, |got| got != read(&whole, 2).unwrap()));
    }

    #[test]
    fn batch_size_follows_the_row_length() {
        // Row group 0: 4 rows of 40k tokens (1 per batch); row group 1: 4 rows of 10 (the row cap).
        let rows = rows_of(&[40_000, 40_000, 40_000, 40_000, 10, 10, 10, 10]);
        let (back, shard) = round_trip(&rows, 4);
        assert_eq!(back, rows);
        assert_eq!(shard.batch_rows, vec![1, MAX_BATCH_ROWS as usize]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Every row comes back whole and in order, with its mask and sample id, whatever the row lengths
        /// (empty, tiny, longer than a batch) and however rows fall into row groups and batches.
        #[test]
        fn rows_survive_any_batching(
            lens in proptest::collection::vec(
                prop_oneof![4 => 0usize..300, 1 => 0usize..100_000],
                1..60,
            ),
            rg_rows in 1usize..40,
        ) {
            let rows = rows_of(&lens);
            let (back, _) = round_trip(&rows, rg_rows);
            prop_assert_eq!(back, rows);
        }
    }
}
