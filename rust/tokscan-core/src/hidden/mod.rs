//! Offline hidden-state dumps of EAGLE-3 trainers (SpecForge `.ckpt`, speculators `.safetensors`,
//! Model-Optimizer `.pt`; see `../shared/reference/hidden-states.md`): one file per sample, read without torch
//! and without running any code in it.
//!
//! This module reads a dump file's **header**: which tensors it holds, their element type and shape, and where
//! their bytes are — from the zip central directory and the restricted pickle ([`pickle`]) of a `torch.save`
//! file, or the JSON header of a safetensors file. No tensor byte is read to list them; the records `torch.save`
//! writes are stored uncompressed and aligned, so their bytes can be memory-mapped where a check needs them.
//! A `.gz` file (SpecForge `--compress`) is inflated whole, within the cap compressed JSONL shards have.

pub mod check;
pub mod dump;
pub mod pickle;
pub mod target;

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// Element types of the tensors a dump holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    BF16,
    F16,
    F32,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::F16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    fn of_safetensors(d: safetensors::Dtype) -> Option<DType> {
        use safetensors::Dtype as S;
        Some(match d {
            S::BF16 => DType::BF16,
            S::F16 => DType::F16,
            S::F32 => DType::F32,
            S::F64 => DType::F64,
            S::I64 => DType::I64,
            S::I32 => DType::I32,
            S::I16 => DType::I16,
            S::I8 => DType::I8,
            S::U8 => DType::U8,
            S::BOOL => DType::Bool,
            _ => return None,
        })
    }
}

/// One tensor of a dump file: its name (the key of the saved dict), type, shape and bytes `[offset, offset +
/// bytes)` in the file (in the inflated stream for a `.gz`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorHeader {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub offset: u64,
    pub bytes: u64,
}

/// How a dump file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Container {
    /// The zip `torch.save` writes (`.ckpt`, `.pt`).
    TorchZip,
    /// The same inside gzip (SpecForge `--compress`: `.ckpt.gz`).
    TorchZipGz,
    Safetensors,
}

/// A dump file's header.
#[derive(Debug, Clone, Serialize)]
pub struct DumpHeader {
    pub path: PathBuf,
    pub container: Container,
    /// File size in bytes (of the file on disk).
    pub size: u64,
    pub tensors: Vec<TensorHeader>,
    /// Plain values saved beside the tensors (Model-Optimizer's `conversation_id`), as text.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub values: std::collections::BTreeMap<String, String>,
}

impl DumpHeader {
    pub fn tensor(&self, name: &str) -> Option<&TensorHeader> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// The header of the dump file `path`, by its content (a zip, gzip or safetensors file), whatever its name.
pub fn read_header(path: &Path) -> Result<DumpHeader> {
    let (mut f, size) = crate::files::open(path)?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic).map_err(|e| Error::io(path, e))?;
    f.rewind().map_err(|e| Error::io(path, e))?;
    let bad = |why: String| Error::invalid(path, why);
    match &magic[..n] {
        [b'P', b'K', 3, 4] => {
            // Buffered: the zip reader parses the central directory in many small reads.
            let (tensors, values) = torch_zip(std::io::BufReader::new(f), size).map_err(bad)?;
            Ok(DumpHeader {
                path: path.to_path_buf(),
                container: Container::TorchZip,
                size,
                tensors,
                values,
            })
        }
        [0x1f, 0x8b, ..] => {
            // Inflated whole, as a compressed JSONL shard is (within the same cap).
            let bytes =
                crate::source::jsonl::inflate_file(path, &f, "gz", crate::files::max_bytes()?)?;
            let inflated = bytes.len() as u64;
            let (tensors, values) = torch_zip(std::io::Cursor::new(&*bytes), inflated)
                .map_err(|e| bad(format!("inside its gzip: {e}")))?;
            Ok(DumpHeader {
                path: path.to_path_buf(),
                container: Container::TorchZipGz,
                size,
                tensors,
                values,
            })
        }
        _ if n == 4 || size >= 8 => {
            let tensors = safetensors_header(f, size).map_err(bad)?;
            Ok(DumpHeader {
                path: path.to_path_buf(),
                container: Container::Safetensors,
                size,
                tensors,
                values: Default::default(),
            })
        }
        _ => Err(bad(
            "not a hidden-state dump (neither a torch.save zip, gzip nor safetensors)".into(),
        )),
    }
}

