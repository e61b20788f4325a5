//! NumPy corpora: a directory with `tokens.npy` (1-D ids), `offsets.npy` (N+1 int64), optional
//! `loss_mask.npy` and optional `meta.parquet` (`sample_id`, `category`). Arrays are memory-mapped and read
//! in place; every header and offset is validated before any token is touched.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatchReader;
use memmap2::Mmap;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{
    split_units, Batch, Claim, Format, FormatSpec, MapGuard, Offsets, Ragged, RaggedMask, Source,
    Tokens, UnitSpan, WriteStats,
};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;
use crate::token::MaskSlice;

/// Element type of a `.npy` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl Dtype {
    fn parse(descr: &str) -> Option<Dtype> {
        let (order, code) = descr.split_at(1.min(descr.len()));
        let little = matches!(order, "<" | "|" | "=");
        let d = match code {
            "b1" => Dtype::Bool,
            "i1" => Dtype::I8,
            "u1" => Dtype::U8,
            "i2" => Dtype::I16,
            "u2" => Dtype::U16,
            "i4" => Dtype::I32,
            "u4" => Dtype::U32,
            "i8" => Dtype::I64,
            "u8" => Dtype::U64,
            "f4" => Dtype::F32,
            "f8" => Dtype::F64,
            _ => return None,
        };
        (little || d.size() == 1).then_some(d)
    }

    /// The `descr` of a `.npy` header for this type (little-endian).
    pub fn descr(self) -> &'static str {
        match self {
            Dtype::Bool => "|b1",
            Dtype::I8 => "|i1",
            Dtype::U8 => "|u1",
            Dtype::I16 => "<i2",
            Dtype::U16 => "<u2",
            Dtype::I32 => "<i4",
            Dtype::U32 => "<u4",
            Dtype::I64 => "<i8",
            Dtype::U64 => "<u8",
            Dtype::F32 => "<f4",
            Dtype::F64 => "<f8",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::I8 | Dtype::U8 => 1,
            Dtype::I16 | Dtype::U16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }
}

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data_offset: usize,
}

/// NumPy in the format registry: a folder holding `tokens.npy` (with `offsets.npy`, optional `loss_mask.npy`
/// and `meta.parquet`) is one input; `tokens.npy` named explicitly stands for its folder.
pub static FORMAT: FormatSpec = FormatSpec {
    name: "numpy",
    shown_as: "NumPy tokens.npy",
    sniff: |_, path| super::file_name(path) == "tokens.npy",
    named: |name| name == "tokens.npy",
    input_path: |path| path.parent().unwrap_or(Path::new(".")).to_path_buf(),
    found: |_| Ok(Claim::No),
    folder: |dir| {
        Ok(dir
            .join("tokens.npy")
            .is_file()
            .then(|| vec![dir.to_path_buf()]))
    },
    folder_files: &ARRAYS,
    folder_skip: "not read: a NumPy corpus folder is read through tokens.npy, offsets.npy, loss_mask.npy and meta.parquet",
    prefix: super::no_prefix,
    splits_across_tasks: true,
    companions: |_| Vec::new(),
    open: |path, _| Ok(Box::new(NumpyShard::open(path)?)),
};

/// Parses the header at the start of `bytes` (magic, version, dict). Never panics on any input.
pub fn parse_header(bytes: &[u8]) -> std::result::Result<NpyHeader, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy header".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start.checked_add(hlen).ok_or("bad .npy header length")?;
    if bytes.len() < end {
        return Err("truncated .npy header".into());
    }
    let text =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| "the .npy header is not text")?;
    let field = |key: &str| -> std::result::Result<&str, String> {
        let k = format!("'{key}':");
        let at = text
            .find(&k)
            .ok_or_else(|| format!("the .npy header has no {key:?}"))?;
        Ok(text[at + k.len()..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split_once('\''))
        .map(|(d, _)| d)
        .ok_or("bad descr in .npy header")?;
    let dtype = Dtype::parse(descr).ok_or_else(|| format!("unsupported dtype {descr:?}"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err("fortran_order arrays are not supported".into());
    }
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split_once(')'))
        .map(|(s, _)| s)
        .ok_or("bad shape in .npy header")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| format!("bad shape entry {s:?}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(NpyHeader {
        dtype,
        shape,
        data_offset: end,
    })
}

