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
    ($( $variant:ident = $bit:literal, $name:literal, $sev:ident, $scope:ident, $doc:literal, $long:literal; )*) => {
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

            /// One line: the report's `description` and `tokscan codes`.
            pub fn description(self) -> &'static str {
                match self { $( Code::$variant => $doc, )* }
            }

            /// The full meaning, Markdown: docs/reference/codes.md's table (`tokscan codes --markdown`).
            pub fn explanation(self) -> &'static str {
                match self { $( Code::$variant => $long, )* }
            }

            /// Where the code is decided.
            pub fn scope(self) -> Scope {
                match self { $( Code::$variant => Scope::$scope, )* }
            }

            pub fn parse(s: &str) -> Option<Code> {
                match s { $( $name => Some(Code::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    MissingSystem = 0, "missing_system", Error, Sample, "no system turn in the prompt (profile rule)",
        r#"no system turn in the prompt (when the profile requires one)"#;
    MissingUser = 1, "missing_user", Error, Sample, "no user turn in the prompt",
        r#"no user turn in the prompt"#;
    UnterminatedThinking = 2, "unterminated_thinking", Error, Sample, "the turn ended while thinking was still open (not closed by think-end nor by a legal tool-call section)",
        r#"the turn ended (end-of-turn present) while thinking was still open, not closed by think-end nor by a legal tool-call section. A completion cut inside its reasoning is `truncated` instead"#;
    EmptyResponse = 3, "empty_response", Warning, Sample, "thinking closed, then nothing but the end of turn",
        r#"thinking closed, then nothing but the end of turn (no text, no tool call)"#;
    MultipleThinkEnd = 4, "multiple_think_end", Error, Sample, "more than one think-end in one completion",
        r#"more than one think-end in one completion (position: the second)"#;
    Truncated = 5, "truncated", Error, Sample, "the completion does not end with an end-of-turn / EOS token (length limit hit)",
        r#"the completion does not end with the end-of-turn / EOS token: it hit the length limit. Where it was cut (inside the reasoning, inside a tool call, in the response) is in the flagged entry (`cut_in`), per category (`truncated_in`), in the terminal summary ("truncated samples were cut in the reasoning N · in a tool call N · in the response N") and in `show`"#;
    TrailingTokens = 6, "trailing_tokens", Error, Sample, "tokens after the completion's end of turn",
        r#"tokens after the completion's end of turn (other than the profile's `trailing_allowed`)"#;
    EmptyCompletion = 7, "empty_completion", Error, Sample, "a completion of zero tokens",
        r#"a completion of zero tokens"#;
    OutOfVocab = 8, "out_of_vocab", Error, Sample, "an id < 0 or >= the profile's vocab size",
        r#"an id < 0 or ≥ vocab size (position: the first)"#;
    StraySpecial = 9, "stray_special", Error, Sample, "a role-start / separator / BOS token inside the completion",
        r#"a role-start / separator / BOS token inside the completion: the model began a new turn"#;
    PadInside = 10, "pad_inside", Error, Sample, "a PAD token anywhere but trailing padding",
        r#"a PAD token anywhere but trailing padding (trailing padding is ignored)"#;
    UnbalancedToolCall = 11, "unbalanced_tool_call", Error, Sample, "tool-call tokens out of order, unclosed, or outside a section",
        r#"tool-call tokens out of order, unclosed, or outside a section. A section left open by a `truncated` completion is not reported again"#;
    Repetition = 12, "repetition", Warning, Sample, "a degenerate loop: a block of up to max_period tokens (a phrase, a sentence, a paragraph) repeated back to back",
        r#"a block of 1 to `max_period` (1024) tokens repeated back to back over ≥ `max(min_span, min_repeats × period)` tokens (64, 4 repeats) in the completion, e.g. a paragraph looping until the length limit; the earliest such loop, ties to the shorter period (position: loop start; the flagged entry's `repetition` gives `period` and `span`)"#;
    Duplicate = 13, "duplicate", Warning, Corpus, "the completion is identical to an earlier sample's",
        r#"the completion is identical (xxh3-64 + length) to an earlier sample's; `duplicate_of` names the first"#;
    SampleIdDuplicate = 14, "sample_id_duplicate", Error, Corpus, "the same sample_id appears more than once",
        r#"a `sample_id` seen on an earlier row"#;
    LossMaskMisaligned = 15, "loss_mask_misaligned", Error, Sample, "mask length differs from the ids, mask 1 outside assistant turns, or 0 inside the final completion",
        r#"mask length ≠ ids length, a 1 outside assistant turns (system, user, tool results, headers), a 0 inside the final completion, a mask with no 1 at all, or a mask shifted by a few tokens. What trainers write passes: all assistant turns trained or only the last; the end of turn and the `mask_boundary` tokens after it either way; the pre-fill either way as a whole (a one-token pre-fill trained while the end of turn is not reads as a shift by one and is flagged); an earlier turn trained from its start (or after its pre-fill / empty `<think></think>`) to its end, or not at all. With `labels`, -100 is 0. A shift that turns one convention into another (SpecForge's mask one token late on a single-turn sample *is* the completion-only mask) cannot be seen"#;
    LengthOutlier = 16, "length_outlier", Info, Corpus, "total length far outside its category's distribution (log-scale Tukey far-out fence)",
        r#"total length outside the Tukey far-out fence (Q1 − 3·IQR, Q3 + 3·IQR) of log2 lengths of its category (≥ 20 samples; IQR floored at 0.5)"#;
    SpelledSpecial = 17, "spelled_special", Error, Sample, "a special token's string encoded as ordinary pieces (e.g. </think> written as text); needs a tokenizer",
        r#"a special token's string written as ordinary text (e.g. `</think>` rendered to text and re-tokenized without special-token handling), wherever BPE split it: in running text the tag merges with its neighbours (DeepSeek-V4 encodes `a.</think>` with `.</` as one token). Needs `--tokenizer DIR` with a vocabulary (`tokenizer.json`, or a tiktoken file such as `tiktoken.model`): a per-id byte table is built once, and each sample's ordinary tokens stream their bytes through one byte-level Aho-Corasick automaton, state carried across tokens; special tokens are not text and restart it. Position = the token where the string starts"#;
    MalformedLine = 18, "malformed_line", Error, Source, "a JSONL line that is not a JSON object with integer token ids (position: the line number)",
        r#"a JSONL line that is not a JSON object with integer token ids; position: the 1-based line number (the sample is only this)"#;
    FinishReasonMismatch = 19, "finish_reason_mismatch", Error, Source, "the generator's finish_reason disagrees with the ids: length on a completion that ended, stop on one that did not",
        r#"the generator's finish reason disagrees with the ids: `length` on a completion that ended with its end of turn, `stop` on one that did not (`truncated`)"#;
    TokenCountMismatch = 20, "token_count_mismatch", Error, Source, "the generator's prompt_tokens / completion_tokens disagree with the stored ids",
        r#"the generator's `meta_info.prompt_tokens` / `completion_tokens` differ from the stored prompt / completion ids"#;
    PromptMissing = 21, "prompt_missing", Error, Corpus, "no record of the paired prompts file belongs to this sample (its id, or its line when pairing by position, is not there)",
        r#"the sample's input pairs with a prompts file (see "The drafter layout") that has no record for it: its id is not there, or (pairing by line) the file has fewer lines than the folder has samples"#;
    PromptMismatch = 22, "prompt_mismatch", Error, Corpus, "the paired prompt record disagrees with the sample's prompt: its turns (system prompt, user and assistant turns) or sizes (bytes per token far from the corpus's), or with a tokenizer its rendered tokens (position: the first difference)",
        r#"the paired record disagrees with the sample's prompt: a system prompt on one side only, another number of user or assistant turns, or sizes far from the corpus's calibrated bytes-per-token ratio"#;
    PromptsShifted = 23, "prompts_shifted", Error, Corpus, "one of a run of samples that each match the prompt record at the same offset from their own: the prompts file is shifted or reordered (the offset is in the report's pairing section)",
        r#"one of a run of ≥ 3 samples that each fit the record at the same offset (±1 to ±3 lines) from their own: the prompts file is shifted or reordered; the offset and the run are in the report's `pairing` section"#;
    DepartsFromCategory = 24, "departs_from_category", Warning, Corpus, "a structural feature (system prompt, thinking, tool turns, tool calls, pre-fill, mask start, end of turn trained) differs from a strong majority (>= 95 %) of its category (the feature and the majority are in the report)",
        r#"a structural feature differs from what ≥ 95 % of its category's samples (at least 100) share: `system` (present/absent), `thinking` (present/empty/absent), `tool_turns`, `tool_calls`, `prefill` (its length), `mask_start` (at the completion / in the pre-fill / later), `end_of_turn_trained`. The flagged entry's `departs` names the feature, its value and the majority. A feature the sample's own codes already explain (e.g. `missing_system`, `truncated`, `loss_mask_misaligned`) is not repeated. Thresholds: `[rules] consistency_majority` and `consistency_min_samples` in a profile. A category where no value holds the majority is `category_split` instead"#;
    SpecialInPrompt = 25, "special_in_prompt", Error, Sample, "a role, BOS, end-of-turn, reasoning or tool-call token inside the text of a system, user or tool turn, where the chat template writes none (text that held the token's string, encoded as the real token; a doubled BOS)",
        r#"a special token where the chat template writes text: a reasoning or tool-call token inside a system, user or tool turn (a pasted log holding `</think>`, a tool result that printed `<tool_call>` in a profile whose tool results are turns, as Kimi's and Qwen3's are: a Hugging Face tokenizer encodes such strings as the real token), a BOS inside a prompt turn's text or right after another BOS (a doubled BOS), an end of turn with more text after it before the next role token (text that held the end-of-turn string cut its turn short), and with `[rules] every_turn_closed` a role token that opens a turn while a prompt turn is still open (a tool output that printed `<|im_start|>assistant`). Tokens the template itself writes into a turn are listed in the profile's `[content_allowed]` (Qwen3: `<tool_call>` `</tool_call>` in the system turn's tool instructions; DeepSeek: the tool-call tokens V3.1's tool instructions spell out in the system text; `tokscan profiles infer` drafts it from the template's tool rendering); position: the first"#;
    PromptDuplicate = 26, "prompt_duplicate", Warning, Corpus, "the same prompt (system, user and earlier turns, not the pre-fill) as an earlier sample, answered with a different completion: a prompt generated twice (the kept first is in prompt_of)",
        r#"the same prompt as an earlier sample, answered with a different completion: a prompt generated twice (a regeneration job resumed after a crash re-runs prompts it had written). The prompt is what the profile's parsing puts before the completion: the implicit system prompt and every turn before the final assistant turn (system, user, earlier assistant and tool turns, role tokens included), **not** the generation-prompt pre-fill; two prompts are the same when their xxh3-64 and token count are. The first sample of the group (lowest row) is kept; a later one whose completion (xxh3-64 + length) differs from the first's is flagged; a later one with the first's completion is a plain `duplicate`. `prompt_of` {`row`, `sample_id`, `category`} names the kept first; the report's `prompt_groups` lists the groups"#;
    PromptCrossCategory = 27, "prompt_cross_category", Warning, Corpus, "the same prompt as an earlier sample filed under another category (the kept first and its category are in prompt_of)",
        r#"the same prompt as an earlier sample filed under another category (whatever the completions): the sample's category differs from the prompt group's first's. A group whose samples all share the first's completion and category is not a prompt group (those are `duplicate`s)"#;
    Contaminated = 28, "contaminated", Error, Reference, "the prompt or the completion shares a token n-gram (13 by default) with an item of a --contamination benchmark file (the file and item are in the flagged entry)",
        r#"with `--contamination FILE`: the prompt or the completion shares a token n-gram with an item of the benchmark file (see *Benchmark contamination*); position: the first matching window; the flagged entry's `contamination` names the `file`, the `item`, the `part` (`prompt` or `completion`) and how many of the part's `windows` matched (`ngrams`)"#;
    NearDuplicate = 29, "near_duplicate", Warning, Corpus, "with --near-dup: the completion's token n-gram set has Jaccard >= the threshold (0.8) with another sample's, in a cluster whose representative (lowest row) is kept (in near_duplicate_of)",
        r#"with `--near-dup`: the completion's set of token n-grams has exact Jaccard ≥ the threshold with another sample's; near-duplicate pairs are joined into clusters, each keeps its representative (lowest row) and flags the others; `near_duplicate_of` {`row`, `sample_id`} names the representative (see *Near-duplicate completions*)"#;
    DraftVocabStale = 30, "draft_vocab_stale", Error, Corpus, "the draft-vocabulary mapping given to --check-vocab does not fit this corpus: its t2d is not the size of the profile's vocabulary, its d2t and t2d disagree, or its coverage of the loss-bearing tokens falls short of the best top-K of the same size by more than the tolerance (details in the report's draft_vocab.check)",
        r#"the mapping given to `--check-vocab` does not fit this corpus: its `t2d` is not as long as the profile's vocabulary, its `d2t` and `t2d` disagree, or it covers the corpus's loss-bearing tokens more than 1 percentage point less than the corpus's own top-K of the same size (built from another corpus). One finding for the corpus (count 1), no sample is flagged; the reasons, both coverages and the most frequent ids it misses are in `draft_vocab.check`"#;
    ToolCallArguments = 31, "tool_call_arguments", Error, Sample, "a complete tool call whose arguments, decoded with the tokenizer, are not valid JSON or not a JSON object (or not fenced as the profile's layout says); position: the token of the broken spot; needs a tokenizer",
        r#"a complete tool call (call-begin … call-end) whose arguments, decoded with the tokenizer's vocabulary, are not valid JSON (a brace missing, a value cut) or not a JSON object, or not fenced as the profile's layout says (DeepSeek's ` ```json … ``` `); position: the token holding the broken byte. Needs `--tokenizer DIR` with a vocabulary (see *Tool-call payloads*)"#;
    ToolCallName = 32, "tool_call_name", Error, Sample, "a complete tool call whose function name is empty or malformed (not letters, digits, _ - .; no functions. prefix or :IDX where the layout has them; no name key); needs a tokenizer",
        r#"a complete tool call whose function name is empty or malformed: not ASCII letters, digits, `_`, `-` and `.`, without Kimi-K2's `functions.` prefix or `:IDX` suffix, DeepSeek's header not `function`, Qwen3's JSON without a string `name`; position: the name's first token (the call-begin when it is empty). Needs `--tokenizer DIR`"#;
    ToolCallUndeclared = 33, "tool_call_undeclared", Error, Sample, "a tool call to a function the sample's tool declaration (Kimi's tool_declare turn, Qwen3's <tools> in the system turn) does not declare; needs a tokenizer",
        r#"a well-formed call to a function the sample's tool declaration does not name (Kimi-K2's `tool_declare` turn, Qwen3's `<tools>…</tools>` in the system turn); not checked when the sample declares no tools. Position: the name's first token. Needs `--tokenizer DIR`"#;
    CategorySplit = 34, "category_split", Warning, Corpus, "a category of 100+ samples split on a structural feature: no value holds the 95 % majority (one finding per category and feature; the split is in the category's consistency table, no sample is flagged)",
        r#"a category of at least `consistency_min_samples` (100) samples in which no value of a structural feature (see `departs_from_category`) holds the `consistency_majority` share (95 %): e.g. 60 % of its samples with a system prompt and 40 % without. One finding per category and feature, no sample flagged (which side is wrong is for a person to say); the category's `splits` names the features and its `consistency` table gives each value's count"#;
    PromptUnrenderable = 35, "prompt_unrenderable", Error, Corpus, "with a tokenizer: the chat template raised an error (raise_exception, a record it does not support) or ran out of its budget on the paired prompt record; the first message is in the pairing section",
        r#"with `--tokenizer`: the chat template could not render the paired prompt record: it called `raise_exception` (as real templates do on a conversation they do not support: a system turn, a tool role, roles out of order) or ran out of its render budget. The sample cannot be compared with its record. The pairing section counts them (`unrenderable`) and gives the first record's line and the template's message (`render_error`); `show` and `align` print it for one sample"#;
    HiddenMissing = 36, "hidden_missing", Error, Dump, "with --hidden-states: no file of the dump pairs with this sample (its states were never captured, or were lost)",
        r#"with `--hidden-states DIR`: no file of the dump pairs with the sample (by the index in a file's name, its conversation id or its token ids, see *Hidden-state dumps*): the drafter never trains on it, or a writer skipped or lost it"#;
    HiddenUnreadable = 37, "hidden_unreadable", Error, Dump, "with --hidden-states: the sample's file is cut, damaged or refused (a pickle that is not plain tensors); a file no sample owns counts once for the corpus",
        r#"with `--hidden-states`: the file paired with the sample cannot be read: cut (a writer preempted mid-file; SpecForge and AngelSlim resume by "file exists"), damaged, or refused because its pickle is not the plain tensors `torch.save` writes (nothing in it is run). An unreadable file that pairs with no sample counts once, with no sample flagged; the report's `hidden_states.pairing.unpaired` names it"#;
    HiddenDuplicate = 38, "hidden_duplicate", Warning, Dump, "with --hidden-states: two or more files pair with this sample (the first by path is checked; the others are in the flagged entry)",
        r#"with `--hidden-states`: two or more files of the dump pair with the sample (a resumed writer that wrote a sample twice under two names): the trainer sees it twice. The first file by path is the one checked; `hidden_states.other_files` lists the rest"#;
    HiddenOrphan = 39, "hidden_orphan", Warning, Dump, "with --hidden-states: files of the dump that pair with no sample of the corpus (counted for the corpus; the report lists them)",
        r#"with `--hidden-states`: a file whose name, conversation id and token ids match no sample of the corpus: states of a sample that is not in this corpus (an older corpus, another split), trained on with nothing to check them against. One finding per file, no sample flagged; `hidden_states.pairing.unpaired` lists the first 20"#;
    HiddenShape = 40, "hidden_shape", Error, Dump, "with --hidden-states: the file lacks a key its layout writes, or its dtype, state width, aux width or layer count differs from the dump's, or its tensors disagree on the number of positions",
        r#"with `--hidden-states`: the sample's file is not shaped as the rest of the dump: a key its layout writes is missing, its states' dtype, width `D`, aux width `k·D` or layer count differs from what most files hold, or its tensors (ids, mask, states, aux) disagree on the number of positions"#;
    HiddenLength = 41, "hidden_length", Error, Dump, "with --hidden-states: the file holds fewer (a short capture) or more positions than the sample has tokens (trailing batch padding aside)",
        r#"with `--hidden-states`: the file covers fewer positions than the sample has tokens (a short capture: prefix caching, a dropped chunk) or more (rows past the sample that are not batch padding, i.e. ids 0 with mask 0). A capture cut at the dump's max length is `hidden_truncated` instead"#;
    HiddenTruncated = 42, "hidden_truncated", Info, Dump, "with --hidden-states: the capture stops at the dump's max length (the longest file, where at least two longer samples were cut) while the sample is longer",
        r#"with `--hidden-states`: the sample is longer than the dump's max length (the longest file's positions, when at least two longer samples were cut there; one alone is `hidden_length`) and its file stops there, as a writer's `--max-length` cuts: the drafter trains on the sample's beginning only. The length is `hidden_states.max_length`"#;
    HiddenIdsMismatch = 43, "hidden_ids_mismatch", Error, Dump, "with --hidden-states: the file's token ids differ from the sample's (position: the first difference; when they are another sample's ids, its row)",
        r#"with `--hidden-states`: the token ids stored in the file differ from the sample's, on the positions both hold: the file's states were computed for other tokens. The finding names the first differing position and, when the file's ids are another sample's, that row (a file named by a rank-local counter, a writer that mixed up requests)"#;
    HiddenMaskMismatch = 44, "hidden_mask_mismatch", Error, Dump, "with --hidden-states: the file's loss mask differs from the corpus's (a mask shifted by one is named so)",
        r#"with `--hidden-states`, on a corpus with a loss mask: the file's `loss_mask` differs from the corpus's on the positions both hold; a mask one position later or earlier than the corpus's is named so (SpecForge #885: the trainer shifts ids and targets but not the mask)"#;
    HiddenNonfinite = 45, "hidden_nonfinite", Error, Dump, "with --hidden-states: NaN or Inf values in the sample's states (the count and the first position are in the flagged entry)",
        r#"with `--hidden-states`: NaN or ±Inf in the last state or an aux state within the sample's positions (speculators #615: training went on over them). The flagged entry gives the count, the first position and the tensor"#;
    HiddenZeroRows = 46, "hidden_zero_rows", Error, Dump, "with --hidden-states: all-zero state rows inside the sample (padding rows past its length are not defects)",
        r#"with `--hidden-states`: a state row of all zeros at a position the sample owns (a dropped or never-written chunk); batch padding past the sample's length is not looked at"#;
    HiddenNorm = 47, "hidden_norm", Error, Dump, "with --hidden-states: the file's last state departs from the dump's norm convention (with --target-model: stored on the other side of the final norm; without: a row RMS scale far from the dump's)",
        r#"with `--hidden-states`: the sample's last state is not taken where the rest of the dump's is. With `--target-model`, `rms(h / w)` (w the final norm's weight) is 1 for a state stored after the norm: a file on the other side of the norm from most is flagged. Without, a file whose median row RMS is more than 4 times the dump's (or less than a quarter) is"#;
    HiddenConvention = 48, "hidden_convention", Error, Dump, "with --hidden-states --target-model: the dump's last states are stored on the other side of the final norm from where its layout's trainer expects them (one finding for the corpus)",
        r#"with `--hidden-states` and `--target-model`: most files store the last state before the final norm where the layout's trainer expects it after (SpecForge, AngelSlim apply `lm_head` to it directly), or after where it expects before (speculators applies the verifier's norm): speculators #313, Model-Optimizer #1846. One finding for the corpus, no sample flagged"#;
    HiddenDisagree = 49, "hidden_disagree", Error, Dump, "with --hidden-states --target-model: the stored last states predict too few of the sample's own next tokens (argmax lm_head(norm(h_t)) vs token t+1 on sampled completion positions)",
        r#"with `--target-model DIR`: on the sample's sampled completion positions, `argmax(lm_head(norm(h_t)))` equals token `t + 1` less often than `--agreement-min` (25 %). A target's own completions agree on most positions; another sample's states, states shifted by a position, a wrong layer or a wrong norm agree on almost none. The flagged entry has the positions, the agreed count and the first disagreements (`show` decodes them)"#;
}

/// Number of codes; per-sample arrays are sized by it.
pub const N_CODES: usize = Code::ALL.len();

/// The table of codes in Markdown, one row per code in bit order: docs/reference/codes.md's (`tokscan codes --markdown`).
/// A `|` in an explanation (`<|im_end|>`) is escaped: in a table it ends the cell even inside backticks.
pub fn markdown_table() -> String {
    let mut out =
        String::from("| code | default severity | decided from | meaning |\n|---|---|---|---|\n");
    for c in Code::ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.as_str(),
            c.default_severity().as_str(),
            c.scope().as_str(),
            c.explanation().replace('|', "\\|")
        ));
    }
    out
}

