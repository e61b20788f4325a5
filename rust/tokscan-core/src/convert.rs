//! `tokscan convert`: a corpus in any format the scan reads, written as one Parquet file or as a NumPy corpus
//! directory, from the reader that numbers the rows for the scan ([`Corpus::samples`]), so the copy holds
//! exactly the samples the scan saw: ids, loss mask, sample ids and categories.
//!
//! - **Parquet** (`part-00000.parquet`, zstd, a row group per 4,096 samples): `sample_id`, `category`, then
//!   `prompt_ids` + `output_ids` when the first sample stores its prompt apart (else `input_ids`), as
//!   `large_list<int64>`, and `loss_mask` (`large_list<uint8>`) when the first sample has one; a sample without
//!   a mask in a masked corpus gets a mask of ones (the whole sequence, as a reader without a mask trains on).
//! - **NumPy** (`tokens.npy` in the narrowest of int32/int64 that holds every id, `offsets.npy` int64,
//!   `loss_mask.npy` uint8 when the first sample has a mask, `meta.parquet` with `category` and, when any
//!   sample has one, `sample_id`): one sequence per sample, a prompt stored apart joined to its completion; a
//!   mask shorter than its sequence is padded with zeros and a longer one cut (the layout has one offsets
//!   array for both).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, LargeListArray, RecordBatch, StringArray, UInt8Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::corpus::{Corpus, SampleData};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;
use crate::scan::Progress;
use crate::source::numpy::{npy_header, write_npy, Dtype};
use crate::source::{create_new, finish};

/// Samples read and written at a time (and rows per Parquet row group).
const CHUNK: u64 = 4096;

/// The format `convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Parquet,
    Numpy,
}

impl std::str::FromStr for Target {
    type Err = Error;

    fn from_str(s: &str) -> Result<Target> {
        match s {
            "parquet" => Ok(Target::Parquet),
            "numpy" => Ok(Target::Numpy),
            _ => Err(Error::Usage(format!(
                "--to must be parquet or numpy, not {s:?}"
            ))),
        }
    }
}

/// What [`convert`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub samples: u64,
    pub tokens: u64,
    pub files: Vec<PathBuf>,
}

/// Writes every sample of `corpus` as `to` into `out`, a directory that must not exist or be empty (it is
/// created). `progress` counts samples (`units_total` / `units_done`) and tokens, and cancels between
/// chunks. On any error the files written so far are removed (and `out`, when this call created it).
pub fn convert(corpus: &Corpus, to: Target, out: &Path, progress: &Progress) -> Result<Converted> {
    let n = corpus.len();
    if n == 0 {
        return Err(Error::Usage("no samples found: nothing to convert".into()));
    }
    let created = match std::fs::create_dir(out) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let empty = out.is_dir()
                && std::fs::read_dir(out)
                    .map_err(|e| Error::io(out, e))?
                    .next()
                    .is_none();
            if !empty {
                return Err(Error::Usage(format!(
                    "{}: exists and is not an empty directory",
                    out.display()
                )));
            }
            false
        }
        Err(e) => return Err(Error::io(out, e)),
    };
    progress.units_total.store(n, Ordering::Relaxed);
    let mut written = Vec::new();
    let result = write_all(corpus, to, out, progress, &mut written);
    if result.is_err() {
        for f in &written {
            let _ = std::fs::remove_file(f);
        }
        if created {
            let _ = std::fs::remove_dir_all(out);
        }
    }
    result
}

