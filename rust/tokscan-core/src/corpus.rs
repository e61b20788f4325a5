//! A corpus: the user's paths discovered, every input opened as a [`Source`], rows numbered globally in path
//! order. The scan plans its units from it; `show`, `align`, `clean` and `--decode` fetch samples through
//! it, so every command reads every format the same way and honours the same column overrides.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sample_id::SampleId;
use crate::source::{
    self, with_tokens, Batch, ColumnNames, Input, PromptsFile, Skipped, Source, DEFAULT_CATEGORY,
};

/// One unit of parallel work of the whole corpus.
#[derive(Debug, Clone, Copy)]
pub struct Unit {
    /// Index of the source in [`Corpus::sources`].
    pub source: usize,
    /// Index of the unit inside its source.
    pub index: usize,
    /// Global row of the unit's first sample.
    pub base_row: u64,
}

/// One sample, owned: what `show` and `align` need.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleData {
    pub row: u64,
    pub local_row: u64,
    pub source: usize,
    /// The whole sequence (prompt followed by the completion when they are stored apart).
    pub ids: Vec<i64>,
    /// Length of the prompt when it is stored apart (`prompt_ids` + `output_ids`).
    pub prompt_len: Option<usize>,
    pub mask: Option<Vec<u8>>,
    pub sample_id: Option<SampleId>,
    pub category: String,
    /// What the source found about the row besides its tokens ([`crate::source::Finding`]): a line it could
    /// not read as a sample (JSONL: its 1-based line number; its `ids` are then empty, standing for nothing),
    /// the generator's finish reason and whether its token counts disagree with the ids.
    pub finding: crate::source::Finding,
}

impl SampleData {
    /// The row's 1-based line number when it is a line its input could not read as a sample.
    pub fn malformed_line(&self) -> Option<u32> {
        self.finding.malformed_line
    }
}

/// Most rows [`Corpus::content_keys_at`] reads in one pass.
pub const KEY_RANGE: u64 = 4096;

pub struct Corpus {
    pub inputs: Vec<Input>,
    /// Prompts files found beside the shards (see [`crate::pairing`]).
    pub prompts: Vec<PromptsFile>,
    /// Folders whose prompts files do not pair (several, none or more than one named `prompts.jsonl`): their
    /// shards pair with no prompts file, not with one of a folder above.
    pub unpaired_prompt_dirs: Vec<PathBuf>,
    /// What discovery left aside, with the reason.
    pub skipped: Vec<Skipped>,
    pub sources: Vec<Box<dyn Source>>,
    /// `starts[k]` is the global row of source k's first sample; the last entry is the total.
    pub starts: Vec<u64>,
}

impl Corpus {
    /// Discovers and opens `paths` (every header and schema validated before any token is read); the inputs
    /// open in parallel on the current rayon pool.
    pub fn open(paths: &[String], columns: &ColumnNames) -> Result<Corpus> {
        let found = source::discover_all(paths)?;
        let mut corpus = Corpus::of_inputs(found.inputs, columns)?;
        corpus.prompts = found.prompts;
        corpus.unpaired_prompt_dirs = found.unpaired_prompt_dirs;
        corpus.skipped = found.skipped;
        Ok(corpus)
    }

    /// Opens `inputs` in the order given (no discovery): the corpus a plan was made from, as a cluster task
    /// that reads rows anywhere opens it ([`crate::plan::open_planned`]).
    pub fn of_inputs(inputs: Vec<Input>, columns: &ColumnNames) -> Result<Corpus> {
        use rayon::prelude::*;
        // Collect every result before picking the first error in path order, so the error reported does not
        // depend on which thread failed first.
        let opened: Vec<Result<Box<dyn Source>>> = inputs
            .par_iter()
            .map(|i| source::open(i, columns))
            .collect();
        let sources: Vec<Box<dyn Source>> = opened.into_iter().collect::<Result<_>>()?;
        let mut starts = Vec::with_capacity(sources.len() + 1);
        let mut total = 0u64;
        for s in &sources {
            starts.push(total);
            total += s.rows();
        }
        starts.push(total);
        Ok(Corpus {
            inputs,
            prompts: Vec::new(),
            unpaired_prompt_dirs: Vec::new(),
            skipped: Vec::new(),
            sources,
            starts,
        })
    }

