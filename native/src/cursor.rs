//! Reading a body's bytes as far as they are here (`Cursor`): the one reader of Kafka's
//! primitives (lengths, varints, counts, strings) the core's programs step with (`program.rs`),
//! for the digest of a body read in pieces (`digest.rs`) and the endpoints check of an answer
//! held whole (`endpoints.rs`). A read past what is here is `More` while the body still has the
//! bytes, `Bad` when it cannot (a count that cannot fit, a length past the end): such a body is
//! never walked further.

/// `stream.MAX_ARRAY`: an array longer than this is corrupt.
pub const MAX_ARRAY: i64 = 1 << 24;

/// A tag buffer's least size an element: a tag and a size of one byte each.
const TAG_MIN: usize = 2;
/// `stream.MAX_TAGS`: a tag buffer that claims more tags than this is beyond any real message
/// (a struct's tagged fields are a handful); its body is not followed.
pub const MAX_TAGS: u64 = 1 << 12;

/// Why a read of the skeleton stopped: its bytes are not all here yet, or they never will be
/// (a length past the end of the body, a count that cannot fit it, bytes the codec refuses).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stop {
    More,
    Bad,
}

pub(crate) type Got<T> = Result<T, Stop>;

/// A reading of the skeleton from the last element read (`Digester::pos`): it never goes back
/// further, so every byte is read once however the body is cut into pieces. `unfed` is the body's
/// bytes not fed yet: a read past what is here is `More` while the body has the bytes, `Bad` when
/// it cannot.
pub(crate) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) p: usize,
    pub(crate) unfed: usize,
}

impl<'a> Cursor<'a> {
    /// The body's bytes from here to its end (here and still to come).
    pub(crate) fn left(&self) -> usize {
        (self.b.len() - self.p).saturating_add(self.unfed)
    }

    pub(crate) fn take(&mut self, n: usize) -> Got<&'a [u8]> {
        if n > self.b.len() - self.p {
            return Err(if n > self.left() { Stop::Bad } else { Stop::More });
        }
        let s = &self.b[self.p..self.p + n];
        self.p += n;
        Ok(s)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Got<()> {
        self.take(n).map(|_| ())
    }

    fn i16(&mut self) -> Got<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Got<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// `primitives.read_uvarint`: at most 10 bytes.
    pub(crate) fn uvarint(&mut self) -> Got<u64> {
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = self.take(1)?[0];
            value |= ((byte & 0x7f) as u64).checked_shl(shift).ok_or(Stop::Bad)?;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err(Stop::Bad);
            }
        }
    }

    /// `stream.length`: a compact length (the varint less one) or an INT32 (an INT16 for strings).
    pub(crate) fn length(&mut self, flexible: bool, wide: bool) -> Got<i64> {
        if flexible {
            Ok(i64::try_from(self.uvarint()?).map_err(|_| Stop::Bad)? - 1)
        } else if wide {
            Ok(self.i32()? as i64)
        } else {
            Ok(self.i16()? as i64)
        }
    }

    /// An array's length (none: 0), refused where it is beyond any real message or where
    /// `min_each` bytes an element cannot fit in what is left of the body: such a count ends the
    /// digest at once, instead of its elements being looked for.
    pub(crate) fn count(&mut self, flexible: bool, min_each: usize) -> Got<i64> {
        let n = self.length(flexible, true)?.max(0);
        if n > MAX_ARRAY || (n as u128) * (min_each as u128) > self.left() as u128 {
            return Err(Stop::Bad);
        }
        Ok(n)
    }

    /// A tag buffer's count, refused where it is beyond any real message (`MAX_TAGS`) or where its
    /// tags (`TAG_MIN` bytes each at their smallest) cannot fit in what is left of the body.
    pub(crate) fn tag_count(&mut self) -> Got<u64> {
        let n = self.uvarint()?;
        if n > MAX_TAGS || (n as u128) * (TAG_MIN as u128) > self.left() as u128 {
            return Err(Stop::Bad);
        }
        Ok(n)
    }

    /// A string passed over (it must be UTF-8, as the codec decodes it).
    pub(crate) fn string(&mut self, flexible: bool) -> Got<()> {
        let n = self.length(flexible, false)?;
        if n >= 0 {
            let len = usize::try_from(n).map_err(|_| Stop::Bad)?;
            std::str::from_utf8(self.take(len)?).map_err(|_| Stop::Bad)?;
        }
        Ok(())
    }
}

/// A varint at `p` of `b`: its value and the position after it; None where it runs past `b`
/// or is longer than ten bytes.
#[inline]
pub(crate) fn varint_at(b: &[u8], p: usize) -> Option<(u64, usize)> {
    let first = *b.get(p)?;
    if first & 0x80 == 0 {
        return Some((u64::from(first), p + 1)); // nearly every tag's number and size
    }
    let mut c = Cursor { b, p, unfed: 0 };
    let v = c.uvarint().ok()?;
    Some((v, c.p))
}