/// Largest `data.pkl` read (a dict of a few tensors is a few hundred bytes).
const MAX_PICKLE_BYTES: u64 = 16 << 20;

/// The tensors of a `torch.save` zip: the central directory names the records, `data.pkl` (read through the
/// restricted [`pickle`]) names the tensors and their storages, and each storage is the stored record
/// `data/{key}`.
type Values = std::collections::BTreeMap<String, String>;

fn torch_zip<R: Read + Seek>(
    reader: R,
    size: u64,
) -> std::result::Result<(Vec<TensorHeader>, Values), String> {
    let mut zip =
        zip::ZipArchive::new(reader).map_err(|e| format!("not a readable torch.save zip: {e}"))?;
    let mut records: std::collections::HashMap<String, (u64, u64)> = Default::default();
    let mut pkl = None;
    for i in 0..zip.len() {
        let f = zip
            .by_index_raw(i)
            .map_err(|e| format!("a damaged zip record: {e}"))?;
        let name = f
            .name()
            .map_err(|e| format!("a zip record name: {e}"))?
            .to_string();
        if name.ends_with("/data.pkl") || name == "data.pkl" {
            pkl = Some(i);
            continue;
        }
        let Some((_, key)) = name.split_once("/data/") else {
            continue;
        };
        if f.compression() != zip::CompressionMethod::Stored {
            return Err(format!(
                "the record {name} is compressed (torch.save stores records as they are)"
            ));
        }
        let start = f
            .data_start()
            .ok_or_else(|| format!("the record {name} has no data offset"))?;
        let len = f.size();
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(format!(
                "the record {name} runs past the end of the file (a cut file)"
            ));
        }
        records.insert(key.to_string(), (start, len));
    }
    let pkl = pkl.ok_or("no data.pkl in the zip (not a torch.save file)")?;
    let mut bytes = Vec::new();
    zip.by_index(pkl)
        .map_err(|e| format!("data.pkl: {e}"))?
        .take(MAX_PICKLE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("data.pkl: {e}"))?;
    let value = pickle::load(&bytes).map_err(|e| format!("data.pkl: {e}"))?;
    let pickle::Value::Dict(items) = value else {
        return Err("data.pkl does not hold a dict of tensors".into());
    };
    let mut out = Vec::with_capacity(items.len());
    let mut values = Values::new();
    for (k, v) in items {
        let pickle::Value::Str(name) = k else {
            return Err("a key of the saved dict is not a string".into());
        };
        let tensor = match v {
            pickle::Value::Tensor {
                key,
                dtype,
                offset,
                shape,
                stride,
            } => (key, dtype, offset, shape, stride),
            // A list of tensors (the older speculators' `hidden_states`): each is `name.i`.
            pickle::Value::List(list) => {
                for (i, t) in list.into_iter().enumerate() {
                    let pickle::Value::Tensor {
                        key,
                        dtype,
                        offset,
                        shape,
                        stride,
                    } = t
                    else {
                        return Err(format!("{name}[{i}] is not a tensor"));
                    };
                    out.push(located(
                        &records,
                        format!("{name}.{i}"),
                        key,
                        dtype,
                        offset,
                        shape,
                        stride,
                    )?);
                }
                continue;
            }
            // Plain values beside the tensors (a `conversation_id` string, a flag) are not tensors.
            pickle::Value::Str(s) => {
                values.insert(name, s);
                continue;
            }
            pickle::Value::Int(i) => {
                values.insert(name, i.to_string());
                continue;
            }
            pickle::Value::Bool(_) | pickle::Value::None | pickle::Value::Float(_) => continue,
            _ => return Err(format!("{name} is not a tensor")),
        };
        let (key, dtype, offset, shape, stride) = tensor;
        out.push(located(&records, name, key, dtype, offset, shape, stride)?);
    }
    Ok((out, values))
}

