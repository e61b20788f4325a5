//! A flat list column chunk decoded from its pages by tokscan itself, for the encodings every writer of token
//! corpora uses (levels in the RLE / bit-packing hybrid; values plain or dictionary-encoded, booleans plain or
//! RLE). [`super::flat`] sends other chunks to the parquet crate's column reader. Both must hand on what
//! arrow-rs reads: `flat`'s property test compares them with it on files of arrow-rs's writer (which takes this
//! decoder but for DELTA-encoded v2 chunks), the layout tests on files of pyarrow's, and the tests below feed
//! it corrupt pages.
//!
//! The column reader hands on a definition and a repetition level per token (`i16` each), then every value in
//! the column's physical type, and counts records a second time to stop at a batch's last row. A loss mask is a
//! handful of runs per sample, yet it cost as much as the token ids: an `i32` per mask token, two levels, the
//! record count and a narrowing copy (`benches/README.md`). Here the levels are read run by run — a run of
//! repetition level 0 is row starts, a run of the maximum definition level is values, nothing per token — and a
//! run of one dictionary index or one boolean is a fill of the batch's own type. Only a page whose definition
//! levels are not all the maximum (null or empty rows, null elements) has them read one by one, as a batch
//! reaches them. Memory follows the bytes and rows present, not what a page header claims: row starts are
//! bounded by the row group's row count.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::Bytes;
use parquet::basic::Encoding;
use parquet::column::page::{Page, PageReader};

/// A column's physical type, as this decoder reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Physical {
    I32,
    I64,
    Bool,
}

/// What stops a decode: a corrupt page (the text says what), a null element, the parquet crate's error or panic.
#[derive(Debug)]
pub(super) enum PageError {
    Corrupt(String),
    NullElements,
    Parquet(parquet::errors::ParquetError),
    /// A decoder panicked: what it said, as [`super::undecodable`] words it.
    Undecodable(String),
}

type Result<T> = std::result::Result<T, PageError>;

fn corrupt<T>(what: impl Into<String>) -> Result<T> {
    Err(PageError::Corrupt(what.into()))
}

/// A value as a batch holds it, cast from the column's physical type as arrow-rs casts it (`as`).
pub(super) trait Out: Copy + Default {
    fn from_i32(x: i32) -> Self;
    fn from_i64(x: i64) -> Self;
    fn from_bool(x: bool) -> Self;
}

