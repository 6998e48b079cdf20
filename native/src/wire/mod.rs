//! One connection's framing, headers and correlation, both ways: the first layer of the native
//! per-read road (`docs/architecture.md`, "The native core").
//!
//! `Wire` is what `protocol/requests.py` and `protocol/responses.py` do to find a connection's
//! frames and match its answers, rule for rule, without a Python object per request: requests
//! are framed (the size limit), their headers read from their first `PEEK_BYTES` bytes (the
//! client id kept as bytes), the acks of a Produce read from the same bytes (acks=0 has no
//! answer), and put in flight; responses are framed and must answer the oldest request in flight
//! (the same errors, in the same words, as the Python road raises). Each exchange becomes a
//! fixed-width record of machine values that the caller drains in batches (`drain()`).
//!
//! What it does not do: the bodies. A frame the Python road parses (the table it is made with:
//! Fetch, Produce, ShareFetch in the versions `protocol/inflight.py`'s `observed` names, and what
//! a rewriter wants, `protocol/routed.py`'s `route_ranges`) carries the flag `OBSERVED`; a
//! SaslHandshake v0 the flag `SASL_V0` (its answer may switch the connection to raw SASL tokens,
//! which only the Python road follows: `needs_python` turns true). Both are routed: each read's
//! answer (`Routed`) names the bytes of it the Python road must be fed, and the exchange's
//! records carry `ROUTED`.
//!
//! Every length read from the bytes is checked before it is used; a frame is never copied, only
//! its first `PEEK_BYTES` when it arrives in pieces (as the Python road).
//!
//! Its parts: `header.rs` reads a request's header (the version tables it is made with, the
//! header's fields); this file frames both directions, keeps the requests in flight and makes the
//! records; `py.rs` is its Python face (`PyWire`).

mod header;
mod py;

use std::collections::VecDeque;
use std::sync::Arc;

pub use header::Ranges;
use header::{be_i16, be_i32, string_span};
pub(crate) use py::client_id;
pub use py::PyWire;

/// The first bytes of a request read for its header and a Produce's acks (`REQUEST_PEEK_BYTES`).
pub const PEEK_BYTES: usize = 512;
/// i64 values per record.
pub const RECORD_WIDTH: usize = 10;
pub const KIND_REQUEST: i64 = 1;
pub const KIND_RESPONSE: i64 = 2;
/// A request record's flags (field 6).
pub const EXPECTS_RESPONSE: i64 = 1;
pub const OBSERVED: i64 = 2;
pub const HEADER_UNREADABLE: i64 = 4;
pub const SASL_V0: i64 = 8;
pub const ACKS_UNREADABLE: i64 = 16;
/// A request or response record's flag: the exchange's frames are routed to the Python road too
/// (`Routed`), which makes its events; the record only marks its place.
pub const ROUTED: i64 = 32;
/// A response record's flag: its request made no record of its own (`Wire::ask_at_answer`):
/// the answer counts it.
pub const ASKED: i64 = 64;

/// How many of the latest client ids a record's id is looked for among before it is added again.
const RECENT_IDS: usize = 4;

pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const CONTROLLED_SHUTDOWN: i16 = 7;
pub const SASL_HANDSHAKE: i16 = 17;
pub const API_VERSIONS: i16 = 18;
/// `inflight.SASL_TOKEN`: the pseudo key of a raw SASL token. A request a client sends with this
/// key is answered the same way there (a bare size prefix, no correlation id): so here too.
const SASL_TOKEN: i16 = -1;

/// A request forwarded whose answer has not begun.
#[derive(Clone, Debug)]
struct InFlight {
    correlation_id: i32,
    api_key: i16,
    api_version: i16,
    client_id: Option<Arc<[u8]>>,
    t_request_ns: i64,
    /// its answer goes to the Python road too (its request did)
    routed: bool,
    /// a SaslHandshake v0: from its answer on, the broker's bytes are the Python road's alone
    hands_over: bool,
    /// its answer is one the caller holds whole before writing it (`Wire::hold_whole`)
    held_whole: bool,
    /// it made no record (`Wire::ask_at_answer`): its answer's says so (`ASKED`)
    unrecorded: bool,
}

