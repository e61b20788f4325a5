//! JSONL: one sample per line (plain, `.gz` or `.zst`), token ids in JSON arrays. Fields, by default:
//! `input_ids`, or a prompt (`prompt_ids`, vLLM `prompt_token_ids`) plus a completion (`output_ids` (SGLang),
//! `token_ids` or `outputs[0].token_ids` (vLLM)); optional `loss_mask`, `sample_id` / `id`, `category`. The
//! column overrides name other fields.
//!
//! The file is read once at open (a plain file is memory-mapped, a compressed one decompressed into memory),
//! split at line boundaries and parsed in parallel (serde_json, borrowing the line: only the wanted fields
//! are decoded). A line that is not an object with integer token ids is a sample flagged `malformed_line`
//! (position: its line number), not the end of the scan; a file where no line is such an object is an input
//! error. Generator metadata, when present, is cross-checked: SGLang `meta_info.finish_reason.type`,
//! `meta_info.prompt_tokens`, `meta_info.completion_tokens`; vLLM `finish_reason` / `outputs[0].finish_reason`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::value::RawValue;

use super::{
    split_units, Batch, Claim, ColumnNames, Finding, Finish, Format, FormatSpec, Offsets, Ragged,
    RaggedMask, Source, Tokens, UnitSpan, WriteStats,
};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;
use crate::token::MaskSlice;

/// How the file is compressed, from its name.
fn codec(path: &Path) -> &'static str {
    let n = path.to_string_lossy();
    if n.ends_with(".gz") {
        "gz"
    } else if n.ends_with(".zst") || n.ends_with(".zstd") {
        "zst"
    } else {
        ""
    }
}

/// JSONL in the format registry: by its name (`.jsonl`, `.ndjson`, optionally `.gz` / `.zst`); in a folder, a
/// file whose first record is a prompt (`messages`, no token ids) is a prompts file, not a shard.
pub static FORMAT: FormatSpec = FormatSpec {
    name: "jsonl",
    shown_as: "JSONL *.jsonl[.gz|.zst]",
    sniff: |_, _| false,
    named: |name| is_jsonl_name(Path::new(name)),
    input_path: super::same_path,
    found: |path| {
        Ok(if !is_jsonl_name(path) {
            Claim::No
        } else if is_prompts_file(path)? {
            Claim::Prompts
        } else {
            Claim::Input(path.to_path_buf())
        })
    },
    folder: super::no_folder,
    folder_files: &[],
    folder_skip: "",
    prefix: super::no_prefix,
    splits_across_tasks: false,
    companions: |_| Vec::new(),
    open: |path, columns| Ok(Box::new(JsonlShard::open(path, columns)?)),
};

/// Is this a JSONL file name (`.jsonl`, `.ndjson`, optionally `.gz` / `.zst`)?
pub fn is_jsonl_name(path: &Path) -> bool {
    let n = path.to_string_lossy();
    let n = n
        .strip_suffix(".gz")
        .or_else(|| n.strip_suffix(".zst"))
        .or_else(|| n.strip_suffix(".zstd"))
        .unwrap_or(&n);
    n.ends_with(".jsonl") || n.ends_with(".ndjson")
}

/// Longest first line read to decide whether a JSONL file is a prompts file.
const SNIFF_LINE_BYTES: u64 = 64 << 20;

