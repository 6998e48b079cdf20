//! One step of the programs the digest runs (`layout.rs`), shared with the build script that
//! writes them (`build/layouts.rs`), which names each step as the digest reads it.

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
