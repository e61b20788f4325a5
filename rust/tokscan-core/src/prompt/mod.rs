//! Prompt records rendered through the model's chat template and tokenized, in the core and in parallel: the
//! token ids transformers would give for
//! `tok(tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False),
//! add_special_tokens=False)`.
//!
//! `template` renders (minijinja, with Python's semantics where chat templates rely on them), `encode` tokenizes
//! (`tokenizers` for `tokenizer.json`, tiktoken's merge for `*.tiktoken` directories). A [`PromptRecord`] is one
//! JSONL line `{"id"?, "messages": [...], "tools"?: [...]}` parsed with its key order kept, since `tojson` and
//! printed dicts show keys in the order they were written.

mod encode;
mod template;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Deserialize;

pub use template::{ChatTemplate, RENDER_FUEL};

use crate::error::{Error, Result};
use crate::profile::tokenizer_files::TokenizerFiles;
use encode::TextEncoder;

/// A tokenizer directory's tokenizer alone (no chat template): `text` → the ids
/// `tok(text, add_special_tokens=False)` gives (what `--contamination` tokenizes benchmark text with).
pub fn text_encoder(dir: &Path) -> Result<impl Fn(&str) -> Result<Vec<u32>> + Send + Sync> {
    let enc = TextEncoder::from_files(&TokenizerFiles::locate(dir)?)?;
    Ok(move |text: &str| enc.encode(text))
}

/// One prompt record: its messages and tools as the template sees them (key order kept) and its id.
#[derive(Debug, Clone)]
pub struct PromptRecord {
    /// The record's `id` (a string, or the JSON text of a number), when it has one.
    pub id: Option<String>,
    messages: minijinja::Value,
    tools: Option<minijinja::Value>,
}

impl PromptRecord {
    /// Parses one JSONL line; `line` numbers the error message (1-based).
    pub fn parse(text: &str, line: usize) -> Result<Self> {
        let bad = |what: String| Error::Template(format!("record on line {line}: {what}"));
        let v: minijinja::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
        if v.kind() != minijinja::value::ValueKind::Map {
            return Err(bad("not a JSON object".into()));
        }
        let field = |k: &str| v.get_attr(k).ok().filter(|x| !x.is_undefined());
        let messages = field("messages")
            .filter(|m| m.kind() == minijinja::value::ValueKind::Seq)
            .ok_or_else(|| bad("no \"messages\" list".into()))?;
        let tools = field("tools").filter(|t| !t.is_none());
        let id = field("id")
            .filter(|i| !i.is_none())
            .map(|i| match i.as_str() {
                Some(s) => s.to_string(),
                None => i.to_string(),
            });
        Ok(PromptRecord {
            id,
            messages,
            tools,
        })
    }

    /// A record from parsed JSON values. serde_json's maps (without its `preserve_order` feature) sort their
    /// keys, so a template that prints a dict or `tojson`s one sees them sorted; `parse` keeps the written order.
    pub fn from_json(
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
    ) -> Result<Self> {
        let value = |v: &serde_json::Value| {
            minijinja::Value::deserialize(v).map_err(|e| Error::Template(e.to_string()))
        };
        Ok(PromptRecord {
            id: None,
            messages: value(messages)?,
            tools: tools.filter(|t| !t.is_null()).map(value).transpose()?,
        })
    }
}

/// A tokenizer directory's chat template and tokenizer, ready to turn prompt records into token ids from any
/// thread.
#[derive(Debug)]
pub struct PromptEncoder {
    template: ChatTemplate,
    /// The tokenizer, loaded on first use when `id_text` can compare most samples without it.
    text: std::sync::OnceLock<std::result::Result<TextEncoder, String>>,
    files: TokenizerFiles,
    path: PathBuf,
    /// What each id decodes to, to compare a sample's ids with rendered text without tokenizing it.
    id_text: Option<crate::profile::id_text::IdText>,
}

impl PromptEncoder {
    /// Loads the tokenizer directory (or `tokenizer.json` file) `dir`: its chat template (`template_override`
    /// replaces it) and its tokenizer.
    pub fn load(dir: &Path, template_override: Option<&str>) -> Result<PromptEncoder> {
        let files = TokenizerFiles::locate(dir)?;
        let id_text = crate::profile::tokenizer_files::Vocabulary::cached(dir)
            .ok()
            .and_then(|v| crate::profile::id_text::IdText::of(&v));
        let text = std::sync::OnceLock::new();
        // Loaded now when every sample will be tokenized, or when it is a tiktoken directory (quick to load,
        // and its missing pattern must be said at once); a `tokenizer.json` that the byte table read is
        // parsed by the `tokenizers` crate only when a sample differs from its rendering.
        if id_text.is_none() || files.tokenizer_json.is_none() {
            let _ = text.set(Ok(TextEncoder::from_files(&files)?));
        }
        Ok(PromptEncoder {
            template: ChatTemplate::from_files(&files, template_override)?,
            text,
            files,
            path: dir.to_path_buf(),
            id_text,
        })
    }

