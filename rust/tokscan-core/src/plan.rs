//! Planning a scan for many processes (a Ray cluster): the corpus is opened once on the driver (headers and
//! metadata only), its units of work are grouped into tasks of contiguous rows, and each task names the
//! files it reads, so a worker opens only those ([`crate::scan::scan_task`]). Rows stay global: a task's
//! units carry their first row, so any number of workers numbers every sample as one local scan does.
//!
//! A corpus in an object store is planned from a staging of its footers and headers ([`plan_staged`]): each
//! task source staged there names its objects as the listing saw them (key, size, version), and the worker
//! stages those same versions and fetches the parts its units read (nothing of the data passes through the
//! planner).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::corpus::Corpus;
use crate::error::Result;
use crate::inputs::{InputInfo, SkippedInfo};
use crate::remote::{Listed, Staged};
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
    /// Where the input lives when it is in an object store (`path` is then the planner's staged copy): the
    /// worker stages these objects and reads them, not `path`.
    pub remote: Option<RemoteSource>,
}

/// The objects of a task source in an object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSource {
    /// The URL the planner's staging directory stood for (`s3://bucket/prefix/`).
    pub url_base: String,
    /// The source's path under that directory, `/`-separated (empty: the directory itself).
    pub rel: String,
    /// The objects opening and reading the source needs, as the planner's listing saw them.
    pub objects: Vec<Listed>,
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
    /// Every input, in the corpus's order (`TaskSource::index` is the position): what a task reading rows
    /// anywhere opens ([`open_planned`]), so that its rows are the plan's.
    pub sources: Vec<TaskSource>,
    pub inputs: Vec<InputInfo>,
    pub rows: u64,
    pub units: usize,
    /// Total tokens when every format knows it from metadata, else a lower bound.
    pub tokens_hint: u64,
    /// What discovery left aside, and the prompts files (a cluster scan does not pair samples with them).
    pub skipped: Vec<SkippedInfo>,
}

impl RemoteSource {
    /// Stages the source's objects under `here` ([`crate::remote::fetch_listed`]: the versions listed, with
    /// `footers` large ones sparse); returns the source's local path and what was staged.
    pub fn stage(&self, here: &std::path::Path, footers: bool) -> Result<(PathBuf, Staged)> {
        let staged = crate::remote::fetch_listed(&self.url_base, &self.objects, here, footers)?;
        let path = self
            .rel
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(here.to_path_buf(), |p, part| p.join(part));
        Ok((path, staged))
    }
}

impl Plan {
    /// Gives every task source staged by one of `staged` the objects it reads: its own object, the objects in
    /// it (a NumPy directory's files), and its format's companions (a Megatron `.idx`).
    pub fn locate(&mut self, staged: &[Staged]) {
        let all = self.sources.iter_mut();
        for s in self
            .tasks
            .iter_mut()
            .flat_map(|t| t.sources.iter_mut())
            .chain(all)
        {
            s.remote = staged.iter().find_map(|st| {
                let rel = relative(&s.path, &st.local_base)?;
                let companions: Vec<String> = (s.format.spec().companions)(&s.path)
                    .iter()
                    .filter_map(|c| relative(c, &st.local_base))
                    .collect();
                // A directory input (NumPy) reads the files directly in it, not what sits in folders below.
                let in_dir = |o: &Listed| match rel.is_empty() {
                    true => !o.rel.contains('/'),
                    false => o
                        .rel
                        .strip_prefix(rel.as_str())
                        .and_then(|r| r.strip_prefix('/'))
                        .is_some_and(|name| !name.contains('/')),
                };
                let objects = st
                    .listed
                    .iter()
                    .filter(|o| o.rel == rel || in_dir(o) || companions.contains(&o.rel))
                    .cloned()
                    .collect();
                Some(RemoteSource {
                    url_base: st.url_base.clone(),
                    rel,
                    objects,
                })
            });
        }
    }
}

/// `path` relative to `base`, `/`-separated, when it is at or under it.
fn relative(path: &std::path::Path, base: &std::path::Path) -> Option<String> {
    let rel = path.strip_prefix(base).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

/// [`plan`] of inputs some of which are object-store URLs: each URL's objects are staged under `staging` with
/// only their footers and headers ([`crate::remote::fetch`] with `footers`), the corpus is planned from them,
/// and each task source staged there names its objects ([`Plan::locate`]). Also returns each staged URL's
/// `(local directory, URL base)`, which the report's paths are written back with; an error names the URL.
pub fn plan_staged(
    paths: &[String],
    columns: &ColumnNames,
    n_tasks: usize,
    staging: &std::path::Path,
) -> Result<(Plan, Vec<(PathBuf, String)>)> {
    let mut local = Vec::with_capacity(paths.len());
    let mut staged = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if crate::remote::is_url(p) {
            let st = crate::remote::fetch(p, &staging.join(i.to_string()), true)?;
            local.push(st.local.to_string_lossy().into_owned());
            staged.push(st);
        } else {
            local.push(p.clone());
        }
    }
    let bases: Vec<(PathBuf, String)> = staged
        .iter()
        .map(|st| (st.local_base.clone(), st.url_base.clone()))
        .collect();
    let mut plan =
        plan(&local, columns, n_tasks).map_err(|e| crate::remote::named_by_url(e, &bases))?;
    plan.locate(&staged);
    Ok((plan, bases))
}

