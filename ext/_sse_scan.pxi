# Included by _sse_c.pyx: the validating JSON scanner for one SSE event payload.
#
# ``scan_chunk`` walks a payload and returns OK only when it is valid JSON (as
# orjson would accept it) of the common chunk shape, recording per choice the
# string that may carry visible text and whether reasoning text was non-empty.
# Anything else returns FALLBACK and the payload goes to the pure twin's
# ``account_payload``. Source: RFC 8259 (grammar), RFC 3629 (UTF-8).
ctypedef const unsigned char* cptr

cdef enum:
    MAX_CHOICES = 8
    MAX_DEPTH = 128

# Scanner outcome: OK = the payload is fully understood, FALLBACK = hand it to orjson.
cdef enum:
    OK = 0
    FALLBACK = 1


cdef struct Scan:
    cptr p
    cptr end
    int nch
    # Per object-choice, in order: the string that may carry visible text
    # (delta.content when delta is an object, else choices[].text).
    cptr str_p[MAX_CHOICES]      # first byte after the opening quote, NULL if none
    Py_ssize_t str_n[MAX_CHOICES]
    bint str_esc[MAX_CHOICES]
    bint reasoning[MAX_CHOICES]
    # Per object-choice: its finish_reason when a string without escapes (first byte
    # after the quote), NULL when null or absent (issue 43 item 2: the finish chunk).
    cptr fr_p[MAX_CHOICES]
    Py_ssize_t fr_n[MAX_CHOICES]
    # The top-level "usage" object's bytes ('{' to '}'), NULL when absent or not an object.
    cptr usage_p
    Py_ssize_t usage_n


# PLAIN[c] is 1 for bytes a JSON string can hold as they are, without a closer look.
cdef unsigned char PLAIN[256]
cdef int _i
for _i in range(256):
    PLAIN[_i] = 1 if (0x20 <= _i < 0x80 and _i != 34 and _i != 92) else 0


cdef inline void skip_ws(Scan* s) noexcept nogil:
    cdef cptr p = s.p
    while p < s.end and (p[0] == 32 or p[0] == 10 or p[0] == 13 or p[0] == 9):
        p += 1
    s.p = p


cdef inline int hexval(unsigned char c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline int hex4(cptr p) noexcept nogil:
    cdef int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3])
    if a < 0 or b < 0 or c < 0 or d < 0:
        return -1
    return (a << 12) | (b << 8) | (c << 4) | d


cdef int scan_string(Scan* s, cptr* start, Py_ssize_t* n, bint* esc) noexcept nogil:
    """At an opening quote: validate the string, leave ``s.p`` after its closing quote."""
    cdef cptr p = s.p + 1
    cdef cptr end = s.end
    cdef unsigned char c, c1
    cdef int u, u2
    cdef bint e = False
    start[0] = p
    while p < end:
        c = p[0]
        if PLAIN[c]:  # most bytes: printable ASCII other than '"' and backslash
            p += 1
            continue
        if c == 34:  # '"'
            n[0] = p - start[0]
            esc[0] = e
            s.p = p + 1
            return OK
        if c < 0x80:
            if c == 92:  # backslash
                e = True
                if p + 1 >= end:
                    return FALLBACK
                c1 = p[1]
                if c1 == 117:  # \uXXXX
                    if p + 6 > end:
                        return FALLBACK
                    u = hex4(p + 2)
                    if u < 0:
                        return FALLBACK
                    if 0xD800 <= u <= 0xDBFF:
                        if p + 12 > end or p[6] != 92 or p[7] != 117:
                            return FALLBACK
                        u2 = hex4(p + 8)
                        if not (0xDC00 <= u2 <= 0xDFFF):
                            return FALLBACK
                        p += 12
                    elif 0xDC00 <= u <= 0xDFFF:
                        return FALLBACK
                    else:
                        p += 6
                    continue
                if (c1 == 34 or c1 == 92 or c1 == 47 or c1 == 98 or c1 == 102
                        or c1 == 110 or c1 == 114 or c1 == 116):
                    p += 2
                    continue
                return FALLBACK
            if c < 0x20:
                return FALLBACK
            p += 1
            continue
        # Strict UTF-8 (RFC 3629): no overlongs, no surrogates, max U+10FFFF.
        if 0xC2 <= c <= 0xDF:
            if p + 2 > end or (p[1] & 0xC0) != 0x80:
                return FALLBACK
            p += 2
        elif 0xE0 <= c <= 0xEF:
            if p + 3 > end or (p[1] & 0xC0) != 0x80 or (p[2] & 0xC0) != 0x80:
                return FALLBACK
            if c == 0xE0 and p[1] < 0xA0:
                return FALLBACK
            if c == 0xED and p[1] > 0x9F:
                return FALLBACK
            p += 3
        elif 0xF0 <= c <= 0xF4:
            if (p + 4 > end or (p[1] & 0xC0) != 0x80 or (p[2] & 0xC0) != 0x80
                    or (p[3] & 0xC0) != 0x80):
                return FALLBACK
            if c == 0xF0 and p[1] < 0x90:
                return FALLBACK
            if c == 0xF4 and p[1] > 0x8F:
                return FALLBACK
            p += 4
        else:
            return FALLBACK
    return FALLBACK


