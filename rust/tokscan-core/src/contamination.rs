//! Benchmark contamination: the token n-grams of evaluation items (HumanEval, MBPP, GSM8K, ...) and the samples
//! that share them.
//!
//! A benchmark file is JSONL (one JSON object per line) or Parquet (one row per item). Each item's text fields
//! (every string, nested ones included) are tokenized once with the scan's tokenizer; its fields of integer
//! lists are token ids already. The item is named by its `task_id`, `id`, `question_id`, `problem_id`, `idx` or
//! `name` field, else by its line (row) number. Every `n`-gram of every field (13 by default, the choice of
//! GPT-3's contamination study) goes into one index; a sample's prompt and completion are each looked up
//! window by window, and a hash hit is confirmed by comparing the `n` tokens, so a match is exact.
//!
//! The index is built once per process (on Ray, once per task) and costs ~24 bytes per distinct n-gram.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::flagged::Hit;
use crate::token::TokenId;

/// The default n-gram length, in tokens.
pub const DEFAULT_N: usize = 13;

/// Fields that name an item rather than hold its text.
const NAME_FIELDS: &[&str] = &["task_id", "id", "question_id", "problem_id", "idx", "name"];

/// One benchmark item as read: its name, text fields and token-id fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub texts: Vec<String>,
    pub ids: Vec<Vec<u32>>,
}

/// What the report says of one benchmark file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchmarkInfo {
    pub path: String,
    pub items: u64,
    /// Distinct n-grams the file contributed.
    pub ngrams: u64,
}

/// What a scan looks for (`--contamination FILE...`, `--contamination-n`, `--contamination-share`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spec {
    pub files: Vec<PathBuf>,
    /// n-gram length; 0 means [`DEFAULT_N`].
    pub n: usize,
    /// Share of a part's windows that must match; 0 means any one.
    pub min_share: f64,
    /// The tokenizer directory text fields are tokenized with.
    pub tokenizer: Option<PathBuf>,
}

impl Spec {
    /// Builds the index (each process of a cluster scan builds its own from the same files).
    pub fn build(&self) -> Result<Contamination> {
        let n = if self.n == 0 { DEFAULT_N } else { self.n };
        match &self.tokenizer {
            #[cfg(feature = "prompt")]
            Some(dir) => {
                let f = crate::prompt::text_encoder(dir)?;
                Contamination::build(&self.files, n, self.min_share, Some(&f))
            }
            _ => Contamination::build(&self.files, n, self.min_share, None),
        }
    }
}

/// What the report's `contamination` section is made from; it travels in the partial summaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Benchmarks {
    pub n: u32,
    pub min_share: f64,
    pub files: Vec<BenchmarkInfo>,
}

impl Eq for Benchmarks {}

/// The report's `contamination` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContaminationReport {
    pub n: u32,
    pub min_share: f64,
    pub files: Vec<BenchmarkInfo>,
    /// Flagged samples.
    pub samples: u64,
    /// file → item → samples that matched it.
    pub items: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
}

impl ContaminationReport {
    pub fn of(b: Benchmarks, flagged: &[crate::flagged::FlaggedSample]) -> Self {
        let mut items: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> =
            Default::default();
        let mut samples = 0;
        for h in flagged.iter().filter_map(|f| f.contamination.as_ref()) {
            samples += 1;
            *items
                .entry(h.file.clone())
                .or_default()
                .entry(h.item.clone())
                .or_insert(0) += 1;
        }
        ContaminationReport {
            n: b.n,
            min_share: b.min_share,
            files: b.files,
            samples,
            items,
        }
    }
}

/// Text to token ids (the scan's tokenizer).
pub type Encode<'a> = &'a (dyn Fn(&str) -> Result<Vec<u32>> + Sync);

