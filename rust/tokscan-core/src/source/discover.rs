//! Discovery: the user's paths (files, folders searched recursively, globs, a Megatron data prefix) turned
//! into a sorted list of inputs, each with the category of a hive-style `category=NAME` folder or of the folder
//! of its prompts file; the prompts files found beside the shards; and every file or folder left aside, with the
//! reason. Each file is recognised through the format registry ([`FORMATS`]), so nothing here names a format
//! but JSONL, whose files may be prompts files.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{file_name, formats_list, jsonl, Claim, Format, FormatSpec, Input, FORMATS};
use crate::error::{Error, Result};
use crate::profile::tokenizer_files;

/// A file or folder a directory scan left aside, and why (listed in the report, never dropped in silence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// Why a file in a folder is skipped when no format reads it: a note, a config, a `dataset_dict.json` (what
/// `clean` copies beside the cleaned inputs, unlike the other files discovery leaves aside).
pub const NOT_A_CORPUS_FILE: &str = "not a corpus file (no known format)";

/// Why a prompts file found in a folder does not pair: the folder holds another that does, or several and none
/// named `prompts.jsonl` (the start of the reason; `clean` copies these beside the cleaned inputs too).
pub const UNPAIRED_PROMPTS_FILE: &str = "a prompts file that does not pair";

/// The name a folder's prompts file has when it holds several: `prompts.jsonl` or `prompts.ndjson`, optionally
/// `.gz` / `.zst` (not `prompts.old.jsonl`).
fn is_conventional_prompts_name(path: &Path) -> bool {
    let Some(n) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let n = [".gz", ".zst", ".zstd"]
        .iter()
        .find_map(|z| n.strip_suffix(z))
        .unwrap_or(n);
    n == "prompts.jsonl" || n == "prompts.ndjson"
}

/// One prompts file per folder: where a folder holds several (`prompts.jsonl` beside `prompts_edited.jsonl`,
/// an old copy kept beside the real one), the one named `prompts.jsonl` pairs and the others are listed as
/// skipped; with several and none of that name, none pairs (which one is meant is the user's to say), and that
/// folder is returned in `unpaired` so that its shards pair with no file above it either. Two files never pair
/// the same samples.
fn one_prompts_file_per_folder(
    prompts: Vec<PromptsFile>,
    skipped: &mut Vec<Skipped>,
    unpaired: &mut Vec<PathBuf>,
) -> Vec<PromptsFile> {
    let mut by_dir: BTreeMap<PathBuf, Vec<PromptsFile>> = BTreeMap::new();
    for p in prompts {
        by_dir.entry(p.dir.clone()).or_default().push(p);
    }
    let mut out = Vec::new();
    for (_, mut files) in by_dir {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.len() == 1 {
            out.extend(files);
            continue;
        }
        let named: Vec<usize> = (0..files.len())
            .filter(|&i| is_conventional_prompts_name(&files[i].path))
            .collect();
        let keep = (named.len() == 1).then(|| named[0]);
        if keep.is_none() {
            unpaired.push(files[0].dir.clone());
        }
        let why = match keep {
            Some(k) => format!(
                "{UNPAIRED_PROMPTS_FILE}: {} is this folder's prompts file; pass --prompts to use this one",
                file_name(&files[k].path)
            ),
            None => format!(
                "{UNPAIRED_PROMPTS_FILE}: one of {} prompts files in this folder and {} named prompts.jsonl; \
                 pass --prompts to choose one",
                files.len(),
                if named.is_empty() { "none" } else { "more than one" }
            ),
        };
        for (i, f) in files.into_iter().enumerate() {
            if Some(i) == keep {
                out.push(f);
            } else {
                skipped.push(Skipped {
                    path: f.path,
                    reason: why.clone(),
                });
            }
        }
    }
    out
}

