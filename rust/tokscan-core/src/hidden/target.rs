//! The target model's output head, read from its Hugging Face checkpoint directory (`config.json` + one or
//! more safetensors files, `model.safetensors.index.json` naming the shards): only the final norm's weight
//! and `lm_head.weight` (the embedding when the head is tied), memory-mapped. With them, a stored last state
//! `h_t` predicts `argmax(lm_head(norm(h_t)))`, which for a completion the target generated itself is token
//! `t + 1` on most positions; and `h / w` of a state stored after the norm has a root mean square of 1.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::dump::{open_bytes, row_f32, Bytes, States};
use super::{read_header, DType, TensorHeader};
use crate::error::{Error, Result};

/// Names of the final norm's weight in the checkpoints of Llama-, Qwen-, Mistral-, DeepSeek- and Kimi-style
/// models (and their multimodal wrappers).
const NORM_NAMES: &[&str] = &[
    "model.norm.weight",
    "model.language_model.norm.weight",
    "language_model.model.norm.weight",
    "transformer.norm.weight",
    "transformer.ln_f.weight",
    "norm.weight",
];
const HEAD_NAMES: &[&str] = &[
    "lm_head.weight",
    "language_model.lm_head.weight",
    "output.weight",
];
const EMBED_NAMES: &[&str] = &[
    "model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "transformer.wte.weight",
];

/// The target's head: what next-token agreement and the norm convention need.
pub struct Target {
    pub dir: PathBuf,
    /// Hidden size `D`.
    pub hidden: usize,
    pub vocab: usize,
    pub eps: f32,
    pub norm: Vec<f32>,
    head: (Bytes, TensorHeader),
    /// The tensors read, as `name (file)`.
    pub read: Vec<String>,
}

fn config_number(cfg: &serde_json::Value, keys: &[&str]) -> Option<f64> {
    let text = cfg.get("text_config");
    keys.iter().find_map(|k| {
        cfg.get(*k)
            .or_else(|| text.and_then(|t| t.get(*k)))
            .and_then(|v| v.as_f64())
    })
}

