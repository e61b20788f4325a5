//! Bounded memory for the corpus-wide checks of a local scan. Every sample leaves a [`SampleRecord`] (its row,
//! hashes, lengths, id: ~100 bytes) for the checks that need the whole corpus (duplicates, sample ids, prompt
//! groups, length outliers, category majorities); at 10M samples that is a gigabyte. Past a budget
//! (`TOKSCAN_RECORDS_MEMORY`, bytes, default [`DEFAULT_BUDGET`]) a unit's records go to an anonymous temporary
//! file as the unit finishes, and the checks run as on a cluster ([`crate::corpus_checks`]): the keys are routed
//! into hash buckets written to temporary files (a unit's keys folded to one a group of equal keys,
//! [`Bucket::fold`]), each bucket is searched for repeats on its own, and each unit's records are read back to
//! resolve what they flag (once for their codes, and again only for a unit with rows the report lists in full,
//! [`corpus_checks::resolve_units`]). The findings are the in-memory ones (the same steps a Ray scan takes,
//! tested equal); memory is the budget, a unit's records per thread, one bucket's keys (at most one a unit for
//! a group of copies, however many) and one entry per group of repeated keys, plus the 32-byte summary of each
//! flagged sample past the report's detail limit.
//!
//! Near-duplicate detection and prompt pairing look at every record together, so a scan with either keeps its
//! records in memory.
//!
//! [`SampleRecord`]: crate::records::SampleRecord

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::corpus_checks::{self, Bucket};
use crate::error::{Error, Result};
use crate::records::{Records, SampleRecord};
use crate::summary::Partial;

/// Records kept in memory before a scan spills the next units' records (128 MiB: about 1.2M samples).
pub const DEFAULT_BUDGET: u64 = 128 << 20;
/// The environment variable that sets the budget in bytes (0: never spill).
pub const BUDGET_VAR: &str = "TOKSCAN_RECORDS_MEMORY";
/// Bytes of routed keys a sample costs at most in memory (a completion key, an id key, a prompt key).
const KEY_BYTES: u64 = 160;
/// Key buckets at most (open temporary files): 10M samples' keys are then ~6 MB a bucket.
const MAX_BUCKETS: u64 = 256;

/// The budget from the environment (`None`: never spill).
pub fn budget() -> Result<Option<u64>> {
    Ok(match crate::settings::bytes(BUDGET_VAR)? {
        Some(0) => None,
        Some(b) => Some(b),
        None => Some(DEFAULT_BUDGET),
    })
}

fn spill_error(e: std::io::Error) -> Error {
    Error::Usage(format!(
        "cannot write the scan's temporary records (set TMPDIR to a directory with room, or {BUDGET_VAR}=0 to \
         keep them in memory): {e}"
    ))
}

/// One unit's records, in memory or in the spill file.
#[derive(Debug)]
pub enum Held {
    Memory(Records),
    Spilled { offset: u64, len: u64 },
}

/// Where units' records go as the scan runs: memory up to the budget, then one anonymous temporary file.
#[derive(Debug)]
pub struct Spill {
    budget: u64,
    held: AtomicU64,
    file: Mutex<Option<(File, u64)>>,
}

/// What a unit's records take in memory, roughly.
fn footprint(r: &Records) -> u64 {
    let ids: usize = r
        .rows
        .iter()
        .map(|s| s.sample_id.as_ref().map_or(0, |x| x.heap_size() + 16))
        .sum();
    (r.rows.capacity() * std::mem::size_of::<SampleRecord>() + ids) as u64
}

impl Spill {
    pub fn new(budget: u64) -> Spill {
        Spill {
            budget,
            held: AtomicU64::new(0),
            file: Mutex::new(None),
        }
    }