/// A prompts file found beside the shards (`{"id"?, "messages": [...], "tools"?: [...]}` per line): it pairs
/// with the inputs under its folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptsFile {
    pub path: PathBuf,
    /// The folder whose inputs it pairs with.
    pub dir: PathBuf,
    /// The folder is below a path the user named, so its name is the category of its inputs (a prompts file
    /// at the top of the scan names none).
    pub names_category: bool,
}

/// What discovery found: the inputs to read (sorted by path), the prompts files beside them and what it left
/// aside.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub inputs: Vec<Input>,
    pub prompts: Vec<PromptsFile>,
    /// Folders whose several prompts files do not pair ([`crate::corpus::Corpus::unpaired_prompt_dirs`]).
    pub unpaired_prompt_dirs: Vec<PathBuf>,
    pub skipped: Vec<Skipped>,
}

/// Expands the user's paths (files, directories searched recursively, globs) into sorted inputs.
pub fn discover(paths: &[String]) -> Result<Vec<Input>> {
    discover_all(paths).map(|d| d.inputs)
}

/// Expands the user's paths into sorted inputs, the prompts files found in the folders searched, and what
/// was left aside. A file named explicitly is read strictly (its reader says what is wrong with it); a folder
/// is read as it is laid out: shards are inputs, a JSONL file whose records carry `messages` and no token ids
/// is a prompts file, and anything else is listed as skipped with the reason. The same file reached twice
/// (a symlink, a hard link, overlapping paths) is read once.
pub fn discover_all(paths: &[String]) -> Result<Discovery> {
    if paths.is_empty() {
        return Err(Error::Usage("no input paths given".into()));
    }
    let mut w = Walk::default();
    for p in paths {
        let path = Path::new(p);
        if path.exists() {
            w.path(path, path)?;
        } else if let Some((input, format)) = FORMATS
            .iter()
            .find_map(|f| (f.prefix)(path).map(|input| (input, Format::of(f))))
        {
            // A path that names an input without being a file (a Megatron data prefix).
            w.push(path, input, format, path);
        } else if p.contains(['*', '?', '[']) {
            let matches =
                glob::glob(p).map_err(|e| Error::Usage(format!("{p}: bad glob pattern: {e}")))?;
            let mut any = false;
            for m in matches {
                let m = m.map_err(|e| Error::io(e.path(), std::io::Error::other(e.to_string())))?;
                any = true;
                w.path(&m, &m)?;
            }
            if !any {
                return Err(Error::Usage(format!("{p}: no files match")));
            }
        } else {
            return Err(Error::NotFound {
                path: path.to_path_buf(),
            });
        }
    }
    // Several folders named, each with its prompts file (`scan data/B1_code data/B2_math`): each is a category,
    // as it is when their parent is named; one folder named is the whole scan, and its name none.
    if w.roots.len() > 1 {
        for p in &mut w.prompts {
            p.names_category = true;
        }
    }
    let mut d = Discovery {
        inputs: w.inputs,
        prompts: Vec::new(),
        unpaired_prompt_dirs: Vec::new(),
        skipped: w.skipped,
    };
    d.inputs.sort_by(|a, b| a.path.cmp(&b.path));
    d.inputs.dedup_by(|a, b| a.path == b.path);
    // A folder holding a prompts file names the category of the shards under it (unless a `category=NAME`
    // folder already does): the drafter layout `data/B1_glaive/{shards, prompts.jsonl}`. So it does when its
    // prompts files do not pair (several, none named prompts.jsonl).
    for i in &mut d.inputs {
        if i.hive_category.is_none() {
            i.hive_category = prompts_for(&w.prompts, &i.path)
                .filter(|p| p.names_category)
                .and_then(|p| p.dir.file_name())
                .map(|n| n.to_string_lossy().into_owned());
        }
    }
    d.prompts = one_prompts_file_per_folder(w.prompts, &mut d.skipped, &mut d.unpaired_prompt_dirs);
    d.prompts.sort_by(|a, b| a.path.cmp(&b.path));
    d.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(d)
}

