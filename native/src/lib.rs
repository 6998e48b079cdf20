//! fetchlat's native core: the per-read road of a broker connection, under the Python API.
//!
//! The door is `native/__init__.py`: it loads this module, or says why not (the Python road
//! then runs). What lives here, bytes in and values out:
//!
//! - `StampedRecv.recv(fd)`: one `recvmsg` of a broker socket into a buffer this object owns,
//!   with the kernel's receive time of the last packet it returned (`SO_TIMESTAMPNS`), as
//!   `(bytes, wall_ns)`; what `proxy/stamps.py` does with `recvmsg_into` and the ancillary
//!   data, without the tuples, the list and the struct unpack per read.
//!
//! - `walk_batches(buf, start, n)`: the record batch headers of a fetch partition's records
//!   (`buf[start..start + n]`), what `protocol/stream.py`'s `walk` reads of them, as one tuple:
//!   a fetch of one-record batches pays that walk once per record. `walk_whole(buf, start,
//!   avail, remaining)`: the same over the batches lying whole in a chunk of a frame that
//!   arrives in pieces, up to the first one that does not (the streaming parser takes that one).
//!
//! - `Columns`: one table's trace rows of a batch as columns of machine values (`columns.rs`),
//!   which the trace writer wraps as Arrow arrays without converting a value.
//!
//! - `Wire`: one connection's framing, request headers and correlation, both ways (`wire.rs`),
//!   each exchange a fixed-width record drained in batches: the Python road's rules, held to it
//!   by `tests/protocol/test_wire_native.py`; each read's answer says which of its bytes the
//!   Python road must parse (`protocol/routed.py`, the proxy's road with `FETCHLAT_ROUTED=1`).
//!
//! - `Relay`: a spike, not the proxy's road (`relay.rs`, `bench/spike/native_relay.py`). A
//!   thread of the core's own reads and writes both sides of each connection pair it is
//!   handed, frames each read with that pair's `Wire`, and queues what Python must see, which
//!   Python takes in batches off the per-read road.
//!
//! Every length read from the kernel or the bytes is checked before it is used; nothing here
//! keeps a pointer past the call that made it. `SOURCE` is the core's source, so the door can tell
//! a build made from another version of it (a stale build falls back to Python).

use pyo3::prelude::*;

mod batches;
mod columns;
mod digest;
mod relay;
mod stamps;
mod values;
mod wire;

/// The core's sources, compiled in (`build.rs`: every `src/**/*.rs` but the tests', in path
/// order): the door compares them with the checkout's.
const SOURCE: &str = include!(concat!(env!("OUT_DIR"), "/source.rs"));

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SOURCE", SOURCE)?;
    m.add("READ_BYTES", stamps::READ_BYTES)?;
    m.add_class::<stamps::StampedRecv>()?;
    m.add_class::<columns::Columns>()?;
    m.add_class::<wire::PyWire>()?;
    m.add_class::<relay::PyRelay>()?;
    m.add("RELAY_KINDS", (relay::FROM_CLIENT, relay::FROM_BROKER, relay::CLOSED, relay::REWRITE))?;
    m.add("RELAY_GATHER_BYTES", relay::GATHER_BYTES)?;
    m.add("RELAY_ITEM_WIDTH", relay::ITEM_WIDTH)?;
    m.add("RELAY_BATCH_NS", relay::BATCH_NS)?;
    m.add("RELAY_NOTIFY_ITEMS", relay::NOTIFY_ITEMS)?;
    m.add("RELAY_NOTIFY_BYTES", relay::NOTIFY_BYTES)?;
    m.add("RELAY_QUEUE_MAX_ITEMS", relay::QUEUE_MAX_ITEMS)?;
    m.add("RELAY_QUEUE_MAX_BYTES", relay::QUEUE_MAX_BYTES)?;
    m.add("RELAY_SPARE_HELD_BYTES", relay::SPARE_HELD_BYTES)?;
    m.add("RELAY_PRESENT", (relay::HAS_DATA, relay::HAS_RECORDS, relay::HAS_HANDED, relay::HAS_DIGEST, relay::HAS_REASON))?;
    m.add("DIGEST_STATS_WIDTH", digest::STATS_WIDTH)?;
    m.add_function(wrap_pyfunction!(digest::digest_fetch, m)?)?;
    m.add("WIRE_RECORD_WIDTH", wire::RECORD_WIDTH)?;
    m.add("WIRE_FLAGS", (wire::EXPECTS_RESPONSE, wire::OBSERVED, wire::HEADER_UNREADABLE, wire::SASL_V0,
                         wire::ACKS_UNREADABLE))?;
    m.add("WIRE_ROUTED", wire::ROUTED)?;
    m.add("WIRE_ASKED", wire::ASKED)?;
    m.add_function(wrap_pyfunction!(batches::walk_batches, m)?)?;
    m.add_function(wrap_pyfunction!(batches::walk_whole, m)?)?;
    Ok(())
}
