//! The report: what a scan found, as serializable types. Built from a merged [`Summary`] after the
//! corpus-wide checks. The JSON schema is documented in the README; `SCHEMA_VERSION` changes when a field
//! changes meaning or is removed.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::anomaly::{codes_in, Code, Severity};
use crate::check::NO_POS;
use crate::policy::{Policy, Status};
use crate::profile::Profile;
use crate::repetition::COVERAGE_N;
use crate::stats::{percentile_f64, CoverageStats, LengthStats};
use crate::summary::{SampleRecord, Summary};

pub const SCHEMA_VERSION: u32 = 1;

/// Minimum samples in a category before length outliers are judged.
pub const OUTLIER_MIN_SAMPLES: usize = 20;
/// Tukey "far out" fence multiplier on log2 lengths.
pub const OUTLIER_FENCE: f64 = 3.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputInfo {
    pub path: String,
    pub format: String,
    pub layout: String,
    pub samples: u64,
    pub tokens: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategoryStats {
    pub samples: u64,
    pub tokens: u64,
    /// `prompt`, `thinking`, `response`, `total`.
    pub lengths: BTreeMap<String, LengthStats>,
    /// Per-sample fraction of completion tokens inside a repeated n-gram; present when the scan computed
    /// it (`--ngram-coverage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ngram_coverage: Option<CoverageStats>,
    pub special_tokens: BTreeMap<String, u64>,
    pub anomalies: BTreeMap<String, u64>,
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
    pub sample_id: Option<String>,
    pub row: u64,
    pub source: String,
    pub category: String,
    pub codes: Vec<String>,
    pub severity: Severity,
    pub positions: BTreeMap<String, u32>,
    pub lengths: FlaggedLengths,
    /// Completion range `[start, end)` in the sequence.
    pub completion: [u32; 2],
    /// For `duplicate` / `sample_id_duplicate`: the first sample with the same completion / id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duplicate_of: Option<FirstSeen>,
    /// For `repetition`: the loop's block length and total span in tokens.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub repetition: Option<LoopInfo>,
    pub boundaries: Vec<Boundary>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LoopInfo {
    pub period: u32,
    pub span: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FirstSeen {
    pub row: u64,
    pub sample_id: Option<String>,
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
}

/// Severity of each code, with the policy's overrides applied.
pub fn severities(policy: &Policy) -> [Severity; crate::anomaly::N_CODES] {
    let mut s = [Severity::Info; crate::anomaly::N_CODES];
    for c in Code::ALL {
        s[c.index()] = policy.severity(*c);
    }
    s
}

/// Runs the corpus-wide checks on a normalized summary, setting flags on its records. Returns, per row,
/// the first sample a duplicate repeats.
pub fn corpus_checks(summary: &mut Summary) -> HashMap<u64, FirstSeen> {
    let mut first_seen = HashMap::new();
    let recs = &mut summary.records;
    // Duplicate completions: same hash and length as an earlier row.
    let mut order: Vec<usize> = (0..recs.len())
        .filter(|&i| recs[i].completion_len > 0)
        .collect();
    order.sort_by_key(|&i| (recs[i].completion_hash, recs[i].completion_len, recs[i].row));
    let key = |i: usize| (recs[i].completion_hash, recs[i].completion_len);
    let groups: Vec<Vec<usize>> = order
        .chunk_by(|&a, &b| key(a) == key(b))
        .map(<[usize]>::to_vec)
        .collect();
    for w in groups {
        let first = w[0];
        let seen = FirstSeen {
            row: recs[first].row,
            sample_id: recs[first].sample_id.as_deref().map(str::to_string),
        };
        for &i in &w[1..] {
            recs[i].flags |= Code::Duplicate.bit();
            first_seen.insert(recs[i].row, seen.clone());
        }
    }
    // Sample ids seen before.
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut dup_ids = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        if let Some(id) = r.sample_id.as_deref() {
            match ids.get(id) {
                Some(&first) => dup_ids.push((i, first)),
                None => {
                    ids.insert(id, i);
                }
            }
        }
    }
    for (i, first) in dup_ids {
        recs[i].flags |= Code::SampleIdDuplicate.bit();
        let seen = FirstSeen {
            row: recs[first].row,
            sample_id: recs[first].sample_id.as_deref().map(str::to_string),
        };
        first_seen.entry(recs[i].row).or_insert(seen);
    }
    // Length outliers per category, on log2 of the total length.
    for c in 0..summary.categories.len() as u32 {
        let idx: Vec<usize> = (0..recs.len()).filter(|&i| recs[i].category == c).collect();
        if idx.len() < OUTLIER_MIN_SAMPLES {
            continue;
        }
        let log = |r: &SampleRecord| (f64::from(r.lengths.total) + 1.0).log2();
        let mut v: Vec<f64> = idx.iter().map(|&i| log(&recs[i])).collect();
        v.sort_by(f64::total_cmp);
        let (q1, q3) = (percentile_f64(&v, 25.0), percentile_f64(&v, 75.0));
        let iqr = (q3 - q1).max(0.5);
        let (lo, hi) = (q1 - OUTLIER_FENCE * iqr, q3 + OUTLIER_FENCE * iqr);
        for &i in &idx {
            let l = log(&recs[i]);
            if l < lo || l > hi {
                recs[i].flags |= Code::LengthOutlier.bit();
            }
        }
    }
    first_seen
}

fn category_stats(
    recs: &[&SampleRecord],
    special_counts: &[u64],
    profile: &Profile,
    coverage: bool,
) -> CategoryStats {
    let series = |f: fn(&SampleRecord) -> u32| -> LengthStats {
        let mut v: Vec<u32> = recs.iter().map(|r| f(r)).collect();
        LengthStats::of(&mut v)
    };
    let mut lengths = BTreeMap::new();
    lengths.insert("prompt".to_string(), series(|r| r.lengths.prompt));
    lengths.insert("thinking".to_string(), series(|r| r.lengths.thinking));
    lengths.insert("response".to_string(), series(|r| r.lengths.response));
    lengths.insert("total".to_string(), series(|r| r.lengths.total));
    let ngram_coverage = coverage.then(|| {
        CoverageStats::of(
            COVERAGE_N as u32,
            recs.iter().map(|r| (r.ngram_covered, r.completion_len)),
        )
    });
    let mut anomalies: BTreeMap<String, u64> = Code::ALL
        .iter()
        .map(|c| (c.as_str().to_string(), 0))
        .collect();
    for r in recs {
        for c in codes_in(r.flags) {
            *anomalies.get_mut(c.as_str()).expect("all codes") += 1;
        }
    }
    CategoryStats {
        samples: recs.len() as u64,
        tokens: recs.iter().map(|r| u64::from(r.lengths.total)).sum(),
        lengths,
        ngram_coverage,
        special_tokens: profile
            .specials
            .iter()
            .zip(special_counts)
            .map(|(s, &n)| (s.name.clone(), n))
            .collect(),
        anomalies,
    }
}

/// Builds the report from a summary (normalizes it and runs the corpus-wide checks first).
pub fn build_report(
    mut summary: Summary,
    profile: &Profile,
    inputs: Vec<InputInfo>,
    policy: &Policy,
    coverage: bool,
) -> Report {
    summary.normalize();
    let first_seen = corpus_checks(&mut summary);
    let sev = severities(policy);
    let n_slots = profile.specials.len();
    let mut total_counts = vec![0u64; n_slots];
    let mut categories = BTreeMap::new();
    for (ci, name) in summary.categories.iter().enumerate() {
        let recs: Vec<&SampleRecord> = summary
            .records
            .iter()
            .filter(|r| r.category == ci as u32)
            .collect();
        let counts = &summary.special_counts[ci];
        for (t, c) in total_counts.iter_mut().zip(counts) {
            *t += c;
        }
        categories.insert(
            name.clone(),
            category_stats(&recs, counts, profile, coverage),
        );
    }
    let all: Vec<&SampleRecord> = summary.records.iter().collect();
    let overall = category_stats(&all, &total_counts, profile, coverage);
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
        passed: failing.is_empty(),
        failing,
    };
    let details = summary.detail_index();
    let flagged = summary
        .records
        .iter()
        .filter(|r| r.flags != 0)
        .map(|r| {
            let detail = details.get(&r.row).map(|&i| &summary.details[i]);
            let positions = detail
                .map(|d| {
                    codes_in(r.flags)
                        .filter(|c| d.positions[c.index()] != NO_POS)
                        .map(|c| (c.as_str().to_string(), d.positions[c.index()]))
                        .collect()
                })
                .unwrap_or_default();
            let boundaries = detail
                .map(|d| {
                    d.boundaries
                        .iter()
                        .map(|e| Boundary {
                            pos: e.pos,
                            token: profile.specials[e.slot as usize].name.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            Flagged {
                sample_id: r.sample_id.as_deref().map(str::to_string),
                row: r.row,
                source: inputs
                    .get(r.source as usize)
                    .map_or_else(String::new, |i| i.path.clone()),
                category: summary.categories[r.category as usize].clone(),
                codes: codes_in(r.flags).map(|c| c.as_str().to_string()).collect(),
                severity: codes_in(r.flags)
                    .map(|c| sev[c.index()])
                    .max()
                    .unwrap_or(Severity::Info),
                positions,
                lengths: FlaggedLengths {
                    prompt: r.lengths.prompt,
                    thinking: r.lengths.thinking,
                    response: r.lengths.response,
                    total: r.lengths.total,
                },
                completion: detail.map_or([r.lengths.prompt, r.lengths.total], |d| {
                    [d.completion.0, d.completion.1]
                }),
                duplicate_of: first_seen.get(&r.row).cloned(),
                repetition: detail
                    .and_then(|d| d.repetition)
                    .filter(|_| r.flags & Code::Repetition.bit() != 0)
                    .map(|(period, span)| LoopInfo { period, span }),
                boundaries,
            }
        })
        .collect();
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Lengths;

    fn rec(row: u64, category: u32, total: u32, hash: u64, id: Option<&str>) -> SampleRecord {
        SampleRecord {
            row,
            source: 0,
            category,
            lengths: Lengths {
                total,
                ..Default::default()
            },
            flags: 0,
            completion_hash: hash,
            completion_len: if hash == 0 { 0 } else { 10 },
            ngram_covered: 0,
            sample_id: id.map(Box::from),
        }
    }

    #[test]
    fn corpus_checks_flag_later_duplicates_ids_and_outliers() {
        let mut s = Summary::new(0);
        s.category_index("a");
        s.category_index("b");
        for row in 0..30u64 {
            s.records.push(rec(
                row,
                0,
                100 + (row as u32 % 7) * 10,
                1000 + row,
                Some(&format!("id{row}")),
            ));
        }
        s.records.push(rec(30, 0, 100_000, 5000, Some("big"))); // far outlier
        s.records.push(rec(31, 0, 120, 1005, Some("id3"))); // same completion as row 5, same id as row 3
        s.records.push(rec(32, 1, 5, 0, None)); // empty completions are never duplicates
        s.records.push(rec(33, 1, 5, 0, None));
        let seen = corpus_checks(&mut s);
        let flagged = |c: Code| {
            s.records
                .iter()
                .filter(|r| r.flags & c.bit() != 0)
                .map(|r| r.row)
                .collect::<Vec<_>>()
        };
        assert_eq!(flagged(Code::Duplicate), vec![31]);
        assert_eq!(flagged(Code::SampleIdDuplicate), vec![31]);
        assert_eq!(flagged(Code::LengthOutlier), vec![30]); // category b has too few samples to judge
        assert_eq!(seen[&31].row, 5);
    }
}