/// Is this JSONL file a prompts file rather than a shard: does its first record carry a `messages` list and no
/// token ids (no top-level array of integers, no `outputs[].token_ids`)? A file whose first line is not a JSON
/// object is not a prompts file (its reader says what is wrong with it).
pub fn is_prompts_file(path: &Path) -> Result<bool> {
    use std::io::BufRead;
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader: Box<dyn Read> = match codec(path) {
        "gz" => Box::new(flate2::read::MultiGzDecoder::new(file)),
        "zst" => Box::new(
            zstd::stream::read::Decoder::new(file)
                .map_err(|e| Error::invalid(path, format!("not a readable zstd file: {e}")))?,
        ),
        _ => Box::new(file),
    };
    let mut lines = std::io::BufReader::new(reader.take(SNIFF_LINE_BYTES));
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(false),
            Ok(_) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(_) => break,
            // A file that cannot be decompressed is not a prompts file; its reader reports it.
            Err(_) => return Ok(false),
        }
    }
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(&line);
    let Ok(obj) = serde_json::from_slice::<HashMap<String, &RawValue>>(line) else {
        return Ok(false);
    };
    let is_ids =
        |v: &RawValue| serde_json::from_str::<Vec<i64>>(v.get()).is_ok_and(|a| !a.is_empty());
    let has_messages = obj
        .get("messages")
        .is_some_and(|m| m.get().trim_start().starts_with('['));
    let has_ids = obj.iter().any(|(k, v)| {
        is_ids(v)
            || (k == "outputs"
                && serde_json::from_str::<Vec<HashMap<String, &RawValue>>>(v.get())
                    .is_ok_and(|o| o.iter().any(|x| x.contains_key("token_ids"))))
    });
    Ok(has_messages && !has_ids)
}

/// One parsed line.
#[derive(Debug, Default)]
struct Line {
    prompt: Vec<i64>,
    ids: Vec<i64>,
    mask: Option<Vec<u8>>,
    sample_id: Option<SampleId>,
    category: Option<String>,
    finding: Finding,
    /// Which layout the line is in: `Some(true)` prompt + completion apart, `Some(false)` one `input_ids`
    /// sequence, `None` a completion alone (fits either).
    split: Option<bool>,
}

struct Fields<'n> {
    /// Every key whose value is a token array.
    tokens: Vec<&'n str>,
    input_ids: Option<&'n str>,
    prompt: Vec<&'n str>,
    output: Vec<&'n str>,
    mask: &'n str,
    id: Vec<&'n str>,
    category: &'n str,
}

fn fields(names: &ColumnNames) -> Fields<'_> {
    let mut f = Fields {
        tokens: Vec::new(),
        input_ids: Some(names.input_ids.as_deref().unwrap_or("input_ids")),
        prompt: names
            .prompt_ids
            .as_deref()
            .map_or_else(|| vec!["prompt_ids", "prompt_token_ids"], |n| vec![n]),
        output: names
            .output_ids
            .as_deref()
            .map_or_else(|| vec!["output_ids", "token_ids"], |n| vec![n]),
        mask: names.loss_mask.as_deref().unwrap_or("loss_mask"),
        id: names
            .sample_id
            .as_deref()
            .map_or_else(|| vec!["sample_id", "id"], |n| vec![n]),
        category: names.category.as_deref().unwrap_or("category"),
    };
    f.tokens = f
        .input_ids
        .into_iter()
        .chain(f.prompt.iter().copied())
        .chain(f.output.iter().copied())
        .collect();
    f
}

type Obj<'a> = HashMap<String, &'a RawValue>;

fn label(v: &RawValue) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A sample id: an integer stays an integer; any other value is read as a [`label`].
fn id_of(v: &RawValue) -> Option<SampleId> {
    match serde_json::from_str::<i64>(v.get()) {
        Ok(n) => Some(SampleId::Int(n)),
        Err(_) => label(v).map(SampleId::from),
    }
}

fn ints(v: &RawValue, what: &str) -> std::result::Result<Vec<i64>, String> {
    serde_json::from_str::<Vec<i64>>(v.get())
        .map_err(|e| format!("{what} is not a list of integer token ids ({e})"))
}

/// One pass over a line: the token arrays (the keys in `tokens`) are parsed straight into `Vec<i64>`, every
/// other field is kept as a borrowed `RawValue` (decoded only when wanted), so the big arrays are read once.
struct LineVisitor<'f> {
    tokens: &'f [&'f str],
}

type Parsed<'a> = (Obj<'a>, HashMap<String, Vec<i64>>);

impl<'de> serde::de::Visitor<'de> for LineVisitor<'_> {
    type Value = Parsed<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Parsed<'de>, A::Error> {
        use serde::de::Error as _;
        let (mut raw, mut ints) = (Obj::new(), HashMap::new());
        while let Some(k) = map.next_key::<String>()? {
            if self.tokens.contains(&k.as_str()) {
                let v = map.next_value::<Vec<i64>>().map_err(|e| {
                    A::Error::custom(format!("{k} is not a list of integer token ids ({e})"))
                })?;
                ints.insert(k, v);
            } else {
                let v = map.next_value::<&'de RawValue>()?;
                raw.insert(k, v);
            }
        }
        Ok((raw, ints))
    }
}

