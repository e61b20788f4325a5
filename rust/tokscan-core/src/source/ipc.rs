//! Arrow IPC: the file format (Feather v2, magic `ARROW1`) and the stream format (what Hugging Face
//! `datasets` writes: `save_to_disk` shards `data-*.arrow` and the `cache-*.arrow` files of `Dataset.map`).
//! The file is memory-mapped and handed to arrow-ipc's `FileDecoder` as one buffer, so uncompressed columns
//! are read in place (zero copy); LZ4 / ZSTD compressed bodies are decompressed batch by batch.
//!
//! Every message header is parsed and checked at open (flatbuffer verification, bodies and buffers inside
//! the file), so a truncated or corrupt file is an input error before any token is read. Units of work are
//! the record batches. Column roles and types follow the rules every Arrow-based format shares
//! ([`super::arrow::detect_layout`]).

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::convert::try_fb_to_schema;
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MessageHeader, MetadataVersion};
use arrow_schema::SchemaRef;
use memmap2::Mmap;

use super::arrow::{detect_layout, record_batch, sample_ids, Layout};
use super::{Batch, ColumnNames, Format, FormatSpec, Source, UnitSpan, WriteStats};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;

/// Magic at both ends of the IPC file format.
pub const FILE_MAGIC: &[u8; 6] = b"ARROW1";
const CONTINUATION: [u8; 4] = [0xff; 4];
/// Rows handed to the checker at a time (a record batch is sliced, without copying, into pieces this size).
const MAX_BATCH_ROWS: usize = 1024;

/// Arrow IPC in the format registry: recognised by its magic or its first message, or by its extension;
/// a `datasets` `save_to_disk` folder is read through the files its `state.json` lists.
pub static FORMAT: FormatSpec = FormatSpec {
    name: "arrow",
    shown_as: "Arrow IPC *.arrow / *.feather",
    sniff: |head, _| sniff(head).is_some(),
    named: is_ipc_name,
    input_path: super::same_path,
    found: |path| Ok(super::input_if_named(is_ipc_name, path)),
    folder: hf_data_files,
    folder_files: &["state.json", "dataset_info.json"],
    folder_skip: "not read: a datasets folder is read through the _data_files of its state.json, which do not list it",
    prefix: super::no_prefix,
    splits_across_tasks: true,
    companions: |_| Vec::new(),
    open: |path, columns| Ok(Box::new(IpcShard::open(path, columns)?)),
};

fn is_ipc_name(name: &str) -> bool {
    super::has_extension(name, &["arrow", "arrows", "feather", "ipc"])
}

