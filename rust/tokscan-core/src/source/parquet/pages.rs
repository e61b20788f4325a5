//! A flat list column chunk decoded from its pages by tokscan itself, for the encodings every writer of token
//! corpora uses (levels in the RLE / bit-packing hybrid; values plain or dictionary-encoded, booleans plain or
//! RLE). [`super::flat`] sends other chunks to the parquet crate's column reader, which this reproduces batch
//! for batch (its tests compare the two on every file they write).
//!
//! The column reader hands on a definition and a repetition level per token (`i16` each), then every value in
//! the column's physical type, and counts records a second time to stop at a batch's last row. A loss mask is a
//! handful of runs per sample, yet it cost as much as the token ids: an `i32` per mask token, two levels, the
//! record count and a narrowing copy (`benches/README.md`). Here the levels are read run by run — a run of
//! repetition level 0 is row starts, a run of the maximum definition level is values, nothing per token — and a
//! run of one dictionary index or one boolean is a fill of the batch's own type. Only a page whose definition
//! levels are not all the maximum (null or empty rows, null elements) has its levels expanded.

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

/// What stops a decode: a corrupt page (the text says what), a null element, or the parquet crate's error.
#[derive(Debug)]
pub(super) enum PageError {
    Corrupt(String),
    NullElements,
    Parquet(parquet::errors::ParquetError),
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
                return corrupt("a run header past the end of its page");
            };
            self.pos += 1;
            if shift > 56 {
                return corrupt("a run header longer than any run");
            }
            header |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
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
                return corrupt("a run's value past the end of its page");
            };
            self.pos += width;
            let mut value = 0u32;
            for (i, &b) in bytes.iter().enumerate() {
                value |= u32::from(b) << (8 * i);
            }
            Ok(Some(Run::Repeat { value, left: count }))
        }
    }
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
    /// The page's definition levels, expanded only when they are not all `max_def`.
    def: Vec<i16>,
    all_max: bool,
}

