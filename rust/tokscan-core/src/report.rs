//! The report: what a scan found, as serializable types. Built from the merged [`Partial`] summary of the
//! corpus and what the corpus-wide checks ([`crate::corpus_checks`]) flagged. The JSON schema is documented in docs/reference/report-schema.md; `SCHEMA_VERSION` changes when a field
//! changes meaning or is removed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::anomaly::{codes_in, Code, Severity};
use crate::check::NO_POS;
use crate::flagged::{FirstSeen, FlaggedSample, PromptFirst};
pub use crate::inputs::{InputInfo, SkippedInfo};
use crate::policy::{Policy, RuleValue, Status};
use crate::profile::Profile;
use crate::sample_id::SampleId;
use crate::stats::LengthStats;
use crate::summary::{CategoryPartial, Partial};

/// The schema this tokscan writes; version 2 added `run`, version 3 keeps an integer id column's
/// `sample_id`s as JSON numbers (they were strings).
pub const SCHEMA_VERSION: u32 = 3;
/// The schemas this tokscan reads (a version-1 report has no `run`; ids of versions 1 and 2 are strings).
pub const READABLE_SCHEMAS: [u32; 3] = [1, 2, 3];

/// How a scan ran: recorded by the core at scan time, so that a page written later from the JSON (or another
/// tool reading it) dates and describes the run, not the moment of writing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunInfo {
    /// When the scan started, RFC 3339 UTC to the second.
    pub started: String,
    /// Wall-clock seconds from opening the inputs to the report.
    pub seconds: f64,
    /// `local` or `ray`.
    pub engine: String,
    /// Worker threads of the local engine; the cluster's CPUs on Ray.
    pub threads: usize,
    /// The command line, when the CLI ran the scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Where the profile came from: a built-in name or a TOML file's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_source: Option<String>,
    /// The tokenizer directory given, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
}