/// The prompts file that pairs with the input at `path`: the one in its nearest folder.
pub fn prompts_for<'p>(prompts: &'p [PromptsFile], path: &Path) -> Option<&'p PromptsFile> {
    prompts
        .iter()
        .filter(|p| path.starts_with(&p.dir) && path != p.dir)
        .max_by_key(|p| p.dir.components().count())
}

/// [`prompts_for`], unless a folder nearer the input holds prompts files none of which pairs (`unpaired`).
pub fn paired_prompts_for<'p>(
    prompts: &'p [PromptsFile],
    unpaired: &[PathBuf],
    path: &Path,
) -> Option<&'p PromptsFile> {
    let found = prompts_for(prompts, path)?;
    let depth = found.dir.components().count();
    let nearer = unpaired
        .iter()
        .any(|d| path.starts_with(d) && d.components().count() > depth);
    (!nearer).then_some(found)
}

/// Discovery's state: what it found so far and the files it has already taken (by device and inode, so a
/// file reached twice through a symlink or a hard link is read once).
#[derive(Default)]
struct Walk {
    inputs: Vec<Input>,
    prompts: Vec<PromptsFile>,
    skipped: Vec<Skipped>,
    /// Each folder walked (canonical), with the named path whose walk met it first (its index in `named`).
    dirs: std::collections::HashMap<PathBuf, usize>,
    /// Folders met again that an earlier named path's walk had met (named twice, inside or around a folder
    /// named before); a symlink loop within one walk is not counted.
    revisits: u64,
    /// The folders named (canonical; each folder a glob matches counts), and how many paths were named.
    roots: HashSet<PathBuf>,
    named: usize,
    files: std::collections::HashMap<(u64, u64), PathBuf>,
}

/// A file's identity: `(device, inode)` where the platform has them, else its canonical path's hash.
pub(crate) fn file_key(path: &Path, meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = path;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        (
            0,
            xxhash_rust::xxh3::xxh3_64(canon.to_string_lossy().as_bytes()),
        )
    }
}

