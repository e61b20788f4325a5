//! The TOML schema of a profile: what a profile file may say, before its token strings are resolved.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenRef {
    Id(u32),
    Str(String),
}

/// Written in full (every switch, on or off) when a spec is written: a drafted profile says what it decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesSpec {
    /// The prompt must contain a system turn.
    #[serde(default)]
    pub system_required: bool,
    /// The system prompt is plain text before the first role token (DeepSeek), not a turn of its own.
    #[serde(default)]
    pub system_implicit: bool,
    /// Shorthand for `prefills = [["<think>"]]` (the think-start token): the generation prompt ends with it,
    /// so completions start inside the reasoning. Adds to `prefills`.
    #[serde(default)]
    pub think_prefilled: bool,
    /// Reasoning may end at a tool-call section begin with no think-end before it.
    #[serde(default)]
    pub think_may_end_at_tool_call: bool,
    /// No chat structure (pre-training text: Megatron, nanoGPT): every sequence is one completion, no role,
    /// think or tool rules; `truncated` / `trailing_tokens` apply only when the profile names an EOS or
    /// end-of-turn token. Roles and end-of-turn tokens may then be left empty.
    #[serde(default)]
    pub plain: bool,
    /// The final end of turn must be trained (mask 1 on it) when the sample has a loss mask: a model whose
    /// masks leave it at 0 never learns to stop. Off by default (some trainers mask it).
    #[serde(default)]
    pub end_of_turn_trained: bool,
    /// Share of a category (0..1) a structural feature value must hold before the samples without it are
    /// flagged `departs_from_category` (default 0.95); a category where no value holds it is `category_split`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency_majority: Option<f64>,
    /// Samples a category needs before it is judged for consistency (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency_min_samples: Option<u64>,
    /// Every turn closes with an end-of-turn token (ChatML, Kimi): a role token that opens a turn while a
    /// prompt turn is still open is a role token inside that turn's text (`special_in_prompt`). Off where
    /// user turns run until the next role token (DeepSeek).
    #[serde(default)]
    pub every_turn_closed: bool,
}

/// Per prompt role, the special tokens its content may hold (`[content_allowed]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentAllowedSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<TokenRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user: Vec<TokenRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool: Vec<TokenRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_begin: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_end: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_begin: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_argument: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_end: Option<TokenRef>,
    /// How a call's name and arguments are written between the tokens (the `tool_call_*` payload checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadSpec>,
    /// Where the prompt declares its tools (for `tool_call_undeclared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declaration: Option<DeclarationSpec>,
}

/// Where a call's function name is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NameFrom {
    /// The text between the call-begin and argument tokens (Kimi-K2: `functions.NAME:IDX`).
    Header,
    /// The first line of the text after the argument token (DeepSeek V3: `NAME\n```json …```).
    ArgumentLine,
    /// A key of the JSON object between the call tokens (Qwen3: `{"name": …, "arguments": {…}}`).
    Json,
}

/// The layout of one tool call's payload, decoded to bytes with the tokenizer's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadSpec {
    pub name_from: NameFrom,
    /// With `argument_line`: the text the header must hold (DeepSeek writes the call type, `function`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_text: Option<String>,
    /// A prefix the name carries (Kimi-K2: `functions.`); its absence is a malformed name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name_prefix: String,
    /// A separator before a call index of digits that ends the name (Kimi-K2: `:` in `NAME:0`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub index_separator: String,
    /// With `json`: the keys of the name and of the arguments object.
    #[serde(default = "default_name_key")]
    pub name_key: String,
    #[serde(default = "default_arguments_key")]
    pub arguments_key: String,
    /// A fence around the arguments after trimming white space (DeepSeek: "```json" … "```").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arguments_prefix: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arguments_suffix: String,
}

fn default_name_key() -> String {
    "name".into()
}

fn default_arguments_key() -> String {
    "arguments".into()
}

