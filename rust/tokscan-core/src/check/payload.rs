//! Tool-call payloads: each complete call of the completion (call-begin … call-end) is decoded to bytes with the
//! tokenizer's vocabulary and its name and arguments read with the profile's `[tool_call.payload]` layout; the
//! prompt's tool declaration (`[tool_call.declaration]`) is read the same way. Runs only on samples that hold a
//! call-begin token, and only when the scan has a tokenizer with a vocabulary.
//!
//! A call the length limit cut (no call-end before the end of a truncated completion) is `truncated` and not
//! read here: its arguments are unfinished, not malformed. A call that is out of order is `unbalanced_tool_call`.

use std::collections::HashSet;

use serde_json::Value;

use crate::anomaly::Code;
use crate::profile::{kind, DeclarationSpec, NameFrom, PayloadSpec, Profile, Role, TokenBytes};
use crate::token::TokenId;

use super::{Event, Parsed, Turn};

/// What is wrong with a call's payload: the code and the byte offset of the broken spot in the decoded
/// header (`in_header`) or argument span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defect {
    pub code: Code,
    pub in_header: bool,
    pub offset: usize,
}

/// A call whose payload reads well: its function name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub name: &'a str,
    /// Byte offset of the name in its span.
    pub name_offset: usize,
    pub name_in_header: bool,
}

fn trim(b: &[u8]) -> (usize, &[u8]) {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    (start, &b[start..end])
}

/// A function name: one or more ASCII letters, digits, `_`, `-` or `.` (what OpenAI-style tool schemas allow,
/// plus namespacing dots).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// Byte offset of a serde_json error in `b` (its line and column are 1-based).
fn error_offset(b: &[u8], e: &serde_json::Error) -> usize {
    let mut line = 1;
    let mut line_start = 0;
    for (i, &c) in b.iter().enumerate() {
        if line == e.line() {
            break;
        }
        if c == b'\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    (line_start + e.column().saturating_sub(1)).min(b.len().saturating_sub(1))
}

/// The arguments `b` (at `base` in the argument span) must be one JSON object.
fn check_arguments(b: &[u8], base: usize) -> Result<(), Defect> {
    let bad = |offset| Defect {
        code: Code::ToolCallArguments,
        in_header: false,
        offset: base + offset,
    };
    match serde_json::from_slice::<Value>(b) {
        Ok(Value::Object(_)) => Ok(()),
        Ok(_) => Err(bad(trim(b).0)),
        Err(e) => Err(bad(error_offset(b, &e))),
    }
}

/// Reads one call: `header` is the decoded text between the call-begin and argument tokens (empty when the
/// format has no argument token), `args` the text from there to the call-end. Never panics on any bytes.
pub fn read_call<'a>(
    layout: &PayloadSpec,
    header: &'a [u8],
    args: &'a [u8],
) -> Result<Call<'a>, Defect> {
    let bad_name = |in_header, offset| Defect {
        code: Code::ToolCallName,
        in_header,
        offset,
    };
    match layout.name_from {
        NameFrom::Header => {
            let (at, h) = trim(header);
            let name = name_of(layout, h).ok_or(bad_name(true, at))?;
            let (a, body) = trim(args);
            check_arguments(body, a)?;
            Ok(Call {
                name,
                name_offset: at + layout.name_prefix.len().min(h.len()),
                name_in_header: true,
            })
        }
        NameFrom::ArgumentLine => {
            let (at, h) = trim(header);
            if layout
                .header_text
                .as_ref()
                .is_some_and(|t| t.as_bytes() != h)
            {
                return Err(bad_name(true, at));
            }
            let nl = args.iter().position(|&c| c == b'\n').unwrap_or(args.len());
            let (at, line) = trim(&args[..nl]);
            let name = name_of(layout, line).ok_or(bad_name(false, at))?;
            let rest = &args[nl..];
            let (a, body) = trim(rest);
            let base = nl + a;
            let p = layout.arguments_prefix.as_bytes();
            let s = layout.arguments_suffix.as_bytes();
            let fenced =
                body.len() >= p.len() + s.len() && body.starts_with(p) && body.ends_with(s);
            if !fenced {
                return Err(Defect {
                    code: Code::ToolCallArguments,
                    in_header: false,
                    offset: if body.starts_with(p) {
                        base + body.len().saturating_sub(1)
                    } else {
                        base
                    },
                });
            }
            check_arguments(&body[p.len()..body.len() - s.len()], base + p.len())?;
            Ok(Call {
                name,
                name_offset: at + layout.name_prefix.len().min(line.len()),
                name_in_header: false,
            })
        }
        NameFrom::Json => {
            let (a, body) = trim(args);
            let obj = match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(o)) => o,
                Ok(_) => {
                    return Err(Defect {
                        code: Code::ToolCallArguments,
                        in_header: false,
                        offset: a,
                    })
                }
                Err(e) => {
                    return Err(Defect {
                        code: Code::ToolCallArguments,
                        in_header: false,
                        offset: a + error_offset(body, &e),
                    })
                }
            };
            let name = match obj.get(&layout.name_key) {
                Some(Value::String(n)) if valid_name(n) => n,
                _ => return Err(bad_name(false, a)),
            };
            if !matches!(obj.get(&layout.arguments_key), Some(Value::Object(_))) {
                return Err(Defect {
                    code: Code::ToolCallArguments,
                    in_header: false,
                    offset: a,
                });
            }
            // The name is a JSON string of `body`: point at its first occurrence there.
            let needle = format!("\"{name}\"");
            let off = memchr::memmem::find(body, needle.as_bytes()).map_or(0, |i| i + 1);
            let name_in_body = std::str::from_utf8(&body[off..off + name.len()]).unwrap_or("");
            Ok(Call {
                name: name_in_body,
                name_offset: a + off,
                name_in_header: false,
            })
        }
    }
}

