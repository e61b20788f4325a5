//! What the Arrow-based formats share: which column plays which role ([`detect_layout`]: the same names
//! and types whatever file holds the schema), a decoded record batch handed on as a [`Batch`]
//! ([`record_batch`]), and label columns (sample ids, categories) read whatever their storage type. Parquet and
//! Arrow IPC shards read their columns through it, and a NumPy folder its `meta.parquet`.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema};

use super::lists::ListProblem;
use super::{Batch, ColumnNames, Ragged};
use crate::error::{Error, Result};
use crate::sample_id::SampleId;

/// Which column plays which role in one file.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Layout {
    /// `input_ids`, or `output_ids` when `prompt` is set.
    pub ids: String,
    pub prompt: Option<String>,
    pub loss_mask: Option<String>,
    /// A `labels` column (-100 = mask 0) read as the loss mask when there is no `loss_mask`.
    pub labels: Option<String>,
    pub sample_id: Option<String>,
    pub category: Option<String>,
    /// What the columns leave open and how it was read (both `input_ids` and `prompt_ids` + `output_ids`):
    /// the input's warning.
    pub note: Option<String>,
}

impl Layout {
    pub fn describe(&self) -> String {
        let mut parts = match &self.prompt {
            Some(p) => vec![p.clone(), self.ids.clone()],
            None => vec![self.ids.clone()],
        };
        parts.extend(self.loss_mask.iter().cloned());
        parts.extend(self.labels.iter().cloned());
        parts.join("+")
    }

