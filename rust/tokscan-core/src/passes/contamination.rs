//! The contamination pass (`--contamination`): the report's section of what the scan found when it looked for
//! benchmark n-grams in every sample ([`crate::contamination`]: the index, and the hit each flagged sample
//! keeps past the detail limit).

use super::{Findings, Finishing, Pass};
use crate::contamination::ContaminationReport;
use crate::error::Result;

/// The report section's key.
pub const NAME: &str = "contamination";

pub struct Contamination;

impl Pass for Contamination {
    fn name(&self) -> &'static str {
        NAME
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        // Every hit is in the merged partial's flagged list: a sample with one keeps its detail.
        let section = at
            .partial
            .benchmarks
            .clone()
            .map(|b| ContaminationReport::of(b, &at.partial.flagged));
        Ok(Findings::new(NAME, section.as_ref()))
    }
}