/// A tensor's bytes within its storage's record: contiguous (row-major strides), inside the record.
fn located(
    records: &std::collections::HashMap<String, (u64, u64)>,
    name: String,
    key: String,
    dtype: DType,
    offset: u64,
    shape: Vec<u64>,
    stride: Vec<u64>,
) -> std::result::Result<TensorHeader, String> {
    let &(start, len) = records
        .get(&key)
        .ok_or_else(|| format!("{name}: its storage data/{key} is not in the zip (a cut file)"))?;
    if stride.len() != shape.len() {
        return Err(format!(
            "{name}: strides {stride:?} do not match its shape {shape:?}"
        ));
    }
    let mut want = 1u64;
    for (d, s) in shape.iter().zip(&stride).rev() {
        if *d > 1 && *s != want {
            return Err(format!(
                "{name}: not a contiguous tensor (strides {stride:?} of shape {shape:?})"
            ));
        }
        want = want.saturating_mul(*d);
    }
    let numel = shape
        .iter()
        .try_fold(1u64, |a, d| a.checked_mul(*d))
        .ok_or(format!("{name}: a shape too large"))?;
    let bytes = numel
        .checked_mul(dtype.size())
        .ok_or(format!("{name}: a shape too large"))?;
    let at = offset
        .checked_mul(dtype.size())
        .ok_or(format!("{name}: an offset too large"))?;
    if at.checked_add(bytes).is_none_or(|end| end > len) {
        return Err(format!(
            "{name}: {bytes} bytes at {at} of a storage of {len} bytes (a cut or damaged file)"
        ));
    }
    Ok(TensorHeader {
        name,
        dtype,
        shape,
        offset: start + at,
        bytes,
    })
}

/// Largest safetensors header read (a dump's is a few hundred bytes; the format allows 100 MB).
const MAX_SAFETENSORS_HEADER: u64 = 100 << 20;

/// The tensors of a safetensors file, from its header alone.
fn safetensors_header<R: Read>(
    mut f: R,
    size: u64,
) -> std::result::Result<Vec<TensorHeader>, String> {
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| "not a safetensors file (shorter than its header length)")?;
    let n = u64::from_le_bytes(n);
    if n > MAX_SAFETENSORS_HEADER || n + 8 > size {
        return Err(format!(
            "not a safetensors file (a header of {n} bytes in a file of {size}): neither a torch.save zip nor gzip"
        ));
    }
    let mut buf = vec![0u8; 8 + n as usize];
    buf[..8].copy_from_slice(&n.to_le_bytes());
    f.read_exact(&mut buf[8..])
        .map_err(|e| format!("its safetensors header: {e}"))?;
    // `read_metadata` checks the offsets against the buffer's length: give it the header and say the data is
    // there (its length is checked here against the file's).
    let header: serde_json::Value = serde_json::from_slice(&buf[8..])
        .map_err(|e| format!("a safetensors header that is not JSON: {e}"))?;
    let map = header
        .as_object()
        .ok_or("a safetensors header that is not a JSON object")?;
    let data = 8 + n;
    let mut out = Vec::new();
    for (name, info) in map {
        if name == "__metadata__" {
            continue;
        }
        let info: safetensors::tensor::TensorInfo = serde_json::from_value(info.clone())
            .map_err(|e| format!("{name}: not a safetensors tensor entry ({e})"))?;
        let dtype = DType::of_safetensors(info.dtype)
            .ok_or(format!("{name}: the dtype {:?}", info.dtype))?;
        let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
        let numel = shape
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))
            .ok_or(format!("{name}: a shape too large"))?;
        let (a, b) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
        let want = numel
            .checked_mul(dtype.size())
            .ok_or(format!("{name}: a shape too large"))?;
        if b < a || b - a != want {
            return Err(format!(
                "{name}: offsets [{a}, {b}) do not hold {numel} elements of {dtype:?}"
            ));
        }
        if data.checked_add(b).is_none_or(|end| end > size) {
            return Err(format!(
                "{name}: its bytes run past the end of the file (a cut file)"
            ));
        }
        out.push(TensorHeader {
            name: name.clone(),
            dtype,
            shape,
            offset: data + a,
            bytes: b - a,
        });
    }
    out.sort_by_key(|t| t.offset);
    Ok(out)
}
