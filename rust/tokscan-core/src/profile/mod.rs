//! Chat-format profiles: which ids open turns, end turns, open and close reasoning and tool calls, and the
//! rule switches of a format. A profile is written in TOML with token *strings* (or plain ids); the strings
//! resolve through the profile's own `[ids]` table, or through a tokenizer directory when one is given.

//!
//! `schema` is the TOML as written, `resolve` turns it into a `Profile`, `builtin` holds the compiled-in
//! profiles, `tokenizer_files` reads a tokenizer directory, and `spelled` is the `spelled_special` automaton.

use std::collections::BTreeMap;

use serde::Serialize;

mod builtin;
pub mod id_text;
mod resolve;
mod schema;
mod spelled;
pub mod tokenizer_files;

pub use builtin::{BUILTIN_PROFILES, DEFAULT_PROFILE, PROFILE_ALIASES};
pub use schema::{
    DeclarationSpec, NameFrom, PayloadSpec, ProfileSpec, RepetitionPolicy, Role, RoleNameSpec,
    RoleSpec, RulesSpec, TokenRef, ToolCallSpec, MAX_PERIOD,
};
pub use spelled::SpelledPatterns;
pub use tokenizer_files::{TokenBytes, Vocabulary};

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
    /// Generation-prompt pre-fills, longest first (none is always allowed besides these).
    pub prefills: Vec<Vec<u32>>,
    /// Tokens after an assistant turn's end of turn a loss mask may cover either way.
    pub mask_boundary: Vec<u32>,
    /// Special tokens a prompt turn's content may hold, by role (`[content_allowed]`).
    pub content_allowed: Vec<(Role, u32)>,
    pub rules: RulesSpec,
    pub has_tool_section: bool,
    pub roles: Vec<RoleToken>,
    pub repetition: RepetitionPolicy,
    pub specials: Vec<SpecialToken>,
    table: SpecialTable,
    /// Special-token strings searched for in the text bytes of ordinary tokens (`spelled_special`).
    pub spelled: Option<SpelledPatterns>,
    /// The layout of a tool call's name and arguments (`[tool_call.payload]`).
    pub payload: Option<PayloadSpec>,
    /// Where the prompt declares its tools (`[tool_call.declaration]`).
    pub declaration: Option<DeclarationSpec>,
    /// The tokenizer's bytes of every ordinary token, when a tokenizer with a vocabulary was given: the tool-call
    /// payload checks decode with it, and are skipped without it.
    pub token_bytes: Option<std::sync::Arc<TokenBytes>>,
    /// The profile's own `[ids]` table (after `base` merging): the ids its token strings resolve to without a
    /// tokenizer, which `profiles check` compares with a tokenizer's.
    pub declared_ids: std::collections::BTreeMap<String, u32>,
}

impl Profile {
    /// The consistency thresholds of [`crate::summary::Partial::consistency`]: `(basis points, samples)`, 0 for
    /// the defaults.
    pub fn consistency(&self) -> (u32, u64) {
        (
            self.rules
                .consistency_majority
                .map_or(0, |m| (m.clamp(0.5, 1.0) * 10_000.0).round() as u32),
            self.rules.consistency_min_samples.unwrap_or(0),
        )
    }

