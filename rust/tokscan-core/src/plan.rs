//! Planning a scan for many processes (a Ray cluster): the corpus is opened once on the driver (headers and
//! metadata only), its units of work are grouped into tasks of contiguous rows, and each task names the
//! files it reads, so a worker opens only those ([`crate::scan::scan_task`]). Rows stay global: a task's
//! units carry their first row, so any number of workers numbers every sample as one local scan does.
//!
//! A corpus in an object store is planned from a staging of its footers and headers ([`crate::remote::fetch`]
//! with `footers`); [`Plan::locate`] gives each task source its object's URL, and the worker fetches that
//! object's parts its units read (nothing of the data passes through the planner).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::corpus::Corpus;
use crate::error::Result;
use crate::report::InputInfo;
use crate::source::{ColumnNames, Format, Input};
use crate::wire::{decode, encode};

/// An input a task reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSource {
    /// Index of the input in the whole corpus (the report's `inputs`).
    pub index: u32,
    pub path: PathBuf,
    pub format: Format,
    pub hive_category: Option<String>,
    /// The object (or the prefix of a NumPy directory's objects) `path` is a staged copy of, when the input
    /// lives in an object store: the worker reads it there, not `path`.
    pub url: Option<String>,
}

impl TaskSource {
    pub fn input(&self) -> Input {
        Input {
            path: self.path.clone(),
            format: self.format,
            hive_category: self.hive_category.clone(),
        }
    }
}

/// A unit of a task: unit `index` of `sources[source]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskUnit {
    pub source: u32,
    pub index: u32,
    pub base_row: u64,
    pub rows: u64,
}

/// What one cluster task scans.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub sources: Vec<TaskSource>,
    pub units: Vec<TaskUnit>,
}

impl Task {
    pub fn rows(&self) -> u64 {
        self.units.iter().map(|u| u.rows).sum()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Task> {
        decode(b, "scan task")
    }
}

/// The tasks of a corpus and what the report needs to know of its inputs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tasks: Vec<Task>,
    pub inputs: Vec<InputInfo>,
    pub rows: u64,
    pub units: usize,
    /// Total tokens when every format knows it from metadata, else a lower bound.
    pub tokens_hint: u64,
    /// What discovery left aside, and the prompts files (a cluster scan does not pair samples with them).
    pub skipped: Vec<crate::report::SkippedInfo>,
}

impl Plan {
    /// Gives every task source staged under one of `bases` (`(local directory, URL prefix)`, as
    /// [`crate::remote::Staged`] has them) the URL it was staged from: an object, or the prefix of a directory
    /// input's objects (ending in `/`).
    pub fn locate(&mut self, bases: &[(PathBuf, String)]) {
        for s in self.tasks.iter_mut().flat_map(|t| t.sources.iter_mut()) {
            s.url = bases.iter().find_map(|(local, url)| {
                let mut url = crate::remote::url_of(&s.path, local, url)?;
                if s.path.is_dir() && !url.ends_with('/') {
                    url.push('/');
                }
                Some(url)
            });
        }
    }
}

/// Groups the corpus's units into about `n_tasks` tasks of contiguous rows, balanced by rows. A JSONL file
/// is parsed whole by whoever opens it, so its units are never split across tasks.
pub fn plan(paths: &[String], columns: &ColumnNames, n_tasks: usize) -> Result<Plan> {
    let corpus = Corpus::open(paths, columns)?;
    Ok(plan_corpus(&corpus, n_tasks))
}

pub fn plan_corpus(corpus: &Corpus, n_tasks: usize) -> Plan {
    let units = corpus.units();
    let spans: Vec<&[crate::source::UnitSpan]> = corpus.sources.iter().map(|s| s.units()).collect();
    let total = corpus.len();
    let target = total.div_ceil(n_tasks.max(1) as u64).max(1);
    let mut tasks: Vec<Task> = Vec::new();
    let mut current = Task::default();
    let mut current_rows = 0u64;
    for (i, u) in units.iter().enumerate() {
        let src = &corpus.sources[u.source];
        let pos = match current
            .sources
            .iter()
            .position(|s| s.index == u.source as u32)
        {
            Some(p) => p,
            None => {
                let input = &corpus.inputs[u.source];
                current.sources.push(TaskSource {
                    index: u.source as u32,
                    path: input.path.clone(),
                    format: input.format,
                    hive_category: input.hive_category.clone(),
                    url: None,
                });
                current.sources.len() - 1
            }
        };
        let rows = spans[u.source][u.index].rows;
        current.units.push(TaskUnit {
            source: pos as u32,
            index: u.index as u32,
            base_row: u.base_row,
            rows,
        });
        current_rows += rows;
        let next_same_source = units.get(i + 1).is_some_and(|n| n.source == u.source);
        let splittable = src.format().spec().splits_across_tasks || !next_same_source;
        if current_rows >= target && splittable {
            tasks.push(std::mem::take(&mut current));
            current_rows = 0;
        }
    }
    if !current.units.is_empty() {
        tasks.push(current);
    }
    Plan {
        tasks,
        inputs: crate::report::InputInfo::of_corpus(corpus),
        rows: total,
        units: units.len(),
        tokens_hint: corpus.sources.iter().filter_map(|s| s.tokens_hint()).sum(),
        skipped: crate::report::SkippedInfo::of_corpus(corpus, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_round_trips_and_a_truncated_one_is_an_error() {
        let t = Task {
            sources: vec![TaskSource {
                index: 3,
                path: "/data/category=code/part-0.parquet".into(),
                format: Format::of(&crate::source::parquet::FORMAT),
                hive_category: Some("code".into()),
                url: Some("s3://bucket/data/category=code/part-0.parquet".into()),
            }],
            units: vec![TaskUnit {
                source: 0,
                index: 2,
                base_row: 1000,
                rows: 64,
            }],
        };
        let b = t.to_bytes();
        assert_eq!(Task::from_bytes(&b).unwrap(), t);
        assert!(Task::from_bytes(&b[..b.len() - 3]).is_err());
    }
}