/// The data files a Hugging Face `save_to_disk` directory lists in its `state.json` (`_data_files`), when it
/// has one; a directory of `datasets` cache files is read whole instead.
fn hf_data_files(dir: &Path) -> Result<Option<Vec<PathBuf>>> {
    let state = dir.join("state.json");
    if !state.is_file() {
        return Ok(None);
    }
    let text = crate::files::read_to_string(&state)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(&state, format!("not a datasets state.json: {e}")))?;
    let Some(files) = v.get("_data_files").and_then(|f| f.as_array()) else {
        return Ok(None);
    };
    files
        .iter()
        .map(|f| {
            f.get("filename")
                .and_then(|n| n.as_str())
                .filter(|n| !n.contains('/') && !n.contains('\\') && !n.starts_with('.'))
                .map(|n| dir.join(n))
                .ok_or_else(|| {
                    Error::invalid(&state, "a _data_files entry without a plain filename")
                })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Which of the two IPC formats a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcKind {
    File,
    Stream,
}

/// Recognises an IPC file by its first bytes: `ARROW1` (file format), or a continuation marker followed by a
/// valid schema message (stream format). `head` is the start of the file (a few KiB are enough).
pub fn sniff(head: &[u8]) -> Option<IpcKind> {
    if head.starts_with(FILE_MAGIC) {
        return Some(IpcKind::File);
    }
    if head.len() < 8 || head[..4] != CONTINUATION {
        return None;
    }
    let len = i32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    let msg = arrow_ipc::root_as_message(head.get(8..end)?).ok()?;
    (msg.header_type() == MessageHeader::Schema).then_some(IpcKind::Stream)
}

/// An opened Arrow IPC file.
pub struct IpcShard {
    pub path: PathBuf,
    pub kind: IpcKind,
    /// The whole file, memory-mapped (the map lives as long as any buffer sliced from it).
    guard: super::MapGuard, // before `buf`: see MapGuard
    buf: Buffer,
    schema: SchemaRef,
    version: MetadataVersion,
    pub layout: Layout,
    projection: Vec<usize>,
    /// Dictionary batches in file order.
    dictionaries: Vec<Block>,
    /// Record batches in file order and their row counts.
    batches: Vec<(Block, u64)>,
    /// How many dictionary batches come before each record batch: a stream may replace a dictionary
    /// between batches, and each batch is decoded with the dictionaries in force where it stands.
    dicts_before: Vec<usize>,
    /// The body compression of the record batches (of the first one).
    codec: Option<arrow_ipc::CompressionType>,
    /// A stream that ends without its end-of-stream marker: the spec allows it, but a file cut at a record
    /// batch boundary looks the same, so the report says so.
    no_eos: bool,
    /// `starts[b]` is batch b's first row; the last entry is the total.
    starts: Vec<u64>,
    /// One unit per record batch.
    units: Vec<UnitSpan>,
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid(
        path,
        format!(
            "not a readable Arrow IPC file: {}",
            msg.to_string().replace('\n', " ")
        ),
    )
}

/// The length prefix of an encapsulated message at `bytes[pos..]`: (prefix size, flatbuffer length), or
/// `None` at the end-of-stream marker.
fn prefix(bytes: &[u8], pos: usize) -> std::result::Result<Option<(usize, usize)>, String> {
    let word = |at: usize| -> std::result::Result<[u8; 4], String> {
        bytes
            .get(at..at + 4)
            .map(|w| w.try_into().expect("4 bytes"))
            .ok_or_else(|| {
                format!("truncated: the file ends inside a message header at byte {pos}")
            })
    };
    let first = word(pos)?;
    let (hdr, len) = if first == CONTINUATION {
        (8, i32::from_le_bytes(word(pos + 4)?))
    } else {
        (4, i32::from_le_bytes(first))
    };
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| format!("negative message length at byte {pos}"))?;
    Ok(Some((hdr, len)))
}

/// What one message holds, after its header and buffers were checked against the file.
struct Parsed {
    header: MessageHeader,
    block: Block,
    rows: u64,
    schema: Option<arrow_schema::Schema>,
    version: MetadataVersion,
    /// A record batch's body compression.
    codec: Option<arrow_ipc::CompressionType>,
}

/// Parses the message at `pos` whose body must end by `limit`; `None` at the end-of-stream marker. The body
/// starts right after the message header, or at `body_at` when given (where a file footer's block says it
/// does, which is where the decoder will read it).
fn parse_at(
    bytes: &[u8],
    pos: usize,
    limit: usize,
    body_at: Option<usize>,
) -> std::result::Result<Option<Parsed>, String> {
    let Some((hdr, len)) = prefix(bytes, pos)? else {
        return Ok(None);
    };
    let meta_end = pos
        .checked_add(hdr)
        .and_then(|p| p.checked_add(len))
        .filter(|&e| e <= limit)
        .ok_or_else(|| format!("truncated: the file ends inside a message at byte {pos}"))?;
    let msg = arrow_ipc::root_as_message(&bytes[pos + hdr..meta_end])
        .map_err(|e| format!("corrupt message header at byte {pos}: {e}"))?;
    let body = usize::try_from(msg.bodyLength())
        .map_err(|_| format!("negative body length at byte {pos}"))?;
    let body_start = body_at.unwrap_or(meta_end);
    if body_start.checked_add(body).is_none_or(|e| e > limit) {
        return Err(format!(
            "truncated: the message at byte {pos} has a {body}-byte body the file does not hold"
        ));
    }
    let mut rows = 0;
    let mut schema = None;
    let mut codec = None;
    match msg.header_type() {
        MessageHeader::RecordBatch => {
            let rb = msg
                .header_as_record_batch()
                .ok_or_else(|| format!("corrupt record batch header at byte {pos}"))?;
            rows = u64::try_from(rb.length())
                .map_err(|_| format!("negative row count at byte {pos}"))?;
            let spans = buffer_spans(rb.buffers());
            check_buffers(&spans, body, pos)?;
            codec = rb.compression().map(|c| c.codec());
            let ratio = if rb.compression().is_some() {
                check_compressed(&bytes[body_start..body_start + body], &spans, pos)?;
                MAX_COMPRESSION_RATIO
            } else {
                1
            };
            // The token column's offsets alone take 4 bytes a row: a larger count is a corrupt header (and
            // would size allocations by it before the batch is decoded).
            if rows > (body as u64).saturating_mul(ratio) / 4 {
                return Err(format!(
                    "corrupt record batch at byte {pos}: {rows} rows in a {body}-byte body"
                ));
            }
        }
        MessageHeader::DictionaryBatch => {
            let d = msg
                .header_as_dictionary_batch()
                .ok_or_else(|| format!("corrupt dictionary header at byte {pos}"))?;
            let spans = buffer_spans(d.data().and_then(|r| r.buffers()));
            check_buffers(&spans, body, pos)?;
            if d.data().and_then(|r| r.compression()).is_some() {
                check_compressed(&bytes[body_start..body_start + body], &spans, pos)?;
            }
        }
        MessageHeader::Schema => {
            let s = msg
                .header_as_schema()
                .ok_or_else(|| format!("corrupt schema at byte {pos}"))?;
            schema = Some(try_fb_to_schema(s).map_err(|e| e.to_string())?);
        }
        t => return Err(format!("unexpected {t:?} message at byte {pos}")),
    }
    let meta_len = i32::try_from(hdr + len).map_err(|_| "message header too large".to_string())?;
    Ok(Some(Parsed {
        header: msg.header_type(),
        block: Block::new(pos as i64, meta_len, body as i64),
        rows,
        schema,
        version: msg.version(),
        codec,
    }))
}

fn buffer_spans<'a, V>(buffers: Option<V>) -> Vec<(i64, i64)>
where
    V: IntoIterator<Item = &'a arrow_ipc::Buffer>,
{
    buffers
        .into_iter()
        .flatten()
        .map(|b| (b.offset(), b.length()))
        .collect()
}

/// Every buffer of a batch must lie inside its body (arrow-ipc would panic on one that does not).
fn check_buffers(
    buffers: &[(i64, i64)],
    body: usize,
    pos: usize,
) -> std::result::Result<(), String> {
    for &(offset, length) in buffers {
        let end = u64::try_from(offset)
            .ok()
            .zip(u64::try_from(length).ok())
            .and_then(|(o, l)| o.checked_add(l));
        if end.is_none_or(|e| e > body as u64) {
            return Err(format!(
                "corrupt record batch at byte {pos}: a buffer lies outside its body"
            ));
        }
    }
    Ok(())
}

/// Most bytes one compressed byte can stand for: a ZSTD RLE block is 4 bytes for up to 128 KiB (LZ4 stays
/// under 255).
const MAX_COMPRESSION_RATIO: u64 = 1 << 15;

/// Every compressed buffer (checked to lie inside `body`) starts with its uncompressed length, which arrow-ipc
/// allocates before decompressing: a corrupt one would abort the process on the allocation, so one that no
/// codec can reach from the bytes that follow is an error.
fn check_compressed(
    body: &[u8],
    buffers: &[(i64, i64)],
    pos: usize,
) -> std::result::Result<(), String> {
    for &(offset, length) in buffers {
        let (offset, length) = (offset as usize, length as usize);
        if length < 8 {
            continue; // arrow-ipc refuses it itself
        }
        let declared = i64::from_le_bytes(body[offset..offset + 8].try_into().expect("8 bytes"));
        let most = (length as u64 - 8).saturating_mul(MAX_COMPRESSION_RATIO);
        if declared > 0 && declared as u64 > most {
            return Err(format!(
                "corrupt record batch at byte {pos}: a compressed buffer of {length} bytes says it \
                 holds {declared} bytes"
            ));
        }
    }
    Ok(())
}

impl IpcShard {
    pub fn open(path: &Path, names: &ColumnNames) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len == 0 {
            return Err(Error::invalid(path, "empty file (0 bytes), not Arrow IPC"));
        }
        // SAFETY: opened read-only and only read; inputs must not be modified while tokscan reads them.
        let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?);
        let guard = super::MapGuard::new(&file, path, &map, len)?;
        let ptr = NonNull::new(map.as_ptr().cast_mut()).expect("a mapping is never null");
        // SAFETY: `ptr` is valid for `map.len()` bytes for as long as `map` lives, and the buffer owns `map`.
        let buf = unsafe { Buffer::from_custom_allocation(ptr, map.len(), map.clone()) };
        let bytes: &[u8] = &map;
        let kind = sniff(&bytes[..bytes.len().min(1 << 16)])
            .or_else(|| (bytes.len() >= 8 && bytes[..4] == CONTINUATION).then_some(IpcKind::Stream))
            .ok_or_else(|| {
                bad(
                    path,
                    "no ARROW1 magic and no stream schema message at the start",
                )
            })?;
        let ((messages, schema, version), eos) = match kind {
            IpcKind::File => read_file_layout(bytes).map(|l| (l, true)),
            IpcKind::Stream => read_stream_layout(bytes),
        }
        .map_err(|m| bad(path, m))?;
        let schema = Arc::new(schema);
        let layout = detect_layout(path, &schema, names)?;
        let projection = layout
            .columns()
            .iter()
            .map(|n| schema.index_of(n).expect("detected column"))
            .collect();
        let mut dictionaries = Vec::new();
        let mut batches = Vec::new();
        let mut dicts_before = Vec::new();
        let mut codec = None;
        for m in messages {
            match m.header {
                MessageHeader::DictionaryBatch => dictionaries.push(m.block),
                MessageHeader::RecordBatch => {
                    if batches.is_empty() {
                        codec = m.codec;
                    }
                    batches.push((m.block, m.rows));
                    dicts_before.push(dictionaries.len());
                }
                _ => {}
            }
        }
        let mut starts = vec![0u64];
        for (_, rows) in &batches {
            starts.push(starts.last().expect("non-empty") + rows);
        }
        let units = batches
            .iter()
            .zip(&starts)
            .map(|(&(_, rows), &first_row)| UnitSpan { first_row, rows })
            .collect();
        Ok(IpcShard {
            guard,
            path: path.to_path_buf(),
            kind,
            buf,
            schema,
            version,
            layout,
            projection,
            dictionaries,
            batches,
            dicts_before,
            codec,
            no_eos: !eos,
            starts,
            units,
        })
    }

    fn block_buffer(&self, b: &Block) -> Buffer {
        let len = b.metaDataLength() as usize + b.bodyLength() as usize;
        self.buf.slice_with_length(b.offset() as usize, len)
    }

    /// A decoder for record batch `batch`: the dictionaries that precede it read in order, so a later one
    /// with the same id replaces an earlier one (or extends it, when it is a delta).
    fn decoder(&self, projection: Vec<usize>, batch: usize) -> Result<FileDecoder> {
        let mut d = FileDecoder::new(self.schema.clone(), self.version).with_projection(projection);
        let upto = self.dicts_before.get(batch).copied().unwrap_or(0);
        for b in &self.dictionaries[..upto] {
            let data = self.block_buffer(b);
            guarded(&self.path, || d.read_dictionary(b, &data))?;
        }
        Ok(d)
    }

    fn decode(&self, d: &FileDecoder, batch: usize) -> Result<RecordBatch> {
        let (block, rows) = &self.batches[batch];
        let data = self.block_buffer(block);
        let rb = guarded(&self.path, || d.read_record_batch(block, &data))?
            .ok_or_else(|| bad(&self.path, format!("record batch {batch} is empty")))?;
        if rb.num_rows() as u64 != *rows {
            return Err(bad(
                &self.path,
                format!(
                    "record batch {batch} holds {} rows, its header says {rows}",
                    rb.num_rows()
                ),
            ));
        }
        Ok(rb)
    }

    /// Hands local rows `[start, end)` of record batch `batch` to `f`, in slices of at most `MAX_BATCH_ROWS`.
    fn batch_rows(
        &self,
        d: &FileDecoder,
        batch: usize,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let rb = self.decode(d, batch)?;
        let mut at = start as usize;
        while at < end as usize {
            let n = (end as usize - at).min(MAX_BATCH_ROWS);
            record_batch(&self.path, &self.layout, &rb.slice(at, n), f)?;
            at += n;
        }
        Ok(())
    }
}