/// The name in `text` after the layout's prefix and before its call index; `None` when malformed.
fn name_of<'a>(layout: &PayloadSpec, text: &'a [u8]) -> Option<&'a str> {
    let s = std::str::from_utf8(text).ok()?;
    let s = s.strip_prefix(layout.name_prefix.as_str())?;
    let s = if layout.index_separator.is_empty() {
        s
    } else {
        let (name, idx) = s.rsplit_once(layout.index_separator.as_str())?;
        if idx.is_empty() || !idx.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        name
    };
    valid_name(s).then_some(s)
}

/// Names declared in `text` after `decl.begin` (up to `decl.end`): a stream of JSON values, each a tool
/// (`{"function": {"name": …}}` or `{"name": …}`) or an array of tools. Stops at the first value that does not
/// parse.
pub fn declared_names(decl: &DeclarationSpec, text: &[u8], out: &mut HashSet<String>) {
    let mut rest = text;
    while let Some(i) = memchr::memmem::find(rest, decl.begin.as_bytes()) {
        rest = &rest[i + decl.begin.len()..];
        let end = if decl.end.is_empty() {
            rest.len()
        } else {
            memchr::memmem::find(rest, decl.end.as_bytes()).unwrap_or(rest.len())
        };
        let region = &rest[..end];
        rest = &rest[(end + decl.end.len()).min(rest.len())..];
        if decl.begin.is_empty() {
            rest = &[]; // an empty marker: the whole text, once
        }
        for v in serde_json::Deserializer::from_slice(region).into_iter::<Value>() {
            let Ok(v) = v else { break };
            let tools = match v {
                Value::Array(a) => a,
                v => vec![v],
            };
            for t in tools {
                let f = t.get("function").unwrap_or(&t);
                if let Some(Value::String(n)) = f.get("name") {
                    out.insert(n.clone());
                }
            }
        }
        if rest.is_empty() {
            break;
        }
    }
}

/// Reused buffers of the payload check.
#[derive(Debug, Default)]
pub struct PayloadScratch {
    bytes: Vec<u8>,
    /// `starts[i]`: byte offset where the i-th decoded token of the span starts.
    starts: Vec<u32>,
    declared: HashSet<String>,
}

