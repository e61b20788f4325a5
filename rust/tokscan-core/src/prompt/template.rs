//! A Hugging Face chat template rendered the way transformers' `apply_chat_template(..., tokenize=False)`
//! renders it: Jinja with `trim_blocks` and `lstrip_blocks`, Python's string and dict methods (minijinja-contrib's
//! `pycompat`), `raise_exception`, `strftime_now`, a `tojson` that is Python's `json.dumps(ensure_ascii=False)`,
//! values printed as Python prints them (`None`, `True`, `{'a': 1}`), the named special tokens of
//! `tokenizer_config.json`, and the messages prepared as transformers prepares them (keys whose value is null
//! dropped, reasoning aliased under `thinking` and `reasoning_content`). A render has a fuel budget, so a
//! template that loops forever fails instead of hanging.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, ErrorKind, Value};

use crate::error::{Error, Result};
use crate::profile::tokenizer_files::{read_json, TokenizerFiles};

/// Work one render may do (minijinja fuel: one unit per instruction or per 64 bytes of data a template makes,
/// so also a bound on what it allocates: 256 MB). A chat prompt of a few hundred kilobytes takes well under a
/// million; a runaway loop stops here in about a fifth of a second.
pub const RENDER_FUEL: u64 = 4_000_000;

/// Renders that may run out of their budget before the template is not rendered again (every later render
/// fails at once with the same message): a runaway template costs a scan a few renders' budget, not one per
/// record.
pub const RUNAWAY_RENDERS: u32 = 2;

/// Largest chat template taken (real ones are a few kilobytes; a template is code, not data).
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// Stack of the thread a template is compiled on (address space: only what the compiler touches is used).
const COMPILE_STACK: usize = 512 << 20;

/// Widest indentation `tojson` takes, and the widest width or precision `str.format` may ask for (Python takes
/// any; a template asking for more is a runaway, not a layout). minijinja's own `indent` and `format` check
/// what they would allocate against the budget first.
pub const MAX_FORMAT_WIDTH: usize = 4096;

/// Named special tokens transformers passes to every template (`special_tokens_map`), when set.
const SPECIAL_TOKEN_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Reasoning fields of a message, the first being the one templates read (transformers'
/// `_REASONING_FIELDS`).
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// A compiled chat template with the variables transformers gives it.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// A separate `tool_use` template (the named-template list form), rendered when a record has tools.
    has_tool_use: bool,
    /// Where the template came from, for error messages.
    origin: PathBuf,
    /// Renders that ran out of their budget so far, and once [`RUNAWAY_RENDERS`] did, why no render is tried.
    exhausted: std::sync::atomic::AtomicU32,
    runaway: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("has_tool_use", &self.has_tool_use)
            .finish()
    }
}

/// A template's text: `{% generation %}` blocks (transformers' assistant-mask extension) become plain blocks
/// with the same whitespace control, since they render their body unchanged.
fn without_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(close) = tag.find("%}") else {
            out.push_str(tag);
            return Cow::Owned(out);
        };
        let inner = &tag[2..close];
        let (open_ws, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close_ws) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => write!(out, "{{%{open_ws} if true {close_ws}%}}").expect("string"),
            "endgeneration" => write!(out, "{{%{open_ws} endif {close_ws}%}}").expect("string"),
            _ => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The text of a special token in `tokenizer_config.json`: a string or an `AddedToken` object.
