//! Megatron-LM / NeMo indexed datasets: `PREFIX.bin` (the tokens of every sequence, back to back) and
//! `PREFIX.idx` (header `MMIDIDX\x00\x00`, version 1, a dtype code, then the sequence lengths (int32), the
//! sequence byte pointers (int64) and the document indices (int64: the first sequence of each document, and
//! finally the sequence count), as megatron-core's `indexed_dataset.py` writes them). A document is a sample.
//!
//! Both files are memory-mapped. uint16 / int32 / int64 tokens are read in place; the other dtype codes
//! (uint8, int8, int16, float32, float64) are widened to int64 one unit at a time (a float that is not a
//! whole non-negative number becomes an out-of-vocabulary id). Everything in the index is validated against
//! the .bin size at open.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{
    split_units, Batch, Claim, Format, FormatSpec, Offsets, Ragged, Source, Tokens, UnitSpan,
    WriteStats,
};
use crate::error::{Error, Result};

/// The first 9 bytes of every `.idx`.
pub const IDX_MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

/// megatron-core's `DType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MDtype {
    U8 = 1,
    I8 = 2,
    I16 = 3,
    I32 = 4,
    I64 = 5,
    F64 = 6,
    F32 = 7,
    U16 = 8,
}

impl MDtype {
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => MDtype::U8,
            2 => MDtype::I8,
            3 => MDtype::I16,
            4 => MDtype::I32,
            5 => MDtype::I64,
            6 => MDtype::F64,
            7 => MDtype::F32,
            8 => MDtype::U16,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            MDtype::U8 | MDtype::I8 => 1,
            MDtype::I16 | MDtype::U16 => 2,
            MDtype::I32 | MDtype::F32 => 4,
            MDtype::I64 | MDtype::F64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            MDtype::U8 => "uint8",
            MDtype::I8 => "int8",
            MDtype::I16 => "int16",
            MDtype::I32 => "int32",
            MDtype::I64 => "int64",
            MDtype::F64 => "float64",
            MDtype::F32 => "float32",
            MDtype::U16 => "uint16",
        }
    }
}

/// `PREFIX.ext` for a `.bin`, an `.idx` or a bare prefix: a prefix may hold dots of its own
/// (`c4.en_text_document`), so only a `.bin` / `.idx` extension is replaced.
fn with_ext(path: &Path, ext: &str) -> PathBuf {
    if path.extension().is_some_and(|e| e == "bin" || e == "idx") {
        path.with_extension(ext)
    } else {
        let mut p = path.as_os_str().to_owned();
        p.push(".");
        p.push(ext);
        PathBuf::from(p)
    }
}

/// Megatron in the format registry: an `.idx` with the index magic stands for its `.bin` (a `.bin` whose `.idx`
/// is beside it is taken with it), and so does a data prefix (`data_text_document`) that names neither file
/// but has an `.idx`.
pub static FORMAT: FormatSpec = FormatSpec {
    name: "megatron",
    shown_as: "Megatron *.bin + *.idx",
    sniff: |head, path| head.starts_with(IDX_MAGIC) || (is_bin(path) && idx_path(path).is_file()),
    named: |_| false,
    input_path: bin_path,
    found: |path| {
        if path.extension().is_some_and(|e| e == "idx") {
            // An index found in a folder that cannot be read is an error naming it, not a file passed over.
            use std::io::Read;
            let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
            let mut magic = [0u8; 9];
            return Ok(if f.read_exact(&mut magic).is_ok() && &magic == IDX_MAGIC {
                Claim::Input(bin_path(path))
            } else {
                Claim::Refused("an .idx file that is not a Megatron index")
            });
        }
        Ok(if is_bin(path) && has_index(path) {
            Claim::Part
        } else {
            Claim::No
        })
    },
    folder: super::no_folder,
    folder_files: &[],
    folder_skip: "",
    // Any `PREFIX.idx`, not only a valid one: a prefix whose index is damaged is that input, and its reader
    // says what is wrong (bad magic), not "no such file".
    prefix: |path| idx_path(path).is_file().then(|| bin_path(path)),
    splits_across_tasks: true,
    companions: |path| vec![idx_path(path)],
    open: |path, _| Ok(Box::new(MegatronShard::open(path)?)),
};

