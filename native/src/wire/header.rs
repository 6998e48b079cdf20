//! A request's header as `protocol/headers.py` reads it, from the first bytes of its frame: the
//! version tables a `Wire` is made with (`Ranges`), the header's version (flexible or not, the
//! old ControlledShutdown v0), its fields, its client id interned.

use std::sync::Arc;

use super::{Wire, CONTROLLED_SHUTDOWN};

/// Version ranges per api key (inclusive; an empty range where lo > hi).
#[derive(Clone, Default)]
pub struct Ranges(Vec<Option<(i16, i16)>>);

impl Ranges {
    pub fn new(items: &[(i16, i16, i16)]) -> Self {
        let top = items.iter().map(|&(k, _, _)| k.max(0) as usize).max().unwrap_or(0);
        let mut v = vec![None; top + 1];
        for &(k, lo, hi) in items {
            if k >= 0 {
                v[k as usize] = Some((lo, hi));
            }
        }
        Ranges(v)
    }

    /// The key is known (has a range, even an empty one).
    pub(crate) fn known(&self, key: i16) -> bool {
        key >= 0 && matches!(self.0.get(key as usize), Some(Some(_)))
    }

    pub(crate) fn contains(&self, key: i16, version: i16) -> bool {
        match self.0.get(key.max(0) as usize) {
            Some(Some((lo, hi))) if key >= 0 => *lo <= version && version <= *hi,
            _ => false,
        }
    }
}

/// A request's header as `protocol/headers.py` reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<Arc<[u8]>>,
    pub body_start: usize,
}

pub(super) fn be_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(super) fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `primitives.uvarint_at` / `read_uvarint`: at most 10 bytes (the tenth without a continuation
/// bit), None when it runs past `b` or is longer.
pub(super) fn uvarint(b: &[u8], mut at: usize) -> Option<(u128, usize)> {
    let mut value: u128 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *b.get(at)?;
        at += 1;
        value |= ((byte & 0x7f) as u128) << shift;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// `stream_now.tags_now`: a tag buffer skipped; the position after it, None when it runs past `b`.
pub(super) fn skip_tags(b: &[u8], at: usize) -> Option<usize> {
    let (count, mut p) = uvarint(b, at)?;
    let mut i: u128 = 0;
    while i < count {
        let (_, q) = uvarint(b, p)?;
        let (size, q) = uvarint(b, q)?;
        let end = (q as u128).checked_add(size).filter(|&e| e <= b.len() as u128)?;
        p = end as usize;
        i += 1;
    }
    Some(p)
}

/// `primitives.read_string`: `(present, end)` of a string at `at`, None when it runs past `b` or
/// is not UTF-8 (both are a `DecodeError` there).
pub(super) fn string_span(b: &[u8], at: usize, flexible: bool) -> Option<(Option<(usize, usize)>, usize)> {
    let (n, p): (i128, usize) = if flexible {
        let (n, p) = uvarint(b, at)?;
        (n as i128 - 1, p)
    } else {
        (be_i16(b, at)? as i128, at + 2)
    };
    if n < 0 {
        return Some((None, p));
    }
    let end = (p as i128 + n) as usize;
    if p as i128 + n > b.len() as i128 {
        return None;
    }
    std::str::from_utf8(&b[p..end]).ok()?;
    Some((Some((p, end)), end))
}

// `from_client` / `from_broker`: the bytes from each side, as the Python road names them
#[allow(clippy::wrong_self_convention)]
impl Wire {
    /// `apis.request_header_version`.
    pub(super) fn request_header_version(&self, key: i16, version: i16) -> u8 {
        if key == CONTROLLED_SHUTDOWN && version == 0 {
            return 0;
        }
        if !self.flexible.known(key) {
            return 1;
        }
        if self.flexible.contains(key, version) { 2 } else { 1 }
    }

    /// `headers.parse_request_header` of `peek`, None where it raises `DecodeError`.
    pub fn header(&self, peek: &[u8]) -> Option<Header> {
        let api_key = be_i16(peek, 0)?;
        let api_version = be_i16(peek, 2)?;
        let correlation_id = be_i32(peek, 4)?;
        let hv = self.request_header_version(api_key, api_version);
        let mut p = 8;
        let mut client_id = None;
        if hv >= 1 {
            let (span, end) = string_span(peek, p, false)?;
            client_id = span.map(|(s, e)| self.intern(&peek[s..e]));
            p = end;
        }
        if hv >= 2 {
            p = skip_tags(peek, p)?;
        }
        Some(Header { api_key, api_version, correlation_id, client_id, body_start: p })
    }

    /// The client id as an `Arc` shared with the last request's when it is the same (it nearly
    /// always is: a connection is one client).
    pub(super) fn intern(&self, raw: &[u8]) -> Arc<[u8]> {
        match &self.last_client {
            Some(c) if &c[..] == raw => c.clone(),
            _ => Arc::from(raw),
        }
    }
}