fn token_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(m) => m.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl ChatTemplate {
    /// The template of a tokenizer directory (or `tokenizer.json` file): `override_source` when given, else
    /// `chat_template.jinja` beside the config (which transformers prefers), else the config's `chat_template`
    /// (a string, or a list of `{name, template}` of which `default` is used, and `tool_use` for records with
    /// tools). The named special tokens come from `tokenizer_config.json`.
    pub fn load(path: &Path, override_source: Option<&str>) -> Result<Self> {
        let files = TokenizerFiles::locate(path)?;
        Self::from_files(&files, override_source)
    }

    pub(crate) fn from_files(
        files: &TokenizerFiles,
        override_source: Option<&str>,
    ) -> Result<Self> {
        let config = files.config.as_deref().map(read_json).transpose()?;
        let specials: Vec<(String, String)> = config
            .iter()
            .flat_map(|c| {
                SPECIAL_TOKEN_NAMES
                    .iter()
                    .filter_map(|k| Some((k.to_string(), token_text(c.get(*k)?)?)))
            })
            .collect();
        let config_path = || files.config.clone().unwrap_or_else(|| files.named.clone());
        let (default, tool_use, origin) = if let Some(s) = override_source {
            (
                s.to_string(),
                None,
                PathBuf::from("given with --chat-template"),
            )
        } else if let Some(p) = &files.chat_template {
            let s = crate::files::read_to_string(p)?;
            (s, None, p.clone())
        } else {
            match config.as_ref().and_then(|c| c.get("chat_template")) {
                Some(serde_json::Value::String(s)) => (s.clone(), None, config_path()),
                Some(serde_json::Value::Array(list)) => {
                    let named = |name: &str| {
                        list.iter()
                            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
                            .and_then(|t| t.get("template")?.as_str())
                            .map(str::to_string)
                    };
                    let default = named("default").ok_or_else(|| {
                        Error::Tokenizer {
                            path: config_path(),
                            message: "chat_template is a list without a template named \"default\"".into(),
                        }
                    })?;
                    (default, named("tool_use"), config_path())
                }
                _ => {
                    return Err(Error::Tokenizer {
                        path: files.named.clone(),
                        message: "the tokenizer has no chat template (no chat_template in tokenizer_config.json, \
                                  no chat_template.jinja); pass one"
                            .into(),
                    })
                }
            }
        };
        Self::new(&default, tool_use.as_deref(), &specials, origin)
    }

    /// A template from its source; `specials` are the `(name, text)` variables such as `bos_token`.
    pub fn new(
        source: &str,
        tool_use: Option<&str>,
        specials: &[(String, String)],
        origin: PathBuf,
    ) -> Result<Self> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("the default delimiters are valid"),
        );
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(|state, value, method, args| {
            if method == "format" {
                if let Some(s) = value.as_str() {
                    check_format_widths(s)?;
                }
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
        env.set_formatter(|out, _state, value| {
            let mut s = String::new();
            py_str(&mut s, value);
            out.write_str(&s).map_err(minijinja::Error::from)
        });
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        for (k, v) in specials {
            env.add_global(k.clone(), Value::from(v.clone()));
        }
        let bad = |e: minijinja::Error| Error::Tokenizer {
            path: origin.clone(),
            message: format!("chat template does not parse: {}", one_line(&e)),
        };
        for (name, src) in [("default", Some(source)), ("tool_use", tool_use)] {
            let Some(src) = src else { continue };
            if src.len() > MAX_TEMPLATE_BYTES {
                return Err(Error::Tokenizer {
                    path: origin.clone(),
                    message: format!(
                        "a chat template of {} bytes (at most {MAX_TEMPLATE_BYTES}; real ones are a few kilobytes)",
                        src.len()
                    ),
                });
            }
            // Parsed and compiled on a thread of its own with a deep stack: a long expression (`1 + 1 + …`) is
            // a deep tree the compiler walks recursively, which overflowed a scan worker's stack. What it
            // compiles to is flat; rendering it needs no deep stack.
            let text = without_generation_tags(src).into_owned();
            std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .stack_size(COMPILE_STACK)
                    .spawn_scoped(scope, || env.add_template_owned(name, text))
                    .map_err(|e| {
                        Error::Template(format!("cannot start the template compiler: {e}"))
                    })?
                    .join()
                    .map_err(|_| Error::Template("the template compiler failed".into()))?
                    .map_err(bad)
            })?;
        }
        Ok(ChatTemplate {
            env,
            has_tool_use: tool_use.is_some(),
            origin,
            exhausted: std::sync::atomic::AtomicU32::new(0),
            runaway: std::sync::OnceLock::new(),
        })
    }

    /// Why the template is no longer rendered in this scan (it ran out of its budget [`RUNAWAY_RENDERS`]
    /// times), if it is not.
    pub fn runaway(&self) -> Option<&str> {
        self.runaway.get().map(String::as_str)
    }

    /// Where the template came from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// The generation prompt of `messages` (a list of message maps) with `tools` (None when the record has
    /// none), as `apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)`.
    pub fn render(&self, messages: &Value, tools: Option<&Value>) -> Result<String> {
        let messages = prepare_messages(messages)?;
        let tools = tools.filter(|t| !t.is_none() && !t.is_undefined());
        let name = if tools.is_some() && self.has_tool_use {
            "tool_use"
        } else {
            "default"
        };
        if let Some(why) = self.runaway.get() {
            return Err(Error::Template(why.clone()));
        }
        let template = self.env.get_template(name).map_err(template_error)?;
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools.cloned().unwrap_or(Value::from(())),
            documents => Value::from(()),
            add_generation_prompt => true,
        };
        template.render(ctx).map_err(|e| {
            if e.kind() == ErrorKind::OutOfFuel || is_too_large(&e) {
                let n = self
                    .exhausted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                if n >= RUNAWAY_RENDERS {
                    let _ = self.runaway.set(format!(
                        "{} (the chat template {} did so on {n} renders and is not rendered again: the records are compared by shape)",
                        one_line(&e),
                        crate::source::path_text(&self.origin)
                    ));
                }
            }
            template_error(e)
        })
    }
}