    /// Length of the longest pre-fill that `tokens` starts with (0 when none does).
    pub fn prefill_len<T: crate::token::TokenId>(&self, tokens: &[T]) -> usize {
        self.prefills
            .iter()
            .find(|p| p.len() <= tokens.len() && p.iter().zip(tokens).all(|(&id, t)| t.id() == id))
            .map_or(0, Vec::len)
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

    /// Whether the tool-call payload checks run: `Some(true)` with a layout and a tokenizer's bytes,
    /// `Some(false)` with a layout but no bytes (skipped), `None` for a profile without a layout.
    pub fn payload_checked(&self) -> Option<bool> {
        self.payload.as_ref().map(|_| self.token_bytes.is_some())
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
                "think_prefilled": self.think_start.is_some_and(|t| self.prefills.contains(&vec![t])),
                "think_may_end_at_tool_call": self.rules.think_may_end_at_tool_call,
                "every_turn_closed": self.rules.every_turn_closed,
                "end_of_turn_trained": self.rules.end_of_turn_trained,
                "plain": self.rules.plain,
            },
            "prefills": self.prefills,
            "mask_boundary": self.mask_boundary,
            "content_allowed": self.content_allowed.iter().map(|(r, id)| (r.as_str(), id)).collect::<Vec<_>>(),
            "repetition": self.repetition,
            "special_tokens": self.specials.iter().map(|s| (s.name.clone(), s.id)).collect::<BTreeMap<_, _>>(),
            "spelled_special": self.spelled.as_ref().map(|s| &s.names),
            "tool_call_payload": self.payload_checked(),
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
    fn every_builtin_spec_is_written_as_toml_that_reads_back_to_it() {
        for name in BUILTIN_PROFILES {
            let text = builtin::builtin_toml(name).unwrap();
            let spec = Profile::parse_spec(text, name).unwrap();
            let written = spec.to_toml("drafted\nfor a test").unwrap();
            assert!(
                written.starts_with("# drafted\n# for a test\n"),
                "{written}"
            );
            let again = Profile::parse_spec(&written, name).unwrap();
            assert_eq!(again, spec, "{name}:\n{written}");
            // Through JSON (the draft's way in) too.
            let json = serde_json::to_string(&spec).unwrap();
            assert_eq!(ProfileSpec::from_json(&json).unwrap(), spec);
            assert_eq!(
                Profile::load(name, None).unwrap().declared_ids,
                spec.ids,
                "{name}"
            );
        }
    }

    #[test]
    fn a_spec_that_would_not_load_is_not_written() {
        let mut spec = Profile::parse_spec(builtin::builtin_toml("qwen3").unwrap(), "q").unwrap();
        spec.end_of_turn = vec![TokenRef::Str("<|no such token|>".into())];
        let err = spec.to_toml("").unwrap_err().to_string();
        assert!(err.contains("<|no such token|>"), "{err}");
        let err = ProfileSpec::from_json(
            r#"{"name": "x", "vocab_size": 10, "end_of_turn": [], "roles": [], "colour": 1}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("colour"), "{err}");
    }

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
        let text =
            include_str!("../../profiles/kimi-k2.toml").replace("\"<think>\" = 163606\n", "");
        let spec = Profile::parse_spec(&text, "x").unwrap();
        let e = Profile::from_spec(&spec, None).unwrap_err().to_string();
        assert!(e.contains("\"<think>\""), "{e}");
        let bad = Profile::parse_spec("name = 3", "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("bad.toml"), "{bad}");
    }

    #[test]
    fn system_required_follows_the_family_template_and_a_base_profile_overrides_one_rule() {
        assert!(
            Profile::load("kimi-k2", None)
                .unwrap()
                .rules
                .system_required
        );
        assert!(
            !Profile::load("deepseek", None)
                .unwrap()
                .rules
                .system_required
        );
        assert!(!Profile::load("qwen3", None).unwrap().rules.system_required);
        let spec = Profile::parse_spec(
            "base = \"qwen3\"\nname = \"my-corpus\"\n[rules]\nsystem_required = true\n",
            "mine.toml",
        )
        .unwrap();
        let p = Profile::from_spec(&spec, None).unwrap();
        assert_eq!(p.name, "my-corpus");
        assert!(p.rules.system_required);
        assert_eq!(p.think_start, Some(151667)); // the rest is the base's
        let e = Profile::parse_spec("base = \"llama9\"", "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("llama9") && e.contains("mine.toml"), "{e}");
    }

    /// A vocabulary holding the `[ids]` table of a built-in profile (as the model's own tokenizer would).
    fn vocab_of(profile_toml: &str) -> Vocabulary {
        let spec = Profile::parse_spec(profile_toml, "x").unwrap();
        Vocabulary {
            size: spec.vocab_size,
            ids: spec.ids.into_iter().collect(),
            path: Some("tok-dir".into()),
            bytes: None,
        }
    }

    #[test]
    fn kimi_names_are_the_tokenizer_configs_and_a_missing_one_is_an_error() {
        let v = vocab_of(include_str!("../../profiles/kimi-k2.toml"));
        let k = Profile::load("kimi-k2", Some(&v)).unwrap();
        let id = |name: &str| k.specials.iter().find(|s| s.name == name).map(|s| s.id);
        assert_eq!(id("<|media_begin|>"), Some(163602));
        assert_eq!(id("<|media_content|>"), Some(163603));
        assert_eq!(id("<|media_end|>"), Some(163604));
        assert_eq!(id("<|media_pad|>"), Some(163605));
        // A counted token the tokenizer lacks is an error naming it and the tokenizer, not a silent drop.
        let mut v = v;
        v.ids.remove("<|media_pad|>");
        let e = Profile::load("kimi-k2", Some(&v)).unwrap_err().to_string();
        assert!(
            e.contains("\"<|media_pad|>\"") && e.contains("tok-dir"),
            "{e}"
        );
    }

    #[test]
    fn vocabulary_resolves_strings() {
        let mut v = Vocabulary::default();
        for (s, id) in include_str!("../../profiles/deepseek.toml")
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