/// The n-gram index of one or more benchmark files.
#[derive(Debug, Default)]
pub struct Contamination {
    n: usize,
    /// A part is flagged when this share of its windows match (0: any one).
    min_share: f64,
    files: Vec<BenchmarkInfo>,
    /// `(file, name)` per item.
    items: Vec<(u32, String)>,
    /// Every field's tokens, concatenated; the index points into it.
    tokens: Vec<u32>,
    /// n-gram hash → (offset into `tokens`, item).
    index: HashMap<u64, (u32, u32), xxhash_rust::xxh3::Xxh3DefaultBuilder>,
}

/// An n-gram's hash: [`crate::neardup::ngram_hashes`] of the n-gram alone.
fn ngram_hash(ids: &[u32]) -> u64 {
    crate::neardup::ngram_hashes(ids, ids.len())
        .next()
        .unwrap_or(0)
}

impl Contamination {
    /// The index of `files` (JSONL or Parquet, by extension), with text fields tokenized by `encode`.
    pub fn build(
        files: &[PathBuf],
        n: usize,
        min_share: f64,
        encode: Option<Encode<'_>>,
    ) -> Result<Contamination> {
        if n == 0 {
            return Err(Error::Usage("--contamination-n must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&min_share) {
            return Err(Error::Usage(
                "--contamination-share must be between 0 and 1".into(),
            ));
        }
        let mut c = Contamination {
            n,
            min_share,
            ..Default::default()
        };
        for path in files {
            let items = read_items(path)?;
            let before = c.index.len();
            let file = c.files.len() as u32;
            for item in &items {
                let index = c.items.len() as u32;
                c.items.push((file, item.name.clone()));
                let mut fields = item.ids.clone();
                for t in &item.texts {
                    match encode {
                        Some(enc) => fields.push(enc(t)?),
                        None => {
                            return Err(Error::InvalidInput {
                                path: path.clone(),
                                message: format!(
                                    "item {} has text fields: pass --tokenizer to tokenize them (or store token ids)",
                                    item.name
                                ),
                            })
                        }
                    }
                }
                for f in fields {
                    let base = c.tokens.len();
                    c.tokens.extend_from_slice(&f);
                    for (i, w) in f.windows(n).enumerate() {
                        c.index
                            .entry(ngram_hash(w))
                            .or_insert(((base + i) as u32, index));
                    }
                }
            }
            c.files.push(BenchmarkInfo {
                path: path.display().to_string(),
                items: items.len() as u64,
                ngrams: (c.index.len() - before) as u64,
            });
        }
        Ok(c)
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn files(&self) -> &[BenchmarkInfo] {
        &self.files
    }

    /// What the report needs of this index.
    pub fn describe(&self) -> Benchmarks {
        Benchmarks {
            n: self.n as u32,
            min_share: self.min_share,
            files: self.files.clone(),
        }
    }

    /// The item whose n-gram `w` (of hash `h`) is, confirmed token by token.
    fn lookup(&self, w: &[u32], h: u64) -> Option<u32> {
        let &(off, item) = self.index.get(&h)?;
        let off = off as usize;
        (self.tokens[off..off + self.n] == *w).then_some(item)
    }

    /// Matches in `ids[range]`: `(matching windows, windows, first match position, its item)`.
    fn scan_part(
        &self,
        ids: &[u32],
        range: std::ops::Range<usize>,
    ) -> (u32, u32, Option<(usize, u32)>) {
        let part = &ids[range.clone()];
        let mut hits = 0u32;
        let mut first = None;
        let windows = part.len().saturating_sub(self.n - 1);
        let hashes = crate::neardup::ngram_hashes(part, self.n);
        for (i, (w, h)) in part.windows(self.n).zip(hashes).enumerate() {
            if let Some(item) = self.lookup(w, h) {
                hits += 1;
                first.get_or_insert((range.start + i, item));
            }
        }
        (hits, windows as u32, first)
    }

    /// The sample's match, if its prompt `[0, cs)` or completion `[cs, ce)` shares enough n-grams: the
    /// position of the first matching window and what it matched.
    pub fn check<T: TokenId>(
        &self,
        tokens: &[T],
        cs: usize,
        ce: usize,
        buf: &mut Vec<u32>,
    ) -> Option<(usize, Hit)> {
        if self.index.is_empty() {
            return None;
        }
        buf.clear();
        buf.extend(tokens.iter().map(|t| t.id()));
        let (cs, ce) = (cs.min(buf.len()), ce.min(buf.len()));
        for (name, range) in [("prompt", 0..cs), ("completion", cs..ce.max(cs))] {
            let (hits, windows, first) = self.scan_part(buf, range);
            let enough = if self.min_share > 0.0 {
                windows > 0 && f64::from(hits) >= self.min_share * f64::from(windows)
            } else {
                hits > 0
            };
            if let (true, Some((pos, item))) = (enough, first) {
                let (file, item_name) = &self.items[item as usize];
                return Some((
                    pos,
                    Hit {
                        file: self.files[*file as usize].path.clone(),
                        item: item_name.clone(),
                        part: name.to_string(),
                        ngrams: hits,
                        windows,
                    },
                ));
            }
        }
        None
    }
}

/// The items of a benchmark file: JSONL (`.jsonl`, `.json`) or Parquet (`.parquet`).
pub fn read_items(path: &Path) -> Result<Vec<Item>> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".parquet") {
        return read_parquet(path);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut items = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| Error::InvalidInput {
            path: path.to_path_buf(),
            message: format!(
                "line {}: not a JSON object ({e}); a benchmark file is JSONL or Parquet",
                i + 1
            ),
        })?;
        let Value::Object(map) = v else {
            return Err(Error::InvalidInput {
                path: path.to_path_buf(),
                message: format!("line {}: not a JSON object", i + 1),
            });
        };
        let mut item = Item {
            name: format!("line {}", i + 1),
            ..Default::default()
        };
        let mut named = false;
        for (k, v) in &map {
            if !named && NAME_FIELDS.contains(&k.as_str()) {
                match v {
                    Value::String(s) => {
                        item.name = s.clone();
                        named = true;
                        continue;
                    }
                    Value::Number(n) => {
                        item.name = n.to_string();
                        named = true;
                        continue;
                    }
                    _ => {}
                }
            }
            collect(v, &mut item);
        }
        items.push(item);
    }
    Ok(items)
}