/// A minijinja error as one line.
fn one_line(e: &minijinja::Error) -> String {
    let mut s = match e.kind() {
        ErrorKind::OutOfFuel => format!(
            "the render ran out of its budget ({RENDER_FUEL} fuel): a runaway loop or an enormous output"
        ),
        _ => match e.detail() {
            Some(d) => format!("{}: {d}", e.kind()),
            None => e.kind().to_string(),
        },
    };
    if let Some(line) = e.line() {
        write!(s, " (line {line})").expect("string");
    }
    s.replace('\n', "\\n")
}

/// The start of the message of a render that asked for more than [`MAX_FORMAT_WIDTH`] or its budget allows.
const TOO_LARGE: &str = "too large for a chat prompt";

fn too_large(what: String) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, format!("{what}: {TOO_LARGE}"))
}

fn is_too_large(e: &minijinja::Error) -> bool {
    e.detail().is_some_and(|d| d.contains(TOO_LARGE))
}

/// Refuses a `str.format` string whose width or precision exceeds [`MAX_FORMAT_WIDTH`]: `"{:>3000000000}"`
/// would allocate gigabytes before the budget could see them. (A `%` in it is text; minijinja's own `format`
/// filter checks what a printf-style width would allocate against the budget.)
fn check_format_widths(format: &str) -> std::result::Result<(), minijinja::Error> {
    let mut rest = format;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        if let Some(stripped) = after.strip_prefix('{') {
            rest = stripped; // `{{` is a literal brace
            continue;
        }
        let Some(close) = after.find('}') else {
            break;
        };
        let spec = after[..close].split_once(':').map_or("", |(_, f)| f);
        for run in spec.split(|c: char| !c.is_ascii_digit()) {
            if run.len() > 4 || run.parse::<usize>().is_ok_and(|n| n > MAX_FORMAT_WIDTH) {
                return Err(too_large(format!(
                    "a format width or precision of {run} (at most {MAX_FORMAT_WIDTH})"
                )));
            }
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

fn template_error(e: minijinja::Error) -> Error {
    Error::Template(one_line(&e))
}

/// Messages as transformers hands them to the template: each must be a map; keys whose value is null are
/// dropped; a reasoning field (`reasoning_content`, `thinking` or `reasoning`) is copied under `thinking` (first)
/// and `reasoning_content`.
fn prepare_messages(messages: &Value) -> Result<Value> {
    if messages.kind() != ValueKind::Seq {
        return Err(Error::Template("messages is not a list".into()));
    }
    if messages.len() == Some(0) {
        return Err(Error::Template(
            "cannot apply the chat template to an empty conversation".into(),
        ));
    }
    let mut out = Vec::with_capacity(messages.len().unwrap_or(0));
    for m in messages.try_iter().map_err(template_error)? {
        if m.kind() != ValueKind::Map {
            return Err(Error::Template(format!(
                "chat messages should be maps, got {}",
                m.kind()
            )));
        }
        let mut pairs: Vec<(Value, Value)> = Vec::new();
        for k in m.try_iter().map_err(template_error)? {
            let v = m.get_item(&k).map_err(template_error)?;
            if !v.is_none() {
                pairs.push((k, v));
            }
        }
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v.clone())
        };
        if let Some(r) = REASONING_FIELDS.iter().find_map(|f| field(f)) {
            // {"thinking": r, **message, "reasoning_content": r}
            let thinking = field("thinking").unwrap_or_else(|| r.clone());
            let mut aliased = vec![(Value::from("thinking"), thinking)];
            let mut has_rc = false;
            for (k, v) in pairs {
                match k.as_str() {
                    Some("thinking") => {}
                    Some("reasoning_content") => {
                        has_rc = true;
                        aliased.push((k, r.clone()));
                    }
                    _ => aliased.push((k, v)),
                }
            }
            if !has_rc {
                aliased.push((Value::from("reasoning_content"), r));
            }
            pairs = aliased;
        }
        out.push(Value::from_pairs(pairs));
    }
    Ok(Value::from(out))
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

/// `datetime.now().strftime(format)` in UTC for the directives chat templates use (`%d %b %Y`, `%-d`, ...).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(&format, secs)
}

