//! Trace rows as columns of machine values: `metrics/rows.py`'s column buffers on the native road.
//!
//! `Columns(kinds)` holds one table's columns of a batch, one kind per column: `8`, `4` or `2`
//! a signed integer of that many bytes (the schema's width: a value that does not fit is
//! refused), `b` a bool, `s` a string (kept as an index into the batch's own dictionary of the
//! strings seen). `add(row)` appends one row, a tuple of one value per column, `None` for a
//! null: no Python object is kept, only the values. `buffers()` gives the columns as Arrow's
//! own buffers of the schema's types (values at their width, a string column's offsets and
//! bytes, and a validity bitmap when a value is null), which the writer wraps as they are: no
//! value converted, cast or looked up on the writer's side.
//!
//! A value of the wrong type or range (a string in an integer column, 40 000 in a 2-byte one, an
//! integer past i64) does not stop the row: it is stored as a null, and `buffers()` reports the
//! first such value, so the writer drops the table's rows of the batch and says why, as the
//! Python road's conversion does.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int(u8), // its width in bytes: 8, 4 or 2
    Bool,
    Str,
}

/// One column: its values (an integer, a bool as 0 or 1, a string's index in `words`), the
/// validity bitmap Arrow reads (bit i of byte i / 8, least significant first), and for strings
/// the dictionary.
struct Column {
    kind: Kind,
    values: Vec<i64>,
    valid: Vec<u8>,
    nulls: usize,
    index: HashMap<String, i32>,
    words: Vec<String>,
    // the string objects met lately and their indexes: most values are the same few objects
    // (a proxy id, a broker label, an enum member, a client id from the codec's memo), found
    // here by identity before their text is hashed. Each is held, so its address stays its own.
    recent: Vec<(usize, i32)>,
    held: Vec<Py<PyAny>>,
    next_slot: usize,
}

/// How many string objects a column remembers by identity.
const RECENT: usize = 16;

impl Column {
    fn new(kind: Kind) -> Self {
        Column { kind, values: Vec::new(), valid: Vec::new(), nulls: 0, index: HashMap::new(), words: Vec::new(),
                 recent: Vec::new(), held: Vec::new(), next_slot: 0 }
    }

    /// The index of the string `v` (a `str`) in this batch's dictionary, adding it if new.
    fn word(&mut self, v: &Bound<'_, PyAny>, s: &Bound<'_, PyString>) -> Result<i32, String> {
        let addr = v.as_ptr() as usize;
        if let Some(&(_, i)) = self.recent.iter().find(|(a, _)| *a == addr) {
            return Ok(i);
        }
        let text = s.to_str().map_err(|e| e.to_string())?;
        let i = match self.index.get(text) {
            Some(&i) => i,
            None => {
                let i = self.words.len() as i32;
                self.index.insert(text.to_owned(), i);
                self.words.push(text.to_owned());
                i
            }
        };
        if self.recent.len() < RECENT {
            self.recent.push((addr, i));
            self.held.push(v.clone().unbind());
        } else {
            let slot = self.next_slot;
            self.next_slot = (slot + 1) % RECENT;
            self.recent[slot] = (addr, i);
            self.held[slot] = v.clone().unbind();
        }
        Ok(i)
    }

    fn push(&mut self, value: Option<i64>) {
        let row = self.values.len();
        if row % 8 == 0 {
            self.valid.push(0);
        }
        match value {
            Some(v) => {
                self.values.push(v);
                self.valid[row / 8] |= 1 << (row % 8);
            }
            None => {
                self.values.push(0);
                self.nulls += 1;
            }
        }
    }

    /// The value `v` as this column keeps it, or why it cannot be.
    fn value(&mut self, v: &Bound<'_, PyAny>) -> Result<Option<i64>, String> {
        if v.is_none() {
            return Ok(None);
        }
        match self.kind {
            Kind::Int(width) => {
                let n = v.extract::<i64>().map_err(|e| e.to_string())?;
                let fits = match width {
                    4 => i32::try_from(n).is_ok(),
                    2 => i16::try_from(n).is_ok(),
                    _ => true,
                };
                if fits { Ok(Some(n)) } else { Err(format!("{n} does not fit a {}-bit integer", 8 * width as u32)) }
            }
            Kind::Bool => match v.downcast::<PyBool>() {
                Ok(b) => Ok(Some(b.is_true() as i64)),
                Err(_) => Err(format!("a bool column was given {}", type_name(v))),
            },
            Kind::Str => {
                let s = v.downcast::<PyString>().map_err(|_| format!("a string column was given {}", type_name(v)))?;
                self.word(v, s).map(|i| Some(i as i64))
            }
        }
    }