/// Runs an arrow-ipc decode; a panic inside it (a corrupt file arrow-ipc does not check) becomes an input
/// error instead of crossing the API.
fn guarded<T>(
    path: &Path,
    f: impl FnOnce() -> std::result::Result<T, arrow_schema::ArrowError>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| bad(path, e)),
        Err(_) => Err(bad(path, "corrupt record batch data")),
    }
}

type LayoutOf = (Vec<Parsed>, arrow_schema::Schema, MetadataVersion);

/// The stream format: a schema message, then dictionary and record batch messages, then (optionally) the
/// end-of-stream marker; also says whether the marker was there.
fn read_stream_layout(bytes: &[u8]) -> std::result::Result<(LayoutOf, bool), String> {
    let mut pos = 0;
    let mut eos = false;
    let mut schema = None;
    let mut version = MetadataVersion::V5;
    let mut out = Vec::new();
    while pos < bytes.len() {
        let Some(m) = parse_at(bytes, pos, bytes.len(), None)? else {
            eos = true;
            break;
        };
        pos = (m.block.offset() + i64::from(m.block.metaDataLength()) + m.block.bodyLength())
            as usize;
        match (m.header, schema.is_some()) {
            (MessageHeader::Schema, false) => {
                version = m.version;
                schema = m.schema.clone();
            }
            (MessageHeader::Schema, true) => return Err("a second schema message".into()),
            (_, false) => return Err("the stream does not start with a schema message".into()),
            _ => out.push(m),
        }
    }
    let schema = schema.ok_or("the stream holds no schema message")?;
    Ok(((out, schema, version), eos))
}