fn write_all(
    corpus: &Corpus,
    to: Target,
    out: &Path,
    progress: &Progress,
    written: &mut Vec<PathBuf>,
) -> Result<Converted> {
    let n = corpus.len();
    let int_ids = corpus.integer_ids()?;
    let mut sink: Box<dyn Sink> = match to {
        Target::Parquet => Box::new(ParquetSink::new(out, int_ids)),
        Target::Numpy => Box::new(NumpySink::new(out, written, int_ids)?),
    };
    let (mut done, mut tokens) = (0u64, 0u64);
    for start in (0..n).step_by(CHUNK as usize) {
        if progress.cancelled() {
            return Err(Error::Interrupted);
        }
        let chunk = corpus.samples(start, n.min(start + CHUNK))?;
        // A line that is not a sample has no tokens to copy: written, it would become an empty sample and its
        // `malformed_line` finding would be lost with it.
        if let Some((s, line)) = chunk
            .iter()
            .find_map(|s| s.malformed_line().map(|l| (s, l)))
        {
            return Err(Error::invalid(
                corpus.sources[s.source].path(),
                format!(
                    "line {line} is not a sample (malformed_line): convert copies samples only; drop such \
                     lines first with `tokscan clean --code malformed_line`"
                ),
            ));
        }
        // Readers give an id they cannot hold (a float that is not a whole number, a uint64 past 2^63) as -1, out
        // of the vocabulary for the scan; a copy would keep the -1 in its place and lose the value. (Any other
        // id, negative ones too, is copied as it is.)
        if let Some(s) = chunk.iter().find(|s| s.ids.contains(&-1)) {
            return Err(Error::invalid(
                corpus.sources[s.source].path(),
                format!(
                    "sample {} (row {}) holds the id -1, which is also how an id that is not a whole number, or is \
                     past 2^63 - 1, is read: convert cannot copy it as it is; drop such samples first with \
                     `tokscan clean --code out_of_vocab`",
                    s.local_row, s.row
                ),
            ));
        }
        let t: u64 = chunk.iter().map(|s| s.ids.len() as u64).sum();
        sink.add(&chunk, written)?;
        done += chunk.len() as u64;
        tokens += t;
        progress.units_done.store(done, Ordering::Relaxed);
        progress.samples.store(done, Ordering::Relaxed);
        progress.tokens.fetch_add(t, Ordering::Relaxed);
    }
    sink.close(written)?;
    Ok(Converted {
        samples: done,
        tokens,
        files: written.clone(),
    })
}

trait Sink {
    /// Writes a chunk of samples; every file it creates goes into `written` before it is written to.
    fn add(&mut self, chunk: &[SampleData], written: &mut Vec<PathBuf>) -> Result<()>;
    fn close(self: Box<Self>, written: &mut Vec<PathBuf>) -> Result<()>;
}

fn parquet_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::invalid(path, format!("cannot write Parquet: {e}"))
}

fn large_list(item: DataType) -> DataType {
    DataType::LargeList(Arc::new(Field::new("item", item, true)))
}

/// A `large_list<int64>` column of `rows`.
fn id_lists<'a>(rows: impl Iterator<Item = &'a [i64]>) -> ArrayRef {
    let mut values = Vec::new();
    let mut lengths = Vec::new();
    for r in rows {
        values.extend_from_slice(r);
        lengths.push(r.len());
    }
    Arc::new(LargeListArray::new(
        Arc::new(Field::new("item", DataType::Int64, true)),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(Int64Array::from(values)),
        None,
    ))
}

/// The mask `s` is written with in a masked copy: its own, else its completion when the source stores the prompt
/// apart (what the scan trains when there is no mask), else `fill` on every token.
fn mask_of(s: &SampleData, fill: u8) -> Vec<u8> {
    match (&s.mask, s.prompt_len) {
        (Some(m), _) => m.clone(),
        (None, Some(p)) => {
            let mut m = vec![0; s.ids.len()];
            m[p.min(s.ids.len())..].fill(1);
            m
        }
        (None, None) => vec![fill; s.ids.len()],
    }
}

/// A `large_list<uint8>` column of `rows`.
fn mask_lists(rows: Vec<Vec<u8>>) -> ArrayRef {
    let lengths: Vec<usize> = rows.iter().map(Vec::len).collect();
    Arc::new(LargeListArray::new(
        Arc::new(Field::new("item", DataType::UInt8, true)),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(UInt8Array::from(rows.concat())),
        None,
    ))
}

fn strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values))
}

/// The `sample_id` column: `int64` when every id is an integer (`ints`), else text.
fn id_column<'a>(ints: bool, ids: impl Iterator<Item = Option<&'a SampleId>>) -> (Field, ArrayRef) {
    if ints {
        let col = Int64Array::from_iter(ids.map(|id| match id {
            Some(SampleId::Int(n)) => Some(*n),
            _ => None,
        }));
        (
            Field::new("sample_id", DataType::Int64, true),
            Arc::new(col),
        )
    } else {
        let col = StringArray::from_iter(ids.map(|id| id.map(SampleId::key)));
        (Field::new("sample_id", DataType::Utf8, true), Arc::new(col))
    }
}

/// One Parquet file; the first chunk decides the columns.
struct ParquetSink {
    path: PathBuf,
    writer: Option<(ArrowWriter<std::io::BufWriter<File>>, Arc<Schema>)>,
    split: bool,
    masked: bool,
    int_ids: bool,
}

impl ParquetSink {
    fn new(out: &Path, int_ids: bool) -> ParquetSink {
        ParquetSink {
            path: out.join("part-00000.parquet"),
            int_ids,
            writer: None,
            split: false,
            masked: false,
        }
    }
}

