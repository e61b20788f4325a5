//! Live counters of a long call (a scan, a conversion, a dump's checks) that a caller polls from another
//! thread, and the switch that cancels it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Live counters a caller can poll from another thread, and the cancel switch.
#[derive(Debug, Default)]
pub struct Progress {
    pub units_total: AtomicU64,
    pub units_done: AtomicU64,
    pub samples: AtomicU64,
    pub tokens: AtomicU64,
    pub tokens_total: AtomicU64,
    cancel: AtomicBool,
}

impl Progress {
    /// Asks a running scan to stop; it returns `Error::Interrupted` soon after.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// True once cancelled. Very cheap: checked once per batch of rows.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}
