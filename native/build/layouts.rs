//! The layouts the digest walks (`src/layout.rs`), generated from Kafka's JSON message specs,
//! the files the Python codec reads (`protocol/specs/`): for each version a message's body is
//! read in, the program of steps that passes over it, its records fields found on the way.
//!
//! A step per field, in the spec's order, for the version: fixed-size fields run together into
//! one `Fixed` (ints, uuids, booleans), a `Str` per string, an `Array` of structs with its
//! elements' steps and its least element (each field at its smallest), a `Records` field, and in
//! flexible versions the tag buffer that ends each struct (`Tags`; tagged fields live in it). What
//! follows the message's last records-bearing field is left as it came (`Rest`; for a message
//! without records, such as a Produce answer, the top-level tag buffer alone). Where the message
//! has a top-level `NodeEndpoints` tagged field (KIP-951), its first version and tag number come
//! with the programs (`Layouts::node_endpoints`). A field of a
//! kind the digest does not read (bytes, an array of plain values, a float) fails the build, by
//! name: a new version of a spec never slips past the core unread.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::step::Op;

/// A versions field ("4+", "0-12", "13", "none") holds `v`.
fn holds(versions: Option<&Value>, v: i64) -> bool {
    let Some(text) = versions.and_then(Value::as_str) else { return false };
    if text == "none" {
        return false;
    }
    if let Some(lo) = text.strip_suffix('+') {
        return v >= lo.parse::<i64>().expect("a version");
    }
    match text.split_once('-') {
        Some((lo, hi)) => v >= lo.parse::<i64>().expect("a version") && v <= hi.parse::<i64>().expect("a version"),
        None => v == text.parse::<i64>().expect("a version"),
    }
}

fn range(text: &str) -> (i64, i64) {
    match text.split_once('-') {
        Some((lo, hi)) => (lo.parse().expect("a version"), hi.parse().expect("a version")),
        None => {
            let v = text.parse().expect("a version");
            (v, v)
        }
    }
}

fn fixed_size(kind: &str) -> Option<usize> {
    Some(match kind {
        "bool" | "int8" => 1,
        "int16" | "uint16" => 2,
        "int32" | "uint32" => 4,
        "int64" => 8,
        "uuid" => 16,
        _ => return None,
    })
}

/// A step appended, fixed sizes run together.
fn push(ops: &mut Vec<Op>, op: Op) {
    if let (Some(Op::Fixed(n)), Op::Fixed(m)) = (ops.last_mut(), &op) {
        *n += m;
        return;
    }
    ops.push(op);
}

/// The least size of an element whose steps are `ops` (each field at its smallest; an array
/// inside it, empty: its count alone).
fn least(ops: &[Op], flex: bool) -> usize {
    let len = if flex { 1 } else { 4 };
    let mut depth = 0;
    let mut n = 0;
    for op in ops {
        match *op {
            Op::Array { .. } => {
                if depth == 0 {
                    n += len;
                }
                depth += 1;
            }
            Op::End => depth -= 1,
            _ if depth > 0 => {}
            Op::Fixed(k) => n += k,
            Op::Str => n += if flex { 1 } else { 2 },
            Op::Records => n += len,
            Op::Tags => n += 1,
            Op::Rest => {}
        }
    }
    n
}

/// The steps of `fields` at version `v` appended to `ops` (a struct's, its tag buffer after them
/// in flexible versions).
fn fields(message: &str, list: &[Value], v: i64, flex: bool, ops: &mut Vec<Op>) {
    for f in list {
        let name = f["name"].as_str().expect("a field's name");
        if !holds(f.get("versions"), v) || (flex && holds(f.get("taggedVersions"), v)) {
            continue; // not in this version, or in a tag buffer
        }
        let kind = f["type"].as_str().expect("a field's type");
        if let Some(n) = fixed_size(kind) {
            push(ops, Op::Fixed(n));
        } else if kind == "string" {
            ops.push(Op::Str);
        } else if kind == "records" {
            ops.push(Op::Records);
        } else if let (Some(_), Some(inner)) = (kind.strip_prefix("[]"), f.get("fields").and_then(Value::as_array)) {
            let at = ops.len();
            ops.push(Op::Array { end: 0, least: 0 });
            fields(message, inner, v, flex, ops);
            if flex {
                ops.push(Op::Tags);
            }
            let end = ops.len();
            ops.push(Op::End);
            ops[at] = Op::Array { end, least: least(&ops[at + 1..end], flex) };
        } else if let Some(inner) = f.get("fields").and_then(Value::as_array) {
            fields(message, inner, v, flex, ops); // a struct, inline
            if flex {
                ops.push(Op::Tags);
            }
        } else {
            panic!("{message} v{v}: field {name} of type {kind} is of a kind the digest does not read");
        }
    }
}

