//! The pass/fail policy, decided in one place: per-code severity overrides, `ignore`, count and rate
//! tolerances, and the `fail_on` level. The exit code and verdict, the JSON report, `--exclude`,
//! `tokscan clean`, the Validator, JUnit and GitHub output all ask this module.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::anomaly::{Code, Severity};
use crate::error::{Error, Result};

/// The level at or above which a finding fails a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    At(Severity),
    Never,
}

impl FailOn {
    /// Every level `--fail-on` accepts: each severity (most severe first), then never failing.
    pub const LEVELS: [&'static str; 4] = ["error", "warning", "info", "never"];

    pub fn parse(s: &str) -> Result<FailOn> {
        match s {
            "never" => Ok(FailOn::Never),
            _ => Severity::parse(s).map(FailOn::At).ok_or_else(|| {
                let hint = did_you_mean(s, FailOn::LEVELS);
                Error::Usage(format!(
                    "fail_on must be one of {}; got {s:?}{hint}",
                    FailOn::LEVELS.join(", ")
                ))
            }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailOn::At(s) => s.as_str(),
            FailOn::Never => "never",
        }
    }

    fn reached_by(self, s: Severity) -> bool {
        matches!(self, FailOn::At(floor) if s >= floor)
    }
}

/// How many findings of a code a corpus may have before the code fails the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// At most this many samples.
    Count(u64),
    /// At most this percentage of the samples.
    Rate(f64),
}

impl Tolerance {
    fn allows(self, count: u64, n_samples: u64) -> bool {
        match self {
            Tolerance::Count(max) => count <= max,
            Tolerance::Rate(pct) => 100.0 * count as f64 / n_samples.max(1) as f64 <= pct,
        }
    }
}

/// What the policy says about one code.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rule {
    pub severity: Option<Severity>,
    pub ignore: bool,
    pub tolerance: Option<Tolerance>,
}

impl Rule {
    /// Parses one `[policy]` value as written in `tokscan.toml`: a severity (`"error"`), `"ignore"`, a
    /// tolerated count (`10`) or a tolerated rate (`"0.5%"`).
    pub fn parse(code: &str, value: &RuleValue) -> Result<Rule> {
        let bad = || {
            Error::Usage(format!(
                "policy.{code}: expected a severity (error, warning, info), 'ignore', a count or a rate like \
                 '0.5%', got {value}"
            ))
        };
        match value {
            RuleValue::Count(n) if *n >= 0 => Ok(Rule {
                tolerance: Some(Tolerance::Count(*n as u64)),
                ..Rule::default()
            }),
            RuleValue::Count(_) => Err(Error::Usage(format!(
                "policy.{code}: a tolerated count must be >= 0, got {value}"
            ))),
            RuleValue::Text(t) => {
                let t = t.trim();
                if t == "ignore" {
                    return Ok(Rule {
                        ignore: true,
                        ..Rule::default()
                    });
                }
                if let Some(s) = Severity::parse(t) {
                    return Ok(Rule {
                        severity: Some(s),
                        ..Rule::default()
                    });
                }
                let rate = t
                    .strip_suffix('%')
                    .and_then(|r| r.trim().parse::<f64>().ok())
                    .filter(|r| (0.0..=100.0).contains(r))
                    .ok_or_else(bad)?;
                Ok(Rule {
                    tolerance: Some(Tolerance::Rate(rate)),
                    ..Rule::default()
                })
            }
        }
    }
}

/// A `[policy]` value before parsing: text or an integer, as TOML (or a Python dict) holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RuleValue {
    Count(i64),
    Text(String),
}

impl std::fmt::Display for RuleValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleValue::Count(n) => write!(f, "{n}"),
            RuleValue::Text(t) => write!(f, "{t:?}"),
        }
    }
}

/// What the policy made of one code's findings in a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No sample has the code.
    Clean,
    /// Found, at or above `fail_on`, beyond any tolerance: the run fails.
    Fails,
    /// Found, but below `fail_on`.
    BelowFailOn,
    /// Found at or above `fail_on`, within the policy's tolerance.
    Tolerated,
    /// Found, and the policy ignores the code.
    Ignored,
}

/// Severity overrides, ignores and tolerances per code, and the `fail_on` level.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    rules: HashMap<Code, Rule>,
    /// The entries as given (code -> value), recorded in the report so that it can be judged again exactly.
    table: BTreeMap<String, RuleValue>,
    pub fail_on: FailOn,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            rules: HashMap::new(),
            table: BTreeMap::new(),
            fail_on: FailOn::At(Severity::Error),
        }
    }
}