macro_rules! out_int {
    ($($t:ty),*) => {$(
        impl Out for $t {
            #[inline(always)]
            fn from_i32(x: i32) -> Self {
                x as $t
            }
            #[inline(always)]
            fn from_i64(x: i64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn from_bool(x: bool) -> Self {
                <$t>::from(x)
            }
        }
    )*};
}

out_int!(i8, u8, i16, u16, i32, i64);

impl Out for bool {
    #[inline(always)]
    fn from_i32(x: i32) -> Self {
        x != 0
    }
    #[inline(always)]
    fn from_i64(x: i64) -> Self {
        x != 0
    }
    #[inline(always)]
    fn from_bool(x: bool) -> Self {
        x
    }
}

/// A dictionary page's values.
enum Dict {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl Dict {
    fn len(&self) -> usize {
        match self {
            Dict::I32(d) => d.len(),
            Dict::I64(d) => d.len(),
            Dict::Bool(d) => d.len(),
        }
    }
}

/// Whether `encoding` is one this decoder reads (for levels or values). A chunk whose footer lists another
/// goes to the parquet crate's column reader.
pub(super) fn reads(encoding: Encoding) -> bool {
    matches!(
        encoding,
        Encoding::PLAIN | Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY | Encoding::RLE
    )
}

/// One run of the RLE / bit-packing hybrid being read: `value` `left` more times, or `left` more values
/// bit-packed from bit `bit` of the buffer.
#[derive(Debug, Clone, Copy)]
enum Run {
    Repeat { value: u32, left: usize },
    Packed { bit: usize, left: usize },
}

/// The RLE / bit-packing hybrid of `buf[pos..end]`, `bw` bits a value (at most 32), a run at a time.
#[derive(Debug, Clone, Copy)]
struct Hybrid {
    pos: usize,
    end: usize,
    bw: u32,
}

impl Hybrid {
    /// The next run, or `None` past the last.
    fn next_run(&mut self, buf: &[u8]) -> Result<Option<Run>> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let mut header = 0u64;
        let mut shift = 0;
        loop {
            let Some(&b) = buf[..self.end].get(self.pos) else {
                return corrupt("has a run header past the end of its page");
            };
            self.pos += 1;
            if shift > 63 {
                return corrupt("has a run header longer than ten bytes");
            }
            header |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        // A zero header ends the data (as in the parquet crate: some writers pad pages with zeros).
        if header == 0 {
            self.pos = self.end;
            return Ok(None);
        }
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        if header & 1 == 1 {
            // `count` groups of 8 values, `bw` bytes each: a short last group holds what its bytes hold.
            if self.bw == 0 {
                return Ok(Some(Run::Repeat {
                    value: 0,
                    left: count.saturating_mul(8),
                }));
            }
            let bytes = count.saturating_mul(self.bw as usize);
            let held = bytes.min(self.end - self.pos);
            let run = Run::Packed {
                bit: self.pos * 8,
                left: held * 8 / self.bw as usize,
            };
            self.pos += held;
            Ok(Some(run))
        } else {
            let width = self.bw.div_ceil(8) as usize;
            let Some(bytes) = buf[..self.end].get(self.pos..self.pos + width) else {
                return corrupt("has a run's value past the end of its page");
            };
            self.pos += width;
            let mut value = 0u64;
            for (i, &b) in bytes.iter().enumerate() {
                value |= u64::from(b) << (8 * i);
            }
            if value >> self.bw != 0 {
                return corrupt(format!(
                    "has a run of {value}, wider than its {} bits",
                    self.bw
                ));
            }
            Ok(Some(Run::Repeat {
                value: value as u32,
                left: count,
            }))
        }
    }
}

/// Bit `i` of `buf`, least significant bit of each byte first (bit-packed booleans and one-bit levels).
#[inline(always)]
fn bit_at(buf: &[u8], i: usize) -> bool {
    buf[i / 8] >> (i % 8) & 1 == 1
}

/// The `bw`-bit value at bit `bit` of `buf` (bit-packed, least significant bit first).
#[inline(always)]
fn unpack(buf: &[u8], bit: usize, bw: u32) -> u32 {
    let at = bit >> 3;
    let word = match buf.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut w = [0u8; 8];
            let tail = buf.get(at..).unwrap_or(&[]);
            w[..tail.len().min(8)].copy_from_slice(&tail[..tail.len().min(8)]);
            u64::from_le_bytes(w)
        }
    };
    ((word >> (bit & 7)) & ((1u64 << bw) - 1)) as u32
}

/// Where a page's values are read from.
enum Values {
    /// Plain values from byte `pos` (booleans: from bit `pos`).
    Plain { pos: usize },
    /// Dictionary indices, or RLE booleans (`dict` false: the hybrid's values are the booleans).
    Hybrid {
        hybrid: Hybrid,
        run: Option<Run>,
        dict: bool,
    },
}

/// Where a data page's parts are: `levels` levels, repetition levels in `buf[rep.0..rep.1]`, definition levels
/// in `buf[def.0..def.1]`, values from byte `values` in `encoding`; `v2` for a data page v2.
struct Parts {
    levels: usize,
    rep: (usize, usize),
    def: (usize, usize),
    values: usize,
    encoding: Encoding,
    v2: bool,
}

/// A flat list column chunk (one repetition level) decoded page by page; see the module's documentation.
pub(super) struct ListPages {
    pages: Box<dyn PageReader>,
    physical: Physical,
    max_def: i16,
    def_empty: i16,
    dict: Option<Dict>,
    /// The current data page, its levels and where its values stand.
    buf: Bytes,
    values: Values,
    /// Levels in the page, and the next one to read.
    levels: usize,
    at: usize,
    /// The page's row starts (levels of repetition level 0), and the next one to read.
    starts: Vec<u32>,
    next: usize,
    /// Whether the page's definition levels are all `max_def`; when not, where they are read from, a run
    /// at a time as batches reach them.
    all_max: bool,
    def: Hybrid,
    def_run: Option<Run>,
    /// Rows the chunk may still start (its row group's, and one more: the caller names a row too many).
    rows_left: u64,
}

