//! The anomaly catalogue: stable codes, their default severities and bit positions.

use serde::{Deserialize, Serialize};

/// How bad a finding is; `--fail-on` compares against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    /// Every severity, most severe first.
    pub const ALL: [Severity; 3] = [Severity::Error, Severity::Warning, Severity::Info];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "info" => Some(Severity::Info),
            "warning" => Some(Severity::Warning),
            "error" => Some(Severity::Error),
            _ => None,
        }
    }
}

macro_rules! codes {
    ($( $variant:ident = $bit:literal, $name:literal, $sev:ident, $doc:literal; )*) => {
        /// One anomaly class. The discriminant is the bit in a per-sample `u64` mask and never changes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Code {
            $( #[doc = $doc] $variant = $bit, )*
        }

        impl Code {
            /// Every code, in bit order.
            pub const ALL: &'static [Code] = &[ $( Code::$variant, )* ];

            /// The stable name used in reports, configs and the CLI.
            pub fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $name, )* }
            }

            pub fn default_severity(self) -> Severity {
                match self { $( Code::$variant => Severity::$sev, )* }
            }

            pub fn description(self) -> &'static str {
                match self { $( Code::$variant => $doc, )* }
            }

            pub fn parse(s: &str) -> Option<Code> {
                match s { $( $name => Some(Code::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    MissingSystem = 0, "missing_system", Error, "no system turn in the prompt (profile rule)";
    MissingUser = 1, "missing_user", Error, "no user turn in the prompt";
    UnterminatedThinking = 2, "unterminated_thinking", Error, "the turn ended while thinking was still open (not closed by think-end nor by a legal tool-call section)";
    EmptyResponse = 3, "empty_response", Warning, "thinking closed, then nothing but the end of turn";
    MultipleThinkEnd = 4, "multiple_think_end", Error, "more than one think-end in one completion";
    Truncated = 5, "truncated", Error, "the completion does not end with an end-of-turn / EOS token (length limit hit)";
    TrailingTokens = 6, "trailing_tokens", Error, "tokens after the completion's end of turn";
    EmptyCompletion = 7, "empty_completion", Error, "a completion of zero tokens";
    OutOfVocab = 8, "out_of_vocab", Error, "an id < 0 or >= the profile's vocab size";
    StraySpecial = 9, "stray_special", Error, "a role-start / separator / BOS token inside the completion";
    PadInside = 10, "pad_inside", Error, "a PAD token anywhere but trailing padding";
    UnbalancedToolCall = 11, "unbalanced_tool_call", Error, "tool-call tokens out of order, unclosed, or outside a section";
    Repetition = 12, "repetition", Warning, "a degenerate loop: a block of up to max_period tokens (a phrase, a sentence, a paragraph) repeated back to back";
    Duplicate = 13, "duplicate", Warning, "the completion is identical to an earlier sample's";
    SampleIdDuplicate = 14, "sample_id_duplicate", Error, "the same sample_id appears more than once";
    LossMaskMisaligned = 15, "loss_mask_misaligned", Error, "mask length differs from the ids, mask 1 outside assistant turns, or 0 inside the final completion";
    LengthOutlier = 16, "length_outlier", Info, "total length far outside its category's distribution (log-scale Tukey far-out fence)";
    SpelledSpecial = 17, "spelled_special", Error, "a special token's string encoded as ordinary pieces (e.g. </think> written as text); needs a tokenizer";
    MalformedLine = 18, "malformed_line", Error, "a JSONL line that is not a JSON object with integer token ids (position: the line number)";
    FinishReasonMismatch = 19, "finish_reason_mismatch", Error, "the generator's finish_reason disagrees with the ids: length on a completion that ended, stop on one that did not";
    TokenCountMismatch = 20, "token_count_mismatch", Error, "the generator's prompt_tokens / completion_tokens disagree with the stored ids";
    PromptMissing = 21, "prompt_missing", Error, "no record of the paired prompts file belongs to this sample (its id, or its line when pairing by position, is not there)";
    PromptMismatch = 22, "prompt_mismatch", Error, "the paired prompt record disagrees with the sample's prompt: its turns (system prompt, user and assistant turns) or sizes (bytes per token far from the corpus's), or with a tokenizer its rendered tokens (position: the first difference)";
    PromptsShifted = 23, "prompts_shifted", Error, "one of a run of samples that each match the prompt record at the same offset from their own: the prompts file is shifted or reordered (the offset is in the report's pairing section)";
    DepartsFromCategory = 24, "departs_from_category", Warning, "a structural feature (system prompt, thinking, tool turns, tool calls, pre-fill, mask start, end of turn trained) differs from a strong majority of its category (the feature and the majority are in the report)";
    SpecialInPrompt = 25, "special_in_prompt", Error, "a role, BOS, end-of-turn, reasoning or tool-call token inside the text of a system, user or tool turn, where the chat template writes none (text that held the token's string, encoded as the real token; a doubled BOS)";
    PromptDuplicate = 26, "prompt_duplicate", Warning, "the same prompt (system, user and earlier turns, not the pre-fill) as an earlier sample, answered with a different completion: a prompt generated twice (the kept first is in prompt_of)";
    PromptCrossCategory = 27, "prompt_cross_category", Warning, "the same prompt as an earlier sample filed under another category (the kept first and its category are in prompt_of)";
    Contaminated = 28, "contaminated", Error, "the prompt or the completion shares a token n-gram (13 by default) with an item of a --contamination benchmark file (the file and item are in the flagged entry)";
    NearDuplicate = 29, "near_duplicate", Warning, "with --near-dup: the completion's token n-gram set has Jaccard >= the threshold (0.8) with another sample's, in a cluster whose representative (lowest row) is kept (in near_duplicate_of)";
    DraftVocabStale = 30, "draft_vocab_stale", Error, "the draft-vocabulary mapping given to --check-vocab does not fit this corpus: its t2d is not the size of the profile's vocabulary, its d2t and t2d disagree, or its coverage of the loss-bearing tokens falls short of the best top-K of the same size by more than the tolerance (details in the report's draft_vocab.check)";
    ToolCallArguments = 31, "tool_call_arguments", Error, "a complete tool call whose arguments, decoded with the tokenizer, are not valid JSON or not a JSON object (or not fenced as the profile's layout says); position: the token of the broken spot; needs a tokenizer";
    ToolCallName = 32, "tool_call_name", Error, "a complete tool call whose function name is empty or malformed (not letters, digits, _ - .; no functions. prefix or :IDX where the layout has them; no name key); needs a tokenizer";
    ToolCallUndeclared = 33, "tool_call_undeclared", Error, "a tool call to a function the sample's tool declaration (Kimi's tool_declare turn, Qwen3's <tools> in the system turn) does not declare; needs a tokenizer";
}

/// Number of codes; per-sample arrays are sized by it.
pub const N_CODES: usize = Code::ALL.len();

/// Where a code is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// By the per-sample rules, from the sample's tokens alone (also in `validate`).
    Sample,
    /// By the corpus-wide checks, which need every sample ([`crate::crosscheck`]).
    Corpus,
    /// By the input's reader, from what the file says besides the ids (JSONL generator metadata).
    Source,
    /// By the scan, from reference data it was given besides the corpus (`--contamination` benchmarks).
    Reference,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Sample => "sample",
            Scope::Corpus => "corpus",
            Scope::Source => "source",
            Scope::Reference => "reference",
        }
    }
}

impl Code {
    pub fn scope(self) -> Scope {
        match self {
            Code::Duplicate
            | Code::SampleIdDuplicate
            | Code::LengthOutlier
            | Code::PromptMissing
            | Code::PromptMismatch
            | Code::PromptsShifted
            | Code::DepartsFromCategory
            | Code::PromptDuplicate
            | Code::PromptCrossCategory
            | Code::NearDuplicate
            | Code::DraftVocabStale => Scope::Corpus,
            Code::MalformedLine | Code::FinishReasonMismatch | Code::TokenCountMismatch => {
                Scope::Source
            }
            Code::Contaminated => Scope::Reference,
            _ => Scope::Sample,
        }
    }

    pub fn bit(self) -> u64 {
        1u64 << (self as u8)
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Codes set in a bitmask, in bit order.
pub fn codes_in(mask: u64) -> impl Iterator<Item = Code> {
    Code::ALL
        .iter()
        .copied()
        .filter(move |c| mask & c.bit() != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_dense_and_names_round_trip() {
        for (i, c) in Code::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Code::parse(c.as_str()), Some(*c));
        }
        assert_eq!(Code::parse("nope"), None);
    }
}