    /// Keeps `records` in memory while the budget allows, else writes them to the spill file.
    pub fn hold(&self, records: Records) -> Result<Held> {
        let size = footprint(&records);
        let before = self.held.fetch_add(size, Ordering::Relaxed);
        if before + size <= self.budget {
            return Ok(Held::Memory(records));
        }
        self.held.fetch_sub(size, Ordering::Relaxed);
        let bytes = records.to_bytes();
        drop(records);
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some((tempfile::tempfile().map_err(spill_error)?, 0));
        }
        let (file, end) = guard.as_mut().expect("created above");
        file.seek(SeekFrom::Start(*end)).map_err(spill_error)?;
        file.write_all(&bytes).map_err(spill_error)?;
        let held = Held::Spilled {
            offset: *end,
            len: bytes.len() as u64,
        };
        *end += bytes.len() as u64;
        Ok(held)
    }

    /// Whether any unit was spilled.
    pub fn spilled(&self) -> bool {
        self.file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The records of `h`, read back when spilled.
    pub fn load<'a>(&self, h: &'a Held) -> Result<Cow<'a, Records>> {
        match h {
            Held::Memory(r) => Ok(Cow::Borrowed(r)),
            &Held::Spilled { offset, len } => {
                let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
                let (file, _) = guard.as_mut().expect("a spilled unit has a file");
                let mut bytes = vec![0u8; len as usize];
                file.seek(SeekFrom::Start(offset))
                    .and_then(|_| file.read_exact(&mut bytes))
                    .map_err(spill_error)?;
                Ok(Cow::Owned(Records::from_bytes(&bytes)?))
            }
        }
    }

    /// The records of every unit in memory, in order (none was spilled: the caller asked for no budget or
    /// the budget held).
    pub fn into_memory(held: Vec<Held>) -> Vec<Records> {
        held.into_iter()
            .map(|h| match h {
                Held::Memory(r) => r,
                Held::Spilled { .. } => unreachable!("records were spilled without a spill in use"),
            })
            .collect()
    }

    /// The corpus-wide findings ([`corpus_checks::local`]'s) for the records of a whole corpus held here: keys
    /// routed into buckets on disk (each small enough for the budget), repeats found bucket by bucket, each
    /// unit's records read back to resolve ([`corpus_checks::resolve_units`]: once for their codes, again only
    /// for a unit with rows the report lists in full).
    pub fn corpus_checks(&self, partial: &Partial, held: &[Held]) -> Result<corpus_checks::Found> {
        let n_buckets = (partial.n_samples() * KEY_BYTES)
            .div_ceil(self.budget.max(1))
            .clamp(1, MAX_BUCKETS) as usize;
        let mut files: Vec<BufWriter<File>> = (0..n_buckets)
            .map(|_| tempfile::tempfile().map(|f| BufWriter::with_capacity(1 << 16, f)))
            .collect::<std::io::Result<_>>()
            .map_err(spill_error)?;
        for h in held {
            let records = self.load(h)?;
            for (b, mut bucket) in corpus_checks::route(&records, n_buckets, &[])
                .into_iter()
                .enumerate()
            {
                if bucket == Bucket::default() {
                    continue;
                }
                bucket.fold();
                let bytes = bucket.to_bytes();
                files[b]
                    .write_all(&(bytes.len() as u64).to_le_bytes())
                    .and_then(|()| files[b].write_all(&bytes))
                    .map_err(spill_error)?;
            }
        }
        let mut repeated = corpus_checks::Repeated::default();
        for w in files {
            let mut f = w.into_inner().map_err(|e| spill_error(e.into_error()))?;
            f.seek(SeekFrom::Start(0)).map_err(spill_error)?;
            let mut r = BufReader::with_capacity(1 << 16, f);
            let mut buckets = Vec::new();
            let mut len = [0u8; 8];
            loop {
                match r.read_exact(&mut len) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(spill_error(e)),
                }
                let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
                r.read_exact(&mut bytes).map_err(spill_error)?;
                buckets.push(Bucket::from_bytes(&bytes)?);
            }
            repeated.merge(corpus_checks::find_repeats(buckets));
        }
        corpus_checks::resolve_units(
            &corpus_checks::Resolution::of(partial, true),
            held.len(),
            |i| self.load(&held[i]),
            &repeated,
        )
    }
}