/// Strings and integer lists anywhere in `v`.
fn collect(v: &Value, item: &mut Item) {
    match v {
        Value::String(s) if !s.is_empty() => item.texts.push(s.clone()),
        Value::Array(a) if !a.is_empty() && a.iter().all(|x| x.as_u64().is_some()) => item
            .ids
            .push(a.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect()),
        Value::Array(a) => a.iter().for_each(|x| collect(x, item)),
        Value::Object(m) => m.values().for_each(|x| collect(x, item)),
        _ => {}
    }
}

fn read_parquet(path: &Path) -> Result<Vec<Item>> {
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, Int64Array};
    use arrow_schema::DataType;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let bad = |e: &dyn std::fmt::Display| Error::InvalidInput {
        path: path.to_path_buf(),
        message: format!("not a readable Parquet benchmark file: {e}"),
    };
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = crate::source::parquet::unpanicked(|| ParquetRecordBatchReaderBuilder::try_new(f))
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    let mut items = Vec::new();
    for batch in crate::source::parquet::guarded_batches(reader) {
        let batch = batch.map_err(|e| bad(&e))?;
        let base = items.len();
        items.extend((0..batch.num_rows()).map(|r| Item {
            name: format!("row {}", base + r),
            ..Default::default()
        }));
        let schema = batch.schema();
        let mut named = false;
        for (col, field) in batch.columns().iter().zip(schema.fields()) {
            let is_name = !named && NAME_FIELDS.contains(&field.name().as_str());
            let strings: Option<Vec<Option<String>>> = match field.data_type() {
                DataType::Utf8 => Some(
                    col.as_string::<i32>()
                        .iter()
                        .map(|s| s.map(str::to_string))
                        .collect(),
                ),
                DataType::LargeUtf8 => Some(
                    col.as_string::<i64>()
                        .iter()
                        .map(|s| s.map(str::to_string))
                        .collect(),
                ),
                DataType::Int32 | DataType::Int64 | DataType::UInt32 | DataType::UInt64
                    if is_name =>
                {
                    let c = arrow_cast::cast(col, &DataType::Int64).map_err(|e| bad(&e))?;
                    let c = c.as_any().downcast_ref::<Int64Array>().expect("cast");
                    Some(
                        (0..c.len())
                            .map(|i| c.is_valid(i).then(|| c.value(i).to_string()))
                            .collect(),
                    )
                }
                _ => None,
            };
            if let Some(strings) = strings {
                for (r, s) in strings.into_iter().enumerate() {
                    if let Some(s) = s.filter(|s| !s.is_empty()) {
                        if is_name {
                            items[base + r].name = s;
                        } else {
                            items[base + r].texts.push(s);
                        }
                    }
                }
                named |= is_name;
                continue;
            }
            if let DataType::List(_) | DataType::LargeList(_) = field.data_type() {
                let list_type = DataType::List(std::sync::Arc::new(arrow_schema::Field::new(
                    "item",
                    DataType::Int64,
                    true,
                )));
                let Ok(c) = arrow_cast::cast(col, &list_type) else {
                    continue;
                };
                let l = c.as_list::<i32>();
                for r in 0..l.len() {
                    if l.is_valid(r) {
                        let v = l.value(r);
                        let v = v.as_any().downcast_ref::<Int64Array>().expect("cast");
                        items[base + r]
                            .ids
                            .push(v.iter().map(|x| x.unwrap_or(0) as u32).collect());
                    }
                }
            }
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_shared_ngram_is_found_with_its_item_and_an_unrelated_sample_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "b.jsonl",
            "{\"task_id\": \"T/0\", \"ids\": [1,2,3,4,5,6]}\n{\"task_id\": \"T/1\", \"ids\": [10,11,12,13]}\n",
        );
        let c = Contamination::build(&[p], 4, 0.0, None).unwrap();
        let mut buf = Vec::new();
        // prompt [0, 3), completion [3, 9): the completion holds 11..13 and more.
        let seq: Vec<u32> = vec![7, 8, 9, 10, 11, 12, 13, 99, 98];
        let (pos, hit) = c.check(&seq, 3, 9, &mut buf).unwrap();
        assert_eq!(
            (pos, hit.item.as_str(), hit.part.as_str()),
            (3, "T/1", "completion")
        );
        assert_eq!((hit.ngrams, hit.windows), (1, 3));
        assert!(c.check(&[1u32, 2, 3, 9, 4, 5, 6], 7, 7, &mut buf).is_none());
        let (pos, hit) = c.check(&[0u32, 2, 3, 4, 5, 0], 6, 6, &mut buf).unwrap();
        assert_eq!(
            (pos, hit.item.as_str(), hit.part.as_str()),
            (1, "T/0", "prompt")
        );
        // A share: the prompt's one matching window of three is below 1/2.
        let strict = Contamination::build(&[dir.path().join("b.jsonl")], 4, 0.5, None).unwrap();
        assert!(strict
            .check(&[0u32, 2, 3, 4, 5, 0], 6, 6, &mut buf)
            .is_none());
    }

    #[test]
    fn text_without_a_tokenizer_and_a_bad_line_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "t.jsonl", "{\"prompt\": \"def f(x):\"}\n");
        let e = Contamination::build(std::slice::from_ref(&p), 13, 0.0, None).unwrap_err();
        assert!(e.to_string().contains("t.jsonl") && e.to_string().contains("--tokenizer"));
        let q = write(dir.path(), "bad.jsonl", "{\"a\": 1}\nnot json\n");
        let e = Contamination::build(&[q], 13, 0.0, None).unwrap_err();
        assert!(e.to_string().contains("bad.jsonl") && e.to_string().contains("line 2"));
    }
}
