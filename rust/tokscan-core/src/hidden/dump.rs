//! A dump directory as its writer lays it out: which files are sample files (and the index their names
//! carry), which writer wrote them (the [`Layout`]), and what each tensor of a file is for ([`Roles`]): the
//! token ids, the loss mask, the last hidden state the drafter's targets come from, and the auxiliary layers
//! it is fed. Tensor bytes are read here too, memory-mapped ([`Bytes`]), as `f32` rows whatever the stored
//! float type.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Container, DType, DumpHeader, TensorHeader};
use crate::error::{Error, Result};

/// The writer of a dump, by the names and keys of its files (`../shared/reference/hidden-states.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// SpecForge `scripts/prepare_hidden_states.py`: `rows_{a}-{b}/data_{i}.ckpt[.gz]`.
    Specforge,
    /// Tencent AngelSlim: `rank_{r}/rows_{s}-{e}/data_{k}.ckpt`, `k` counted per rank.
    Angelslim,
    /// vLLM speculators: `hs_{i}.safetensors`, `hidden_states` `[N, layers, D]`.
    Speculators,
    /// The older speculators: `data_{i}.pt` + `data_config.json`, `hidden_states` a list of `[N, D]`.
    SpeculatorsLegacy,
    /// NVIDIA Model-Optimizer `collect_hidden_states`: `{conversation_id}.pt`.
    ModelOptimizer,
}

/// Where a dump's last hidden state was taken: before or after the target model's final norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    Before,
    After,
}

impl Norm {
    pub fn as_str(self) -> &'static str {
        match self {
            Norm::Before => "before the final norm",
            Norm::After => "after the final norm",
        }
    }
}

impl Layout {
    pub const ALL: [Layout; 5] = [
        Layout::Specforge,
        Layout::Angelslim,
        Layout::Speculators,
        Layout::SpeculatorsLegacy,
        Layout::ModelOptimizer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Specforge => "specforge",
            Layout::Angelslim => "angelslim",
            Layout::Speculators => "speculators",
            Layout::SpeculatorsLegacy => "speculators_legacy",
            Layout::ModelOptimizer => "model_optimizer",
        }
    }

    pub fn parse(s: &str) -> Result<Layout> {
        Layout::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Layout::ALL.iter().map(|l| l.as_str()).collect();
                Error::Usage(format!(
                    "--hidden-layout {s:?} is not a dump layout (one of: {})",
                    names.join(", ")
                ))
            })
    }

    /// Where the layout's trainer expects the last state, when its code says (SpecForge and AngelSlim apply
    /// `lm_head` to it directly; speculators applies the verifier's norm itself).
    pub fn trainer_expects(self) -> Option<Norm> {
        match self {
            Layout::Specforge | Layout::Angelslim => Some(Norm::After),
            Layout::Speculators => Some(Norm::Before),
            Layout::SpeculatorsLegacy | Layout::ModelOptimizer => None,
        }
    }

    /// Whether the index in a file's name is meant as the corpus row (with one writer process).
    pub fn index_is_row(self) -> bool {
        matches!(
            self,
            Layout::Specforge | Layout::Speculators | Layout::SpeculatorsLegacy
        )
    }
}

/// A sample file of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpFile {
    pub path: PathBuf,
    /// Its path under the dump directory, `/`-separated: what the report names.
    pub rel: String,
    /// The number its name carries (`data_{i}`, `hs_{i}`).
    pub index: Option<u64>,
    /// Its name without the extension (Model-Optimizer names a file by its conversation id).
    pub stem: String,
}

/// What kind of file a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ckpt,
    Safetensors,
    Pt,
}

fn kind_of(name: &str) -> Option<Kind> {
    if name.ends_with(".ckpt") || name.ends_with(".ckpt.gz") {
        Some(Kind::Ckpt)
    } else if name.ends_with(".safetensors") {
        Some(Kind::Safetensors)
    } else if name.ends_with(".pt") || name.ends_with(".pth") {
        Some(Kind::Pt)
    } else {
        None
    }
}

