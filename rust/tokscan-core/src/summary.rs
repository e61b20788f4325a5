//! Mergeable scan results: one record per sample (lengths, flags, completion hash) and per-category
//! special-token counts. Partial summaries of shards or row groups merge in any grouping; corpus-wide
//! checks (duplicates, sample-id duplicates, length outliers) run once, on the merged summary.

use std::collections::HashMap;

use crate::anomaly::N_CODES;
use crate::check::{Event, Lengths};

/// What is kept of every sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRecord {
    /// Global row index in scan order (inputs sorted by path, rows in file order).
    pub row: u64,
    /// Index of the input the sample came from.
    pub source: u32,
    /// Index into `Summary::categories`.
    pub category: u32,
    pub lengths: Lengths,
    pub flags: u64,
    /// xxh3 of the completion ids (0 for an empty completion).
    pub completion_hash: u64,
    pub completion_len: u32,
    /// Completion tokens inside a repeated n-gram (`repetition::ngram_coverage`).
    pub ngram_covered: u32,
    pub sample_id: Option<Box<str>>,
}

/// Positions kept for a flagged sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagDetail {
    pub row: u64,
    pub positions: [u32; N_CODES],
    pub completion: (u32, u32),
    /// Boundary tokens (turn starts/ends, think start/end, tool-call tokens), capped per sample.
    pub boundaries: Vec<Event>,
    /// `(period, span)` of the `repetition` loop, when flagged.
    pub repetition: Option<(u32, u32)>,
}

/// Cap on boundary events kept per flagged sample.
pub const MAX_BOUNDARIES: usize = 512;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub categories: Vec<String>,
    /// `special_counts[category][slot]`.
    pub special_counts: Vec<Vec<u64>>,
    pub records: Vec<SampleRecord>,
    pub details: Vec<FlagDetail>,
    n_slots: usize,
}

impl Summary {
    pub fn new(n_slots: usize) -> Self {
        Summary {
            n_slots,
            ..Default::default()
        }
    }

    pub fn category_index(&mut self, name: &str) -> u32 {
        if let Some(i) = self.categories.iter().position(|c| c == name) {
            return i as u32;
        }
        self.categories.push(name.to_string());
        self.special_counts.push(vec![0; self.n_slots]);
        (self.categories.len() - 1) as u32
    }

    /// Adds `other` into `self`; the result does not depend on the grouping or order of merges once
    /// [`Summary::normalize`] has run.
    pub fn merge(&mut self, other: Summary) {
        self.n_slots = self.n_slots.max(other.n_slots);
        let remap: Vec<u32> = other
            .categories
            .iter()
            .map(|c| self.category_index(c))
            .collect();
        for (ci, counts) in other.special_counts.into_iter().enumerate() {
            let mine = &mut self.special_counts[remap[ci] as usize];
            for (m, c) in mine.iter_mut().zip(counts) {
                *m += c;
            }
        }
        self.records.extend(other.records.into_iter().map(|mut r| {
            r.category = remap[r.category as usize];
            r
        }));
        self.details.extend(other.details);
    }

    /// Shifts rows and source indices, so that summaries of shards scanned apart (each numbered from 0) merge
    /// into the summary of one scan over all of them.
    pub fn rebase(&mut self, row_offset: u64, source_offset: u32) {
        for r in &mut self.records {
            r.row += row_offset;
            r.source += source_offset;
        }
        for d in &mut self.details {
            d.row += row_offset;
        }
    }

    /// Canonical order: categories sorted by name, records and details by row.
    pub fn normalize(&mut self) {
        let mut order: Vec<usize> = (0..self.categories.len()).collect();
        order.sort_by(|&a, &b| self.categories[a].cmp(&self.categories[b]));
        let mut new_index = vec![0u32; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u32;
        }
        self.categories = order.iter().map(|&i| self.categories[i].clone()).collect();
        self.special_counts = order
            .iter()
            .map(|&i| self.special_counts[i].clone())
            .collect();
        for r in &mut self.records {
            r.category = new_index[r.category as usize];
        }
        self.records.sort_by_key(|r| r.row);
        self.details.sort_by_key(|d| d.row);
    }

    /// Per-row lookup of details.
    pub fn detail_index(&self) -> HashMap<u64, usize> {
        self.details
            .iter()
            .enumerate()
            .map(|(i, d)| (d.row, i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(row: u64, total: u32) -> SampleRecord {
        SampleRecord {
            row,
            source: 0,
            category: 0,
            lengths: Lengths {
                total,
                ..Default::default()
            },
            flags: row % 3,
            completion_hash: row * 31,
            completion_len: total,
            ngram_covered: total / 3,
            sample_id: None,
        }
    }

    fn part(cats: &[(String, u64, u32)]) -> Summary {
        let mut s = Summary::new(2);
        for (c, row, total) in cats {
            let ci = s.category_index(c);
            s.special_counts[ci as usize][0] += u64::from(*total);
            let mut r = record(*row, *total);
            r.category = ci;
            s.records.push(r);
        }
        s
    }

    proptest! {
        #[test]
        fn merge_in_any_grouping_equals_one_summary(
            samples in proptest::collection::vec((0u8..4, 1u32..1000), 1..60),
            cuts in proptest::collection::vec(0usize..60, 0..6),
            reverse in any::<bool>(),
        ) {
            let all: Vec<(String, u64, u32)> =
                samples.iter().enumerate().map(|(i, (c, t))| (format!("c{c}"), i as u64, *t)).collect();
            let mut whole = part(&all);
            whole.normalize();
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (all.len() + 1)).collect();
            bounds.push(0);
            bounds.push(all.len());
            bounds.sort_unstable();
            let mut parts: Vec<Summary> = bounds.windows(2).map(|w| part(&all[w[0]..w[1]])).collect();
            if reverse {
                parts.reverse();
            }
            let mut merged = Summary::new(2);
            for p in parts {
                merged.merge(p);
            }
            merged.normalize();
            prop_assert_eq!(merged, whole);
        }
    }
}
