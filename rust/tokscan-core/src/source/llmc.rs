//! nanoGPT / llm.c token files (`.bin`), as llm.c's `dev/data/data_common.py` `write_datafile` writes them:
//! a header of 256 little-endian int32 (`[0]` the magic 20240520, `[1]` the version, `[2]` the token count),
//! then the tokens: uint16 in version 1 (GPT-2), uint32 in version 2 (LLaMA-3). Headerless nanoGPT
//! `train.bin` files carry no magic and are not recognised.
//!
//! The file keeps no document boundaries: every document starts with a delimiter token, GPT-2's
//! `<|endoftext|>` (50256) in version 1 and LLaMA-3's `<|begin_of_text|>` (128000) in version 2. A sample is a
//! delimiter and the tokens up to the next one; tokens before the first delimiter (the tail of a document
//! cut at the previous shard's end) are a sample of their own.
//!
//! The file is memory-mapped and read in place. At open the header is checked against the file size and one
//! pass over the tokens (in parallel) records where every sample starts: 8 bytes per sample stay in memory.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;

use super::{
    split_units, Batch, Claim, Format, FormatSpec, Offsets, Ragged, Source, Tokens, UnitSpan,
    WriteStats,
};
use crate::error::{Error, Result};

/// `header[0]` of every llm.c token file.
pub const MAGIC: i32 = 20240520;
/// 256 int32.
pub const HEADER_BYTES: usize = 1024;
/// GPT-2's `<|endoftext|>`: starts every document of a version 1 file.
pub const GPT2_DELIMITER: u32 = 50256;
/// LLaMA-3's `<|begin_of_text|>`: starts every document of a version 2 file.
pub const LLAMA3_DELIMITER: u32 = 128000;
/// Tokens per chunk of the boundary pass.
const CHUNK: usize = 1 << 20;

/// llm.c in the format registry: a `.bin` with the llm.c magic (a `.bin` named explicitly without it, and
/// without an `.idx` beside it, is read as llm.c so that its reader says what is wrong with it).
pub static FORMAT: FormatSpec = FormatSpec {
    name: "llmc",
    shown_as: "llm.c *.bin",
    sniff: |head, _| has_magic(head),
    named: |name| name.ends_with(".bin"),
    input_path: super::same_path,
    found: |path| {
        if path.extension().is_none_or(|e| e != "bin") {
            return Ok(Claim::No);
        }
        Ok(if file_has_magic(path) {
            Claim::Input(path.to_path_buf())
        } else {
            // Model weights and other binaries are not llm.c token files.
            Claim::Refused("a .bin file that is neither llm.c tokens nor half of a Megatron pair")
        })
    },
    folder: super::no_folder,
    folder_files: &[],
    folder_skip: "",
    prefix: super::no_prefix,
    splits_across_tasks: true,
    companions: |_| Vec::new(),
    open: |path, _| Ok(Box::new(LlmcShard::open(path)?)),
};

/// True when `head` starts with the llm.c magic.
pub fn has_magic(head: &[u8]) -> bool {
    head.len() >= 4 && head[..4] == MAGIC.to_le_bytes()
}

/// True when the file at `path` starts with the llm.c magic (reads 4 bytes).
pub fn file_has_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    File::open(path).is_ok_and(|mut f| f.read_exact(&mut head).is_ok()) && has_magic(&head)
}

/// A validated header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1: uint16 tokens; 2: uint32 tokens.
    pub version: u32,
    pub tokens: u64,
}

impl Header {
    pub fn token_size(self) -> u64 {
        if self.version == 1 {
            2
        } else {
            4
        }
    }

    /// The token every document starts with.
    pub fn delimiter(self) -> u32 {
        if self.version == 1 {
            GPT2_DELIMITER
        } else {
            LLAMA3_DELIMITER
        }
    }
}