/// A spec's text without its comment lines (Kafka's JSON carries `//` comments).
fn spec(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plain: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first version and the tag number of a message's top-level `NodeEndpoints` tagged field.
fn node_endpoints(top: &[Value]) -> Option<(i64, i64)> {
    let f = top.iter().find(|f| f["name"] == "NodeEndpoints")?;
    let from = f["taggedVersions"].as_str().expect("NodeEndpoints is tagged").trim_end_matches('+');
    Some((from.parse().expect("a version"), f["tag"].as_i64().expect("a tag number")))
}

/// The programs of one message, as Rust: `pub static NAME: Layouts = ...`. `records`: the
/// message carries records (its `Rest` begins after the last field holding them); without, the
/// whole message is walked and `Rest` is its top-level tag buffer.
fn layouts(out: &mut String, name: &str, path: &Path, header_tags: bool, records: bool) {
    let s = spec(path);
    let message = s["name"].as_str().expect("a message name");
    let (first, last) = range(s["validVersions"].as_str().expect("validVersions"));
    let (flex_from, _) = range(s["flexibleVersions"].as_str().expect("flexibleVersions").trim_end_matches('+'));
    let top = s["fields"].as_array().expect("fields");
    writeln!(out, "/// `{message}.json`, versions {first} to {last} (flexible from {flex_from}).").unwrap();
    let endpoints = match node_endpoints(top) {
        Some((from, tag)) => format!("Some(({from}, {tag}))"),
        None => "None".into(),
    };
    writeln!(out, "pub static {name}: Layouts = Layouts {{ first: {first}, flexible_from: {flex_from}, \
                   node_endpoints: {endpoints}, programs: &[").unwrap();
    for v in first..=last {
        let flex = v >= flex_from;
        let mut ops = Vec::new();
        if header_tags && flex {
            ops.push(Op::Tags); // a response header's tag buffer, before the body
        }
        fields(message, top, v, flex, &mut ops);
        // the rest after the last records-bearing top-level step, as it came
        let mut cut = None;
        let mut i = 0;
        while i < ops.len() {
            let next = match ops[i] { Op::Array { end, .. } => end + 1, _ => i + 1 };
            if ops[i..next].contains(&Op::Records) {
                cut = Some(next);
            }
            i = next;
        }
        let cut = match cut {
            Some(cut) => cut,
            None if !records => ops.len(),
            None => panic!("{message} v{v}: no records field"),
        };
        ops.truncate(cut);
        ops.push(Op::Rest);
        let steps: Vec<String> = ops.iter().map(|op| match op {
            Op::Fixed(n) => format!("Op::Fixed({n})"),
            Op::Array { end, least } => format!("Op::Array {{ end: {end}, least: {least} }}"),
            other => format!("Op::{other:?}"),
        }).collect();
        writeln!(out, "    &[{}], // v{v}", steps.join(", ")).unwrap();
    }
    writeln!(out, "] }};").unwrap();
    println!("cargo:rerun-if-changed={}", path.display());
}

/// The specs the layouts come from, in `protocol/specs/` (`SOURCE` carries them too).
pub const SPECS: [&str; 3] = ["FetchResponse.json", "ProduceRequest.json", "ProduceResponse.json"];

pub fn specs_dir() -> std::path::PathBuf {
    Path::new("..").join("protocol").join("specs")
}

/// `layouts.rs` in OUT_DIR: the Fetch answer's programs (after the correlation id), the
/// Produce request's (after its header) and the Produce answer's (after the correlation id).
pub fn write(out_dir: &Path) {
    let specs = specs_dir();
    let mut out = String::from("// generated by build/layouts.rs from protocol/specs/: not edited by hand\n");
    layouts(&mut out, "FETCH", &specs.join(SPECS[0]), true, true);
    layouts(&mut out, "PRODUCE", &specs.join(SPECS[1]), false, true);
    layouts(&mut out, "PRODUCE_ANSWER", &specs.join(SPECS[2]), true, false);
    writeln!(out, "/// the spec files the layouts come from, in `protocol/specs/`").unwrap();
    writeln!(out, "pub const SPECS: (&str, &str, &str) = {:?};", (SPECS[0], SPECS[1], SPECS[2])).unwrap();
    fs::write(out_dir.join("layouts.rs"), out).expect("OUT_DIR is writable");
}