impl ListPages {
    pub(super) fn new(
        pages: Box<dyn PageReader>,
        physical: Physical,
        max_def: i16,
        def_empty: i16,
        rows: u64,
    ) -> ListPages {
        ListPages {
            pages,
            physical,
            max_def,
            def_empty,
            dict: None,
            buf: Bytes::new(),
            values: Values::Plain { pos: 0 },
            levels: 0,
            at: 0,
            starts: Vec::new(),
            next: 0,
            all_max: true,
            def: Hybrid {
                pos: 0,
                end: 0,
                bw: 0,
            },
            def_run: None,
            rows_left: rows.saturating_add(1),
        }
    }

    /// Decodes the next `rows` rows (fewer at the end of the chunk) into `out`: values, row starts in
    /// `offsets` (without the end), and in `null_rows` whether each row is null (left empty when none is).
    /// Returns the number of rows.
    pub(super) fn read<T: Out>(
        &mut self,
        rows: usize,
        out: &mut Vec<T>,
        offsets: &mut Vec<i64>,
        null_rows: &mut Vec<bool>,
    ) -> Result<usize> {
        out.clear();
        offsets.clear();
        null_rows.clear();
        let mut any_null = false;
        if rows == 0 {
            return Ok(0);
        }
        loop {
            if self.at == self.levels {
                if !self.next_page()? {
                    break;
                }
                // A full batch ends where a row starts; a row that goes on in this page is part of it.
                if offsets.len() == rows && self.starts.first() == Some(&0) {
                    break;
                }
            }
            if offsets.is_empty()
                && self.starts.get(self.next).map(|&s| s as usize) != Some(self.at)
            {
                return corrupt("starts a batch inside a row");
            }
            let want = rows - offsets.len();
            let here = (self.starts.len() - self.next).min(want);
            let end = match self.starts.get(self.next + want) {
                Some(&s) => s as usize,
                None => self.levels,
            };
            let values = if self.all_max {
                let base = out.len() as i64 - self.at as i64;
                for &s in &self.starts[self.next..self.next + here] {
                    offsets.push(base + i64::from(s));
                }
                null_rows.resize(offsets.len(), false);
                end - self.at
            } else {
                self.walk(end, out.len(), offsets, null_rows, &mut any_null)?
            };
            self.next += here;
            self.take(values, out)?;
            self.at = end;
            if offsets.len() == rows && end < self.levels {
                break;
            }
        }
        if !any_null {
            null_rows.clear();
        }
        Ok(offsets.len())
    }

    /// Row starts, null rows and the number of values of the page's levels `at..end`, their definition levels
    /// read a run at a time (a page with null or empty rows or null elements).
    fn walk(
        &mut self,
        end: usize,
        held: usize,
        offsets: &mut Vec<i64>,
        null_rows: &mut Vec<bool>,
        any_null: &mut bool,
    ) -> Result<usize> {
        let (max_def, def_empty, bw) = (self.max_def, self.def_empty, self.def.bw);
        let buf = &self.buf[..];
        let starts = &self.starts;
        let mut next = self.next;
        let mut values = 0usize;
        // Levels `i..i + k` all of definition level `d`: their rows and values, or the error they are.
        let mut levels = |i: usize, k: usize, d: u32, values: &mut usize| -> Result<()> {
            let d = d.min(i16::MAX as u32) as i16;
            if d > max_def {
                return corrupt(format!(
                    "has a definition level of {d}, above its maximum {max_def}"
                ));
            }
            if d < max_def && d > def_empty {
                return Err(PageError::NullElements);
            }
            while let Some(&s) = starts.get(next) {
                let s = s as usize;
                if s >= i + k {
                    break;
                }
                let before = if d == max_def { s - i } else { 0 };
                offsets.push((held + *values + before) as i64);
                null_rows.push(d < def_empty);
                *any_null |= d < def_empty;
                next += 1;
            }
            if d == max_def {
                *values += k;
            }
            Ok(())
        };
        let mut i = self.at;
        while i < end {
            while self.def_run.is_none_or(|r| run_left(&r) == 0) {
                match self.def.next_run(buf)? {
                    Some(r) => self.def_run = Some(r),
                    None => {
                        return corrupt(
                            "has a page with fewer definition levels than its header says",
                        )
                    }
                }
            }
            let run = self.def_run.as_mut().expect("set above");
            let k = run_left(run).min(end - i);
            match run {
                Run::Repeat { value, left } => {
                    if k > 0 {
                        levels(i, k, *value, &mut values)?;
                    }
                    *left -= k;
                }
                Run::Packed { bit, left } => {
                    for j in 0..k {
                        levels(
                            i + j,
                            1,
                            unpack(buf, *bit + j * bw as usize, bw),
                            &mut values,
                        )?;
                    }
                    *bit += k * bw as usize;
                    *left -= k;
                }
            }
            i += k;
        }
        Ok(values)
    }

