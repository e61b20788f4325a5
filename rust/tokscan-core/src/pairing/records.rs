//! Prompts files: one `{"id"?, "messages": [...], "tools"?: [...]}` record per line, the prompts a corpus was
//! generated from. Read once at open, in parallel; each record keeps only what pairing compares (its shape
//! and the byte length of each user and system message), plus its raw line when prompts are re-rendered.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// The setting that bounds what one prompt record may cost: a record (its JSON line) larger than this many bytes
/// is not rendered or tokenized (a 40 MB record took 4-5 GB and a minute), its samples are compared by shape and
/// the report names its line.
pub const MAX_RECORD_BYTES_VAR: &str = "TOKSCAN_MAX_RECORD_BYTES";
/// Its default: 4 MiB, about a million tokens of prompt.
pub const MAX_RECORD_BYTES: u64 = 4 << 20;

/// The per-record limit ([`MAX_RECORD_BYTES_VAR`], else [`MAX_RECORD_BYTES`]).
pub fn max_record_bytes() -> Result<u64> {
    Ok(crate::settings::bytes(MAX_RECORD_BYTES_VAR)?.unwrap_or(MAX_RECORD_BYTES))
}

/// What pairing knows of one prompt record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptRecord {
    /// 1-based line number in the prompts file.
    pub line: u32,
    pub id: Option<String>,
    /// A system message with non-empty content.
    pub system: bool,
    pub users: u16,
    pub assistants: u16,
    /// Tool-result messages (`role: tool`).
    pub tool_results: u16,
    /// The record declares tools (`tools` is a non-empty list).
    pub tools_declared: bool,
    /// UTF-8 bytes of the system message's content (0 without one).
    pub system_bytes: u32,
    /// UTF-8 bytes of each user message's content, in order.
    pub user_bytes: Vec<u32>,
    /// The raw line, kept only when records are rendered through a chat template.
    pub raw: Option<Box<str>>,
    /// Its line is longer than [`max_record_bytes`]: it is never rendered or tokenized.
    pub too_large: bool,
    /// With a tokenizer, once a neighbouring sample needed it: the xxh3 hash and the length of the ids its
    /// rendering tokenizes to, so that a record is tokenized once however many samples compare with it.
    pub encoded: std::sync::OnceLock<Option<(u64, u32)>>,
}

/// One prompts file, read.
#[derive(Debug, Clone)]
pub struct PromptSet {
    pub path: PathBuf,
    /// The folder whose inputs it pairs with (`None`: every input of the corpus).
    pub dir: Option<PathBuf>,
    /// The category its folder names, if any.
    pub category: Option<String>,
    pub records: Vec<PromptRecord>,
    /// The record field that carries ids (`id` or `sample_id`), when the records have one.
    pub id_field: Option<&'static str>,
    /// Record index by id (the first record with each id).
    pub by_id: HashMap<String, u32>,
    /// `(id, first line, repeated line)` of every id that appears more than once.
    pub duplicate_ids: Vec<(String, u32, u32)>,
}

#[derive(Deserialize)]
struct RawRecord<'a> {
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sample_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// Bytes of a message's content: a string, or a list of parts whose `text` fields count.
fn content_bytes(v: Option<&RawValue>) -> u32 {
    let Some(v) = v else { return 0 };
    match serde_json::from_str::<serde_json::Value>(v.get()) {
        Ok(serde_json::Value::String(s)) => s.len() as u32,
        Ok(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
            .map(|t| t.len() as u32)
            .sum(),
        _ => 0,
    }
}

fn id_text(v: &RawValue) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn parse_record(
    line: u32,
    text: &str,
    keep_raw: bool,
    max_bytes: u64,
) -> std::result::Result<PromptRecord, String> {
    let r: RawRecord<'_> = serde_json::from_str(text).map_err(|e| {
        if text.trim_start().starts_with('{') {
            format!("invalid JSON ({e})")
        } else {
            "not a JSON object".to_string()
        }
    })?;
    let messages: Vec<Message<'_>> = r.messages.ok_or("no 'messages' list").and_then(|m| {
        serde_json::from_str(m.get()).map_err(|_| "'messages' is not a list of messages")
    })?;
    let mut rec = PromptRecord {
        line,
        id: r.id.or(r.sample_id).and_then(id_text),
        tools_declared: r.tools.is_some_and(|t| {
            serde_json::from_str::<Vec<&RawValue>>(t.get()).is_ok_and(|v| !v.is_empty())
        }),
        raw: keep_raw.then(|| Box::from(text)),
        too_large: text.len() as u64 > max_bytes,
        ..PromptRecord::default()
    };
    for m in &messages {
        let bytes = content_bytes(m.content);
        match m.role.as_deref() {
            Some("system") | Some("developer") => {
                rec.system |= bytes > 0;
                rec.system_bytes += bytes;
            }
            Some("user") => {
                rec.users += 1;
                rec.user_bytes.push(bytes);
            }
            Some("assistant") => rec.assistants += 1,
            Some("tool") | Some("ipython") | Some("function") => rec.tool_results += 1,
            Some(other) => return Err(format!("a message with the unknown role {other:?}")),
            None => return Err("a message without a 'role'".into()),
        }
    }
    Ok(rec)
}

