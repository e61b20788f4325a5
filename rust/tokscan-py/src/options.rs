//! A scan's options as Python hands them over: one dict (`tokscan.options.ScanOptions.to_core()`), the same
//! for the local scan (`Scan`), every Ray task (`TaskScan`) and the Ray driver's last step (`finish_report`),
//! read here into the core's [`ScanOptions`] by the parsers each option already has.

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokscan_core::report::RunInfo;
use tokscan_core::{Error, ScanOptions};

use tokscan_core::source::ColumnNames;

use crate::policy::parse_policy;

/// The keys a scan's options dict may have.
const KEYS: &[&str] = &[
    "columns",
    "threads",
    "severities",
    "policy",
    "fail_on",
    "ngram_coverage",
    "prompts",
    "tokenizer",
    "chat_template",
    "contamination",
    "near_dup",
    "draft_vocab",
    "hidden_states",
    "flagged_detail",
    "command",
    "profile_source",
];

/// The value of `key` in `d` (absent and None alike are `None`), or a usage error naming the option.
fn get<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &str,
) -> Result<Option<T>, Error> {
    match d.get_item(key) {
        Ok(Some(v)) if !v.is_none() => match v.extract::<T>() {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                let e: PyErr = e.into();
                Err(Error::Usage(format!("scan option {key}: {e}")))
            }
        },
        Ok(_) => Ok(None),
        Err(e) => Err(Error::Usage(format!("scan option {key}: {e}"))),
    }
}

/// The core's options of one scan from the dict Python built once for it.
pub(crate) fn scan_options(d: Option<&Bound<'_, PyDict>>) -> Result<ScanOptions, Error> {
    let Some(d) = d else {
        return Ok(ScanOptions::default());
    };
    for k in d.keys() {
        let k: String = k
            .extract()
            .map_err(|_| Error::Usage("scan options: keys must be strings".into()))?;
        if !KEYS.contains(&k.as_str()) {
            return Err(Error::Usage(format!(
                "unknown scan option {k:?} (known: {})",
                KEYS.join(", ")
            )));
        }
    }
    let policy_table = match d.get_item("policy") {
        Ok(Some(v)) if !v.is_none() => Some(
            v.cast_into::<PyDict>()
                .map_err(|_| Error::Usage("scan option policy: expected a table".into()))?,
        ),
        _ => None,
    };
    let fail_on: String = get(d, "fail_on")?.unwrap_or_else(|| "error".to_string());
    let severities: Option<HashMap<String, String>> = get(d, "severities")?;
    let tokenizer: Option<PathBuf> = get(d, "tokenizer")?;
    let chat_template: Option<String> = get(d, "chat_template")?;
    let draft_vocab: Option<String> = get(d, "draft_vocab")?;
    let contamination: Option<ContaminationArgs> = get(d, "contamination")?;
    let near_dup: Option<NearDupArgs> = get(d, "near_dup")?;
    let hidden: Option<HiddenArgs> = get(d, "hidden_states")?;
    Ok(ScanOptions {
        columns: parse_columns(get(d, "columns")?)?,
        threads: get(d, "threads")?.unwrap_or(0),
        policy: parse_policy(policy_table.as_ref(), severities, &fail_on)?,
        ngram_coverage: get(d, "ngram_coverage")?.unwrap_or(false),
        run: RunInfo {
            command: get(d, "command")?,
            profile_source: get(d, "profile_source")?,
            tokenizer: tokenizer.as_ref().map(|p| p.display().to_string()),
            ..Default::default()
        },
        pairing: tokscan_core::passes::pairing::Options {
            prompts: get(d, "prompts")?.unwrap_or_default(),
            encoder: None,
            tokenizer: tokenizer.map(|p| (p, chat_template)),
        },
        contamination: contamination.map(contamination_spec),
        near_dup: near_params(near_dup)?,
        vocab: parse_vocab(draft_vocab.as_deref())?,
        hidden: hidden.map(hidden_options).transpose()?,
        flagged_detail: get(d, "flagged_detail")?.unwrap_or(tokscan_core::scan::FLAGGED_DETAIL),
    })
}

/// `near_dup=(n, bands, rows, threshold)` as the core's parameters, checked.
pub(crate) type NearDupArgs = (u32, u32, u32, f64);

pub(crate) fn near_params(
    a: Option<NearDupArgs>,
) -> tokscan_core::Result<Option<tokscan_core::passes::near_dup::Params>> {
    let Some((n, bands, rows, threshold)) = a else {
        return Ok(None);
    };
    let p = tokscan_core::passes::near_dup::Params {
        n,
        bands,
        rows,
        threshold,
    };
    p.check()?;
    Ok(Some(p))
}

/// `(dump directory, layout, target model directory, agreement positions, agreement minimum)` of
/// `--hidden-states`.
pub(crate) type HiddenArgs = (PathBuf, Option<String>, Option<PathBuf>, u64, f64);

pub(crate) fn hidden_options(
    a: HiddenArgs,
) -> tokscan_core::Result<tokscan_core::hidden::check::Options> {
    let (dir, layout, target, agreement_positions, agreement_min) = a;
    if !(0.0..=1.0).contains(&agreement_min) {
        return Err(Error::Usage(format!(
            "--agreement-min must be between 0 and 1, got {agreement_min}"
        )));
    }
    Ok(tokscan_core::hidden::check::Options {
        dir,
        layout: layout
            .as_deref()
            .map(tokscan_core::hidden::dump::Layout::parse)
            .transpose()?,
        target,
        agreement_positions,
        agreement_min,
    })
}

/// `(benchmark files, n-gram length, share, tokenizer directory)` of `--contamination`.
pub(crate) type ContaminationArgs = (
    Vec<std::path::PathBuf>,
    usize,
    f64,
    Option<std::path::PathBuf>,
);

pub(crate) fn contamination_spec(
    a: ContaminationArgs,
) -> tokscan_core::passes::contamination::Spec {
    tokscan_core::passes::contamination::Spec {
        files: a.0,
        n: a.1,
        min_share: a.2,
        tokenizer: a.3,
    }
}

/// The draft-vocabulary options, given as JSON (`tokscan.vocab` writes it): sizes, a mapping to build, a
/// mapping to check.
pub(crate) fn parse_vocab(
    json: Option<&str>,
) -> Result<Option<tokscan_core::vocab::VocabOptions>, Error> {
    json.map(|j| {
        serde_json::from_str(j)
            .map_err(|e| Error::Usage(format!("invalid draft-vocabulary options: {e}")))
    })
    .transpose()
}

pub(crate) fn parse_columns(
    columns: Option<HashMap<String, String>>,
) -> Result<ColumnNames, Error> {
    let mut c = ColumnNames::default();
    for (role, name) in columns.unwrap_or_default() {
        c.set(&role, name)?;
    }
    Ok(c)
}