impl Target {
    /// Opens the checkpoint at `dir`; an error names the file and what is missing.
    pub fn open(dir: &Path) -> Result<Target> {
        let bad = |p: &Path, why: String| Error::invalid(p, why);
        let cfg_path = dir.join("config.json");
        let cfg: serde_json::Value =
            serde_json::from_str(&crate::files::read_to_string(&cfg_path)?)
                .map_err(|e| bad(&cfg_path, format!("not JSON: {e}")))?;
        let hidden = config_number(&cfg, &["hidden_size", "n_embd", "d_model"])
            .ok_or_else(|| bad(&cfg_path, "no hidden_size".into()))?;
        if !(hidden >= 1.0 && hidden <= f64::from(1u32 << 20) && hidden.fract() == 0.0) {
            return Err(bad(
                &cfg_path,
                format!("hidden_size {hidden} is not a width (a whole number from 1 to 2^20)"),
            ));
        }
        let hidden = hidden as usize;
        let eps = config_number(
            &cfg,
            &["rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"],
        )
        .unwrap_or(1e-6) as f32;
        // Every tensor name → its shard, from the index or from each shard's header.
        let index_path = dir.join("model.safetensors.index.json");
        let shards: Vec<PathBuf> = if index_path.is_file() {
            let index: serde_json::Value =
                serde_json::from_str(&crate::files::read_to_string(&index_path)?)
                    .map_err(|e| bad(&index_path, format!("not JSON: {e}")))?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| bad(&index_path, "no weight_map".into()))?;
            let wanted = NORM_NAMES.iter().chain(HEAD_NAMES).chain(EMBED_NAMES);
            let mut files: Vec<PathBuf> = wanted
                .filter_map(|n| map.get(*n)?.as_str())
                .filter(|f| !f.contains('/') && !f.contains(".."))
                .map(|f| dir.join(f))
                .collect();
            files.sort();
            files.dedup();
            files
        } else {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            files.sort();
            files
        };
        if shards.is_empty() {
            return Err(bad(
                dir,
                "--target-model: no safetensors file holding the final norm or lm_head (a Hugging Face checkpoint directory: config.json + *.safetensors)".into(),
            ));
        }
        let mut tensors: Vec<(TensorHeader, PathBuf, super::DumpHeader)> = Vec::new();
        for shard in &shards {
            let h = read_header(shard)?;
            for t in &h.tensors {
                tensors.push((t.clone(), shard.clone(), h.clone()));
            }
        }
        let find = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| tensors.iter().find(|(t, _, _)| t.name == *n))
        };
        let tied = cfg
            .get("tie_word_embeddings")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let norm = find(NORM_NAMES).ok_or_else(|| {
            bad(
                dir,
                format!(
                    "--target-model: no final norm weight (looked for {})",
                    NORM_NAMES.join(", ")
                ),
            )
        })?;
        let head = find(HEAD_NAMES)
            .or_else(|| tied.then(|| find(EMBED_NAMES)).flatten())
            .or_else(|| find(EMBED_NAMES).filter(|_| find(HEAD_NAMES).is_none()))
            .ok_or_else(|| {
                bad(
                    dir,
                    format!(
                        "--target-model: no output head (looked for {})",
                        HEAD_NAMES.join(", ")
                    ),
                )
            })?;
        let float = |t: &TensorHeader, p: &Path| {
            if matches!(t.dtype, DType::BF16 | DType::F16 | DType::F32) {
                Ok(())
            } else {
                Err(bad(p, format!("{} holds {:?}, not floats (a quantized checkpoint: give the unquantized one)", t.name, t.dtype)))
            }
        };
        float(&norm.0, &norm.1)?;
        float(&head.0, &head.1)?;
        if norm.0.shape != [hidden as u64] {
            return Err(bad(
                &norm.1,
                format!(
                    "{} is shaped {:?}, not [{hidden}] (config.json's hidden_size)",
                    norm.0.name, norm.0.shape
                ),
            ));
        }
        let vocab = match head.0.shape[..] {
            [v, d] if d == hidden as u64 && v > 0 => v as usize,
            _ => {
                return Err(bad(
                    &head.1,
                    format!(
                        "{} is shaped {:?}, not [vocab, {hidden}] with vocab > 0",
                        head.0.name, head.0.shape
                    ),
                ))
            }
        };
        let norm_bytes = open_bytes(&norm.2)?;
        let mut w = vec![0f32; hidden];
        let view = States {
            tensor: norm.0.clone(),
            n: 1,
            width: hidden as u64,
            stride: hidden as u64,
            skip: 0,
        };
        row_f32(&norm_bytes, &view, 0, &mut w).map_err(|e| bad(&norm.1, e))?;
        if !w.iter().any(|x| x.is_finite() && *x != 0.0) || w.iter().any(|x| !x.is_finite()) {
            return Err(bad(
                &norm.1,
                format!(
                    "{}: a final norm weight of zeros or non-finite values",
                    norm.0.name
                ),
            ));
        }
        let head_bytes = open_bytes(&head.2)?;
        let name = |t: &(TensorHeader, PathBuf, super::DumpHeader)| {
            format!(
                "{} ({})",
                t.0.name,
                t.1.file_name().unwrap_or_default().to_string_lossy()
            )
        };
        Ok(Target {
            dir: dir.to_path_buf(),
            hidden,
            vocab,
            eps,
            norm: w,
            read: vec![name(norm), name(head)],
            head: (head_bytes, head.0.clone()),
        })
    }

    /// `x` normed in place: `x / rms(x) * w`.
    pub fn apply_norm(&self, x: &mut [f32]) {
        let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let k = 1.0 / (ms + self.eps).sqrt();
        for (v, w) in x.iter_mut().zip(&self.norm) {
            *v *= k * w;
        }
    }

    /// The root mean square of `x / w` (1 for a state stored after the norm; weights of 0 are left out).
    pub fn unweighted_rms(&self, x: &[f32]) -> f32 {
        let (mut s, mut n) = (0f64, 0usize);
        for (v, w) in x.iter().zip(&self.norm) {
            if *w != 0.0 {
                let u = f64::from(v / w);
                s += u * u;
                n += 1;
            }
        }
        if n == 0 {
            return 0.0;
        }
        (s / n as f64).sqrt() as f32
    }

    /// `argmax(lm_head · x)` of each `x` (each `hidden` long), in one pass over the head's rows (in
    /// parallel blocks): the head is read once whatever the number of positions.
    pub fn argmax(&self, xs: &[Vec<f32>]) -> Vec<u32> {
        if xs.is_empty() {
            return Vec::new();
        }
        const BLOCK: usize = 512;
        let (bytes, t) = (&self.head.0, &self.head.1);
        let view = States {
            tensor: t.clone(),
            n: self.vocab as u64,
            width: self.hidden as u64,
            stride: self.hidden as u64,
            skip: 0,
        };
        let blocks = self.vocab.div_ceil(BLOCK);
        let best = (0..blocks)
            .into_par_iter()
            .map(|b| {
                let mut row = vec![0f32; self.hidden];
                let mut best = vec![(f32::NEG_INFINITY, 0u32); xs.len()];
                for v in b * BLOCK..((b + 1) * BLOCK).min(self.vocab) {
                    if row_f32(bytes, &view, v as u64, &mut row).is_err() {
                        continue;
                    }
                    for (x, slot) in xs.iter().zip(best.iter_mut()) {
                        let s = dot(&row, x);
                        if s > slot.0 {
                            *slot = (s, v as u32);
                        }
                    }
                }
                best
            })
            .reduce(
                || vec![(f32::NEG_INFINITY, 0u32); xs.len()],
                |mut a, b| {
                    for (x, y) in a.iter_mut().zip(b) {
                        // Ties go to the lower id, whichever block came first.
                        if y.0 > x.0 || (y.0 == x.0 && y.1 < x.1) {
                            *x = y;
                        }
                    }
                    a
                },
            );
        best.into_iter().map(|(_, v)| v).collect()
    }
}