/// The tool declaration: JSON values (a tool, or an array of tools) after `begin` in the decoded text of a
/// prompt turn of `role`, up to `end` (or the turn's end).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclarationSpec {
    pub role: Role,
    pub begin: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub end: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleNameSpec {
    pub role: Role,
    pub ids: Vec<TokenRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    pub token: TokenRef,
    /// The role when the token alone decides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The role when none of `names` matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<Role>,
    /// Role names (ordinary tokens right after the role token) that decide the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<RoleNameSpec>,
}

/// Longest loop unit a profile may ask for (`[repetition] max_period`): the loop search
/// ([`crate::repetition`]) never looks past it.
pub const MAX_PERIOD: usize = 4096;

/// Thresholds of the `repetition` check: a block of `1..=max_period` tokens repeated back to back is a loop
/// when it spans at least `max(min_span, min_repeats * period)` tokens (see `repetition.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepetitionPolicy {
    /// Longest block (in tokens) that counts as a loop unit; at most [`MAX_PERIOD`].
    #[serde(default = "default_max_period")]
    pub max_period: u32,
    /// Minimum number of back-to-back repeats (the last may be partial: span >= min_repeats * period).
    #[serde(default = "default_min_repeats")]
    pub min_repeats: u32,
    /// Minimum length in tokens of the looping stretch (all repeats together).
    #[serde(default = "default_min_span")]
    pub min_span: u32,
}

fn default_max_period() -> u32 {
    1024
}
fn default_min_repeats() -> u32 {
    4
}
fn default_min_span() -> u32 {
    64
}

impl Default for RepetitionPolicy {
    fn default() -> Self {
        Self {
            max_period: default_max_period(),
            min_repeats: default_min_repeats(),
            min_span: default_min_span(),
        }
    }
}

impl RepetitionPolicy {
    /// Why the thresholds are unusable, if they are.
    pub fn invalid(&self) -> Option<String> {
        let max = MAX_PERIOD;
        (self.max_period == 0
            || self.max_period as usize > max
            || self.min_repeats < 2
            || self.min_span < 2)
            .then(|| {
                format!(
                    "repetition: need 1 <= max_period <= {max}, min_repeats >= 2 and min_span >= 2"
                )
            })
    }
}

/// A profile as written in TOML, before its token strings are resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub vocab_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad: Option<TokenRef>,
    pub end_of_turn: Vec<TokenRef>,
    /// Special token that closes a role header (Kimi `<|im_middle|>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<TokenRef>,
    /// Ordinary tokens that close a role header after the role name (ChatML newline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_suffix: Vec<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_start: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_end: Option<TokenRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trailing_allowed: Vec<TokenRef>,
    /// Generation-prompt pre-fills of the family, as token sequences (newline merges listed apart): what
    /// `add_generation_prompt=True` appends after the assistant header, e.g. `["<think>"]`,
    /// `["<think>", "Ċ"]`, `["<think>", "ĊĊ", "</think>", "ĊĊ"]`. No pre-fill is always allowed; the
    /// longest one that starts the final assistant turn is prompt, and a loss mask may be 0 or 1 over it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefills: Vec<Vec<TokenRef>>,
    /// Tokens right after an assistant turn's end of turn that a loss mask may cover or not (ChatML's `\n`
    /// after `<|im_end|>`, which some trainers mask with the turn and some do not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mask_boundary: Vec<TokenRef>,
    /// More special tokens to count (they play no structural part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counted: Vec<TokenRef>,
    /// Special tokens the model's chat template itself writes inside a prompt turn's content, so that
    /// `special_in_prompt` leaves them alone there (Qwen3's tool instructions name `<tool_call></tool_call>`
    /// in the system turn, and a Hugging Face tokenizer encodes them as the real tokens).
    #[serde(default, skip_serializing_if = "is_default")]
    pub content_allowed: ContentAllowedSpec,
    #[serde(default)]
    pub rules: RulesSpec,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tool_call: ToolCallSpec,
    pub roles: Vec<RoleSpec>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub repetition: RepetitionPolicy,
    /// Default ids of the token strings used above.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ids: BTreeMap<String, u32>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}