fn is_bin(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bin")
}

/// Whether the `.idx` of `path` (a `.bin` or a prefix) exists and starts with the index magic.
fn has_index(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 9];
    File::open(idx_path(path)).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok())
        && &magic == IDX_MAGIC
}

/// The `.bin` of an `.idx` (or of a prefix, or the `.bin` itself).
pub fn bin_path(path: &Path) -> PathBuf {
    with_ext(path, "bin")
}

pub fn idx_path(path: &Path) -> PathBuf {
    with_ext(path, "idx")
}

/// A parsed `.idx`: document boundaries in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub dtype: MDtype,
    pub sequences: u64,
    /// `offsets[d]..offsets[d + 1]` are document d's tokens (D + 1 entries).
    pub offsets: Vec<i64>,
    pub tokens: u64,
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and validates an `.idx` against a `.bin` of `bin_len` bytes. Never panics on any input.
pub fn parse_index(b: &[u8], bin_len: u64) -> std::result::Result<Index, String> {
    if b.len() < 9 || &b[..9] != IDX_MAGIC {
        return Err("not a Megatron .idx (bad magic; expected MMIDIDX)".into());
    }
    if b.len() < 34 {
        return Err("truncated .idx header".into());
    }
    let version = le_u64(b, 9);
    if version != 1 {
        return Err(format!("unsupported .idx version {version} (expected 1)"));
    }
    let dtype = MDtype::from_code(b[17])
        .ok_or_else(|| format!("unknown dtype code {} (expected 1..8)", b[17]))?;
    let (s, d) = (le_u64(b, 18), le_u64(b, 26));
    let need = s
        .checked_mul(12)
        .and_then(|x| d.checked_mul(8).and_then(|y| x.checked_add(y)))
        .and_then(|x| x.checked_add(34))
        .ok_or("impossible sequence / document counts")?;
    if (b.len() as u64) < need {
        return Err(format!(
            "truncated: the header says {s} sequences and {d} document indices, the .idx holds fewer"
        ));
    }
    let (s, d) = (s as usize, d as usize);
    let lengths = |i: usize| i32::from_le_bytes(b[34 + 4 * i..38 + 4 * i].try_into().expect("4"));
    let pointers = |i: usize| le_u64(b, 34 + 4 * s + 8 * i) as i64;
    let docs = |i: usize| le_u64(b, 34 + 12 * s + 8 * i) as i64;
    let size = dtype.size() as i64;
    // Token offset of every sequence start; the pointers must describe the sequences back to back.
    let mut starts = Vec::with_capacity(s + 1);
    let mut at = 0i64;
    for i in 0..s {
        let len = lengths(i);
        if len < 0 {
            return Err(format!("sequence {i} has a negative length ({len})"));
        }
        if pointers(i) != at.checked_mul(size).ok_or("pointer overflow")? {
            return Err(format!(
                "sequence {i}'s pointer is {} bytes, but the sequences before it end at {} bytes",
                pointers(i),
                at * size
            ));
        }
        starts.push(at);
        at += i64::from(len);
    }
    starts.push(at);
    let bytes = (at as u64) * size as u64;
    if bytes != bin_len {
        return Err(format!(
            "the index describes {at} tokens ({bytes} bytes) but the .bin holds {bin_len} bytes"
        ));
    }
    if d == 0 {
        return Err("no document indices (expected at least the leading 0)".into());
    }
    let mut offsets = Vec::with_capacity(d);
    let mut prev = 0i64;
    for i in 0..d {
        let v = docs(i);
        if (i == 0 && v != 0) || v < prev || v as u64 > s as u64 {
            return Err(format!(
                "document index {i} is {v}: document indices must start at 0, never decrease and stay <= {s}"
            ));
        }
        offsets.push(starts[v as usize]);
        prev = v;
    }
    if prev as usize != s {
        return Err(format!(
            "the last document index is {prev}, but there are {s} sequences"
        ));
    }
    Ok(Index {
        dtype,
        sequences: s as u64,
        offsets,
        tokens: at as u64,
    })
}

