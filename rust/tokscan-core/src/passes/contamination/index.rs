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
//! A match must mean the benchmark, not boilerplate both share (`[1, 2, 3, 4, 5]`, a licence line, a common
//! signature): an n-gram found in [`COMMON_ITEMS`] or more items is not counted, and a sample is flagged only
//! when it holds at least [`MIN_MATCHED`] distinct n-grams of one field of an item and at least
//! [`ITEM_SHARE`] of that field's n-grams (a benchmark prompt pasted into a user turn holds all of them).
//! Benchmark files may be compressed (`.gz`, `.zst`) as they are distributed (`HumanEval.jsonl.gz`).
//!
//! The index is built once per process (on Ray, once per task) and costs ~24 bytes per distinct n-gram.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::token::TokenId;

/// A sample's match: the first benchmark item it shares n-grams with, and how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    /// The benchmark file.
    pub file: String,
    /// The item's name.
    pub item: String,
    /// `prompt` or `completion`: the part of the sample the match is in.
    pub part: String,
    /// The part's windows that are a benchmark n-gram, and its windows.
    pub ngrams: u32,
    pub windows: u32,
    /// The distinct n-grams of the item's field the part holds most of, and that field's n-grams.
    #[serde(default)]
    pub item_matched: u32,
    #[serde(default)]
    pub item_ngrams: u32,
    /// The sample's tokens `[start, end)` from its first to its last n-gram of that field (what `--decode`
    /// and `show` print).
    #[serde(default)]
    pub span: [u32; 2],
}

/// The default n-gram length, in tokens.
pub const DEFAULT_N: usize = 13;

