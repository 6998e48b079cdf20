# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The record batch walk of native/src/lib.rs (``walk_batches``), rule for rule, in Cython: the
other half of the native core's spike (``bench/native_spike.py``). Every index is checked by
hand before it is read (bounds checks off: the checks below are the walk's own)."""

DEF BATCH_HEADER_BYTES = 61
DEF CONTROL_BATCH = 0x20
DEF TIMESTAMP_TYPE_LOG_APPEND = 0x08


cdef inline long long be64(const unsigned char* b) nogil:
    return <long long>((<unsigned long long>b[0] << 56) | (<unsigned long long>b[1] << 48) |
                       (<unsigned long long>b[2] << 40) | (<unsigned long long>b[3] << 32) |
                       (<unsigned long long>b[4] << 24) | (<unsigned long long>b[5] << 16) |
                       (<unsigned long long>b[6] << 8) | <unsigned long long>b[7])


cdef inline int be32(const unsigned char* b) nogil:
    return <int>((<unsigned int>b[0] << 24) | (<unsigned int>b[1] << 16) | (<unsigned int>b[2] << 8) | b[3])


cdef inline short be16(const unsigned char* b) nogil:
    return <short>((b[0] << 8) | b[1])


def walk_batches(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t n):
    """``walk`` of ``buf[start:start + n]``, as native/src/lib.rs's tuple."""
    if start < 0 or n < 0 or start + n > buf.shape[0]:
        raise ValueError(f"records [{start}, +{n}) outside a buffer of {buf.shape[0]} bytes")
    cdef const unsigned char* blob = &buf[0] + start if buf.shape[0] else NULL
    cdef long long batches = 0, records = 0, first_offset = -1, first_ts = -1, max_ts = -1
    cdef long long control = 0, partial = 0, last_base = 0, ts
    cdef int last_delta = -2, blen
    cdef bint log_append = False, legacy = False
    cdef short attrs
    cdef Py_ssize_t p = 0, remaining = n, total
    cdef const unsigned char* h
    while remaining > 0:
        if remaining < BATCH_HEADER_BYTES:
            partial += remaining
            break
        h = blob + p
        if h[16] != 2:
            legacy = True
            break
        blen = be32(h + 8)
        if blen < BATCH_HEADER_BYTES - 12 or 12 + <Py_ssize_t>blen > remaining:
            partial += remaining
            break
        total = 12 + blen
        p += total
        remaining -= total
        batches += 1
        attrs = be16(h + 21)
        if first_offset < 0:
            first_offset = be64(h)
            first_ts = be64(h + 27)
        last_base = be64(h)
        last_delta = be32(h + 23)
        if attrs & CONTROL_BATCH:
            control += 1
        else:
            records += be32(h + 57)
        ts = be64(h + 35)
        if ts > max_ts:
            max_ts = ts
        log_append = (attrs & TIMESTAMP_TYPE_LOG_APPEND) != 0
    next_offset = -1 if batches == 0 else <object>last_base + last_delta + 1
    return (batches, records, first_offset, first_ts, next_offset, max_ts, log_append, control, partial, legacy)
