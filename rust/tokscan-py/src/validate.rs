//! `tokscan._core.Validator`: batch checks over caller-owned buffers — NumPy arrays through the buffer
//! protocol, Arrow arrays through the C data interface (`__arrow_c_array__`) — without copying the ids.

use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef};
use arrow_data::ArrayData;
use arrow_pyarrow::FromPyArrow;
use numpy::{
    Element, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use tokscan_core::source::lists::{mask_list, token_list, ListProblem};
use tokscan_core::source::{Offsets, Tokens};
use tokscan_core::token::MaskSlice;
use tokscan_core::validate::{BatchView, Checked, Rows};
use tokscan_core::Error;

use crate::{detached, to_py, PyProfile};

/// A borrowed NumPy token array of a supported dtype.
enum IdArray<'py> {
    U16(PyReadonlyArrayDyn<'py, u16>),
    U32(PyReadonlyArrayDyn<'py, u32>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    U64(PyReadonlyArrayDyn<'py, u64>),
}

/// `obj` as a read-only NumPy array of `T`, or `None` (another dtype, not an array, or mutably borrowed).
/// A cast, not `extract`: trying the dtypes in turn must not build a Python exception per miss.
fn borrow<'py, T: Element>(obj: &Bound<'py, PyAny>) -> Option<PyReadonlyArrayDyn<'py, T>> {
    obj.cast::<PyArrayDyn<T>>().ok()?.try_readonly().ok()
}

fn usage(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    to_py(py, Error::Usage(msg.into()))
}

fn dtype_name(obj: &Bound<'_, PyAny>) -> String {
    obj.cast::<PyUntypedArray>()
        .map(|a| a.dtype().to_string())
        .unwrap_or_else(|_| obj.get_type().to_string())
}

impl<'py> IdArray<'py> {
    fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if let Some(a) = borrow(obj) {
            return Ok(IdArray::I32(a));
        }
        if let Some(a) = borrow(obj) {
            return Ok(IdArray::I64(a));
        }
        if let Some(a) = borrow(obj) {
            return Ok(IdArray::U32(a));
        }
        if let Some(a) = borrow(obj) {
            return Ok(IdArray::U16(a));
        }
        if let Some(a) = borrow(obj) {
            return Ok(IdArray::U64(a));
        }
        Err(usage(
            py,
            format!(
                "ids must be a NumPy array of int32, int64, uint32, uint16 or uint64, not {}",
                dtype_name(obj)
            ),
        ))
    }

    fn shape(&self) -> &[usize] {
        match self {
            IdArray::U16(a) => a.shape(),
            IdArray::U32(a) => a.shape(),
            IdArray::I32(a) => a.shape(),
            IdArray::I64(a) => a.shape(),
            IdArray::U64(a) => a.shape(),
        }
    }

    fn tokens(&self, py: Python<'_>) -> PyResult<Tokens<'_>> {
        let contiguous = |_| usage(py, "ids must be C-contiguous");
        Ok(match self {
            IdArray::U16(a) => Tokens::U16(a.as_slice().map_err(contiguous)?),
            IdArray::U32(a) => Tokens::U32(a.as_slice().map_err(contiguous)?),
            IdArray::I32(a) => Tokens::I32(a.as_slice().map_err(contiguous)?),
            IdArray::I64(a) => Tokens::I64(a.as_slice().map_err(contiguous)?),
            IdArray::U64(a) => Tokens::U64(a.as_slice().map_err(contiguous)?),
        })
    }
}