impl Walk {
    /// What a folder that is (or lists) inputs holds besides them and the files its format reads there: a
    /// prompts file is taken as one (a category folder that is itself a NumPy corpus), anything else is listed
    /// as skipped, hidden files as in any folder: nothing in it is passed over in silence.
    fn skip_unread(
        &mut self,
        root: &Path,
        dir: &Path,
        inputs: &[PathBuf],
        f: &FormatSpec,
    ) -> Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let read = inputs.contains(&entry) || f.folder_files.contains(&name.as_str());
            if read || self.skip_hidden(&entry, &name) {
                continue;
            }
            if entry.is_file() && matches!((jsonl::FORMAT.found)(&entry)?, Claim::Prompts) {
                self.take_prompts(root, dir, &entry);
            } else {
                self.skip(&entry, f.folder_skip);
            }
        }
        Ok(())
    }

    /// Lists `entry` as skipped when its name marks it hidden (`.git`, `_SUCCESS`, `.cache`: metadata, not
    /// shards); says whether it did.
    fn skip_hidden(&mut self, entry: &Path, name: &str) -> bool {
        let hidden = name.starts_with('.') || name.starts_with('_');
        if hidden {
            self.skip(entry, "hidden (name starts with '.' or '_')");
        }
        hidden
    }

    /// Takes `entry`, found in `dir`, as a prompts file (it names the category of a folder below the root).
    fn take_prompts(&mut self, root: &Path, dir: &Path, entry: &Path) {
        self.prompts.push(PromptsFile {
            path: entry.to_path_buf(),
            dir: dir.to_path_buf(),
            names_category: dir != root,
        });
    }

    fn skip(&mut self, path: &Path, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason: reason.into(),
        });
    }

    /// Takes `path` as an input of `format` unless the same file was taken already (then it is listed as
    /// skipped, naming the first path).
    fn push(&mut self, root: &Path, path: PathBuf, format: Format, hive_from: &Path) {
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.is_file() {
                let key = file_key(&path, &meta);
                if let Some(first) = self.files.get(&key) {
                    if first != &path {
                        let why = format!("the same file as {}", first.display());
                        self.skip(&path, why);
                    }
                    return;
                }
                self.files.insert(key, path.clone());
            }
        }
        self.inputs.push(Input {
            path,
            format,
            hive_category: hive_category(root, hive_from),
        });
    }

    /// A path the user named (or a glob matched): strict for a file, laid-out reading for a folder.
    fn path(&mut self, root: &Path, path: &Path) -> Result<()> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        self.named += 1;
        if meta.is_dir() {
            self.roots
                .insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        }
        if meta.is_file() {
            // A file named explicitly is recognised by its content, else its name; anything else is refused
            // with the list of formats.
            let Some(format) = sniff_file(path)? else {
                let why = format!("not a corpus file (no known format: {})", formats_list());
                return Err(Error::invalid(path, why));
            };
            self.push(root, (format.spec().input_path)(path), format, path);
            return Ok(());
        }
        if !meta.is_dir() {
            return Err(Error::invalid(
                path,
                "not a regular file or directory (a FIFO, socket or device is not read)",
            ));
        }
        // A folder named twice, inside or around one named before, was (partly) read then: its inputs are not
        // new, and that is no reason to say it holds no corpus.
        let (before, met_before) = (self.inputs.len(), self.revisits);
        self.dir(root, path)?;
        if self.inputs.len() == before && path == root && self.revisits == met_before {
            return Err(Error::invalid(
                path,
                format!("no corpus found ({})", formats_list()),
            ));
        }
        Ok(())
    }

    /// A folder, read as it is laid out.
    fn dir(&mut self, root: &Path, path: &Path) -> Result<()> {
        let canon = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        if let Some(&first) = self.dirs.get(&canon) {
            // A directory reached twice: through overlapping named paths, or a symlink loop in this walk.
            self.revisits += u64::from(first + 1 != self.named);
            return Ok(());
        }
        self.dirs.insert(canon, self.named - 1);
        for f in FORMATS {
            if let Some(inputs) = (f.folder)(path)? {
                for input in &inputs {
                    self.push(root, input.clone(), Format::of(f), input);
                }
                self.skip_unread(root, path, &inputs, f)?;
                return Ok(());
            }
        }
        if path != root && tokenizer_files::is_tokenizer_dir(path) {
            self.skip(path, "a tokenizer directory");
            return Ok(());
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::io(path, e))?
            .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(path, e)))
            .collect::<Result<_>>()?;
        entries.sort();
        let tokenizer_here = path == root && tokenizer_files::is_tokenizer_dir(path);
        for entry in entries {
            let name = entry
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if self.skip_hidden(&entry, &name) {
                continue;
            }
            let meta = match std::fs::metadata(&entry) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.skip(&entry, "a broken symbolic link");
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(ELOOP) => {
                    self.skip(&entry, "a symbolic link loop");
                    continue;
                }
                Err(e) => return Err(Error::io(&entry, e)),
            };
            if meta.is_dir() {
                self.dir(root, &entry)?;
                continue;
            }
            if !meta.is_file() {
                self.skip(
                    &entry,
                    "not a regular file (a FIFO, socket or device is not read)",
                );
                continue;
            }
            if tokenizer_here && tokenizer_files::is_tokenizer_file(&name) {
                self.skip(&entry, "a tokenizer file");
                continue;
            }
            self.file(root, path, &entry)?;
        }
        Ok(())
    }

    /// A file met in `dir`: the first format that claims it says what it is.
    fn file(&mut self, root: &Path, dir: &Path, entry: &Path) -> Result<()> {
        for f in FORMATS {
            match (f.found)(entry)? {
                Claim::No => continue,
                Claim::Input(input) => self.push(root, input, Format::of(f), entry),
                Claim::Part => {}
                Claim::Prompts => self.take_prompts(root, dir, entry),
                Claim::Refused(why) => self.skip(entry, why),
            }
            return Ok(());
        }
        self.skip(entry, NOT_A_CORPUS_FILE);
        Ok(())
    }
}