    /// The columns to decode, in this order: ids, prompt, mask, labels, sample id, category.
    pub fn columns(&self) -> Vec<&String> {
        [
            Some(&self.ids),
            self.prompt.as_ref(),
            self.loss_mask.as_ref(),
            self.labels.as_ref(),
            self.sample_id.as_ref(),
            self.category.as_ref(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// A list of ids, or a list of lists (read when each row holds one inner list: a batch of one).
fn is_token_list(dt: &DataType) -> bool {
    match dt {
        DataType::List(f) | DataType::LargeList(f) if is_token_list(f.data_type()) => true,
        DataType::List(f) | DataType::LargeList(f) => matches!(
            f.data_type(),
            DataType::Int32
                | DataType::Int64
                | DataType::UInt32
                | DataType::UInt16
                | DataType::UInt64
        ),
        _ => false,
    }
}

fn is_mask_list(dt: &DataType) -> bool {
    match dt {
        DataType::List(f) | DataType::LargeList(f) if is_mask_list(f.data_type()) => true,
        DataType::List(f) | DataType::LargeList(f) => matches!(
            f.data_type(),
            DataType::Boolean
                | DataType::Int8
                | DataType::UInt8
                | DataType::Int16
                | DataType::UInt16
                | DataType::Int32
                | DataType::UInt32
                | DataType::Int64
                | DataType::UInt64
                | DataType::Float32
        ),
        _ => false,
    }
}

fn is_labels_list(dt: &DataType) -> bool {
    match dt {
        DataType::List(f) | DataType::LargeList(f) if is_labels_list(f.data_type()) => true,
        DataType::List(f) | DataType::LargeList(f) => matches!(
            f.data_type(),
            DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt16
                | DataType::UInt32
                | DataType::UInt64
        ),
        _ => false,
    }
}

fn is_scalar_label(dt: &DataType) -> bool {
    dt.is_integer()
        || matches!(
            dt,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(..)
        )
}

/// Picks the columns for each role: an explicit name must exist; otherwise the default name is used if present.
pub fn detect_layout(path: &Path, schema: &Schema, names: &ColumnNames) -> Result<Layout> {
    let columns = || {
        schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let find = |explicit: &Option<String>, default: &str, role: &str| -> Result<Option<String>> {
        match explicit {
            Some(n) if schema.field_with_name(n).is_err() => Err(Error::column(
                path,
                format!("no column {n:?} for {role} (columns: {})", columns()),
            )),
            Some(n) => Ok(Some(n.clone())),
            None => Ok(schema
                .field_with_name(default)
                .ok()
                .map(|_| default.to_string())),
        }
    };
    let typ = |n: &str| {
        schema
            .field_with_name(n)
            .map(|f| f.data_type().clone())
            .ok()
    };
    let check = |n: &Option<String>, ok: fn(&DataType) -> bool, want: &str| -> Result<()> {
        if let Some(n) = n {
            let dt = typ(n).expect("column exists");
            if !ok(&dt) {
                return Err(Error::column(
                    path,
                    format!("column {n:?} has type {dt}; expected {want}"),
                ));
            }
        }
        Ok(())
    };
    let input_ids = find(&names.input_ids, "input_ids", "input_ids")?;
    let prompt = find(&names.prompt_ids, "prompt_ids", "prompt_ids")?;
    let output = find(&names.output_ids, "output_ids", "output_ids")?;
    let note = match (&input_ids, &prompt, &output) {
        (Some(i), Some(p), Some(o)) if names.prompt_ids.is_none() && names.output_ids.is_none() => Some(format!(
            "has both {i:?} and {p:?} + {o:?}: reading {i:?} (--prompt-column / --output-column read the others)"
        )),
        _ => None,
    };
    let (ids, prompt) = match (input_ids, prompt, output) {
        (Some(ids), _, _) if names.prompt_ids.is_none() && names.output_ids.is_none() => {
            (ids, None)
        }
        (_, Some(p), Some(o)) => (o, Some(p)),
        (_, None, Some(o)) if names.output_ids.is_some() => (o, None),
        _ => {
            return Err(Error::column(
                path,
                format!(
                    "no token column: need input_ids, or prompt_ids + output_ids (columns: {})",
                    columns()
                ),
            ))
        }
    };
    let token_types = "a list of int32/int64/uint16/uint32/uint64";
    check(&Some(ids.clone()), is_token_list, token_types)?;
    check(&prompt, is_token_list, token_types)?;
    if let (Some(p), Some(a), Some(b)) = (&prompt, typ(&ids), prompt.as_deref().and_then(typ)) {
        fn inner(d: &DataType) -> DataType {
            match d {
                DataType::List(f) | DataType::LargeList(f) => inner(f.data_type()),
                _ => d.clone(),
            }
        }
        if inner(&a) != inner(&b) {
            return Err(Error::column(
                path,
                format!("columns {p:?} and {ids:?} have different element types"),
            ));
        }
    }
    let loss_mask = find(&names.loss_mask, "loss_mask", "loss_mask")?;
    check(&loss_mask, is_mask_list, "a list of bool or integers")?;
    let labels = if loss_mask.is_none() {
        find(&names.labels, "labels", "labels")?
    } else {
        None
    };
    check(&labels, is_labels_list, "a list of integers")?;
    let sample_id = find(&names.sample_id, "sample_id", "sample_id")?;
    check(&sample_id, is_scalar_label, "an integer or string")?;
    let category = find(&names.category, "category", "category")?;
    check(&category, is_scalar_label, "an integer or string")?;
    let layout = Layout {
        ids,
        prompt,
        loss_mask,
        labels,
        sample_id,
        category,
        note,
    };
    for name in layout.columns() {
        refuse_repeated_column(path, schema, name)?;
    }
    Ok(layout)
}

/// A column name the file holds more than once (pyarrow writes such tables) is refused when tokscan would read
/// it: by name it would take the first and never say that another column of the name was left unread.
fn refuse_repeated_column(path: &Path, schema: &Schema, name: &str) -> Result<()> {
    let times = schema.fields().iter().filter(|f| f.name() == name).count();
    if times > 1 {
        return Err(Error::column(
            path,
            format!("column {name:?} appears {times} times; rename all but one to read the file"),
        ));
    }
    Ok(())
}

/// Whether a label column (`sample_id`, `category`) of a side file such as a NumPy folder's `meta.parquet` is
/// there, refused like a shard's own label column when it is repeated or of a type that is not a label.
pub(crate) fn label_column(path: &Path, schema: &Schema, name: &str) -> Result<bool> {
    let Ok(field) = schema.field_with_name(name) else {
        return Ok(false);
    };
    refuse_repeated_column(path, schema, name)?;
    if !is_scalar_label(field.data_type()) {
        return Err(Error::column(
            path,
            format!(
                "column {name:?} has type {}; expected an integer or string",
                field.data_type()
            ),
        ));
    }
    Ok(true)
}

/// Hands a decoded Arrow record batch (holding the layout's columns) to `f` as a [`Batch`]: the ids borrowed,
/// a `list<list<..>>` of one inner list per row read as that list, `labels` turned into a mask. Shared by
/// every Arrow-based source (Parquet, Arrow IPC), so column roles and types follow the same rules.
pub fn record_batch(
    path: &Path,
    layout: &Layout,
    rb: &RecordBatch,
    f: &mut dyn FnMut(&Batch<'_>) -> Result<()>,
) -> Result<()> {
    let col = |n: &str| rb.column_by_name(n).expect("projected column").clone();
    let ids_col = col(&layout.ids);
    let mut ids_offsets = Vec::new();
    let ids = ragged(path, &layout.ids, &ids_col, &mut ids_offsets)?;
    let prompt_col = layout.prompt.as_deref().map(col);
    let mut prompt_offsets = Vec::new();
    let prompt = match (&layout.prompt, &prompt_col) {
        (Some(n), Some(c)) => Some(ragged(path, n, c, &mut prompt_offsets)?),
        _ => None,
    };
    let mask_col = layout
        .loss_mask
        .as_deref()
        .or(layout.labels.as_deref())
        .map(col);
    let mut bool_storage = Vec::new();
    let mut mask_offsets = Vec::new();
    let mask = match (&layout.loss_mask, &layout.labels, &mask_col) {
        (Some(n), _, Some(c)) => Some(
            super::lists::mask_list_unnested(c.as_ref(), &mut mask_offsets, &mut bool_storage)
                .map_err(|p| list_error(path, n, p))?,
        ),
        (None, Some(n), Some(c)) => Some(
            super::lists::labels_list(c.as_ref(), &mut mask_offsets, &mut bool_storage)
                .map_err(|p| list_error(path, n, p))?,
        ),
        _ => None,
    };
    let sample_ids = layout
        .sample_id
        .as_deref()
        .map(|n| sample_ids(path, n, &col(n)))
        .transpose()?;
    let categories = layout
        .category
        .as_deref()
        .map(|n| strings(path, n, &col(n)))
        .transpose()?;
    let null_rows = (ids_col.null_count() > 0
        || prompt_col.as_ref().is_some_and(|c| c.null_count() > 0))
    .then(|| {
        (0..rb.num_rows())
            .map(|i| ids_col.is_null(i) || prompt_col.as_ref().is_some_and(|c| c.is_null(i)))
            .collect::<Vec<bool>>()
    });
    let batch = Batch {
        ids,
        prompt,
        mask,
        sample_ids: sample_ids.as_deref(),
        categories: categories.as_deref(),
        null_rows: null_rows.as_deref(),
        findings: None,
    };
    f(&batch)
}

fn ragged<'a>(
    path: &Path,
    name: &str,
    col: &'a ArrayRef,
    storage: &'a mut Vec<i64>,
) -> Result<Ragged<'a>> {
    super::lists::token_list_unnested(col.as_ref(), storage).map_err(|p| list_error(path, name, p))
}

/// Null elements are a broken file; a wrong type is the wrong column.
pub(crate) fn list_error(path: &Path, name: &str, p: ListProblem) -> Error {
    let message = format!("column {name:?} {p}");
    match p {
        ListProblem::NullElements(_) | ListProblem::SeveralSequences(_) => {
            Error::invalid(path, message)
        }
        _ => Error::column(path, message),
    }
}

/// A label column (sample id, category) as strings, whatever its storage type.
pub fn strings(path: &Path, name: &str, col: &ArrayRef) -> Result<Vec<Option<String>>> {
    let cast = arrow_cast::cast(col, &DataType::Utf8)
        .map_err(|e| Error::column(path, format!("column {name:?} cannot be read as text: {e}")))?;
    Ok(cast
        .as_string::<i32>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect())
}

/// A sample-id column: an integer column's ids stay integers, any other type is read as text.
pub fn sample_ids(path: &Path, name: &str, col: &ArrayRef) -> Result<Vec<Option<SampleId>>> {
    if col.data_type().is_integer() && *col.data_type() != DataType::UInt64 {
        let cast = arrow_cast::cast(col, &DataType::Int64).map_err(|e| {
            Error::column(
                path,
                format!("column {name:?} cannot be read as integers: {e}"),
            )
        })?;
        let ints = cast.as_primitive::<arrow_array::types::Int64Type>();
        return Ok(ints.iter().map(|v| v.map(SampleId::Int)).collect());
    }
    if *col.data_type() == DataType::UInt64 {
        let ints = col.as_primitive::<arrow_array::types::UInt64Type>();
        return Ok(ints
            .iter()
            .map(|v| {
                v.map(|n| {
                    i64::try_from(n).map_or_else(|_| SampleId::text(n.to_string()), SampleId::Int)
                })
            })
            .collect());
    }
    Ok(strings(path, name, col)?
        .into_iter()
        .map(|s| s.map(SampleId::from))
        .collect())
}