/// A borrowed NumPy loss-mask array.
enum MaskArray<'py> {
    Bool(PyReadonlyArrayDyn<'py, bool>),
    U8(PyReadonlyArrayDyn<'py, u8>),
    I8(PyReadonlyArrayDyn<'py, i8>),
    I16(PyReadonlyArrayDyn<'py, i16>),
    U16(PyReadonlyArrayDyn<'py, u16>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    U32(PyReadonlyArrayDyn<'py, u32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    U64(PyReadonlyArrayDyn<'py, u64>),
    F32(PyReadonlyArrayDyn<'py, f32>),
}

macro_rules! try_mask {
    ($obj:expr, $($v:ident),*) => {
        $( if let Some(a) = borrow($obj) { return Ok(MaskArray::$v(a)); } )*
    };
}

macro_rules! mask_match {
    ($m:expr, $a:ident => $e:expr) => {
        match $m {
            MaskArray::Bool($a) => $e,
            MaskArray::U8($a) => $e,
            MaskArray::I8($a) => $e,
            MaskArray::I16($a) => $e,
            MaskArray::U16($a) => $e,
            MaskArray::I32($a) => $e,
            MaskArray::U32($a) => $e,
            MaskArray::I64($a) => $e,
            MaskArray::U64($a) => $e,
            MaskArray::F32($a) => $e,
        }
    };
}

impl<'py> MaskArray<'py> {
    fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        try_mask!(obj, Bool, U8, I8, I16, U16, I32, U32, I64, U64, F32);
        Err(usage(
            obj.py(),
            format!(
                "loss_mask must be a NumPy array of bool, integers or float32, not {}",
                dtype_name(obj)
            ),
        ))
    }

    fn shape(&self) -> &[usize] {
        mask_match!(self, a => a.shape())
    }

    fn slice(&self, py: Python<'_>) -> PyResult<MaskSlice<'_>> {
        let contiguous = |_| usage(py, "loss_mask must be C-contiguous");
        Ok(match self {
            MaskArray::Bool(a) => MaskSlice::Bool(a.as_slice().map_err(contiguous)?),
            MaskArray::U8(a) => MaskSlice::U8(a.as_slice().map_err(contiguous)?),
            MaskArray::I8(a) => MaskSlice::I8(a.as_slice().map_err(contiguous)?),
            MaskArray::I16(a) => MaskSlice::I16(a.as_slice().map_err(contiguous)?),
            MaskArray::U16(a) => MaskSlice::U16(a.as_slice().map_err(contiguous)?),
            MaskArray::I32(a) => MaskSlice::I32(a.as_slice().map_err(contiguous)?),
            MaskArray::U32(a) => MaskSlice::U32(a.as_slice().map_err(contiguous)?),
            MaskArray::I64(a) => MaskSlice::I64(a.as_slice().map_err(contiguous)?),
            MaskArray::U64(a) => MaskSlice::U64(a.as_slice().map_err(contiguous)?),
            MaskArray::F32(a) => MaskSlice::F32(a.as_slice().map_err(contiguous)?),
        })
    }
}

/// Borrowed NumPy offsets (int32 or int64).
enum OffsetArray<'py> {
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
}

impl<'py> OffsetArray<'py> {
    fn extract(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        let a = if let Some(a) = borrow(obj) {
            OffsetArray::I64(a)
        } else if let Some(a) = borrow(obj) {
            OffsetArray::I32(a)
        } else {
            return Err(usage(
                obj.py(),
                format!(
                    "{what} must be a 1-D NumPy array of int32 or int64, not {}",
                    dtype_name(obj)
                ),
            ));
        };
        let ndim = match &a {
            OffsetArray::I32(a) => a.ndim(),
            OffsetArray::I64(a) => a.ndim(),
        };
        if ndim != 1 {
            return Err(usage(obj.py(), format!("{what} must be 1-D, not {ndim}-D")));
        }
        Ok(a)
    }

    fn offsets(&self, py: Python<'_>) -> PyResult<Offsets<'_>> {
        let contiguous = |_| usage(py, "offsets must be C-contiguous");
        Ok(match self {
            OffsetArray::I32(a) => Offsets::I32(a.as_slice().map_err(contiguous)?),
            OffsetArray::I64(a) => Offsets::I64(a.as_slice().map_err(contiguous)?),
        })
    }
}

/// The rows layout of a NumPy buffer of `shape`: 2-D is padded, 1-D needs offsets.
fn rows_of<'a>(
    py: Python<'_>,
    shape: &[usize],
    offsets: Option<Offsets<'a>>,
    what: &str,
) -> PyResult<Rows<'a>> {
    match (shape.len(), offsets) {
        (2, None) => Ok(Rows::Padded { width: shape[1] }),
        (2, Some(_)) => Err(usage(
            py,
            format!("{what} is 2-D (padded rows): offsets are not used with it"),
        )),
        (1, Some(o)) => Ok(Rows::Ragged(o)),
        (1, None) => Err(usage(
            py,
            format!("{what} is 1-D: give offsets (rows + 1 values) or a 2-D padded array"),
        )),
        (d, _) => Err(usage(py, format!("{what} must be 1-D or 2-D, not {d}-D"))),
    }
}

/// Per-row `(flags, lengths)` as NumPy arrays.
type Results<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u32>>);

fn into_numpy<'py>(py: Python<'py>, c: Checked) -> Results<'py> {
    (
        PyArray1::from_vec(py, c.flags),
        PyArray1::from_vec(py, c.lengths),
    )
}

/// An array imported through the Arrow C data interface (anything with `__arrow_c_array__`); it owns the
/// buffers the ragged views borrow.
fn import_arrow(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<ArrayRef> {
    let data = ArrayData::from_pyarrow_bound(obj).map_err(|e| {
        usage(
            obj.py(),
            format!("{what}: not a readable Arrow array ({e})"),
        )
    })?;
    Ok(make_array(data))
}

fn list_problem(py: Python<'_>, what: &str, p: ListProblem) -> PyErr {
    usage(py, format!("{what}: the Arrow array {p}"))
}

/// Checks batches for a training data loader: the per-sample rules of a scan, no corpus-wide codes.
#[pyclass(frozen, name = "Validator", module = "tokscan._core")]
pub struct PyValidator {
    inner: Arc<tokscan_core::Validator>,
}

#[pymethods]
impl PyValidator {
    #[new]
    #[pyo3(signature = (profile, pad_id=None, threads=1))]
    fn new(
        py: Python<'_>,
        profile: &PyProfile,
        pad_id: Option<u32>,
        threads: usize,
    ) -> PyResult<Self> {
        let v = tokscan_core::Validator::new(profile.inner.clone(), pad_id, threads)
            .map_err(|e| to_py(py, e))?;
        Ok(PyValidator { inner: Arc::new(v) })
    }

    /// Padding id of 2-D batches.
    #[getter]
    fn pad_id(&self) -> Option<u32> {
        self.inner.pad()
    }

    /// NumPy ids: 1-D with `offsets`, or 2-D padded. `loss_mask` has the ids' shape (1-D: the same
    /// offsets unless `mask_offsets` is given). Returns `(flags uint64, lengths uint32)`.
    #[pyo3(signature = (ids, offsets=None, loss_mask=None, mask_offsets=None))]
    fn check_numpy<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
        offsets: Option<&Bound<'py, PyAny>>,
        loss_mask: Option<&Bound<'py, PyAny>>,
        mask_offsets: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Results<'py>> {
        let ids_arr = IdArray::extract(ids)?;
        let off_arr = offsets
            .map(|o| OffsetArray::extract(o, "offsets"))
            .transpose()?;
        let off = off_arr.as_ref().map(|o| o.offsets(py)).transpose()?;
        let rows = rows_of(py, ids_arr.shape(), off, "ids")?;
        let tokens = ids_arr.tokens(py)?;
        let mask_arr = loss_mask.map(MaskArray::extract).transpose()?;
        let moff_arr = mask_offsets
            .map(|o| OffsetArray::extract(o, "mask_offsets"))
            .transpose()?;
        let mask = match &mask_arr {
            None => None,
            Some(m) => {
                let moff = match &moff_arr {
                    Some(o) => Some(o.offsets(py)?),
                    None => off,
                };
                let mrows = rows_of(py, m.shape(), moff, "loss_mask")?;
                Some((m.slice(py)?, mrows))
            }
        };
        let batch = BatchView {
            ids: tokens,
            rows,
            mask,
            null_rows: None,
        };
        let v = &self.inner;
        let checked = detached(py, || v.check(&batch))?;
        Ok(into_numpy(py, checked))
    }

    /// Separately stored samples: `ids` is a list of 1-D NumPy arrays, `masks` (optional) a list of the
    /// same length of 1-D arrays or `None`. One call, the GIL released once, no copies.
    #[pyo3(signature = (ids, masks=None))]
    fn check_each<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<Bound<'py, PyAny>>,
        masks: Option<Vec<Option<Bound<'py, PyAny>>>>,
    ) -> PyResult<Results<'py>> {
        if let Some(m) = &masks {
            if m.len() != ids.len() {
                return Err(usage(
                    py,
                    format!("{} masks for {} samples", m.len(), ids.len()),
                ));
            }
        }
        let id_arrays = ids
            .iter()
            .map(IdArray::extract)
            .collect::<PyResult<Vec<_>>>()?;
        let mask_arrays = match &masks {
            None => Vec::new(),
            Some(m) => m
                .iter()
                .map(|o| o.as_ref().map(MaskArray::extract).transpose())
                .collect::<PyResult<Vec<_>>>()?,
        };
        let mut seqs = Vec::with_capacity(id_arrays.len());
        for (i, a) in id_arrays.iter().enumerate() {
            if a.shape().len() != 1 {
                return Err(usage(py, format!("sample {i}: ids must be 1-D")));
            }
            let mask = match mask_arrays.get(i) {
                Some(Some(m)) => {
                    if m.shape().len() != 1 {
                        return Err(usage(py, format!("sample {i}: loss_mask must be 1-D")));
                    }
                    Some(m.slice(py)?)
                }
                _ => None,
            };
            seqs.push((a.tokens(py)?, mask));
        }
        let v = &self.inner;
        let checked = detached(py, || Ok(v.check_each(&seqs)))?;
        Ok(into_numpy(py, checked))
    }

    /// An Arrow `list`/`large_list` array (anything with `__arrow_c_array__`), imported without a copy;
    /// `loss_mask` is a list array of the same length. Null lists are empty samples.
    #[pyo3(signature = (ids, loss_mask=None))]
    fn check_arrow<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
        loss_mask: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Results<'py>> {
        let ids_array = import_arrow(ids, "ids")?;
        let ragged = token_list(ids_array.as_ref()).map_err(|p| list_problem(py, "ids", p))?;
        let nulls: Option<Vec<bool>> = ids_array
            .nulls()
            .map(|n| n.iter().map(|valid| !valid).collect());
        let mask_array = loss_mask
            .map(|m| import_arrow(m, "loss_mask"))
            .transpose()?;
        let mut unpacked = Vec::new();
        let mask = match &mask_array {
            None => None,
            Some(m) => {
                let r = mask_list(m.as_ref(), &mut unpacked)
                    .map_err(|p| list_problem(py, "loss_mask", p))?;
                Some((r.values, Rows::Ragged(r.offsets)))
            }
        };
        let batch = BatchView {
            ids: ragged.values,
            rows: Rows::Ragged(ragged.offsets),
            mask,
            null_rows: nulls.as_deref(),
        };
        let v = &self.inner;
        let checked = detached(py, || v.check(&batch))?;
        Ok(into_numpy(py, checked))
    }
}
