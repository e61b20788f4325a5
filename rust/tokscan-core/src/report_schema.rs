//! The JSON report's fields, documented once: the docs' table of them (docs/reference/report-schema.md) is `tokscan codes --report-schema`,
//! generated from these rows and each pass's own ([`crate::passes::report_fields`]; a test compares them), and a
//! test holds the field names against the keys a real report has.

/// One row of the report's field table.
pub struct Field {
    /// The top-level keys the row documents.
    pub names: &'static [&'static str],
    /// How the table's first column writes them (Markdown).
    pub shown: &'static str,
    /// Whether every report has them (else only with the option or finding the content names).
    pub always: bool,
    /// What they hold (Markdown).
    pub content: &'static str,
}

/// Every row of the table, in the report's order: those here around the passes' `sections` (their rows, in
/// the registry's order).
pub fn fields(sections: &[&'static Field]) -> Vec<&'static Field> {
    BEFORE_SECTIONS
        .iter()
        .chain(sections.iter().copied())
        .chain(AFTER_SECTIONS)
        .collect()
}

/// The table of the report's `fields` (Markdown), as docs/reference/report-schema.md shows it.
pub fn markdown_table(fields: &[&Field]) -> String {
    let mut out = String::from("| field | content |\n|---|---|\n");
    for f in fields {
        if f.content.is_empty() {
            out.push_str(&format!("| {} | |\n", f.shown));
        } else {
            out.push_str(&format!("| {} | {} |\n", f.shown, f.content));
        }
    }
    out
}

/// The rows before the passes' sections (each pass documents its own: [`crate::passes::SECTIONS`]).
pub const BEFORE_SECTIONS: &[Field] = &[
    Field {
        names: &["schema_version", "tool"],
        shown: r#"`schema_version`, `tool` {`name`, `version`}"#,
        always: true,
        content: r#""#,
    },
    Field {
        names: &["run"],
        shown: r#"`run`"#,
        always: true,
        content: r#"how the scan ran, recorded by the core at scan time: `started` (RFC 3339 UTC), `seconds`, `engine` (`local` or `ray`), `threads` (the local engine's workers; the cluster's CPUs on Ray), and when known `command` (argv, when the CLI ran it), `profile_source` (a built-in name or the TOML file), `tokenizer` (the directory). The HTML page written later from the JSON (`Report.write_html`) shows these, not the time of writing. `Report.findings` is the report without it, equal for equal corpora and options"#,
    },
    Field {
        names: &["profile"],
        shown: r#"`profile`"#,
        always: true,
        content: r#"name, description, vocab size, rules, pre-fills, mask boundary tokens, repetition thresholds, special-token ids, the strings `spelled_special` looks for, `tool_call_payload` (`true`: the payload checks ran; `false`: skipped, no tokenizer vocabulary; `null`: the profile has no payload layout)"#,
    },
    Field {
        names: &["inputs"],
        shown: r#"`inputs`"#,
        always: true,
        content: r#"per input: `path`, `format` (`parquet`/`numpy`/`arrow`/`megatron`/`llmc`/`jsonl`), `layout` (e.g. `input_ids+loss_mask`), `samples`, `tokens`, and `warning` when the reader noticed something it still reads (an Arrow stream without its end-of-stream marker; also printed on stderr)"#,
    },
    Field {
        names: &["n_samples", "n_tokens"],
        shown: r#"`n_samples`, `n_tokens`"#,
        always: true,
        content: r#"`n_tokens` is the sum of all stored sequence lengths (prompt + completion)"#,
    },
    Field {
        names: &["overall", "categories"],
        shown: r#"`overall`, `categories` {name → …}"#,
        always: true,
        content: r#"`samples`, `tokens`, `lengths` {`prompt`, `thinking`, `response`, `total` → `min`, `p1`, `p5`, `p25`, `median`, `p75`, `p95`, `p99`, `max`, `mean`, `histogram` {`edges`, `counts`}}, `ngram_coverage` {`n`, the same quantiles, `min`, `max`, `mean`, `histogram` {`edges`, `counts`}} (see below), `special_tokens` {name → count}, `anomalies` {code → count}, `truncated_in` {`reasoning`, `tool_call`, `response` → samples}: where the length limit cut the `truncated` samples (absent when none was cut), `consistency` {feature → {value → samples}}: the structural features (see `departs_from_category`), `splits` [feature]: in a category, the features no value holds the majority of (`category_split`; absent when none)"#,
    },
    Field {
        names: &["anomalies"],
        shown: r#"`anomalies`"#,
        always: true,
        content: r#"code → {`severity` (after the policy's override), `count`, `description`, `status`} for every code (0 included); `status` is what the policy made of it: `clean`, `fails`, `below_fail_on`, `tolerated` or `ignored`"#,
    },
    Field {
        names: &["verdict"],
        shown: r#"`verdict`"#,
        always: true,
        content: r#"{`fail_on`, `policy` {code → value as given}, `passed`, `failing` {code → count}, `drift` (with `--baseline`, when anything drifted: how many checks did)}: the run's outcome under the policy the scan was given, and that policy"#,
    },
    Field {
        names: &["drift"],
        shown: r#"`drift`"#,
        always: false,
        content: r#"with `--baseline`: {`baseline` (the file), `drifted` [{`check`, `category`, `subject`, `base`, `new`, `threshold`, `message`}]}: the drift checks past their thresholds (`base` and `new` the two reports' values); any fails the run, whatever `fail_on`"#,
    },
    Field {
        names: &["decoded"],
        shown: r#"`decoded`"#,
        always: false,
        content: r#"with `--decode N`: code → [{`row`, `sample_id`, `category`, `codes`, `decoder` (`tokenizer` or `ids`), `position`, `excerpt` {`before`, `at`, `after`, `ids_before`, `id_at`, `ids_after`}, `first`, `last`, `length`, `duplicate_of`, `segments` [{`kind`, `start`, `end`, `text`, `ids` (ids mode)}]}]; for `near_duplicate` the largest clusters instead (N of them): the first member with `near_duplicate_of` and `cluster` {`size`, `completion`, `representative_completion`} (the first 48 tokens of each completion); ids outside the vocabulary read `⟨oov N⟩`"#,
    },
    Field {
        names: &["skipped"],
        shown: r#"`skipped`"#,
        always: false,
        content: r#"files and folders a directory scan left aside: [{`path`, `reason`}] (absent when none)"#,
    },
    Field {
        names: &["not_checked"],
        shown: r#"`not_checked`"#,
        always: false,
        content: r#"code → why this scan could not check it (absent when it checked every code): `loss_mask_misaligned` when no input has a loss mask or labels, `spelled_special` and the `tool_call_*` codes without a tokenizer vocabulary, `out_of_vocab` when the profile has no vocabulary size. Their count of 0 means nothing; the terminal summary and `show` (for the sample's input) print the same list"#,
    },
    Field {
        names: &["pairing"],
        shown: r#"`pairing`"#,
        always: false,
        content: r#"per prompts file (absent when none): `path`, `category` (its folder's), `records`, `samples`, `matched_by` (`id` or `line`), `id_field`, `paired`, `samples_without_record`, `records_without_sample` (+ the first `records_without_sample_lines`), `duplicate_ids` (+ `duplicate_id_lines` [{`id`, `first_line`, `line`}]), `mismatched`, `shifted`, `shifts` [{`offset`, `from_row`, `to_row`, `from_line`, `samples`}], `compared` (`shape` or `tokens`), `bytes_per_token` (the calibrated ratio), `note` (why tokens were not compared although a tokenizer was given), `unrenderable` and `render_error` (samples whose record the chat template failed to render, `prompt_unrenderable`, and the first record's line with the template's message; absent when none), `records_too_large`, `max_record_bytes` and `records_too_large_lines` (with a tokenizer: records longer than `TOKSCAN_MAX_RECORD_BYTES`, not rendered, their samples compared by shape; the limit and the first lines; absent when none)"#,
    },
    Field {
        names: &["prompt_groups"],
        shown: r#"`prompt_groups`"#,
        always: false,
        content: r#"samples sharing a prompt (absent when none; see `prompt_duplicate`): `groups`, `cross_category` (groups spanning categories), `samples` (in all groups, the kept firsts included), `largest` (at most 50, by size then first row) [{`first` {`row`, `sample_id`, `category`}, `size`, `differing` (later samples with another completion), `categories` {name → samples}, `rows` (the first 20 later rows)}]"#,
    },
];

/// The rows after the passes' sections.
pub const AFTER_SECTIONS: &[Field] = &[
    Field {
        names: &["flagged_summarized"],
        shown: r#"`flagged_summarized`"#,
        always: false,
        content: r#"absent unless some code has more than `--flagged-detail` N flagged samples: the flagged samples `flagged` does not list (past the first N of each of their codes). `detail_limit` (N), `samples`, `by_code` {code → samples}, `by_category` {name → samples}, `codes` (the code bit `i` stands for), `rows` (ascending; base64 of zlib-compressed little-endian uint64 differences, the first from 0), `masks` (per row its codes as bits over `codes`; base64 of zlib-compressed little-endian uint64), `content_digest` (one key of these rows' contents, 16 hex digits, which `clean` checks). `Report.summarized()` decodes them; a sample is listed in full when, for one of its codes, fewer than N earlier samples have that code (samples with a `contaminated` match are always listed, as the `contamination` section counts each)"#,
    },
    Field {
        names: &["flagged"],
        shown: r#"`flagged`"#,
        always: true,
        content: r#"per flagged sample (the first `--flagged-detail` of each code; see `flagged_summarized`), in row order: `sample_id` (null when none), `row`, `source`, `category`, `codes`, `severity` (the worst), `positions` {code → token index}, `lengths`, `completion` [start, end), `content` (16 hex digits: a key of the sample's ids, its length and 48 of them between any padding, which `clean` checks before it removes the row), `duplicate_of` {`row`, `sample_id`} for duplicates, `prompt_of` {`row`, `sample_id`, `category`} for every later sample of a prompt group (the kept first), `repetition` {`period`, `span`} for `repetition` (the repeated block's length and the loop's length in tokens from its start; absent for other samples), `cut_in` for `truncated` (`reasoning`: inside reasoning never closed; `tool_call`: inside a tool call or tool-call section the completion opened; `response`: after them), `boundaries` [{`pos`, `token`}] (special-token positions, up to 512), `departs` {feature → {`value`, `majority`}} for `departs_from_category`, `hidden_states` {`file`, `paired_by`, `other_files`, `findings` {code → what was found}, `agreement` {`positions`, `agreed`, `disagreements` [[t, token t+1, predicted]]}} for the `hidden_*` codes"#,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_documented_once_and_the_table_has_a_row_per_entry() {
        let fields = crate::passes::report_fields();
        let mut names: Vec<&str> = fields
            .iter()
            .flat_map(|f| f.names.iter().copied())
            .collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a field documented twice");
        assert_eq!(markdown_table(&fields).lines().count(), 2 + fields.len());
        for f in &fields {
            for name in f.names {
                assert!(f.shown.contains(&format!("`{name}`")), "{name}");
            }
        }
    }
}