    pub fn len(&self) -> u64 {
        *self.starts.last().expect("starts holds the total")
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every unit of every source, in global row order.
    pub fn units(&self) -> Vec<Unit> {
        let mut out = Vec::new();
        for (k, s) in self.sources.iter().enumerate() {
            for (index, u) in s.units().iter().enumerate() {
                out.push(Unit {
                    source: k,
                    index,
                    base_row: self.starts[k] + u.first_row,
                });
            }
        }
        out
    }

    /// Writes a copy of source `k` at `out` holding the rows where `keep[local row]`, through its format's
    /// own writer (see [`Source::write_filtered`]).
    pub fn write_filtered(
        &self,
        k: usize,
        keep: &[bool],
        out: &Path,
    ) -> Result<source::WriteStats> {
        let s = self.sources.get(k).ok_or_else(|| {
            Error::Usage(format!(
                "input {k} is out of range (the corpus has {} inputs)",
                self.sources.len()
            ))
        })?;
        source::check_keep(s.as_ref(), keep)?;
        s.write_filtered(keep, out)
    }

    /// `(source, local row)` of a global row.
    pub fn locate(&self, row: u64) -> Result<(usize, u64)> {
        if row >= self.len() {
            return Err(Error::Usage(format!(
                "row {row} is out of range (the corpus has {} samples)",
                self.len()
            )));
        }
        let k = self.starts.partition_point(|&s| s <= row) - 1;
        Ok((k, row - self.starts[k]))
    }

    /// The category of source `k`'s rows that carry none themselves.
    pub fn default_category(&self, k: usize) -> &str {
        self.inputs[k]
            .hive_category
            .as_deref()
            .unwrap_or(DEFAULT_CATEGORY)
    }

    /// Global rows `[start, end)` as owned samples, reading only the rows' row groups / ranges.
    pub fn samples(&self, start: u64, end: u64) -> Result<Vec<SampleData>> {
        // Capped: a row count comes from file metadata, which is only proven when the rows are decoded.
        let mut out = Vec::with_capacity((end.saturating_sub(start) as usize).min(1 << 16));
        let mut row = start;
        while row < end {
            let (k, local) = self.locate(row)?;
            let stop = end.min(self.starts[k + 1]);
            let local_end = local + (stop - row);
            let default = self.default_category(k).to_string();
            let mut next_local = local;
            self.sources[k].unchanged()?;
            self.sources[k].read_rows(local, local_end, &mut |b: &Batch<'_>| {
                for i in 0..b.rows() {
                    out.push(owned(
                        b,
                        i,
                        k,
                        self.starts[k] + next_local,
                        next_local,
                        &default,
                    ));
                    next_local += 1;
                }
                Ok(())
            })?;
            // A page lost to a file cut during the read read as zeros: never hand those out.
            self.sources[k].unchanged()?;
            if next_local != local_end {
                return Err(Error::invalid(
                    self.sources[k].path(),
                    format!(
                        "rows {local}..{local_end} were asked for but {} were read",
                        next_local - local
                    ),
                ));
            }
            row = stop;
        }
        Ok(out)
    }

    /// One sample by global row.
    pub fn sample(&self, row: u64) -> Result<SampleData> {
        Ok(self.samples(row, row + 1)?.pop().expect("one row was read"))
    }

    /// Global row of the first sample with `sample_id` (reads only the id columns).
    /// An integer id is found by its number or by its decimal text.
    pub fn find(&self, sample_id: &SampleId) -> Result<Option<u64>> {
        Ok(self.find_rows(sample_id, 1)?.first().copied())
    }

