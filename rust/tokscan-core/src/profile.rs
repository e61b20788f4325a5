//! Chat-format profiles: which ids open turns, end turns, open and close reasoning and tool calls, and the
//! rule switches of a format. A profile is written in TOML with token *strings* (or plain ids); the strings
//! resolve through the profile's own `[ids]` table, or through a tokenizer directory when one is given.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The role a turn plays in the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// Tool declarations and tool results.
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A token given by id or by its string in the tokenizer's vocabulary.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TokenRef {
    Id(u32),
    Str(String),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesSpec {
    /// The prompt must contain a system turn.
    #[serde(default)]
    pub system_required: bool,
    /// The system prompt is plain text before the first role token (DeepSeek), not a turn of its own.
    #[serde(default)]
    pub system_implicit: bool,
    /// The generation prompt ends with the think-start token, so completions start inside the reasoning.
    #[serde(default)]
    pub think_prefilled: bool,
    /// Reasoning may end at a tool-call section begin with no think-end before it.
    #[serde(default)]
    pub think_may_end_at_tool_call: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    pub section_begin: Option<TokenRef>,
    pub section_end: Option<TokenRef>,
    pub call_begin: Option<TokenRef>,
    pub call_argument: Option<TokenRef>,
    pub call_end: Option<TokenRef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleNameSpec {
    pub role: Role,
    pub ids: Vec<TokenRef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    pub token: TokenRef,
    /// The role when the token alone decides it.
    pub role: Option<Role>,
    /// Role names (ordinary tokens right after the role token) that decide the role.
    #[serde(default)]
    pub names: Vec<RoleNameSpec>,
    /// The role when none of `names` matches.
    pub other: Option<Role>,
}

/// Thresholds of the `repetition` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepetitionPolicy {
    /// Longest pattern (in tokens) that counts as a loop unit.
    #[serde(default = "default_max_period")]
    pub max_period: u32,
    /// Minimum length in tokens of the looping stretch (all repeats together).
    #[serde(default = "default_min_span")]
    pub min_span: u32,
}

fn default_max_period() -> u32 {
    8
}
fn default_min_span() -> u32 {
    64
}

impl Default for RepetitionPolicy {
    fn default() -> Self {
        Self {
            max_period: default_max_period(),
            min_span: default_min_span(),
        }
    }
}

/// A profile as written in TOML, before its token strings are resolved.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub vocab_size: u32,
    pub bos: Option<TokenRef>,
    pub eos: Option<TokenRef>,
    pub pad: Option<TokenRef>,
    pub end_of_turn: Vec<TokenRef>,
    /// Special token that closes a role header (Kimi `<|im_middle|>`).
    pub separator: Option<TokenRef>,
    /// Ordinary tokens that close a role header after the role name (ChatML newline).
    #[serde(default)]
    pub header_suffix: Vec<TokenRef>,
    pub think_start: Option<TokenRef>,
    pub think_end: Option<TokenRef>,
    #[serde(default)]
    pub trailing_allowed: Vec<TokenRef>,
    /// More special tokens to count (they play no structural part).
    #[serde(default)]
    pub counted: Vec<TokenRef>,
    #[serde(default)]
    pub rules: RulesSpec,
    #[serde(default)]
    pub tool_call: ToolCallSpec,
    pub roles: Vec<RoleSpec>,
    #[serde(default)]
    pub repetition: RepetitionPolicy,
    /// Default ids of the token strings used above.
    #[serde(default)]
    pub ids: BTreeMap<String, u32>,
}

/// Kind flags of a special token (one token can be several, e.g. EOS and end of turn).
pub mod kind {
    pub const BOS: u16 = 1;
    pub const EOS: u16 = 1 << 1;
    pub const PAD: u16 = 1 << 2;
    pub const END_OF_TURN: u16 = 1 << 3;
    pub const ROLE: u16 = 1 << 4;
    pub const SEPARATOR: u16 = 1 << 5;
    pub const THINK_START: u16 = 1 << 6;
    pub const THINK_END: u16 = 1 << 7;
    pub const SECTION_BEGIN: u16 = 1 << 8;
    pub const SECTION_END: u16 = 1 << 9;
    pub const CALL_BEGIN: u16 = 1 << 10;
    pub const CALL_ARGUMENT: u16 = 1 << 11;
    pub const CALL_END: u16 = 1 << 12;
    /// Any token that ends a completion: end of turn or EOS.
    pub const TERMINATOR: u16 = END_OF_TURN | EOS;
    /// Tokens that must not appear inside a completion.
    pub const STRAY: u16 = ROLE | SEPARATOR | BOS;
    pub const TOOL: u16 = SECTION_BEGIN | SECTION_END | CALL_BEGIN | CALL_ARGUMENT | CALL_END;
}