/// Decodes `tokens[a..b]` into `s.bytes`; non-text tokens (special ones) add nothing.
fn decode<T: TokenId>(
    bytes: &TokenBytes,
    tokens: &[T],
    a: usize,
    b: usize,
    s: &mut PayloadScratch,
) {
    s.bytes.clear();
    s.starts.clear();
    for t in &tokens[a..b] {
        s.starts.push(s.bytes.len() as u32);
        if let Some(x) = bytes.get(t.id()) {
            s.bytes.extend_from_slice(x);
        }
    }
}

/// The token of span `[a, ..)` that holds byte `offset` of its decoding.
fn token_at(starts: &[u32], a: usize, offset: usize) -> usize {
    a + starts
        .partition_point(|&s| s as usize <= offset)
        .saturating_sub(1)
}

/// The codes of the payload check, in the order [`check_calls`] returns their positions.
pub const CODES: [Code; 3] = [
    Code::ToolCallArguments,
    Code::ToolCallName,
    Code::ToolCallUndeclared,
];

/// The first finding of each payload code in the sample: positions in the order of [`CODES`].
pub fn check_calls<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    events: &[Event],
    p: &Parsed,
    turns: &[Turn],
    s: &mut PayloadScratch,
) -> [Option<usize>; 3] {
    let mut out = [None; 3];
    let (Some(layout), Some(bytes)) = (profile.payload.as_ref(), profile.token_bytes.as_deref())
    else {
        return out;
    };
    let kind_at = |e: &Event| profile.specials[e.slot as usize].kind;
    let first_call = events
        .iter()
        .position(|e| e.pos as usize >= p.cs && kind_at(e) & kind::CALL_BEGIN != 0);
    let Some(first_call) = first_call else {
        return out;
    };
    let mut declared_read = false;
    let mut begin: Option<usize> = None;
    let mut arg: Option<usize> = None;
    for e in &events[first_call..] {
        let pos = e.pos as usize;
        if pos >= p.end {
            break;
        }
        let k = kind_at(e);
        if k & kind::CALL_BEGIN != 0 {
            (begin, arg) = (Some(pos), None);
        } else if k & kind::CALL_ARGUMENT != 0 {
            if begin.is_some() && arg.is_none() {
                arg = Some(pos);
            } else {
                begin = None; // out of order: unbalanced_tool_call's
            }
        } else if k & kind::CALL_END != 0 {
            let Some(b) = begin.take() else { continue };
            let (h0, h1, a0) = match arg.take() {
                Some(a) => (b + 1, a, a + 1),
                None => (b + 1, b + 1, b + 1),
            };
            decode(bytes, tokens, h0, h1, s);
            let (header, header_starts) =
                (std::mem::take(&mut s.bytes), std::mem::take(&mut s.starts));
            decode(bytes, tokens, a0, pos, s);
            let at = |d_in_header: bool, off: usize, s: &PayloadScratch| {
                if d_in_header {
                    if header_starts.is_empty() {
                        b
                    } else {
                        token_at(&header_starts, h0, off)
                    }
                } else if s.starts.is_empty() {
                    pos
                } else {
                    token_at(&s.starts, a0, off)
                }
            };
            match read_call(layout, &header, &s.bytes) {
                Err(d) => {
                    let i = usize::from(d.code == Code::ToolCallName);
                    out[i].get_or_insert(at(d.in_header, d.offset, s));
                }
                Ok(call) if out[2].is_none() => {
                    if let Some(decl) = profile.declaration.as_ref() {
                        if !declared_read {
                            declared_read = true;
                            let name = call.name.to_string();
                            let (no, ni) = (call.name_offset, call.name_in_header);
                            let args = std::mem::take(&mut s.bytes);
                            let starts = std::mem::take(&mut s.starts);
                            read_declarations(decl, bytes, tokens, p, turns, s);
                            s.bytes = args;
                            s.starts = starts;
                            if !s.declared.is_empty() && !s.declared.contains(&name) {
                                out[2] = Some(at(ni, no, s));
                            }
                        } else if !s.declared.is_empty() && !s.declared.contains(call.name) {
                            out[2] = Some(at(call.name_in_header, call.name_offset, s));
                        }
                    }
                }
                Ok(_) => {}
            }
            s.bytes.clear();
            // Give the header buffers back for reuse.
            drop(header);
            drop(header_starts);
        } else if k & (kind::TERMINATOR | kind::SECTION_END) != 0 {
            begin = None;
        }
    }
    out
}

