//! The layouts the digest walks (`digest.rs`), one program of steps per version of a message,
//! generated at build time from Kafka's JSON message specs in `protocol/specs/`, the files the
//! Python codec reads (`build/layouts.rs` writes them; a field of a kind no step reads fails the
//! build). So the versions a field is in, the fields an array's elements hold and where the
//! records lie have one source, the spec, for both roads.

/// One step over a message's body: each reads at most one field of variable length, so a read
/// that ends inside one costs a re-read of that field alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// fixed-size fields run together (ints, uuids, booleans): this many bytes
    Fixed(usize),
    /// a string (or null), UTF-8 as the codec decodes it
    Str,
    /// an array of structs: its count, then its elements' steps up to the `End` at `end`; a
    /// count whose elements (`least` bytes each at their smallest) cannot fit the body is refused
    Array { end: usize, least: usize },
    /// the end of an array's element: the next one, or the step after the array
    End,
    /// a records field: walked, and taken out of the skeleton
    Records,
    /// a struct's tag buffer (flexible versions; tagged fields are in it)
    Tags,
    /// the rest of the body after the last records-bearing field, kept as it came
    Rest,
}

/// A message's programs, one per version from `first`.
pub struct Layouts {
    pub first: i16,
    pub flexible_from: i16,
    pub programs: &'static [&'static [Op]],
}

impl Layouts {
    /// The program of `version`, with whether it is flexible; None for a version the spec has not.
    pub fn program(&self, version: i16) -> Option<(&'static [Op], bool)> {
        let i = usize::try_from(version.checked_sub(self.first)?).ok()?;
        self.programs.get(i).map(|p| (*p, version >= self.flexible_from))
    }
}

// FETCH, PRODUCE and SPECS (the spec files in `protocol/specs/` they come from, which `SOURCE` carries)
include!(concat!(env!("OUT_DIR"), "/layouts.rs"));