/// The error a symbolic link loop gives (`ELOOP`; 40 on Linux, 62 on macOS and the BSDs).
#[cfg(any(
    target_os = "macos",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
))]
const ELOOP: i32 = 62;
#[cfg(not(any(
    target_os = "macos",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
)))]
const ELOOP: i32 = 40;

/// The innermost `category=NAME` folder on the path, if any.
fn hive_category(_root: &Path, path: &Path) -> Option<String> {
    path.components()
        .filter_map(|c| {
            c.as_os_str()
                .to_str()
                .and_then(|s| s.strip_prefix("category="))
        })
        .next_back()
        .map(str::to_string)
}

/// The first bytes of a file (enough to recognise every format by its content).
fn head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]).map_err(|e| Error::io(path, e))? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// The format of a file named explicitly: the first whose sniffer recognises its content (and path), else the
/// first whose name it has; `None` when neither says.
fn sniff_file(path: &Path) -> Result<Option<Format>> {
    let head = head(path)?;
    let name = file_name(path);
    Ok(FORMATS
        .iter()
        .find(|f| (f.sniff)(&head, path))
        .or_else(|| FORMATS.iter().find(|f| (f.named)(&name)))
        .map(|f| Format::of(f)))
}

#[cfg(test)]
mod overlap_tests {
    use super::*;

    /// A folder named twice, or beside a folder inside it (in either order), is read once: the second naming
    /// was "no corpus found" because it found no input that was not taken already.
    #[test]
    fn overlapping_folders_are_read_once_and_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(
            data.join("sub").join("a.jsonl"),
            "{\"input_ids\": [1, 2]}\n",
        )
        .unwrap();
        let (d, sub) = (
            data.display().to_string(),
            data.join("sub").display().to_string(),
        );
        for paths in [
            vec![d.clone(), d.clone()],
            vec![d.clone(), sub.clone()],
            vec![sub.clone(), d.clone()],
        ] {
            let found = discover_all(&paths).expect("read");
            assert_eq!(found.inputs.len(), 1, "{paths:?}");
        }
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = discover_all(&[empty.display().to_string()]).expect_err("no corpus");
        assert!(err.to_string().contains("no corpus found"), "{err}");
        // A folder holding only a symlink to itself holds no corpus, alone or beside one that does.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(".", empty.join("self")).unwrap();
            for paths in [
                vec![empty.display().to_string()],
                vec![sub.clone(), empty.display().to_string()],
            ] {
                let err = discover_all(&paths).expect_err("no corpus");
                assert!(
                    err.to_string().contains("no corpus found"),
                    "{paths:?}: {err}"
                );
            }
        }
    }
}

#[cfg(test)]
mod category_folder_tests {
    use super::*;