/// The writers' side files: read by their trainers, not sample files.
fn side_file(name: &str) -> Option<&'static str> {
    match name {
        "vocab_mapping.pt" => Some("the draft vocabulary mapping (a side file, not a sample)"),
        "token_freq.pt" => Some("token frequencies (a side file, not a sample)"),
        "data_config.json" => Some("the dump's layer configuration (read for the layout)"),
        "sample_lengths.json" => Some("the writer's sample lengths (a side file)"),
        _ => None,
    }
}

/// `prefix{digits}` → the number.
fn numbered(stem: &str, prefix: &str) -> Option<u64> {
    let digits = stem.strip_prefix(prefix)?;
    (!digits.is_empty() && digits.len() <= 19 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn stem_of(name: &str) -> &str {
    for ext in [".ckpt.gz", ".ckpt", ".safetensors", ".pth", ".pt"] {
        if let Some(s) = name.strip_suffix(ext) {
            return s;
        }
    }
    name
}

/// Deepest directory level walked under a dump (the writers nest two).
const MAX_DEPTH: usize = 8;

/// The files under `dir` (sorted by path), and every other file with why it is not one.
pub struct Listing {
    pub files: Vec<(DumpFile, Kind)>,
    pub skipped: Vec<(String, String)>,
    /// Whether the directory holds a `data_config.json` (the older speculators).
    pub data_config: bool,
}

fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Listing) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::io(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let here = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
        let linked = e.file_type().is_ok_and(|t| t.is_symlink());
        if meta.is_dir() && linked {
            // A link back up the tree would walk it again and again (and pair every file twice).
            out.skipped
                .push((here, "a symbolic link to a directory: not followed".into()));
            continue;
        }
        if meta.is_dir() {
            if depth >= MAX_DEPTH {
                out.skipped
                    .push((here, format!("deeper than {MAX_DEPTH} levels: not walked")));
            } else {
                walk(&path, &here, depth + 1, out)?;
            }
            continue;
        }
        if name.starts_with('.') {
            out.skipped.push((here, "a hidden file".into()));
            continue;
        }
        if let Some(why) = side_file(&name) {
            out.data_config |= name == "data_config.json";
            out.skipped.push((here, why.into()));
            continue;
        }
        match kind_of(&name) {
            Some(kind) if meta.is_file() => {
                let stem = stem_of(&name).to_string();
                let index = numbered(&stem, "data_").or_else(|| numbered(&stem, "hs_"));
                out.files.push((
                    DumpFile {
                        path,
                        rel: here,
                        index,
                        stem,
                    },
                    kind,
                ))
            }
            Some(_) => out.skipped.push((here, "not a regular file".into())),
            None => out.skipped.push((
                here,
                "not a hidden-state file (.ckpt, .ckpt.gz, .pt, .safetensors)".into(),
            )),
        }
    }
    Ok(())
}

/// Lists the sample files of the dump at `dir`.
pub fn discover(dir: &Path) -> Result<Listing> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        return Err(Error::invalid(
            dir,
            "--hidden-states takes the dump's directory (the folder the writer wrote its files into)",
        ));
    }
    let mut found = Listing {
        files: Vec::new(),
        skipped: Vec::new(),
        data_config: false,
    };
    walk(dir, "", 0, &mut found)?;
    Ok(found)
}

/// The kind of file most of a dump's files are (the first in path order on a tie): a stray file of another
/// kind does not decide the layout.
pub fn main_kind(found: &Listing) -> Option<Kind> {
    let mut counts: Vec<(Kind, usize)> = Vec::new();
    for (_, k) in &found.files {
        match counts.iter_mut().find(|(c, _)| c == k) {
            Some(c) => c.1 += 1,
            None => counts.push((*k, 1)),
        }
    }
    // `max_by_key` keeps the last of equal counts: over the reversed order, the first seen.
    counts.into_iter().rev().max_by_key(|c| c.1).map(|c| c.0)
}

