//! Trace rows as columns of machine values: `metrics/rows.py`'s column buffers on the native road.
//!
//! `Columns(kinds)` holds one table's columns of a batch, one kind per column: `i` an integer
//! (kept as i64; the writer casts to the schema's width, refusing what does not fit), `b` a
//! bool, `s` a string (kept as an index into the batch's own dictionary of the strings seen).
//! `add(row)` appends one row, a tuple of one value per column, `None` for a null: no Python
//! object is kept, only the values. `buffers()` gives the columns as Arrow's buffers (values,
//! and a validity bitmap when a value is null), which the writer wraps without converting a
//! value.
//!
//! A value of the wrong type (a string in an integer column, an integer past i64) does not stop
//! the row: it is stored as a null, and `buffers()` reports the first such value, so the writer
//! drops the table's rows of the batch and says why, as the Python road's conversion does.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
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
            Kind::Int => v.extract::<i64>().map(Some).map_err(|e| e.to_string()),
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

    /// The column as Arrow's buffers: `(values, validity or None, nulls)`, and for strings a
    /// fourth item, the dictionary the values index.
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.values.len();
        let valid: PyObject = if self.nulls > 0 { PyBytes::new(py, &self.valid).into_any().unbind() } else { py.None() };
        let values = match self.kind {
            Kind::Int => {
                let mut out = Vec::with_capacity(n * 8);
                for v in &self.values {
                    out.extend_from_slice(&v.to_le_bytes());
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
                let mut out = Vec::with_capacity(n * 4);
                for v in &self.values {
                    out.extend_from_slice(&(*v as i32).to_le_bytes());
                }
                PyBytes::new(py, &out)
            }
        };
        let nulls = self.nulls;
        if self.kind == Kind::Str {
            let words = PyList::new(py, self.words.iter().map(|w| PyString::new(py, w)))?;
            PyTuple::new(py, [values.into_any(), valid.into_bound(py), nulls.into_pyobject(py)?.into_any(),
                              words.into_any()])
        } else {
            PyTuple::new(py, [values.into_any(), valid.into_bound(py), nulls.into_pyobject(py)?.into_any()])
        }
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
    /// `kinds`: one letter per column, in the schema's order: `i` integer, `b` bool, `s` string.
    #[new]
    fn new(kinds: &str) -> PyResult<Self> {
        let cols = kinds
            .chars()
            .map(|c| match c {
                'i' => Ok(Column::new(Kind::Int)),
                'b' => Ok(Column::new(Kind::Bool)),
                's' => Ok(Column::new(Kind::Str)),
                other => Err(PyValueError::new_err(format!("no column kind {other:?} (i, b or s)"))),
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