/// `a · b`, in eight lanes the compiler vectorizes.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_is_the_plain_sum() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.25).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-4);
    }

    #[test]
    fn a_checkpoint_directory_gives_the_head_and_its_argmax() {
        use safetensors::tensor::{serialize_to_file, Dtype, TensorView};
        let dir = tempfile::tempdir().unwrap();
        let (v, d) = (7usize, 4usize);
        // Row i of the head is e_{i % d} scaled by i: the argmax of x = e_k is the largest i with i % d == k.
        let mut head = vec![0f32; v * d];
        for i in 0..v {
            head[i * d + i % d] = i as f32;
        }
        let norm = vec![2f32; d];
        let bytes = |x: &[f32]| x.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        let (hb, nb) = (bytes(&head), bytes(&norm));
        let tensors = vec![
            (
                "lm_head.weight",
                TensorView::new(Dtype::F32, vec![v, d], &hb).unwrap(),
            ),
            (
                "model.norm.weight",
                TensorView::new(Dtype::F32, vec![d], &nb).unwrap(),
            ),
        ];
        serialize_to_file(tensors, None, &dir.path().join("model.safetensors")).unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"hidden_size": 4, "rms_norm_eps": 0.0}"#,
        )
        .unwrap();
        let t = Target::open(dir.path()).unwrap();
        assert_eq!((t.hidden, t.vocab), (4, 7));
        let e = |k: usize| {
            (0..d)
                .map(|i| f32::from(u8::from(i == k)))
                .collect::<Vec<f32>>()
        };
        assert_eq!(t.argmax(&[e(0), e(1), e(2), e(3)]), vec![4, 5, 6, 3]);
        // After the norm, h / w has a root mean square of 1.
        let mut x = vec![3.0, -1.0, 0.5, 2.0];
        t.apply_norm(&mut x);
        assert!((t.unweighted_rms(&x) - 1.0).abs() < 1e-5);
        std::fs::remove_file(dir.path().join("config.json")).unwrap();
        let err = Target::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("config.json"), "{err}");
    }
}