impl ListPages {
    pub(super) fn new(
        pages: Box<dyn PageReader>,
        physical: Physical,
        max_def: i16,
        def_empty: i16,
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
            def: Vec::new(),
            all_max: true,
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

    /// Row starts, null rows and the number of values of the page's levels `at..end`, one level at a time (a
    /// page with null or empty rows or null elements).
    fn walk(
        &mut self,
        end: usize,
        held: usize,
        offsets: &mut Vec<i64>,
        null_rows: &mut Vec<bool>,
        any_null: &mut bool,
    ) -> Result<usize> {
        let mut values = 0usize;
        let mut next = self.next;
        for (i, &d) in self.def[self.at..end].iter().enumerate() {
            if self.starts.get(next).map(|&s| s as usize) == Some(self.at + i) {
                next += 1;
                offsets.push((held + values) as i64);
                null_rows.push(d < self.def_empty);
                *any_null |= d < self.def_empty;
            }
            if d == self.max_def {
                values += 1;
            } else if d > self.max_def {
                return corrupt(format!(
                    "has a definition level of {d}, above its maximum {}",
                    self.max_def
                ));
            } else if d > self.def_empty {
                return Err(PageError::NullElements);
            }
        }
        Ok(values)
    }

    /// Loads the next data page with levels (reading a dictionary page on the way); `false` at the end.
    fn next_page(&mut self) -> Result<bool> {
        loop {
            let page = match super::unpanicked(|| self.pages.get_next_page()) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(false),
                Err(e) => return Err(PageError::Parquet(e)),
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
                    self.load(buf, num_values as usize, rep, def, pos, encoding)?;
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
                    self.load(
                        buf,
                        num_values as usize,
                        (0, rep_end),
                        (rep_end, def_end),
                        def_end,
                        encoding,
                    )?;
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
                Dict::Bool((0..n).map(|i| buf[i / 8] >> (i % 8) & 1 == 1).collect())
            }
        })
    }

    /// Makes `buf` the current page: `levels` levels, repetition levels in `buf[rep.0..rep.1]`, definition
    /// levels in `buf[def.0..def.1]`, values from `values` in `encoding`.
    fn load(
        &mut self,
        buf: Bytes,
        levels: usize,
        rep: (usize, usize),
        def: (usize, usize),
        values: usize,
        encoding: Encoding,
    ) -> Result<()> {
        self.starts.clear();
        row_starts(&buf[rep.0..rep.1], levels, &mut self.starts)?;
        let bw = 16 - (self.max_def as u16).leading_zeros();
        self.all_max = def_levels(&buf[def.0..def.1], levels, bw, self.max_def, &mut self.def)?;
        self.values = match (encoding, self.physical) {
            (Encoding::PLAIN, Physical::Bool) => Values::Plain { pos: values * 8 },
            (Encoding::PLAIN, _) => Values::Plain { pos: values },
            (Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY, _) => {
                if self.dict.is_none() {
                    return corrupt("has a dictionary-encoded page but no dictionary");
                }
                let Some(&bw) = buf.get(values) else {
                    return corrupt("has a page shorter than its levels");
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
                    return corrupt("has a page shorter than its levels");
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
                        out.extend(
                            (from..from + n).map(|i| T::from_bool(buf[i / 8] >> (i % 8) & 1 == 1)),
                        );
                        *pos += n;
                    }
                }
                Ok(())
            }
            Values::Hybrid { hybrid, run, dict } => {
                let dict = if *dict { self.dict.as_ref() } else { None };
                let mut n = n;
                while n > 0 {
                    if run.is_none_or(|r| run_left(&r) == 0) {
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
/// each: a flat list's levels are 0 or 1).
fn row_starts(buf: &[u8], levels: usize, starts: &mut Vec<u32>) -> Result<()> {
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
                    0 => starts.extend((at..at + k).map(|i| i as u32)),
                    1 => {}
                    _ => return corrupt(format!("has a repetition level of {value}, above 1")),
                }
                at += k;
            }
            Run::Packed { bit, left } => {
                let k = left.min(levels - at);
                for i in 0..k {
                    if buf[(bit + i) / 8] >> ((bit + i) % 8) & 1 == 0 {
                        starts.push((at + i) as u32);
                    }
                }
                at += k;
            }
        }
    }
    Ok(())
}

/// Whether the `levels` definition levels of `buf` (`bw` bits each) are all `max_def`; when not, they are
/// expanded into `def`.
fn def_levels(
    buf: &[u8],
    levels: usize,
    bw: u32,
    max_def: i16,
    def: &mut Vec<i16>,
) -> Result<bool> {
    let hybrid = Hybrid {
        pos: 0,
        end: buf.len(),
        bw,
    };
    let mut runs = hybrid;
    let mut at = 0usize;
    let mut all_max = true;
    while at < levels {
        match runs.next_run(buf)? {
            Some(Run::Repeat { value, left }) if value == max_def as u32 => {
                at += left.min(levels - at)
            }
            Some(_) => {
                all_max = false;
                break;
            }
            None => return corrupt("has a page with fewer definition levels than its header says"),
        }
    }
    if all_max {
        return Ok(true);
    }
    def.clear();
    let mut runs = hybrid;
    while def.len() < levels {
        let left = levels - def.len();
        match runs.next_run(buf)? {
            Some(Run::Repeat { value, left: k }) => {
                let v = value.min(i16::MAX as u32) as i16;
                def.extend(std::iter::repeat_n(v, k.min(left)));
            }
            Some(Run::Packed { bit, left: k }) => {
                def.extend(
                    (0..k.min(left)).map(|i| {
                        unpack(buf, bit + i * bw as usize, bw).min(i16::MAX as u32) as i16
                    }),
                );
            }
            None => return corrupt("has a page with fewer definition levels than its header says"),
        }
    }
    Ok(false)
}