    /// Category folders named one by one are categories, as they are when their parent is named; one folder
    /// named alone names none (it was `default` for both).
    #[test]
    fn each_of_several_folders_named_with_a_prompts_file_is_a_category() {
        let dir = tempfile::tempdir().unwrap();
        let mut named = Vec::new();
        for cat in ["B1_code", "B2_math"] {
            let d = dir.path().join(cat);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("gen.jsonl"), "{\"input_ids\": [1, 2]}\n").unwrap();
            std::fs::write(
                d.join("prompts.jsonl"),
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
            )
            .unwrap();
            named.push(d.display().to_string());
        }
        let cats = |paths: &[String]| -> Vec<Option<String>> {
            let found = discover_all(paths).expect("read");
            found.inputs.into_iter().map(|i| i.hive_category).collect()
        };
        let both = vec![Some("B1_code".to_string()), Some("B2_math".to_string())];
        assert_eq!(cats(&named), both);
        assert_eq!(cats(&[dir.path().display().to_string()]), both);
        assert_eq!(cats(&named[..1]), vec![None]);
        // One folder named twice is still one folder: no category.
        assert_eq!(cats(&[named[0].clone(), named[0].clone()]), vec![None]);
    }

    #[test]
    fn a_folder_pairs_with_one_prompts_file_and_lists_the_others() {
        let prompt = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (cat, names) in [
            (
                "B1_code",
                &[
                    "prompts.jsonl",
                    "prompts.old.jsonl",
                    "prompts_edited.jsonl",
                    "prompts_rotated.jsonl",
                ][..],
            ),
            ("B2_math", &["math_a.jsonl", "math_b.jsonl"][..]),
            ("B3_chat", &["chat.jsonl"][..]),
        ] {
            let d = root.join(cat);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("gen.jsonl"), "{\"input_ids\": [1, 2]}\n").unwrap();
            for n in names {
                std::fs::write(d.join(n), prompt).unwrap();
            }
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink("loop.jsonl", root.join("B3_chat/loop.jsonl")).unwrap();
        let found = discover_all(&[root.display().to_string()]).expect("read");
        let paired: Vec<_> = found
            .prompts
            .iter()
            .map(|p| p.path.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            paired,
            vec![
                PathBuf::from("B1_code/prompts.jsonl"),
                PathBuf::from("B3_chat/chat.jsonl")
            ]
        );
        let why = |name: &str| {
            found
                .skipped
                .iter()
                .find(|s| s.path == root.join(name))
                .map(|s| s.reason.clone())
                .unwrap_or_else(|| panic!("{name} not listed: {:?}", found.skipped))
        };
        for n in [
            "B1_code/prompts.old.jsonl",
            "B1_code/prompts_edited.jsonl",
            "B1_code/prompts_rotated.jsonl",
        ] {
            let r = why(n);
            assert!(r.starts_with(UNPAIRED_PROMPTS_FILE), "{r}");
            assert!(
                r.contains("prompts.jsonl is this folder's") && r.contains("--prompts"),
                "{r}"
            );
        }
        for n in ["B2_math/math_a.jsonl", "B2_math/math_b.jsonl"] {
            assert!(why(n)
                .contains("one of 2 prompts files in this folder and none named prompts.jsonl"));
        }
        #[cfg(unix)]
        assert_eq!(why("B3_chat/loop.jsonl"), "a symbolic link loop");
        // B2's shards pair with no prompts file, not with one a folder above holds.
        assert_eq!(found.unpaired_prompt_dirs, vec![root.join("B2_math")]);
        std::fs::write(root.join("prompts.jsonl"), prompt).unwrap();
        let found = discover_all(&[root.display().to_string()]).expect("read");
        let shard = root.join("B2_math/gen.jsonl");
        assert!(prompts_for(&found.prompts, &shard).is_some());
        assert!(paired_prompts_for(&found.prompts, &found.unpaired_prompt_dirs, &shard).is_none());
        let shard = root.join("B1_code/gen.jsonl");
        assert_eq!(
            paired_prompts_for(&found.prompts, &found.unpaired_prompt_dirs, &shard)
                .map(|p| p.path.clone()),
            Some(root.join("B1_code/prompts.jsonl"))
        );
        std::fs::remove_file(root.join("prompts.jsonl")).unwrap();
        // A folder whose prompts files do not pair still names its category.
        let cats: Vec<_> = found
            .inputs
            .iter()
            .map(|i| i.hive_category.clone())
            .collect();
        assert_eq!(
            cats,
            ["B1_code", "B2_math", "B3_chat"].map(|c| Some(c.to_string()))
        );
    }
}