/// Where a code is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// By the per-sample rules, from the sample's tokens alone (also in `validate`).
    Sample,
    /// By the corpus-wide checks, which need every sample ([`crate::corpus_checks`]).
    Corpus,
    /// By the input's reader, from what the file says besides the ids (JSONL generator metadata).
    Source,
    /// By the scan, from reference data it was given besides the corpus (`--contamination` benchmarks).
    Reference,
    /// From the hidden-state dump made from the corpus (`--hidden-states`).
    Dump,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Sample => "sample",
            Scope::Corpus => "corpus",
            Scope::Source => "source",
            Scope::Reference => "reference",
            Scope::Dump => "hidden states",
        }
    }
}

impl Code {
    pub const fn bit(self) -> u64 {
        1u64 << (self as u8)
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A code travels by its name (a cluster task's findings).
impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Code, D::Error> {
        let name = String::deserialize(d)?;
        Code::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown code {name:?}")))
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

    #[test]
    fn the_markdown_table_has_one_well_formed_row_per_code() {
        let table = markdown_table();
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 2 + N_CODES);
        for (row, c) in rows[2..].iter().zip(Code::ALL) {
            assert!(row.starts_with(&format!("| `{}` | ", c.as_str())), "{row}");
            // Four cells: five unescaped pipes.
            let pipes = row
                .match_indices('|')
                .filter(|(i, _)| !row[..*i].ends_with('\\'));
            assert_eq!(pipes.count(), 5, "{row}");
            assert!(!c.explanation().is_empty() && !c.explanation().contains('\n'));
        }
        assert!(table.contains(r"<\|im_start\|>assistant"));
    }
}