/// The first 64 KiB of a file whose length was read as `size` (a header is within them). Fewer bytes than that
/// is a file cut since its length was read: the same input error as one cut while it is mapped, not the read's
/// "failed to fill whole buffer".
fn read_head(file: &mut File, path: &Path, size: usize) -> Result<Vec<u8>> {
    let want = size.min(1 << 16);
    let mut head = Vec::with_capacity(want);
    file.by_ref()
        .take(want as u64)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(path, e))?;
    if head.len() < want {
        let now = file.metadata().map_err(|e| Error::io(path, e))?.len();
        return Err(super::shrank(path, size as u64, now));
    }
    Ok(head)
}

/// A memory-mapped 1-D `.npy` array.
pub struct NpyArray {
    pub path: PathBuf,
    pub dtype: Dtype,
    pub len: usize,
    guard: Option<MapGuard>, // before `map`: see MapGuard
    map: Option<Mmap>,
    offset: usize,
}

impl NpyArray {
    pub fn open(path: &Path) -> Result<Self> {
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len() as usize;
        let head = read_head(&mut file, path, size)?;
        let h = parse_header(&head).map_err(|m| Error::invalid(path, m))?;
        if h.shape.len() != 1 {
            return Err(Error::invalid(
                path,
                format!("expected a 1-D array, found shape {:?}", h.shape),
            ));
        }
        let len = h.shape[0];
        let need = len
            .checked_mul(h.dtype.size())
            .and_then(|b| b.checked_add(h.data_offset));
        if need.is_none_or(|need| size < need) {
            return Err(Error::invalid(
                path,
                format!("truncated: the header says {len} elements, the file holds fewer"),
            ));
        }
        if h.data_offset % h.dtype.size() != 0 {
            return Err(Error::invalid(
                path,
                "data is not aligned to its element size",
            ));
        }
        // SAFETY: the file is opened read-only and only read through this map; tokscan documents that inputs
        // must not be modified while a scan runs (as every mmap reader must).
        let map = if len == 0 {
            None
        } else {
            Some(unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?)
        };
        let guard = match &map {
            Some(m) => Some(MapGuard::new(&file, path, m, size as u64)?),
            None => None,
        };
        Ok(NpyArray {
            path: path.to_path_buf(),
            dtype: h.dtype,
            len,
            map,
            guard,
            offset: h.data_offset,
        })
    }

    /// The elements as `&[T]`; the caller has checked that `T` matches `dtype`.
    fn slice<T>(&self) -> &[T] {
        match &self.map {
            None => &[],
            Some(m) => {
                let bytes = &m[self.offset..self.offset + self.len * std::mem::size_of::<T>()];
                assert!(
                    (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()),
                    "aligned by construction"
                );
                // SAFETY: the range is inside the map, aligned (page-aligned map + offset checked at open), and
                // every bit pattern is a valid value of the integer/float/bool-as-u8 types used here.
                unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), self.len) }
            }
        }
    }

    /// Releases the pages of elements `[first, past)` once a scan has read them ([`super::release_pages`]).
    fn release(&self, first: usize, past: usize) {
        if let Some(map) = &self.map {
            let size = self.dtype.size();
            let at = |e: usize| self.offset + e.min(self.len) * size;
            super::release_pages(map, at(first), at(past));
        }
    }

    /// The data bytes (`len` elements).
    fn data(&self) -> &[u8] {
        match &self.map {
            None => &[],
            Some(m) => &m[self.offset..self.offset + self.len * self.dtype.size()],
        }
    }

    fn tokens(&self) -> Result<Tokens<'_>> {
        Ok(match self.dtype {
            Dtype::I32 => Tokens::I32(self.slice()),
            Dtype::U32 => Tokens::U32(self.slice()),
            Dtype::I64 => Tokens::I64(self.slice()),
            Dtype::U64 => Tokens::U64(self.slice()),
            Dtype::U16 => Tokens::U16(self.slice()),
            d => {
                return Err(Error::invalid(
                    &self.path,
                    format!("token ids must be int32/int64/uint16/uint32/uint64, found {d:?}"),
                ))
            }
        })
    }

    fn mask(&self) -> Result<MaskSlice<'_>> {
        Ok(match self.dtype {
            Dtype::Bool | Dtype::U8 => MaskSlice::U8(self.slice()),
            Dtype::I8 => MaskSlice::I8(self.slice()),
            Dtype::I16 => MaskSlice::I16(self.slice()),
            Dtype::U16 => MaskSlice::U16(self.slice()),
            Dtype::I32 => MaskSlice::I32(self.slice()),
            Dtype::U32 => MaskSlice::U32(self.slice()),
            Dtype::I64 => MaskSlice::I64(self.slice()),
            Dtype::U64 => MaskSlice::U64(self.slice()),
            Dtype::F32 => MaskSlice::F32(self.slice()),
            Dtype::F64 => {
                return Err(Error::invalid(
                    &self.path,
                    "float64 loss masks are not supported",
                ))
            }
        })
    }
}