impl RunInfo {
    /// `template` (command, profile source, tokenizer as the caller knows them) completed with the start time,
    /// duration, engine and threads.
    pub fn of(
        template: &RunInfo,
        started: std::time::SystemTime,
        seconds: f64,
        engine: &str,
        threads: usize,
    ) -> RunInfo {
        RunInfo {
            started: humantime::format_rfc3339_seconds(started).to_string(),
            seconds,
            engine: engine.into(),
            threads,
            ..template.clone()
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategoryStats {
    pub samples: u64,
    pub tokens: u64,
    /// `prompt`, `thinking`, `response`, `total`.
    pub lengths: BTreeMap<String, LengthStats>,
    /// What corpus-wide passes say about the category, each under its key (`ngram_coverage`: the share of
    /// each completion's tokens inside a repeated n-gram, with `--ngram-coverage`).
    #[serde(flatten)]
    pub sections: Sections,
    pub special_tokens: BTreeMap<String, u64>,
    pub anomalies: BTreeMap<String, u64>,
    /// Samples per value of each structural feature (`system`, `thinking`, `tool_turns`, `tool_calls`,
    /// `prefill`, `mask_start`, `end_of_turn_trained`), over the samples it applies to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consistency: BTreeMap<String, BTreeMap<String, u64>>,
    /// The features on which no value holds the majority share (`category_split`; absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<String>,
    /// `truncated` samples by where the length limit cut them: `reasoning`, `tool_call`, `response` (absent
    /// when none was cut).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub truncated_in: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnomalySummary {
    /// After the policy's override.
    pub severity: Severity,
    pub count: u64,
    pub description: String,
    /// What the policy made of the findings: `clean`, `fails`, `below_fail_on`, `tolerated`, `ignored`.
    pub status: Status,
}

/// The run's outcome under the policy the scan was given.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub fail_on: String,
    /// The `[policy]` table the scan ran with (code -> severity, "ignore", a count or a rate), as given.
    #[serde(default)]
    pub policy: BTreeMap<String, RuleValue>,
    pub passed: bool,
    /// Codes that fail the run, with their counts.
    pub failing: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Boundary {
    pub pos: u32,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlaggedLengths {
    pub prompt: u32,
    pub thinking: u32,
    pub response: u32,
    pub total: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flagged {
    pub sample_id: Option<SampleId>,
    pub row: u64,
    pub source: String,
    pub category: String,
    pub codes: Vec<String>,
    pub severity: Severity,
    pub positions: BTreeMap<String, u32>,
    pub lengths: FlaggedLengths,
    /// Completion range `[start, end)` in the sequence.
    pub completion: [u32; 2],
    /// A key of the sample's content (16 hex digits; [`crate::token::content_key`]): `clean` reads the row
    /// again and removes it only if it still holds this sample. Empty in a report written before it.
    #[serde(default)]
    pub content: String,
    /// For `duplicate` / `sample_id_duplicate`: the first sample with the same completion / id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duplicate_of: Option<FirstSeen>,
    /// For `prompt_duplicate` / `prompt_cross_category` (and any later sample of a prompt group): the
    /// group's kept first sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_of: Option<PromptFirst>,
    /// What corpus-wide passes say about the sample, each under its key: `contamination` (the benchmark file
    /// and item, the part of the sample, its matching windows), `near_duplicate_of` (the cluster's
    /// representative, kept), `hidden_states` (its hidden-state file, how it was paired, what was found in it
    /// and its next-token agreement).
    #[serde(flatten)]
    pub attached: Sections,
    /// For `departs_from_category`: per feature, the sample's value and its category's majority.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub departs: BTreeMap<String, Departure>,
    /// For `repetition`: the loop's block length and total span in tokens.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub repetition: Option<LoopInfo>,
    /// For `truncated`: where the length limit cut it (`reasoning`, `tool_call` or `response`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cut_in: Option<String>,
    pub boundaries: Vec<Boundary>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Departure {
    pub value: String,
    pub majority: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LoopInfo {
    pub period: u32,
    pub span: u32,
}

/// One group of samples sharing a prompt (see `prompt_duplicate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptGroup {
    /// The kept first sample.
    pub first: PromptFirst,
    /// Samples in the group: the first and every later one the report lists with it.
    pub size: u64,
    /// Of them, those with a completion other than the first's (`prompt_duplicate`).
    pub differing: u64,
    /// Samples per category, the first's included.
    pub categories: BTreeMap<String, u64>,
    /// Rows of the later samples, in row order (at most [`PROMPT_GROUP_ROWS`]).
    pub rows: Vec<u64>,
}

/// Rows listed per prompt group, and groups listed (largest first).
pub const PROMPT_GROUP_ROWS: usize = 20;
pub const PROMPT_GROUPS_LISTED: usize = 50;

/// The prompt groups of a corpus: samples whose prompts are identical and which differ in completion or
/// category.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptGroups {
    pub groups: u64,
    /// Groups with samples in more than one category.
    pub cross_category: u64,
    /// Samples in all groups, the kept firsts included.
    pub samples: u64,
    /// The largest groups (by size, then first row), at most [`PROMPT_GROUPS_LISTED`].
    pub largest: Vec<PromptGroup>,
}

impl PromptGroups {
    /// The groups named by the flagged samples' `prompt_of`.
    pub fn of(flagged: &[FlaggedSample]) -> PromptGroups {
        let mut by_first: BTreeMap<u64, PromptGroup> = BTreeMap::new();
        for f in flagged {
            let Some(first) = &f.prompt_of else { continue };
            let g = by_first.entry(first.row).or_insert_with(|| PromptGroup {
                first: (**first).clone(),
                size: 1,
                differing: 0,
                categories: BTreeMap::from([(first.category.clone(), 1)]),
                rows: Vec::new(),
            });
            g.size += 1;
            g.differing += u64::from(f.flags & Code::PromptDuplicate.bit() != 0);
            *g.categories.entry(f.category.clone()).or_insert(0) += 1;
            if g.rows.len() < PROMPT_GROUP_ROWS {
                g.rows.push(f.row);
            }
        }
        let mut out = PromptGroups {
            groups: by_first.len() as u64,
            cross_category: by_first.values().filter(|g| g.categories.len() > 1).count() as u64,
            samples: by_first.values().map(|g| g.size).sum(),
            largest: by_first.into_values().collect(),
        };
        out.largest
            .sort_by(|a, b| b.size.cmp(&a.size).then(a.first.row.cmp(&b.first.row)));
        out.largest.truncate(PROMPT_GROUPS_LISTED);
        out
    }
}

/// JSON written by other modules under their keys, in order: the corpus-wide passes' report sections, and
/// their evidence in a flagged entry. Held as text, so that the report needs none of their types.
#[derive(Debug, Clone, Default)]
pub struct Sections(pub Vec<(String, Box<serde_json::value::RawValue>)>);

impl Sections {
    /// Sections from their keys and JSON text (what [`crate::passes::Findings`] carry).
    pub fn of(sections: Vec<(String, String)>) -> crate::error::Result<Sections> {
        sections
            .into_iter()
            .map(|(key, json)| {
                let raw = serde_json::value::RawValue::from_string(json).map_err(|e| {
                    crate::error::Error::Usage(format!("internal: the {key} section: {e}"))
                })?;
                Ok((key, raw))
            })
            .collect::<crate::error::Result<_>>()
            .map(Sections)
    }

    /// A flagged sample's evidence, in its order. Its JSON was written by [`crate::passes::attach`] (or
    /// checked when it arrived from another process); text that is not JSON would be written as a string,
    /// never dropped.
    fn attached(attached: Vec<crate::flagged::Attached>) -> Sections {
        Sections(
            attached
                .into_iter()
                .map(|a| {
                    let raw = match serde_json::from_str::<&serde_json::value::RawValue>(&a.json) {
                        Ok(raw) => raw.to_owned(),
                        Err(_) => {
                            serde_json::value::to_raw_value(&a.json).expect("a string is JSON")
                        }
                    };
                    (a.key, raw)
                })
                .collect(),
        )
    }

    /// Adds `key`'s section (JSON text a pass wrote, or checked when it came from another process).
    pub fn push(&mut self, key: &str, json: String) -> crate::error::Result<()> {
        let mut more = Sections::of(vec![(key.to_string(), json)])?;
        self.0.append(&mut more.0);
        Ok(())
    }

    /// The section under `key`.
    pub fn get(&self, key: &str) -> Option<&serde_json::value::RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }
}

impl Serialize for Sections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Sections {
    /// The keys a report's struct does not name (flattened: every other key), in key order.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let all = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        all.into_iter()
            .map(|(k, v)| {
                serde_json::value::to_raw_value(&v)
                    .map(|raw| (k, raw))
                    .map_err(serde::de::Error::custom)
            })
            .collect::<std::result::Result<_, _>>()
            .map(Sections)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub tool: Tool,
    pub profile: serde_json::Value,
    pub inputs: Vec<InputInfo>,
    pub n_samples: u64,
    pub n_tokens: u64,
    pub overall: CategoryStats,
    pub categories: BTreeMap<String, CategoryStats>,
    pub anomalies: BTreeMap<String, AnomalySummary>,
    pub verdict: Verdict,
    pub flagged: Vec<Flagged>,
    /// The flagged samples past the detail limit, which `flagged` does not list; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flagged_summarized: Option<FlaggedSummarized>,
    /// Files and folders a directory scan left aside, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedInfo>,
    /// Samples sharing a prompt (`prompt_duplicate`, `prompt_cross_category`); absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_groups: Option<PromptGroups>,
    /// The corpus-wide passes' sections ([`crate::passes`]), each under its pass's name, in the registry's
    /// order: `pairing` (one entry per prompts file the samples were paired with), `contamination`,
    /// `near_duplicates`, `draft_vocab`, `hidden_states`.
    #[serde(flatten)]
    pub sections: Sections,
    /// How the scan ran (absent from version-1 reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
    /// Codes this scan could not check, with why (their count of 0 means nothing); absent when it checked
    /// every code.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_checked: BTreeMap<String, String>,
}

/// The codes a scan of inputs of `layouts` (e.g. `input_ids+loss_mask`) with `profile` cannot check, with
/// why: no input carries a loss mask (or labels), no tokenizer vocabulary for `spelled_special` and the
/// tool-call payload checks, no vocabulary size for `out_of_vocab`.
pub fn not_checked<'a>(
    profile: &Profile,
    layouts: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let layouts: Vec<&str> = layouts.into_iter().collect();
    let masked = layouts
        .iter()
        .any(|l| l.contains("loss_mask") || l.contains("labels"));
    if !layouts.is_empty() && !masked {
        out.insert(
            Code::LossMaskMisaligned.as_str().to_string(),
            "no input has a loss mask or labels".to_string(),
        );
    }
    let vocabulary = "needs --tokenizer DIR with a vocabulary";
    if profile.spelled.is_none() {
        out.insert(
            Code::SpelledSpecial.as_str().to_string(),
            vocabulary.to_string(),
        );
    }
    if profile.payload_checked() == Some(false) {
        for c in [
            Code::ToolCallArguments,
            Code::ToolCallName,
            Code::ToolCallUndeclared,
        ] {
            out.insert(c.as_str().to_string(), vocabulary.to_string());
        }
    }
    if u64::from(profile.vocab_size) >= u64::from(u32::MAX) {
        out.insert(
            Code::OutOfVocab.as_str().to_string(),
            "the profile has no vocabulary size".to_string(),
        );
    }
    out
}

/// The flagged samples a scan kept without detail (past `detail_limit` for each of their codes): every row
/// and its codes, packed, so that `--exclude` and `clean` reach every flagged sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlaggedSummarized {
    /// Full detail was kept for the first this many flagged samples of each code (in row order).
    pub detail_limit: u64,
    /// Samples listed here (not in `flagged`).
    pub samples: u64,
    /// Of them, per code and per category.
    pub by_code: BTreeMap<String, u64>,
    pub by_category: BTreeMap<String, u64>,
    /// The code bit `i` of each entry of `masks` stands for.
    pub codes: Vec<String>,
    /// The rows, ascending: base64 of zlib-compressed little-endian u64 differences (the first from 0).
    pub rows: String,
    /// Per row, its codes as a bit mask over `codes`: base64 of zlib-compressed little-endian u64.
    pub masks: String,
    /// One key of all these rows' contents ([`crate::token::content_digest`] of each row and its content key,
    /// 16 hex digits; empty in a report written before it): `clean` reads the rows again and compares.
    #[serde(default)]
    pub content_digest: String,
}

fn packed(values: impl Iterator<Item = u64>) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    for v in values {
        z.write_all(&v.to_le_bytes()).expect("writing to memory");
    }
    base64::engine::general_purpose::STANDARD.encode(z.finish().expect("writing to memory"))
}

fn unpacked(text: &str, what: &str) -> Result<Vec<u64>, String> {
    use base64::Engine;
    use std::io::Read;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("flagged_summarized.{what}: {e}"))?;
    let mut bytes = Vec::new();
    flate2::read::ZlibDecoder::new(&raw[..])
        .read_to_end(&mut bytes)
        .map_err(|e| format!("flagged_summarized.{what}: {e}"))?;
    if bytes.len() % 8 != 0 {
        return Err(format!(
            "flagged_summarized.{what}: not a list of 64-bit values"
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

impl FlaggedSummarized {
    /// The summarized samples of a partial whose detail limit was applied; `None` when there are none.
    pub fn of(partial: &crate::summary::Partial) -> Option<FlaggedSummarized> {
        if partial.summarized.is_empty() {
            return None;
        }
        let mut any = 0u64;
        let mut by_code = [0u64; crate::anomaly::N_CODES];
        let mut by_category = vec![0u64; partial.summarized_categories.len()];
        for s in &partial.summarized {
            any |= s.flags;
            for c in codes_in(s.flags) {
                by_code[c.index()] += 1;
            }
            by_category[s.category as usize] += 1;
        }
        let present: Vec<Code> = codes_in(any).collect();
        let mask = |flags: u64| {
            present
                .iter()
                .enumerate()
                .filter(|(_, c)| flags & c.bit() != 0)
                .fold(0u64, |m, (i, _)| m | 1 << i)
        };
        let mut prev = 0;
        Some(FlaggedSummarized {
            detail_limit: partial.detail_limit,
            samples: partial.summarized.len() as u64,
            by_code: present
                .iter()
                .map(|c| (c.as_str().to_string(), by_code[c.index()]))
                .collect(),
            by_category: partial
                .summarized_categories
                .iter()
                .zip(by_category)
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| (c.clone(), n))
                .collect(),
            codes: present.iter().map(|c| c.as_str().to_string()).collect(),
            rows: packed(partial.summarized.iter().map(|s| {
                let d = s.row - prev;
                prev = s.row;
                d
            })),
            masks: packed(partial.summarized.iter().map(|s| mask(s.flags))),
            content_digest: format!(
                "{:016x}",
                crate::token::content_digest(partial.summarized.iter().map(|s| (s.row, s.content)))
            ),
        })
    }

    /// The rows and masks, unpacked (an error naming the field when they do not decode or disagree).
    pub fn unpack(&self) -> Result<(Vec<u64>, Vec<u64>), String> {
        let mut rows = unpacked(&self.rows, "rows")?;
        let masks = unpacked(&self.masks, "masks")?;
        if rows.len() != masks.len() || rows.len() as u64 != self.samples {
            return Err(format!(
                "flagged_summarized: {} rows and {} masks for {} samples",
                rows.len(),
                masks.len(),
                self.samples
            ));
        }
        let mut acc = 0u64;
        for r in &mut rows {
            acc = acc
                .checked_add(*r)
                .ok_or("flagged_summarized.rows: overflow")?;
            *r = acc;
        }
        Ok((rows, masks))
    }
}

/// Severity of each code, with the policy's overrides applied.
pub fn severities(policy: &Policy) -> [Severity; crate::anomaly::N_CODES] {
    let mut s = [Severity::Info; crate::anomaly::N_CODES];
    for c in Code::ALL {
        s[c.index()] = policy.severity(*c);
    }
    s
}

/// `c`'s statistics; `consistency` the thresholds of [`Partial::consistency`], `None` for the whole corpus (a
/// mix of categories is not expected to agree).
fn category_stats(
    c: &CategoryPartial,
    profile: &Profile,
    consistency: Option<(u32, u64)>,
) -> CategoryStats {
    use crate::check::features::FEATURES;
    use crate::summary::{agreement, Agreement};
    let splits: Vec<String> = consistency
        .map(|t| {
            (0..FEATURES.len())
                .filter(|&f| agreement(c, f, t) == Agreement::Split)
                .map(|f| FEATURES[f].to_string())
                .collect()
        })
        .unwrap_or_default();
    let mut lengths = BTreeMap::new();
    lengths.insert("prompt".to_string(), LengthStats::from_dist(&c.prompt));
    lengths.insert("thinking".to_string(), LengthStats::from_dist(&c.thinking));
    lengths.insert("response".to_string(), LengthStats::from_dist(&c.response));
    lengths.insert("total".to_string(), LengthStats::from_dist(&c.total));
    CategoryStats {
        samples: c.samples,
        tokens: c.tokens,
        lengths,
        sections: Sections::default(),
        special_tokens: profile
            .specials
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.name.clone(),
                    c.special_counts.get(i).copied().unwrap_or(0),
                )
            })
            .collect(),
        anomalies: Code::ALL
            .iter()
            .map(|code| (code.as_str().to_string(), c.codes[code.index()]))
            .collect(),
        splits,
        consistency: {
            use crate::check::features::{value_name, FEATURES};
            let mut m: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
            for (k, n) in &c.features {
                let f = usize::from(k >> 4);
                if let Some(name) = FEATURES.get(f) {
                    m.entry((*name).to_string())
                        .or_default()
                        .insert(value_name(f, (k & 0xF) as u8), *n);
                }
            }
            m
        },
        truncated_in: crate::check::CutIn::ALL
            .iter()
            .zip(c.cut_in)
            .filter(|(_, n)| *n > 0)
            .map(|(place, n)| (place.as_str().to_string(), n))
            .collect(),
    }
}