    /// Global rows of the first `limit` samples with this id, in row order (an id a corpus repeats is
    /// `sample_id_duplicate`; a command given it names the other rows).
    pub fn find_rows(&self, sample_id: &SampleId, limit: usize) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for (k, s) in self.sources.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            if let Some(ids) = s.sample_ids()? {
                let rows = ids
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.as_ref().is_some_and(|v| v.matches(sample_id)))
                    .map(|(i, _)| self.starts[k] + i as u64);
                out.extend(rows.take(limit - out.len()));
            }
        }
        Ok(out)
    }

    /// The ids of the global rows `rows` (ascending), None where a sample has none: each input's id column is
    /// read only when it holds one of the rows, and only those ids are kept.
    pub fn sample_ids_at(&self, rows: &[u64]) -> Result<Vec<Option<SampleId>>> {
        let mut out = Vec::with_capacity(rows.len());
        let mut at = 0;
        for (k, s) in self.sources.iter().enumerate() {
            let end = self.starts[k + 1];
            let mine = rows[at..].iter().take_while(|&&r| r < end).count();
            if mine == 0 {
                continue;
            }
            let ids = s.sample_ids()?;
            for &r in &rows[at..at + mine] {
                let local = (r - self.starts[k]) as usize;
                out.push(ids.as_ref().and_then(|v| v.get(local).cloned().flatten()));
            }
            at += mine;
        }
        out.resize(rows.len(), None); // rows past the end have no sample
        Ok(out)
    }

    /// The [`crate::token::content_key`] of the global rows `rows` (ascending, each in the corpus): what the
    /// scan recorded of each row it flagged, read again by `clean` before it removes one. Rows close together
    /// are read in one pass of at most [`KEY_RANGE`] rows, so only the rows' row groups / ranges are decoded, and
    /// only one batch and one sample are held at a time, however many rows are asked for.
    pub fn content_keys_at(&self, rows: &[u64]) -> Result<Vec<u64>> {
        const GAP: u64 = 256;
        let mut out = Vec::with_capacity(rows.len());
        let mut i = 0;
        while i < rows.len() {
            let (k, local) = self.locate(rows[i])?;
            let end_of_source = self.starts[k + 1];
            let mut j = i + 1;
            while j < rows.len()
                && rows[j] < end_of_source
                && rows[j] - rows[j - 1] <= GAP
                && rows[j] - rows[i] < KEY_RANGE
            {
                j += 1;
            }
            let local_end = rows[j - 1] - self.starts[k] + 1;
            let want = &rows[i..j];
            let mut at = 0;
            let mut next = local;
            let default = self.default_category(k).to_string();
            self.sources[k].unchanged()?;
            self.sources[k].read_rows(local, local_end, &mut |b: &Batch<'_>| {
                for r in 0..b.rows() {
                    let row = self.starts[k] + next;
                    next += 1;
                    if want.get(at) == Some(&row) {
                        let s = owned(b, r, k, row, next - 1, &default);
                        out.push(crate::token::content_key(&s.ids));
                        at += 1;
                    }
                }
                Ok(())
            })?;
            self.sources[k].unchanged()?;
            if at != want.len() {
                return Err(Error::invalid(
                    self.sources[k].path(),
                    format!("row {} was asked for but not read", want[at]),
                ));
            }
            i = j;
        }
        Ok(out)
    }

    /// [`crate::token::content_digest`] of the global rows `rows` (ascending) and their content keys, read again.
    pub fn content_digest_at(&self, rows: &[u64]) -> Result<u64> {
        let mut digest = 0u64;
        for chunk in rows.chunks(1 << 16) {
            let keys = self.content_keys_at(chunk)?;
            digest = digest.wrapping_add(crate::token::content_digest(
                chunk.iter().copied().zip(keys),
            ));
        }
        Ok(digest)
    }

    /// The files beside the inputs that hold no corpus data, which a copy that stands in for the corpus keeps
    /// (`clean`): the prompts files, then the files discovery skipped as of no known format (notes, configs, a
    /// `dataset_dict.json`) and the prompts files that do not pair (an old copy beside `prompts.jsonl`). Not hidden files, files a format's folder leaves unread (a `datasets` cache
    /// `.arrow`), refused shards, nor another name of an input's file (a `notes.txt` symlink to a shard).
    pub fn side_files(&self) -> Vec<PathBuf> {
        let read: std::collections::HashSet<(u64, u64)> = self
            .sources
            .iter()
            .filter_map(|s| {
                let p = s.path();
                std::fs::metadata(p)
                    .ok()
                    .map(|m| crate::source::file_key(p, &m))
            })
            .collect();
        let skipped = self
            .skipped
            .iter()
            .filter(|s| {
                s.reason == crate::source::NOT_A_CORPUS_FILE
                    || s.reason.starts_with(crate::source::UNPAIRED_PROMPTS_FILE)
            })
            .filter(|s| {
                std::fs::metadata(&s.path).is_ok_and(|m| {
                    m.is_file() && !read.contains(&crate::source::file_key(&s.path, &m))
                })
            })
            .map(|s| s.path.clone());
        self.prompts
            .iter()
            .map(|p| p.path.clone())
            .chain(skipped)
            .collect()
    }

    /// Every sample's id (None where a sample has none), in global row order.
    pub fn sample_ids(&self) -> Result<Vec<Option<SampleId>>> {
        let mut out = Vec::with_capacity((self.len() as usize).min(1 << 16));
        for s in &self.sources {
            match s.sample_ids()? {
                Some(ids) => out.extend(ids),
                None => out.extend(std::iter::repeat_n(None, s.rows() as usize)),
            }
        }
        Ok(out)
    }

    /// Whether the corpus has sample ids and every one is an integer (a copy then keeps an integer column).
    /// Reads the id columns one input at a time.
    pub fn integer_ids(&self) -> Result<bool> {
        let mut any = false;
        for s in &self.sources {
            if let Some(ids) = s.sample_ids()? {
                for id in ids.iter().flatten() {
                    match id {
                        SampleId::Int(_) => any = true,
                        SampleId::Text(_) => return Ok(false),
                    }
                }
            }
        }
        Ok(any)
    }

    pub fn source_path(&self, k: usize) -> &Path {
        self.sources[k].path()
    }
}