/// Parses and validates the header of a whole file `b` (magic, version, token count against the size).
/// Never panics on any input.
pub fn parse_header(b: &[u8]) -> std::result::Result<Header, String> {
    if !has_magic(b) {
        return Err(format!(
            "not an llm.c token file (bad magic; expected {MAGIC} as the first int32) and no Megatron \
             .idx next to it (headerless nanoGPT .bin files are not supported)"
        ));
    }
    if b.len() < HEADER_BYTES {
        return Err(format!(
            "truncated header: {} of {HEADER_BYTES} bytes",
            b.len()
        ));
    }
    let field = |i: usize| i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    let version = field(1);
    if version != 1 && version != 2 {
        return Err(format!(
            "unsupported version {version} (expected 1: uint16 tokens, or 2: uint32 tokens)"
        ));
    }
    let n = field(2);
    if n < 0 {
        return Err(format!("the header declares a negative token count ({n})"));
    }
    let header = Header {
        version: version as u32,
        tokens: n as u64,
    };
    let want = HEADER_BYTES as u64 + header.tokens * header.token_size();
    let have = b.len() as u64;
    if have < want {
        return Err(format!(
            "truncated: the header declares {n} tokens ({want} bytes with the header) but the file \
             holds {have} bytes"
        ));
    }
    if have > want {
        return Err(format!(
            "size mismatch: the header declares {n} tokens ({want} bytes with the header) but the file \
             holds {have} bytes"
        ));
    }
    Ok(header)
}

/// Where every sample starts, and the end: `offsets[i]..offsets[i + 1]` is sample i (one pass, in parallel
/// over chunks of tokens).
fn sample_offsets<T: Copy + PartialEq + Sync>(tokens: &[T], delimiter: T) -> Vec<i64> {
    let starts: Vec<Vec<i64>> = tokens
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let base = c * CHUNK;
            chunk
                .iter()
                .enumerate()
                .filter(|&(_, &t)| t == delimiter)
                .map(|(i, _)| (base + i) as i64)
                .collect()
        })
        .collect();
    let mut offsets = Vec::with_capacity(starts.iter().map(Vec::len).sum::<usize>() + 2);
    if tokens.first().is_some_and(|&t| t != delimiter) {
        offsets.push(0);
    }
    for s in starts {
        offsets.extend(s);
    }
    offsets.push(tokens.len() as i64);
    offsets
}

/// An opened llm.c token file.
pub struct LlmcShard {
    pub path: PathBuf,
    pub header: Header,
    guard: super::MapGuard, // before `map`: see MapGuard
    map: Mmap,
    /// `offsets[i]..offsets[i + 1]` are sample i's tokens (rows + 1 entries).
    offsets: Vec<i64>,
    units: Vec<UnitSpan>,
}

impl LlmcShard {
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < HEADER_BYTES as u64 {
            // Too short to map usefully (an empty file cannot be mapped everywhere): read it to say why.
            let b = crate::files::read(path)?;
            let why = parse_header(&b)
                .err()
                .unwrap_or_else(|| "truncated header".into());
            return Err(Error::invalid(path, why));
        }
        // SAFETY: opened read-only and only read; inputs must not be modified while tokscan reads them.
        let map = unsafe { Mmap::map(&f) }.map_err(|e| Error::io(path, e))?;
        let guard = super::MapGuard::new(&f, path, &map, len)?;
        let header = parse_header(&map).map_err(|m| Error::invalid(path, m))?;
        let mut shard = LlmcShard {
            path: path.to_path_buf(),
            header,
            map,
            guard,
            offsets: Vec::new(),
            units: Vec::new(),
        };
        shard.offsets = match shard.tokens() {
            Tokens::U16(t) => sample_offsets(t, header.delimiter() as u16),
            Tokens::U32(t) => sample_offsets(t, header.delimiter()),
            _ => unreachable!("llm.c tokens are uint16 or uint32"),
        };
        shard.units = split_units(&shard.offsets);
        Ok(shard)
    }

    fn slice<T>(&self) -> &[T] {
        let body = &self.map[HEADER_BYTES..];
        let n = self.header.tokens as usize;
        assert!((body.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()));
        assert_eq!(body.len(), n * std::mem::size_of::<T>());
        // SAFETY: the map is page-aligned and the header 1024 bytes, so the body is aligned for T (asserted);
        // it holds exactly `n` elements of T (checked at open, asserted) and every bit pattern is an integer.
        unsafe { std::slice::from_raw_parts(body.as_ptr().cast::<T>(), n) }
    }

    fn tokens(&self) -> Tokens<'_> {
        if self.header.version == 1 {
            Tokens::U16(self.slice())
        } else {
            Tokens::U32(self.slice())
        }
    }
}