    /// What each id of the tokenizer decodes to (`None` when its vocabulary has no byte table).
    pub fn id_text(&self) -> Option<&crate::profile::id_text::IdText> {
        self.id_text.as_ref()
    }

    /// The directory this encoder was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rendered generation prompt of `record`.
    /// Why its chat template is no longer rendered in this scan, if it is not ([`ChatTemplate::runaway`]).
    pub fn runaway(&self) -> Option<&str> {
        self.template.runaway()
    }

    pub fn render(&self, record: &PromptRecord) -> Result<String> {
        self.template
            .render(&record.messages, record.tools.as_ref())
    }

    /// The token ids of `text` as `tok(text, add_special_tokens=False)` gives them.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        let loaded = self
            .text
            .get_or_init(|| TextEncoder::from_files(&self.files).map_err(|e| e.to_string()));
        match loaded {
            Ok(enc) => enc.encode(text),
            Err(message) => Err(Error::Tokenizer {
                path: self.path.clone(),
                message: message.clone(),
            }),
        }
    }

    /// Renders and tokenizes one record.
    pub fn encode_record(&self, record: &PromptRecord) -> Result<Vec<u32>> {
        self.encode_text(&self.render(record)?)
    }

    /// Renders and tokenizes `messages` with `tools` (see [`PromptRecord::from_json`] about key order).
    pub fn encode(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
    ) -> Result<Vec<u32>> {
        self.encode_record(&PromptRecord::from_json(messages, tools)?)
    }

    /// Every record's token ids (or its error), in parallel on the current rayon pool, in input order.
    pub fn encode_many(&self, records: &[PromptRecord]) -> Vec<Result<Vec<u32>>> {
        records
            .par_iter()
            .with_min_len(16)
            .map(|r| self.encode_record(r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn encoder_is_shared_across_threads() {
        assert_send_sync::<PromptEncoder>();
        assert_send_sync::<PromptRecord>();
    }

    #[test]
    fn records_keep_their_key_order_and_bad_lines_are_errors() {
        let r = PromptRecord::parse(
            r#"{"id": 7, "messages": [{"role": "user", "content": "x", "a": 1}], "tools": [{"z": 1, "a": 2}]}"#,
            1,
        )
        .unwrap();
        assert_eq!(r.id.as_deref(), Some("7"));
        let t = ChatTemplate::new(
            "{{ messages[0] | tojson }}{{ tools | tojson }}",
            None,
            &[],
            "t".into(),
        )
        .unwrap();
        assert_eq!(
            t.render(&r.messages, r.tools.as_ref()).unwrap(),
            r#"{"role": "user", "content": "x", "a": 1}[{"z": 1, "a": 2}]"#
        );
        for (line, want) in [
            ("{", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"messages": 3}"#, "no \"messages\" list"),
        ] {
            let e = PromptRecord::parse(line, 4).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("line 4"), "{e}");
        }
    }

    #[test]
    fn tiktoken_directory_without_pattern_or_tokenizer_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"chat_template": "{{ messages[0].content }}"}"#,
        )
        .unwrap();
        let e = PromptEncoder::load(dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no tokenizer.json or tiktoken"), "{e}");
        std::fs::write(dir.path().join("x.tiktoken"), "YQ== 0\nYg== 1\nYWI= 2\n").unwrap();
        let e = PromptEncoder::load(dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PAT_STR"), "{e}");
        std::fs::write(
            dir.path().join("tokenization_x.py"),
            "PAT_STR = r\"\"\"[a-z]+|\\s+\"\"\"\n",
        )
        .unwrap();
        let enc = PromptEncoder::load(dir.path(), None).unwrap();
        let messages = serde_json::json!([{"role": "user", "content": "abba"}]);
        assert_eq!(enc.encode(&messages, None).unwrap(), vec![2, 1, 0]);
        let many = enc.encode_many(&[
            PromptRecord::from_json(&messages, None).unwrap(),
            PromptRecord::from_json(&serde_json::json!([]), None).unwrap(),
        ]);
        assert_eq!(many[0].as_ref().unwrap(), &vec![2, 1, 0]);
        assert!(matches!(many[1], Err(Error::Template(_))));
    }
}
