//! The format registry: how each input format is recognised and opened, one [`FormatSpec`] per format
//! (declared in its own `source/<fmt>.rs`, beside its reader and writer) listed once in [`FORMATS`].
//! Discovery, [`super::open`], the cluster planner and the error that lists what tokscan reads all go through
//! this table; nothing else names a format.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ColumnNames, Source};
use crate::error::Result;

/// What a format makes of a file found while a folder is searched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Not this format's file: the next format is asked.
    No,
    /// An input of this format (the path it is opened by: a Megatron `.idx` stands for its `.bin`).
    Input(PathBuf),
    /// Part of an input found through another of its files (a Megatron `.bin` beside its `.idx`).
    Part,
    /// A prompts file (JSONL records with `messages` and no token ids), paired with the shards beside it.
    Prompts,
    /// This format's kind of file, but not one it reads: listed as skipped with the reason.
    Refused(&'static str),
}

/// How a format is recognised and opened: one row of [`FORMATS`].
pub struct FormatSpec {
    /// The format's name in reports, cluster plans and the Python API (`"parquet"`).
    pub name: &'static str,
    /// How the list of readable formats shows it in an error (`"Parquet *.parquet"`).
    pub shown_as: &'static str,
    /// A file named explicitly: do its first bytes (up to 64 KiB) and its path say it is this format?
    /// Asked of every format in table order before [`FormatSpec::named`].
    pub sniff: fn(head: &[u8], path: &Path) -> bool,
    /// A file named explicitly whose content no format recognised: does its name say it is this format (the
    /// reader then says what is wrong with it)?
    pub named: fn(file_name: &str) -> bool,
    /// The input a file named explicitly stands for (a NumPy `tokens.npy` for its folder).
    pub input_path: fn(&Path) -> PathBuf,
    /// A file met while a folder is searched, asked of every format in table order until one claims it.
    pub found: fn(&Path) -> Result<Found>,
    /// A folder that is itself an input (`Some(vec![folder])`, NumPy) or lists its inputs (a `datasets`
    /// `save_to_disk` folder's `state.json`); asked before the folder's files are.
    pub folder: fn(&Path) -> Result<Option<Vec<PathBuf>>>,
    /// The names of the files such a folder holds besides its inputs that the format reads (a NumPy folder's
    /// arrays, a `datasets` folder's `state.json`); any other file in it is listed as skipped.
    pub folder_files: &'static [&'static str],
    /// Why another file of such a folder is skipped.
    pub folder_skip: &'static str,
    /// A path that does not exist but names an input (a Megatron prefix, `data_text_document`): the input.
    pub prefix: fn(&Path) -> Option<PathBuf>,
    /// Whether the units of one input may go to different cluster tasks (a JSONL file is parsed whole by
    /// whoever opens it, so its units stay together).
    pub splits_across_tasks: bool,
    /// The files besides its own path (and, for a folder, the files in it) that opening an input reads (a
    /// Megatron `.bin`'s `.idx`): what a cluster task fetches of an input in an object store.
    pub companions: fn(&Path) -> Vec<PathBuf>,
    /// Opens an input, validating its headers and schema.
    pub open: fn(&Path, &ColumnNames) -> Result<Box<dyn Source>>,
}

/// Every format tokscan reads, in the order they are asked (and listed in errors). Adding a format is its
/// file in `source/` and one line here.
///
/// The order decides: NumPy's folder (`tokens.npy`) is taken before a `datasets` folder's `state.json`, and a
/// file's path evidence (a Megatron `.bin` with its `.idx` beside it) before any magic number in its content.
pub static FORMATS: &[&FormatSpec] = &[
    &super::numpy::FORMAT,
    &super::megatron::FORMAT,
    &super::llmc::FORMAT,
    &super::parquet::FORMAT,
    &super::ipc::FORMAT,
    &super::jsonl::FORMAT,
];

/// The formats as an error lists them: "Parquet *.parquet, Arrow IPC *.arrow / *.feather, …".
pub fn formats_list() -> String {
    FORMATS
        .iter()
        .map(|f| f.shown_as)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Defaults for the hooks a format does not need.
pub(crate) fn no_folder(_: &Path) -> Result<Option<Vec<PathBuf>>> {
    Ok(None)
}
pub(crate) fn no_prefix(_: &Path) -> Option<PathBuf> {
    None
}
pub(crate) fn same_path(p: &Path) -> PathBuf {
    p.to_path_buf()
}

/// The last component of `path`, lossily (enough to read an extension: a name that is not UTF-8 is still a
/// shard by its extension).
pub(crate) fn file_name(path: &Path) -> std::borrow::Cow<'_, str> {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default()
}

/// `found` of a format recognised by its file name alone: an input when `named` says so.
pub(crate) fn input_if_named(named: fn(&str) -> bool, path: &Path) -> Found {
    if named(&file_name(path)) {
        Found::Input(path.to_path_buf())
    } else {
        Found::No
    }
}

/// Whether `name` ends with `.EXT` for one of `exts`.
pub(crate) fn has_extension(name: &str, exts: &[&str]) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, e)| exts.contains(&e))
}

/// An input's format: a handle on its row of [`FORMATS`], compared, printed and serialized by name.
#[derive(Clone, Copy)]
pub struct Format(&'static FormatSpec);

impl Format {
    pub const fn of(spec: &'static FormatSpec) -> Self {
        Format(spec)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn spec(self) -> &'static FormatSpec {
        self.0
    }

    /// The registered format called `name`.
    pub fn by_name(name: &str) -> Option<Self> {
        FORMATS.iter().find(|f| f.name == name).map(|f| Format(f))
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}
impl Eq for Format {}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl Serialize for Format {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Format::by_name(&name).ok_or_else(|| {
            let known: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
            serde::de::Error::custom(format!(
                "unknown format {name:?} (known: {})",
                known.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        for (i, f) in FORMATS.iter().enumerate() {
            assert!(FORMATS[..i].iter().all(|g| g.name != f.name), "{}", f.name);
            let json = serde_json::to_string(&Format::of(f)).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name));
            assert_eq!(
                serde_json::from_str::<Format>(&json).unwrap(),
                Format::of(f)
            );
        }
        let err = serde_json::from_str::<Format>("\"csv\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown format \"csv\""), "{err}");
    }

    #[test]
    fn the_error_lists_every_format() {
        assert_eq!(
            formats_list(),
            "NumPy tokens.npy, Megatron *.bin + *.idx, llm.c *.bin, Parquet *.parquet, \
             Arrow IPC *.arrow / *.feather, JSONL *.jsonl[.gz|.zst]"
        );
    }
}