impl Source for LlmcShard {
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
        let dtype = if self.header.version == 1 {
            "uint16"
        } else {
            "uint32"
        };
        format!(
            "v{} {dtype}, samples start at {}",
            self.header.version,
            self.header.delimiter()
        )
    }

    fn rows(&self) -> u64 {
        (self.offsets.len() - 1) as u64
    }

    fn tokens_hint(&self) -> Option<u64> {
        Some(self.header.tokens)
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    /// The unit's rows, then their pages released ([`super::release_pages`]).
    fn scan_unit(&self, unit: usize, f: &mut dyn FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let u = self.units[unit];
        self.read_rows(u.first_row, u.first_row + u.rows, f)?;
        let size = if self.header.version == 1 { 2 } else { 4 };
        let at = |row: u64| HEADER_BYTES + self.offsets[row as usize].max(0) as usize * size;
        super::release_pages(&self.map, at(u.first_row), at(u.first_row + u.rows));
        Ok(())
    }

    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let (start, end) = (start as usize, end as usize);
        f(&Batch {
            ids: Ragged {
                values: self.tokens(),
                offsets: Offsets::I64(&self.offsets[start..=end]),
            },
            prompt: None,
            mask: None,
            sample_ids: None,
            categories: None,
            null_rows: None,
            findings: None,
        })
    }

    /// The header with the new token count, then each kept sample's tokens as they are in the file (its
    /// leading delimiter included, so every document still starts with one). No kept sample: the header
    /// alone, a valid file of no tokens.
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        use std::io::{Seek, Write};
        super::check_keep(self, keep)?;
        let mut w = super::create_new(out)?;
        w.write_all(&self.map[..HEADER_BYTES])
            .map_err(|e| Error::io(out, e))?;
        let size = self.header.token_size() as usize;
        let written = super::copy_kept(
            out,
            &mut w,
            &self.map[HEADER_BYTES..],
            &self.offsets,
            size,
            keep,
        )?;
        let count = i32::try_from(written).expect("at most the source's count");
        w.seek(std::io::SeekFrom::Start(8))
            .and_then(|_| w.write_all(&count.to_le_bytes()))
            .map_err(|e| Error::io(out, e))?;
        super::finish(out, w)?;
        Ok(WriteStats {
            rows: keep.iter().filter(|&&k| k).count() as u64,
            files: vec![out.to_path_buf()],
            omitted: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{discover, with_tokens};

    /// A file as llm.c's `write_datafile` writes it (the count may lie, to make bad files).
    fn file(version: i32, count: i32, tokens: &[u32]) -> Vec<u8> {
        let mut header = [0i32; 256];
        header[..3].copy_from_slice(&[MAGIC, version, count]);
        let mut v: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).collect();
        for &t in tokens {
            if version == 1 {
                v.extend((t as u16).to_le_bytes());
            } else {
                v.extend(t.to_le_bytes());
            }
        }
        v
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[allow(clippy::unnecessary_cast)] // with_tokens! expands for every storage type, u64 included
    fn rows(s: &LlmcShard) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        s.read_rows(0, s.rows(), &mut |b| {
            for i in 0..b.rows() {
                let r = b.ids.offsets.range(i);
                with_tokens!(b.ids.values, v => out.push(v[r].iter().map(|&t| t as u64).collect()));
            }
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn samples_start_at_the_delimiter_of_each_version() {
        let dir = tempfile::tempdir().unwrap();
        const E: u32 = GPT2_DELIMITER;
        // Two tokens cut from the previous shard, then three documents (one empty but for its delimiter).
        let toks = [7, 8, E, 1, 2, 3, E, E, 9];
        let p = write(dir.path(), "gpt2.bin", &file(1, 9, &toks));
        let s = LlmcShard::open(&p).unwrap();
        assert_eq!(
            s.header,
            Header {
                version: 1,
                tokens: 9
            }
        );
        assert_eq!(
            rows(&s),
            vec![
                vec![7, 8],
                vec![E as u64, 1, 2, 3],
                vec![E as u64],
                vec![E as u64, 9]
            ]
        );
        assert_eq!(s.layout(), "v1 uint16, samples start at 50256");
        assert_eq!(
            s.units(),
            vec![UnitSpan {
                first_row: 0,
                rows: 4
            }]
        );

        const B: u32 = LLAMA3_DELIMITER;
        let toks = [B, 128_255, 70_000, B, 5];
        let p = write(dir.path(), "llama3.bin", &file(2, 5, &toks));
        let s = LlmcShard::open(&p).unwrap();
        assert_eq!(
            rows(&s),
            vec![vec![B as u64, 128_255, 70_000], vec![B as u64, 5]]
        );
        assert_eq!(s.format().name(), "llmc");
        // 50256 is an ordinary token in a version 2 file.
        let p = write(dir.path(), "v2-gpt2-ids.bin", &file(2, 3, &[B, E, 1]));
        assert_eq!(LlmcShard::open(&p).unwrap().rows(), 1);

        // No tokens: no samples.
        let p = write(dir.path(), "empty.bin", &file(1, 0, &[]));
        assert_eq!(LlmcShard::open(&p).unwrap().rows(), 0);
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let good = file(1, 3, &[GPT2_DELIMITER, 1, 2]);
        let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "magic.bin",
                [&[0u8; 4][..], &good[4..]].concat(),
                "bad magic",
            ),
            (
                "version.bin",
                file(3, 3, &[GPT2_DELIMITER, 1, 2]),
                "unsupported version 3",
            ),
            ("header.bin", good[..600].to_vec(), "truncated header"),
            ("short.bin", good[..good.len() - 1].to_vec(), "truncated"),
            (
                "long.bin",
                file(1, 2, &[GPT2_DELIMITER, 1, 2]),
                "size mismatch",
            ),
            ("negative.bin", file(1, -1, &[]), "negative"),
            ("empty.bin", Vec::new(), "bad magic"),
        ];
        // A version 2 header over a version 1 body: twice the bytes it holds.
        cases.push((
            "wrong-width.bin",
            file(2, 3, &[1, 2, 3])[..1030].to_vec(),
            "truncated",
        ));
        for (name, bytes, needle) in cases {
            let p = write(dir.path(), name, &bytes);
            let e = LlmcShard::open(&p).err().expect(name).to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains(needle), "{name}: {e}");
        }
    }

    /// A Megatron `.idx` of one uint8 sequence of `len` bytes.
    fn megatron_idx(len: i32) -> Vec<u8> {
        let mut v = crate::source::megatron::IDX_MAGIC.to_vec();
        v.extend(1u64.to_le_bytes());
        v.push(1);
        v.extend(1u64.to_le_bytes());
        v.extend(2u64.to_le_bytes());
        v.extend(len.to_le_bytes());
        v.extend(0i64.to_le_bytes());
        v.extend(0i64.to_le_bytes());
        v.extend(1i64.to_le_bytes());
        v
    }

    #[test]
    fn discovery_reads_the_magic_and_leaves_megatron_pairs_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = file(1, 2, &[GPT2_DELIMITER, 1]);
        write(d, "a.bin", &good);
        write(d, "pytorch_model.bin", b"\x80\x02not tokens at all");
        // A .bin next to an .idx stays Megatron, whatever its first bytes.
        write(d, "m.bin", &good);
        write(d, "m.idx", &megatron_idx(good.len() as i32));
        let found = discover(&[d.display().to_string()]).unwrap();
        let got: Vec<_> = found
            .iter()
            .map(|i| {
                (
                    i.path.file_name().unwrap().to_str().unwrap(),
                    i.format.name(),
                )
            })
            .collect();
        assert_eq!(got, vec![("a.bin", "llmc"), ("m.bin", "megatron")]);
        let m = super::super::open(&found[1], &Default::default()).unwrap();
        assert_eq!(m.tokens_hint(), Some(good.len() as u64));

        // Named explicitly, a .bin with no .idx is read as llm.c, so a bad one says why.
        let one = |name: &str| {
            discover(&[d.join(name).display().to_string()]).unwrap()[0]
                .format
                .name()
        };
        assert_eq!(one("a.bin"), "llmc");
        assert_eq!(one("m.bin"), "megatron");
        let junk = &discover(&[d.join("pytorch_model.bin").display().to_string()]).unwrap()[0];
        assert_eq!(junk.format.name(), "llmc");
        let e = super::super::open(junk, &Default::default()).err().unwrap();
        assert!(e.to_string().contains("bad magic"), "{e}");

        // A `category=` folder still names the category.
        let c = d.join("category=web");
        std::fs::create_dir(&c).unwrap();
        write(&c, "b.bin", &good);
        let found = discover(&[c.display().to_string()]).unwrap();
        assert_eq!(found[0].hive_category.as_deref(), Some("web"));
    }

    #[test]
    fn offsets_across_chunks() {
        let mut t = vec![3u16; 3 * CHUNK + 5];
        for at in [1, CHUNK - 1, CHUNK, 2 * CHUNK + 7, 3 * CHUNK + 4] {
            t[at] = 9;
        }
        let o = sample_offsets(&t, 9);
        let c = CHUNK as i64;
        assert_eq!(o, vec![0, 1, c - 1, c, 2 * c + 7, 3 * c + 4, 3 * c + 5]);
        assert_eq!(sample_offsets::<u16>(&[], 9), vec![0]);
        assert_eq!(sample_offsets(&[9u16], 9), vec![0, 1]);
    }

    fn scan_with(path: &Path, toml: &str) -> crate::Report {
        let spec = crate::Profile::parse_spec(toml, "test.toml").unwrap();
        let profile = crate::Profile::from_spec(&spec, None).unwrap();
        let opts = crate::ScanOptions::default();
        crate::scan(
            &[path.display().to_string()],
            &profile,
            &opts,
            &Default::default(),
        )
        .unwrap()
    }

    fn rows_with(r: &crate::Report, code: &str) -> Vec<u64> {
        r.flagged
            .iter()
            .filter(|f| f.codes.iter().any(|c| c == code))
            .map(|f| f.row)
            .collect()
    }

    /// The plain profile with GPT-2's vocabulary over a GPT-2 shard: a loop, a repeated document and an id
    /// beyond the vocabulary are found, clean documents are not flagged.
    #[test]
    fn a_gpt2_shard_scans_with_the_plain_profile() {
        let mut docs: Vec<Vec<u32>> = (0..40u32)
            .map(|d| {
                (0..60 + d)
                    .map(|k| 100 + (k * 7919 + d * 104_729) % 49_000)
                    .collect()
            })
            .collect();
        docs[3].splice(10..10, [11, 12, 13, 14, 15, 16, 17, 18].repeat(12));
        docs[7][5] = 60_000;
        docs.push(docs[9].clone());
        let toks: Vec<u32> = docs
            .iter()
            .flat_map(|d| std::iter::once(GPT2_DELIMITER).chain(d.iter().copied()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "shard.bin", &file(1, toks.len() as i32, &toks));
        let r = scan_with(
            &p,
            "base = \"plain\"\nname = \"gpt2\"\nvocab_size = 50257\n",
        );
        assert_eq!((r.n_samples, r.n_tokens), (41, toks.len() as u64));
        assert_eq!(r.inputs[0].format, "llmc");
        assert_eq!(rows_with(&r, "repetition"), vec![3]);
        assert_eq!(rows_with(&r, "out_of_vocab"), vec![7]);
        assert_eq!(rows_with(&r, "duplicate"), vec![40]);
        assert_eq!(r.flagged.len(), 3, "{:?}", r.flagged);
    }

    proptest::proptest! {
        #[test]
        fn header_parser_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1100),
            fields in proptest::collection::vec(proptest::prelude::any::<i32>(), 0..3),
        ) {
            let _ = parse_header(&bytes);
            let mut b = MAGIC.to_le_bytes().to_vec();
            for f in fields {
                b.extend(f.to_le_bytes());
            }
            b.extend(&bytes);
            let _ = parse_header(&b);
        }

        /// Documents written as llm.c writes them (a delimiter before each) read back one per sample.
        #[test]
        fn documents_read_back(
            docs in proptest::collection::vec(proptest::collection::vec(0u32..50_000, 0..20), 0..30),
            version in 1i32..=2,
        ) {
            let delim = if version == 1 { GPT2_DELIMITER } else { LLAMA3_DELIMITER };
            let toks: Vec<u32> = docs.iter().flat_map(|d| std::iter::once(delim).chain(d.iter().copied())).collect();
            let dir = tempfile::tempdir().unwrap();
            let p = write(dir.path(), "x.bin", &file(version, toks.len() as i32, &toks));
            let s = LlmcShard::open(&p).unwrap();
            let want: Vec<Vec<u64>> = docs
                .iter()
                .map(|d| std::iter::once(delim).chain(d.iter().copied()).map(u64::from).collect())
                .collect();
            proptest::prop_assert_eq!(rows(&s), want);
            let covered: u64 = s.units().iter().map(|u| u.rows).sum();
            proptest::prop_assert_eq!(covered, s.rows());
        }
    }
}