/// `format` at `secs` seconds after the Unix epoch (UTC).
pub(crate) fn strftime(format: &str, secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (hour, minute, second) = (tod / 3600, tod / 60 % 60, tod % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_march = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_march + 2) / 153;
    let day = doy_march - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut d = chars.next();
        let unpadded = d == Some('-');
        if unpadded {
            d = chars.next();
        }
        let num = |out: &mut String, v: i64, width: usize| {
            if unpadded {
                write!(out, "{v}")
            } else {
                write!(out, "{v:0width$}")
            }
            .expect("string")
        };
        match d {
            Some('Y') => num(&mut out, year, 4),
            Some('y') => num(&mut out, year % 100, 2),
            Some('m') => num(&mut out, month, 2),
            Some('d') => num(&mut out, day, 2),
            Some('e') => write!(out, "{day:>2}").expect("string"),
            Some('H') => num(&mut out, hour, 2),
            Some('I') => num(&mut out, hour12, 2),
            Some('M') => num(&mut out, minute, 2),
            Some('S') => num(&mut out, second, 2),
            Some('j') => num(&mut out, yday, 3),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Python's `repr(float)`: the shortest digits that round-trip, positional for exponents -4..16, else
/// `1e+16` style; `1.0` keeps its `.0`.
pub(crate) fn py_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
        return;
    }
    let sci = format!("{f:e}"); // shortest round-trip digits: "-1.2345e-7"
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    out.push_str(sign);
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()).expect("string");
    }
}

fn py_number(out: &mut String, v: &Value) {
    if v.is_integer() {
        write!(out, "{v}").expect("string");
    } else {
        match f64::try_from(v.clone()) {
            Ok(f) => py_float(out, f),
            Err(_) => write!(out, "{v}").expect("string"),
        }
    }
}

/// `str(value)` as Python prints it into a template: strings as they are, the rest as `repr`.
fn py_str(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(v.as_str().unwrap_or_default()),
        _ => py_repr(out, v),
    }
}

/// Python's `repr` of a string: single quotes unless the text has a single quote and no double quote.
fn py_repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                write!(out, "\\x{:02x}", c as u32).expect("string")
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `repr` of a JSON-like value (`None`, `True`, `'text'`, `[1, 2]`, `{'a': 1.0}`).
fn py_repr(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => py_number(out, v),
        ValueKind::String => py_repr_str(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &k);
                out.push_str(": ");
                py_repr(out, &v.get_item(&k).unwrap_or_default());
            }
            out.push('}');
        }
        _ => write!(out, "{v}").expect("string"),
    }
}