/// One named special token: its counter slot is its index in `Profile::specials`.
#[derive(Debug, Clone, Serialize)]
pub struct SpecialToken {
    pub name: String,
    pub id: u32,
    pub kind: u16,
    /// Index into `Profile::roles` for role-start tokens.
    #[serde(skip)]
    pub role_index: u8,
}

#[derive(Debug, Clone)]
pub struct RoleToken {
    pub id: u32,
    pub fixed: Option<Role>,
    pub names: Vec<(Role, Vec<u32>)>,
    pub other: Role,
}

/// Ids below `low_end` or at/above `high_start` may be special; everything between is ordinary text and
/// takes the fast path. `slots` maps those ids to `slot + 1` (0 = ordinary).
#[derive(Debug, Clone)]
struct SpecialTable {
    low_end: u32,
    high_start: u32,
    low: Vec<u16>,
    high: Vec<u16>,
}

/// Ids below this bound count as "low" specials (DeepSeek's BOS/EOS/PAD are 0, 1, 2).
const LOW_SPECIAL_LIMIT: u32 = 1024;

/// A resolved, ready-to-scan profile.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub vocab_size: u32,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub think_start: Option<u32>,
    pub think_end: Option<u32>,
    pub header_suffix: Vec<u32>,
    pub trailing_allowed: Vec<u32>,
    pub rules: RulesSpec,
    pub has_tool_section: bool,
    pub roles: Vec<RoleToken>,
    pub repetition: RepetitionPolicy,
    pub specials: Vec<SpecialToken>,
    table: SpecialTable,
    /// Piece sequences of special-token strings spelled as ordinary text (`spelled_special`).
    pub spelled: Option<SpelledPatterns>,
}

/// One multi-pattern automaton over the little-endian bytes of id sequences.
#[derive(Debug, Clone)]
pub struct SpelledPatterns {
    pub names: Vec<String>,
    pub pieces: Vec<Vec<u32>>,
    automaton: aho_corasick::AhoCorasick,
}

impl SpelledPatterns {
    /// Patterns of fewer than two pieces are dropped: a single ordinary token is not a spelling.
    pub fn new(patterns: Vec<(String, Vec<u32>)>) -> Result<Option<Self>> {
        let (names, pieces): (Vec<String>, Vec<Vec<u32>>) =
            patterns.into_iter().filter(|(_, p)| p.len() >= 2).unzip();
        if pieces.is_empty() {
            return Ok(None);
        }
        let bytes: Vec<Vec<u8>> = pieces
            .iter()
            .map(|p| p.iter().flat_map(|id| id.to_le_bytes()).collect())
            .collect();
        let automaton = aho_corasick::AhoCorasick::new(&bytes)
            .map_err(|e| Error::Usage(format!("cannot build the spelled-token automaton: {e}")))?;
        Ok(Some(SpelledPatterns {
            names,
            pieces,
            automaton,
        }))
    }

    /// First token position where a pattern starts in `ids_le` (ids as little-endian `u32` bytes).
    pub fn find(&self, ids_le: &[u8]) -> Option<usize> {
        self.automaton
            .find_overlapping_iter(ids_le)
            .filter(|m| m.start() % 4 == 0)
            .map(|m| m.start() / 4)
            .min()
    }
}

/// Names of the built-in profiles.
pub const BUILTIN_PROFILES: &[&str] = &["kimi-k2", "deepseek", "qwen3"];

/// Other names accepted for a built-in profile: (alias, profile). `tokscan profiles` lists them.
pub const PROFILE_ALIASES: &[(&str, &str)] = &[
    ("kimi", "kimi-k2"),
    ("kimi-k2.5", "kimi-k2"),
    ("kimi-k2-thinking", "kimi-k2"),
];