/// The UTF-8 byte-order mark, which may open a text file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Parses one line; `Err` is the problem of a malformed line.
fn parse_line(text: &str, f: &Fields<'_>) -> std::result::Result<Line, String> {
    use serde::Deserializer as _;
    let mut de = serde_json::Deserializer::from_str(text);
    let (obj, mut tokens) = de
        .deserialize_map(LineVisitor { tokens: &f.tokens })
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| {
            if !text.trim_start().starts_with('{') {
                "not a JSON object".to_string()
            } else if e.to_string().contains("integer token ids") {
                e.to_string()
            } else {
                format!("invalid JSON ({e})")
            }
        })?;
    let mut line = Line::default();
    fn first<'k>(t: &HashMap<String, Vec<i64>>, keys: &[&'k str]) -> Option<&'k str> {
        keys.iter().copied().find(|k| t.contains_key(*k))
    }
    // vLLM: outputs[0].token_ids / finish_reason.
    let outputs: Option<Obj<'_>> = obj
        .get("outputs")
        .and_then(|o| serde_json::from_str::<Vec<Obj<'_>>>(o.get()).ok())
        .and_then(|v| v.into_iter().next());
    let prompt = first(&tokens, &f.prompt);
    let output = match first(&tokens, &f.output) {
        Some(k) => Some(tokens.remove(k).expect("present")),
        None => match outputs.as_ref().and_then(|o| o.get("token_ids")) {
            Some(v) => Some(ints(v, "outputs[0].token_ids")?),
            None => None,
        },
    };
    let input = f.input_ids.filter(|k| tokens.contains_key(*k));
    match (input, prompt, output) {
        (_, Some(pk), Some(o)) => {
            line.prompt = tokens.remove(pk).expect("present");
            line.ids = o;
            line.split = Some(true);
        }
        (Some(k), _, _) => {
            line.ids = tokens.remove(k).expect("present");
            line.split = Some(false);
        }
        (None, None, Some(o)) => line.ids = o,
        _ => return Err("no token ids (input_ids, or prompt_ids + output_ids)".into()),
    }
    let prompt = prompt.map(|_| ());
    if let Some(m) = obj.get(f.mask) {
        let m = serde_json::from_str::<Vec<serde_json::Value>>(m.get())
            .map_err(|_| format!("{} is not a list", f.mask))?;
        let bits = m
            .iter()
            .map(|v| match v {
                serde_json::Value::Bool(b) => Some(u8::from(*b)),
                serde_json::Value::Number(n) => n.as_f64().map(|x| u8::from(x != 0.0)),
                _ => None,
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| format!("{} holds a value that is not a number or bool", f.mask))?;
        line.mask = Some(bits);
    }
    line.sample_id = f.id.iter().find_map(|k| obj.get(*k)).and_then(|v| id_of(v));
    line.category = obj.get(f.category).and_then(|v| label(v));
    // Generator metadata.
    let meta: Option<Obj<'_>> = obj
        .get("meta_info")
        .and_then(|m| serde_json::from_str(m.get()).ok());
    let reason = meta
        .as_ref()
        .and_then(|m| m.get("finish_reason"))
        .and_then(|r| {
            serde_json::from_str::<Obj<'_>>(r.get())
                .ok()
                .and_then(|o| o.get("type").and_then(|t| label(t)))
                .or_else(|| label(r))
        })
        .or_else(|| obj.get("finish_reason").and_then(|r| label(r)))
        .or_else(|| {
            outputs
                .as_ref()
                .and_then(|o| o.get("finish_reason"))
                .and_then(|r| label(r))
        });
    line.finding.finish = match reason.as_deref() {
        Some("length") => Finish::Length,
        Some("stop") | Some("eos") | Some("stop_str") => Finish::Stop,
        _ => Finish::Unknown,
    };
    if let Some(m) = &meta {
        let count = |k: &str| {
            m.get(k)
                .and_then(|v| serde_json::from_str::<u64>(v.get()).ok())
        };
        let (has_prompt, pl, ol) = (
            prompt.is_some(),
            line.prompt.len() as u64,
            line.ids.len() as u64,
        );
        let mut bad = false;
        if let Some(p) = count("prompt_tokens") {
            bad |= has_prompt && p != pl;
        }
        if let Some(c) = count("completion_tokens") {
            bad |= (has_prompt || input.is_none()) && c != ol;
        }
        line.finding.count_mismatch = bad;
    }
    Ok(line)
}

/// An opened JSONL file: every line parsed.
pub struct JsonlShard {
    pub path: PathBuf,
    split: bool,
    prompt_tokens: Vec<i64>,
    prompt_offsets: Vec<i64>,
    tokens: Vec<i64>,
    offsets: Vec<i64>,
    mask: Option<(Vec<u8>, Vec<i64>)>,
    sample_ids: Option<Vec<Option<SampleId>>>,
    categories: Option<Vec<Option<String>>>,
    findings: Vec<Finding>,
    units: Vec<UnitSpan>,
    layout: String,
}

/// A JSONL file's bytes: memory-mapped when plain, decompressed into memory when `.gz` / `.zst`.
pub(crate) enum Text {
    Empty,
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Text {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Text::Empty => &[],
            Text::Mapped(m) => m,
            Text::Owned(v) => v,
        }
    }
}