/// A frame's route while its first bytes are still coming: the Python road's, or the core's alone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Undecided,
    Native,
    Python,
}

/// The bytes of one chunk the Python road must be fed (`Wire` routes a frame there when the Python
/// road parses its body: `OBSERVED`, or a SaslHandshake v0): first `held`, a routed request's
/// bytes from earlier chunks (at most its first eight, read before its route was known: a
/// response's route is known from its first byte, so `held` is always empty for responses), then
/// `spans` of the chunk, in order. Empty when every frame of the chunk is the core's alone.
///
/// `rest`: from this offset of the chunk on, every byte of this direction is the Python road's
/// alone, and the core reads no more of it: the client's after a SaslHandshake v0 (its answer may
/// turn the connection to raw SASL tokens), the broker's from that answer on (the answers before
/// it are still the core's).
///
/// `pending`: the read ended inside the size and correlation id of an answer the core settles
/// alone, this many bytes of them read so far: the Python road would not write them yet (it
/// writes an answer's first bytes once it knows whose answer it is), so neither does the caller.
///
/// `whole`: for a `Wire` with a `hold_whole` table, the bytes of this chunk that belong to the
/// answers the caller holds whole (a rewrite's), in order, each `(start, end, ends)`: `ends` is
/// `Some((api_key, api_version))` where the answer's last byte is `end`. Never merged: an answer's
/// first range is the first after the one that ended the answer before (or the first of all).
///
/// `open_from`: the read ended inside an answer routed to the Python road whose size and
/// correlation id are read; its bytes past them begin at this offset of the chunk (0: before it).
/// For requests: the read ended inside a request routed to the Python road, which begins at this
/// offset of the chunk (0: before it; `held` then holds its bytes from earlier chunks).
/// A caller that gathers such an answer's body into one piece for the Python road
/// (`relay/gather.rs`, `Gather`) hands on at once only the routed bytes before it. `ended_at`: the
/// offset of the chunk where the answer routed to the Python road that was under way before
/// the chunk (its body begun) ended, if it did; for requests, the request routed to the Python
/// road that was under way before the chunk.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Routed {
    pub held: Vec<u8>,
    pub spans: Vec<(usize, usize)>,
    pub rest: Option<usize>,
    pub pending: usize,
    pub whole: Vec<WholeRange>,
    pub open_from: Option<usize>,
    pub ended_at: Option<usize>,
}

