//! Arrow list arrays as borrowed ragged columns, without copying the ids: used by the Parquet source for its
//! decoded batches and by the loader bindings for arrays imported through the Arrow C data interface.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait};
use arrow_schema::DataType;

use super::{Offsets, Ragged, RaggedMask, Tokens};
use crate::token::MaskSlice;

/// Why an array cannot be read as a token or mask list column; callers add the file or argument name.
#[derive(Debug, Clone, PartialEq)]
pub enum ListProblem {
    /// Not a `list` / `large_list`.
    NotAList(DataType),
    /// Null elements inside the lists (`what` is "token" or "mask").
    NullElements(&'static str),
    /// List items of an unsupported type.
    ItemType(DataType, &'static str),
    /// A `list<list<..>>` row holding more than one inner list (only a batch of one is a sequence).
    SeveralSequences(usize),
}

impl std::fmt::Display for ListProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListProblem::NotAList(dt) => write!(f, "has type {dt}; expected a list"),
            ListProblem::NullElements(what) => write!(f, "has null elements inside {what} lists"),
            ListProblem::ItemType(dt, expected) => write!(f, "holds {dt}; expected {expected}"),
            ListProblem::SeveralSequences(n) => write!(
                f,
                "holds a row of {n} sequences (list<list<..>>); only a batch of one is read as a sequence"
            ),
        }
    }
}

fn parts<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> (&[O], &ArrayRef) {
    (list.offsets().as_ref(), list.values())
}

/// Offsets and child values of a list array; null elements inside the lists are refused.
fn list_column<'a>(
    col: &'a dyn Array,
    what: &'static str,
) -> Result<(Offsets<'a>, &'a ArrayRef), ListProblem> {
    let (offsets, values) = match col.data_type() {
        DataType::List(_) => {
            let (o, v) = parts(col.as_list::<i32>());
            (Offsets::I32(o), v)
        }
        DataType::LargeList(_) => {
            let (o, v) = parts(col.as_list::<i64>());
            (Offsets::I64(o), v)
        }
        dt => return Err(ListProblem::NotAList(dt.clone())),
    };
    if values.null_count() > 0 {
        return Err(ListProblem::NullElements(what));
    }
    Ok((offsets, values))
}

/// A list array of integer token ids.
pub fn token_list(col: &dyn Array) -> Result<Ragged<'_>, ListProblem> {
    let (offsets, values) = list_column(col, "token")?;
    Ok(Ragged {
        values: token_values(values)?,
        offsets,
    })
}

fn token_values(values: &ArrayRef) -> Result<Tokens<'_>, ListProblem> {
    Ok(match values.data_type() {
        DataType::Int32 => Tokens::I32(values.as_primitive::<Int32Type>().values()),
        DataType::Int64 => Tokens::I64(values.as_primitive::<Int64Type>().values()),
        DataType::UInt32 => Tokens::U32(values.as_primitive::<UInt32Type>().values()),
        DataType::UInt16 => Tokens::U16(values.as_primitive::<UInt16Type>().values()),
        DataType::UInt64 => Tokens::U64(values.as_primitive::<UInt64Type>().values()),
        dt => return Err(ListProblem::ItemType(dt.clone(), "integer token ids")),
    })
}

/// Like [`list_column`], but a `list<list<..>>` whose rows each hold at most one inner list (a batch of one,
/// as some trainers' map functions return `[[...]]`) reads as that inner list: the row boundaries are composed
/// into `storage` (one entry per row), the values stay borrowed.
fn list_column_unnested<'a>(
    col: &'a dyn Array,
    what: &'static str,
    storage: &'a mut Vec<i64>,
) -> Result<(Offsets<'a>, &'a ArrayRef), ListProblem> {
    let (outer, inner) = list_column(col, what)?;
    if !matches!(
        inner.data_type(),
        DataType::List(_) | DataType::LargeList(_)
    ) {
        return Ok((outer, inner));
    }
    let (inner_offsets, values) = list_column(inner.as_ref(), what)?;
    storage.clear();
    storage.reserve(outer.rows() + 1);
    let at = |k: usize| -> i64 {
        match inner_offsets {
            Offsets::I32(o) => i64::from(o[k]),
            Offsets::I64(o) => o[k],
        }
    };
    let outer_at = |k: usize| -> usize {
        match outer {
            Offsets::I32(o) => o[k] as usize,
            Offsets::I64(o) => o[k] as usize,
        }
    };
    if outer.rows() == 0 {
        storage.push(0);
    }
    for i in 0..outer.rows() {
        let (a, b) = (outer_at(i), outer_at(i + 1));
        if b - a > 1 {
            return Err(ListProblem::SeveralSequences(b - a));
        }
        if i == 0 {
            storage.push(at(a));
        }
        // One inner list: its end; none: an empty row (the previous end).
        storage.push(at(b));
    }
    Ok((Offsets::I64(storage.as_slice()), values))
}