/// Default longest JSONL line (one sample), in bytes: 256 MiB, about 30M token ids as text.
pub const MAX_LINE_BYTES: u64 = 256 << 20;
/// Default cap on how far a compressed JSONL file may inflate: 256 MiB, or 100 × its compressed size when
/// that is more (token-id JSON compresses 3-10×; a gzip bomb of newlines inflates ~1000×).
pub const MAX_INFLATE_RATIO: u64 = 100;

/// A byte limit from the environment variable `var` (a plain integer; anything else is refused), else `default`.
fn limit(var: &str, default: u64) -> Result<u64> {
    Ok(crate::settings::bytes(var)?.unwrap_or(default))
}

/// Inflation ratio up to which a compressed file is decompressed straight into memory; past it (token ids in
/// JSON compress ~3-8x) the rest of the stream is only counted, so that a bomb is refused having held this
/// much, and a file that is merely very compressible is decompressed a second time, into a buffer of its size.
const STORE_RATIO: u64 = 16;

/// Reads a decompressed stream into memory, refusing more than the inflation cap
/// (`TOKSCAN_MAX_DECOMPRESSED_BYTES` overrides it). `open` gives the decompressed stream from its start.
fn inflate<R: Read>(
    path: &Path,
    compressed: u64,
    what: &str,
    most: u64,
    open: impl Fn() -> std::io::Result<R>,
) -> Result<Text> {
    let bad = |e: std::io::Error| Error::invalid(path, format!("not a readable {what} file: {e}"));
    let cap = limit(
        "TOKSCAN_MAX_DECOMPRESSED_BYTES",
        (256 << 20u64).max(compressed.saturating_mul(MAX_INFLATE_RATIO)),
    )?
    .min(most);
    let bomb = || {
        Error::invalid(
            path,
            format!(
                "inflates to more than {cap} bytes from {compressed} (a compression bomb?); \
                 set TOKSCAN_MAX_DECOMPRESSED_BYTES to read it"
            ),
        )
    };
    let stored = compressed.saturating_mul(STORE_RATIO).max(1 << 20).min(cap);
    let mut r = open().map_err(bad)?;
    let mut v = Vec::new();
    (&mut r)
        .take(stored.saturating_add(1))
        .read_to_end(&mut v)
        .map_err(bad)?;
    if v.len() as u64 <= stored {
        return Ok(Text::Owned(v));
    }
    // Past the store ratio: count the rest without keeping it.
    let total = v.len() as u64
        + std::io::copy(
            &mut (&mut r).take(cap.saturating_add(1) - v.len() as u64),
            &mut std::io::sink(),
        )
        .map_err(bad)?;
    if total > cap {
        return Err(bomb());
    }
    drop(v);
    let mut v = Vec::with_capacity(total as usize);
    open()
        .map_err(bad)?
        .take(cap.saturating_add(1))
        .read_to_end(&mut v)
        .map_err(bad)?;
    if v.len() as u64 > cap {
        return Err(bomb());
    }
    Ok(Text::Owned(v))
}