    /// Loads the next data page with levels (reading a dictionary page on the way); `false` at the end.
    fn next_page(&mut self) -> Result<bool> {
        loop {
            let pages = &mut self.pages;
            let next = catch_unwind(AssertUnwindSafe(|| pages.get_next_page()));
            let page = match next {
                Ok(Ok(Some(p))) => p,
                Ok(Ok(None)) => return Ok(false),
                Ok(Err(e)) => return Err(PageError::Parquet(e)),
                Err(panic) => {
                    return Err(PageError::Undecodable(super::undecodable(panic.as_ref())))
                }
            };
            match page {
                Page::DictionaryPage {
                    buf,
                    num_values,
                    encoding,
                    ..
                } => {
                    if !matches!(encoding, Encoding::PLAIN | Encoding::PLAIN_DICTIONARY) {
                        return corrupt(format!("has a dictionary page encoded {encoding}"));
                    }
                    if self.dict.is_some() {
                        return corrupt("has a second dictionary page");
                    }
                    self.dict = Some(self.plain_dict(&buf, num_values as usize)?);
                }
                Page::DataPage {
                    buf,
                    num_values,
                    encoding,
                    def_level_encoding,
                    rep_level_encoding,
                    ..
                } => {
                    if num_values == 0 {
                        continue;
                    }
                    if rep_level_encoding != Encoding::RLE || def_level_encoding != Encoding::RLE {
                        return corrupt("has levels in an encoding other than RLE");
                    }
                    let mut pos = 0;
                    let mut section = || -> Result<(usize, usize)> {
                        let Some(len) = buf.get(pos..pos + 4) else {
                            return corrupt("has a page shorter than its levels");
                        };
                        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                        let start = pos + 4;
                        if len > buf.len() - start {
                            return corrupt("has a page shorter than its levels");
                        }
                        pos = start + len;
                        Ok((start, pos))
                    };
                    let rep = section()?;
                    let def = section()?;
                    let parts = Parts {
                        levels: num_values as usize,
                        rep,
                        def,
                        values: pos,
                        encoding,
                        v2: false,
                    };
                    self.load(buf, parts)?;
                    return Ok(true);
                }
                Page::DataPageV2 {
                    buf,
                    num_values,
                    encoding,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    ..
                } => {
                    if num_values == 0 {
                        continue;
                    }
                    let rep_end = rep_levels_byte_len as usize;
                    let def_end = rep_end.saturating_add(def_levels_byte_len as usize);
                    if def_end > buf.len() {
                        return corrupt("has a page shorter than its levels");
                    }
                    let parts = Parts {
                        levels: num_values as usize,
                        rep: (0, rep_end),
                        def: (rep_end, def_end),
                        values: def_end,
                        encoding,
                        v2: true,
                    };
                    self.load(buf, parts)?;
                    return Ok(true);
                }
            }
        }
    }

    /// A dictionary page's `n` plain values.
    fn plain_dict(&self, buf: &[u8], n: usize) -> Result<Dict> {
        let short = || corrupt("has a dictionary page shorter than its values");
        Ok(match self.physical {
            Physical::I32 => match buf.get(..n.saturating_mul(4)) {
                Some(b) => Dict::I32(
                    b.chunks_exact(4)
                        .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect(),
                ),
                None => return short(),
            },
            Physical::I64 => match buf.get(..n.saturating_mul(8)) {
                Some(b) => Dict::I64(
                    b.chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect(),
                ),
                None => return short(),
            },
            Physical::Bool => {
                if n.div_ceil(8) > buf.len() {
                    return short();
                }
                Dict::Bool((0..n).map(|i| bit_at(buf, i)).collect())
            }
        })
    }