fn builtin_toml(name: &str) -> Option<&'static str> {
    let name = PROFILE_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, profile)| profile);
    match name {
        "kimi-k2" => Some(include_str!("../profiles/kimi-k2.toml")),
        "deepseek" => Some(include_str!("../profiles/deepseek.toml")),
        "qwen3" => Some(include_str!("../profiles/qwen3.toml")),
        _ => None,
    }
}

/// Token strings of a tokenizer directory (`tokenizer.json` and/or `tokenizer_config.json`).
#[derive(Debug, Default, Clone)]
pub struct Vocabulary {
    pub ids: HashMap<String, u32>,
    pub size: u32,
}

impl Vocabulary {
    /// Reads `tokenizer.json` (added tokens and the model vocabulary) and `tokenizer_config.json`
    /// (`added_tokens_decoder`) from `dir`; at least one must exist.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        if !dir.exists() {
            return Err(Error::NotFound {
                path: dir.to_path_buf(),
            });
        }
        let dir_err = |m: String| Error::Tokenizer {
            path: dir.to_path_buf(),
            message: m,
        };
        let (tok_json, cfg_json) = if dir.is_file() {
            (
                dir.to_path_buf(),
                dir.with_file_name("tokenizer_config.json"),
            )
        } else {
            (
                dir.join("tokenizer.json"),
                dir.join("tokenizer_config.json"),
            )
        };
        let mut vocab = Vocabulary::default();
        let mut found = false;
        if tok_json.is_file() {
            found = true;
            let text = std::fs::read_to_string(&tok_json).map_err(|e| Error::io(&tok_json, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
                    path: tok_json.clone(),
                    message: format!("not valid JSON: {e}"),
                })?;
            if let Some(map) = v.pointer("/model/vocab").and_then(|m| m.as_object()) {
                for (k, id) in map {
                    if let Some(id) = id.as_u64() {
                        vocab.ids.insert(k.clone(), id as u32);
                    }
                }
            }
            if let Some(added) = v.get("added_tokens").and_then(|a| a.as_array()) {
                for t in added {
                    if let (Some(c), Some(id)) = (
                        t.get("content").and_then(|c| c.as_str()),
                        t.get("id").and_then(|i| i.as_u64()),
                    ) {
                        vocab.ids.insert(c.to_string(), id as u32);
                    }
                }
            }
        }
        if cfg_json.is_file() {
            let text = std::fs::read_to_string(&cfg_json).map_err(|e| Error::io(&cfg_json, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Tokenizer {
                    path: cfg_json.clone(),
                    message: format!("not valid JSON: {e}"),
                })?;
            if let Some(dec) = v.get("added_tokens_decoder").and_then(|a| a.as_object()) {
                found = true;
                for (id, t) in dec {
                    if let (Ok(id), Some(c)) =
                        (id.parse::<u32>(), t.get("content").and_then(|c| c.as_str()))
                    {
                        vocab.ids.insert(c.to_string(), id);
                    }
                }
            }
        }
        if !found {
            return Err(dir_err(
                "no tokenizer.json or tokenizer_config.json with added tokens".into(),
            ));
        }
        vocab.size = vocab.ids.values().copied().max().map_or(0, |m| m + 1);
        Ok(vocab)
    }
}

struct Resolver<'a> {
    profile: &'a str,
    defaults: &'a BTreeMap<String, u32>,
    vocab: Option<&'a Vocabulary>,
}

impl Resolver<'_> {
    fn id(&self, r: &TokenRef, field: &str) -> Result<u32> {
        match r {
            TokenRef::Id(id) => Ok(*id),
            TokenRef::Str(s) => {
                let found = match self.vocab {
                    Some(v) => v.ids.get(s),
                    None => self.defaults.get(s),
                };
                found.copied().ok_or_else(|| {
                    let whence = if self.vocab.is_some() {
                        "the tokenizer"
                    } else {
                        "the profile's [ids] table"
                    };
                    Error::profile(
                        self.profile,
                        format!("{field}: token {s:?} is not in {whence}"),
                    )
                })
            }
        }
    }

    fn opt(&self, r: &Option<TokenRef>, field: &str) -> Result<Option<u32>> {
        r.as_ref().map(|r| self.id(r, field)).transpose()
    }

    fn name(&self, r: &TokenRef) -> String {
        match r {
            TokenRef::Str(s) => s.clone(),
            TokenRef::Id(id) => self
                .defaults
                .iter()
                .find(|(_, v)| **v == *id)
                .map_or_else(|| format!("<id {id}>"), |(k, _)| k.clone()),
        }
    }
}