fn flagged_entry(
    f: FlaggedSample,
    profile: &Profile,
    inputs: &[InputInfo],
    sev: &[Severity; crate::anomaly::N_CODES],
) -> Flagged {
    let detail = f.detail.as_ref();
    let positions = detail
        .map(|d| {
            codes_in(f.flags)
                .filter(|c| d.positions[c.index()] != NO_POS)
                .map(|c| (c.as_str().to_string(), d.positions[c.index()]))
                .collect()
        })
        .unwrap_or_default();
    let boundaries = detail
        .map(|d| {
            d.boundary_events()
                .map(|e| Boundary {
                    pos: e.pos,
                    token: profile.specials[e.slot as usize].name.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Flagged {
        row: f.row,
        source: inputs
            .get(f.source as usize)
            .map_or_else(String::new, |i| i.path.clone()),
        codes: codes_in(f.flags).map(|c| c.as_str().to_string()).collect(),
        severity: codes_in(f.flags)
            .map(|c| sev[c.index()])
            .max()
            .unwrap_or(Severity::Info),
        positions,
        lengths: FlaggedLengths {
            prompt: f.lengths.prompt,
            thinking: f.lengths.thinking,
            response: f.lengths.response,
            total: f.lengths.total,
        },
        completion: detail.map_or([f.lengths.prompt, f.lengths.total], |d| {
            [d.completion.0, d.completion.1]
        }),
        content: format!("{:016x}", f.content),
        repetition: detail
            .and_then(|d| d.repetition)
            .filter(|_| f.flags & Code::Repetition.bit() != 0)
            .map(|(period, span)| LoopInfo { period, span }),
        cut_in: detail
            .and_then(|d| d.cut)
            .filter(|_| f.flags & Code::Truncated.bit() != 0)
            .and_then(crate::check::CutIn::from_index)
            .map(|c| c.as_str().to_string()),
        boundaries,
        departs: {
            use crate::check::features::{get, value_name, FEATURES};
            let (bits, maj, own) = f.departs;
            (0..FEATURES.len())
                .filter(|i| bits & (1 << i) != 0 && f.flags & Code::DepartsFromCategory.bit() != 0)
                .map(|i| {
                    (
                        FEATURES[i].to_string(),
                        Departure {
                            value: value_name(i, get(own, i)),
                            majority: value_name(i, get(maj, i)),
                        },
                    )
                })
                .collect()
        },
        duplicate_of: f.duplicate_of,
        prompt_of: f.prompt_of.map(|p| *p),
        attached: Sections::attached(f.attached),
        sample_id: f.sample_id,
        category: f.category,
    }
}

/// Builds the report from the merged partial summary of the whole corpus and the samples the corpus-wide
/// checks flagged ([`crate::corpus_checks`]). `inputs` describe the corpus's inputs (their sample and token
/// counts are filled in from the partial).
#[allow(clippy::too_many_arguments)]
pub fn build_report(
    mut partial: Partial,
    corpus_flagged: crate::summary::Found,
    profile: &Profile,
    mut inputs: Vec<InputInfo>,
    policy: &Policy,
    corpus_counts: &[(Code, u64)],
) -> Report {
    for f in &corpus_flagged.full {
        partial.category(&f.category).add_codes(f.flags);
    }
    for s in &corpus_flagged.summarized {
        partial
            .category(&corpus_flagged.categories[s.category as usize])
            .add_codes(s.flags);
    }
    for (k, c) in &partial.inputs {
        if let Some(info) = inputs.get_mut(*k as usize) {
            info.samples = c.samples;
            info.tokens = c.tokens;
        }
    }
    let sev = severities(policy);
    let mut all = CategoryPartial::new(profile.specials.len());
    let mut categories = BTreeMap::new();
    for (name, c) in &partial.categories {
        all.merge(c);
        let mut stats = category_stats(c, profile, Some(partial.consistency));
        // One finding per feature the category is split on (no sample carries it).
        let split = stats.splits.len() as u64;
        stats
            .anomalies
            .insert(Code::CategorySplit.as_str().to_string(), split);
        all.codes[Code::CategorySplit.index()] += split;
        categories.insert(name.clone(), stats);
    }
    let mut overall = category_stats(&all, profile, None);
    // Findings of the corpus that no sample carries (a file of a dump that pairs with no sample, a draft
    // vocabulary mapping that does not fit the corpus).
    for (c, n) in corpus_counts {
        *overall.anomalies.entry(c.as_str().to_string()).or_default() += n;
    }
    let anomalies: BTreeMap<String, AnomalySummary> = Code::ALL
        .iter()
        .map(|c| {
            let count = overall.anomalies[c.as_str()];
            let a = AnomalySummary {
                severity: sev[c.index()],
                count,
                description: c.description().to_string(),
                status: policy.status(*c, count, overall.samples),
            };
            (c.as_str().to_string(), a)
        })
        .collect();
    let failing: BTreeMap<String, u64> = anomalies
        .iter()
        .filter(|(_, a)| a.status == Status::Fails)
        .map(|(c, a)| (c.clone(), a.count))
        .collect();
    let verdict = Verdict {
        fail_on: policy.fail_on.as_str().to_string(),
        policy: policy.table().clone(),
        passed: failing.is_empty(),
        failing,
    };
    // Prompt groups come from the corpus-wide checks alone (only they set `prompt_of`), so they are counted
    // before the detail limit is applied.
    let groups = PromptGroups::of(&corpus_flagged.full);
    partial.absorb_corpus(corpus_flagged);
    let flagged_summarized = FlaggedSummarized::of(&partial);
    let flagged = std::mem::take(&mut partial.flagged)
        .into_iter()
        .map(|f| flagged_entry(f, profile, &inputs, &sev))
        .collect();
    let unchecked = not_checked(profile, inputs.iter().map(|i| i.layout.as_str()));
    Report {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "tokscan".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        profile: profile.describe(),
        n_samples: overall.samples,
        n_tokens: overall.tokens,
        inputs,
        overall,
        categories,
        anomalies,
        verdict,
        flagged,
        flagged_summarized,
        skipped: Vec::new(),
        prompt_groups: (groups.groups > 0).then_some(groups),
        sections: Sections::default(),
        run: None,
        not_checked: unchecked,
    }
}