/// The layout of a dump, from its files' names and one readable header's keys (a file of the main kind).
pub fn detect(found: &Listing, header: Option<&DumpHeader>) -> Option<Layout> {
    let has = |k: &str| header.is_some_and(|h| h.tensors.iter().any(|t| t.name == k));
    let kind = &main_kind(found)?;
    let ranked = found
        .files
        .iter()
        .any(|(f, _)| f.rel.split('/').any(|c| numbered(c, "rank_").is_some()));
    Some(match kind {
        Kind::Safetensors => Layout::Speculators,
        Kind::Ckpt if ranked || has("target_hiddens") => Layout::Angelslim,
        Kind::Ckpt => Layout::Specforge,
        Kind::Pt if has("target_hiddens") => Layout::Angelslim,
        Kind::Pt if has("hidden_state") => Layout::Specforge,
        Kind::Pt if found.data_config || has("hidden_states.0") => Layout::SpeculatorsLegacy,
        Kind::Pt => Layout::ModelOptimizer,
    })
}

/// Whether a file of this kind belongs to a dump of `layout`.
pub fn belongs(layout: Layout, f: &(DumpFile, Kind)) -> bool {
    match layout {
        Layout::Specforge | Layout::Angelslim => matches!(f.1, Kind::Ckpt | Kind::Pt),
        Layout::Speculators => f.1 == Kind::Safetensors,
        Layout::SpeculatorsLegacy | Layout::ModelOptimizer => f.1 == Kind::Pt,
    }
}

/// A 2-D view of a tensor's rows: `n` positions of `width` elements, `stride` elements apart, the first at
/// element `skip` (one layer of speculators' `[N, layers, D]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct States {
    pub tensor: TensorHeader,
    pub n: u64,
    pub width: u64,
    pub stride: u64,
    pub skip: u64,
}

impl States {
    fn whole(t: &TensorHeader, n: u64, width: u64) -> States {
        States {
            tensor: t.clone(),
            n,
            width,
            stride: width,
            skip: 0,
        }
    }
}

/// What a file's tensors are for.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    pub ids: Option<(TensorHeader, u64)>,
    pub mask: Option<(TensorHeader, u64)>,
    pub last: Option<States>,
    pub aux: Vec<States>,
    /// The layer count of a `[N, layers, D]` tensor (speculators) or a list (the older speculators).
    pub layers: Option<u64>,
    /// What is missing or not shaped as the layout writes it.
    pub problems: Vec<String>,
}

/// `[N]` or `[1, N]` → N.
fn positions(t: &TensorHeader) -> Option<u64> {
    match t.shape[..] {
        [n] | [1, n] => Some(n),
        _ => None,
    }
}

/// `[N, D]` or `[1, N, D]` → (N, D).
fn rows(t: &TensorHeader) -> Option<(u64, u64)> {
    match t.shape[..] {
        [n, d] | [1, n, d] => Some((n, d)),
        _ => None,
    }
}