/// A `.npy` version 1.0 header for a 1-D array of `len` elements, padded so the data starts at a multiple
/// of 64 bytes (as `numpy.save` writes it).
pub fn npy_header(dtype: Dtype, len: usize) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({len},), }}",
        dtype.descr()
    );
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend(((total - 10) as u16).to_le_bytes());
    h.extend(dict.as_bytes());
    h.resize(total - 1, b' ');
    h.push(b'\n');
    h
}

/// Writes a 1-D `.npy` of `len` elements whose data `body` writes.
pub(crate) fn write_npy(
    path: &Path,
    dtype: Dtype,
    len: usize,
    body: impl FnOnce(&mut std::io::BufWriter<File>) -> Result<u64>,
) -> Result<()> {
    use std::io::Write;
    let mut w = super::create_new(path)?;
    w.write_all(&npy_header(dtype, len))
        .map_err(|e| Error::io(path, e))?;
    let n = body(&mut w)?;
    debug_assert_eq!(n as usize, len);
    super::finish(path, w)
}

/// Files of a NumPy corpus directory that the writer rebuilds (every other regular file is copied).
const ARRAYS: [&str; 4] = ["tokens.npy", "offsets.npy", "loss_mask.npy", "meta.parquet"];

/// An opened NumPy corpus directory.
pub struct NumpyShard {
    pub dir: PathBuf,
    tokens: NpyArray,
    offsets: Vec<i64>,
    /// The element type of `offsets.npy`.
    offsets_dtype: Dtype,
    mask: Option<NpyArray>,
    pub sample_ids: Option<Vec<Option<SampleId>>>,
    pub categories: Option<Vec<Option<String>>>,
    units: Vec<UnitSpan>,
}

impl NumpyShard {
    pub fn open(dir: &Path) -> Result<Self> {
        let tokens = NpyArray::open(&dir.join("tokens.npy"))?;
        tokens.tokens()?;
        let opath = dir.join("offsets.npy");
        let oarr = NpyArray::open(&opath)?;
        let offsets: Vec<i64> = match oarr.dtype {
            Dtype::I64 => oarr.slice::<i64>().to_vec(),
            Dtype::U64 => oarr
                .slice::<u64>()
                .iter()
                .map(|&v| i64::try_from(v).unwrap_or(-1))
                .collect(),
            Dtype::I32 => oarr.slice::<i32>().iter().map(|&v| i64::from(v)).collect(),
            Dtype::U32 => oarr.slice::<u32>().iter().map(|&v| i64::from(v)).collect(),
            d => {
                return Err(Error::invalid(
                    &opath,
                    format!("offsets must be integers, found {d:?}"),
                ))
            }
        };
        if offsets.is_empty() {
            return Err(Error::invalid(
                &opath,
                "offsets must hold N+1 entries (found none)",
            ));
        }
        let ntok = tokens.len as i64;
        for (i, w) in offsets.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(Error::invalid(
                    &opath,
                    format!("offsets decrease at index {} ({} -> {})", i + 1, w[0], w[1]),
                ));
            }
        }
        if offsets[0] < 0 {
            return Err(Error::invalid(
                &opath,
                format!("offsets[0] is negative ({})", offsets[0]),
            ));
        }
        let last = *offsets.last().expect("non-empty");
        if last > ntok {
            return Err(Error::invalid(
                &opath,
                format!("last offset {last} exceeds the {ntok} tokens in tokens.npy"),
            ));
        }
        let mpath = dir.join("loss_mask.npy");
        let mask = if mpath.exists() {
            let m = NpyArray::open(&mpath)?;
            m.mask()?;
            if m.len != tokens.len {
                return Err(Error::invalid(
                    &mpath,
                    format!("{} entries, but tokens.npy has {}", m.len, tokens.len),
                ));
            }
            Some(m)
        } else {
            None
        };
        let n = offsets.len() - 1;
        let (sample_ids, categories) = read_meta(&dir.join("meta.parquet"), n)?;
        let units = split_units(&offsets);
        Ok(NumpyShard {
            dir: dir.to_path_buf(),
            tokens,
            offsets,
            offsets_dtype: oarr.dtype,
            mask,
            sample_ids,
            categories,
            units,
        })
    }

    pub fn rows(&self) -> u64 {
        (self.offsets.len() - 1) as u64
    }

    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }

    pub fn layout(&self) -> String {
        if self.mask.is_some() {
            "tokens+offsets+loss_mask"
        } else {
            "tokens+offsets"
        }
        .to_string()
    }
}