impl Policy {
    /// A policy from `[policy]` entries (code → value) and a `fail_on` level; unknown codes and bad values
    /// are usage errors naming them.
    pub fn new<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a RuleValue)>,
        fail_on: &str,
    ) -> Result<Policy> {
        let mut rules = HashMap::new();
        let mut table = BTreeMap::new();
        for (code, value) in entries {
            let c = Code::parse(code).ok_or_else(|| {
                let hint = did_you_mean(code, Code::ALL.iter().map(|c| c.as_str()));
                Error::Usage(format!(
                    "policy: unknown anomaly code {code:?}{hint} (see `tokscan codes`)"
                ))
            })?;
            rules.insert(c, Rule::parse(code, value)?);
            table.insert(code.to_string(), value.clone());
        }
        Ok(Policy {
            rules,
            table,
            fail_on: FailOn::parse(fail_on)?,
        })
    }

    /// The `[policy]` entries as given, in code order (what the report records as `verdict.policy`).
    pub fn table(&self) -> &BTreeMap<String, RuleValue> {
        &self.table
    }

    /// The same rules with another `fail_on`.
    pub fn with_fail_on(mut self, fail_on: FailOn) -> Policy {
        self.fail_on = fail_on;
        self
    }

    /// A code's severity after overrides (an ignored code keeps its severity; its status says it is ignored).
    pub fn severity(&self, c: Code) -> Severity {
        self.rules
            .get(&c)
            .and_then(|r| r.severity)
            .unwrap_or(c.default_severity())
    }

    pub fn is_ignored(&self, c: Code) -> bool {
        self.rules.get(&c).is_some_and(|r| r.ignore)
    }

    /// What the policy makes of `count` samples with code `c` among `n_samples`.
    pub fn status(&self, c: Code, count: u64, n_samples: u64) -> Status {
        if count == 0 {
            Status::Clean
        } else if self.is_ignored(c) {
            Status::Ignored
        } else if !self.fail_on.reached_by(self.severity(c)) {
            Status::BelowFailOn
        } else if self
            .rules
            .get(&c)
            .and_then(|r| r.tolerance)
            .is_some_and(|t| t.allows(count, n_samples))
        {
            Status::Tolerated
        } else {
            Status::Fails
        }
    }

    /// Bits of the codes that make one sample bad on its own: at or above `fail_on` after overrides, not
    /// ignored. Tolerances are corpus-wide (a count or a share of the whole corpus), so a per-sample or
    /// per-batch check (the Validator) cannot apply them and treats a tolerated code as failing.
    pub fn sample_mask(&self) -> u64 {
        Code::ALL
            .iter()
            .filter(|&&c| !self.is_ignored(c) && self.fail_on.reached_by(self.severity(c)))
            .fold(0, |m, c| m | c.bit())
    }

    /// Bits of the codes whose findings fail the run, given each code's count in the corpus: what
    /// `--exclude` and `clean` drop by default.
    pub fn failing_mask(&self, counts: &HashMap<Code, u64>, n_samples: u64) -> u64 {
        Code::ALL
            .iter()
            .filter(|&&c| {
                self.status(c, counts.get(&c).copied().unwrap_or(0), n_samples) == Status::Fails
            })
            .fold(0, |m, c| m | c.bit())
    }
}

/// `; did you mean "X"?` for the choice nearest to a mistyped `word` (see [`closest`]), or nothing.
pub fn did_you_mean<'a>(word: &str, choices: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, choices)
        .map(|c| format!("; did you mean {c:?}?"))
        .unwrap_or_default()
}

/// The choice nearest to a mistyped `word` (edit distance at most a third of its length, and at least 1), for
/// a "did you mean" hint.
pub fn closest<'a>(word: &str, choices: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    choices
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != *cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[(&str, RuleValue)], fail_on: &str) -> Policy {
        Policy::new(entries.iter().map(|(c, v)| (*c, v)), fail_on).unwrap()
    }

    fn text(s: &str) -> RuleValue {
        RuleValue::Text(s.into())
    }

    #[test]
    fn statuses_follow_overrides_ignores_and_tolerances() {
        let p = policy(
            &[
                ("truncated", text("5%")),
                ("duplicate", RuleValue::Count(2)),
                ("repetition", text("error")),
                ("missing_system", text("ignore")),
            ],
            "error",
        );
        let t = Code::parse("truncated").unwrap();
        assert_eq!(p.status(t, 0, 100), Status::Clean);
        assert_eq!(p.status(t, 5, 100), Status::Tolerated);
        assert_eq!(p.status(t, 6, 100), Status::Fails);
        let d = Code::parse("duplicate").unwrap(); // a warning: below fail_on whatever the tolerance
        assert_eq!(p.status(d, 50, 100), Status::BelowFailOn);
        let r = Code::parse("repetition").unwrap();
        assert_eq!(p.severity(r), Severity::Error);
        assert_eq!(p.status(r, 1, 100), Status::Fails);
        let m = Code::parse("missing_system").unwrap();
        assert_eq!(p.status(m, 100, 100), Status::Ignored);
        assert_eq!(p.sample_mask() & m.bit(), 0);
        assert_ne!(
            p.sample_mask() & t.bit(),
            0,
            "per sample, a tolerated code still fails"
        );
        let counts = HashMap::from([(t, 5), (r, 1), (m, 9)]);
        assert_eq!(p.failing_mask(&counts, 100), r.bit());
        let never = p.clone().with_fail_on(FailOn::Never);
        assert_eq!(never.sample_mask(), 0);
        assert_eq!(never.status(r, 1, 100), Status::BelowFailOn);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_code() {
        for (code, v) in [
            ("truncated", text("5")),
            ("truncated", text("120%")),
            ("truncated", text("fatal")),
            ("truncated", RuleValue::Count(-1)),
            ("no_such_code", text("error")),
        ] {
            let e = Policy::new([(code, &v)], "error").unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{e}");
            assert!(e.to_string().contains(code), "{e}");
        }
        assert!(Policy::new([], "fatal").is_err());
    }

    #[test]
    fn fail_on_levels_are_the_severities_then_never() {
        let sev: Vec<&str> = Severity::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(FailOn::LEVELS[..sev.len()], sev[..]);
        assert_eq!(FailOn::LEVELS[sev.len()..], ["never"]);
        for l in FailOn::LEVELS {
            assert_eq!(FailOn::parse(l).unwrap().as_str(), l);
        }
    }

    #[test]
    fn an_unknown_code_suggests_the_nearest() {
        let e = Policy::new([("truncatd", &text("ignore"))], "error").unwrap_err();
        assert!(e.to_string().contains("did you mean \"truncated\"?"), "{e}");
        let e = Policy::new([("zzzz", &text("ignore"))], "error").unwrap_err();
        assert!(!e.to_string().contains("did you mean"), "{e}");
    }
}