    /// The column as Arrow's buffers of its type: `(values, validity or None, nulls)`, and for
    /// strings a fourth item, the bytes the values' offsets point into (the values are then the
    /// offsets: row i is `bytes[offsets[i]..offsets[i + 1]]`, empty for a null).
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.values.len();
        let valid: PyObject = if self.nulls > 0 { PyBytes::new(py, &self.valid).into_any().unbind() } else { py.None() };
        let values = match self.kind {
            Kind::Int(width) => {
                let mut out = Vec::with_capacity(n * width as usize);
                for v in &self.values {
                    match width {
                        4 => out.extend_from_slice(&(*v as i32).to_le_bytes()), // each checked when added
                        2 => out.extend_from_slice(&(*v as i16).to_le_bytes()),
                        _ => out.extend_from_slice(&v.to_le_bytes()),
                    }
                }
                PyBytes::new(py, &out)
            }
            Kind::Bool => {
                let mut out = vec![0u8; n.div_ceil(8)];
                for (row, v) in self.values.iter().enumerate() {
                    if *v != 0 {
                        out[row / 8] |= 1 << (row % 8);
                    }
                }
                PyBytes::new(py, &out)
            }
            Kind::Str => {
                let (offsets, text) = self.strings()?;
                let nulls = self.nulls.into_pyobject(py)?.into_any();
                return PyTuple::new(py, [PyBytes::new(py, &offsets).into_any(), valid.into_bound(py), nulls,
                                         PyBytes::new(py, &text).into_any()]);
            }
        };
        PyTuple::new(py, [values.into_any(), valid.into_bound(py), self.nulls.into_pyobject(py)?.into_any()])
    }

    /// A string column as Arrow's `string` buffers: the offsets (n + 1 little-endian i32s) and
    /// the bytes of each row's text, looked up in the dictionary once per row here.
    fn strings(&self) -> PyResult<(Vec<u8>, Vec<u8>)> {
        let n = self.values.len();
        let mut offsets = Vec::with_capacity((n + 1) * 4);
        let mut text = Vec::new();
        offsets.extend_from_slice(&0i32.to_le_bytes());
        for (row, v) in self.values.iter().enumerate() {
            if self.valid[row / 8] & (1 << (row % 8)) != 0 {
                text.extend_from_slice(self.words[*v as usize].as_bytes());
            }
            let end = i32::try_from(text.len())
                .map_err(|_| PyValueError::new_err("a string column of more than 2 GiB in one batch"))?;
            offsets.extend_from_slice(&end.to_le_bytes());
        }
        Ok((offsets, text))
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// One table's columns of a batch of trace rows (`metrics/rows.py` holds one per table).
#[pyclass(module = "fetchlat.native._core")]
pub struct Columns {
    cols: Vec<Column>,
    rows: usize,
    bad: Option<String>,
}

#[pymethods]
impl Columns {
    /// `kinds`: one letter per column, in the schema's order: `8`, `4`, `2` a signed integer of
    /// that many bytes, `b` bool, `s` string.
    #[new]
    fn new(kinds: &str) -> PyResult<Self> {
        let cols = kinds
            .chars()
            .map(|c| match c {
                '8' => Ok(Column::new(Kind::Int(8))),
                '4' => Ok(Column::new(Kind::Int(4))),
                '2' => Ok(Column::new(Kind::Int(2))),
                'b' => Ok(Column::new(Kind::Bool)),
                's' => Ok(Column::new(Kind::Str)),
                other => Err(PyValueError::new_err(format!("no column kind {other:?} (8, 4, 2, b or s)"))),
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Columns { cols, rows: 0, bad: None })
    }

    /// One row: a tuple of one value per column (`None` a null). A tuple of another length is
    /// refused (`ValueError`, nothing appended).
    fn add(&mut self, row: &Bound<'_, PyTuple>) -> PyResult<()> {
        if row.len() != self.cols.len() {
            return Err(PyValueError::new_err(format!("a row of {} values for {} columns", row.len(), self.cols.len())));
        }
        for (i, col) in self.cols.iter_mut().enumerate() {
            let v = row.get_borrowed_item(i)?;
            let value = match col.value(&v) {
                Ok(value) => value,
                Err(why) => {
                    if self.bad.is_none() {
                        self.bad = Some(format!("column {i} of row {}: {why}", self.rows));
                    }
                    None
                }
            };
            col.push(value);
        }
        self.rows += 1;
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.rows
    }

    /// `(rows, bad, columns)`: the rows held, the first value that could not be kept (or None),
    /// and each column's buffers as copies (see `Column::buffers`). A batch is written once and
    /// then let go: its memory goes with it.
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<(usize, Option<String>, Bound<'py, PyList>)> {
        let cols = self.cols.iter().map(|c| c.buffers(py)).collect::<PyResult<Vec<_>>>()?;
        Ok((self.rows, self.bad.clone(), PyList::new(py, cols)?))
    }
}