    /// Makes `buf`, a data page laid out as `parts` says, the current page.
    fn load(&mut self, buf: Bytes, parts: Parts) -> Result<()> {
        let Parts {
            levels,
            rep,
            def,
            values,
            encoding,
            v2,
        } = parts;
        self.starts.clear();
        row_starts(&buf[rep.0..rep.1], levels, self.rows_left, &mut self.starts)?;
        self.rows_left -= self.starts.len() as u64;
        if v2 && self.starts.first() != Some(&0) {
            return corrupt("has a data page v2 that starts inside a row");
        }
        self.def = Hybrid {
            pos: def.0,
            end: def.1,
            bw: 16 - (self.max_def as u16).leading_zeros(),
        };
        self.def_run = None;
        self.all_max = all_max_def(&buf, self.def, levels, self.max_def)?;
        self.values = match (encoding, self.physical) {
            (Encoding::PLAIN, Physical::Bool) => Values::Plain { pos: values * 8 },
            (Encoding::PLAIN, _) => Values::Plain { pos: values },
            (Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY, _) => {
                if self.dict.is_none() {
                    return corrupt("has a dictionary-encoded page but no dictionary");
                }
                let Some(&bw) = buf.get(values) else {
                    return corrupt("has a dictionary-encoded page without its bit width");
                };
                if bw > 32 {
                    return corrupt(format!("has dictionary indices of {bw} bits"));
                }
                Values::Hybrid {
                    hybrid: Hybrid {
                        pos: values + 1,
                        end: buf.len(),
                        bw: u32::from(bw),
                    },
                    run: None,
                    dict: true,
                }
            }
            (Encoding::RLE, Physical::Bool) => {
                let Some(len) = buf.get(values..values + 4) else {
                    return corrupt("has an RLE boolean page without its length");
                };
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                Values::Hybrid {
                    hybrid: Hybrid {
                        pos: values + 4,
                        end: (values + 4).saturating_add(len).min(buf.len()),
                        bw: 1,
                    },
                    run: None,
                    dict: false,
                }
            }
            (e, _) => {
                return corrupt(format!(
                    "has values encoded {e}, which this reader does not read"
                ))
            }
        };
        self.buf = buf;
        self.levels = levels;
        self.at = 0;
        self.next = 0;
        Ok(())
    }

    /// Appends the page's next `n` values to `out`.
    fn take<T: Out>(&mut self, n: usize, out: &mut Vec<T>) -> Result<()> {
        let short = || corrupt("has a page with fewer values than its levels");
        let buf = &self.buf[..];
        match &mut self.values {
            Values::Plain { pos } => {
                match self.physical {
                    Physical::I32 => {
                        let Some(b) = buf.get(*pos..*pos + n * 4) else {
                            return short();
                        };
                        out.extend(b.chunks_exact(4).map(|c| {
                            T::from_i32(i32::from_le_bytes(c.try_into().expect("4 bytes")))
                        }));
                        *pos += n * 4;
                    }
                    Physical::I64 => {
                        let Some(b) = buf.get(*pos..*pos + n * 8) else {
                            return short();
                        };
                        out.extend(b.chunks_exact(8).map(|c| {
                            T::from_i64(i64::from_le_bytes(c.try_into().expect("8 bytes")))
                        }));
                        *pos += n * 8;
                    }
                    Physical::Bool => {
                        if (*pos + n).div_ceil(8) > buf.len() {
                            return short();
                        }
                        let from = *pos;
                        out.extend((from..from + n).map(|i| T::from_bool(bit_at(buf, i))));
                        *pos += n;
                    }
                }
                Ok(())
            }
            Values::Hybrid { hybrid, run, dict } => {
                let dict = if *dict { self.dict.as_ref() } else { None };
                let mut n = n;
                while n > 0 {
                    while run.is_none_or(|r| run_left(&r) == 0) {
                        match hybrid.next_run(buf)? {
                            Some(r) => *run = Some(r),
                            None => return short(),
                        }
                    }
                    let r = run.as_mut().expect("set above");
                    let k = run_left(r).min(n);
                    match r {
                        Run::Repeat { value, left } => {
                            let v = lookup::<T>(dict, *value)?;
                            out.extend(std::iter::repeat_n(v, k));
                            *left -= k;
                        }
                        Run::Packed { bit, left } => {
                            gather(buf, *bit, hybrid.bw, k, dict, out)?;
                            *bit += k * hybrid.bw as usize;
                            *left -= k;
                        }
                    }
                    n -= k;
                }
                Ok(())
            }
        }
    }
}

fn run_left(r: &Run) -> usize {
    match *r {
        Run::Repeat { left, .. } | Run::Packed { left, .. } => left,
    }
}