/// Another handle on `file`, at its start.
fn rewound(file: &File) -> std::io::Result<File> {
    use std::io::Seek;
    let mut f = file.try_clone()?;
    f.rewind()?;
    Ok(f)
}

/// `file` (opened at `path`) decompressed by `codec` (`gz` or `zst`) within the inflation cap, and at most `most`
/// bytes: how a compressed JSONL shard is read, and a benchmark file or a gzipped hidden-state dump too (which,
/// read whole, also keep within [`crate::files::max_bytes`]).
pub(crate) fn inflate_file(path: &Path, file: &File, codec: &str, most: u64) -> Result<Text> {
    let compressed = file.metadata().map_err(|e| Error::io(path, e))?.len();
    // Both passes read the file opened by the caller (from its start), never the path again.
    match codec {
        "gz" => inflate(path, compressed, "gzip", most, || {
            Ok(flate2::read::MultiGzDecoder::new(rewound(file)?))
        }),
        _ => inflate(path, compressed, "zstd", most, || {
            zstd::stream::read::Decoder::new(rewound(file)?)
        }),
    }
}

/// Reads the file's bytes (decompressing by its name's codec, within the inflation cap).
fn load(path: &Path) -> Result<Text> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(match codec(path) {
        c @ ("gz" | "zst") => inflate_file(path, &file, c, u64::MAX)?,
        _ => {
            let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
            if len == 0 {
                Text::Empty
            } else {
                // SAFETY: opened read-only and only read; inputs must not be modified while tokscan reads them.
                let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
                let _ = file.read(&mut []);
                Text::Mapped(map)
            }
        }
    })
}

/// The sample lines of a file, in order: (1-based line number, the line's bytes without its `\n`). A line
/// is split at `\n` only, and is a sample unless it holds nothing but ASCII whitespace (space, `\t`, `\n`,
/// `\x0c`, `\r`; a `\x0b` line is a sample, malformed). The reader numbers rows and the writer drops
/// lines by this one function.
fn sample_lines(bytes: &[u8]) -> Vec<(u32, std::ops::Range<usize>)> {
    let mut lines = Vec::new();
    let mut at = 0;
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        let mut range = at..at + l.len();
        at += l.len() + 1;
        // A byte-order mark opening the file (some Windows tools write one) is not part of the first line: a
        // line holding only it is blank, and a copy without that line keeps the mark where it was.
        let l = match l.strip_prefix(UTF8_BOM) {
            Some(rest) if i == 0 => {
                range.start += UTF8_BOM.len();
                rest
            }
            _ => l,
        };
        let content = l.strip_suffix(b"\r").unwrap_or(l);
        if !content.iter().all(u8::is_ascii_whitespace) {
            lines.push(((i + 1).min(u32::MAX as usize) as u32, range));
        }
    }
    lines
}

/// Writes `bytes` to `path` compressed with the codec its name says (none, `.gz`, `.zst`).
fn write_encoded(path: &Path, bytes: &[&[u8]]) -> Result<()> {
    use std::io::Write;
    let io = |e| Error::io(path, e);
    let w = super::create_new(path)?;
    let w = match codec(path) {
        "gz" => {
            let mut e = flate2::write::GzEncoder::new(w, flate2::Compression::default());
            for b in bytes {
                e.write_all(b).map_err(io)?;
            }
            e.finish().map_err(io)?
        }
        "zst" => {
            let mut e = zstd::stream::write::Encoder::new(w, 0).map_err(io)?;
            for b in bytes {
                e.write_all(b).map_err(io)?;
            }
            e.finish().map_err(io)?
        }
        _ => {
            let mut w = w;
            for b in bytes {
                w.write_all(b).map_err(io)?;
            }
            w
        }
    };
    super::finish(path, w)
}

