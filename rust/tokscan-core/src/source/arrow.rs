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
}

impl std::fmt::Display for ListProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListProblem::NotAList(dt) => write!(f, "has type {dt}; expected a list"),
            ListProblem::NullElements(what) => write!(f, "has null elements inside {what} lists"),
            ListProblem::ItemType(dt, expected) => write!(f, "holds {dt}; expected {expected}"),
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
    let values = match values.data_type() {
        DataType::Int32 => Tokens::I32(values.as_primitive::<Int32Type>().values()),
        DataType::Int64 => Tokens::I64(values.as_primitive::<Int64Type>().values()),
        DataType::UInt32 => Tokens::U32(values.as_primitive::<UInt32Type>().values()),
        DataType::UInt16 => Tokens::U16(values.as_primitive::<UInt16Type>().values()),
        DataType::UInt64 => Tokens::U64(values.as_primitive::<UInt64Type>().values()),
        dt => return Err(ListProblem::ItemType(dt.clone(), "integer token ids")),
    };
    Ok(Ragged { values, offsets })
}

/// A list array of loss-mask values. Arrow booleans are bit-packed, so they are unpacked into `bools` (one
/// byte per token); every other type is borrowed.
pub fn mask_list<'a>(
    col: &'a dyn Array,
    bools: &'a mut Vec<u8>,
) -> Result<RaggedMask<'a>, ListProblem> {
    let (offsets, values) = list_column(col, "mask")?;
    let values = match values.data_type() {
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
    };
    Ok(RaggedMask { values, offsets })
}