/// Dictionary entry `index` (or, without a dictionary, the boolean `index`) as `T`.
#[inline]
fn lookup<T: Out>(dict: Option<&Dict>, index: u32) -> Result<T> {
    let i = index as usize;
    let v = match dict {
        Some(Dict::I32(d)) => d.get(i).map(|&x| T::from_i32(x)),
        Some(Dict::I64(d)) => d.get(i).map(|&x| T::from_i64(x)),
        Some(Dict::Bool(d)) => d.get(i).map(|&x| T::from_bool(x)),
        None if index <= 1 => Some(T::from_bool(index == 1)),
        None => None,
    };
    match v {
        Some(v) => Ok(v),
        None => corrupt(format!(
            "has a dictionary index {index} past its dictionary of {}",
            dict.map_or(2, Dict::len)
        )),
    }
}

/// Appends the `n` bit-packed values from bit `bit` of `buf`, `bw` bits each, looked up in `dict` (or, without
/// one, as booleans).
fn gather<T: Out>(
    buf: &[u8],
    bit: usize,
    bw: u32,
    n: usize,
    dict: Option<&Dict>,
    out: &mut Vec<T>,
) -> Result<()> {
    fn each<D: Copy, T: Out>(
        buf: &[u8],
        bit: usize,
        bw: u32,
        n: usize,
        d: &[D],
        cast: impl Fn(D) -> T,
        out: &mut Vec<T>,
    ) -> Result<()> {
        let mut past = false;
        out.extend((0..n).map(|i| {
            let index = unpack(buf, bit + i * bw as usize, bw) as usize;
            match d.get(index) {
                Some(&v) => cast(v),
                None => {
                    past = true;
                    T::default()
                }
            }
        }));
        if past {
            let index = (0..n)
                .map(|i| unpack(buf, bit + i * bw as usize, bw))
                .find(|&x| x as usize >= d.len())
                .unwrap_or_default();
            return corrupt(format!(
                "has a dictionary index {index} past its dictionary of {}",
                d.len()
            ));
        }
        Ok(())
    }
    match dict {
        Some(Dict::I32(d)) => each(buf, bit, bw, n, d, T::from_i32, out),
        Some(Dict::I64(d)) => each(buf, bit, bw, n, d, T::from_i64, out),
        Some(Dict::Bool(d)) => each(buf, bit, bw, n, d, T::from_bool, out),
        None => each(buf, bit, bw, n, &[false, true], T::from_bool, out),
    }
}

/// The positions of the repetition levels that are 0 (row starts) among the `levels` levels of `buf` (one bit
/// each: a flat list's levels are 0 or 1), at most `limit` of them.
fn row_starts(buf: &[u8], levels: usize, limit: u64, starts: &mut Vec<u32>) -> Result<()> {
    let past = || {
        corrupt(format!(
            "has more rows than its row group ({limit} more at most)"
        ))
    };
    let mut hybrid = Hybrid {
        pos: 0,
        end: buf.len(),
        bw: 1,
    };
    let mut at = 0usize;
    while at < levels {
        let Some(run) = hybrid.next_run(buf)? else {
            return corrupt("has a page with fewer repetition levels than its header says");
        };
        match run {
            Run::Repeat { value, left } => {
                let k = left.min(levels - at);
                match value {
                    0 if (starts.len() + k) as u64 > limit => return past(),
                    0 => starts.extend((at..at + k).map(|i| i as u32)),
                    1 => {}
                    _ => return corrupt(format!("has a repetition level of {value}, above 1")),
                }
                at += k;
            }
            Run::Packed { bit, left } => {
                let k = left.min(levels - at);
                for i in 0..k {
                    if !bit_at(buf, bit + i) {
                        starts.push((at + i) as u32);
                    }
                }
                if starts.len() as u64 > limit {
                    return past();
                }
                at += k;
            }
        }
    }
    Ok(())
}

