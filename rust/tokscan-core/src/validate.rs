//! Batch validation for training data loaders: the per-sample rules of a scan applied to one in-memory
//! batch (flat ids + offsets, or a 2-D padded block), borrowing the caller's buffers — no copy of the ids.
//!
//! Corpus-wide codes (`duplicate`, `sample_id_duplicate`, `length_outlier`) need every sample of the
//! corpus and are never set here; every other code is set exactly when a scan of the same sample sets it.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::check::{check_sample, Scratch};
use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::profile::Profile;
use crate::source::{with_tokens, FromTokens, Offsets, Tokens};
use crate::token::{MaskSlice, TokenId};

/// Rows checked per parallel task; large enough that scheduling costs nothing next to the checks.
const ROWS_PER_TASK: usize = 16;

/// Where each row of a batch lies in its flat buffer.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// Row `i` is `values[offsets[i]..offsets[i + 1]]`.
    Ragged(Offsets<'a>),
    /// A row-major `rows × width` block; each row's trailing padding is not part of the sample.
    Padded { width: usize },
}

impl Rows<'_> {
    fn count(&self, len: usize) -> usize {
        match self {
            Rows::Ragged(o) => o.rows(),
            Rows::Padded { width } => len.checked_div(*width).unwrap_or(0),
        }
    }

    /// Checks that the rows fit a buffer of `len` values; `what` names the buffer in the error.
    fn validate(&self, len: usize, what: &str) -> Result<()> {
        match self {
            Rows::Padded { width } => {
                if !len.is_multiple_of(*width) {
                    return Err(Error::Usage(format!(
                        "{what}: {len} values do not form rows of width {width}"
                    )));
                }
            }
            Rows::Ragged(o) => {
                let bad = |m: String| Err(Error::Usage(format!("{what}: {m}")));
                let (first, last, monotonic) = match o {
                    Offsets::I32(o) => (
                        o.first().map(|&v| v as i64),
                        o.last().map(|&v| v as i64),
                        o.windows(2).all(|w| w[0] <= w[1]),
                    ),
                    Offsets::I64(o) => (
                        o.first().copied(),
                        o.last().copied(),
                        o.windows(2).all(|w| w[0] <= w[1]),
                    ),
                };
                let (Some(first), Some(last)) = (first, last) else {
                    return bad("offsets are empty (need rows + 1 values, starting at 0)".into());
                };
                if first < 0 {
                    return bad(format!("offsets start at {first}"));
                }
                if !monotonic {
                    return bad("offsets decrease".into());
                }
                if last as u64 > len as u64 {
                    return bad(format!("offsets end at {last}, past the {len} values"));
                }
            }
        }
        Ok(())
    }

    fn range(&self, i: usize) -> Range<usize> {
        match self {
            Rows::Ragged(o) => o.range(i),
            Rows::Padded { width } => i * width..(i + 1) * width,
        }
    }
}

/// One batch, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    pub ids: Tokens<'a>,
    pub rows: Rows<'a>,
    /// The loss mask: either laid out like the ids (`Padded` with the same width, or the same offsets), or
    /// with its own offsets — a row whose mask length differs from its ids is `loss_mask_misaligned`.
    pub mask: Option<(MaskSlice<'a>, Rows<'a>)>,
    /// Rows to treat as empty samples (Arrow null list entries).
    pub null_rows: Option<&'a [bool]>,
}

/// Per-row results of [`Validator::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// Anomaly bits (see [`crate::anomaly::Code::bit`]).
    pub flags: Vec<u64>,
    /// Sample lengths in tokens (padded rows: without their trailing padding).
    pub lengths: Vec<u32>,
}

/// The batch checker a data loader builds once and calls for every batch, from any thread.
#[derive(Debug)]
pub struct Validator {
    profile: Arc<Profile>,
    /// Padding id of 2-D batches (defaults to the profile's PAD).
    pad: Option<u32>,
    threads: usize,
    /// The pool of `threads > 1`, tagged with the process that built it: a forked child (a DataLoader
    /// worker) inherits the pool's bookkeeping but not its threads, so it builds its own.
    pool: Mutex<Option<(u32, Arc<rayon::ThreadPool>)>>,
}