cdef int skip_number(Scan* s) noexcept nogil:
    """RFC 8259 number without exponent and with at most 18 integer digits."""
    cdef cptr p = s.p
    cdef cptr end = s.end
    cdef cptr d0
    if p < end and p[0] == 45:  # '-'
        p += 1
    if p >= end:
        return FALLBACK
    d0 = p
    if p[0] == 48:  # '0'
        p += 1
    elif 49 <= p[0] <= 57:
        while p < end and 48 <= p[0] <= 57:
            p += 1
        if p - d0 > 18:
            return FALLBACK  # orjson turns these into floats, or infinity errors
    else:
        return FALLBACK
    if p < end and p[0] == 46:  # '.'
        p += 1
        d0 = p
        while p < end and 48 <= p[0] <= 57:
            p += 1
        if p == d0:
            return FALLBACK
    if p < end and (p[0] == 101 or p[0] == 69):  # exponent: leave it to orjson
        return FALLBACK
    s.p = p
    return OK


cdef inline int skip_lit(Scan* s, const char* lit, Py_ssize_t n) noexcept nogil:
    if s.end - s.p < n or memcmp(s.p, lit, n) != 0:
        return FALLBACK
    s.p += n
    return OK


cdef int skip_value(Scan* s, int depth) noexcept nogil:
    """Validate and skip any JSON value starting at ``s.p`` (whitespace already skipped)."""
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint ke
    cdef unsigned char c
    if s.p >= s.end:
        return FALLBACK
    c = s.p[0]
    if c == 34:
        return scan_string(s, &k, &kn, &ke)
    if c == 123 or c == 91:  # '{' or '['
        if depth >= MAX_DEPTH:
            return FALLBACK
        s.p += 1
        skip_ws(s)
        if s.p < s.end and s.p[0] == (125 if c == 123 else 93):
            s.p += 1
            return OK
        while True:
            if c == 123:
                if s.p >= s.end or s.p[0] != 34 or scan_string(s, &k, &kn, &ke):
                    return FALLBACK
                skip_ws(s)
                if s.p >= s.end or s.p[0] != 58:
                    return FALLBACK
                s.p += 1
                skip_ws(s)
            if skip_value(s, depth + 1):
                return FALLBACK
            skip_ws(s)
            if s.p >= s.end:
                return FALLBACK
            if s.p[0] == 44:  # ','
                s.p += 1
                skip_ws(s)
                continue
            if s.p[0] == (125 if c == 123 else 93):
                s.p += 1
                return OK
            return FALLBACK
    if c == 116:
        return skip_lit(s, "true", 4)
    if c == 102:
        return skip_lit(s, "false", 5)
    if c == 110:
        return skip_lit(s, "null", 4)
    return skip_number(s)


cdef inline bint key_is(cptr k, Py_ssize_t kn, const char* name, Py_ssize_t n) noexcept nogil:
    return kn == n and memcmp(k, name, n) == 0


