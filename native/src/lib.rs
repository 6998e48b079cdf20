//! fetchlat's native core: the per-read road of a broker connection, under the Python API.
//!
//! The door is `native/__init__.py`: it loads this module, or says why not (the Python road
//! then runs). What lives here, bytes in and values out:
//!
//! - `Relay` (`relay/`): the road that carries a sidecar's client connections after their
//!   first answer, the default (`relay: auto`; `proxy/relayed.py`), a TLS client's session from
//!   its first byte (`relay/front.rs`). A thread of the
//!   core's own reads and writes both sides of each pair it is handed, frames each read with
//!   that pair's `Wire`, digests the Fetch answers and Produce requests as they come
//!   (`digest.rs`), and queues what Python must see, which Python takes in batches.
//!
//! - `Wire` (`wire/`): one connection's framing, request headers and correlation, both ways,
//!   each exchange a fixed-width record: the Python road's rules, held to it by
//!   `tests/protocol/test_wire_native.py` and the fuzz target.
//!
//! - `StampedRecv` (`stamps.rs`): one `recvmsg` of a broker socket with the kernel's receive
//!   time, for the event loop's road (`proxy/stamps.py`); the relay reads its brokers the same way.
//!
//! - `walk_batches`, `walk_whole` (`batches.rs`): the record batch headers of a partition's
//!   records, as `protocol/stream.py`'s `walk` reads them.
//!
//! - `digest_fetch` (`digest.rs`): the relay's digest of a Fetch answer or a Produce request
//!   fed in pieces, for the tests. The layouts it walks (`layout.rs`) are generated at build
//!   time from Kafka's JSON message specs, the files the Python codec reads (`build/layouts.rs`).
//!
//! - `tls` (`tls.rs`): TLS towards a client with rustls, the session over the client's socket,
//!   and the listener's settings from the PEM files the event loop's road reads; tested in its
//!   own language; the relay's pairs and fronts carry it.
//!
//! - `Columns` (`columns.rs`): one table's trace rows of a batch as columns of machine values,
//!   which the trace writer wraps as Arrow arrays without converting a value.
//!
//! - `names_brokers` (`endpoints.rs`): whether a Fetch or Produce answer held whole names
//!   brokers (KIP-951), which a proxy away from its brokers must then rewrite.
//!
//! This file only registers them. Every length read from the kernel or the bytes is checked before it is used; nothing here
//! keeps a pointer past the call that made it. `SOURCE` is the core's source, so the door can tell
//! a build made from another version of it (a stale build falls back to Python).

use pyo3::prelude::*;

mod batches;
mod columns;
mod cursor;
mod digest;
mod endpoints;
mod layout;
mod program;
mod relay;
mod stamps;
mod step;
mod tls;
mod values;
mod wire;

/// The core's sources, compiled in (`build.rs`: every `src/**/*.rs` but the tests', in path
/// order, then the specs its layouts come from): the door compares them with the checkout's.
const SOURCE: &str = include!(concat!(env!("OUT_DIR"), "/source.rs"));

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SOURCE", SOURCE)?;
    m.add("LAYOUT_SPECS", layout::SPECS)?;
    m.add("READ_BYTES", stamps::READ_BYTES)?;
    m.add("STAMP_CONTROL", (stamps::SO_TIMESTAMPNS, stamps::CONTROL_BYTES))?;
    m.add_class::<stamps::StampedRecv>()?;
    m.add_function(wrap_pyfunction!(stamps::py_wall_minus_mono_ns, m)?)?;
    m.add("STAMP_OFFSET", (stamps::OFFSET_REFRESH_NS, stamps::OFFSET_TRIES, stamps::TIGHT_NS))?;
    m.add_class::<columns::Columns>()?;
    m.add_class::<wire::PyWire>()?;
    m.add_class::<relay::PyRelay>()?;
    m.add("RELAY_KINDS", (relay::FROM_CLIENT, relay::FROM_BROKER, relay::CLOSED, relay::REWRITE, relay::READY,
                          relay::LEARN))?;
    m.add("RELAY_GATHER_BYTES", relay::GATHER_BYTES)?;
    m.add("RELAY_ITEM_WIDTH", relay::ITEM_WIDTH)?;
    m.add("RELAY_BATCH_NS", relay::BATCH_NS)?;
    m.add("RELAY_NOTIFY_ITEMS", relay::NOTIFY_ITEMS)?;
    m.add("RELAY_NOTIFY_BYTES", relay::NOTIFY_BYTES)?;
    m.add("RELAY_QUEUE_MAX_ITEMS", relay::QUEUE_MAX_ITEMS)?;
    m.add("RELAY_QUEUE_MAX_BYTES", relay::QUEUE_MAX_BYTES)?;
    m.add("RELAY_HELD_MAX", (relay::HELD_MAX_PAIR, relay::HELD_MAX_TOTAL))?;
    m.add("RELAY_SPARE_HELD_BYTES", relay::SPARE_HELD_BYTES)?;
    m.add("RELAY_PRESENT", (relay::HAS_DATA, relay::HAS_RECORDS, relay::HAS_HANDED, relay::HAS_DIGEST, relay::HAS_REASON))?;
    m.add("DIGEST_STATS_WIDTH", digest::STATS_WIDTH)?;
    m.add("DIGEST_MAX_ARRAY", cursor::MAX_ARRAY)?;
    m.add("DIGEST_MAX_TAGS", cursor::MAX_TAGS)?;
    m.add_function(wrap_pyfunction!(digest::digest_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(endpoints::py_names_brokers, m)?)?;
    m.add("WIRE_RECORD_WIDTH", wire::RECORD_WIDTH)?;
    m.add("WIRE_FLAGS", (wire::EXPECTS_RESPONSE, wire::OBSERVED, wire::HEADER_UNREADABLE, wire::SASL_V0,
                         wire::ACKS_UNREADABLE))?;
    m.add("WIRE_ROUTED", wire::ROUTED)?;
    m.add("WIRE_ASKED", wire::ASKED)?;
    m.add("WIRE_KINDS", (wire::KIND_REQUEST, wire::KIND_RESPONSE))?;
    m.add("WIRE_PEEK_BYTES", wire::PEEK_BYTES)?;
    m.add("WIRE_APIS", (wire::PRODUCE, wire::CONTROLLED_SHUTDOWN, wire::SASL_HANDSHAKE))?;
    m.add("BATCH_HEADER_BYTES", batches::BATCH_HEADER_BYTES)?;
    m.add("BATCH_ATTRIBUTES", (batches::TIMESTAMP_TYPE_LOG_APPEND, batches::CONTROL_BATCH))?;
    m.add_function(wrap_pyfunction!(batches::walk_batches, m)?)?;
    m.add_function(wrap_pyfunction!(batches::walk_whole, m)?)?;
    Ok(())
}