impl JsonlShard {
    pub fn open(path: &Path, names: &ColumnNames) -> Result<Self> {
        let text = load(path)?;
        let bytes: &[u8] = &text;
        let lines: Vec<(u32, &[u8])> = sample_lines(bytes)
            .into_iter()
            .map(|(no, r)| {
                let l = &bytes[r];
                (no, l.strip_suffix(b"\r").unwrap_or(l))
            })
            .collect();
        let max_line = limit("TOKSCAN_MAX_LINE_BYTES", MAX_LINE_BYTES)?;
        if let Some((no, l)) = lines.iter().find(|(_, l)| l.len() as u64 > max_line) {
            return Err(Error::invalid(
                path,
                format!(
                    "line {no} is {} bytes, more than the {max_line}-byte limit for one sample; \
                     set TOKSCAN_MAX_LINE_BYTES to read it",
                    l.len()
                ),
            ));
        }
        let f = fields(names);
        let parsed: Vec<std::result::Result<Line, String>> = lines
            .par_iter()
            .with_min_len(256)
            .map(|(_, l)| {
                std::str::from_utf8(l)
                    .map_err(|_| "not UTF-8 text".to_string())
                    .and_then(|t| parse_line(t, &f))
            })
            .collect();
        if !parsed.iter().any(|p| p.is_ok()) {
            let why = parsed
                .first()
                .map(|p| p.as_ref().err().cloned().unwrap_or_default())
                .unwrap_or_else(|| "no lines".into());
            return Err(Error::invalid(
                path,
                format!(
                    "not JSONL with token ids: no line is a sample (line {}: {why})",
                    lines.first().map_or(1, |l| l.0)
                ),
            ));
        }
        // One layout per file: a line of the other layout would be read in this one and flag clean samples.
        let first_of = |want: bool| {
            lines
                .iter()
                .zip(&parsed)
                .find(|(_, p)| p.as_ref().is_ok_and(|l| l.split == Some(want)))
                .map(|((no, _), _)| *no)
        };
        if let (Some(a), Some(b)) = (first_of(false), first_of(true)) {
            let (first, other) = if a < b {
                ((a, "input_ids"), (b, "prompt_ids + output_ids"))
            } else {
                ((b, "prompt_ids + output_ids"), (a, "input_ids"))
            };
            return Err(Error::invalid(
                path,
                format!(
                    "mixed layouts: line {} holds {} but line {} holds {} (one layout per file)",
                    first.0, first.1, other.0, other.1
                ),
            ));
        }
        let split = parsed
            .iter()
            .flatten()
            .any(|l| l.split == Some(true) || !l.prompt.is_empty())
            || names.prompt_ids.is_some();
        let has_mask = parsed.iter().flatten().any(|l| l.mask.is_some());
        let has_ids = parsed.iter().flatten().any(|l| l.sample_id.is_some());
        let has_cat = parsed.iter().flatten().any(|l| l.category.is_some());
        let n = parsed.len();
        let mut s = JsonlShard {
            path: path.to_path_buf(),
            split,
            prompt_tokens: Vec::new(),
            prompt_offsets: vec![0],
            tokens: Vec::new(),
            offsets: vec![0],
            mask: has_mask.then(|| (Vec::new(), vec![0])),
            sample_ids: has_ids.then(|| Vec::with_capacity(n)),
            categories: has_cat.then(|| Vec::with_capacity(n)),
            findings: Vec::with_capacity(n),
            units: Vec::new(),
            layout: String::new(),
        };
        for ((no, _), p) in lines.iter().zip(parsed) {
            let line = p.unwrap_or_else(|_| Line {
                finding: Finding {
                    malformed_line: Some(*no),
                    ..Finding::default()
                },
                ..Line::default()
            });
            if split {
                s.prompt_tokens.extend(&line.prompt);
                s.prompt_offsets.push(s.prompt_tokens.len() as i64);
                s.tokens.extend(&line.ids);
            } else {
                s.tokens.extend(&line.prompt);
                s.tokens.extend(&line.ids);
            }
            s.offsets.push(s.tokens.len() as i64);
            if let Some((m, mo)) = &mut s.mask {
                // A line without a mask is trained on whole (a mask of the sequence's length, all ones).
                let len = line.prompt.len() + line.ids.len();
                match &line.mask {
                    Some(v) => m.extend(v),
                    None if line.finding.malformed_line.is_some() => {}
                    None => m.extend(std::iter::repeat_n(1u8, len)),
                }
                mo.push(m.len() as i64);
            }
            if let Some(v) = &mut s.sample_ids {
                v.push(line.sample_id);
            }
            if let Some(v) = &mut s.categories {
                v.push(line.category);
            }
            s.findings.push(line.finding);
        }
        let mut layout = if split {
            "prompt_ids+output_ids".to_string()
        } else {
            "input_ids".to_string()
        };
        if has_mask {
            layout.push_str("+loss_mask");
        }
        s.layout = layout;
        s.units = split_units(&s.offsets);
        Ok(s)
    }
}

