//! The `[policy]` table handed over from Python, parsed by the core's one policy engine, and the verdicts a
//! loaded report is judged again with.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokscan_core::policy::{RuleValue, Status};
use tokscan_core::{Code, Error, Policy};

use crate::to_py;

/// A `[policy]` table handed over from Python (code -> "error" | "ignore" | "0.5%" | 10), plus the legacy
/// severity overrides, parsed by the core's one policy engine.
pub(crate) fn parse_policy(
    policy: Option<&Bound<'_, PyDict>>,
    severities: Option<HashMap<String, String>>,
    fail_on: &str,
) -> Result<Policy, Error> {
    let mut entries: Vec<(String, RuleValue)> = Vec::new();
    for (code, sev) in severities.unwrap_or_default() {
        entries.push((code, RuleValue::Text(sev)));
    }
    if let Some(d) = policy {
        for (k, v) in d.iter() {
            let code: String = k.extract().map_err(|_| {
                Error::Usage(format!("policy: keys must be anomaly codes, got {k}"))
            })?;
            let value = if v.is_instance_of::<pyo3::types::PyBool>() {
                None
            } else if let Ok(n) = v.extract::<i64>() {
                Some(RuleValue::Count(n))
            } else if let Ok(t) = v.extract::<String>() {
                Some(RuleValue::Text(t))
            } else {
                None
            };
            let value = value.ok_or_else(|| {
                Error::Usage(format!(
                    "policy.{code}: expected a severity, 'ignore', a count or a rate like '0.5%', got {v}"
                ))
            })?;
            entries.push((code, value));
        }
    }
    Policy::new(entries.iter().map(|(c, v)| (c.as_str(), v)), fail_on)
}

/// Status per code (`clean`, `fails`, `below_fail_on`, `tolerated`, `ignored`) of a corpus with these counts
/// under `policy` and `fail_on`: how a loaded report is judged again (clean, --exclude, CI outputs).
#[pyfunction]
#[pyo3(signature = (counts, n_samples, policy=None, fail_on="error"))]
pub(crate) fn policy_statuses(
    py: Python<'_>,
    counts: HashMap<String, u64>,
    n_samples: u64,
    policy: Option<&Bound<'_, PyDict>>,
    fail_on: &str,
) -> PyResult<HashMap<&'static str, &'static str>> {
    let p = parse_policy(policy, None, fail_on).map_err(|e| to_py(py, e))?;
    let mut out = HashMap::new();
    for c in Code::ALL {
        let n = counts.get(c.as_str()).copied().unwrap_or(0);
        let status = match p.status(*c, n, n_samples) {
            Status::Clean => "clean",
            Status::Fails => "fails",
            Status::BelowFailOn => "below_fail_on",
            Status::Tolerated => "tolerated",
            Status::Ignored => "ignored",
        };
        out.insert(c.as_str(), status);
    }
    Ok(out)
}

/// Bits of the codes that make one sample bad under `policy` and `fail_on` (the Validator's rule:
/// tolerances are corpus-wide and do not apply to one sample).
#[pyfunction]
#[pyo3(signature = (policy=None, fail_on="error"))]
pub(crate) fn policy_sample_mask(
    py: Python<'_>,
    policy: Option<&Bound<'_, PyDict>>,
    fail_on: &str,
) -> PyResult<u64> {
    let p = parse_policy(policy, None, fail_on).map_err(|e| to_py(py, e))?;
    Ok(p.sample_mask())
}