impl Routed {
    fn span(&mut self, from: usize, to: usize) {
        if from >= to {
            return;
        }
        match self.spans.last_mut() {
            Some(last) if last.1 == from => last.1 = to,
            _ => self.spans.push((from, to)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty() && self.spans.is_empty() && self.rest.is_none() && self.pending == 0
    }

    fn whole_span(&mut self, from: usize, to: usize) {
        if from < to {
            self.whole.push((from, to, None));
        }
    }
}

/// A range of a chunk that belongs to an answer held whole: `(start, end, ends)` (`Routed::whole`).
pub type WholeRange = (usize, usize, Option<(i16, i16)>);

/// A framing error, in the Python road's words (`FramingError`).
#[derive(Debug, PartialEq, Eq)]
pub struct Framing(pub String);

/// The first four bytes of `b` (a size prefix, a correlation id), zeros past its end: the callers
/// have checked that four are there, so no conversion can fail on the bytes.
fn four(b: &[u8]) -> [u8; 4] {
    let mut out = [0u8; 4];
    for (o, v) in out.iter_mut().zip(b) {
        *o = *v;
    }
    out
}

fn frame_size(raw: [u8; 4], max: i64, side: &str) -> Result<usize, Framing> {
    let size = i32::from_be_bytes(raw) as i64;
    if size <= 0 {
        return Err(Framing(format!("{side} frame size {size} is not positive")));
    }
    if size > max {
        return Err(Framing(format!(
            "{side} frame of {size} bytes exceeds the limit of {max} (raise max_frame_bytes if this is legitimate)")));
    }
    Ok(size as usize)
}

/// What a drain gives: the records, and the client ids they index.
pub type Drained = (Vec<i64>, Vec<Arc<[u8]>>);

/// One connection, both directions.
pub struct Wire {
    max_frame: i64,
    flexible: Ranges,
    observed: Ranges,
    // the answers the caller holds whole (empty unless `hold_whole` set it), routed or not
    whole: Ranges,
    last_client: Option<Arc<[u8]>>,
    // requests: the size prefix so far, what is left of the frame, its first bytes, its route
    // and (while that is undecided) its bytes from earlier chunks
    rq_size_buf: Vec<u8>,
    rq_left: usize,
    rq_size: usize,
    rq_peek: Vec<u8>,
    rq_peek_want: usize,
    rq_route: Route,
    rq_carry: Vec<u8>,
    // responses: the size and correlation id so far, the one under way, its route (known from
    // its first byte: the oldest request in flight's)
    rs_prefix: Vec<u8>,
    rs_left: usize,
    rs_size: usize,
    rs_current: Option<InFlight>,
    rs_route: Route,
    rs_whole: bool,
    rs_t_first: i64,
    in_flight: VecDeque<InFlight>,
    records: Vec<i64>,
    // the client ids the records since the last drain name, by index
    ids: Vec<Arc<[u8]>>,
    needs_python: bool,
    broker_handed_over: bool,
    // records since the last drain that are not `ROUTED` (the Python road made no events for them)
    native_records: usize,
    /// `ask_at_answer`: requests settled alone are recorded by their answers
    asked_at_answer: bool,
}

// `from_client` / `from_broker`: the bytes from each side, as the Python road names them
#[allow(clippy::wrong_self_convention)]
impl Wire {
    pub fn new(max_frame: i64, flexible: Ranges, observed: Ranges) -> Self {
        Wire { max_frame, flexible, observed, whole: Ranges::default(), last_client: None, rq_size_buf: Vec::with_capacity(4), rq_left: 0,
               rq_size: 0, rq_peek: Vec::new(), rq_peek_want: 0, rq_route: Route::Undecided, rq_carry: Vec::new(),
               rs_prefix: Vec::with_capacity(8), rs_left: 0, rs_size: 0, rs_current: None,
               rs_route: Route::Undecided, rs_whole: false, rs_t_first: 0, in_flight: VecDeque::new(),
               records: Vec::new(), ids: Vec::new(), needs_python: false,
               broker_handed_over: false, native_records: 0, asked_at_answer: false }
    }

    /// The answers to these requests (`(api_key, lo, hi)`) are routed, and their bytes also
    /// named in `Routed::whole`: the caller holds them whole (to rewrite them) instead of
    /// writing them on as they come.
    pub fn hold_whole(&mut self, items: &[(i16, i16, i16)]) {
        self.whole = Ranges::new(items);
    }

    pub fn client_mid_frame(&self) -> bool {
        self.rq_left > 0 || !self.rq_size_buf.is_empty()
    }

    fn id_index(&mut self, id: &Option<Arc<[u8]>>) -> i64 {
        let Some(id) = id else { return -1 };
        // the last few only: a client that sends a new id per request adds one each, never a search
        let from = self.ids.len().saturating_sub(RECENT_IDS);
        if let Some(i) = self.ids[from..].iter().rposition(|x| Arc::ptr_eq(x, id) || x[..] == id[..]) {
            return (from + i) as i64;
        }
        self.ids.push(id.clone());
        (self.ids.len() - 1) as i64
    }

    /// A request goes to the Python road too: the Python road parses its body (`OBSERVED`), or
    /// it is a SaslHandshake v0 (its answer may turn the connection to raw SASL tokens). An answer
    /// held whole (`hold_whole`) is not routed for that: the caller rewrites it, and its exchange
    /// is the core's unless `observed` names it too.
    fn routes(&self, key: i16, version: i16) -> bool {
        self.observed.contains(key, version) || (key == SASL_HANDSHAKE && version == 0)
    }

    /// `routes` of the request whose api key and version begin at `at` of `b` (not routed where
    /// they are not there).
    fn routes_at(&self, b: &[u8], at: usize) -> bool {
        match (be_i16(b, at), be_i16(b, at + 2)) {
            (Some(key), Some(version)) => self.routes(key, version),
            _ => false,
        }
    }

    /// Requests: `requests.py`'s `RequestDecoder.receive`, the bytes the client sent at `t_ns`;
    /// the bytes of `data` the Python road must see go into `out`: every request it parses, whole
    /// (size prefix included), and nothing else.
    pub fn from_client(&mut self, data: &[u8], t_ns: i64, out: &mut Routed) -> Result<(), Framing> {
        let n = data.len();
        if self.needs_python {
            out.rest = Some(0);
            self.frames_only(data);
            return Ok(());
        }
        let mut pos = 0;
        // where the current frame's bytes begin in this chunk (0: it began in an earlier one)
        let mut fstart = 0;
        let was_open = self.rq_route == Route::Python && self.rq_left > 0;
        while pos < n {
            let at = pos;
            if self.rq_left == 0 && self.rq_size_buf.is_empty() && n - pos >= 4 {
                let size = frame_size(four(&data[pos..pos + 4]), self.max_frame, "request")?;
                if n - pos - 4 >= size {
                    // the whole request is here: read where it lies
                    let start = pos + 4;
                    self.rq_size = size;
                    if size >= 4 && self.routes_at(data, start) {
                        out.span(pos, start + size);
                    }
                    self.done(&data[start..start + size.min(PEEK_BYTES)], t_ns)?;
                    pos += 4 + size;
                    if self.needs_python {
                        out.rest = Some(pos);
                        self.frames_only(&data[pos..]);
                        return Ok(());
                    }
                    continue;
                }
                fstart = pos;
                self.rq_route = Route::Undecided;
                self.rq_size = size;
                self.rq_left = size;
                self.rq_peek.clear();
                self.rq_peek_want = size.min(PEEK_BYTES);
                pos += 4;
                continue;
            }
            if self.rq_left == 0 {
                if self.rq_size_buf.is_empty() {
                    fstart = pos;
                    self.rq_route = Route::Undecided;
                }
                let take = (4 - self.rq_size_buf.len()).min(n - pos);
                self.rq_size_buf.extend_from_slice(&data[pos..pos + take]);
                pos += take;
                if self.rq_size_buf.len() == 4 {
                    let raw = four(&self.rq_size_buf);
                    let size = frame_size(raw, self.max_frame, "request")?;
                    self.rq_size = size;
                    self.rq_left = size;
                    self.rq_size_buf.clear();
                    self.rq_peek.clear();
                    self.rq_peek_want = size.min(PEEK_BYTES);
                }
                continue;
            }
            let take = if self.rq_peek.len() < self.rq_peek_want {
                let take = (self.rq_peek_want - self.rq_peek.len()).min(n - pos);
                self.rq_peek.extend_from_slice(&data[pos..pos + take]);
                take
            } else {
                self.rq_left.min(n - pos)
            };
            pos += take;
            self.rq_left -= take;
            match self.rq_route {
                Route::Python => out.span(at, pos),
                Route::Native => {}
                Route::Undecided if self.rq_peek.len() >= 4 => {
                    if self.routes_at(&self.rq_peek, 0) {
                        self.rq_route = Route::Python;
                        if fstart == 0 {
                            out.held.append(&mut self.rq_carry);
                        }
                        out.span(fstart, pos);
                    } else {
                        self.rq_route = Route::Native;
                    }
                    self.rq_carry.clear();
                }
                Route::Undecided => {}
            }
            if self.rq_left == 0 {
                if was_open && out.ended_at.is_none() {
                    out.ended_at = Some(pos);
                }
                self.rq_route = Route::Undecided;
                self.rq_carry.clear();
                let peek = std::mem::take(&mut self.rq_peek);
                let r = self.done(&peek, t_ns);
                self.rq_peek = peek;
                r?;
                if self.needs_python {
                    out.rest = Some(pos);
                    self.frames_only(&data[pos..]);
                    return Ok(());
                }
            }
        }
        // a frame whose route is not known yet: its bytes so far, for the chunk that decides it
        if self.rq_route == Route::Undecided && (self.rq_left > 0 || !self.rq_size_buf.is_empty()) {
            self.rq_carry.extend_from_slice(&data[fstart..n]);
        }
        if self.rq_route == Route::Python && self.rq_left > 0 {
            out.open_from = Some(fstart); // a routed request goes on past this chunk
        }
        Ok(())
    }

    /// The client's bytes once they are the Python road's alone (after a SaslHandshake v0): only
    /// where its frames begin and end is followed (a raw SASL token has a size prefix too), so
    /// that `client_mid_frame` still tells a frame begun and not finished, and the partial-frame
    /// timeout holds there as before the hand-over. The Python road judges the frames themselves.
    fn frames_only(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.rq_left == 0 {
                let take = (4 - self.rq_size_buf.len()).min(data.len());
                self.rq_size_buf.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.rq_size_buf.len() == 4 {
                    let size = i32::from_be_bytes([self.rq_size_buf[0], self.rq_size_buf[1], self.rq_size_buf[2],
                                                   self.rq_size_buf[3]]);
                    self.rq_size_buf.clear();
                    self.rq_left = usize::try_from(size).unwrap_or(0);
                }
                continue;
            }
            let take = self.rq_left.min(data.len());
            self.rq_left -= take;
            data = &data[take..];
        }
    }

    /// A request ended (`requests.py`'s `_done`): its first bytes `peek`.
    fn done(&mut self, peek: &[u8], t_ns: i64) -> Result<(), Framing> {
        let size = self.rq_size as i64;
        let Some(h) = self.header(peek) else {
            if peek.len() < 8 {
                return Err(Framing(format!("request of {} bytes is too short for a header", peek.len())));
            }
            let key = be_i16(peek, 0).unwrap_or(0);
            let ver = be_i16(peek, 2).unwrap_or(0);
            let corr = be_i32(peek, 4).unwrap_or(0);
            let routed = self.routes(key, ver);
            self.in_flight.push_back(InFlight { correlation_id: corr, api_key: key, api_version: ver, client_id: None,
                                                t_request_ns: t_ns, routed, hands_over: false, held_whole: false,
                                                unrecorded: false });
            // no body is parsed without a header, so never OBSERVED
            let flags = EXPECTS_RESPONSE | HEADER_UNREADABLE | if routed { ROUTED } else { 0 };
            self.native_records += usize::from(!routed);
            self.records.extend_from_slice(&[KIND_REQUEST, corr as i64, key as i64, ver as i64, -1, size, flags, t_ns,
                                             0, 0]);
            return Ok(());
        };
        self.last_client = h.client_id.clone();
        let mut flags = if self.observed.contains(h.api_key, h.api_version) { OBSERVED } else { 0 };
        let mut expects = true;
        if h.api_key == PRODUCE && h.api_version >= 3 {
            // read from the first bytes: correlation must not rest on the whole body decoding
            let acks = string_span(peek, h.body_start, h.api_version >= 9).and_then(|(_, p)| be_i16(peek, p));
            match acks {
                Some(acks) => expects = acks != 0,
                None => flags |= ACKS_UNREADABLE,
            }
        }
        let hands_over = h.api_key == SASL_HANDSHAKE && h.api_version == 0;
        if hands_over {
            flags |= SASL_V0;
            self.needs_python = true;
        }
        if self.routes(h.api_key, h.api_version) {
            flags |= ROUTED;
        }
        // a request the core settles alone whose answer will come: the answer's record tells it
        let unrecorded = self.asked_at_answer && expects && flags & (ROUTED | SASL_V0 | ACKS_UNREADABLE) == 0;
        if expects {
            flags |= EXPECTS_RESPONSE;
            self.in_flight.push_back(InFlight { correlation_id: h.correlation_id, api_key: h.api_key,
                                                api_version: h.api_version, client_id: h.client_id.clone(),
                                                t_request_ns: t_ns, routed: self.routes(h.api_key, h.api_version),
                                                hands_over,
                                                held_whole: self.whole.contains(h.api_key, h.api_version),
                                                unrecorded });
        }
        if unrecorded {
            return Ok(());
        }
        self.native_records += usize::from(flags & ROUTED == 0);
        let id = self.id_index(&h.client_id);
        self.records.extend_from_slice(&[KIND_REQUEST, h.correlation_id as i64, h.api_key as i64,
                                         h.api_version as i64, id, size, flags, t_ns, 0, 0]);
        Ok(())
    }

    /// Responses: `responses.py`'s `ResponseDecoder.forward` (no rewriter, no raw SASL), the
    /// bytes read at `t_ns`; every response that ends becomes a record. The bytes of `data` the
    /// Python road must see go into `out`: the answers to the requests routed there, whole (size
    /// prefix included), and nothing else.
    pub fn from_broker(&mut self, data: &[u8], t_ns: i64, out: &mut Routed) -> Result<(), Framing> {
        let n = data.len();
        let mut pos = 0;
        if self.broker_handed_over {
            out.rest = Some(0);
            return Ok(());
        }
        // where the body of the last answer whose prefix was read in this chunk begins
        let mut body_at = 0;
        let was_open = self.rs_current.is_some() && self.rs_route == Route::Python;
        while pos < n {
            if self.rs_current.is_none() {
                // the size and the correlation id; only the size before a raw token's answer
                let Some(head) = self.in_flight.front() else {
                    // an answer's first bytes with nothing asked (the prefix only ever grows for
                    // the request it began for): refused at once, as the Python road refuses it
                    return Err(Framing("response from the broker matches no request".into()));
                };
                let want: usize = if head.api_key == SASL_TOKEN { 4 } else { 8 };
                if self.rs_prefix.is_empty() && head.hands_over {
                    self.broker_handed_over = true;
                    out.rest = Some(pos);
                    return Ok(());
                }
                if self.rs_prefix.is_empty() {
                    // known from the first byte: none of an answer routed to Python is written alone
                    self.rs_route = if head.routed { Route::Python } else { Route::Native };
                    self.rs_whole = head.held_whole;
                }
                let at = pos;
                let take = want.saturating_sub(self.rs_prefix.len()).min(n - pos);
                self.rs_prefix.extend_from_slice(&data[pos..pos + take]);
                pos += take;
                if self.rs_route == Route::Python {
                    out.span(at, pos);
                }
                if self.rs_whole {
                    out.whole_span(at, pos);
                }
                if self.rs_prefix.len() == want {
                    self.start(t_ns)?;
                    body_at = pos;
                    if self.rs_left == 0 {
                        self.end_answer(t_ns, out);
                    }
                }
                continue;
            }
            let at = pos;
            let take = self.rs_left.min(n - pos);
            pos += take;
            self.rs_left -= take;
            if self.rs_route == Route::Python {
                out.span(at, pos);
            }
            if self.rs_whole {
                out.whole_span(at, pos);
            }
            if self.rs_left == 0 {
                if was_open && out.ended_at.is_none() {
                    out.ended_at = Some(pos);
                }
                self.end_answer(t_ns, out);
            }
        }
        if self.rs_current.is_none() && self.rs_route == Route::Native {
            out.pending = self.rs_prefix.len();
        }
        if self.rs_current.is_some() && self.rs_route == Route::Python {
            out.open_from = Some(body_at);
        }
        Ok(())
    }

    /// The request the answer under way answers: `(api_key, api_version)`.
    pub fn answer_api(&self) -> Option<(i16, i16)> {
        self.rs_current.as_ref().map(|c| (c.api_key, c.api_version))
    }

    /// The bytes still to come of the answer under way (0: none is).
    pub fn answer_left(&self) -> usize {
        if self.rs_current.is_some() { self.rs_left } else { 0 }
    }

    fn start(&mut self, t_ns: i64) -> Result<(), Framing> {
        let size = frame_size(four(&self.rs_prefix), self.max_frame, "response")?;
        let Some(head) = self.in_flight.front() else {
            return Err(Framing("response from the broker matches no request".into()));
        };
        if head.api_key != SASL_TOKEN {
            if size < 4 {
                return Err(Framing(format!("response frame of {size} bytes has no correlation id")));
            }
            let corr = i32::from_be_bytes(four(&self.rs_prefix[4..]));
            if corr != head.correlation_id {
                return Err(Framing(format!("response correlation id {corr} does not match the oldest request's {}",
                                           head.correlation_id)));
            }
        }
        self.rs_current = self.in_flight.pop_front();
        self.rs_size = size;
        self.rs_left = size - (self.rs_prefix.len() - 4);
        self.rs_t_first = t_ns;
        self.rs_prefix.clear();
        Ok(())
    }

    /// An answer's last byte was read: `finish`, and an answer held whole says so in `out.whole`.
    fn end_answer(&mut self, t_ns: i64, out: &mut Routed) {
        if self.rs_whole {
            if let (Some(cur), Some(last)) = (self.rs_current.as_ref(), out.whole.last_mut()) {
                last.2 = Some((cur.api_key, cur.api_version));
            }
            self.rs_whole = false;
        }
        self.finish(t_ns);
    }

    fn finish(&mut self, t_ns: i64) {
        let Some(cur) = self.rs_current.take() else { return };
        self.rs_route = Route::Undecided;
        let id = self.id_index(&cur.client_id);
        let flags = if cur.routed { ROUTED } else { 0 } | if cur.unrecorded { ASKED } else { 0 };
        self.native_records += usize::from(!cur.routed);
        self.records.extend_from_slice(&[KIND_RESPONSE, cur.correlation_id as i64, cur.api_key as i64,
                                         cur.api_version as i64, id, self.rs_size as i64, flags, cur.t_request_ns,
                                         self.rs_t_first, t_ns]);
    }

    /// From here on, a request the core settles alone makes no record of its own where its answer
    /// is due: the answer's record carries `ASKED` and stands for both (one record an exchange,
    /// not two; the relay's, `relay/`). One whose answer never comes is recorded at the end
    /// (`unanswered`).
    pub fn ask_at_answer(&mut self) {
        self.asked_at_answer = true;
    }

    /// The requests in flight that made no record (`ask_at_answer`), recorded now (the pair
    /// ends: no answer will stand for them), as their own records would have been but for their
    /// size (0).
    pub fn unanswered(&mut self) {
        let mut waiting: Vec<InFlight> = self.rs_current.take().into_iter().collect();
        waiting.extend(self.in_flight.drain(..));
        for f in waiting.into_iter().filter(|f| f.unrecorded) {
            let id = self.id_index(&f.client_id);
            self.native_records += 1;
            self.records.extend_from_slice(&[KIND_REQUEST, f.correlation_id as i64, f.api_key as i64,
                                             f.api_version as i64, id, 0, EXPECTS_RESPONSE, f.t_request_ns, 0, 0]);
        }
    }

    /// The records since the last drain, and the client ids their field 4 indexes.
    pub fn drain(&mut self) -> (Vec<i64>, Vec<Arc<[u8]>>) {
        self.native_records = 0;
        (std::mem::take(&mut self.records), std::mem::take(&mut self.ids))
    }

    /// `drain`, or None when every record since the last one is `ROUTED` (the Python road's
    /// events say all they would): those are dropped, there being nothing to order them among.
    pub fn drain_native(&mut self) -> Option<Drained> {
        self.drain_native_into(Vec::new(), Vec::new())
    }

    /// A record since the last drain is not `ROUTED` (`drain_native` has some to give).
    pub fn has_native_records(&self) -> bool {
        self.native_records > 0
    }

    /// `drain_native`, the records gathered from here on into `records` and `ids` (empty buffers
    /// the caller recycles: `relay/spare.rs`, `Spare`) where the ones drained go.
    pub fn drain_native_into(&mut self, records: Vec<i64>, ids: Vec<Arc<[u8]>>) -> Option<Drained> {
        if self.native_records == 0 {
            self.records.clear();
            self.ids.clear();
            return None;
        }
        self.native_records = 0;
        Some((std::mem::replace(&mut self.records, records), std::mem::replace(&mut self.ids, ids)))
    }
}

#[cfg(test)]
#[path = "../tests/wire.rs"]
mod tests;
