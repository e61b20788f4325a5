//! Token resolution: a `ProfileSpec`'s token strings resolved (through its `[ids]` table or a tokenizer's
//! vocabulary) into a ready-to-scan `Profile`.

use std::collections::BTreeMap;
use std::path::Path;

use super::builtin::{builtin_toml, BUILTIN_PROFILES, PROFILE_ALIASES};
use super::{
    kind, Profile, ProfileSpec, Role, RoleToken, SpecialTable, SpecialToken, SpelledPatterns,
    TokenRef, Vocabulary,
};
use crate::error::{Error, Result};

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
                    let whence = match self.vocab {
                        Some(v) => match &v.path {
                            Some(p) => format!("the tokenizer {}", p.display()),
                            None => "the tokenizer".to_string(),
                        },
                        None => "the profile's [ids] table".to_string(),
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

/// Merges `over` into `base`: tables key by key, anything else replaced.
fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl ProfileSpec {
    /// A spec given as JSON (what `profiles infer` drafts), read with the TOML schema's rules: unknown keys
    /// and wrong types are errors naming the key.
    pub fn from_json(text: &str) -> Result<ProfileSpec> {
        serde_json::from_str(text)
            .map_err(|e| Error::profile("draft", format!("invalid profile spec: {e}")))
    }

    /// The spec as a profile file that [`Profile::load`] reads back to the same spec: `header` as `# `
    /// comment lines, then the TOML. It is resolved first (its token strings through its own `[ids]`), so a
    /// spec that would not load is an error here rather than a file that fails later.
    pub fn to_toml(&self, header: &str) -> Result<String> {
        Profile::from_spec(self, None)?;
        let body = toml::to_string(self)
            .map_err(|e| Error::profile(&self.name, format!("cannot write as TOML: {e}")))?;
        let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
        out.push_str(&body);
        Ok(out)
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
                let text = crate::files::read_to_string(path)?;
                let spec = Self::parse_spec(&text, name_or_path)?;
                // A file's problems name the file (its `name`, or its base's, only beside it).
                return Self::from_spec(&spec, vocab).map_err(|e| match e {
                    Error::Profile { name, message } if name != name_or_path => Error::Profile {
                        name: format!("{name_or_path} ({name})"),
                        message,
                    },
                    e => e,
                });
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

    /// Parses a TOML profile. `base = "NAME"` starts from that built-in profile: the file's tables are
    /// merged into the base's key by key (arrays and values replace), so a corpus that differs in one rule
    /// (e.g. `[rules] system_required = true`) says only that.
    pub fn parse_spec(text: &str, origin: &str) -> Result<ProfileSpec> {
        let invalid = |e: toml::de::Error| {
            let msg = e.message().replace('\n', " ");
            Error::profile(origin, format!("invalid TOML profile: {msg}"))
        };
        let mut table: toml::Table = text.parse().map_err(invalid)?;
        if let Some(base) = table.remove("base") {
            let name = base
                .as_str()
                .ok_or_else(|| Error::profile(origin, "base: give a built-in profile name"))?;
            let base_text = builtin_toml(name).ok_or_else(|| {
                Error::profile(
                    origin,
                    format!(
                        "base: {name:?} is not a built-in profile ({})",
                        BUILTIN_PROFILES.join(", ")
                    ),
                )
            })?;
            let mut merged: toml::Table = base_text.parse().map_err(invalid)?;
            merge_tables(&mut merged, table);
            table = merged;
        }
        toml::Value::Table(table).try_into().map_err(invalid)
    }

    pub fn from_spec(spec: &ProfileSpec, vocab: Option<&Vocabulary>) -> Result<Profile> {
        let r = Resolver {
            profile: &spec.name,
            defaults: &spec.ids,
            vocab,
        };
        let name = spec.name.as_str();
        if spec.end_of_turn.is_empty() && !spec.rules.plain {
            return Err(Error::profile(
                name,
                "end_of_turn: at least one token is required",
            ));
        }
        if spec.roles.is_empty() && !spec.rules.plain {
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
            // A counted token the tokenizer lacks is an error like any other: dropping it silently would
            // hide a misspelt name (Kimi's `<|media_begin|>` was long listed as `<|media_start|>`).
            add(&mut specials, r.name(t), r.id(t, "counted")?, 0, 0);
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
        if let Some(why) = rep.invalid() {
            return Err(Error::profile(name, why));
        }
        let mut prefills = spec
            .prefills
            .iter()
            .map(|p| ids(p, "prefills"))
            .collect::<Result<Vec<_>>>()?;
        if spec.rules.think_prefilled {
            let think = r
                .opt(&spec.think_start, "think_start")?
                .ok_or_else(|| Error::profile(name, "rules.think_prefilled needs think_start"))?;
            prefills.push(vec![think]);
        }
        prefills.retain(|p| !p.is_empty());
        prefills.sort_by(|x, y| y.len().cmp(&x.len()).then_with(|| x.cmp(y)));
        prefills.dedup();
        let table = SpecialTable::build(&specials, vocab_size);
        // With a tokenizer's byte table, look for every special token's string written as text.
        let spelled = match vocab.and_then(|v| v.bytes.clone().map(|b| (v, b))) {
            Some((v, bytes)) => {
                let special_ids: std::collections::HashSet<u32> =
                    specials.iter().map(|s| s.id).collect();
                let strings: Vec<String> = v
                    .ids
                    .iter()
                    .filter(|(_, id)| special_ids.contains(id))
                    .map(|(s, _)| s.clone())
                    .collect();
                let ids: Vec<u32> = special_ids.iter().copied().collect();
                SpelledPatterns::new(strings, bytes, &ids)?
            }
            None => None,
        };
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
            prefills,
            mask_boundary: ids(&spec.mask_boundary, "mask_boundary")?,
            content_allowed: [
                (Role::System, &spec.content_allowed.system),
                (Role::User, &spec.content_allowed.user),
                (Role::Tool, &spec.content_allowed.tool),
            ]
            .into_iter()
            .map(|(role, refs)| {
                Ok(ids(refs, "content_allowed")?
                    .into_iter()
                    .map(move |id| (role, id)))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect(),
            rules: spec.rules.clone(),
            has_tool_section,
            roles,
            repetition: rep,
            specials,
            table,
            spelled,
            payload: spec.tool_call.payload.clone(),
            declaration: spec.tool_call.declaration.clone(),
            token_bytes: vocab.and_then(|v| v.bytes.clone()),
            declared_ids: spec.ids.clone(),
        })
    }
}
