//! The compact binary form partial results travel in between processes (Ray tasks, spilled buckets).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The compact binary form results travel in between processes.
pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("in-memory serialization cannot fail")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(b: &'a [u8], what: &str) -> Result<T> {
    postcard::from_bytes(b).map_err(|e| {
        Error::Usage(format!(
            "corrupt {what} ({e}): was it written by this version of tokscan?"
        ))
    })
}