/// The roles of a file's tensors in a dump of `layout`.
pub fn roles(layout: Layout, h: &DumpHeader) -> Roles {
    let mut r = Roles::default();
    let ids_key = if layout == Layout::Speculators {
        "token_ids"
    } else {
        "input_ids"
    };
    let vector = |key: &str, r: &mut Roles| -> Option<(TensorHeader, u64)> {
        let t = match h.tensor(key) {
            Some(t) => t,
            None => {
                r.problems.push(format!("no `{key}`"));
                return None;
            }
        };
        match positions(t) {
            Some(n) => Some((t.clone(), n)),
            None => {
                r.problems
                    .push(format!("`{key}` is shaped {:?}, not [N]", t.shape));
                None
            }
        }
    };
    r.ids = vector(ids_key, &mut r);
    if layout != Layout::Speculators {
        r.mask = vector("loss_mask", &mut r);
    }
    let matrix = |key: &str, r: &mut Roles| -> Option<States> {
        let t = match h.tensor(key) {
            Some(t) => t,
            None => {
                r.problems.push(format!("no `{key}`"));
                return None;
            }
        };
        match rows(t) {
            Some((n, d)) => Some(States::whole(t, n, d)),
            None => {
                r.problems
                    .push(format!("`{key}` is shaped {:?}, not [1, N, D]", t.shape));
                None
            }
        }
    };
    match layout {
        Layout::Specforge => {
            r.last = matrix("hidden_state", &mut r);
            let aux = matrix("aux_hidden_state", &mut r);
            r.aux.extend(aux);
        }
        Layout::Angelslim => {
            r.last = matrix("target_hiddens", &mut r);
            let aux = matrix("hidden_states", &mut r);
            r.aux.extend(aux);
        }
        Layout::ModelOptimizer => {
            r.last = matrix("hidden_states", &mut r);
            let aux = matrix("aux_hidden_states", &mut r);
            r.aux.extend(aux);
        }
        Layout::Speculators => match h.tensor("hidden_states") {
            Some(t) => match t.shape[..] {
                // A header may claim any shape of no element: the row widths must stay in range.
                [n, l, d] if l >= 1 && l.checked_mul(d).is_some() => {
                    r.layers = Some(l);
                    r.last = Some(States {
                        tensor: t.clone(),
                        n,
                        width: d,
                        stride: l * d,
                        skip: (l - 1) * d,
                    });
                    if l > 1 {
                        r.aux.push(States {
                            tensor: t.clone(),
                            n,
                            width: (l - 1) * d,
                            stride: l * d,
                            skip: 0,
                        });
                    }
                }
                _ => r.problems.push(format!(
                    "`hidden_states` is shaped {:?}, not [N, layers, D]",
                    t.shape
                )),
            },
            None => r.problems.push("no `hidden_states`".into()),
        },
        Layout::SpeculatorsLegacy => {
            let mut layers: Vec<(u64, &TensorHeader)> = h
                .tensors
                .iter()
                .filter_map(|t| Some((numbered(&t.name, "hidden_states.")?, t)))
                .collect();
            layers.sort_by_key(|(i, _)| *i);
            r.layers = Some(layers.len() as u64);
            match layers.split_last() {
                None => r.problems.push("no `hidden_states` list".into()),
                Some(((_, last), rest)) => {
                    for (i, t) in layers.iter() {
                        if rows(t).is_none() {
                            r.problems.push(format!(
                                "`hidden_states[{i}]` is shaped {:?}, not [N, D]",
                                t.shape
                            ));
                        }
                    }
                    if let Some((n, d)) = rows(last) {
                        r.last = Some(States::whole(last, n, d));
                    }
                    for (_, t) in rest {
                        if let Some((n, d)) = rows(t) {
                            r.aux.push(States::whole(t, n, d));
                        }
                    }
                }
            }
        }
    }
    if let Some(last) = &r.last {
        if !matches!(last.tensor.dtype, DType::BF16 | DType::F16 | DType::F32) {
            r.problems.push(format!(
                "`{}` holds {:?}, not floats",
                last.tensor.name, last.tensor.dtype
            ));
            r.last = None;
        }
    }
    r.aux
        .retain(|a| matches!(a.tensor.dtype, DType::BF16 | DType::F16 | DType::F32));
    r
}

/// A dump file's bytes: the file memory-mapped, or a `.gz` inflated.
pub struct Bytes(Held);

enum Held {
    Map(memmap2::Mmap),
    Inflated(crate::source::jsonl::Text),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Held::Map(m) => m,
            Held::Inflated(v) => v,
        }
    }
}

