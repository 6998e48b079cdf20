//! `Wire`'s Python face (`PyWire`): a connection's reads in, the records and the bytes the Python
//! road must parse out, as `protocol/routed.py` reads them.

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString};

use super::*;

/// The Python face: `Wire(max_frame_bytes, flexible, observed)`, the two version tables as
/// `(api_key, lo, hi)` triples (`apis.table()`'s request flexible versions; `inflight.observed`).
#[pyclass(name = "Wire", module = "fetchlat.native._core")]
pub struct PyWire {
    wire: Wire,
    take_records: bool,
}

fn with_bytes<T>(buf: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    if let Ok(b) = buf.downcast::<PyBytes>() {
        return Ok(f(b.as_bytes())); // a read's bytes, nearly always: no buffer to take
    }
    let pybuf: PyBuffer<u8> = PyBuffer::get(buf)?;
    if !pybuf.is_c_contiguous() {
        return Err(PyValueError::new_err("the native wire needs a contiguous buffer"));
    }
    // SAFETY: the buffer is held (pybuf) for as long as the slice lives, is contiguous and is
    // len_bytes() long; the GIL is held, so nothing resizes it meanwhile
    let all: &[u8] = unsafe { std::slice::from_raw_parts(pybuf.buf_ptr() as *const u8, pybuf.len_bytes()) };
    Ok(f(all))
}

/// `(held, spans, rest, pending, records)`: the bytes to feed the Python road first (b"" when
/// none), then the `(start, end)` ranges of the chunk, then (unless `rest` is -1) the chunk from
/// `rest` on and every later chunk of this direction; `pending`, the bytes at the end of the read
/// that are the start of an answer's prefix the core holds (`Routed`); `records`, for a `Wire`
/// made with `take_records`, `drain()`'s answer when a record since the last is not `ROUTED`
/// (otherwise None, and those records are dropped). None when there is none of these.
///
/// The commonest routed read, one frame of the Python road's that is the whole read and nothing
/// else (no records, nothing held or pending), is answered `True` instead: nothing to allocate.
type Records<'py> = Option<(Bound<'py, PyBytes>, Vec<Bound<'py, PyString>>)>;
type RoutedTuple<'py> = Option<(Bound<'py, PyBytes>, Vec<(usize, usize)>, i64, usize, Records<'py>)>;

fn records_bytes<'py>(py: Python<'py>, records: Vec<i64>, ids: Vec<Arc<[u8]>>) -> (Bound<'py, PyBytes>, Vec<Bound<'py, PyString>>) {
    (crate::values::i64_bytes(py, &records), ids.iter().map(|i| client_id(py, i)).collect())
}

/// A client id, which the core read only where it is UTF-8 (as the Python road reads it), as a str.
pub(crate) fn client_id<'py>(py: Python<'py>, id: &[u8]) -> Bound<'py, PyString> {
    PyString::new(py, std::str::from_utf8(id).unwrap_or(""))
}

// `from_client` / `from_broker`: the bytes from each side, as the Python road names them
#[allow(clippy::wrong_self_convention)]
impl PyWire {
    fn answer<'py>(&mut self, py: Python<'py>, out: Routed, n: usize) -> PyResult<Bound<'py, PyAny>> {
        let records = if self.take_records {
            self.wire.drain_native().map(|(r, ids)| records_bytes(py, r, ids))
        } else {
            None
        };
        if out.is_empty() && records.is_none() {
            return Ok(py.None().into_bound(py));
        }
        if records.is_none() && out.held.is_empty() && out.rest.is_none() && out.pending == 0
            && out.spans.len() == 1 && out.spans[0] == (0, n) {
            return Ok(PyBool::new(py, true).to_owned().into_any());
        }
        let t: RoutedTuple<'_> =
            Some((PyBytes::new(py, &out.held), out.spans, out.rest.map_or(-1, |r| r as i64), out.pending, records));
        Ok(t.into_pyobject(py)?.into_any())
    }
}

#[pymethods]
// `from_client` / `from_broker`: the bytes from each side, as the Python road names them
#[allow(clippy::wrong_self_convention)]
impl PyWire {
    /// `take_records`: every read's answer carries the records it made (`drain_native`), instead
    /// of their waiting for `drain()`.
    #[new]
    #[pyo3(signature = (max_frame_bytes, flexible, observed, take_records=false))]
    fn new(max_frame_bytes: i64, flexible: Vec<(i16, i16, i16)>, observed: Vec<(i16, i16, i16)>,
           take_records: bool) -> Self {
        PyWire { wire: Wire::new(max_frame_bytes, Ranges::new(&flexible), Ranges::new(&observed)), take_records }
    }

    /// Bytes the client sent at `t_ns`; a framing error raises `ValueError` with the Python
    /// road's words (the connection is lost: nothing after it is read). None when no frame of
    /// them goes to the Python road, otherwise `routed()`'s answer for them.
    fn from_client<'py>(&mut self, py: Python<'py>, data: &Bound<'_, PyAny>, t_ns: i64) -> PyResult<Bound<'py, PyAny>> {
        let mut out = Routed::default();
        let n = with_bytes(data, |b| self.wire.from_client(b, t_ns, &mut out).map(|_| b.len()))?
            .map_err(|Framing(m)| PyValueError::new_err(m))?;
        self.answer(py, out, n)
    }

    /// Bytes the broker sent, read at `t_ns`; the same answer as `from_client`.
    fn from_broker<'py>(&mut self, py: Python<'py>, data: &Bound<'_, PyAny>, t_ns: i64) -> PyResult<Bound<'py, PyAny>> {
        let mut out = Routed::default();
        let n = with_bytes(data, |b| self.wire.from_broker(b, t_ns, &mut out).map(|_| b.len()))?
            .map_err(|Framing(m)| PyValueError::new_err(m))?;
        self.answer(py, out, n)
    }

    /// `(records, client_ids)`: the records since the last drain as native-endian i64s,
    /// `RECORD_WIDTH` per record (kind, correlation id, api key, api version, client id index or
    /// -1, size, flags, t_request, t_first, t_last), and the client ids (str) they index.
    fn drain<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, Vec<Bound<'py, PyString>>) {
        let (records, ids) = self.wire.drain();
        records_bytes(py, records, ids)
    }

    #[getter]
    fn client_mid_frame(&self) -> bool {
        self.wire.client_mid_frame()
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.wire.in_flight.len()
    }

    /// Of `in_flight`, the requests routed to the Python road too (its own in-flight count has them).
    #[getter]
    fn routed_in_flight(&self) -> usize {
        self.wire.in_flight.iter().filter(|f| f.routed).count()
    }

    /// A SaslHandshake v0 went by: its answer may turn the connection to raw SASL tokens, which
    /// only the Python road follows.
    #[getter]
    fn needs_python(&self) -> bool {
        self.wire.needs_python
    }
}