/// The file format: magic, a stream, the footer (schema and the blocks of every batch), its length, magic.
fn read_file_layout(bytes: &[u8]) -> std::result::Result<LayoutOf, String> {
    let n = bytes.len();
    if n < 18 || &bytes[n - 6..] != FILE_MAGIC {
        return Err("truncated or corrupt: no ARROW1 magic at the end of the file".into());
    }
    let footer_len = i32::from_le_bytes(bytes[n - 10..n - 6].try_into().expect("4 bytes"));
    let footer_start = usize::try_from(footer_len)
        .ok()
        .and_then(|l| (n - 10).checked_sub(l))
        .filter(|&s| s >= 8)
        .ok_or("corrupt footer length")?;
    let footer = arrow_ipc::root_as_footer(&bytes[footer_start..n - 10])
        .map_err(|e| format!("corrupt footer: {e}"))?;
    let schema = try_fb_to_schema(footer.schema().ok_or("the footer holds no schema")?)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let blocks = footer
        .dictionaries()
        .into_iter()
        .flatten()
        .chain(footer.recordBatches().into_iter().flatten());
    for b in blocks {
        let pos = usize::try_from(b.offset()).map_err(|_| "negative block offset")?;
        let body_at = usize::try_from(b.metaDataLength())
            .ok()
            .and_then(|l| pos.checked_add(l))
            .ok_or_else(|| format!("the footer's block at byte {pos} lies outside the file"))?;
        let m = parse_at(bytes, pos, footer_start, Some(body_at))?
            .ok_or_else(|| format!("no message at block offset {pos}"))?;
        if m.block.bodyLength() != b.bodyLength()
            || !matches!(
                m.header,
                MessageHeader::RecordBatch | MessageHeader::DictionaryBatch
            )
        {
            return Err(format!(
                "the footer's block at byte {pos} disagrees with the message there"
            ));
        }
        // The footer's metadata length includes padding after the flatbuffer; the decoder slices the body there.
        let block = Block::new(b.offset(), b.metaDataLength(), b.bodyLength());
        let end = (b.offset() as u64)
            .checked_add(b.metaDataLength().max(0) as u64)
            .and_then(|e| e.checked_add(b.bodyLength().max(0) as u64));
        if b.metaDataLength() <= 0 || end.is_none_or(|e| e > footer_start as u64) {
            return Err(format!(
                "the footer's block at byte {pos} lies outside the file"
            ));
        }
        out.push(Parsed { block, ..m });
    }
    Ok((out, schema, footer.version()))
}

