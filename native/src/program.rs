//! Where a read stands in a message's program (`layout.rs`, the steps of one version from
//! Kafka's JSON spec): the step under way and the arrays open around it. The one interpreter of
//! the programs: the digest (`digest.rs`, a body read in pieces) and the endpoints check
//! (`endpoints.rs`, an answer held whole) each read a records field and a tag buffer their own
//! way, and every other step here.

use crate::cursor::{Cursor, Got, Stop};
use crate::step::Op;

/// A step that needs its reader: the program stays on it until the reader calls `passed`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Met {
    /// a records field
    Records,
    /// a tag buffer
    Tags,
    /// the rest of the body (the program's last step: it never moves past it)
    Rest,
}

pub struct Place {
    program: &'static [Op],
    pub flex: bool,
    pc: usize,
    /// the arrays under way: each one's step and its elements still to read after this one
    arrays: Vec<(usize, i64)>,
}

impl Place {
    pub fn new(program: &'static [Op], flex: bool) -> Self {
        Place { program, flex, pc: 0, arrays: Vec::with_capacity(4) }
    }

    /// One step read from `c` (a fixed run of fields, a string, an array's count, an element's
    /// end) and the program moved on: None; or the step that needs its reader, unread. Nothing
    /// changes unless the step's bytes are all here (`Stop::More`); a count that cannot fit the
    /// bytes left, or a program run past its end, is `Stop::Bad`.
    pub fn step(&mut self, c: &mut Cursor) -> Got<Option<Met>> {
        let Some(&op) = self.program.get(self.pc) else { return Err(Stop::Bad) };
        match op {
            Op::Fixed(n) => c.skip(n)?,
            Op::Str => c.string(self.flex)?,
            Op::Array { end, least } => {
                let n = c.count(self.flex, least)?;
                if n > 0 {
                    self.arrays.push((self.pc, n - 1));
                } else {
                    self.pc = end; // past its End
                }
            }
            Op::End => match self.arrays.last_mut() {
                Some((start, left)) if *left > 0 => {
                    *left -= 1;
                    self.pc = *start; // the next element's first step
                }
                Some(_) => {
                    self.arrays.pop();
                }
                None => return Err(Stop::Bad),
            },
            Op::Records => return Ok(Some(Met::Records)),
            Op::Tags => return Ok(Some(Met::Tags)),
            Op::Rest => return Ok(Some(Met::Rest)),
        }
        self.pc += 1;
        Ok(None)
    }

    /// The records field or tag buffer `step` met was read by its reader: the next step.
    pub fn passed(&mut self) {
        self.pc += 1;
    }

    /// Every step read: what is left is the rest.
    pub fn at_rest(&self) -> bool {
        self.program.get(self.pc) == Some(&Op::Rest)
    }
}