impl Sink for ParquetSink {
    fn add(&mut self, chunk: &[SampleData], written: &mut Vec<PathBuf>) -> Result<()> {
        if self.writer.is_none() {
            self.split = chunk[0].prompt_len.is_some();
            self.masked = chunk[0].mask.is_some();
            let mut fields = vec![
                id_column(self.int_ids, std::iter::empty()).0,
                Field::new("category", DataType::Utf8, true),
            ];
            let lists: &[&str] = if self.split {
                &["prompt_ids", "output_ids"]
            } else {
                &["input_ids"]
            };
            fields.extend(
                lists
                    .iter()
                    .map(|c| Field::new(*c, large_list(DataType::Int64), true)),
            );
            if self.masked {
                fields.push(Field::new("loss_mask", large_list(DataType::UInt8), true));
            }
            let schema = Arc::new(Schema::new(fields));
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(Default::default()))
                .set_max_row_group_row_count(None)
                .build();
            let file = create_new(&self.path)?;
            written.push(self.path.clone());
            let w = ArrowWriter::try_new(file, schema.clone(), Some(props))
                .map_err(|e| parquet_error(&self.path, e))?;
            self.writer = Some((w, schema));
        }
        let (w, schema) = self.writer.as_mut().expect("opened above");
        let mut cols = vec![
            id_column(self.int_ids, chunk.iter().map(|s| s.sample_id.as_ref())).1,
            strings(chunk.iter().map(|s| Some(s.category.as_str()))),
        ];
        if self.split {
            let cut = |s: &SampleData| s.prompt_len.unwrap_or(0).min(s.ids.len());
            cols.push(id_lists(chunk.iter().map(|s| &s.ids[..cut(s)])));
            cols.push(id_lists(chunk.iter().map(|s| &s.ids[cut(s)..])));
        } else {
            cols.push(id_lists(chunk.iter().map(|s| s.ids.as_slice())));
        }
        if self.masked {
            cols.push(mask_lists(chunk.iter().map(|s| mask_of(s, 1)).collect()));
        }
        let batch =
            RecordBatch::try_new(schema.clone(), cols).map_err(|e| parquet_error(&self.path, e))?;
        w.write(&batch).map_err(|e| parquet_error(&self.path, e))?;
        w.flush().map_err(|e| parquet_error(&self.path, e))
    }

    fn close(self: Box<Self>, _written: &mut Vec<PathBuf>) -> Result<()> {
        let path = self.path;
        if let Some((w, _)) = self.writer {
            let file = w.into_inner().map_err(|e| parquet_error(&path, e))?;
            finish(&path, file)?;
        }
        Ok(())
    }
}

/// A NumPy corpus directory. Ids are spooled as int64 to a hidden file beside the output until the widest id
/// is known; the mask is written in place behind a header rewritten at the end.
struct NumpySink {
    out: PathBuf,
    spool_path: PathBuf,
    spool: std::io::BufWriter<File>,
    mask: Option<(PathBuf, std::io::BufWriter<File>)>,
    masked: Option<bool>,
    lengths: Vec<i64>,
    sample_ids: Vec<Option<SampleId>>,
    /// Every id an integer (`Corpus::integer_ids`): the `sample_id` column is `int64`.
    int_ids: bool,
    categories: Vec<String>,
    tokens: u64,
    lo: i64,
    hi: i64,
}

impl NumpySink {
    fn new(out: &Path, written: &mut Vec<PathBuf>, int_ids: bool) -> Result<NumpySink> {
        let spool_path = out.join(".tokens.int64.partial");
        let spool = create_new(&spool_path)?;
        written.push(spool_path.clone());
        Ok(NumpySink {
            out: out.to_path_buf(),
            spool_path,
            spool,
            mask: None,
            masked: None,
            lengths: Vec::new(),
            sample_ids: Vec::new(),
            int_ids,
            categories: Vec::new(),
            tokens: 0,
            lo: 0,
            hi: 0,
        })
    }
}

/// The header a 1-D `.npy` of `len` elements gets, padded to `size` bytes (a header whose length does not
/// depend on `len`, written first and rewritten once `len` is known).
fn fixed_header(dtype: Dtype, len: usize, size: usize) -> Vec<u8> {
    let mut h = npy_header(dtype, len);
    debug_assert!(h.len() <= size);
    let end = h.pop().expect("ends with a newline");
    debug_assert_eq!(end, b'\n');
    h.resize(size - 1, b' ');
    h.push(b'\n');
    let field = (size - 10) as u16;
    h[8..10].copy_from_slice(&field.to_le_bytes());
    h
}

/// Header bytes of the arrays written before their length is known: room for any `u64` length.
const HEADER: usize = 128;

