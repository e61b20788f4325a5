//! The built-in profiles (`profiles/*.toml`, compiled in) and the other names they answer to.

/// The profile a scan uses when none is named (on the command line, in the config or the API).
pub const DEFAULT_PROFILE: &str = "kimi-k2";

/// Names of the built-in profiles.
pub const BUILTIN_PROFILES: &[&str] = &["kimi-k2", "deepseek", "qwen3", "plain"];

/// Other names accepted for a built-in profile: (alias, profile). `tokscan profiles` lists them.
pub const PROFILE_ALIASES: &[(&str, &str)] = &[
    ("kimi", "kimi-k2"),
    ("kimi-k2.5", "kimi-k2"),
    ("kimi-k2-thinking", "kimi-k2"),
];

pub(crate) fn builtin_toml(name: &str) -> Option<&'static str> {
    let name = PROFILE_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, profile)| profile);
    match name {
        "kimi-k2" => Some(include_str!("../../profiles/kimi-k2.toml")),
        "deepseek" => Some(include_str!("../../profiles/deepseek.toml")),
        "qwen3" => Some(include_str!("../../profiles/qwen3.toml")),
        "plain" => Some(include_str!("../../profiles/plain.toml")),
        _ => None,
    }
}
