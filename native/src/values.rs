//! What the core hands Python and takes from it as plain values: i64s as one `bytes`
//! (`i64_bytes`), any contiguous buffer's bytes (`with_range`)

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The bytes of `buf` (any contiguous buffer of bytes) from `start`, `start + n` checked to lie
/// inside it. The slice lives no longer than the `PyBuffer` that holds the buffer.
pub(crate) fn with_range<T>(buf: &Bound<'_, PyAny>, start: usize, n: usize, f: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    let pybuf: PyBuffer<u8> = PyBuffer::get(buf)?;
    if !pybuf.is_c_contiguous() {
        return Err(PyValueError::new_err("the native walk needs a contiguous buffer"));
    }
    let len = pybuf.len_bytes();
    let end = start.checked_add(n).filter(|&e| e <= len)
        .ok_or_else(|| PyValueError::new_err(format!("records [{start}, +{n}) outside a buffer of {len} bytes")))?;
    // SAFETY: the buffer is held (pybuf) for as long as the slice lives, is contiguous and is
    // len bytes long; the GIL is held, so nothing resizes it meanwhile
    let all: &[u8] = unsafe { std::slice::from_raw_parts(pybuf.buf_ptr() as *const u8, len) };
    Ok(f(&all[start..end]))
}

/// `values` as a `bytes` of native-endian i64s (the records and figures the core hands Python).
pub(crate) fn i64_bytes<'py>(py: Python<'py>, values: &[i64]) -> Bound<'py, PyBytes> {
    // SAFETY: an i64 is 8 plain bytes with no padding; the slice lives while `values` does
    let raw: &[u8] = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 8) };
    PyBytes::new(py, raw)
}