/// Fills `s.declared` with the names the prompt declares.
fn read_declarations<T: TokenId>(
    decl: &DeclarationSpec,
    bytes: &TokenBytes,
    tokens: &[T],
    p: &Parsed,
    turns: &[Turn],
    s: &mut PayloadScratch,
) {
    s.declared.clear();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    if decl.role == Role::System {
        spans.extend(p.implicit_system);
    }
    spans.extend(
        turns
            .iter()
            .filter(|t| t.role == decl.role && t.start < p.cs)
            .map(|t| (t.start + 1, t.end.min(p.cs))),
    );
    for (a, b) in spans {
        decode(bytes, tokens, a, b, s);
        let text = std::mem::take(&mut s.bytes);
        declared_names(decl, &text, &mut s.declared);
        s.bytes = text;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn kimi() -> PayloadSpec {
        PayloadSpec {
            name_from: NameFrom::Header,
            header_text: None,
            name_prefix: "functions.".into(),
            index_separator: ":".into(),
            name_key: "name".into(),
            arguments_key: "arguments".into(),
            arguments_prefix: String::new(),
            arguments_suffix: String::new(),
        }
    }

    fn qwen() -> PayloadSpec {
        PayloadSpec {
            name_from: NameFrom::Json,
            name_prefix: String::new(),
            index_separator: String::new(),
            ..kimi()
        }
    }

    fn deepseek() -> PayloadSpec {
        PayloadSpec {
            name_from: NameFrom::ArgumentLine,
            header_text: Some("function".into()),
            arguments_prefix: "```json".into(),
            arguments_suffix: "```".into(),
            ..qwen()
        }
    }

    fn code(r: Result<Call<'_>, Defect>) -> Option<(&'static str, bool, usize)> {
        r.err().map(|d| (d.code.as_str(), d.in_header, d.offset))
    }

    #[test]
    fn kimi_calls() {
        let k = kimi();
        let ok = read_call(&k, b"functions.get_weather:0", b"{\"city\": \"Paris\"}").unwrap();
        assert_eq!((ok.name, ok.name_offset), ("get_weather", 10));
        assert_eq!(
            code(read_call(&k, b"functions.:0", b"{}")),
            Some(("tool_call_name", true, 0))
        );
        assert_eq!(
            code(read_call(&k, b"get_weather:0", b"{}")),
            Some(("tool_call_name", true, 0))
        );
        assert_eq!(
            code(read_call(&k, b"functions.get weather:0", b"{}")),
            Some(("tool_call_name", true, 0))
        );
        assert_eq!(
            code(read_call(&k, b"functions.f:x", b"{}")),
            Some(("tool_call_name", true, 0))
        );
        // A missing closing brace: the error is at the end of the text.
        let bad = b"{\"city\": \"Paris\"";
        assert_eq!(
            code(read_call(&k, b"functions.f:0", bad)),
            Some(("tool_call_arguments", false, bad.len() - 1))
        );
        assert_eq!(
            code(read_call(&k, b"functions.f:0", b" [1, 2]")),
            Some(("tool_call_arguments", false, 1))
        );
        assert_eq!(
            code(read_call(&k, b"functions.f:0", b"{\"a\": 1}\n{\"b\": 2}")),
            Some(("tool_call_arguments", false, 9))
        );
    }

    #[test]
    fn qwen_calls() {
        let q = qwen();
        let body = b"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n";
        let ok = read_call(&q, b"", body).unwrap();
        assert_eq!(ok.name, "get_weather");
        assert_eq!(&body[ok.name_offset..ok.name_offset + 11], b"get_weather");
        assert_eq!(
            code(read_call(&q, b"", b"{\"name\": \"\", \"arguments\": {}}")),
            Some(("tool_call_name", false, 0))
        );
        assert_eq!(
            code(read_call(&q, b"", b"{\"arguments\": {}}")),
            Some(("tool_call_name", false, 0))
        );
        assert_eq!(
            code(read_call(
                &q,
                b"",
                b"{\"name\": \"f\", \"arguments\": \"x\"}"
            )),
            Some(("tool_call_arguments", false, 0))
        );
        assert_eq!(
            code(read_call(
                &q,
                b"",
                b"{\"name\": \"f\", \"arguments\": {\"a\": }}"
            )),
            Some(("tool_call_arguments", false, 33))
        );
    }

    #[test]
    fn deepseek_calls() {
        let d = deepseek();
        let args = b"get_weather\n```json\n{\"city\": \"Paris\"}\n```";
        let ok = read_call(&d, b"function", args).unwrap();
        assert_eq!(
            (ok.name, ok.name_offset, ok.name_in_header),
            ("get_weather", 0, false)
        );
        assert_eq!(
            code(read_call(&d, b"tool", args)),
            Some(("tool_call_name", true, 0))
        );
        assert_eq!(
            code(read_call(&d, b"function", b"\n```json\n{}\n```")),
            Some(("tool_call_name", false, 0))
        );
        assert_eq!(
            code(read_call(&d, b"function", b"f\n{\"a\": 1}")),
            Some(("tool_call_arguments", false, 2))
        );
        assert_eq!(
            code(read_call(&d, b"function", b"f\n```json\n{\"a\": 1\n```")).map(|c| c.0),
            Some("tool_call_arguments")
        );
    }

    #[test]
    fn declarations_in_a_stream_or_an_array() {
        let mut out = HashSet::new();
        let q = DeclarationSpec {
            role: Role::System,
            begin: "<tools>".into(),
            end: "</tools>".into(),
        };
        declared_names(
            &q,
            b"# Tools\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"a\"}}\n{\"type\": \"function\", \"function\": {\"name\": \"b\"}}\n</tools>\nreturn {\"name\": \"c\"}",
            &mut out,
        );
        let mut v: Vec<_> = out.iter().cloned().collect();
        v.sort();
        assert_eq!(v, ["a", "b"]);
        out.clear();
        let k = DeclarationSpec {
            role: Role::Tool,
            begin: "tool_declare".into(),
            end: String::new(),
        };
        declared_names(
            &k,
            b"tool_declare[{\"type\":\"function\",\"function\":{\"name\":\"x\"}},{\"name\":\"y\"}]",
            &mut out,
        );
        assert_eq!(out.len(), 2);
        out.clear();
        declared_names(&k, b"get_weather## Return of call 0\n{}", &mut out);
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(h in proptest::collection::vec(any::<u8>(), 0..40),
                                    a in proptest::collection::vec(any::<u8>(), 0..80)) {
            for l in [kimi(), qwen(), deepseek()] {
                if let Err(d) = read_call(&l, &h, &a) {
                    let span = if d.in_header { h.len() } else { a.len() };
                    prop_assert!(d.offset <= span);
                }
            }
            let mut out = HashSet::new();
            declared_names(&DeclarationSpec { role: Role::Tool, begin: String::new(), end: String::new() }, &a, &mut out);
        }

        #[test]
        fn valid_objects_are_accepted(keys in proptest::collection::btree_map("[a-z]{1,6}", 0i64..100, 0..5),
                                      name in "[A-Za-z_][A-Za-z0-9_.-]{0,12}") {
            let args = serde_json::to_vec(&keys).unwrap();
            let header = format!("functions.{name}:3");
            prop_assert!(read_call(&kimi(), header.as_bytes(), &args).is_ok());
            let body = serde_json::to_vec(&serde_json::json!({"name": name, "arguments": keys})).unwrap();
            let c = read_call(&qwen(), b"", &body).unwrap();
            prop_assert_eq!(c.name, name.as_str());
        }
    }
}