impl Source for JsonlShard {
    fn path(&self) -> &Path {
        &self.path
    }

    fn format(&self) -> Format {
        Format::of(&FORMAT)
    }

    fn layout(&self) -> String {
        self.layout.clone()
    }

    fn rows(&self) -> u64 {
        self.findings.len() as u64
    }

    fn tokens_hint(&self) -> Option<u64> {
        Some((self.tokens.len() + self.prompt_tokens.len()) as u64)
    }

    fn units(&self) -> &[UnitSpan] {
        &self.units
    }

    fn read_rows(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let (a, b) = (start as usize, end as usize);
        f(&Batch {
            ids: Ragged {
                values: Tokens::I64(&self.tokens),
                offsets: Offsets::I64(&self.offsets[a..=b]),
            },
            prompt: self.split.then(|| Ragged {
                values: Tokens::I64(&self.prompt_tokens),
                offsets: Offsets::I64(&self.prompt_offsets[a..=b]),
            }),
            mask: self.mask.as_ref().map(|(m, mo)| RaggedMask {
                values: MaskSlice::U8(m),
                offsets: Offsets::I64(&mo[a..=b]),
            }),
            sample_ids: self.sample_ids.as_ref().map(|v| &v[a..b]),
            categories: self.categories.as_ref().map(|v| &v[a..b]),
            null_rows: None,
            findings: Some(&self.findings[a..b]),
        })
    }

    fn sample_ids(&self) -> Result<Option<Vec<Option<SampleId>>>> {
        Ok(self.sample_ids.clone())
    }