/// `json.dumps` options of transformers' `tojson` filter.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    /// Bytes the output may hold.
    limit: usize,
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`: Python's
/// `json.dumps` (no HTML escaping, unlike Jinja's own filter).
fn tojson(
    state: &minijinja::State,
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > NAMES.len() {
        return Err(minijinja::Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let arg = |i: usize| -> std::result::Result<Option<Value>, minijinja::Error> {
        match args.get(i) {
            Some(v) => Ok(Some(v.clone())),
            None => kwargs.get::<Option<Value>>(NAMES[i]),
        }
    };
    let ensure_ascii = arg(0)?.is_some_and(|v| v.is_true());
    let indent = match arg(1)? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => {
            let wide = match v.as_str() {
                Some(s) => s.len() > MAX_FORMAT_WIDTH,
                None => v.as_i64().is_some_and(|n| n > MAX_FORMAT_WIDTH as i64),
            };
            if wide {
                return Err(too_large(format!("tojson(indent={v})")));
            }
            match v.as_str() {
                Some(s) => Some(s.to_string()),
                None => Some(" ".repeat(v.as_i64().unwrap_or(0).max(0) as usize)),
            }
        }
    };
    let (item_sep, key_sep) = match arg(2)? {
        Some(v) if !v.is_none() => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().unwrap_or_default().to_string())
                .collect();
            match <[String; 2]>::try_from(parts) {
                Ok([a, b]) => (a, b),
                Err(_) => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson separators must be two strings",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let sort_keys = arg(3)?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    // What the budget can still pay for: the engine charges the result only once it exists.
    let limit = state
        .fuel_levels()
        .map_or(usize::MAX, |(_, left)| (left as usize).saturating_mul(64));
    let style = JsonStyle {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
        limit,
    };
    let mut out = String::new();
    json_dump(&mut out, value, &style, 0)?;
    Ok(out)
}

/// A string as `json.dumps` writes it.
fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).expect("string"),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(out, "\\u{u:04x}").expect("string");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_newline(out: &mut String, style: &JsonStyle, depth: usize) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn json_dump(
    out: &mut String,
    v: &Value,
    style: &JsonStyle,
    depth: usize,
) -> std::result::Result<(), minijinja::Error> {
    if depth > 500 {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    if out.len() > style.limit {
        return Err(too_large(format!(
            "tojson output past {} bytes (the render's budget)",
            style.limit
        )));
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                write!(out, "{v}").expect("string");
            } else {
                let f = f64::try_from(v.clone())?;
                if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    py_float(out, f);
                }
            }
        }
        ValueKind::String => json_str(out, v.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                json_newline(out, style, depth + 1);
                json_dump(out, item, style, depth + 1)?;
            }
            json_newline(out, style, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                json_newline(out, style, depth + 1);
                match k.kind() {
                    ValueKind::String => {
                        json_str(out, k.as_str().unwrap_or_default(), style.ensure_ascii)
                    }
                    ValueKind::None => out.push_str("\"null\""),
                    ValueKind::Bool => {
                        out.push_str(if k.is_true() { "\"true\"" } else { "\"false\"" })
                    }
                    ValueKind::Number => {
                        out.push('"');
                        json_dump(out, k, style, depth + 1)?;
                        out.push('"');
                    }
                    other => {
                        return Err(minijinja::Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "tojson: keys must be str, int, float, bool or None, not {other}"
                            ),
                        ))
                    }
                }
                out.push_str(&style.key_sep);
                json_dump(out, &v.get_item(k)?, style, depth + 1)?;
            }
            json_newline(out, style, depth);
            out.push('}');
        }
        other => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of type {other} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(src: &str) -> ChatTemplate {
        let specials = [("bos_token".to_string(), "<s>".to_string())];
        ChatTemplate::new(src, None, &specials, "t".into()).unwrap()
    }

    fn msgs(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    fn render(src: &str, messages: &str, tools: Option<&str>) -> Result<String> {
        let tools = tools.map(msgs);
        template(src).render(&msgs(messages), tools.as_ref())
    }

    const HI: &str = r#"[{"role": "user", "content": "hi"}]"#;

    #[test]
    fn trims_blocks_and_passes_the_variables() {
        let src = "{{ bos_token }}\n{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}A:{% endif %}\n";
        assert_eq!(render(src, HI, None).unwrap(), "<s>\n[hi]\nA:");
        assert_eq!(
            render("{{ tools }}|{{ documents }}|{{ eos_token }}|", HI, None).unwrap(),
            "None|None||"
        );
    }

    #[test]
    fn raise_exception_is_a_template_error_with_its_message() {
        let src = "{% if messages[0].role != 'system' %}{{ raise_exception('System first! got ' + messages[0].role) }}{% endif %}";
        let e = render(src, HI, None).unwrap_err();
        assert!(matches!(e, Error::Template(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("System first! got user"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let src = "{{ tools[0] | tojson }}\n{{ tools[0] | tojson(indent=2) }}\n{{ tools[0] | tojson(ensure_ascii=True, separators=(',', ':'), sort_keys=True) }}";
        let tools = r#"[{"type": "function", "b": [1, 2.5, 1e20, 1.0, true, null, "<é\"\n>"], "a": {}, "c": []}]"#;
        let out = render(src, HI, Some(tools)).unwrap();
        let lines: Vec<&str> = out.split('\n').collect();
        assert_eq!(
            lines[0],
            r#"{"type": "function", "b": [1, 2.5, 1e+20, 1.0, true, null, "<é\"\n>"], "a": {}, "c": []}"#
        );
        assert_eq!(
            out.split_once('\n').unwrap().1.rsplit_once('\n').unwrap().0,
            "{\n  \"type\": \"function\",\n  \"b\": [\n    1,\n    2.5,\n    1e+20,\n    1.0,\n    true,\n    null,\n    \"<é\\\"\\n>\"\n  ],\n  \"a\": {},\n  \"c\": []\n}"
        );
        assert_eq!(
            *lines.last().unwrap(),
            r#"{"a":{},"b":[1,2.5,1e+20,1.0,true,null,"<\u00e9\"\n>"],"c":[],"type":"function"}"#
        );
    }

    #[test]
    fn values_print_as_python_prints_them_and_python_methods_work() {
        let src = "{{ messages[0] }} {{ none }} {{ true }} {{ 1.5 }} {{ 2.0 }} {{ messages[0].content.strip().upper() }} \
                   {% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %} {{ 'a,b'.split(',') }} \
                   {{ messages[0].content.startswith(' h') }}";
        let out = render(
            src,
            r#"[{"role": "user", "content": " hi\n", "n": [1, 0.5, "it's"]}]"#,
            None,
        )
        .unwrap();
        assert_eq!(
            out,
            "{'role': 'user', 'content': ' hi\\n', 'n': [1, 0.5, \"it's\"]} None True 1.5 2.0 HI \
             role=user;content= hi\n;n=[1, 0.5, \"it's\"]; ['a', 'b'] True"
        );
    }

    #[test]
    fn messages_are_prepared_as_transformers_prepares_them() {
        let src = "{% for m in messages %}{{ m | tojson }}{% endfor %}";
        let out = render(
            src,
            r#"[{"role": "assistant", "content": "x", "tool_calls": null, "reasoning": "r"}]"#,
            None,
        )
        .unwrap();
        assert_eq!(
            out,
            r#"{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"}"#
        );
        let e = render(src, "[]", None).unwrap_err().to_string();
        assert!(e.contains("empty conversation"), "{e}");
    }

    #[test]
    fn a_runaway_loop_runs_out_of_fuel_instead_of_hanging() {
        let started = std::time::Instant::now();
        let src = "{% for i in range(1000000000) %}{{ i }}{% endfor %}";
        let e = render(src, HI, None).unwrap_err().to_string();
        assert!(e.contains("budget") || e.contains("range"), "{e}");
        let src = "{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% for j in range(100000) %}{% set ns.s = ns.s %}{% endfor %}{% endfor %}";
        let e = render(src, HI, None).unwrap_err().to_string();
        assert!(e.contains("budget"), "{e}");
        assert!(started.elapsed().as_secs() < 60);
    }

    #[test]
    fn what_a_render_may_allocate_is_bounded_and_a_runaway_template_stops_being_rendered() {
        // Each asked for gigabytes at once and aborted the process ("memory allocation of N bytes failed").
        for src in [
            "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
            "{{ messages | tojson(indent=100000000) }}",
            "{{ '{:>3000000000}'.format('x') }}",
            "{{ '{0:.3000000000f}'.format(1.5) }}",
            "{{ 'a\nb' | indent(3000000000) }}",
            "{{ '%3000000000d' | format(1) }}",
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = [ns.s, ns.s] %}{% endfor %}{{ ns.s | tojson(indent=4) }}",
        ] {
            let e = render(src, HI, None).expect_err(src).to_string();
            assert!(e.contains("budget") || e.contains(TOO_LARGE), "{src}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // Widths a layout uses still work.
        assert_eq!(
            render(
                "{{ '{:>4}|%-3s|'.format('x') }}{{ 'ab'|indent(2, true) }}",
                HI,
                None
            )
            .unwrap(),
            "   x|%-3s|  ab"
        );
        // A `%` in a str.format string is text, whatever digits follow it.
        assert_eq!(
            render("{{ '{}%: 123456 {{x}}'.format('x') }}", HI, None).unwrap(),
            "x%: 123456 {x}"
        );
        // Once a template has run out of its budget on RUNAWAY_RENDERS records, every later render fails at
        // once with a message naming the template, instead of spending the budget again.
        let t = template("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}");
        for _ in 0..RUNAWAY_RENDERS {
            assert!(t.render(&msgs(HI), None).is_err());
        }
        let started = std::time::Instant::now();
        for _ in 0..1000 {
            let e = t.render(&msgs(HI), None).unwrap_err().to_string();
            assert!(
                e.contains("is not rendered again") && e.contains("budget"),
                "{e}"
            );
        }
        assert!(started.elapsed().as_millis() < 2000);
        // A template error of the record's own (raise_exception) does not stop the template.
        let t = template(
            "{% if messages[0].content == 'no' %}{{ raise_exception('boom') }}{% endif %}ok",
        );
        for _ in 0..5 {
            assert!(t
                .render(&msgs(r#"[{"role": "user", "content": "no"}]"#), None)
                .is_err());
        }
        assert_eq!(t.render(&msgs(HI), None).unwrap(), "ok");
    }

    #[test]
    fn a_deeply_nested_expression_is_refused_or_rendered_on_a_worker_thread() {
        // 20,000 terms overflowed a scan worker's stack (a segfault).
        let src = format!("{{{{ 1{} }}}}", " + 1".repeat(20_000));
        let out = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let specials = [("bos_token".to_string(), "<s>".to_string())];
                ChatTemplate::new(&src, None, &specials, "t".into())
                    .and_then(|t| t.render(&msgs(HI), None))
                    .map_err(|e| e.to_string())
            })
            .unwrap()
            .join()
            .expect("no stack overflow");
        match out {
            Ok(text) => assert_eq!(text, "20001"),
            Err(e) => assert!(e.contains("nested") || e.contains("deep"), "{e}"),
        }
    }

    #[test]
    fn generation_blocks_render_their_body() {
        let src = "{% for m in messages %}{%- generation -%}\n[{{ m.content }}]\n{%- endgeneration %}{% endfor %}";
        assert_eq!(render(src, HI, None).unwrap(), "[hi]");
    }

    #[test]
    fn template_sources_and_missing_template() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("tokenizer_config.json");
        std::fs::write(
            &cfg,
            r#"{"bos_token": {"content": "<B>", "__type": "AddedToken"}}"#,
        )
        .unwrap();
        let e = ChatTemplate::load(dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no chat template"), "{e}");
        let hi = msgs(HI);
        let t = ChatTemplate::load(dir.path(), Some("{{ bos_token }}o")).unwrap();
        assert_eq!(t.render(&hi, None).unwrap(), "<B>o");
        std::fs::write(
            &cfg,
            r#"{"eos_token": "</s>", "chat_template": [{"name": "default", "template": "d{{ eos_token }}"}, {"name": "tool_use", "template": "t"}]}"#,
        )
        .unwrap();
        let t = ChatTemplate::load(dir.path(), None).unwrap();
        assert_eq!(t.render(&hi, None).unwrap(), "d</s>");
        assert_eq!(t.render(&hi, Some(&msgs("[]"))).unwrap(), "t");
        std::fs::write(dir.path().join("chat_template.jinja"), "j").unwrap();
        let t = ChatTemplate::load(dir.path(), None).unwrap();
        assert_eq!(t.render(&hi, None).unwrap(), "j");
        let e = ChatTemplate::load(dir.path(), Some("{% if %}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not parse"), "{e}");
    }

    #[test]
    fn python_float_repr_and_strftime() {
        let f = |x: f64| {
            let mut s = String::new();
            py_float(&mut s, x);
            s
        };
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(1e15), "1000000000000000.0");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(0.00001), "1e-05");
        assert_eq!(f(-2.5e-7), "-2.5e-07");
        assert_eq!(f(123.456), "123.456");
        // 2024-07-26 13:25:09 UTC, a Friday.
        assert_eq!(
            strftime(
                "%d %b %Y|%-d %B|%A %a|%H:%M:%S %I%p|%j|%y-%m|%%|%Q",
                1_722_000_309
            ),
            "26 Jul 2024|26 July|Friday Fri|13:25:09 01PM|208|24-07|%|%Q"
        );
    }
}