impl Source for NumpyShard {
    fn path(&self) -> &Path {
        &self.dir
    }

    fn unchanged(&self) -> Result<()> {
        for a in std::iter::once(&self.tokens).chain(&self.mask) {
            if let Some(g) = &a.guard {
                g.check()?;
            }
        }
        Ok(())
    }

    fn format(&self) -> Format {
        Format::of(&FORMAT)
    }

    fn layout(&self) -> String {
        NumpyShard::layout(self)
    }

    fn rows(&self) -> u64 {
        NumpyShard::rows(self)
    }

    fn tokens_hint(&self) -> Option<u64> {
        let o = &self.offsets;
        Some((o[o.len() - 1] - o[0]) as u64)
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    /// Tokens of `tokens.npy` that no sample's offsets cover (before the first offset, past the last) are in no
    /// sample: read by nothing, so the report says how many.
    fn warning(&self) -> Option<String> {
        let (first, last) = (self.offsets[0], *self.offsets.last().expect("non-empty"));
        let outside = first as u64 + (self.tokens.len as u64).saturating_sub(last as u64);
        (outside > 0).then(|| {
            format!(
                "{outside} of the {} tokens of tokens.npy are in no sample (the offsets cover [{first}, {last})): \
                 not scanned",
                self.tokens.len
            )
        })
    }

    /// The unit's rows, then their pages released ([`NpyArray::release`]).
    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let u = self.units[unit];
        self.read_rows(u.first_row, u.first_row + u.rows, f)?;
        let at = |row: u64| self.offsets[row as usize].max(0) as usize;
        for a in std::iter::once(&self.tokens).chain(&self.mask) {
            a.release(at(u.first_row), at(u.first_row + u.rows));
        }
        Ok(())
    }

    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let (start, end) = (start as usize, end as usize);
        let offsets = Offsets::I64(&self.offsets[start..=end]);
        let ids = Ragged {
            values: self.tokens.tokens()?,
            offsets,
        };
        let mask = match &self.mask {
            Some(m) => Some(RaggedMask {
                values: m.mask()?,
                offsets,
            }),
            None => None,
        };
        f(&Batch {
            ids,
            prompt: None,
            mask,
            sample_ids: self.sample_ids.as_ref().map(|v| &v[start..end]),
            categories: self.categories.as_ref().map(|v| &v[start..end]),
            null_rows: None,
            findings: None,
        })
    }

    fn sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        Ok(self.sample_ids.clone())
    }

    /// The rows' elements of `tokens.npy` and `loss_mask.npy` (opening read the headers, `offsets.npy` and
    /// `meta.parquet` whole).
    fn byte_ranges(&self, rows: std::ops::Range<u64>) -> Option<Vec<super::FileRange>> {
        let last = self.offsets.len() - 1;
        let (start, end) = (rows.start.min(last as u64), rows.end.min(last as u64));
        let (first, past) = (self.offsets[start as usize], self.offsets[end as usize]);
        if past <= first {
            return Some(Vec::new());
        }
        let spans = std::iter::once(&self.tokens)
            .chain(&self.mask)
            .map(|a| {
                // Inside the file: its length was checked against the header when it opened.
                let (size, data) = (a.dtype.size() as u64, a.offset as u64);
                (
                    a.path.clone(),
                    data + first as u64 * size..data + past as u64 * size,
                )
            })
            .collect();
        Some(spans)
    }

    /// A new directory `out`: `tokens.npy` and `loss_mask.npy` with the kept samples' elements (same
    /// dtypes, copied run by run), `offsets.npy` rebuilt from 0 in its own dtype, `meta.parquet` filtered
    /// (through the Parquet writer), every other file of the directory copied.
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        use std::io::Write;
        super::check_keep(self, keep)?;
        // A new directory, or an empty one (a mount point, a symlink to one): every file is then created new.
        match std::fs::create_dir(out) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_none());
                if !empty {
                    return Err(Error::Usage(format!(
                        "{}: already exists and is not an empty directory (tokscan never overwrites a file)",
                        out.display()
                    )));
                }
            }
            Err(e) => return Err(Error::io(out, e)),
        }
        let offs = &self.offsets;
        let mut new_offsets = vec![0i64];
        for (i, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
            new_offsets.push(new_offsets.last().expect("non-empty") + offs[i + 1] - offs[i]);
        }
        let total = *new_offsets.last().expect("non-empty") as usize;
        let mut files = vec![out.to_path_buf()];
        for (name, arr) in [
            ("tokens.npy", Some(&self.tokens)),
            ("loss_mask.npy", self.mask.as_ref()),
        ] {
            let Some(arr) = arr else { continue };
            let p = out.join(name);
            write_npy(&p, arr.dtype, total, |w| {
                super::copy_kept(&p, w, arr.data(), offs, arr.dtype.size(), keep)
            })?;
            files.push(p);
        }
        let p = out.join("offsets.npy");
        let dtype = self.offsets_dtype;
        write_npy(&p, dtype, new_offsets.len(), |w| {
            for &o in &new_offsets {
                let r = match dtype {
                    Dtype::I32 => w.write_all(&(o as i32).to_le_bytes()),
                    Dtype::U32 => w.write_all(&(o as u32).to_le_bytes()),
                    Dtype::U64 => w.write_all(&(o as u64).to_le_bytes()),
                    _ => w.write_all(&o.to_le_bytes()),
                };
                r.map_err(|e| Error::io(&p, e))?;
            }
            Ok(new_offsets.len() as u64)
        })?;
        files.push(p);
        let meta = self.dir.join("meta.parquet");
        if meta.is_file() {
            let file = File::open(&meta).map_err(|e| Error::io(&meta, e))?;
            let m = super::parquet::unpanicked(|| {
                parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&file, Default::default())
            })
            .map_err(|e| Error::invalid(&meta, format!("not a readable Parquet file: {e}")))?;
            let p = out.join("meta.parquet");
            super::parquet::write_filtered_file(&meta, &m, keep, &p)?;
            files.push(p);
        }
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for e in entries {
            let e = e.map_err(|e| Error::io(&self.dir, e))?;
            let name = e.file_name();
            let from = e.path();
            if from.is_file() && !ARRAYS.iter().any(|a| name == *a) {
                let to = out.join(&name);
                let mut w = super::create_new(&to)?;
                let mut r = File::open(&from).map_err(|e| Error::io(&from, e))?;
                std::io::copy(&mut r, &mut w).map_err(|e| Error::io(&to, e))?;
                super::finish(&to, w)?;
                files.push(to);
            }
        }
        Ok(WriteStats {
            rows: (new_offsets.len() - 1) as u64,
            files,
            omitted: None,
        })
    }
}