/// Writes an `.idx` as megatron-core's `_IndexWriter` does: magic, version 1, the dtype code, the counts,
/// int32 sequence lengths, int64 byte pointers (back to back), int64 document indices, then the int8
/// sequence modes of a multimodal index when given.
fn write_index(
    path: &Path,
    dtype: MDtype,
    lengths: &[i32],
    docs: &[i64],
    modes: Option<&[u8]>,
) -> Result<()> {
    use std::io::Write;
    let mut w = super::create_new(path)?;
    let mut buf = Vec::with_capacity(34 + 12 * lengths.len() + 8 * docs.len());
    buf.extend_from_slice(IDX_MAGIC);
    buf.extend_from_slice(&1u64.to_le_bytes());
    buf.push(dtype as u8);
    buf.extend_from_slice(&(lengths.len() as u64).to_le_bytes());
    buf.extend_from_slice(&(docs.len() as u64).to_le_bytes());
    for l in lengths {
        buf.extend_from_slice(&l.to_le_bytes());
    }
    let mut at = 0i64;
    for &l in lengths {
        buf.extend_from_slice(&at.to_le_bytes());
        at += i64::from(l) * dtype.size() as i64;
    }
    for d in docs {
        buf.extend_from_slice(&d.to_le_bytes());
    }
    if let Some(m) = modes {
        buf.extend_from_slice(m);
    }
    w.write_all(&buf).map_err(|e| Error::io(path, e))?;
    super::finish(path, w)
}

/// An opened indexed dataset.
pub struct MegatronShard {
    /// The `.bin`.
    pub path: PathBuf,
    pub index: Index,
    guard: Option<super::MapGuard>, // before `map`: see MapGuard
    map: Option<Mmap>,
    units: Vec<UnitSpan>,
}

impl MegatronShard {
    pub fn open(path: &Path) -> Result<Self> {
        let (bin, idx) = (bin_path(path), idx_path(path));
        let bin_len = std::fs::metadata(&bin)
            .map_err(|e| Error::io(&bin, e))?
            .len();
        let idx_bytes = crate::files::read(&idx)?;
        let index = parse_index(&idx_bytes, bin_len).map_err(|m| Error::invalid(&idx, m))?;
        let (map, guard) = if bin_len == 0 {
            (None, None)
        } else {
            let f = File::open(&bin).map_err(|e| Error::io(&bin, e))?;
            // SAFETY: opened read-only and only read; inputs must not be modified while tokscan reads them.
            let map = unsafe { Mmap::map(&f) }.map_err(|e| Error::io(&bin, e))?;
            let guard = super::MapGuard::new(&f, &bin, &map, bin_len)?;
            (Some(map), Some(guard))
        };
        let units = split_units(&index.offsets);
        Ok(MegatronShard {
            path: bin,
            index,
            map,
            guard,
            units,
        })
    }

    fn slice<T>(&self) -> &[T] {
        match &self.map {
            None => &[],
            Some(m) => {
                assert!((m.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()));
                // SAFETY: the map is page-aligned, holds exactly `tokens` elements of this dtype (checked at
                // open) and every bit pattern is a valid integer / float.
                unsafe {
                    std::slice::from_raw_parts(m.as_ptr().cast::<T>(), self.index.tokens as usize)
                }
            }
        }
    }
}

/// A float token as an id: whole non-negative numbers as themselves, anything else out of vocabulary.
fn whole(v: f64) -> i64 {
    if v >= 0.0 && v.fract() == 0.0 && v < 9.0e18 {
        v as i64
    } else {
        -1
    }
}

impl Source for MegatronShard {
    fn unchanged(&self) -> Result<()> {
        self.guard.as_ref().map_or(Ok(()), super::MapGuard::check)
    }