impl Sink for NumpySink {
    fn add(&mut self, chunk: &[SampleData], written: &mut Vec<PathBuf>) -> Result<()> {
        if self.masked.is_none() {
            let masked = chunk[0].mask.is_some();
            self.masked = Some(masked);
            if masked {
                let p = self.out.join("loss_mask.npy");
                let mut w = create_new(&p)?;
                written.push(p.clone());
                w.write_all(&fixed_header(Dtype::U8, 0, HEADER))
                    .map_err(|e| Error::io(&p, e))?;
                self.mask = Some((p, w));
            }
        }
        for s in chunk {
            for &t in &s.ids {
                self.lo = self.lo.min(t);
                self.hi = self.hi.max(t);
                self.spool
                    .write_all(&t.to_le_bytes())
                    .map_err(|e| Error::io(&self.spool_path, e))?;
            }
            if let Some((p, w)) = &mut self.mask {
                let mut m = mask_of(s, 0);
                m.resize(s.ids.len(), 0);
                w.write_all(&m).map_err(|e| Error::io(p, e))?;
            }
            self.lengths.push(s.ids.len() as i64);
            self.tokens += s.ids.len() as u64;
            self.sample_ids.push(s.sample_id.clone());
            self.categories.push(s.category.clone());
        }
        Ok(())
    }

    fn close(self: Box<Self>, written: &mut Vec<PathBuf>) -> Result<()> {
        let this = *self;
        let len = this.tokens as usize;
        // Offsets. (`out` was new or empty: every file in it is this call's, to remove on failure.)
        let p = this.out.join("offsets.npy");
        written.push(p.clone());
        write_npy(&p, Dtype::I64, this.lengths.len() + 1, |w| {
            let mut at = 0i64;
            w.write_all(&at.to_le_bytes())
                .map_err(|e| Error::io(&p, e))?;
            for l in &this.lengths {
                at += l;
                w.write_all(&at.to_le_bytes())
                    .map_err(|e| Error::io(&p, e))?;
            }
            Ok(this.lengths.len() as u64 + 1)
        })?;
        // The mask: its header, now that its length is known.
        if let Some((p, w)) = this.mask {
            let mut f = w.into_inner().map_err(|e| Error::io(&p, e.into_error()))?;
            f.seek(SeekFrom::Start(0))
                .and_then(|_| f.write_all(&fixed_header(Dtype::U8, len, HEADER)))
                .map_err(|e| Error::io(&p, e))?;
            finish(&p, std::io::BufWriter::new(f))?;
        }
        // Tokens, from the spool, in the narrowest type that holds every id.
        let spool = this
            .spool
            .into_inner()
            .map_err(|e| Error::io(&this.spool_path, e.into_error()))?;
        drop(spool);
        let dtype = if this.lo >= 0 && this.hi < i64::from(i32::MAX) + 1 {
            Dtype::I32
        } else {
            Dtype::I64
        };
        let p = this.out.join("tokens.npy");
        written.push(p.clone());
        let mut r = std::io::BufReader::with_capacity(
            8 << 20,
            File::open(&this.spool_path).map_err(|e| Error::io(&this.spool_path, e))?,
        );
        write_npy(&p, dtype, len, |w| {
            let mut buf = [0u8; 8];
            for _ in 0..len {
                r.read_exact(&mut buf)
                    .map_err(|e| Error::io(&this.spool_path, e))?;
                let t = i64::from_le_bytes(buf);
                let res = match dtype {
                    Dtype::I32 => w.write_all(&(t as i32).to_le_bytes()),
                    _ => w.write_all(&buf),
                };
                res.map_err(|e| Error::io(&p, e))?;
            }
            Ok(len as u64)
        })?;
        std::fs::remove_file(&this.spool_path).map_err(|e| Error::io(&this.spool_path, e))?;
        written.retain(|f| f != &this.spool_path);
        // Sample ids and categories.
        let p = this.out.join("meta.parquet");
        let mut fields = Vec::new();
        let mut cols = Vec::new();
        if this.sample_ids.iter().any(Option::is_some) {
            let (field, col) = id_column(this.int_ids, this.sample_ids.iter().map(Option::as_ref));
            fields.push(field);
            cols.push(col);
        }
        fields.push(Field::new("category", DataType::Utf8, true));
        cols.push(strings(this.categories.iter().map(|s| Some(s.as_str()))));
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), cols).map_err(|e| parquet_error(&p, e))?;
        let file = create_new(&p)?;
        written.push(p.clone());
        let mut w = ArrowWriter::try_new(file, schema, None).map_err(|e| parquet_error(&p, e))?;
        w.write(&batch).map_err(|e| parquet_error(&p, e))?;
        let file = w.into_inner().map_err(|e| parquet_error(&p, e))?;
        finish(&p, file)
    }
}