type Labels = Option<Vec<Option<String>>>;
type Ids = Option<Vec<Option<SampleId>>>;

fn read_meta(path: &Path, n: usize) -> Result<(Ids, Labels)> {
    if !path.exists() {
        return Ok((None, None));
    }
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let builder = super::parquet::unpanicked(|| ParquetRecordBatchReaderBuilder::try_new(file))
        .map_err(|e| Error::invalid(path, format!("not a readable Parquet file: {e}")))?;
    let reader = builder
        .build()
        .map_err(|e| Error::invalid(path, format!("not a readable Parquet file: {e}")))?;
    let schema = reader.schema();
    let want_id = super::arrow::label_column(path, &schema, "sample_id")?;
    let want_cat = super::arrow::label_column(path, &schema, "category")?;
    let (mut ids, mut cats): (Vec<Option<SampleId>>, Vec<Option<String>>) =
        (Vec::new(), Vec::new());
    for rb in super::parquet::guarded_batches(reader) {
        let rb =
            rb.map_err(|e| Error::invalid(path, format!("not a readable Parquet file: {e}")))?;
        if want_id {
            ids.extend(super::arrow::sample_ids(
                path,
                "sample_id",
                rb.column_by_name("sample_id").expect("has"),
            )?);
        }
        if want_cat {
            cats.extend(super::arrow::strings(
                path,
                "category",
                rb.column_by_name("category").expect("has"),
            )?);
        }
    }
    for (len, want) in [(ids.len(), want_id), (cats.len(), want_cat)] {
        if want && len != n {
            return Err(Error::invalid(
                path,
                format!("{len} rows, but offsets.npy describes {n} samples"),
            ));
        }
    }
    Ok((want_id.then_some(ids), want_cat.then_some(cats)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Vec<u8> {
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend((dict.len() as u16).to_le_bytes());
        v.extend(dict.as_bytes());
        v
    }

    #[test]
    fn parses_numpy_headers() {
        let h = parse_header(&header(
            "{'descr': '<i4', 'fortran_order': False, 'shape': (12,), }",
        ))
        .unwrap();
        assert_eq!((h.dtype, h.shape), (Dtype::I32, vec![12]));
        let h = parse_header(&header(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (3, 4), }",
        ))
        .unwrap();
        assert_eq!((h.dtype, h.shape), (Dtype::Bool, vec![3, 4]));
        assert!(parse_header(b"\x93NUMPX\x01\x00\x00\x00")
            .unwrap_err()
            .contains("magic"));
        assert!(parse_header(&header(
            "{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }"
        ))
        .is_err());
        assert!(parse_header(&header(
            "{'descr': '<i4', 'fortran_order': True, 'shape': (1,), }"
        ))
        .unwrap_err()
        .contains("fortran"));
        let mut t = header("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }");
        t.truncate(20);
        assert!(parse_header(&t).unwrap_err().contains("truncated"));
    }

    #[test]
    fn a_file_cut_between_its_length_and_its_header_read_is_named_as_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.npy");
        let mut bytes = header("{'descr': '<i4', 'fortran_order': False, 'shape': (25000,), }");
        bytes.resize(bytes.len() + 100_000, 7);
        std::fs::write(&path, &bytes).unwrap();
        let mut file = File::open(&path).unwrap();
        let size = file.metadata().unwrap().len() as usize;
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let err = read_head(&mut file, &path, size).unwrap_err().to_string();
        assert!(
            err.contains(&format!("shrank from {size} to 4096 bytes")),
            "{err}"
        );
        assert!(err.contains("tokens.npy"), "{err}");
        let mut file = File::open(&path).unwrap();
        assert_eq!(read_head(&mut file, &path, 4096).unwrap().len(), 4096);
    }

    proptest::proptest! {
        #[test]
        fn header_parser_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_header(&bytes);
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend(&bytes);
            let _ = parse_header(&b);
        }
    }
}

