//! tokscan core: scans token-id training corpora (Parquet or NumPy shards) for chat-structure anomalies.
//!
//! The data path: [`source`] opens each input format behind one trait, [`corpus`] numbers their rows
//! globally and plans units of work; each unit yields ragged batches of token rows, [`check`] parses and checks one sample,
//! [`summary`] accumulates mergeable per-category statistics, and [`report`] turns a summary into the JSON
//! report. [`scan`] wires them together in parallel.

pub mod anomaly;
pub mod check;
pub mod convert;
pub mod corpus;
pub mod corpus_checks;
pub mod error;
pub mod files;
pub mod flagged;
pub mod hidden;
pub mod inputs;
pub mod json;
pub mod options;
pub mod pairing;
pub mod pass_partial;
pub mod passes;
pub mod plan;
pub mod policy;
pub mod profile;
pub mod progress;
#[cfg(feature = "prompt")]
pub mod prompt;
pub mod records;
pub mod remote;
pub mod repetition;
pub mod report;
pub mod report_schema;
pub mod sample_id;
pub mod scan;
pub mod settings;
pub mod source;
pub mod spill;
pub mod stats;
pub mod summary;
pub mod token;
pub mod validate;
pub mod vocab;
pub mod wire;

pub use anomaly::{Code, Severity};
pub use corpus::{Corpus, SampleData};
pub use error::{Error, Result};
pub use policy::Policy;
pub use profile::Profile;
pub use report::Report;
pub use scan::{scan, scan_keeping, scan_opened, Progress, ScanOptions};
pub use validate::Validator;