impl Source for IpcShard {
    fn unchanged(&self) -> Result<()> {
        self.guard.check()
    }

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
        *self.starts.last().expect("non-empty")
    }

    fn tokens_hint(&self) -> Option<u64> {
        None
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    fn warning(&self) -> Option<String> {
        let cut = self.no_eos.then(|| {
            format!(
                "the Arrow stream ends without its end-of-stream marker after {} record batch(es) ({} rows): \
                 allowed, but a file cut at a batch boundary looks the same",
                self.batches.len(),
                self.rows()
            )
        });
        let said: Vec<String> = cut.into_iter().chain(self.layout.note.clone()).collect();
        (!said.is_empty()).then(|| said.join("; "))
    }

    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let d = self.decoder(self.projection.clone(), unit)?;
        self.batch_rows(&d, unit, 0, self.batches[unit].1, f)
    }

    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut d: Option<(usize, FileDecoder)> = None;
        for b in 0..self.batches.len() {
            let (first, next) = (self.starts[b], self.starts[b + 1]);
            let (lo, hi) = (start.max(first), end.min(next));
            if lo < hi {
                if d.as_ref().is_none_or(|(u, _)| *u != self.dicts_before[b]) {
                    d = Some((
                        self.dicts_before[b],
                        self.decoder(self.projection.clone(), b)?,
                    ));
                }
                let (_, dec) = d.as_ref().expect("set above");
                self.batch_rows(dec, b, lo - first, hi - first, f)?;
            }
        }
        Ok(())
    }

    fn sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        let Some(name) = self.layout.sample_id.as_deref() else {
            return Ok(None);
        };
        let index = self.schema.index_of(name).expect("detected column");
        let mut out = Vec::new();
        for b in 0..self.batches.len() {
            let d = self.decoder(vec![index], b)?;
            let rb = self.decode(&d, b)?;
            out.extend(sample_ids(&self.path, name, rb.column(0))?);
        }
        Ok(Some(out))
    }

    /// The same IPC format (file or stream), schema with its metadata (e.g. `datasets` features), body
    /// compression and record-batch boundaries (a batch that keeps no row is left out), minus the dropped
    /// rows; dictionaries are written as the batches need them. A `save_to_disk` directory's
    /// `dataset_info.json` and `state.json` are copied beside the first copy. No kept row: the schema alone,
    /// a valid IPC file of no batches.
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
        super::check_keep(self, keep)?;
        let werr = |e: arrow_schema::ArrowError| {
            Error::invalid(out, format!("cannot write Arrow IPC: {e}"))
        };
        let options = IpcWriteOptions::default()
            .try_with_compression(self.codec)
            .map_err(werr)?;
        let file = super::create_new(out)?;
        enum Writer<W: std::io::Write> {
            File(FileWriter<W>),
            Stream(StreamWriter<W>),
        }
        let mut w = match self.kind {
            IpcKind::File => Writer::File(
                FileWriter::try_new_with_options(file, &self.schema, options).map_err(werr)?,
            ),
            IpcKind::Stream => Writer::Stream(
                StreamWriter::try_new_with_options(file, &self.schema, options).map_err(werr)?,
            ),
        };
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let mut rows = 0u64;
        for b in 0..self.batches.len() {
            let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
            let k = &keep[lo..hi];
            if !k.iter().any(|&x| x) {
                continue;
            }
            let d = self.decoder(all.clone(), b)?;
            let rb = self.decode(&d, b)?;
            let rb = if k.iter().all(|&x| x) {
                rb
            } else {
                let mask = arrow_array::BooleanArray::from(k.to_vec());
                arrow_select::filter::filter_record_batch(&rb, &mask)
                    .map_err(|e| bad(&self.path, e))?
            };
            rows += rb.num_rows() as u64;
            match &mut w {
                Writer::File(w) => w.write(&rb),
                Writer::Stream(w) => w.write(&rb),
            }
            .map_err(werr)?;
        }
        let file = match w {
            Writer::File(w) => w.into_inner().map_err(werr)?,
            Writer::Stream(w) => w.into_inner().map_err(werr)?,
        };
        super::finish(out, file)?;
        let mut files = vec![out.to_path_buf()];
        if let (Some(from), Some(to)) = (self.path.parent(), out.parent()) {
            for name in ["dataset_info.json", "state.json"] {
                let (a, b) = (from.join(name), to.join(name));
                if a.is_file() && !b.exists() {
                    std::fs::copy(&a, &b).map_err(|e| Error::io(&b, e))?;
                    files.push(b);
                }
            }
        }
        Ok(WriteStats {
            rows,
            files,
            omitted: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, ArrayRef, Int64Array, ListArray, StringArray};
    use arrow_buffer::OffsetBuffer;
    use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
    use arrow_schema::Field;
    use proptest::prelude::*;

    use super::*;
    use crate::source::Tokens;

    fn table(rows: &[Vec<i64>]) -> RecordBatch {
        let values = Int64Array::from(rows.iter().flatten().copied().collect::<Vec<_>>());
        let ids = ListArray::new(
            Arc::new(Field::new("item", values.data_type().clone(), true)),
            OffsetBuffer::from_lengths(rows.iter().map(Vec::len)),
            Arc::new(values),
            None,
        );
        let sid = StringArray::from((0..rows.len()).map(|i| format!("r{i}")).collect::<Vec<_>>());
        RecordBatch::try_from_iter([
            ("input_ids", Arc::new(ids) as ArrayRef),
            ("sample_id", Arc::new(sid) as ArrayRef),
        ])
        .unwrap()
    }

    fn write(path: &Path, rows: &[Vec<i64>], per_batch: usize, stream: bool, zstd: bool) {
        let rb = table(rows);
        let opts = IpcWriteOptions::default()
            .try_with_compression(zstd.then_some(arrow_ipc::CompressionType::ZSTD))
            .unwrap();
        let f = File::create(path).unwrap();
        let pieces = (0..rows.len().max(1)).step_by(per_batch.max(1));
        if stream {
            let mut w = StreamWriter::try_new_with_options(f, &rb.schema(), opts).unwrap();
            for a in pieces {
                w.write(&rb.slice(a, per_batch.min(rows.len() - a)))
                    .unwrap();
            }
            w.finish().unwrap();
        } else {
            let mut w = FileWriter::try_new_with_options(f, &rb.schema(), opts).unwrap();
            for a in pieces {
                w.write(&rb.slice(a, per_batch.min(rows.len() - a)))
                    .unwrap();
            }
            w.finish().unwrap();
        }
    }

    fn read_all(s: &IpcShard) -> Vec<(Vec<i64>, Option<SampleId>)> {
        let mut out = Vec::new();
        for u in 0..s.units().len() {
            s.scan_unit(u, &mut |b| {
                for i in 0..b.rows() {
                    let Tokens::I64(v) = b.ids.values else {
                        panic!("written as int64")
                    };
                    let ids = v[b.ids.offsets.range(i)].to_vec();
                    out.push((ids, b.sample_ids.unwrap()[i].clone()));
                }
                Ok(())
            })
            .unwrap();
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Both formats, compressed or not, in any batching: every row back, in order, with its id; any row
        /// range reads the same rows.
        #[test]
        fn rows_survive_both_formats(
            rows in prop::collection::vec(prop::collection::vec(0i64..200_000, 0..50), 1..80),
            per_batch in 1usize..30,
            stream: bool,
            zstd: bool,
            range in (0usize..80, 0usize..80),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("x.arrow");
            write(&p, &rows, per_batch, stream, zstd);
            let s = IpcShard::open(&p, &ColumnNames::default()).unwrap();
            prop_assert_eq!(s.kind, if stream { IpcKind::Stream } else { IpcKind::File });
            prop_assert_eq!(s.rows(), rows.len() as u64);
            let back = read_all(&s);
            let want: Vec<_> = rows.iter().enumerate().map(|(i, r)| (r.clone(), Some(SampleId::from(format!("r{i}"))))).collect();
            prop_assert_eq!(&back, &want);
            let ids = s.sample_ids().unwrap().unwrap();
            prop_assert_eq!(ids.len(), rows.len());
            let (a, b) = (range.0.min(rows.len()), range.1.min(rows.len()));
            let (a, b) = (a.min(b), a.max(b));
            let mut got = Vec::new();
            s.read_rows(a as u64, b as u64, &mut |bt| {
                for i in 0..bt.rows() {
                    got.push(bt.sample_ids.unwrap()[i].clone());
                }
                Ok(())
            }).unwrap();
            prop_assert_eq!(got, want[a..b].iter().map(|w| w.1.clone()).collect::<Vec<_>>());
        }

        /// Any truncation or byte flip is an error or a clean read, never a panic.
        #[test]
        fn corrupt_files_never_panic(cut in 0usize..4000, flip in 0usize..4000, stream: bool) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("x.arrow");
            let rows: Vec<Vec<i64>> = (0..40).map(|i| (0..i).collect()).collect();
            write(&p, &rows, 7, stream, false);
            let data = std::fs::read(&p).unwrap();
            let mut d = data.clone();
            let at = flip % d.len();
            d[at] ^= 0x5a;
            d.truncate(d.len() - cut.min(d.len() - 1).min(cut % 97));
            std::fs::write(&p, &d).unwrap();
            if let Ok(s) = IpcShard::open(&p, &ColumnNames::default()) {
                for u in 0..s.units().len() {
                    let _ = s.scan_unit(u, &mut |_| Ok(()));
                }
            }
        }
    }

    #[test]
    fn a_compressed_buffer_claiming_more_than_it_can_hold_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for stream in [false, true] {
            let p = dir.path().join("z.arrow");
            write(&p, &[vec![7; 1000], vec![8; 1000]], 2, stream, true);
            let mut b = std::fs::read(&p).unwrap();
            assert!(IpcShard::open(&p, &ColumnNames::default()).is_ok());
            // The 8-byte uncompressed-length prefix of the first ZSTD frame, made absurd.
            let frame = b.windows(4).position(|w| w == [0x28, 0xb5, 0x2f, 0xfd]);
            let at = frame.expect("a compressed buffer") - 8;
            b[at..at + 8].copy_from_slice(&(1i64 << 62).to_le_bytes());
            std::fs::write(&p, &b).unwrap();
            let e = IpcShard::open(&p, &ColumnNames::default()).err().unwrap();
            assert!(e.to_string().contains("compressed buffer"), "{e}");
        }
    }

    #[test]
    fn sniffs_both_formats_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![vec![1, 2, 3]];
        for stream in [false, true] {
            let p = dir.path().join("x.bin");
            write(&p, &rows, 1, stream, false);
            let head = std::fs::read(&p).unwrap();
            assert_eq!(
                sniff(&head),
                Some(if stream {
                    IpcKind::Stream
                } else {
                    IpcKind::File
                })
            );
        }
        assert_eq!(sniff(b"PAR1xxxxxxxx"), None);
        assert_eq!(sniff(&[0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0, 1, 2]), None);
    }
}