impl PromptSet {
    /// Reads a prompts file. `keep_raw` keeps each record's line (for rendering it through a template).
    pub fn read(
        path: &Path,
        dir: Option<PathBuf>,
        category: Option<String>,
        keep_raw: bool,
    ) -> Result<PromptSet> {
        let max_bytes = max_record_bytes()?;
        let bytes = crate::files::read(path)?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            Error::invalid(
                path,
                format!("not UTF-8 text (at byte {})", e.valid_up_to()),
            )
        })?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text); // a byte-order mark is not part of line 1
        let lines: Vec<(u32, &str)> = text
            .split('\n')
            .enumerate()
            .map(|(i, l)| {
                (
                    (i + 1).min(u32::MAX as usize) as u32,
                    l.strip_suffix('\r').unwrap_or(l),
                )
            })
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        if lines.is_empty() {
            return Err(Error::invalid(path, "an empty prompts file (no record)"));
        }
        let parsed: Vec<std::result::Result<PromptRecord, String>> = lines
            .par_iter()
            .with_min_len(256)
            .map(|&(n, l)| parse_record(n, l, keep_raw, max_bytes))
            .collect();
        let mut records = Vec::with_capacity(parsed.len());
        for (r, (n, _)) in parsed.into_iter().zip(&lines) {
            records.push(r.map_err(|e| Error::invalid(path, format!("line {n}: {e}")))?);
        }
        // The field that carries ids, named by the first record; a file whose records all hold `"id": null`
        // (a writer that had none to give) carries none, and pairs by line.
        let id_field = {
            let first = lines[0].1;
            let probe: HashMap<&str, &RawValue> = serde_json::from_str(first).unwrap_or_default();
            if probe.contains_key("id") {
                Some("id")
            } else if probe.contains_key("sample_id") {
                Some("sample_id")
            } else {
                None
            }
        }
        .filter(|_| records.iter().any(|r| r.id.is_some()));
        let mut by_id = HashMap::new();
        let mut duplicate_ids = Vec::new();
        if id_field.is_some() {
            for (j, r) in records.iter().enumerate() {
                if let Some(id) = &r.id {
                    match by_id.get(id) {
                        Some(&first) => {
                            let first: &PromptRecord = &records[first as usize];
                            duplicate_ids.push((id.clone(), first.line, r.line));
                        }
                        None => {
                            by_id.insert(id.clone(), j as u32);
                        }
                    }
                }
            }
        }
        Ok(PromptSet {
            path: path.to_path_buf(),
            dir,
            category,
            records,
            id_field,
            by_id,
            duplicate_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("prompts.jsonl");
        std::fs::write(&p, text).unwrap();
        (d, p)
    }

    #[test]
    fn records_keep_their_shape_sizes_and_ids() {
        let (_d, p) = write(concat!(
            r#"{"id": 7, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo"}]}"#,
            "\n\n",
            r#"{"id": "x", "messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}]}, {"role": "assistant", "content": "c"}, {"role": "tool", "content": "d"}, {"role": "user", "content": ""}], "tools": [{"type": "function"}]}"#,
            "\n",
            r#"{"id": 7, "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"}]}"#,
            "\n"
        ));
        let s = PromptSet::read(&p, None, None, false).unwrap();
        assert_eq!(s.id_field, Some("id"));
        let r = &s.records;
        assert_eq!(
            (
                r[0].line,
                r[0].id.as_deref(),
                r[0].system,
                r[0].system_bytes
            ),
            (1, Some("7"), true, 9)
        );
        assert_eq!(r[0].user_bytes, vec![6]); // é is two bytes
        assert_eq!(
            (r[1].line, r[1].users, r[1].assistants, r[1].tool_results),
            (3, 2, 1, 1)
        );
        assert!(r[1].tools_declared && !r[1].system);
        assert_eq!(r[1].user_bytes, vec![2, 0]);
        assert!(!r[2].system); // an empty system message is no system prompt
        assert_eq!(s.by_id["7"], 0);
        assert_eq!(s.duplicate_ids, vec![("7".to_string(), 1, 4)]);
    }

    #[test]
    fn records_whose_ids_are_all_null_carry_none() {
        let (_d, p) = write(concat!(
            r#"{"id": null, "messages": [{"role": "user", "content": "a"}]}"#,
            "\n",
            r#"{"id": null, "messages": [{"role": "user", "content": "b"}]}"#,
            "\n"
        ));
        let s = PromptSet::read(&p, None, None, false).unwrap();
        assert_eq!(s.id_field, None);
        assert!(s.by_id.is_empty());
    }

    #[test]
    fn bad_records_name_the_line() {
        for (text, want) in [
            ("{\"messages\": []}\n[1, 2]\n", "line 2: "),
            ("{\"messages\": 3}\n", "line 1: 'messages' is not a list"),
            ("{\"id\": 1}\n", "line 1: no 'messages' list"),
            (
                "{\"messages\": [{\"role\": \"wizard\", \"content\": \"\"}]}\n",
                "unknown role",
            ),
            ("\n \n", "an empty prompts file"),
        ] {
            let (_d, p) = write(text);
            let e = PromptSet::read(&p, None, None, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("prompts.jsonl"), "{e}");
        }
    }
}