/// An n-gram shared by this many benchmark items is boilerplate, not the benchmark: it is not counted.
pub const COMMON_ITEMS: u16 = 3;
/// Distinct n-grams of one item field a part must hold to be flagged.
pub const MIN_MATCHED: u32 = 8;
/// Share of the item field's n-grams a part must hold to be flagged.
pub const ITEM_SHARE: f64 = 0.5;

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
    pub fn build(&self) -> Result<Index> {
        let n = if self.n == 0 { DEFAULT_N } else { self.n };
        match &self.tokenizer {
            #[cfg(feature = "prompt")]
            Some(dir) => {
                let f = crate::prompt::text_encoder(dir)?;
                Index::build(&self.files, n, self.min_share, Some(&f))
            }
            _ => Index::build(&self.files, n, self.min_share, None),
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

/// Text to token ids (the scan's tokenizer).
pub type Encode<'a> = &'a (dyn Fn(&str) -> Result<Vec<u32>> + Sync);

/// The n-gram index of one or more benchmark files.
#[derive(Debug, Default)]
pub struct Index {
    n: usize,
    /// A part is flagged when this share of its windows match (0: any one).
    min_share: f64,
    files: Vec<BenchmarkInfo>,
    /// `(file, name)` per item.
    items: Vec<(u32, String)>,
    /// `(item, distinct n-grams)` per field of every item.
    fields: Vec<(u32, u32)>,
    /// Every field's tokens, concatenated; the index points into it.
    tokens: Vec<u32>,
    /// n-gram hash → where it first is.
    index: HashMap<u64, Gram, xxhash_rust::xxh3::Xxh3DefaultBuilder>,
}

/// One n-gram of the index: its first occurrence (offset into `tokens`, field), how many distinct items hold
/// it, and the last item counted.
#[derive(Debug, Clone, Copy)]
struct Gram {
    off: u32,
    field: u32,
    items: u16,
    last_item: u32,
}

/// An n-gram's hash: [`crate::token::ngram_hashes`] of the n-gram alone.
fn ngram_hash(ids: &[u32]) -> u64 {
    crate::token::ngram_hashes(ids, ids.len())
        .next()
        .unwrap_or(0)
}

impl Index {
    /// The index of `files` (JSONL or Parquet, by extension), with text fields tokenized by `encode`.
    pub fn build(
        files: &[PathBuf],
        n: usize,
        min_share: f64,
        encode: Option<Encode<'_>>,
    ) -> Result<Index> {
        if n == 0 {
            return Err(Error::Usage("--contamination-n must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&min_share) {
            return Err(Error::Usage(
                "--contamination-share must be between 0 and 1".into(),
            ));
        }
        let mut c = Index {
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
                    let field = c.fields.len() as u32;
                    c.tokens.extend_from_slice(&f);
                    for (i, w) in f.windows(n).enumerate() {
                        match c.index.entry(ngram_hash(w)) {
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(Gram {
                                    off: (base + i) as u32,
                                    field,
                                    items: 1,
                                    last_item: index,
                                });
                            }
                            std::collections::hash_map::Entry::Occupied(mut o) => {
                                // Held by another item too: one more item shares it, however often it
                                // holds it (a hit counts for the field that holds it first).
                                let g = o.get_mut();
                                if g.last_item != index {
                                    g.items = g.items.saturating_add(1);
                                    g.last_item = index;
                                }
                            }
                        }
                    }
                    c.fields.push((index, 0));
                }
            }
            c.files.push(BenchmarkInfo {
                path: path.display().to_string(),
                items: items.len() as u64,
                ngrams: (c.index.len() - before) as u64,
            });
        }
        // A field's share is of the n-grams it holds first that are not boilerplate (the others never match).
        for g in c.index.values() {
            if g.items < COMMON_ITEMS {
                c.fields[g.field as usize].1 += 1;
            }
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

    /// The n-gram `w` (of hash `h`) when the index holds it (confirmed token by token) and it is not
    /// boilerplate ([`COMMON_ITEMS`]).
    fn lookup(&self, w: &[u32], h: u64) -> Option<Gram> {
        let g = *self.index.get(&h)?;
        let off = g.off as usize;
        (g.items < COMMON_ITEMS && self.tokens[off..off + self.n] == *w).then_some(g)
    }

    /// Matches in `ids[range]`: the matching windows, the windows, and of the item fields it holds enough of
    /// ([`MIN_MATCHED`], [`ITEM_SHARE`]) the one it holds most n-grams of: `(field, distinct n-grams of it
    /// held, first and last matching position)`.
    fn scan_part(&self, ids: &[u32], range: std::ops::Range<usize>) -> PartMatch {
        let part = &ids[range.clone()];
        let windows = part.len().saturating_sub(self.n - 1) as u32;
        let hashes = crate::token::ngram_hashes(part, self.n);
        let mut hits: Vec<(u32, u32, usize)> = Vec::new(); // (field, offset, position)
        for (i, (w, h)) in part.windows(self.n).zip(hashes).enumerate() {
            if let Some(g) = self.lookup(w, h) {
                hits.push((g.field, g.off, range.start + i));
            }
        }
        let matched = hits.len() as u32;
        hits.sort_unstable();
        let mut best: Option<(u32, u32, usize, usize)> = None; // (field, distinct, first, last)
        let mut k = 0;
        while k < hits.len() {
            let field = hits[k].0;
            let (mut distinct, mut first, mut last, mut prev) = (0u32, usize::MAX, 0, None);
            while k < hits.len() && hits[k].0 == field {
                if prev != Some(hits[k].1) {
                    distinct += 1;
                    prev = Some(hits[k].1);
                }
                first = first.min(hits[k].2);
                last = last.max(hits[k].2);
                k += 1;
            }
            // A field counts when the part holds enough of it; of those, the one it holds most n-grams of.
            let grams = f64::from(self.fields[field as usize].1);
            let holds = distinct >= MIN_MATCHED && f64::from(distinct) >= ITEM_SHARE * grams;
            if holds && best.is_none_or(|b| distinct > b.1) {
                best = Some((field, distinct, first, last));
            }
        }
        PartMatch {
            matched,
            windows,
            best,
        }
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
            let m = self.scan_part(buf, range);
            let Some((field, distinct, first, last)) = m.best else {
                continue;
            };
            let (item, field_grams) = self.fields[field as usize];
            let enough = self.min_share == 0.0
                || (m.windows > 0 && f64::from(m.matched) >= self.min_share * f64::from(m.windows));
            if enough {
                let (file, item_name) = &self.items[item as usize];
                return Some((
                    first,
                    Hit {
                        file: self.files[*file as usize].path.clone(),
                        item: item_name.clone(),
                        part: name.to_string(),
                        ngrams: m.matched,
                        windows: m.windows,
                        item_ngrams: field_grams,
                        item_matched: distinct,
                        span: [first as u32, (last + self.n) as u32],
                    },
                ));
            }
        }
        None
    }
}

/// What one part of a sample holds of the index ([`Index::scan_part`]).
struct PartMatch {
    matched: u32,
    windows: u32,
    best: Option<(u32, u32, usize, usize)>,
}

/// The text of a JSONL benchmark file, decompressed when its name says `.gz` or `.zst` (as `HumanEval.jsonl.gz`
/// is distributed) as a compressed JSONL shard is, within the same inflation cap.
fn benchmark_text(path: &Path, name: &str) -> Result<String> {
    let codec = if name.ends_with(".gz") {
        "gz"
    } else if name.ends_with(".zst") || name.ends_with(".zstd") {
        "zst"
    } else {
        return crate::files::read_to_string(path);
    };
    let (f, _) = crate::files::open(path)?;
    let bytes = crate::source::jsonl::inflate_file(path, &f, codec, crate::files::max_bytes()?)?;
    std::str::from_utf8(&bytes)
        .map(str::to_string)
        .map_err(|e| {
            Error::invalid(
                path,
                format!(
                    "not UTF-8 text once decompressed (at byte {})",
                    e.valid_up_to()
                ),
            )
        })
}

/// The items of a benchmark file: JSONL (`.jsonl`, `.json`, optionally `.gz` / `.zst`) or Parquet (`.parquet`).
pub fn read_items(path: &Path) -> Result<Vec<Item>> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".parquet") {
        return read_parquet(path);
    }
    let text = benchmark_text(path, &name)?;
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
    let (f, _) = crate::files::open(path)?;
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
            if nested_strings(field.data_type()) {
                // Strings inside structs and lists are the item's text, as nested JSON strings are.
                for (r, item) in items[base..].iter_mut().enumerate() {
                    strings_at(col.as_ref(), r, &mut item.texts);
                }
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

/// Does a column of this type hold strings below its top level (a struct or list of them)?
fn nested_strings(t: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType;
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Struct(fields) => fields.iter().any(|f| nested_strings(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            nested_strings(f.data_type())
        }
        _ => false,
    }
}

/// The non-empty strings of row `r` of `a`, however deep in structs and lists.
fn strings_at(a: &dyn arrow_array::Array, r: usize, out: &mut Vec<String>) {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    if r >= a.len() || a.is_null(r) {
        return;
    }
    let mut push = |s: &str| {
        if !s.is_empty() {
            out.push(s.to_string());
        }
    };
    match a.data_type() {
        DataType::Utf8 => push(a.as_string::<i32>().value(r)),
        DataType::LargeUtf8 => push(a.as_string::<i64>().value(r)),
        DataType::Utf8View => push(a.as_string_view().value(r)),
        DataType::Struct(_) => {
            for c in a.as_struct().columns() {
                strings_at(c.as_ref(), r, out);
            }
        }
        DataType::List(_) => {
            let v = a.as_list::<i32>().value(r);
            (0..v.len()).for_each(|i| strings_at(v.as_ref(), i, out));
        }
        DataType::LargeList(_) => {
            let v = a.as_list::<i64>().value(r);
            (0..v.len()).for_each(|i| strings_at(v.as_ref(), i, out));
        }
        DataType::FixedSizeList(_, _) => {
            let v = a.as_fixed_size_list().value(r);
            (0..v.len()).for_each(|i| strings_at(v.as_ref(), i, out));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn ids_line(name: &str, ids: impl Iterator<Item = u32>) -> String {
        let ids: Vec<String> = ids.map(|i| i.to_string()).collect();
        format!(
            "{{\"task_id\": \"{name}\", \"ids\": [{}]}}\n",
            ids.join(",")
        )
    }

    #[test]
    fn a_benchmark_item_inside_a_sample_is_found_with_its_item_and_span() {
        let dir = tempfile::tempdir().unwrap();
        let text = ids_line("T/0", 1..31) + &ids_line("T/1", 200..240);
        let p = write(dir.path(), "b.jsonl", &text);
        let c = Index::build(&[p], 4, 0.0, None).unwrap();
        let mut buf = Vec::new();
        // prompt [0, 3), completion [3, ...): the completion holds all of T/1's field.
        let seq: Vec<u32> = [7, 8, 9]
            .into_iter()
            .chain(200..240)
            .chain([99, 98])
            .collect();
        let (pos, hit) = c.check(&seq, 3, seq.len(), &mut buf).unwrap();
        assert_eq!(
            (pos, hit.item.as_str(), hit.part.as_str()),
            (3, "T/1", "completion")
        );
        assert_eq!((hit.item_matched, hit.item_ngrams), (37, 37));
        assert_eq!(hit.span, [3, 43]);
        // The prompt holds T/0 whole.
        let seq: Vec<u32> = (1..31).chain([5000]).collect();
        let (pos, hit) = c.check(&seq, 30, 31, &mut buf).unwrap();
        assert_eq!(
            (pos, hit.item.as_str(), hit.part.as_str()),
            (0, "T/0", "prompt")
        );
        // A few n-grams (fewer than MIN_MATCHED), or under half of the field, are not the benchmark.
        let few: Vec<u32> = (1..9).collect(); // 5 windows
        assert!(c.check(&few, 8, 8, &mut buf).is_none());
        let third: Vec<u32> = (1..14).collect(); // 10 of 27 windows
        assert!(c.check(&third, 13, 13, &mut buf).is_none());
        // A share of the part's windows on top (`--contamination-share`): 37 of 100 windows is below 1/2.
        let strict = Index::build(&[dir.path().join("b.jsonl")], 4, 0.5, None).unwrap();
        let long: Vec<u32> = (200..240).chain(1000..1063).collect();
        assert!(strict.check(&long, 0, long.len(), &mut buf).is_none());
        assert!(c.check(&long, 0, long.len(), &mut buf).is_some());
    }

    #[test]
    fn boilerplate_many_items_share_is_not_contamination() {
        let dir = tempfile::tempdir().unwrap();
        // Three items end with the same 12-token list (`[1, 2, 3, 4, 5]`-like boilerplate).
        let common = || 500..512u32;
        let text = ids_line("A", (10..20).chain(common()))
            + &ids_line("B", (30..40).chain(common()))
            + &ids_line("C", (50..52).chain(common()));
        let p = write(dir.path(), "b.jsonl", &text);
        let c = Index::build(&[p], 4, 0.0, None).unwrap();
        let mut buf = Vec::new();
        let seq: Vec<u32> = common().chain(common()).collect();
        assert!(c.check(&seq, 0, seq.len(), &mut buf).is_none());
        // C's own tokens and the boilerplate: C's field has too few n-grams of its own to be matched.
        let seq: Vec<u32> = (50..52).chain(common()).collect();
        assert!(c.check(&seq, 0, seq.len(), &mut buf).is_none());
        // A's unique part with the list is A.
        let seq: Vec<u32> = (10..20).chain(common()).collect();
        let (_, hit) = c.check(&seq, 0, seq.len(), &mut buf).unwrap();
        assert_eq!(hit.item, "A");
        // Items are counted, not occurrences: B holding A's start twice (in two fields) is two items, not three.
        let text = ids_line("A", 1..31)
            + &format!(
                "{{\"task_id\": \"B\", \"x\": [{0}], \"y\": [{0}]}}\n",
                (1..21)
                    .map(|i: u32| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
        let p = write(dir.path(), "twice.jsonl", &text);
        let c = Index::build(&[p], 4, 0.0, None).unwrap();
        let seq: Vec<u32> = (1..31).collect();
        let (_, hit) = c.check(&seq, 0, seq.len(), &mut buf).unwrap();
        assert_eq!(
            (hit.item.as_str(), hit.item_matched, hit.item_ngrams),
            ("A", 27, 27)
        );
    }

    #[test]
    fn benchmarks_as_they_are_distributed_compressed_and_nested() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let text = ids_line("T/0", 1..31);
        let gz = dir.path().join("HumanEval.jsonl.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        let zst = dir.path().join("b.jsonl.zst");
        std::fs::write(&zst, zstd::encode_all(text.as_bytes(), 0).unwrap()).unwrap();
        for p in [gz, zst] {
            let items = read_items(&p).unwrap();
            assert_eq!(items.len(), 1, "{}", p.display());
            assert_eq!(items[0].name, "T/0");
            assert_eq!(items[0].ids, vec![(1..31).collect::<Vec<u32>>()]);
        }
        let bad = write(dir.path(), "x.jsonl.gz", "not gzip");
        let e = read_items(&bad).unwrap_err().to_string();
        assert!(e.contains("x.jsonl.gz") && e.contains("gz"), "{e}");
        // Strings nested in structs and lists of a Parquet benchmark are its text, as in JSONL.
        let pq = dir.path().join("nested.parquet");
        nested_parquet(&pq);
        let items = read_items(&pq).unwrap();
        assert_eq!(items[0].name, "Q/0");
        let mut texts = items[0].texts.clone();
        texts.sort();
        assert_eq!(
            texts,
            ["def f(x):", "question text", "test one", "test two"]
        );
    }

    /// `{task_id, prompt: {question, code}, tests: [str]}`, one row.
    fn nested_parquet(path: &Path) {
        use arrow_array::builder::{ListBuilder, StringBuilder};
        use arrow_array::{ArrayRef, RecordBatch, StringArray, StructArray};
        use arrow_schema::{DataType, Field};
        use std::sync::Arc;
        let prompt = StructArray::from(vec![
            (
                Arc::new(Field::new("question", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec!["question text"])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("code", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec!["def f(x):"])) as ArrayRef,
            ),
        ]);
        let mut tests = ListBuilder::new(StringBuilder::new());
        tests.values().append_value("test one");
        tests.values().append_value("test two");
        tests.append(true);
        let batch = RecordBatch::try_from_iter(vec![
            (
                "task_id",
                Arc::new(StringArray::from(vec!["Q/0"])) as ArrayRef,
            ),
            ("prompt", Arc::new(prompt) as ArrayRef),
            ("tests", Arc::new(tests.finish()) as ArrayRef),
        ])
        .unwrap();
        let f = std::fs::File::create(path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    #[test]
    fn text_without_a_tokenizer_and_a_bad_line_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "t.jsonl", "{\"prompt\": \"def f(x):\"}\n");
        let e = Index::build(std::slice::from_ref(&p), 13, 0.0, None).unwrap_err();
        assert!(e.to_string().contains("t.jsonl") && e.to_string().contains("--tokenizer"));
        let q = write(dir.path(), "bad.jsonl", "{\"a\": 1}\nnot json\n");
        let e = Index::build(&[q], 13, 0.0, None).unwrap_err();
        assert!(e.to_string().contains("bad.jsonl") && e.to_string().contains("line 2"));
    }
}