/// A stored token id as i64, the type `show` and `align` see (an id beyond i64 wraps negative, which is out
/// of vocabulary either way).
trait Wide: Copy {
    fn wide(self) -> i64;
}

macro_rules! wide {
    ($($t:ty),*) => { $( impl Wide for $t { fn wide(self) -> i64 { self as i64 } } )* };
}
wide!(u16, u32, i32, u64);

impl Wide for i64 {
    fn wide(self) -> i64 {
        self
    }
}

fn owned(
    b: &Batch<'_>,
    i: usize,
    source: usize,
    row: u64,
    local: u64,
    default: &str,
) -> SampleData {
    let null = b.null_rows.is_some_and(|n| n[i]);
    let mut ids: Vec<i64> = Vec::new();
    let mut prompt_len = None;
    if let Some(p) = b.prompt {
        let before = ids.len();
        if !null {
            with_tokens!(p.values, v => ids.extend(v[p.offsets.range(i)].iter().map(|&t| t.wide())));
        }
        prompt_len = Some(ids.len() - before);
    }
    if !null {
        with_tokens!(b.ids.values, v => ids.extend(v[b.ids.offsets.range(i)].iter().map(|&t| t.wide())));
    }
    let mask = b.mask.map(|m| m.values.row(m.offsets.range(i)).to_u8());
    SampleData {
        row,
        local_row: local,
        source,
        ids,
        prompt_len,
        mask,
        sample_id: b.sample_ids.and_then(|s| s[i].clone()),
        category: b
            .categories
            .and_then(|c| c[i].clone())
            .unwrap_or_else(|| default.to_string()),
        finding: b.findings.map(|f| f[i]).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Int32Array, ListArray, RecordBatch, StringArray};
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::Field;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use proptest::prelude::*;

    use super::*;

    fn write(path: &Path, rows: &[(Vec<i32>, String)], rg_rows: usize) {
        let lens = rows.iter().map(|r| r.0.len());
        let values = Int32Array::from(rows.iter().flat_map(|r| r.0.clone()).collect::<Vec<_>>());
        let ids = ListArray::new(
            Arc::new(Field::new("item", values.data_type().clone(), true)),
            OffsetBuffer::from_lengths(lens),
            Arc::new(values),
            None,
        );
        let sid = StringArray::from(rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>());
        let batch = RecordBatch::try_from_iter([
            ("tokens", Arc::new(ids) as ArrayRef),
            ("uid", Arc::new(sid) as ArrayRef),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rg_rows))
            .build();
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    fn renamed() -> ColumnNames {
        ColumnNames {
            input_ids: Some("tokens".into()),
            sample_id: Some("uid".into()),
            ..ColumnNames::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Any range of global rows reads back exactly what was written, across row groups and files, with
        /// renamed columns; `find` returns the global row of an id.
        #[test]
        fn ranges_and_ids_read_back(
            a in prop::collection::vec(prop::collection::vec(0i32..1000, 0..20), 1..40),
            b in prop::collection::vec(prop::collection::vec(0i32..1000, 0..20), 1..40),
            rg in 1usize..9,
            picks in prop::collection::vec((0usize..80, 0usize..6), 1..6),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let rows_a: Vec<_> = a.into_iter().enumerate().map(|(i, v)| (v, format!("a{i}"))).collect();
            let rows_b: Vec<_> = b.into_iter().enumerate().map(|(i, v)| (v, format!("b{i}"))).collect();
            write(&dir.path().join("1.parquet"), &rows_a, rg);
            write(&dir.path().join("2.parquet"), &rows_b, rg + 1);
            let all: Vec<_> = rows_a.iter().chain(&rows_b).cloned().collect();
            let corpus = Corpus::open(&[dir.path().display().to_string()], &renamed()).unwrap();
            prop_assert_eq!(corpus.len(), all.len() as u64);
            for (start, n) in picks {
                let start = start % all.len();
                let end = (start + n).min(all.len());
                let got = corpus.samples(start as u64, end as u64).unwrap();
                prop_assert_eq!(got.len(), end - start);
                for (k, s) in got.iter().enumerate() {
                    let (ids, sid) = &all[start + k];
                    prop_assert_eq!(s.row, (start + k) as u64);
                    prop_assert_eq!(&s.ids, &ids.iter().map(|&t| t.wide()).collect::<Vec<_>>());
                    prop_assert_eq!(s.sample_id.as_ref(), Some(&SampleId::from(sid.as_str())));
                    prop_assert_eq!(corpus.find(&SampleId::from(sid.as_str())).unwrap(), Some((start + k) as u64));
                }
            }
            prop_assert_eq!(corpus.find(&SampleId::from("nope")).unwrap(), None);
            prop_assert!(corpus.sample(all.len() as u64).is_err());
        }
    }
}