impl Validator {
    /// `threads = 1` checks on the calling thread (the usual choice inside loader workers).
    pub fn new(profile: Arc<Profile>, pad: Option<u32>, threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(Error::Usage("threads must be at least 1".into()));
        }
        Ok(Validator {
            pad: pad.or(profile.pad),
            profile,
            threads,
            pool: Mutex::new(None),
        })
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    fn pool(&self) -> Result<Arc<rayon::ThreadPool>> {
        let pid = std::process::id();
        let mut slot = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        match slot.take() {
            Some((owner, pool)) if owner == pid => {
                *slot = Some((owner, pool.clone()));
                return Ok(pool);
            }
            // A pool inherited through fork() is never dropped here: dropping it wakes the parent's worker
            // threads through their sleep locks, and one of those may have been held at the fork by a thread
            // the child does not have. Its memory is the price, once per forked worker.
            Some((_, inherited)) => std::mem::forget(inherited),
            None => {}
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .thread_name(|i| format!("tokscan-validate-{i}"))
            .build()
            .map_err(|e| Error::Usage(format!("cannot start {} threads: {e}", self.threads)))?;
        let pool = Arc::new(pool);
        *slot = Some((pid, pool.clone()));
        Ok(pool)
    }

    /// Checks every row of `batch`.
    pub fn check(&self, batch: &BatchView<'_>) -> Result<Checked> {
        batch.rows.validate(batch.ids.len(), "ids")?;
        let n = batch.rows.count(batch.ids.len());
        if matches!(batch.rows, Rows::Padded { .. }) && self.pad.is_none() && n > 0 {
            return Err(Error::Usage(format!(
                "profile {} has no PAD token: give pad_id for 2-D batches",
                self.profile.name
            )));
        }
        if let Some((m, rows)) = batch.mask {
            rows.validate(m.len(), "loss_mask")?;
            let mn = rows.count(m.len());
            if mn != n {
                return Err(Error::Usage(format!(
                    "loss_mask has {mn} rows, ids have {n}"
                )));
            }
            if let (Rows::Padded { width: a }, Rows::Padded { width: b }) = (batch.rows, rows) {
                if a != b {
                    return Err(Error::Usage(format!(
                        "loss_mask rows are {b} wide, ids rows {a}"
                    )));
                }
            }
        }
        if let Some(nulls) = batch.null_rows {
            if nulls.len() != n {
                return Err(Error::Usage(format!(
                    "{} null flags for {n} rows",
                    nulls.len()
                )));
            }
        }
        let mut out = Checked {
            flags: vec![0; n],
            lengths: vec![0; n],
        };
        with_tokens!(batch.ids, v => self.check_rows(batch, v, &mut out)?);
        Ok(out)
    }

    fn check_rows<T: TokenId + PartialEq + FromTokens>(
        &self,
        batch: &BatchView<'_>,
        values: &[T],
        out: &mut Checked,
    ) -> Result<()> {
        let tasks = out.flags.len().div_ceil(ROWS_PER_TASK);
        if self.threads == 1 || tasks < 2 {
            self.check_span(batch, values, 0, &mut out.flags, &mut out.lengths);
            return Ok(());
        }
        self.pool()?.install(|| {
            out.flags
                .par_chunks_mut(ROWS_PER_TASK)
                .zip(out.lengths.par_chunks_mut(ROWS_PER_TASK))
                .enumerate()
                .for_each(|(t, (flags, lengths))| {
                    self.check_span(batch, values, t * ROWS_PER_TASK, flags, lengths)
                });
        });
        Ok(())
    }

    /// Checks rows `first..first + flags.len()`.
    fn check_span<T: TokenId + PartialEq>(
        &self,
        batch: &BatchView<'_>,
        values: &[T],
        first: usize,
        flags: &mut [u64],
        lengths: &mut [u32],
    ) {
        let profile = &*self.profile;
        let mut scratch = Scratch::default();
        let mut counts = vec![0u64; profile.specials.len()];
        for (k, (flag, length)) in flags.iter_mut().zip(lengths.iter_mut()).enumerate() {
            let i = first + k;
            let null = batch.null_rows.is_some_and(|n| n[i]);
            let mut range = if null { 0..0 } else { batch.rows.range(i) };
            if let (Rows::Padded { .. }, Some(pad)) = (batch.rows, self.pad) {
                range.end = range.start + unpadded_len(&values[range.clone()], pad);
            }
            let mask = batch.mask.map(|(m, rows)| {
                let r = if null { 0..0 } else { rows.range(i) };
                match rows {
                    // A padded mask row is cut where its ids row is.
                    Rows::Padded { .. } => m.row(r.start..r.start + range.len()),
                    Rows::Ragged(_) => m.row(r),
                }
            });
            let seq = &values[range];
            let facts = check_sample(profile, seq, None, mask, &mut scratch, &mut counts);
            *flag = facts.flags;
            *length = seq.len() as u32;
        }
    }
}

/// Length of `row` without its trailing `pad` tokens. Padding is often half a 2-D batch, so whole chunks are
/// tested at once with a branch-free fold.
fn unpadded_len<T: TokenId>(row: &[T], pad: u32) -> usize {
    const CHUNK: usize = 32;
    let mut end = row.len();
    while end >= CHUNK
        && row[end - CHUNK..end]
            .iter()
            .fold(true, |a, t| a & (t.id() == pad))
    {
        end -= CHUNK;
    }
    while end > 0 && row[end - 1].id() == pad {
        end -= 1;
    }
    end
}

/// One sample of [`Validator::check_each`]: its ids and, when there is one, its loss mask.
pub type Sequence<'a> = (Tokens<'a>, Option<MaskSlice<'a>>);

impl Validator {
    /// Checks separately stored samples (one buffer each, e.g. the items a DataLoader worker collects), all
    /// in one call; a mask whose length differs from its ids is `loss_mask_misaligned`.
    pub fn check_each(&self, samples: &[Sequence<'_>]) -> Checked {
        let profile = &*self.profile;
        let mut scratch = Scratch::default();
        let mut counts = vec![0u64; profile.specials.len()];
        let mut out = Checked {
            flags: Vec::with_capacity(samples.len()),
            lengths: Vec::with_capacity(samples.len()),
        };
        for &(ids, mask) in samples {
            let f = with_tokens!(ids, v => check_sample(profile, v, None, mask, &mut scratch, &mut counts));
            out.flags.push(f.flags);
            out.lengths.push(ids.len() as u32);
        }
        out
    }

    /// The anomaly flags of rows `[start, end)` of `corpus` (capped at its end), each checked on its ids alone
    /// (no mask, no prompt split), as [`Self::check_each`] checks them: what the pre-scan profile hint probes,
    /// without handing the samples' arrays to the caller.
    pub fn check_corpus_ids(&self, corpus: &Corpus, start: u64, end: u64) -> Result<Vec<u64>> {
        let rows = corpus.samples(start, end.min(corpus.len()))?;
        let seqs: Vec<Sequence<'_>> = rows.iter().map(|s| (Tokens::I64(&s.ids), None)).collect();
        Ok(self.check_each(&seqs).flags)
    }
}

#[cfg(test)]
mod tests;