# Walks an object's members. ``s.p`` is at '{'. For each member the key is
# returned through k/kn and ``s.p`` is left at the value; the caller consumes
# the value then calls ``obj_next``.
cdef inline int obj_first(Scan* s, cptr* k, Py_ssize_t* kn, bint* more) noexcept nogil:
    cdef bint ke
    s.p += 1
    skip_ws(s)
    if s.p < s.end and s.p[0] == 125:
        s.p += 1
        more[0] = False
        return OK
    more[0] = True
    if s.p >= s.end or s.p[0] != 34 or scan_string(s, k, kn, &ke) or ke:
        return FALLBACK  # escaped keys may spell a key we track
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 58:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    return OK if s.p < s.end else FALLBACK


cdef inline int obj_next(Scan* s, cptr* k, Py_ssize_t* kn, bint* more) noexcept nogil:
    cdef bint ke
    skip_ws(s)
    if s.p >= s.end:
        return FALLBACK
    if s.p[0] == 125:
        s.p += 1
        more[0] = False
        return OK
    if s.p[0] != 44:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 34 or scan_string(s, k, kn, &ke) or ke:
        return FALLBACK
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 58:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    return OK if s.p < s.end else FALLBACK


cdef int scan_delta(Scan* s, cptr* cp, Py_ssize_t* cn, bint* ce, bint* reasoning) noexcept nogil:
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    cdef bint seen_c = False, seen_rc = False, seen_r = False
    cdef cptr sp
    cdef Py_ssize_t sn
    cdef bint se
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    while more:
        if key_is(k, kn, "content", 7):
            if seen_c:
                return FALLBACK
            seen_c = True
            if s.p[0] == 34:
                if scan_string(s, cp, cn, ce):
                    return FALLBACK
            elif s.p[0] == 110:
                if skip_lit(s, "null", 4):
                    return FALLBACK
            else:
                return FALLBACK  # array of parts or an odd shape: orjson decides
        elif key_is(k, kn, "reasoning_content", 17) or key_is(k, kn, "reasoning", 9):
            if kn == 9:
                if seen_r:
                    return FALLBACK
                seen_r = True
            else:
                if seen_rc:
                    return FALLBACK
                seen_rc = True
            if s.p[0] == 34:
                if scan_string(s, &sp, &sn, &se):
                    return FALLBACK
                if sn:
                    reasoning[0] = True
            elif skip_value(s, 5):
                return FALLBACK
        elif skip_value(s, 5):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    return OK


cdef int scan_choice(Scan* s) noexcept nogil:
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    cdef int delta_state = 0  # 0 absent, 1 object, 2 other
    cdef bint seen_text = False
    cdef cptr cp = NULL
    cdef Py_ssize_t cn = 0
    cdef bint ce = False
    cdef cptr tp = NULL
    cdef Py_ssize_t tn = 0
    cdef bint te = False
    cdef bint reasoning = False
    cdef cptr fp = NULL
    cdef Py_ssize_t fn = 0
    cdef bint fe = False
    cdef bint fr_seen = False
    cdef int i
    if s.nch >= MAX_CHOICES:
        return FALLBACK
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    while more:
        if key_is(k, kn, "finish_reason", 13):
            # null, or one string without escapes; a string beside a duplicate key, or any
            # other value: orjson decides (duplicates: the last wins)
            if s.p[0] == 110:
                if skip_lit(s, "null", 4) or fp != NULL:
                    return FALLBACK
            elif s.p[0] == 34:
                if fr_seen or scan_string(s, &fp, &fn, &fe) or fe:
                    return FALLBACK
            else:
                return FALLBACK
            fr_seen = True
        elif key_is(k, kn, "delta", 5):
            if delta_state:
                return FALLBACK
            if s.p[0] == 123:
                delta_state = 1
                if scan_delta(s, &cp, &cn, &ce, &reasoning):
                    return FALLBACK
            else:
                delta_state = 2
                if skip_value(s, 4):
                    return FALLBACK
        elif key_is(k, kn, "text", 4):
            if seen_text:
                return FALLBACK
            seen_text = True
            if s.p[0] == 34:
                if scan_string(s, &tp, &tn, &te):
                    return FALLBACK
            elif skip_value(s, 4):
                return FALLBACK
        elif skip_value(s, 4):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    i = s.nch
    s.nch += 1
    s.fr_p[i] = fp
    s.fr_n[i] = fn
    if delta_state == 1:
        s.str_p[i] = cp
        s.str_n[i] = cn
        s.str_esc[i] = ce
        s.reasoning[i] = reasoning
    else:
        s.str_p[i] = tp
        s.str_n[i] = tn
        s.str_esc[i] = te
        s.reasoning[i] = False
    return OK