#[cfg(all(test, unix))]
mod byte_range_tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    /// Rows `rows` of `shard` as (ids, mask) lists.
    fn rows_of(shard: &NumpyShard, rows: std::ops::Range<u64>) -> Vec<(Vec<i32>, Vec<u8>)> {
        let mut out = Vec::new();
        shard
            .read_rows(rows.start, rows.end, &mut |b| {
                let (Tokens::I32(ids), Some(m)) = (b.ids.values, b.mask) else {
                    panic!("written as int32 with a uint8 mask")
                };
                let MaskSlice::U8(mask) = m.values else {
                    panic!("uint8 mask")
                };
                for i in 0..b.rows() {
                    let r = b.ids.offsets.range(i);
                    out.push((ids[r.clone()].to_vec(), mask[r].to_vec()));
                }
                Ok(())
            })
            .unwrap();
        out
    }

    /// A NumPy directory staged as an object store's sparse copy is (`remote::fetch` with footers): the arrays
    /// of their full size holding only their header, `offsets.npy` whole. Filling exactly the byte ranges
    /// `byte_ranges` names from the original gives those rows as the original reads them, and only those.
    #[test]
    fn the_byte_ranges_of_some_rows_are_what_reading_them_needs() {
        let dir = tempfile::tempdir().unwrap();
        let (orig, copy) = (dir.path().join("orig"), dir.path().join("copy"));
        std::fs::create_dir_all(&orig).unwrap();
        std::fs::create_dir_all(&copy).unwrap();
        let lens: Vec<usize> = (0..3000).map(|i| (i * 7919) % 97 + 1).collect();
        let total: usize = lens.iter().sum();
        write_npy(&orig.join("tokens.npy"), Dtype::I32, total, |w| {
            for i in 0..total {
                w.write_all(&(1000 + (i as i32 * 31) % 150_000).to_le_bytes())
                    .unwrap();
            }
            Ok(total as u64)
        })
        .unwrap();
        write_npy(&orig.join("loss_mask.npy"), Dtype::U8, total, |w| {
            for i in 0..total {
                w.write_all(&[u8::from(i % 5 != 0)]).unwrap();
            }
            Ok(total as u64)
        })
        .unwrap();
        write_npy(&orig.join("offsets.npy"), Dtype::I64, lens.len() + 1, |w| {
            let mut at = 0i64;
            w.write_all(&at.to_le_bytes()).unwrap();
            for &l in &lens {
                at += l as i64;
                w.write_all(&at.to_le_bytes()).unwrap();
            }
            Ok(lens.len() as u64 + 1)
        })
        .unwrap();
        std::fs::copy(orig.join("offsets.npy"), copy.join("offsets.npy")).unwrap();
        for name in ["tokens.npy", "loss_mask.npy"] {
            let data = NpyArray::open(&orig.join(name)).unwrap().offset;
            let mut head = vec![0u8; data];
            std::fs::File::open(orig.join(name))
                .unwrap()
                .read_exact(&mut head)
                .unwrap();
            let f = std::fs::File::create(copy.join(name)).unwrap();
            f.set_len(std::fs::metadata(orig.join(name)).unwrap().len())
                .unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &head, 0).unwrap();
        }
        let (whole, sparse) = (
            NumpyShard::open(&orig).unwrap(),
            NumpyShard::open(&copy).unwrap(),
        );
        let rows = 1200..1900;
        for (file, range) in sparse.byte_ranges(rows.clone()).unwrap() {
            let name = file.file_name().unwrap();
            let mut buf = vec![0u8; (range.end - range.start) as usize];
            let mut src = std::fs::File::open(orig.join(name)).unwrap();
            src.seek(SeekFrom::Start(range.start)).unwrap();
            src.read_exact(&mut buf).unwrap();
            let dst = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&dst, &buf, range.start).unwrap();
        }
        assert_eq!(rows_of(&sparse, rows.clone()), rows_of(&whole, rows));
        // The rows on either side were not fetched.
        for outside in [1199..1200, 1900..1901] {
            assert_ne!(rows_of(&sparse, outside.clone()), rows_of(&whole, outside));
        }
        assert_eq!(sparse.byte_ranges(5..5).unwrap(), vec![]);
    }

    /// Resident pages of the map of `a` (from `/proc/self/smaps`), or `None` where that is not readable.
    fn resident_kb(a: &NpyArray) -> Option<u64> {
        let start = a.map.as_ref()?.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut lines = smaps.lines();
        while let Some(l) = lines.next() {
            let range = l.split_whitespace().next()?;
            let Some((lo, _)) = range.split_once('-') else {
                continue;
            };
            if usize::from_str_radix(lo, 16).ok() == Some(start) {
                let rss = lines.find(|l| l.starts_with("Rss:"))?;
                return rss.split_whitespace().nth(1)?.parse().ok();
            }
        }
        None
    }

    #[test]
    fn released_pages_read_back_the_same_and_leave_the_resident_set() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.npy");
        let n = 1usize << 20; // 4 MB of u32
        write_npy(&p, Dtype::U32, n, |w| {
            use std::io::Write;
            for i in 0..n as u32 {
                w.write_all(&i.wrapping_mul(2_654_435_761).to_le_bytes())
                    .map_err(|e| Error::io(&p, e))?;
            }
            Ok(n as u64)
        })
        .unwrap();
        let a = NpyArray::open(&p).unwrap();
        let read = |a: &NpyArray| -> Vec<u32> { a.slice::<u32>().to_vec() };
        let before = read(&a);
        let resident = resident_kb(&a);
        a.release(1000, n - 1000);
        let after_release = resident_kb(&a);
        assert_eq!(read(&a), before, "the same bytes after a release");
        if let (Some(r), Some(a)) = (resident, after_release) {
            assert!(
                r >= 4000 && a < r / 4,
                "resident {r} kB before, {a} kB after"
            );
        }
        // A range inside one aligned block, or reversed, releases nothing and is no error.
        a.release(10, 20);
        a.release(n, 0);
        assert_eq!(read(&a), before);
    }
}