/// The bytes a header's offsets point into.
pub fn open_bytes(h: &DumpHeader) -> Result<Bytes> {
    let (file, size) = crate::files::open(&h.path)?;
    match h.container {
        Container::TorchZipGz => Ok(Bytes(Held::Inflated(crate::source::jsonl::inflate_file(
            &h.path,
            &file,
            "gz",
            crate::files::max_bytes()?,
        )?))),
        _ => {
            if size != h.size {
                return Err(Error::invalid(
                    &h.path,
                    format!(
                        "changed while read ({} bytes, then {size}): is a writer still at work?",
                        h.size
                    ),
                ));
            }
            // SAFETY: read-only map of a regular file whose size was just checked; the dump is not being
            // written (a writer that cuts it meanwhile would be the same race any reader of it has).
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&h.path, e))?;
            Ok(Bytes(Held::Map(map)))
        }
    }
}

fn slice<'a>(bytes: &'a [u8], t: &TensorHeader) -> std::result::Result<&'a [u8], String> {
    bytes
        .get(t.offset as usize..(t.offset + t.bytes) as usize)
        .ok_or_else(|| format!("`{}` runs past the end of the file (a cut file)", t.name))
}

/// A vector of integers (ids, a mask) as `i64`.
pub fn integers(bytes: &[u8], t: &TensorHeader) -> std::result::Result<Vec<i64>, String> {
    let b = slice(bytes, t)?;
    Ok(match t.dtype {
        DType::I64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        DType::I32 => b
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect(),
        DType::I16 => b
            .chunks_exact(2)
            .map(|c| i64::from(i16::from_le_bytes(c.try_into().expect("2 bytes"))))
            .collect(),
        DType::I8 => b.iter().map(|&x| i64::from(x as i8)).collect(),
        DType::U8 | DType::Bool => b.iter().map(|&x| i64::from(x)).collect(),
        DType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
            .collect(),
        other => return Err(format!("`{}` holds {other:?}, not integers", t.name)),
    })
}