cdef int scan_choices(Scan* s) noexcept nogil:
    s.p += 1
    skip_ws(s)
    if s.p < s.end and s.p[0] == 93:
        s.p += 1
        return OK
    while True:
        if s.p >= s.end:
            return FALLBACK
        if s.p[0] == 123:
            if scan_choice(s):
                return FALLBACK
        elif skip_value(s, 3):  # not an object: ignored, like the pure twin
            return FALLBACK
        skip_ws(s)
        if s.p >= s.end:
            return FALLBACK
        if s.p[0] == 44:
            s.p += 1
            skip_ws(s)
            continue
        if s.p[0] == 93:
            s.p += 1
            return OK
        return FALLBACK


cdef int scan_members(Scan* s, cptr k, Py_ssize_t kn, bint more, bint seen_choices,
                      cptr* choices_at) noexcept nogil:
    """The member loop of ``scan_chunk``, from the member whose key is ``k`` (``s.p`` at its value).

    ``choices_at`` (when not NULL) is set to the start of the ``choices`` value
    when one is met: the bytes before it are a prefix whose scan leaves no state
    but ``seen_choices = False`` (``scan_chunk_after``).
    """
    cdef cptr sp
    cdef Py_ssize_t sn
    cdef bint se
    cdef bint seen_usage = False
    while more:
        if key_is(k, kn, "choices", 7):
            if seen_choices:
                return FALLBACK
            seen_choices = True
            if choices_at != NULL and not seen_usage:  # a usage before it is state: no resumable prefix
                choices_at[0] = s.p
            if s.p[0] == 91:
                if scan_choices(s):
                    return FALLBACK
            elif skip_value(s, 2):
                return FALLBACK
        elif key_is(k, kn, "usage", 5):
            # an object is kept by its bytes (orjson reads them: the same dict); a duplicate
            # key: orjson decides (the last wins)
            if seen_usage:
                return FALLBACK
            seen_usage = True
            sp = s.p
            if skip_value(s, 2):
                return FALLBACK
            if sp[0] == 123:
                s.usage_p = sp
                s.usage_n = s.p - sp
        elif key_is(k, kn, "timings", 7) or key_is(k, kn, "x_groq", 6):
            if s.p[0] == 123 or skip_value(s, 2):
                return FALLBACK
        elif key_is(k, kn, "error", 5):
            return FALLBACK
        elif key_is(k, kn, "object", 6):
            if s.p[0] == 34:
                if scan_string(s, &sp, &sn, &se) or se or (sn == 5 and memcmp(sp, "error", 5) == 0):
                    return FALLBACK
            elif skip_value(s, 2):
                return FALLBACK
        elif skip_value(s, 2):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    skip_ws(s)
    return OK if s.p == s.end else FALLBACK


cdef int scan_chunk(Scan* s, cptr* choices_at) noexcept nogil:
    """Walk one event payload; OK only if every field the pure twin reads is simple.

    ``choices_at`` is set to the start of the top-level ``choices`` value (NULL
    when there is none): see ``scan_chunk_after``.
    """
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    s.nch = 0
    s.usage_p = NULL
    choices_at[0] = NULL
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 123:
        return FALLBACK
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    return scan_members(s, k, kn, more, False, choices_at)


cdef const char* CHOICES_KEY = "choices"


cdef int scan_chunk_after(Scan* s) noexcept nogil:
    """``scan_chunk`` for a payload whose bytes up to ``s.p`` equal a prefix an earlier
    ``scan_chunk`` walked to its ``choices`` value (``choices_at``).

    Equal bytes leave the scanner in an equal state, which at that point is only
    "the next member is ``choices`` and none was seen", so the walk resumes there
    and the result is the one a full ``scan_chunk`` would give.
    """
    s.nch = 0
    s.usage_p = NULL
    return scan_members(s, <cptr>CHOICES_KEY, 7, True, False, NULL)