impl Profile {
    /// A built-in profile by name, a path to a TOML profile file, optionally resolved through a tokenizer.
    pub fn load(name_or_path: &str, vocab: Option<&Vocabulary>) -> Result<Profile> {
        let spec = if let Some(text) = builtin_toml(name_or_path) {
            Self::parse_spec(text, name_or_path)?
        } else {
            let path = Path::new(name_or_path);
            if path.is_file() {
                let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
                Self::parse_spec(&text, name_or_path)?
            } else if path.exists() {
                return Err(Error::profile(name_or_path, "not a file".to_string()));
            } else if name_or_path.contains(['/', '\\']) || name_or_path.ends_with(".toml") {
                return Err(Error::profile(
                    name_or_path,
                    "no such profile file".to_string(),
                ));
            } else {
                return Err(Error::profile(
                    name_or_path,
                    format!(
                        "unknown profile (built in: {}; aliases: {}; or give a TOML file)",
                        BUILTIN_PROFILES.join(", "),
                        PROFILE_ALIASES
                            .iter()
                            .map(|(a, p)| format!("{a} = {p}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        };
        Self::from_spec(&spec, vocab)
    }

    pub fn parse_spec(text: &str, origin: &str) -> Result<ProfileSpec> {
        toml::from_str(text).map_err(|e| {
            let msg = e.message().replace('\n', " ");
            Error::profile(origin, format!("invalid TOML profile: {msg}"))
        })
    }

    pub fn from_spec(spec: &ProfileSpec, vocab: Option<&Vocabulary>) -> Result<Profile> {
        let r = Resolver {
            profile: &spec.name,
            defaults: &spec.ids,
            vocab,
        };
        let name = spec.name.as_str();
        if spec.end_of_turn.is_empty() {
            return Err(Error::profile(
                name,
                "end_of_turn: at least one token is required",
            ));
        }
        if spec.roles.is_empty() {
            return Err(Error::profile(
                name,
                "roles: at least one role token is required",
            ));
        }
        let vocab_size = match vocab {
            Some(v) if v.size > spec.vocab_size => v.size,
            _ => spec.vocab_size,
        };
        let mut specials: Vec<SpecialToken> = Vec::new();
        let add =
            |specials: &mut Vec<SpecialToken>, name: String, id: u32, kind: u16, role_index: u8| {
                if let Some(s) = specials.iter_mut().find(|s| s.id == id) {
                    s.kind |= kind;
                    if kind & kind::ROLE != 0 {
                        s.role_index = role_index;
                    }
                } else {
                    specials.push(SpecialToken {
                        name,
                        id,
                        kind,
                        role_index,
                    });
                }
            };
        let single = [
            (&spec.bos, "bos", kind::BOS),
            (&spec.eos, "eos", kind::EOS),
            (&spec.pad, "pad", kind::PAD),
            (&spec.separator, "separator", kind::SEPARATOR),
            (&spec.think_start, "think_start", kind::THINK_START),
            (&spec.think_end, "think_end", kind::THINK_END),
            (
                &spec.tool_call.section_begin,
                "tool_call.section_begin",
                kind::SECTION_BEGIN,
            ),
            (
                &spec.tool_call.section_end,
                "tool_call.section_end",
                kind::SECTION_END,
            ),
            (
                &spec.tool_call.call_begin,
                "tool_call.call_begin",
                kind::CALL_BEGIN,
            ),
            (
                &spec.tool_call.call_argument,
                "tool_call.call_argument",
                kind::CALL_ARGUMENT,
            ),
            (
                &spec.tool_call.call_end,
                "tool_call.call_end",
                kind::CALL_END,
            ),
        ];
        for (tok, field, k) in single {
            if let Some(t) = tok {
                add(&mut specials, r.name(t), r.id(t, field)?, k, 0);
            }
        }
        for t in &spec.end_of_turn {
            add(
                &mut specials,
                r.name(t),
                r.id(t, "end_of_turn")?,
                kind::END_OF_TURN,
                0,
            );
        }
        let mut roles = Vec::new();
        for (i, rs) in spec.roles.iter().enumerate() {
            let id = r.id(&rs.token, "roles.token")?;
            if rs.role.is_none() && rs.names.is_empty() {
                return Err(Error::profile(
                    name,
                    format!("roles[{i}]: give `role` or `names`"),
                ));
            }
            let names = rs
                .names
                .iter()
                .map(|n| {
                    Ok((
                        n.role,
                        n.ids
                            .iter()
                            .map(|t| r.id(t, "roles.names"))
                            .collect::<Result<Vec<_>>>()?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            roles.push(RoleToken {
                id,
                fixed: rs.role,
                names,
                other: rs.other.unwrap_or(Role::Tool),
            });
            add(&mut specials, r.name(&rs.token), id, kind::ROLE, i as u8);
        }
        let has_tool_section = spec.tool_call.section_begin.is_some();
        if has_tool_section != spec.tool_call.section_end.is_some() {
            return Err(Error::profile(
                name,
                "tool_call: section_begin and section_end go together",
            ));
        }
        if spec.tool_call.call_begin.is_some() != spec.tool_call.call_end.is_some() {
            return Err(Error::profile(
                name,
                "tool_call: call_begin and call_end go together",
            ));
        }
        if spec.think_start.is_some() != spec.think_end.is_some() {
            return Err(Error::profile(
                name,
                "think_start and think_end go together",
            ));
        }
        for t in &spec.counted {
            // Counted-only tokens a given tokenizer lacks are simply not counted.
            match r.id(t, "counted") {
                Ok(id) => add(&mut specials, r.name(t), id, 0, 0),
                Err(e) if vocab.is_none() => return Err(e),
                Err(_) => {}
            }
        }
        if let Some(s) = specials.iter().find(|s| s.id >= vocab_size) {
            return Err(Error::profile(
                name,
                format!(
                    "token {} has id {} >= vocab_size {vocab_size}",
                    s.name, s.id
                ),
            ));
        }
        if specials.len() >= u16::MAX as usize {
            return Err(Error::profile(name, "too many special tokens"));
        }
        let ids =
            |v: &[TokenRef], f: &str| v.iter().map(|t| r.id(t, f)).collect::<Result<Vec<_>>>();
        let rep = spec.repetition;
        if rep.max_period == 0 || rep.min_span < 2 * rep.max_period {
            return Err(Error::profile(
                name,
                "repetition: need max_period >= 1 and min_span >= 2 * max_period",
            ));
        }
        let table = SpecialTable::build(&specials, vocab_size);
        Ok(Profile {
            name: spec.name.clone(),
            description: spec.description.clone(),
            vocab_size,
            bos: r.opt(&spec.bos, "bos")?,
            eos: r.opt(&spec.eos, "eos")?,
            pad: r.opt(&spec.pad, "pad")?,
            think_start: r.opt(&spec.think_start, "think_start")?,
            think_end: r.opt(&spec.think_end, "think_end")?,
            header_suffix: ids(&spec.header_suffix, "header_suffix")?,
            trailing_allowed: ids(&spec.trailing_allowed, "trailing_allowed")?,
            rules: spec.rules.clone(),
            has_tool_section,
            roles,
            repetition: rep,
            specials,
            table,
            spelled: None,
        })
    }

    /// Counter slot of `id` when it is a named special token. Out-of-vocabulary ids return `None` too.
    #[inline(always)]
    pub fn special_slot(&self, id: u32) -> Option<u16> {
        let t = &self.table;
        let v = if id < t.low_end {
            t.low[id as usize]
        } else if id >= t.high_start && id < self.vocab_size {
            t.high[(id - t.high_start) as usize]
        } else {
            0
        };
        v.checked_sub(1)
    }

    /// True when `id` needs a look-up (maybe special or out of vocabulary); false for plain text ids.
    #[inline(always)]
    pub fn needs_lookup(&self, id: u32) -> bool {
        id < self.table.low_end || id >= self.table.high_start
    }

    /// `(low_end, high_start)`: ids in `[low_end, high_start)` are plain text.
    #[inline(always)]
    pub fn lookup_bounds(&self) -> (u32, u32) {
        (self.table.low_end, self.table.high_start)
    }

    pub fn slot_of(&self, id: u32) -> Option<usize> {
        self.specials.iter().position(|s| s.id == id)
    }

    /// The profile as JSON for reports.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "vocab_size": self.vocab_size,
            "rules": {
                "system_required": self.rules.system_required,
                "system_implicit": self.rules.system_implicit,
                "think_prefilled": self.rules.think_prefilled,
                "think_may_end_at_tool_call": self.rules.think_may_end_at_tool_call,
            },
            "repetition": self.repetition,
            "special_tokens": self.specials.iter().map(|s| (s.name.clone(), s.id)).collect::<BTreeMap<_, _>>(),
            "spelled_special": self.spelled.as_ref().map(|s| {
                s.names.iter().cloned().zip(s.pieces.iter().cloned()).collect::<BTreeMap<_, _>>()
            }),
        })
    }
}

impl SpecialTable {
    fn build(specials: &[SpecialToken], vocab_size: u32) -> Self {
        let low_end = specials
            .iter()
            .map(|s| s.id)
            .filter(|&id| id < LOW_SPECIAL_LIMIT)
            .max()
            .map_or(0, |m| m + 1);
        let high_start = specials
            .iter()
            .map(|s| s.id)
            .filter(|&id| id >= LOW_SPECIAL_LIMIT)
            .min()
            .unwrap_or(vocab_size)
            .min(vocab_size);
        let mut low = vec![0u16; low_end as usize];
        let mut high = vec![0u16; (vocab_size - high_start) as usize];
        for (slot, s) in specials.iter().enumerate() {
            let v = slot as u16 + 1;
            if s.id < low_end {
                low[s.id as usize] = v;
            } else {
                high[(s.id - high_start) as usize] = v;
            }
        }
        SpecialTable {
            low_end,
            high_start,
            low,
            high,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_with_reference_ids() {
        let k = Profile::load("kimi-k2", None).unwrap();
        assert_eq!(k.vocab_size, 163840);
        assert_eq!(k.think_end, Some(163607));
        assert_eq!(k.pad, Some(163839));
        assert_eq!(k.roles[0].names[0], (Role::System, vec![14062]));
        assert!(!k.needs_lookup(14062));
        assert!(k.special_slot(163586).is_some());
        assert!(k.special_slot(163589).is_none());
        let d = Profile::load("deepseek", None).unwrap();
        assert_eq!((d.bos, d.eos, d.pad), (Some(0), Some(1), Some(2)));
        assert!(d.needs_lookup(1));
        let slot = d.special_slot(1).unwrap() as usize;
        assert_eq!(
            d.specials[slot].kind & kind::TERMINATOR,
            kind::END_OF_TURN | kind::EOS
        );
        let q = Profile::load("qwen3", None).unwrap();
        assert_eq!(q.think_start, Some(151667));
        assert_eq!(q.header_suffix, vec![198]);
    }

    #[test]
    fn unknown_profile_and_missing_tokens_are_errors() {
        let e = Profile::load("llama9", None).unwrap_err().to_string();
        assert!(e.contains("unknown profile"), "{e}");
        let text = include_str!("../profiles/kimi-k2.toml").replace("\"<think>\" = 163606\n", "");
        let spec = Profile::parse_spec(&text, "x").unwrap();
        let e = Profile::from_spec(&spec, None).unwrap_err().to_string();
        assert!(e.contains("\"<think>\""), "{e}");
        let bad = Profile::parse_spec("name = 3", "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("bad.toml"), "{bad}");
    }

    #[test]
    fn vocabulary_resolves_strings() {
        let mut v = Vocabulary::default();
        for (s, id) in include_str!("../profiles/deepseek.toml")
            .lines()
            .filter_map(|l| l.split_once(" = ").filter(|(k, _)| k.starts_with('"')))
            .map(|(k, v)| (k.trim_matches('"').to_string(), v.parse::<u32>().unwrap()))
        {
            v.ids.insert(s, id + 1);
        }
        v.size = 129281;
        let d = Profile::load("deepseek", Some(&v)).unwrap();
        assert_eq!(d.think_start, Some(128822));
    }
}