    /// Every byte of the file but the dropped samples' lines (each with its `\n`), split by the reader's own
    /// [`sample_lines`], in the same codec. No kept sample: no file (an empty JSONL file is not an input).
    fn write_filtered(&self, keep: &[bool], out: &Path) -> Result<WriteStats> {
        super::check_keep(self, keep)?;
        let text = load(&self.path)?;
        let lines = sample_lines(&text);
        if lines.len() != keep.len() {
            return Err(Error::invalid(
                &self.path,
                "the file changed since it was opened",
            ));
        }
        let rows = keep.iter().filter(|&&k| k).count() as u64;
        let readable = keep
            .iter()
            .zip(&self.findings)
            .any(|(&k, f)| k && f.malformed_line.is_none());
        if !readable {
            let why = if rows == 0 {
                "no sample kept, and a JSONL file with no sample is not an input"
            } else {
                "only malformed lines kept, and a JSONL file where no line is a sample is not an input"
            };
            return Ok(WriteStats {
                rows: 0,
                files: Vec::new(),
                omitted: Some(why.into()),
            });
        }
        let mut pieces = Vec::new();
        let mut at = 0;
        for ((_, r), &k) in lines.iter().zip(keep) {
            if !k {
                pieces.push(&text[at..r.start]);
                at = (r.end + 1).min(text.len());
            }
        }
        pieces.push(&text[at..]);
        write_encoded(out, &pieces)?;
        Ok(WriteStats {
            rows,
            files: vec![out.to_path_buf()],
            omitted: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(text: &str, name: &str) -> Result<JsonlShard> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        JsonlShard::open(&p, &ColumnNames::default())
    }

    #[test]
    fn sglang_vllm_and_plain_lines() {
        let s = shard(
            concat!(
                r#"{"id": "a", "prompt_ids": [1, 2], "output_ids": [3, 4, 5], "meta_info": {"finish_reason": {"type": "length"}, "prompt_tokens": 2, "completion_tokens": 3}}"#,
                "\n\n",
                r#"{"id": "b", "prompt_token_ids": [1], "outputs": [{"token_ids": [7, 8], "finish_reason": "stop"}]}"#,
                "\n",
                r#"[1, 2, 3]"#,
                "\n",
                r#"{"id": "d", "prompt_ids": [1], "output_ids": [2, "x"]}"#,
                "\n",
                r#"{"id": "e", "prompt_ids": [1], "output_ids": [2], "meta_info": {"completion_tokens": 5}}"#,
            ),
            "x.jsonl",
        )
        .unwrap();
        assert_eq!(s.rows(), 5);
        assert_eq!(s.layout, "prompt_ids+output_ids");
        assert_eq!(s.prompt_offsets, vec![0, 2, 3, 3, 3, 4]);
        assert_eq!(s.tokens, vec![3, 4, 5, 7, 8, 2]);
        let f = &s.findings;
        assert_eq!((f[0].finish, f[0].count_mismatch), (Finish::Length, false));
        assert_eq!(f[1].finish, Finish::Stop);
        assert_eq!(f[2].malformed_line, Some(4));
        assert_eq!(f[3].malformed_line, Some(5));
        assert!(f[4].count_mismatch);
        assert_eq!(
            s.sample_ids.as_ref().unwrap()[..2],
            [Some(SampleId::from("a")), Some(SampleId::from("b"))]
        );
    }

    /// The writer drops exactly the lines the reader numbered: a `\x0b` line is a (malformed) sample, blank
    /// and `\r\n` lines are kept byte for byte.
    #[test]
    fn write_filtered_drops_the_rows_the_reader_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            "{\"input_ids\": [1]}\r\n\x0b\n \n{\"input_ids\": [2]}\n\t\n{\"input_ids\": [3]}";
        for name in ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst"] {
            let src = dir.path().join(name);
            let out = dir.path().join(format!("out-{name}"));
            std::fs::write(dir.path().join("plain.jsonl"), text).unwrap();
            let plain =
                JsonlShard::open(&dir.path().join("plain.jsonl"), &ColumnNames::default()).unwrap();
            write_encoded(&src, &[text.as_bytes()]).unwrap();
            let s = JsonlShard::open(&src, &ColumnNames::default()).unwrap();
            assert_eq!((s.rows(), plain.rows()), (4, 4));
            assert_eq!(s.findings[1].malformed_line, Some(2));
            let st = s.write_filtered(&[true, false, true, false], &out).unwrap();
            assert_eq!(st.rows, 2);
            let back = load(&out).unwrap();
            assert_eq!(
                &*back,
                "{\"input_ids\": [1]}\r\n \n{\"input_ids\": [2]}\n\t\n".as_bytes()
            );
            // Never written twice.
            assert!(s
                .write_filtered(&[true; 4], &out)
                .unwrap_err()
                .to_string()
                .contains("already exists"));
            let none = dir.path().join(format!("none-{name}"));
            assert!(s
                .write_filtered(&[false; 4], &none)
                .unwrap()
                .files
                .is_empty());
            assert!(!none.exists());
        }
    }

    #[test]
    fn a_file_mixing_layouts_is_refused_with_the_lines() {
        let e = shard(
            "{\"input_ids\": [1]}\n[1]\n{\"prompt_ids\": [1], \"output_ids\": [2]}\n",
            "x.jsonl",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.contains("line 1 holds input_ids but line 3 holds prompt_ids"),
            "{e}"
        );
    }

    #[test]
    fn not_jsonl_is_an_input_error() {
        let e = shard("hello\nworld\n", "x.jsonl")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not JSONL") && e.contains("line 1"), "{e}");
        assert!(shard("", "x.jsonl").is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_line_is_parsed_or_malformed(text in "\\PC{0,200}") {
            let f = ColumnNames::default();
            let _ = parse_line(&text, &fields(&f));
        }
    }
}