/// Whether the `levels` definition levels of `def` (in `buf`) are all `max_def`, read a run at a time.
fn all_max_def(buf: &[u8], def: Hybrid, levels: usize, max_def: i16) -> Result<bool> {
    let mut runs = def;
    let mut at = 0usize;
    while at < levels {
        match runs.next_run(buf)? {
            Some(Run::Repeat { value, left }) if value == max_def as u32 => {
                at += left.min(levels - at)
            }
            Some(_) => return Ok(false),
            None => return corrupt("has a page with fewer definition levels than its header says"),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    //! Corrupt and adversarial pages, written by hand (valid pages of every shape are covered by `flat`'s
    //! property test and the layout tests against arrow-rs and pyarrow).

    use parquet::column::page::PageMetadata;

    use super::*;

    /// Pages handed over as a column chunk's page reader would.
    struct Pages(std::vec::IntoIter<Page>);

    impl Iterator for Pages {
        type Item = parquet::errors::Result<Page>;

        fn next(&mut self) -> Option<Self::Item> {
            self.0.next().map(Ok)
        }
    }

    impl PageReader for Pages {
        fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
            Ok(self.0.next())
        }

        fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
            Ok(None)
        }

        fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
            self.0.next();
            Ok(())
        }
    }

    fn varint(mut x: u64, out: &mut Vec<u8>) {
        while x >= 0x80 {
            out.push((x as u8) | 0x80);
            x >>= 7;
        }
        out.push(x as u8);
    }

    /// An RLE run of `count` copies of `value` (one value byte).
    fn rle(count: u64, value: u8) -> Vec<u8> {
        let mut out = Vec::new();
        varint(count << 1, &mut out);
        out.push(value);
        out
    }

    /// A data page v1: repetition and definition levels (hybrid-encoded, with their lengths), then `values`.
    fn v1(levels: u32, rep: &[u8], def: &[u8], encoding: Encoding, values: &[u8]) -> Page {
        let mut buf = Vec::new();
        for part in [rep, def] {
            buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
            buf.extend_from_slice(part);
        }
        buf.extend_from_slice(values);
        Page::DataPage {
            buf: Bytes::from(buf),
            num_values: levels,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        }
    }

    fn dict(values: &[i32]) -> Page {
        Page::DictionaryPage {
            buf: Bytes::from(
                values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
            num_values: values.len() as u32,
            encoding: Encoding::PLAIN,
            is_sorted: false,
        }
    }

    fn plain(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Reads `rows` rows of an `int32` list column (nullable list of nullable elements: levels 0..=3, 1 for
    /// an empty list) in a row group of `rg_rows` rows: the values and row starts, or the error's text.
    fn read(
        pages: Vec<Page>,
        rg_rows: u64,
        rows: usize,
    ) -> std::result::Result<(Vec<i32>, Vec<i64>), String> {
        let mut p = ListPages::new(
            Box::new(Pages(pages.into_iter())),
            Physical::I32,
            3,
            1,
            rg_rows,
        );
        let (mut out, mut offsets, mut nulls) = (Vec::new(), Vec::new(), Vec::new());
        match p.read(rows, &mut out, &mut offsets, &mut nulls) {
            Ok(_) => Ok((out, offsets)),
            Err(PageError::Corrupt(what)) => Err(what),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    #[test]
    fn a_valid_page_reads() {
        // Rows [7, 8], [9]: levels rep 0 1 0, def 3 3 3.
        let rep = [vec![0b11], vec![0b010]].concat(); // one bit-packed group: 0, 1, 0
        let page = v1(3, &rep, &rle(3, 3), Encoding::PLAIN, &plain(&[7, 8, 9]));
        assert_eq!(read(vec![page], 2, 5), Ok((vec![7, 8, 9], vec![0, 2])));
    }

    #[test]
    fn a_header_claiming_billions_of_rows_is_refused_before_they_are_held() {
        // A few bytes of levels saying 2^31 - 1 rows: refused at the row group's count, not 8 GB of row starts.
        let n = i32::MAX as u32;
        let page = v1(
            n,
            &rle(u64::from(n), 0),
            &rle(u64::from(n), 3),
            Encoding::PLAIN,
            &plain(&[1]),
        );
        let err = read(vec![page], 10, 5).unwrap_err();
        assert!(err.contains("more rows than its row group"), "{err}");
    }

    #[test]
    fn definition_levels_are_read_as_batches_reach_them() {
        // One null row of 2^31 - 1 levels: no levels are expanded (4 GB of `i16`), the row is read.
        let n = i32::MAX as u32;
        let mut rep = rle(1, 0);
        rep.extend(rle(u64::from(n) - 1, 1));
        let page = v1(n, &rep, &rle(u64::from(n), 0), Encoding::PLAIN, &[]);
        let mut p = ListPages::new(
            Box::new(Pages(vec![page].into_iter())),
            Physical::I32,
            3,
            1,
            1,
        );
        let (mut out, mut offsets, mut nulls) = (Vec::<i32>::new(), Vec::new(), Vec::new());
        assert_eq!(p.read(1, &mut out, &mut offsets, &mut nulls).unwrap(), 1);
        assert_eq!((out.len(), offsets, nulls), (0, vec![0], vec![true]));
    }

    #[test]
    fn corrupt_pages_are_errors() {
        let ok_levels = (rle(2, 0), rle(2, 3));
        let page = |encoding, values: &[u8]| v1(2, &ok_levels.0, &ok_levels.1, encoding, values);
        let dict_page =
            |bw: u8, runs: &[u8]| page(Encoding::RLE_DICTIONARY, &[&[bw], runs].concat());
        let cases: Vec<(Vec<Page>, &str)> = vec![
            (
                vec![dict(&[1]), dict(&[2]), dict_page(1, &rle(2, 0))],
                "second dictionary page",
            ),
            (
                vec![dict(&[1, 2]), dict_page(1, &rle(2, 2))],
                "wider than its 1 bits",
            ),
            (
                vec![dict(&[1, 2]), dict_page(2, &rle(2, 3))],
                "index 3 past its dictionary of 2",
            ),
            (
                vec![dict(&[1, 2]), dict_page(33, &rle(2, 0))],
                "indices of 33 bits",
            ),
            (vec![dict_page(1, &rle(2, 0))], "no dictionary"),
            (
                vec![dict(&[1, 2]), page(Encoding::RLE_DICTIONARY, &[])],
                "without its bit width",
            ),
            // A bit-packed run of one group of 8 two-bit indices, cut to one byte: four values, two asked.
            (
                vec![dict(&[1, 2]), dict_page(2, &[0x03, 0b0000_0011])],
                "index 3 past its dictionary",
            ),
            (
                vec![dict(&[1, 2]), dict_page(1, &[])],
                "fewer values than its levels",
            ),
            (
                vec![page(Encoding::PLAIN, &[1, 0, 0, 0])],
                "fewer values than its levels",
            ),
            (
                vec![page(Encoding::DELTA_BINARY_PACKED, &[])],
                "values encoded DELTA_BINARY_PACKED",
            ),
            // A zero header ends the levels early.
            (
                vec![v1(
                    2,
                    &[0, 0],
                    &ok_levels.1,
                    Encoding::PLAIN,
                    &plain(&[1, 2]),
                )],
                "fewer repetition levels",
            ),
            (
                vec![v1(
                    2,
                    &ok_levels.0,
                    &rle(2, 4),
                    Encoding::PLAIN,
                    &plain(&[1, 2]),
                )],
                "wider than its 2 bits",
            ),
            (
                vec![v1(
                    2,
                    &rle(2, 1),
                    &ok_levels.1,
                    Encoding::PLAIN,
                    &plain(&[1, 2]),
                )],
                "inside a row",
            ),
            (
                vec![v1(
                    2,
                    &rle(2, 2),
                    &ok_levels.1,
                    Encoding::PLAIN,
                    &plain(&[1, 2]),
                )],
                "wider than its 1 bits",
            ),
            // A header of eleven bytes.
            (
                vec![v1(
                    2,
                    &[0xff; 11],
                    &ok_levels.1,
                    Encoding::PLAIN,
                    &plain(&[1, 2]),
                )],
                "longer than ten bytes",
            ),
        ];
        for (pages, expected) in cases {
            let err = read(pages, 10, 5).expect_err(expected);
            assert!(err.contains(expected), "{err} (expected {expected:?})");
        }
        // A data page v2 must start a row.
        let mut buf = rle(2, 1);
        let rep_len = buf.len() as u32;
        buf.extend(rle(2, 3));
        let def_len = buf.len() as u32 - rep_len;
        buf.extend(plain(&[1, 2]));
        let v2 = Page::DataPageV2 {
            buf: Bytes::from(buf),
            num_values: 2,
            encoding: Encoding::PLAIN,
            num_nulls: 0,
            num_rows: 1,
            def_levels_byte_len: def_len,
            rep_levels_byte_len: rep_len,
            is_compressed: false,
            statistics: None,
        };
        let err = read(vec![v2], 10, 5).unwrap_err();
        assert!(err.contains("v2 that starts inside a row"), "{err}");
    }
}
