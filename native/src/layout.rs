//! The layouts the digest walks (`digest.rs`), one program of steps per version of a message,
//! generated at build time from Kafka's JSON message specs in `protocol/specs/`, the files the
//! Python codec reads (`build/layouts.rs` writes them; a field of a kind no step reads fails the
//! build). So the versions a field is in, the fields an array's elements hold and where the
//! records lie have one source, the spec, for both roads.

pub use crate::step::Op;

/// A message's programs, one per version from `first`; `node_endpoints`: the first version and
/// the tag number of its top-level `NodeEndpoints` tagged field (KIP-951), where it has one.
pub struct Layouts {
    pub first: i16,
    pub flexible_from: i16,
    pub node_endpoints: Option<(i16, u64)>,
    pub programs: &'static [&'static [Op]],
}

impl Layouts {
    /// The program of `version`, with whether it is flexible; None for a version the spec has not.
    pub fn program(&self, version: i16) -> Option<(&'static [Op], bool)> {
        let i = usize::try_from(version.checked_sub(self.first)?).ok()?;
        self.programs.get(i).map(|p| (*p, version >= self.flexible_from))
    }
}

// FETCH (the answer), PRODUCE (the request), PRODUCE_ANSWER and SPECS (the spec files in
// `protocol/specs/` they come from, which `SOURCE` carries)
include!(concat!(env!("OUT_DIR"), "/layouts.rs"));