    /// The rows' elements of the `.bin` (opening read the `.idx` whole and nothing of the `.bin`).
    fn byte_ranges(&self, rows: std::ops::Range<u64>) -> Option<Vec<super::FileRange>> {
        let offs = &self.index.offsets;
        let last = (offs.len() - 1) as u64;
        let (first, past) = (
            offs[rows.start.min(last) as usize],
            offs[rows.end.min(last) as usize],
        );
        let size = self.index.dtype.size() as u64;
        Some(if past > first {
            vec![(self.path.clone(), first as u64 * size..past as u64 * size)]
        } else {
            Vec::new()
        })
    }

    /// A valid `.bin` + `.idx` pair (`out` is the `.bin`) holding the kept documents, each with its own
    /// sequences, their tokens byte-identical, the same dtype and, for a multimodal index, the same modes.
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        super::check_keep(self, keep)?;
        let idx = idx_path(&self.path);
        let b = crate::files::read(&idx)?;
        let bin_len = self.map.as_ref().map_or(0, |m| m.len() as u64);
        if parse_index(&b, bin_len).ok().as_ref() != Some(&self.index) {
            return Err(Error::invalid(
                &idx,
                "the index changed since it was opened",
            ));
        }
        let (s, d) = (le_u64(&b, 18) as usize, le_u64(&b, 26) as usize);
        let length =
            |i: usize| i32::from_le_bytes(b[34 + 4 * i..38 + 4 * i].try_into().expect("4"));
        let doc = |i: usize| le_u64(&b, 34 + 12 * s + 8 * i) as usize;
        let modes_at = 34 + 12 * s + 8 * d;
        let modes = (s > 0 && b.len() - modes_at == s).then(|| &b[modes_at..]);
        let (mut lengths, mut docs, mut kept_modes) = (Vec::new(), vec![0i64], Vec::new());
        for (k, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
            let (a, z) = (doc(k), doc(k + 1));
            lengths.extend((a..z).map(length));
            if let Some(m) = modes {
                kept_modes.extend_from_slice(&m[a..z]);
            }
            docs.push(lengths.len() as i64);
        }
        let out_bin = bin_path(out);
        let mut w = super::create_new(&out_bin)?;
        let data: &[u8] = self.map.as_deref().unwrap_or(&[]);
        super::copy_kept(
            &out_bin,
            &mut w,
            data,
            &self.index.offsets,
            self.index.dtype.size(),
            keep,
        )?;
        super::finish(&out_bin, w)?;
        let out_idx = idx_path(out);
        write_index(
            &out_idx,
            self.index.dtype,
            &lengths,
            &docs,
            modes.map(|_| kept_modes.as_slice()),
        )?;
        Ok(WriteStats {
            rows: (docs.len() - 1) as u64,
            files: vec![out_bin, out_idx],
            omitted: None,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn format(&self) -> Format {
        Format::of(&FORMAT)
    }

    fn layout(&self) -> String {
        format!("bin+idx ({})", self.index.dtype.name())
    }

    fn rows(&self) -> u64 {
        (self.index.offsets.len() - 1) as u64
    }

    fn tokens_hint(&self) -> Option<u64> {
        Some(self.index.tokens)
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    /// The unit's rows, then their pages of the `.bin` released ([`super::release_pages`]).
    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let u = self.units[unit];
        self.read_rows(u.first_row, u.first_row + u.rows, f)?;
        if let Some(map) = &self.map {
            let offs = &self.index.offsets;
            let size = self.index.dtype.size();
            let at = |row: u64| offs[row as usize].max(0) as usize * size;
            super::release_pages(map, at(u.first_row), at(u.first_row + u.rows));
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
        let offs = &self.index.offsets[start..=end];
        let widened: Vec<i64>;
        let rebased: Vec<i64>;
        let (values, offsets) = match self.index.dtype {
            MDtype::U16 => (Tokens::U16(self.slice()), Offsets::I64(offs)),
            MDtype::I32 => (Tokens::I32(self.slice()), Offsets::I64(offs)),
            MDtype::I64 => (Tokens::I64(self.slice()), Offsets::I64(offs)),
            d => {
                let (lo, hi) = (offs[0] as usize, offs[offs.len() - 1] as usize);
                widened = match d {
                    MDtype::U8 => self.slice::<u8>()[lo..hi]
                        .iter()
                        .map(|&v| i64::from(v))
                        .collect(),
                    MDtype::I8 => self.slice::<i8>()[lo..hi]
                        .iter()
                        .map(|&v| i64::from(v))
                        .collect(),
                    MDtype::I16 => self.slice::<i16>()[lo..hi]
                        .iter()
                        .map(|&v| i64::from(v))
                        .collect(),
                    MDtype::F32 => self.slice::<f32>()[lo..hi]
                        .iter()
                        .map(|&v| whole(f64::from(v)))
                        .collect(),
                    _ => self.slice::<f64>()[lo..hi]
                        .iter()
                        .map(|&v| whole(v))
                        .collect(),
                };
                rebased = offs.iter().map(|&o| o - lo as i64).collect();
                (Tokens::I64(&widened), Offsets::I64(&rebased))
            }
        };
        f(&Batch {
            ids: Ragged { values, offsets },
            prompt: None,
            mask: None,
            sample_ids: None,
            categories: None,
            null_rows: None,
            findings: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `.idx` as megatron-core's `_IndexWriter` writes it.
    fn idx(code: u8, lengths: &[i32], docs: &[i64]) -> Vec<u8> {
        let size = MDtype::from_code(code).unwrap().size() as i64;
        let mut v = IDX_MAGIC.to_vec();
        v.extend(1u64.to_le_bytes());
        v.push(code);
        v.extend((lengths.len() as u64).to_le_bytes());
        v.extend((docs.len() as u64).to_le_bytes());
        for l in lengths {
            v.extend(l.to_le_bytes());
        }
        let mut p = 0i64;
        for l in lengths {
            v.extend(p.to_le_bytes());
            p += i64::from(*l) * size;
        }
        for d in docs {
            v.extend(d.to_le_bytes());
        }
        v
    }

    #[test]
    fn documents_span_their_sequences() {
        // 4 sequences, documents [0, 2) and [2, 4): tokens 3+2 and 0+4.
        let i = parse_index(&idx(4, &[3, 2, 0, 4], &[0, 2, 4]), 9 * 4).unwrap();
        assert_eq!(i.offsets, vec![0, 5, 9]);
        assert_eq!((i.dtype, i.tokens), (MDtype::I32, 9));
        // An empty document and the uint16 code.
        let i = parse_index(&idx(8, &[2, 1], &[0, 1, 1, 2]), 6).unwrap();
        assert_eq!(i.offsets, vec![0, 2, 2, 3]);
    }

    #[test]
    fn index_and_data_disagreeing_are_errors() {
        let good = idx(4, &[3, 2], &[0, 1, 2]);
        assert!(parse_index(&good, 19)
            .unwrap_err()
            .contains("the .bin holds"));
        assert!(parse_index(&good[..good.len() - 3], 20)
            .unwrap_err()
            .contains("truncated"));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(parse_index(&bad, 20).unwrap_err().contains("magic"));
        let mut bad = good.clone();
        bad[17] = 9;
        assert!(parse_index(&bad, 20).unwrap_err().contains("dtype code"));
        let mut bad = good.clone();
        bad[9] = 2;
        assert!(parse_index(&bad, 20).unwrap_err().contains("version"));
        assert!(parse_index(&idx(4, &[3, 2], &[0, 2, 1]), 20)
            .unwrap_err()
            .contains("decrease"));
        assert!(parse_index(&idx(4, &[3, 2], &[0, 1]), 20)
            .unwrap_err()
            .contains("last document"));
    }

    #[test]
    fn floats_become_ids_or_out_of_vocabulary() {
        assert_eq!(whole(7.0), 7);
        assert_eq!(whole(7.5), -1);
        assert_eq!(whole(-1.0), -1);
        assert_eq!(whole(f64::NAN), -1);
    }

    proptest::proptest! {
        #[test]
        fn index_parser_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), bin in 0u64..1000) {
            let _ = parse_index(&bytes, bin);
            let mut b = IDX_MAGIC.to_vec();
            b.extend(1u64.to_le_bytes());
            b.extend(&bytes);
            let _ = parse_index(&b, bin);
        }
    }
}
