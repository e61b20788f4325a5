//! Live counters of a long call (a scan, a conversion, a dump's checks) that a caller polls from another
//! thread, and the switch that cancels it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

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

    /// `r`, having cancelled the other parts of the call when it is a real error (not an "interrupted" of a
    /// part that was merely stopped): one failing part stops the others.
    pub fn stop_on_error<T>(&self, r: Result<T>) -> Result<T> {
        if matches!(r, Err(ref e) if !matches!(e, Error::Interrupted)) {
            self.cancel();
        }
        r
    }
}

/// The parts' results in order, or the first real error in their order: not an "interrupted" of a part that
/// [`Progress::stop_on_error`] stopped (that one only when nothing else failed).
pub fn first_error<T>(mut parts: Vec<Result<T>>) -> Result<Vec<T>> {
    if let Some(i) = parts
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, Error::Interrupted)))
    {
        parts.swap_remove(i)?; // an `Err`: returned
    }
    parts.into_iter().collect()
}