/// Row `i` of a view as `f32`, into `out` (`width` long).
pub fn row_f32(
    bytes: &[u8],
    s: &States,
    i: u64,
    out: &mut [f32],
) -> std::result::Result<(), String> {
    let size = s.tensor.dtype.size();
    let start = s.tensor.offset + (i * s.stride + s.skip) * size;
    let len = s.width * size;
    if i >= s.n || start + len > s.tensor.offset + s.tensor.bytes {
        return Err(format!("`{}` has no row {i}", s.tensor.name));
    }
    let b = bytes
        .get(start as usize..(start + len) as usize)
        .ok_or_else(|| {
            format!(
                "`{}` runs past the end of the file (a cut file)",
                s.tensor.name
            )
        })?;
    match s.tensor.dtype {
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        other => return Err(format!("`{}` holds {other:?}, not floats", s.tensor.name)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(names: &[(&str, Vec<u64>, DType)]) -> DumpHeader {
        DumpHeader {
            path: PathBuf::from("x.ckpt"),
            container: Container::TorchZip,
            size: 0,
            tensors: names
                .iter()
                .map(|(n, shape, dtype)| TensorHeader {
                    name: n.to_string(),
                    dtype: *dtype,
                    shape: shape.clone(),
                    offset: 0,
                    bytes: 0,
                })
                .collect(),
            values: Default::default(),
        }
    }

    #[test]
    fn names_give_their_index_and_stem() {
        assert_eq!(numbered("data_17", "data_"), Some(17));
        assert_eq!(numbered("data_", "data_"), None);
        assert_eq!(numbered("data_1a", "data_"), None);
        assert_eq!(numbered("data_99999999999999999999", "data_"), None);
        assert_eq!(stem_of("data_3.ckpt.gz"), "data_3");
        assert_eq!(stem_of("hs_3.safetensors"), "hs_3");
        assert_eq!(stem_of("conv-9.pt"), "conv-9");
        assert_eq!(kind_of("a.ckpt.gz"), Some(Kind::Ckpt));
        assert_eq!(kind_of("a.json"), None);
    }

    #[test]
    fn the_layout_is_told_by_names_and_keys() {
        let file = |rel: &str, kind| {
            (
                DumpFile {
                    path: PathBuf::from(rel),
                    rel: rel.to_string(),
                    index: None,
                    stem: String::new(),
                },
                kind,
            )
        };
        let listing = |files: Vec<(DumpFile, Kind)>, data_config| Listing {
            files,
            skipped: Vec::new(),
            data_config,
        };
        let l = listing(vec![file("rows_0-2000/data_0.ckpt", Kind::Ckpt)], false);
        assert_eq!(detect(&l, None), Some(Layout::Specforge));
        let l = listing(
            vec![file("rank_1/rows_0-5000/data_0.ckpt", Kind::Ckpt)],
            false,
        );
        assert_eq!(detect(&l, None), Some(Layout::Angelslim));
        let l = listing(vec![file("hs_0.safetensors", Kind::Safetensors)], false);
        assert_eq!(detect(&l, None), Some(Layout::Speculators));
        let l = listing(vec![file("data_0.pt", Kind::Pt)], true);
        assert_eq!(detect(&l, None), Some(Layout::SpeculatorsLegacy));
        let l = listing(vec![file("abc.pt", Kind::Pt)], false);
        assert_eq!(detect(&l, None), Some(Layout::ModelOptimizer));
        let h = header(&[("hidden_state", vec![1, 4, 8], DType::BF16)]);
        assert_eq!(detect(&l, Some(&h)), Some(Layout::Specforge));
        assert_eq!(detect(&listing(vec![], false), None), None);
    }

    #[test]
    fn a_speculators_tensor_is_viewed_as_its_last_layer_and_the_others() {
        let h = header(&[
            ("token_ids", vec![5], DType::I64),
            ("hidden_states", vec![5, 4, 8], DType::BF16),
        ]);
        let r = roles(Layout::Speculators, &h);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let last = r.last.unwrap();
        assert_eq!((last.n, last.width, last.stride, last.skip), (5, 8, 32, 24));
        assert_eq!((r.aux[0].width, r.aux[0].skip), (24, 0));
        assert_eq!(r.layers, Some(4));
        let h = header(&[
            ("input_ids", vec![5], DType::I64),
            ("hidden_state", vec![2, 5, 8], DType::BF16),
        ]);
        let r = roles(Layout::Specforge, &h);
        assert!(r.last.is_none());
        assert!(r.problems.iter().any(|p| p.contains("no `loss_mask`")));
        assert!(r.problems.iter().any(|p| p.contains("not [1, N, D]")));
    }

    #[test]
    fn rows_are_read_as_f32_from_every_float_type() {
        let vals = [1.5f32, -2.0, 0.0, 3.25];
        let view = |dtype: DType| States {
            tensor: TensorHeader {
                name: "h".into(),
                dtype,
                shape: vec![1, 4],
                offset: 0,
                bytes: 4 * dtype.size(),
            },
            n: 1,
            width: 4,
            stride: 4,
            skip: 0,
        };
        let mut out = [0f32; 4];
        let bf16: Vec<u8> = vals
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect();
        row_f32(&bf16, &view(DType::BF16), 0, &mut out).unwrap();
        assert_eq!(out, vals);
        let f16: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        row_f32(&f16, &view(DType::F16), 0, &mut out).unwrap();
        assert_eq!(out, vals);
        let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        row_f32(&f32b, &view(DType::F32), 0, &mut out).unwrap();
        assert_eq!(out, vals);
        assert!(row_f32(&f32b[..8], &view(DType::F32), 0, &mut out).is_err());
        assert!(row_f32(&f32b, &view(DType::F32), 1, &mut out).is_err());
    }
}