/// Opens the corpus a plan was made from (`sources`: [`Plan::sources`]), in its order, without discovering
/// anything again: inputs in an object store are staged whole under `staging` at the versions the plan
/// listed (an object overwritten since is an error). Returns the corpus and each staged input's `(local
/// directory, URL base)`, to name the URL in an error.
pub fn open_planned(
    sources: &[TaskSource],
    columns: &ColumnNames,
    staging: &std::path::Path,
) -> Result<(Corpus, Vec<(PathBuf, String)>)> {
    let mut inputs = Vec::with_capacity(sources.len());
    let mut places = Vec::new();
    for s in sources {
        let mut input = s.input();
        if let Some(r) = &s.remote {
            let here = staging.join(s.index.to_string());
            input.path = r.stage(&here, false)?.0;
            places.push((here, r.url_base.clone()));
        }
        inputs.push(input);
    }
    let corpus =
        Corpus::of_inputs(inputs, columns).map_err(|e| crate::remote::named_by_url(e, &places))?;
    Ok((corpus, places))
}

/// The planned sources' wire form (the near-duplicate task's input).
pub fn sources_to_bytes(sources: &[TaskSource]) -> Vec<u8> {
    encode(&sources)
}

pub fn sources_from_bytes(b: &[u8]) -> Result<Vec<TaskSource>> {
    decode(b, "planned sources")
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
                    remote: None,
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
    let sources = corpus
        .inputs
        .iter()
        .enumerate()
        .map(|(k, input)| TaskSource {
            index: k as u32,
            path: input.path.clone(),
            format: input.format,
            hive_category: input.hive_category.clone(),
            remote: None,
        })
        .collect();
    Plan {
        tasks,
        sources,
        inputs: InputInfo::of_corpus(corpus),
        rows: total,
        units: units.len(),
        tokens_hint: corpus.sources.iter().filter_map(|s| s.tokens_hint()).sum(),
        skipped: SkippedInfo::of_corpus(corpus, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task source names the objects its reader opens: a NumPy directory its own files (not a folder below
    /// it), a Megatron `.bin` its `.idx` too, a Parquet file itself.
    #[test]
    fn each_source_names_the_objects_it_reads() {
        let listed = |rel: &str| Listed {
            rel: rel.into(),
            key: format!("data/{rel}"),
            size: 10,
            e_tag: None,
            version: None,
        };
        let staged = Staged {
            local: "/stage/0".into(),
            local_base: "/stage/0".into(),
            url_base: "s3://b/data/".into(),
            objects: 0,
            bytes: 0,
            sparse: Vec::new(),
            listed: [
                "tokens.npy",
                "offsets.npy",
                "raw/big.bin",
                "meg/c.bin",
                "meg/c.idx",
                "meg/d.bin",
                "p/x.parquet",
                "p/x.parquet.crc",
            ]
            .map(listed)
            .to_vec(),
        };
        let source = |path: &str, format| TaskSource {
            index: 0,
            path: path.into(),
            format: Format::of(format),
            hive_category: None,
            remote: None,
        };
        let mut plan = Plan {
            tasks: vec![Task {
                sources: vec![
                    source("/stage/0", &crate::source::numpy::FORMAT),
                    source("/stage/0/meg/c.bin", &crate::source::megatron::FORMAT),
                    source("/stage/0/p/x.parquet", &crate::source::parquet::FORMAT),
                    source("/elsewhere/y.parquet", &crate::source::parquet::FORMAT),
                ],
                units: Vec::new(),
            }],
            sources: Vec::new(),
            inputs: Vec::new(),
            rows: 0,
            units: 0,
            tokens_hint: 0,
            skipped: Vec::new(),
        };
        plan.locate(&[staged]);
        let named: Vec<Option<Vec<String>>> = plan.tasks[0]
            .sources
            .iter()
            .map(|s| {
                s.remote
                    .as_ref()
                    .map(|r| r.objects.iter().map(|o| o.rel.clone()).collect())
            })
            .collect();
        let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            named,
            vec![
                names(&["tokens.npy", "offsets.npy"]),
                names(&["meg/c.bin", "meg/c.idx"]),
                names(&["p/x.parquet"]),
                None,
            ]
        );
        assert_eq!(
            plan.tasks[0].sources[1].remote.as_ref().unwrap().rel,
            "meg/c.bin"
        );
    }

    #[test]
    fn a_task_round_trips_and_a_truncated_one_is_an_error() {
        let t = Task {
            sources: vec![TaskSource {
                index: 3,
                path: "/data/category=code/part-0.parquet".into(),
                format: Format::of(&crate::source::parquet::FORMAT),
                hive_category: Some("code".into()),
                remote: Some(RemoteSource {
                    url_base: "s3://bucket/data/".into(),
                    rel: "category=code/part-0.parquet".into(),
                    objects: vec![Listed {
                        rel: "category=code/part-0.parquet".into(),
                        key: "data/category=code/part-0.parquet".into(),
                        size: 1 << 20,
                        e_tag: Some("\"abc\"".into()),
                        version: None,
                    }],
                }),
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