/// A token column that is a list of ids, or a list of one list of ids per row.
pub fn token_list_unnested<'a>(
    col: &'a dyn Array,
    storage: &'a mut Vec<i64>,
) -> Result<Ragged<'a>, ListProblem> {
    let (offsets, values) = list_column_unnested(col, "token", storage)?;
    Ok(Ragged {
        values: token_values(values)?,
        offsets,
    })
}

/// A `labels` column (a list of ids, or of one list of ids per row) as a loss mask: -100 means 0, anything
/// else 1. The mask is materialised in `bytes` (one byte per token).
pub fn labels_list<'a>(
    col: &'a dyn Array,
    storage: &'a mut Vec<i64>,
    bytes: &'a mut Vec<u8>,
) -> Result<RaggedMask<'a>, ListProblem> {
    let (offsets, values) = list_column_unnested(col, "label", storage)?;
    match values.data_type() {
        DataType::Int8 => labels_as_mask(values.as_primitive::<Int8Type>().values(), bytes),
        DataType::Int16 => labels_as_mask(values.as_primitive::<Int16Type>().values(), bytes),
        DataType::Int32 => labels_as_mask(values.as_primitive::<Int32Type>().values(), bytes),
        DataType::Int64 => labels_as_mask(values.as_primitive::<Int64Type>().values(), bytes),
        DataType::UInt16 => labels_as_mask(values.as_primitive::<UInt16Type>().values(), bytes),
        DataType::UInt32 => labels_as_mask(values.as_primitive::<UInt32Type>().values(), bytes),
        DataType::UInt64 => labels_as_mask(values.as_primitive::<UInt64Type>().values(), bytes),
        dt => return Err(ListProblem::ItemType(dt.clone(), "integer labels")),
    }
    Ok(RaggedMask {
        values: MaskSlice::U8(bytes.as_slice()),
        offsets,
    })
}

/// Labels as a loss mask into `out`: -100 (the trainers' ignore index) is 0, anything else 1; a type that cannot
/// hold -100 is all ones.
pub(crate) fn labels_as_mask<T: Copy + PartialEq + TryFrom<i64>>(v: &[T], out: &mut Vec<u8>) {
    let ignore = T::try_from(-100).ok();
    out.clear();
    out.extend(v.iter().map(|&x| u8::from(Some(x) != ignore)));
}

/// A list array of loss-mask values. Arrow booleans are bit-packed, so they are unpacked into `bools` (one
/// byte per token); every other type is borrowed.
pub fn mask_list<'a>(
    col: &'a dyn Array,
    bools: &'a mut Vec<u8>,
) -> Result<RaggedMask<'a>, ListProblem> {
    let (offsets, values) = list_column(col, "mask")?;
    Ok(RaggedMask {
        values: mask_values(values, bools)?,
        offsets,
    })
}

/// [`mask_list`] of a list, or of a list of one list per row.
pub fn mask_list_unnested<'a>(
    col: &'a dyn Array,
    storage: &'a mut Vec<i64>,
    bools: &'a mut Vec<u8>,
) -> Result<RaggedMask<'a>, ListProblem> {
    let (offsets, values) = list_column_unnested(col, "mask", storage)?;
    Ok(RaggedMask {
        values: mask_values(values, bools)?,
        offsets,
    })
}

fn mask_values<'a>(
    values: &'a ArrayRef,
    bools: &'a mut Vec<u8>,
) -> Result<MaskSlice<'a>, ListProblem> {
    Ok(match values.data_type() {
        DataType::Boolean => {
            *bools = values.as_boolean().values().iter().map(u8::from).collect();
            MaskSlice::U8(bools.as_slice())
        }
        DataType::Int8 => MaskSlice::I8(values.as_primitive::<Int8Type>().values()),
        DataType::UInt8 => MaskSlice::U8(values.as_primitive::<UInt8Type>().values()),
        DataType::Int16 => MaskSlice::I16(values.as_primitive::<Int16Type>().values()),
        DataType::UInt16 => MaskSlice::U16(values.as_primitive::<UInt16Type>().values()),
        DataType::Int32 => MaskSlice::I32(values.as_primitive::<Int32Type>().values()),
        DataType::UInt32 => MaskSlice::U32(values.as_primitive::<UInt32Type>().values()),
        DataType::Int64 => MaskSlice::I64(values.as_primitive::<Int64Type>().values()),
        DataType::UInt64 => MaskSlice::U64(values.as_primitive::<UInt64Type>().values()),
        DataType::Float32 => MaskSlice::F32(values.as_primitive::<Float32Type>().values()),
        dt => return Err(ListProblem::ItemType(dt.clone(), "bool or numbers")),
    })
}
